"""Cases of the shared suite that fail on this checkout, each with its root cause (issue 13).

They run as strict ``xfail``: a listed case that starts passing fails the suite until it is taken
off this list, so the list only shrinks. Issue 13 emptied it: a case that fails now is a
regression, not a known difference.
"""

from __future__ import annotations

KNOWN_FAILURES: dict[str, str] = {}
