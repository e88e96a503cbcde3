"""SHA-256 as the format uses it: lowercase hex over exact stored bytes (chain, head, artifacts)
or over canonical JSON of a value (config_hash, args_hash, tools_hash)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from threads.log.canonical import JsonValue, canonical

# What ``sha256_hex`` writes: 64 lowercase hex digits (check a digest read from elsewhere with it
# before it names a file).
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_hexes(lines: Iterable[bytes]) -> list[str]:
    """``sha256_hex`` of each line (one loop, no call of ours per line)."""
    sha256 = hashlib.sha256
    return [sha256(line).hexdigest() for line in lines]


def value_hash(value: JsonValue) -> str:
    """Hash of a value's canonical bytes (``args_hash`` of a tool input, ``config_hash``, ...)."""
    return hashlib.sha256(canonical(value)).hexdigest()
