"""The demo's worker process: runs (or re-runs) the support thread once and prints the outcome
as one JSON line. The demo kills it on purpose; a fresh worker continues from the log."""

from __future__ import annotations

import asyncio
import json
import sys

from threads import Parked, sqlite
from threads.adapters.base import SdkModel
from threads.demo.models import chosen_model
from threads.demo.service import DemoService
from threads.demo.support import REQUEST, build


async def main(store_dir: str, service_path: str, thread_id: str | None) -> None:
    store = sqlite(store_dir)
    model = chosen_model()
    try:
        bot = build(DemoService(service_path), model)
        if thread_id is None:
            result = await bot.run(REQUEST, store=store)
        else:
            result = await bot.run(None, thread=thread_id, store=store)
        out: dict[str, object] = {"status": result.status, "thread": result.thread.id}
        if isinstance(result, Parked):
            out["reason"] = result.reason
            out["pending"] = [[p.kind, p.id] for p in result.pending]
        elif hasattr(result, "output"):
            out["output"] = result.output
        elif hasattr(result, "error"):
            out["error"] = result.error.code
        print(json.dumps(out), flush=True)
    finally:
        await store.close()
        if isinstance(model, SdkModel):
            await model.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
