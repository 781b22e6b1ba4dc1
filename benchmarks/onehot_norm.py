"""Observation normalisation on one-hot observations: PPO with and without it (issue 53, point 7).

    python benchmarks/onehot_norm.py --out OUT [--seeds 1,2,3] [--total-steps 20000] [--skew]

The toy (`OneHotTarget`): the observation is MultiDiscrete([K, K]), a target index and a
distractor index drawn each step, both given to the network as one-hots; the action is
Discrete(K); the reward is 0 when the action is the target, -1 otherwise; 20 steps an
episode. The best return is 0, a uniform policy's about -20 (K - 1) / K. With `--skew` the
target is drawn with probabilities proportional to 2^-i (i = 0..K-1), so some one-hot columns
are rare: the ones a running mean/std scales the most (a rare column's 1 becomes a large
value, up to obs_clip).

Three PPO variants, each `trustrl.train` with PPO's defaults (no preset) but for:
- `normalize_obs=False`;
- `normalize_obs=True` as trustrl does it now: the one-hot parts are left as they are
  (Agent.raw_parts, trustrl.envs.spaces.RAW_KINDS);
- `normalize_obs=True` with the one-hots normalised too, the behaviour before (an Agent with
  raw_parts ("image",), as agent files from before load): set here by giving Agent's
  raw_parts that default for this process.

Prints a Markdown table (per variant: the final greedy evaluation's mean return per seed and
their median) and writes OUT/onehot_norm.json. Each run goes to OUT/runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

K = 6
HORIZON = 20


class OneHotTarget(gym.Env):
    """Pick the target: observation (target, distractor) in MultiDiscrete([K, K]), action in
    Discrete(K), reward 0 for the target and -1 otherwise, HORIZON steps."""

    def __init__(self, skew: bool = False) -> None:
        p = 0.5 ** np.arange(K) if skew else np.ones(K)
        self.p = p / p.sum()
        self.observation_space = gym.spaces.MultiDiscrete([K, K])
        self.action_space = gym.spaces.Discrete(K)

    def _draw(self) -> np.ndarray:
        self.obs = np.array([self.np_random.choice(K, p=self.p), self.np_random.integers(K)])
        return self.obs.copy()

    def reset(self, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action: Any):
        reward = 0.0 if int(action) == int(self.obs[0]) else -1.0
        self.t += 1
        return self._draw(), reward, False, self.t >= HORIZON, {}


VARIANTS = {
    "normalize_obs=False": dict(normalize_obs=False),
    "normalize_obs=True (one-hots left raw: trustrl now)": dict(normalize_obs=True),
    "normalize_obs=True, one-hots normalised (before)": dict(normalize_obs=True),
}


def run(variant: str, seed: int, steps: int, out: Path, skew: bool = False) -> float:
    import trustrl
    from trustrl.records.agent import Agent

    defaults = Agent.__init__.__defaults__
    if "before" in variant:  # Agent's last default is raw_parts: images only, as before
        Agent.__init__.__defaults__ = (*defaults[:-1], ("image",))
    try:
        cfg = trustrl.PPOConfig(env_id=OneHotTarget, env_kwargs={"skew": skew}, seed=seed,
                                total_steps=steps,
                                preset="none", runs_dir=str(out / "runs"), tensorboard=False,
                                **VARIANTS[variant])
        result = trustrl.train(cfg)
    finally:
        Agent.__init__.__defaults__ = defaults
    if "before" in variant:
        assert result.agent.raw_parts == ("image",)
    return float(result.final_eval["mean"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--skew", action="store_true", help="rare targets (see the docstring)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",")]
    start = time.time()
    results = {v: [run(v, s, a.total_steps, out, a.skew) for s in seeds] for v in VARIANTS}
    print(f"PPO (no preset, {a.total_steps:,} steps) on OneHotTarget (K = {K}, "
          f"{'skewed' if a.skew else 'uniform'} targets, "
          f"{HORIZON} steps; best 0, uniform about {-HORIZON * (K - 1) / K:.1f}); final greedy "
          f"mean return of 10 episodes, seeds {a.seeds}:\n")
    print("| variant | median | per seed |\n|---|---:|---|")
    for v, xs in results.items():
        print(f"| {v} | {statistics.median(xs):.1f} | {', '.join(f'{x:.1f}' for x in xs)} |")
    (out / f"onehot_norm_{a.total_steps}{'_skew' if a.skew else ''}.json").write_text(json.dumps(
        {"seeds": seeds, "total_steps": a.total_steps, "K": K, "horizon": HORIZON,
         "skew": a.skew,
         "results": results, "seconds": time.time() - start}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
