"""The compiled PPO update alone, timed: `algo.update` of ppo-penalty and ppo-noclip on the
batched CartPole (4 envs x 128 steps, 10 epochs of minibatches of 64, one torch thread, the
compiled backend, the fused iteration off so that the update is its own call), the median
of 60 updates after 3 warm-up iterations. For A/B runs of two checkouts, alternately:

    PYTHONPATH=<checkout> python benchmarks/ppo_update_ms.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import make_config


def main() -> None:
    torch.set_num_threads(1)
    out = []
    for algo in ("ppo-penalty", "ppo-noclip"):
        sets = {"num_envs": 4, "num_steps": 128, "eval_every": 0, "torch_threads": 1,
                "grad_backend": "compiled", "update_epochs": 10, "minibatch_size": 64,
                "total_steps": 10**9}
        learner = BatchedLearner(make_config(algo, env_id="CartPole-v1", sets=sets), [1])
        learner.fused = False
        times: list[float] = []
        update = learner.algo.update

        def timed(*args: Any, _update: Any = update, _times: list[float] = times) -> Any:
            t0 = time.perf_counter()
            result = _update(*args)
            _times.append(time.perf_counter() - t0)
            return result

        learner.algo.update = timed  # type: ignore[method-assign]
        for _ in range(3):
            learner.step()
        times.clear()
        for _ in range(60):
            learner.step()
        out.append(f"{algo} update median {statistics.median(times) * 1e3:.3f} ms")
    print("; ".join(out))


if __name__ == "__main__":
    main()
