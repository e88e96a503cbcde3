"""``threads demo --model``: the demo story on the real adapters, pointed at the fake providers
with ``THREADS_DEMO_BASE_URL``, with call orders the scripted demo never uses (the story must not
depend on one); and the clear exit-2 errors for a bad choice, a missing key or a missing extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from adapter_cases import CANARY_KEY

from threads.cli.main import main
from threads.demo.models import BASE_URL_ENV
from threads.demo.service import DemoService
from threads.testing.fake_providers import (
    AnthropicFake,
    FakeInThread,
    FakeProvider,
    ScriptedToolCall,
    ScriptedTurn,
)

REFUND = ScriptedToolCall("c_refund", "refund", ['{"amount_cents": 2000}'])
CHARGE = ScriptedToolCall("c_charge", "charge_card", ['{"amount_cents": ', "1500}"])
EMAIL = ScriptedToolCall("c_email", "send_email",
                         ['{"to": "alice@example.com", ', '"body": "Fixed your bill."}'])
DONE = ScriptedTurn(text_chunks=["Refunded, charged ", "and emailed."])

CASES = {
    # the email first, in parallel with the refund: the kill lands before the refund started
    "openai": ("OPENAI_API_KEY", [ScriptedTurn(tool_calls=[EMAIL, REFUND]),
                                  ScriptedTurn(tool_calls=[CHARGE]), DONE]),
    "anthropic": ("ANTHROPIC_API_KEY", [ScriptedTurn(tool_calls=[REFUND]),
                                        ScriptedTurn(tool_calls=[CHARGE, EMAIL]), DONE]),
}


def _fake_type(provider: str) -> type[FakeProvider]:
    from threads.testing.fake_providers import OpenAIFake

    return AnthropicFake if provider == "anthropic" else OpenAIFake


@pytest.mark.parametrize("provider", list(CASES))
def test_demo_runs_on_a_provider_model(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key_env, script = CASES[provider]
    with FakeInThread(_fake_type(provider)) as fake:
        fake.script(*script)
        monkeypatch.setenv(BASE_URL_ENV, fake.base_url)
        monkeypatch.setenv(key_env, CANARY_KEY)
        code = main(["demo", "--dir", str(tmp_path), "--model", f"{provider}:demo-model"])
        requests = fake.requests()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PARKED (effect_unknown)" in out
    assert "the email went out, so the operator resolves it assume_done" in out
    assert "nothing was applied twice." in out
    assert len(requests) == 3  # the model decided every step; recovery itself asked nothing
    counters = DemoService(tmp_path / "service.db").counters()
    assert (counters.refunds, counters.charges, counters.emails) == (1, 1, 1)
    assert counters.max_applications_per_key == 1
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CANARY_KEY.encode() not in path.read_bytes(), path
    assert CANARY_KEY not in out


@pytest.mark.parametrize(("choice", "said"), [
    ("gpt-4.1", "PROVIDER:MODEL"),
    ("gemini:pro", "unknown provider 'gemini'"),
    ("openai:", "PROVIDER:MODEL"),
])
def test_bad_model_choice_is_a_usage_error(
    choice: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--model", choice]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("provider", "env"), [
    ("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY"),
])
def test_missing_key_is_a_usage_error(
    provider: str, env: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(env, raising=False)
    assert main(["demo", "--model", f"{provider}:m"]) == 2
    captured = capsys.readouterr()
    assert f"error: invalid_config: no {'OpenAI' if provider == 'openai' else 'Anthropic'}" \
        in captured.err
    assert env in captured.err
    assert captured.out == ""  # no worker was started


def test_missing_extra_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.setitem(sys.modules, "openai", None)  # as if threads[openai] were not installed
    assert main(["demo", "--model", "openai:m"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'threads[openai]'" in err
    assert "Traceback" not in err
