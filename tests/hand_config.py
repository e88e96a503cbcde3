"""The ``thread_started`` data of a log written by hand in tests (``test_reader_rules.Log``,
``compaction_log.CompactionLog``): the scripted model, one tool, and an optional policy."""

from __future__ import annotations

from typing import Any

from threads.log.hashing import value_hash


def started_data(tool: dict[str, Any], **policy: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "adapter": {"name": "scripted", "settings": {}, "version": "1"},
        "agent_name": "demo",
        "instructions": "Be brief.",
        "model": {"name": "scripted-1", "provider": "scripted"},
        "model_params": {"max_tokens": 1024},
        "tools": [tool],
    }
    if policy:
        config["policy"] = policy
    return {**config, "config_hash": value_hash(config)}
