"""Names a provider minted itself: the only refs it turns into a path or an engine URL.

A ref reaches a provider from stored bytes: a ledger row, a ``snapshot`` event of a log that may
have been imported from elsewhere. Each provider mints its ids from a hash of the operation key
(``lsb-<32 hex>``, ``lss-<32 hex>``, ``threads-<32 hex>``), so a ref of any other shape is not one
of its own (``../`` and all), and it refuses it as unknown before building anything from it.
"""

from __future__ import annotations

import re

from threads.sandbox.protocol import SandboxError, SandboxErrorCode


def minted_pattern(prefix: str) -> re.Pattern[str]:
    """The ids ``<prefix><32 lowercase hex>``: a provider's own sandbox or snapshot ids."""
    return re.compile(rf"^{re.escape(prefix)}[0-9a-f]{{32}}$")


def require_minted(
    ref: str, pattern: re.Pattern[str], what: str, code: SandboxErrorCode = "not_found"
) -> str:
    """``ref`` when ``pattern`` matches all of it, else ``code`` naming ``what`` it is not."""
    if not isinstance(ref, str) or pattern.fullmatch(ref) is None:
        raise SandboxError(code, f"{ref!r} is not {what}")
    return ref
