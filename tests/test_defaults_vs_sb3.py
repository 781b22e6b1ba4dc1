"""benchmarks/defaults_vs_sb3.py (issue 19.2): bad input is one line and exit 2, finished runs are
kept, and the report's verdict compares the medians over seeds (no SB3 venv needed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "defaults_vs_sb3.py"


def _module():
    spec = importlib.util.spec_from_file_location("defaults_vs_sb3", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("args, words", [
    (["--tools", "rllib"], "--tools"),
    (["--tools", "trustrl", "--set", "lr=0.001"], "--tag"),
    (["--tools", "trustrl", "--tag", "a/b", "--set", "lr=0.001"], "--tag"),
    (["--tools", "sb3"], "--sb3-python"),
    (["--tools", "trustrl", "--seeds", "x"], "--seeds"),
    (["--tools", "trustrl", "--envs", "NoSuchEnv-v9"], "no env"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o"), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("defaults_vs_sb3: ") and words in last, proc.stderr
    assert "Traceback" not in proc.stderr


def _write(out: Path, tool: str, env: str, finals: list[float]) -> None:
    for seed, v in enumerate(finals, 1):
        f = out / tool / env / f"seed{seed}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        curve = [[1000 * k, v * k / 10] for k in range(1, 11)]
        f.write_text(json.dumps({"tool": tool, "env_id": env, "seed": seed, "total_steps": 10_000,
                                 "final_mean": v, "final_returns": [v] * 10, "curve": curve}))


def test_report_verdict_is_median_against_median(tmp_path: Path) -> None:
    mod = _module()
    # trustrl's mean (166.7) is above SB3's but its median (100) is below: the verdict is "no".
    _write(tmp_path, "sb3", "A-v0", [110.0, 120.0, 130.0])
    _write(tmp_path, "trustrl", "A-v0", [0.0, 100.0, 400.0])
    # a tie counts as reaching SB3's median
    _write(tmp_path, "sb3", "B-v0", [-5.0, -3.0, -1.0])
    _write(tmp_path, "trustrl", "B-v0", [-9.0, -3.0, 0.0])
    text = mod.report(tmp_path)
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in text.splitlines()
            if line.startswith("| ") and "---" not in line}
    assert rows[("A-v0", "trustrl")].rstrip(" |").endswith("**no**")
    assert "| 100.0 | 0.0 | 400.0 |" in rows[("A-v0", "trustrl")]
    assert rows[("B-v0", "trustrl")].rstrip(" |").endswith("yes")
    assert "trustrl: median >= SB3's median on 1 of 2 envs" in text
    # the side-by-side table: one row per env, '<' on a median below SB3's
    assert "| A-v0 | 120.0 | 100.0 < |" in text and "| B-v0 | -3.0 | -3.0 |" in text
    assert (tmp_path / "curves_A-v0.png").stat().st_size > 0


def test_finished_runs_are_kept(tmp_path: Path) -> None:
    """A run whose seed file exists is not run again: with every run done, nothing starts."""
    _write(tmp_path, "trustrl", "CartPole-v1", [500.0])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--tools",
                           "trustrl", "--envs", "CartPole-v1", "--seeds", "1",
                           "--total-steps", "512"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "0 runs to do" in proc.stdout
    assert not (tmp_path / "trustrl" / "CartPole-v1" / "seed1-runs").exists()
