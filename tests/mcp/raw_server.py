"""A deliberately broken MCP server over stdio, written by hand (no SDK), for what the SDK's
server can't be made to send: it handshakes and lists properly, then breaks the protocol in
the way its first argument names.

- ``bad_schema``: lists a tool whose input schema is not valid JSON Schema;
- ``not_json``: answers ``tools/call`` with a line that is not JSON;
- ``bad_result``: answers ``tools/call`` with a result of the wrong shape (content not a list);
- ``wrong_id``: answers ``tools/call`` under another request id (so never, for the client);
- ``banner``: prints a line that is not JSON-RPC before anything else;
- ``remote_ref``: its tool's schema points (``$ref``) at a URL;
- ``many_tools``: lists more tool text than a thread can pin.
"""

from __future__ import annotations

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "not_json"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}
REMOTE_REF = {"type": "object", "properties": {"n": {"$ref": "http://127.0.0.1:9/n.json"}}}
BAD_SCHEMA = {"type": "object", "properties": {"n": {"type": "no-such-type"}}}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, object]) -> None:
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "0"}}})
    elif method == "tools/list":
        tools = [{"name": "poke", "description": "Poke.", "inputSchema": SCHEMA}]
        if MODE == "bad_schema":
            tools.append({"name": "broken", "description": "B.", "inputSchema": BAD_SCHEMA})
        if MODE == "remote_ref":
            tools[0]["inputSchema"] = REMOTE_REF
        if MODE == "many_tools":
            tools += [{"name": f"tool_{i}", "description": "d" * 2000, "inputSchema": SCHEMA}
                      for i in range(400)]
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
    elif method == "tools/call":
        if MODE == "not_json":
            sys.stdout.write("this is not json {\n")
            sys.stdout.flush()
        elif MODE == "bad_result":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
        elif MODE == "wrong_id":
            send({"jsonrpc": "2.0", "id": 987654, "result": {"content": []}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
                {"type": "text", "text": "poked"}]}})
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})


def main() -> None:
    if MODE == "banner":
        print("Welcome to the raw server!", flush=True)
    for line in sys.stdin:
        if line.strip():
            answer(json.loads(line))


if __name__ == "__main__":
    main()
