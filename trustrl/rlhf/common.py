"""Pieces every RLHF stage shares: seeding, run folders, checks of user input."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl.errors import ConfigError
from trustrl.runs import RunDir

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
            from trustrl.config import check_writable_dir

            check_writable_dir(v, "--runs-dir")
        setattr(cfg, k, v)
    return cfg
