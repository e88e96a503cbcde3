"""A host on a Postgres schema of its own, for the several-hosts test:
``python pg_host.py URL SCHEMA PORT TOKENS`` serves ``host_agents.agents()`` with uvicorn."""

from __future__ import annotations

import sys

import uvicorn
from host_agents import agents

from threads.host import host, tokens_file
from threads.store.postgres import postgres


def main() -> None:
    url, schema, port, tokens = sys.argv[1:5]
    app = host(postgres(url, schema=schema), agents(), authenticate=tokens_file(tokens))
    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning",
                timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
