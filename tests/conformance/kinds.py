"""Registers every kind's runner in ``runner.KIND_RUNNERS`` (importing it is enough): the
runners import ``runner``, so ``runner`` can't import them."""

from __future__ import annotations

from fork import run_fork
from recover import run_recover
from render import run_render
from runner import KIND_RUNNERS

KIND_RUNNERS.update(recover=run_recover, fork=run_fork, render=run_render)
