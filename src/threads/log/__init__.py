"""The log format v1, shared with threads-ts: everything a line, a chain and a fold are.

Front door: ``Event`` (one admitted line, ``lines``), ``Fold`` (a branch's events folded into
its state, the ``fold`` package), ``verify_lines`` / ``verify_export`` (a chain and an export
checked line by line), ``Rendered`` (Render v1, the exact bytes of the next model request,
``render``) and ``Replayed`` (a log's requests rendered again and compared, ``replay``). Below them:
canonical JSON (``canonical``), hashing, line admission against the schema (``admission``,
``schema``), artifact references (``refs``). This package imports nothing else of ``threads``
but ``errors``.

The functions named like their modules (``render.render``, ``replay.replay``) are not lifted
here: a package attribute can't be both the module and its function, and code imports the
modules (``from threads.log import render``).
"""

from threads.log.fold import Fold
from threads.log.lines import Event, Head, Header
from threads.log.render import Rendered
from threads.log.replay import Replayed, ReplayMismatch
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
    "verify_export",
    "verify_lines",
]
