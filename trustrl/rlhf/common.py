"""Pieces every RLHF stage shares: seeding, run folders, checks of user input."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl.records.runs import RunDir
from trustrl.util.errors import ConfigError

TASK_ID = "sort"


def seed_everything(seed: int) -> torch.Generator:
    """Seed torch / NumPy / Python and return a CPU generator for sampling (seed + 1)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    return torch.Generator().manual_seed(seed + 1)


def make_run(runs_dir: str | Path, stage: str, seed: int, cfg: Any,
             columns: list[str]) -> RunDir:
    """A core-style run folder runs/sort__<stage>__<seed>__<time>/ with config.json and the
    metric columns of this stage."""
    run = RunDir.create(runs_dir, TASK_ID, stage, seed, asdict(cfg))
    run.metric_columns = list(columns)
    return run


SORT_AGAIN = "the sort task's runs do not resume: start it again"


@contextmanager
def status_on_exit(run: RunDir, done: Callable[[], int], again: str = SORT_AGAIN
                   ) -> Iterator[None]:
    """A run that ends early says so in its status.json and to the user: "stopped" on Ctrl-C
    or SIGTERM, "failed" (with the error's first line) on an error, at `done()` iterations
    completed; the exception carries `left` (the folder, its status, `again`: how to go on),
    which `trustrl` prints as its one line."""
    try:
        yield
    except BaseException as e:
        stopped = isinstance(e, KeyboardInterrupt)
        status = "stopped" if stopped else "failed"
        if stopped:
            message = "terminated (SIGTERM)" if type(e).__name__ == "Terminated" else \
                "interrupted"
        else:
            message = ((str(e).splitlines() or [""])[0] or type(e).__name__)[:300]
        try:
            run.set_status(status, done(), message)
        except OSError:  # a full disk: the run's own error is the one to report
            pass
        try:
            e.left = (f"{run.path} is kept with status '{status}' at iteration "  # type: ignore[attr-defined]
                      f"{done()}: {again}")
        except AttributeError:
            pass
        raise


def check_positive(name: str, value: float, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value}")


def check_fraction(name: str, value: float) -> None:
    if not (0.0 <= value <= 1.0):
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


def replace_fields(cfg: Any, values: dict[str, Any]) -> Any:
    """Set dataclass fields from a dict (None = keep), refusing unknown names."""
    names = {f.name for f in fields(cfg)}
    for k, v in values.items():
        if v is None:
            continue
        if k not in names:
            raise ConfigError(f"unknown option {k!r}")
        if k == "seed" and not (isinstance(v, int) and 0 <= v <= 2**31 - 1):
            raise ConfigError(f"seed must be an integer in [0, 2^31 - 1], got {v!r}")
        if k == "runs_dir":
            from trustrl.settings.config import check_writable_dir

            check_writable_dir(v, "--runs-dir")
        setattr(cfg, k, v)
    return cfg
