"""The log format v1, shared with threads-ts: everything a line, a chain and a fold are.

Front door: ``Event`` (one admitted line, ``lines``), ``reduce`` (the fold of a branch's events
into its state, ``Fold``), ``verify_lines`` / ``verify_export`` (a chain and an export checked
line by line), ``render`` (Render v1, the exact bytes of the next model request) and ``replay``
(a log's requests rendered again and compared). Below them: canonical JSON (``canonical``),
hashing, line admission against the schema (``admission``, ``schema``), artifact references
(``refs``). This package imports nothing else of ``threads`` but ``errors``.
"""

from threads.log.lines import Event, Head, Header
from threads.log.reduce import Fold, reduce
from threads.log.render import Rendered, render
from threads.log.replay import Replayed, ReplayMismatch, replay
from threads.log.verify import VerifiedExport, verify_export, verify_lines

__all__ = [
    "Event",
    "Fold",
    "Head",
    "Header",
    "Rendered",
    "ReplayMismatch",
    "Replayed",
    "VerifiedExport",
    "reduce",
    "render",
    "replay",
    "verify_export",
    "verify_lines",
]
