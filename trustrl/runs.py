"""The run folder: resolved config, metrics.csv, episodes.csv, atomic checkpoints, status.

    runs/<env>__<algo>__<seed>__<time>/
        config.json          the resolved config (what `--resume` reads back)
        metrics.csv          one row per iteration
        episodes.csv         one row per finished training episode
        checkpoints/latest.pt  written atomically (temp file + rename)
        agent.pt             the final agent (Agent.load)
        eval.json            the final greedy evaluation
        learning_curve.png   raw return, 5-iteration moving average, greedy evaluations
        status.json          running / finished / failed, with the last iteration
        tb/                  TensorBoard events, when tensorboard is installed
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from trustrl.errors import RunError

# Columns every algorithm writes; each algorithm appends its own (Algorithm.extra_columns).
METRIC_COLUMNS = [
    "iteration", "global_step", "wall_time", "sps", "lr", "ep_return_mean", "ep_length_mean",
    "episodes", "eval_return_mean", "eval_return_std", "value_loss", "value_loss_fresh",
    "explained_variance",
    "entropy", "approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction", "clip_eps",
    "ratio_min", "ratio_q05", "ratio_q25", "ratio_q50", "ratio_q75", "ratio_q95", "ratio_max",
]
TIMING_COLUMNS = ("wall_time", "sps")
EPISODE_COLUMNS = ["global_step", "iteration", "env_index", "return", "length"]


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_torch_save(obj: Any, path: Path) -> None:
    """torch.save to a temp file in the same folder, fsync, then rename over the target."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    _atomic_write_bytes(Path(path), buf.getvalue())


def atomic_write_text(path: Path, text: str) -> None:
    _atomic_write_bytes(Path(path), text.encode())


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s)


class RunDir:
    """Owns the files of one run. Appends rows as they come, flushed at once."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.checkpoint_path = self.path / "checkpoints" / "latest.pt"
        self.metric_columns = list(METRIC_COLUMNS)
        self._tb: Any = None

    # --- creation and opening ----------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: str | Path, env_id: str, algo: str, seed: int,
               config: dict[str, Any]) -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(runs_dir) / f"{_safe(env_id)}__{algo}__{seed}__{stamp}"
        base.parent.mkdir(parents=True, exist_ok=True)
        path, k = base, 1
        while True:  # mkdir is the atomic claim: runs started in the same second by other
            try:     # processes get -2, -3, ... instead of sharing (or crashing on) a folder
                path.mkdir()
                break
            except FileExistsError:
                k += 1
                path = base.with_name(f"{base.name}-{k}")
        run = cls(path)
        atomic_write_text(path / "config.json", json.dumps(config, indent=2) + "\n")
        run.set_status("running", 0)
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        p = Path(path)
        if not (p / "config.json").is_file():
            raise RunError(f"{p} is not a trustrl run folder (no config.json)")
        return cls(p)

    def read_config(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise RunError(f"cannot read {self.path / 'config.json'}: {e}") from None

    # --- status ------------------------------------------------------------------------------
    def set_status(self, status: str, iteration: int, message: str = "") -> None:
        atomic_write_text(self.path / "status.json", json.dumps(
            {"status": status, "iteration": iteration, "message": message,
             "time": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / "status.json").read_text())
        except (OSError, json.JSONDecodeError):
            return {"status": "unknown", "iteration": 0}

    # --- CSV logs ----------------------------------------------------------------------------
    def _append(self, name: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        path = self.path / name
        new = not path.exists() or path.stat().st_size == 0
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            if new:
                w.writeheader()
            for row in rows:
                w.writerow({k: _fmt(row.get(k)) for k in columns})
            f.flush()

    def log_metrics(self, row: dict[str, Any]) -> None:
        self._append("metrics.csv", self.metric_columns, [row])
        if self._tb is not None:
            step = int(row["global_step"])
            for k, v in row.items():
                if k not in ("iteration", "global_step") and isinstance(v, (int, float)) \
                        and v == v:
                    self._tb.add_scalar(_tb_name(k), v, step)

    def log_episodes(self, rows: list[dict[str, Any]]) -> None:
        self._append("episodes.csv", EPISODE_COLUMNS, rows)

    def read_metrics(self) -> list[dict[str, str]]:
        return read_csv(self.path / "metrics.csv")

    def truncate_logs(self, iteration: int) -> None:
        """Drop rows after `iteration` (written after the checkpoint we resume from), and any
        half-written last line of a killed process."""
        for name, columns in (("metrics.csv", self.metric_columns),
                              ("episodes.csv", EPISODE_COLUMNS)):
            path = self.path / name
            if not path.exists():
                continue
            keep = [r for r in read_csv(path)
                    if _complete(r, columns) and int(float(r["iteration"])) <= iteration]
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\r\n")
            w.writeheader()
            w.writerows(keep)
            atomic_write_text(path, buf.getvalue())

    # --- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any]) -> None:
        atomic_torch_save(state, self.checkpoint_path)

    def load_checkpoint(self) -> dict[str, Any]:
        if not self.checkpoint_path.is_file():
            raise RunError(f"{self.path} has no checkpoint to resume from")
        try:
            return torch.load(self.checkpoint_path, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001
            raise RunError(f"cannot read checkpoint {self.checkpoint_path}: {e}") from None

    # --- tensorboard -------------------------------------------------------------------------
    def open_tensorboard(self, purge_step: int | None = None) -> bool:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except Exception:  # tensorboard not installed
            return False
        self._tb = SummaryWriter(str(self.path / "tb"), purge_step=purge_step)
        return True

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _complete(row: dict[str, Any], columns: list[str]) -> bool:
    return all(k in row and row[k] is not None for k in columns) and row.get("iteration", "") != ""


def _tb_name(key: str) -> str:
    """CleanRL-style namespaces: charts/ (returns, speed, lr), losses/, diagnostics/."""
    if key.startswith(("ep_", "eval_")) or key in ("episodes", "sps", "lr", "wall_time"):
        return f"charts/{key}"
    if key in ("policy_loss", "value_loss", "value_loss_fresh", "kl_penalty"):
        return f"losses/{key}"
    return f"diagnostics/{key}"


def read_csv(path: Path) -> list[dict[str, str]]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
