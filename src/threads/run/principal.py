"""Kept so ``from threads.principal import Principal`` still works: ``Principal`` lives in
``threads.principal``, below every layer that records who acted (tools, runs, the CLI)."""

from threads.principal import LOCAL_OPERATOR, Principal

__all__ = ["LOCAL_OPERATOR", "Principal"]
