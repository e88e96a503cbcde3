"""Models: what the run loop asks of any model, and the fence every request passes.

Front door: the ``Model`` protocol and the values it speaks (``ModelRequest`` and the
``Message`` lines it carries, ``TextDelta``, ``ModelOutput``, ``Usage``, ``Price``,
``ModelCallError``) in ``protocol``; the transport fence
(``Fence``, ``FencedTransport``, ``fenced_http_client``) in ``fence``, which awaits the run's
lease check before any byte of a request leaves; and ``normalize``, which turns a provider's
reply into what the log can hold faithfully. The provider clients are ``threads.adapters``.
"""

from threads.log.render_lines import Message
from threads.models.fence import Fence, FencedTransport, fenced_http_client
from threads.models.protocol import (
    Model,
    ModelCallError,
    ModelOutput,
    ModelRequest,
    Price,
    TextDelta,
    ToolDefinition,
    Usage,
)

__all__ = [
    "Fence",
    "FencedTransport",
    "Message",
    "Model",
    "ModelCallError",
    "ModelOutput",
    "ModelRequest",
    "Price",
    "TextDelta",
    "ToolDefinition",
    "Usage",
    "fenced_http_client",
]
