"""The reference pages can't fall behind the code: the CLI page is generated from the parser
and names every subcommand, the HTTP page is generated from the host's OpenAPI document and
names every route and body, and the errors page has a row, with what to do, for every error
code the code can raise (the wire list, the API list, the sandbox and host codes, and every
code literal passed to an error or a failure in ``src/threads``)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import typing
from types import ModuleType

from doc_blocks import DOCS, ROOT

SRC = ROOT / "src" / "threads"
ERRORS_PAGE = DOCS / "reference" / "errors.md"
ROW = re.compile(r"^\|\s*`(?P<code>[a-z][a-z0-9_]*)`\s*\|(?P<rest>.*)\|\s*$")


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools/mkdocs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_page_is_generated_from_the_parser_with_every_command() -> None:
    from threads.cli.main import build_parser

    hooks = _hooks()
    page = (DOCS / "reference" / "cli.md").read_text()
    assert hooks.CLI_MARKER in page
    generated = hooks.on_page_markdown(page)
    names = hooks.subcommands(build_parser())
    assert len(names) >= 15
    for name, parser in names.items():
        assert f"\n## threads {name}\n" in generated, name
        for action in parser._actions:
            for option in action.option_strings:
                assert option in generated, f"threads {name} {option}"


def test_the_http_page_is_generated_from_the_openapi_document() -> None:
    from threads.host.openapi import document

    hooks = _hooks()
    page = (DOCS / "reference" / "http-api.md").read_text()
    assert hooks.HTTP_MARKER in page
    generated = hooks.on_page_markdown(page)
    doc = document()
    for path, methods in doc["paths"].items():
        for method in methods:
            assert f"\n## {method.upper()} {path}\n" in generated
    for name in doc["components"]["schemas"]:
        assert f"\n### {name}\n" in generated


def codes_in_the_code() -> dict[str, str]:
    """Every error code the package can raise or answer with, and where it was found."""
    from threads.errors import API_CODES, WIRE_CODES
    from threads.sandbox.protocol import SandboxErrorCode

    found = dict.fromkeys(WIRE_CODES, "threads.errors.WIRE_CODES")
    found |= dict.fromkeys(API_CODES, "threads.errors.API_CODES")
    found |= dict.fromkeys(typing.get_args(SandboxErrorCode), "SandboxErrorCode")
    schema = json.loads((SRC / "log" / "events.v1.schema.json").read_text())
    found |= dict.fromkeys(schema["$defs"]["ErrorCode"]["enum"], "the schema's ErrorCode")
    from threads.host.failure import RENAMED, STATUS

    for code in (*STATUS, *RENAMED.values()):
        found.setdefault(code, "threads.host.failure")
    for path in SRC.rglob("*.py"):
        for code in _code_literals(ast.parse(path.read_text())):
            found.setdefault(code, str(path.relative_to(ROOT)))
    return found


def _code_literals(tree: ast.AST) -> set[str]:
    """String literals given as the code of an error or a failure: the first argument (or
    ``code=``) of a call to a name ending in ``Error`` or to ``ErrorInfo``/``failure``."""
    codes: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if not (name.endswith("Error") or name in {"ErrorInfo", "failure"}):
            continue
        args = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "code")]
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and re.fullmatch(
                r"[a-z][a-z0-9]*(_[a-z0-9]+)+|[a-z]{4,}", arg.value
            ):
                codes.add(arg.value)
    return codes


def documented_codes() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in ERRORS_PAGE.read_text().splitlines():
        row = ROW.match(line)
        if row:
            rows[row.group("code")] = row.group("rest")
    return rows


def test_every_error_code_in_the_code_has_a_row_on_the_errors_page() -> None:
    documented = documented_codes()
    missing = {c: where for c, where in codes_in_the_code().items() if c not in documented}
    assert not missing, (
        f"add these codes to {ERRORS_PAGE.relative_to(ROOT)} (what it means, what to do): "
        f"{missing}"
    )


def test_every_row_of_the_errors_page_says_what_to_do_and_names_a_real_code() -> None:
    real = codes_in_the_code()
    for code, rest in documented_codes().items():
        cells = [c.strip() for c in rest.split("|")]
        assert len(cells) >= 2, f"{code}: each row says when, and what to do"
        assert all(cells), f"{code}: each row says when, and what to do"
        assert code in real, f"{code} is on the errors page but nowhere in the code"


def test_the_code_scan_finds_codes_passed_in_every_way() -> None:
    tree = ast.parse(
        "raise StoreError('store_busy', 'x')\n"
        "raise HostError(code='payload_too_large', message='x')\n"
        "Failed(thread, ErrorInfo('model_error', 'x'))\n"
        "raise ValueError('not a code: has spaces')\n"
        "log.info('not_an_error_call')\n"
    )
    assert _code_literals(tree) == {"store_busy", "payload_too_large", "model_error"}
