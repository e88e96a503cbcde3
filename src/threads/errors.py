"""Errors threads raises, each carrying a stable string ``code``.

Wire codes (``WIRE_CODES``) are the closed list shared with the TypeScript implementation and
appear in logs, exports and HTTP bodies; API codes are for calls that never reach the log. Every
message says what to do next. Expected run outcomes are values (see ``threads.run.results``),
never exceptions.

Every error threads raises on purpose is one tree, so ``except ThreadsError`` catches them all::

    ThreadsError                  code, message, seq
    ├── LogError                  a line, chain or head broke the wire format (wire codes)
    ├── StoreError                the store refused (branch_busy, stale_epoch, store_full, ...)
    ├── ConfigError               set up wrongly; raised at setup, never mid-run
    ├── NotFoundError             no such thread, branch, challenge or artifact (not_found)
    ├── ControlError              a cancel, approval or answer refused (threads.run.thread)
    ├── SandboxError              a sandbox provider's refusal (threads.sandbox.protocol)
    └── ModelCallError            a model call without a reply (threads.models.protocol)

A run never raises these for bad provider, tool or server data: those become recorded outcomes.
``EffectUnknown`` is not in the tree: a tool raises it to tell threads that a call may or may not
have taken effect, and threads never raises it.
"""

from __future__ import annotations

WIRE_CODES: frozenset[str] = frozenset(
    {
        "invalid_line",
        "unsupported_format",
        "unsupported_critical_event",
        "seq_mismatch",
        "prev_hash_mismatch",
        "head_mismatch",
        "invalid_transition",
        "log_corrupt",
        "branch_busy",
        "seq_conflict",
        "stale_epoch",
        "writer_poisoned",
        "branch_has_children",
        "no_snapshot_boundary",
        "snapshot_expired",
        "snapshot_missing",
        "snapshot_restore_failed",
        "snapshot_manifest_mismatch",
        "artifact_missing",
        "artifact_corrupt",
        "request_hash_mismatch",
        "prefix_changed",
        "approval_mismatch",
        "approval_expired",
        "approval_duplicate",
        "unmatched_external_op",
        "egress_policy_unsupported",
        "case_missing_dependency",
        "budget_unenforceable",
        "content_unsupported",
        "continuation_unsupported",
        "hosted_tool_unsupported",
        "context_edit_unreported",
        "context_exhausted",
        "model_unavailable",
        "output_invalid",
        "tool_not_loaded",
        "permission_rule_invalid",
        "branch_not_runnable",
        "resource_unknown",
        "writer_mismatch",
        "secret_in_provider_output",
        "secret_in_stored_bytes",
    }
)

API_CODES: frozenset[str] = frozenset(
    {
        "not_found",
        "forbidden",
        "not_parked",
        "holder_may_be_running",
        "invalid_config",
        "duplicate_name",
        "capability_missing",
        "transport_fence_unsupported",
        "mcp_unreachable",
        "model_error",
        "tool_error",
        "invalid_argument",
        "not_pending",
        "interrupted",
        "control_consumed",
        "budget_exhausted",
        "cost_overflow",
        # faults of the store's environment (never log_corrupt: the log itself may be healthy)
        "store_busy",
        "store_read_only",
        "store_full",
        "store_unavailable",
        "store_corrupt",
        "import_too_large",
        # a verify finding: a permission decision looser than the thread's pinned policy
        "decision_contradicts_policy",
    }
)


class ThreadsError(Exception):
    """Base of every error threads raises on purpose. ``code`` is stable; ``seq`` is where in a
    log the problem sits, when it sits in one."""

    code: str
    message: str
    seq: int | None

    def __init__(self, code: str, message: str, *, seq: int | None = None) -> None:
        self.code = code
        self.message = message
        self.seq = seq
        where = f" (seq {seq})" if seq is not None else ""
        super().__init__(f"{code}{where}: {message}")


class LogError(ThreadsError):
    """A log line, chain or head broke a rule of the wire format. ``code`` is a wire code, or
    ``decision_contradicts_policy`` (the decision audit ``threads verify`` adds)."""


class StoreError(ThreadsError):
    """The store refused an operation (``branch_busy``, ``stale_epoch``, ``seq_conflict``,
    ``log_corrupt``, ``not_found``, ...)."""


class ConfigError(ThreadsError):
    """An agent, tool, model or store was set up wrongly; raised at setup, never mid-run."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)


class NotFoundError(ThreadsError):
    """No such thread, branch, challenge or artifact (for this tenant); code ``not_found``.

    Not ``NotFound``: that name is the reconcile lookup's outcome (``threads.NotFound()``, as in
    the reference's ``Found | NotFound | LookupUnknown``), a value a lookup returns, never an
    exception. ``except NotFoundError`` catches this; ``except ThreadsError`` with
    ``error.code == "not_found"`` too."""

    def __init__(self, message: str) -> None:
        super().__init__("not_found", message)
