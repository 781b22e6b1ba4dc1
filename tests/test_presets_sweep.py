"""benchmarks/presets_sweep.py (issue 19.3): the SPEC it writes. A trial capped below the zoo's
budget keeps the zoo's learning-rate schedule (anneal_steps = the zoo's n_timesteps) unless
--anneal-over-cap; the SPEC loads as `trustrl sweep` would load it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trustrl.settings.presets import ZOO_PRESETS
from trustrl.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "presets_sweep.py"


def _spec(tmp: Path, env: str, *flags: str) -> dict[str, dict]:
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp), "--algo", "ppo",
                        "--env", env, "--seeds", "1,2", "--spec-only", *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    spec = load_spec(tmp / "ppo.yaml")
    assert [t.seed for t in spec.trials] == [1, 2]
    return {t.id: t.config for t in spec.trials}


@pytest.mark.parametrize("over_cap", [False, True], ids=["zoo-schedule", "anneal-over-cap"])
def test_a_capped_trial_keeps_the_zoos_schedule(tmp_path: Path, over_cap: bool) -> None:
    budget = ZOO_PRESETS[("ppo", "CartPole-v1")]["total_steps"]
    assert ZOO_PRESETS[("ppo", "CartPole-v1")]["anneal_lr"] and budget > 2048
    flags = ["--max-steps", "2048", "--eval-every", "3"]
    configs = _spec(tmp_path, "CartPole-v1", *flags, *(["--anneal-over-cap"] if over_cap else []))
    for cfg in configs.values():
        assert cfg["total_steps"] == 2048 and cfg["eval_every"] == 3 and cfg["anneal_lr"]
        assert cfg["anneal_steps"] == (None if over_cap else budget)


def test_uncapped_or_constant_rate_trials_have_no_horizon(tmp_path: Path) -> None:
    budget = ZOO_PRESETS[("ppo", "CartPole-v1")]["total_steps"]
    for cfg in _spec(tmp_path / "a", "CartPole-v1").values():  # not capped
        assert cfg["total_steps"] == budget and cfg["anneal_steps"] is None
    assert not ZOO_PRESETS[("ppo", "Pendulum-v1")]["anneal_lr"]
    for cfg in _spec(tmp_path / "b", "Pendulum-v1", "--max-steps", "4096").values():
        assert cfg["total_steps"] == 4096 and cfg["anneal_steps"] is None
