"""Per-step cost of a budgeted run and its growth with the conversation, beside the same run
under no budget; from one run.

The agent pins a priced model with ``max_tokens`` and a thread budget, and its run carries a
run budget, every limit far above what the run spends (so no check ever binds): before each
model request the guard reads what the thread and the run spent. Printed, for each side: the
step cost at conversation length N=50 and N=800 (median of the steps around each point of one
long run, as ``bench/steps.py`` measures it), in wall time and in the process's CPU time, and
the ratio N=800 / N=50; then the budgeted side's CPU over the unbudgeted side's at N=800.

Run: ``python bench/budget.py [--long N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from steps import WINDOW, Query, StepClock, at  # bench/steps.py, beside this file
from threads import Agent, Budget, Price, agent, sqlite, tool
from threads.testing.scripted import call, say, scripted_model, use

LIMIT = 2**40  # far above anything the run spends: no check binds
AGENT_BUDGET = Budget(max_model_requests=LIMIT, max_cost_nanos=LIMIT, max_input_tokens=LIMIT)
RUN_BUDGET = Budget(max_model_requests=LIMIT, max_output_tokens=LIMIT)


def budget_agent(steps: int, clock: StepClock, *, budgeted: bool) -> Agent:
    script = [use(call("lookup", q=f"q{i}")) for i in range(steps)] + [say("done")]
    model = scripted_model(script, context_window=1000, max_output_tokens=100,
                           price=Price(input=2, output=10))
    lookup_tool = tool(name="lookup", description="Look up.", input=Query,
                       execute=clock.lookup, effect="read_only")
    return agent(name="bench", model=model, tools=[lookup_tool],
                 budget=AGENT_BUDGET if budgeted else None)


async def long_run(path: Path, steps: int, *, budgeted: bool) -> StepClock:
    """One run of ``steps`` steps on a fresh thread of a warmed store, stamped."""
    store = sqlite(path)
    try:
        await budget_agent(3, StepClock(), budgeted=budgeted).run("warm up", store=store)
        clock = StepClock()
        await budget_agent(steps, clock, budgeted=budgeted).run(
            "go", store=store, budget=RUN_BUDGET if budgeted else None)
        return clock
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--long", type=int, default=825, help="steps of each long run")
    args = parser.parse_args()
    if args.long < 800 + WINDOW:  # the N=800 figure is the median of the steps around it
        parser.error(f"--long must be at least {800 + WINDOW}")
    with tempfile.TemporaryDirectory() as tmp:
        plain = await long_run(Path(tmp) / "plain", args.long, budgeted=False)
        budgeted = await long_run(Path(tmp) / "budgeted", args.long, budgeted=True)
    print("(medians; ratios are from this one run)")
    cpu_800 = {}
    for label, clock in (("no budget", plain), ("budgeted", budgeted)):
        wall_50, wall_800 = at(clock.steps_us(), 50), at(clock.steps_us(), 800)
        cpu_50, cpu_800[label] = at(clock.cpu_us(), 50), at(clock.cpu_us(), 800)
        print(f"{label + ', step at N=50':44s} {wall_50:9.1f} µs")
        print(f"{label + ', step at N=800':44s} {wall_800:9.1f} µs = "
              f"{wall_800 / wall_50:5.2f}x N=50")
        print(f"{label + ', CPU of a step at N=50':44s} {cpu_50:9.1f} µs")
        print(f"{label + ', CPU of a step at N=800':44s} {cpu_800[label]:9.1f} µs = "
              f"{cpu_800[label] / cpu_50:5.2f}x N=50")
    print(f"{'budgeted / no budget, CPU at N=800':44s} "
          f"{cpu_800['budgeted'] / cpu_800['no budget']:9.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
