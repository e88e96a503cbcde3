"""The ``recover`` kind: import a log, check it as a reader, then let a run recover it.

Per case: a fresh SQLite store (``FakeClock(clock.now)``), ``import_log`` of the case's log
(threads-py variant when present), tenant and principal from the log's first ``user_input``.
The expected ``state`` is compared with the fold of the imported chain (the state as a reader,
before recovery), ``committed_bytes`` / ``head_verified`` with the import. Then an agent pinned
to the thread's config exactly runs ``agent.run(None, thread=...)`` against fakes driven by the
case's ``model.json`` / ``sandbox.json``; its outcome, the appended events (exact count and
order, ``data`` deep-subset), the sandbox counters and the leftover model script are compared,
and the new export must re-import cleanly into another fresh store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from runner import Case, CaseSkipped, Expected, _compare_state, load_expected, load_script

from threads.clock import FakeClock
from threads.log.verify import verify_export
from threads.models.protocol import (
    LookupResult,
    ModelCallError,
    ModelOutput,
    ModelRequest,
    TextDelta,
    Usage,
)
from threads.principal import LOCAL_OPERATOR, Principal
from threads.run.agent import Agent
from threads.run.permissions import Decision, Permissions
from threads.run.results import Failed, RunResult
from threads.run.thread import Thread
from threads.run.turn_open import refusal
from threads.store.sqlite import sqlite
from threads.store.transfer import export_branch, import_log
from threads.tools.tool import Found, LookupUnknown, NotFound, Reconcile, RunContext, Tool

# Cases whose files disagree with each other (NOTICE.md: report and skip, never bend the
# implementation). The rest of the case still runs; the skip is raised only if all else matched.
DATA_MISMATCHES: dict[str, tuple[str, str]] = {
    "tools-changed-after-call-keeps-call-spec": (
        "state",
        "data mismatch: expected.threads-py.json pins state.usage.input_tokens 90, but the log"
        " (whose head hash the same file pins) holds one model_response with input_tokens 80",
    ),
}


def run_recover(case: Case) -> Expected:
    expected = load_expected(case)
    model_script = load_script(case, "model_script", "model.json")
    sandbox_script = load_script(case, "sandbox_script", "sandbox.json")
    if sandbox_script is None and case.spec.get("sandbox_script"):
        wanted = expected.doc.get("sandbox", {}).get("dispatches", {})
        if any(wanted.values()):
            raise CaseSkipped(
                f"data missing: case.json names {case.spec['sandbox_script']}, which is not in"
                " the vendored case, and the expected file counts dispatches only that script"
                " can answer (provider dedup output)"
            )
    with tempfile.TemporaryDirectory(prefix="threads-recover-") as tmp:
        asyncio.run(_run(case, expected, model_script, sandbox_script or {}, Path(tmp)))
    return expected


async def _run(
    case: Case,
    expected: Expected,
    model_script: dict[str, Any] | None,
    sandbox_script: dict[str, Any],
    tmp: Path,
) -> None:
    now = case.spec["clock"]["now"]
    data = case.log_path().read_bytes()
    events = _lines(data)
    principal = _principal(events)
    store = sqlite(tmp / "store", clock=FakeClock(now))
    try:
        imported = await import_log(store, data, tenant_id=principal.tenant)
        chain = await store.read_chain(imported.branch_id)
        await _put_case_artifacts(store, case, events)
        mismatch = DATA_MISMATCHES.get(case.name)
        if "state" in expected.doc and (mismatch is None or mismatch[0] != "state"):
            _compare_state(expected, chain.fold(now).state())
        if "committed_bytes" in expected.doc:
            committed = verify_export(data).committed_bytes
            assert committed == expected.doc["committed_bytes"], (
                f"committed_bytes {committed}, expected {expected.doc['committed_bytes']}"
            )
        assert imported.head_verified == expected.doc.get("head_verified", True), (
            f"head_verified {imported.head_verified}"
        )

        started = next((e["data"] for e in events if e.get("type") == "thread_started"), None)
        sandbox = FakeSandbox(sandbox_script)
        model = FakeModel(started or {}, model_script)
        agent = _agent(started or {}, events, model, sandbox)
        result = await _recover(agent, store, imported.thread_id, imported.branch_id, principal)
        if isinstance(result, Failed) and result.error.code == "artifact_missing":
            raise CaseSkipped(_missing_artifact_reason(result.error.message, expected))

        if expected.doc["outcome"] == "error":
            want_error = expected.doc["error"]
            assert isinstance(result, Failed), f"expected error {want_error}, got {result}"
            got = {"code": result.error.code, "seq": result.error.seq}
            want = expected.doc["error"]
            if "seq" not in want:
                got.pop("seq")
            assert got == want, f"error {got} ({result.error.message}), expected {want}"

        after = await store.read_chain(imported.branch_id)
        appended = [e for e in after.segments[-1].events if e.seq > imported.head_seq]
        if expected.doc["outcome"] == "ok":
            _check_ok(result, appended)
        _compare_appended(expected.doc.get("appended", []), appended)

        export = await export_branch(store, imported.branch_id)
        fresh = sqlite(tmp / "reimport", clock=FakeClock(now))
        try:
            await import_log(fresh, export, tenant_id=principal.tenant)
        finally:
            await fresh.close()

        for counter, want in expected.doc.get("sandbox", {}).items():
            got_counts = getattr(sandbox, counter)
            got = {name: got_counts.get(name, 0) for name in want}
            assert got == want, f"sandbox {counter} {got}, expected {want}"
            unlisted = {n: c for n, c in got_counts.items() if n not in want and c}
            assert not unlisted, f"sandbox {counter} for tools the case does not list: {unlisted}"
        assert not model.responses, f"{len(model.responses)} scripted model response(s) left over"
        if mismatch is not None:
            raise CaseSkipped(mismatch[1] + " (everything else in the case matched)")
    finally:
        await store.close()


def _check_ok(result: RunResult, appended: list[Any]) -> None:
    """Outcome ``ok``: the run was not refused. A run whose turn the loop ended with an error
    (``turn_completed{error|context_exhausted|...}``, recorded) returns ``Failed`` with that
    reason's code, and that is ok too; any other ``Failed`` is a refusal the case did not expect."""
    if not isinstance(result, Failed):
        return
    ended = appended[-1] if appended and appended[-1].type == "turn_completed" else None
    assert ended is not None, f"expected ok, got {result} without a recorded turn ending"
    recorded = ended.data.get("code") or ended.data["reason"]
    assert result.error.code == recorded, (
        f"the run failed {result.error.code}, but its recorded turn ending says {recorded}"
    )


async def _recover(
    agent: Agent, store: Any, thread_id: str, branch_id: str, principal: Principal
) -> RunResult:
    """``agent.run(None, thread=...)`` on the imported branch. The public API runs a thread's
    root branch only, so for an imported child branch we take the same first steps
    ``start_run`` takes (lease, read, fold, refusal check) on that branch; a child that passes
    them cannot be run through the API, and the case is skipped."""
    root = await store.root_branch(thread_id)
    if root.branch_id == branch_id:
        return await agent.run(None, thread=thread_id, store=store, principal=principal)
    lease = await store.acquire_lease(branch_id, "conformance", 60_000)
    try:
        chain = await store.read_chain(branch_id)
        refused = refusal(chain.branch.state, chain.fold(store.clock.now_ms()))
    finally:
        await store.release_lease(lease)
    if refused is None:
        raise CaseSkipped("the log's branch is a child branch; Agent.run runs a thread's root only")
    return Failed(Thread(store, thread_id, principal=principal), refused)


async def _put_case_artifacts(store: Any, case: Case, events: list[dict[str, Any]]) -> None:
    """The case's ``artifacts/<sha256>`` files, stored under the media type the log names."""
    folder = case.path / "artifacts"
    if not folder.is_dir():
        return
    media = {}
    for ref in _refs(events):
        media[ref["sha256"]] = ref.get("media_type", "application/octet-stream")
    for path in sorted(folder.iterdir()):
        ref = await store.put_artifact(path.read_bytes(), media.get(path.name, "text/plain"))
        assert ref["sha256"] == path.name, f"artifact {path.name} does not hash to its name"


def _refs(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        own = [value] if isinstance(value.get("sha256"), str) and "bytes" in value else []
        return own + [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _missing_artifact_reason(message: str, expected: Expected) -> str:
    digest = message.split()[1] if len(message.split()) > 1 else "?"
    previews = [
        m["data"]["preview"] for m in expected.doc.get("appended", [])
        if isinstance(m.get("data", {}).get("preview"), str)
    ]
    same = [p for p in previews if hashlib.sha256(p.encode("utf-8")).hexdigest() == digest]
    note = (
        f"; its digest equals sha256 of the expected preview {same[0]!r}, so the files agree"
        if same else ""
    )
    return (
        f"data missing: the log's result_ref {digest} names an artifact the case does not ship"
        f" (no artifacts/{digest}){note}"
    )


def _lines(data: bytes) -> list[dict[str, Any]]:
    """The complete, parseable event lines (a torn tail's last chunk is ignored)."""
    out = []
    for raw in data.split(b"\n"):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and "type" in line and "seq" in line:
            out.append(line)
    return out


def _principal(events: list[dict[str, Any]]) -> Principal:
    for event in events:
        if event["type"] == "user_input":
            wire = event.get("actor", {}).get("principal")
            if wire:
                return Principal.from_wire(wire)
    return LOCAL_OPERATOR


# ---- the agent --------------------------------------------------------------------------------


class _PinnedAgent(Agent):
    """An agent whose config is exactly the thread's pinned ``thread_started`` data."""

    def config(self) -> dict[str, Any]:
        return dict(self.__dict__["pinned"])


class _ScriptedPermissions(Permissions):
    """The suite's policy (LOG-FORMAT §5): every call is decided by the ``policy`` rule
    ``conformance_<decision>`` in mode ``default``, where the decision is the tool's
    ``decision`` in ``sandbox.json`` and ``allow`` for a tool the script does not decide.
    The signature is ``Permissions.decide``'s own, so the loop calls it like the real one."""

    def __init__(self, decisions: dict[str, str]) -> None:
        super().__init__()
        object.__setattr__(self, "decisions", decisions)

    def decide(
        self,
        tool_name: str,
        args: dict[str, Any],
        effect_class: str,
        thread_rules: Sequence[tuple[str, str]] = (),
    ) -> Decision:
        scripted = self.decisions.get(tool_name, "allow")
        return Decision(scripted, "policy", f"conformance_{scripted}", "default")


def _permissions(sandbox: FakeSandbox) -> Permissions:
    decisions = {
        name: script["decision"] for name, script in sandbox.scripts.items() if "decision" in script
    }
    unknown = set(decisions.values()) - {"allow", "ask", "deny"}
    assert not unknown, f"sandbox.json names decisions this runner does not know: {unknown}"
    return _ScriptedPermissions(decisions=decisions)


class _AnyInput(BaseModel):
    model_config = ConfigDict(extra="allow")


def _agent(
    started: dict[str, Any], events: list[dict[str, Any]], model: FakeModel, sandbox: FakeSandbox
) -> Agent:
    specs: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "thread_started":
            specs.update({s["name"]: s for s in event["data"].get("tools", [])})
        elif event["type"] == "tools_changed":
            specs.update({s["name"]: s for s in event["data"].get("added", [])})
            specs.update({s["name"]: s for s in event["data"].get("tools", [])})
        elif event["type"] == "tool_call":
            specs.setdefault(event["data"]["name"], {"name": event["data"]["name"]})
    for name in sandbox.scripts:
        specs.setdefault(name, {"name": name})
    for event in events:
        if event["type"] == "tool_call":
            key = f"{event['branch_id']}:{event['data']['call_id']}"
            sandbox.call_tools[key] = event["data"]["name"]
    tools = tuple(_tool(spec, sandbox) for spec in specs.values())
    fallback = []
    for settings in (started.get("policy") or {}).get("fallback", []):
        other = FakeModel(started, None, settings)
        other.scripted, other.responses, other._lookup = (
            model.scripted, model.responses, model._lookup
        )
        fallback.append(other)
    agent = _PinnedAgent(
        name=started.get("agent_name", "conformance"),
        model=model,
        instructions=started.get("instructions", ""),
        tools=tools,
        budget=None,
        permissions=_permissions(sandbox),
        approvers=None,
        sandbox=sandbox,
        memory=None,
        fallback=tuple(fallback),
    )
    agent.__dict__["pinned"] = started
    return agent


def _tool(spec: dict[str, Any], sandbox: FakeSandbox) -> Tool:
    name = spec["name"]
    effect = spec.get("effect_class", "unguarded")

    async def execute(args: Any, ctx: RunContext) -> str:
        return sandbox.dispatch(name, ctx.effect_key)

    return Tool(
        name=name,
        description=spec.get("description", ""),
        input=_AnyInput,
        execute=execute,
        runs="sandbox" if effect == "sandbox_local" else "host",
        effect=effect,
        dedup_window_ms=spec.get("dedup_window_ms"),
        reconcile=sandbox.reconcile(name),
    )


# ---- fakes ------------------------------------------------------------------------------------


class SandboxToolError(Exception):
    """A scripted ``is_error`` output."""


class FakeSandbox:
    """``sandbox.json``: dedup by ``executed_keys``, ``lookup`` answers, ``process`` states."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.scripts: dict[str, dict[str, Any]] = dict(script.get("tools", {}))
        self.dispatches: Counter[str] = Counter()
        self.new_executions: Counter[str] = Counter()
        self.lookups: Counter[str] = Counter()
        self.call_tools: dict[str, str] = {}  # effect key -> tool name

    def dispatch(self, name: str, effect_key: str) -> str:
        self.dispatches[name] += 1
        script = self.scripts.get(name, {})
        executed = script.get("executed_keys", {})
        if effect_key in executed:
            return str(executed[effect_key])
        self.new_executions[name] += 1
        output = str(script.get("output", ""))
        if script.get("is_error"):
            raise SandboxToolError(output)
        return output

    def reconcile(self, name: str) -> Reconcile:
        answers = self.scripts.get(name, {}).get("lookup", {})
        final = bool(answers) and all(a.get("final") for a in answers.values())

        async def lookup(effect_key: str, ctx: RunContext) -> Found[str] | NotFound | LookupUnknown:
            self.lookups[name] += 1
            answer = answers.get(effect_key)
            if answer is None:
                return LookupUnknown("no scripted lookup answer")
            if answer["result"] == "found":
                return Found(answer.get("output") or "")
            if answer.get("final") != final:
                return LookupUnknown("scripted finality differs from the tool's")
            return NotFound()

        return Reconcile(lookup, "final" if final else "nonfinal")

    async def process_state(self, effect_key: str) -> str:
        script = self.scripts.get(self.call_tools.get(effect_key, ""), {})
        return str(script.get("process", "unknown"))


class FakeModel:
    """``model.json`` responses consumed in order (errors raised as ``ModelCallError``) and
    lookup answers by model_request event_id; without a script, every request gets "Done.".
    ``settings`` (a ``policy.fallback`` entry) makes the fallback model of the same script: it
    answers from the same list, so the script is consumed in order whichever model is asked."""

    def __init__(
        self,
        started: dict[str, Any],
        script: dict[str, Any] | None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        source = settings or started
        pinned_model = source.get("model", {})
        self.name = pinned_model.get("name", "scripted-1")
        self.provider = pinned_model.get("provider", "scripted")
        self._adapter = source.get("adapter", {"name": "scripted", "settings": {}, "version": "1"})
        self._params = source.get("model_params", {})
        entry = next(
            (m for m in started.get("policy", {}).get("models", []) if m.get("name") == self.name),
            {},
        )
        self.context_window = entry.get("context_window", 200_000)
        self.max_output_tokens = entry.get(
            "max_output_tokens", self._params.get("max_tokens", 1024)
        )
        self.price = None
        self.scripted = script is not None
        self.responses: list[dict[str, Any]] = list((script or {}).get("responses", []))
        self._lookup: dict[str, dict[str, Any]] = dict((script or {}).get("lookup", {}))

    async def aclose(self) -> None:
        """Nothing to release."""

    def adapter_ref(self) -> dict[str, Any]:
        return self._adapter

    def params(self) -> dict[str, Any]:
        return self._params

    async def stream(
        self, request: ModelRequest, fence: Any
    ) -> AsyncIterator[TextDelta | ModelOutput]:
        await fence.check()
        if not self.scripted:
            yield ModelOutput([{"type": "text", "text": "Done."}], "end_turn", Usage(10, 5))
            return
        assert self.responses, "the run made a model call the script has no response for"
        item = self.responses.pop(0)
        if "error" in item:
            raise _model_error(item["error"])
        yield _output(item)

    async def lookup(self, request: ModelRequest, fence: Any) -> LookupResult:
        await fence.check()
        answer = self._lookup.get(request.request_key.rsplit(":", 1)[-1])
        if answer is None:
            return LookupResult(status="unknown")
        output = _output(answer["response"]) if "response" in answer else None
        return LookupResult(
            status=answer["result"], final=answer["final"], output=output,
            provider_request_id=answer.get("provider_request_id"),
        )


def _output(response: dict[str, Any]) -> ModelOutput:
    usage = response["usage"]
    return ModelOutput(
        content=response["content"],
        stop_reason=response["stop_reason"],
        usage=Usage(
            usage.get("input_tokens"), usage.get("output_tokens"),
            usage.get("cache_read_tokens"), usage.get("cache_write_tokens"),
            usage.get("reasoning_tokens"),
        ),
    )


def _model_error(error: dict[str, Any]) -> ModelCallError:
    reason = error["reason"]
    retryable = reason in ("rate_limited", "overloaded")
    outcome = "unknown" if reason == "server_error" else "failed"
    return ModelCallError(
        f"scripted {error['http_status']} {reason}", reason=reason, provider_outcome=outcome,
        retryable=retryable, retry_after_ms=error.get("retry_after_ms"),
        http_status=error["http_status"],
        code="context_exhausted" if reason == "prompt_too_long" else None,
    )


# ---- matching ---------------------------------------------------------------------------------


def _compare_appended(want: list[dict[str, Any]], got: list[Any]) -> None:
    summary = [e.type for e in got]
    assert len(got) == len(want), (
        f"appended {len(got)} events {summary}, expected {len(want)} {[w['type'] for w in want]}"
    )
    for i, (matcher, event) in enumerate(zip(want, got, strict=True)):
        actual = {
            "type": event.type, "seq": event.seq, "actor_kind": event.actor_kind,
            "epoch": event.epoch, "branch_id": event.branch_id, "critical": event.critical,
        }
        for key, value in matcher.items():
            if key == "data":
                problem = _subset(value, event.data, "data")
                assert problem is None, f"appended[{i}] {event.type}: {problem}"
            else:
                assert actual[key] == value, (
                    f"appended[{i}] {event.type}: {key} {actual[key]!r}, expected {value!r}"
                )


def _subset(want: Any, got: Any, path: str) -> str | None:
    """Objects match by the keys ``want`` lists; arrays and scalars match exactly."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path} is {got!r}, expected an object"
        for key, value in want.items():
            if key not in got:
                return f"{path}.{key} missing (expected {value!r})"
            problem = _subset(value, got[key], f"{path}.{key}")
            if problem is not None:
                return problem
        return None
    if want != got or type(want) is not type(got):
        return f"{path} is {got!r}, expected {want!r}"
    return None
