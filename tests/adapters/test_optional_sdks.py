"""``import threads`` and the model modules work without the SDK extras; building a model
without its SDK fails with an ImportError naming the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from threads.errors import ConfigError
from threads.openai import openai


def test_imports_and_errors_without_sdks() -> None:
    script = textwrap.dedent("""
        import sys
        sys.modules["openai"] = None      # as if the extras were not installed
        sys.modules["anthropic"] = None
        import threads, threads.openai, threads.anthropic, threads.litellm
        for build, extra in (
            (lambda: threads.openai.openai("m", api_key="k", context_window=9,
                                           max_output_tokens=1), "openai"),
            (lambda: threads.anthropic.anthropic("m", api_key="k", max_output_tokens=1),
             "anthropic"),
        ):
            try:
                build()
            except ImportError as exc:
                assert f"threads[{extra}]" in str(exc), exc
            else:
                raise AssertionError("built a model without its SDK")
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, env={"PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("kwargs", [
    {"model": ""},
    {"model": "m", "context_window": 0},
    {"model": "m", "max_output_tokens": 2000},
    {"model": "m", "params": {"stream": False}},
    {"model": "m", "api": "completions"},
    {"model": "m", "base_url": "not a url"},
])
def test_invalid_settings_are_config_errors(kwargs: dict[str, object]) -> None:
    settings: dict[str, object] = {
        "api_key": "k", "context_window": 1000, "max_output_tokens": 10, **kwargs,
    }
    with pytest.raises(ConfigError) as caught:
        openai(**settings)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_config"
