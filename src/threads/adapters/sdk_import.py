"""Lazy import of a provider SDK, so ``import threads`` works with every extra missing.

Invariant: a missing SDK surfaces as an ``ImportError`` naming the extra that installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def import_sdk(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"the {module!r} package is not installed; install it with "
            f"pip install 'threads[{extra}]'"
        ) from exc
