"""Tools: what a model may call, with the effect class that says how a crash is settled.

Front door: ``Tool`` (made by ``threads.tool``, a decorator or a call, defined in ``tool``: not
lifted here, as the package attribute ``tool`` stays the module), the lookup a reconcilable tool
declares (``Reconcile`` with its outcomes ``Found``, ``NotFound``, ``LookupUnknown``),
``EffectUnknown`` (a tool raises it when a call may or may not have happened) and
``RunContext`` (what ``execute`` is handed). Reading a function's signature into an input model
is ``signature``; encoding a result for the log, ``encode``; a tool's HTTP client, ``http``.
"""

from threads.tools.context import RunContext
from threads.tools.tool import (
    EffectClass,
    EffectUnknown,
    Found,
    LookupOutcome,
    LookupUnknown,
    NotFound,
    Reconcile,
    Tool,
)

__all__ = [
    "EffectClass",
    "EffectUnknown",
    "Found",
    "LookupOutcome",
    "LookupUnknown",
    "NotFound",
    "Reconcile",
    "RunContext",
    "Tool",
]
