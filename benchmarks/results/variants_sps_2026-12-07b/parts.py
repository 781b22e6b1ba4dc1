"""Per-part timers (process time) around TRPO's BatchedLearner.step in variants_sps.py's
setting (batched CartPole, 4 envs x 128 steps, one seed, the compiled backend, one torch
thread): the collector, GAE, the update and, inside it, each of its compiled calls' wrappers.

    python parts.py [ALGO] [ITERATIONS]
"""

from __future__ import annotations

import collections
import sys
import time

import torch

import trustrl.algos.trpo as trpo_mod
from trustrl.compute import compiled
from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import make_config

torch.set_num_threads(1)
algo = sys.argv[1] if len(sys.argv) > 1 else "trpo"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
SHAPE = {"num_envs": 4, "num_steps": 128, "eval_every": 0, "torch_threads": 1,
         "grad_backend": "compiled"}
cfg = make_config(algo, env_id="CartPole-v1", sets={**SHAPE, "total_steps": 10**9})
learner = BatchedLearner(cfg, [1])
acc: dict[str, float] = collections.defaultdict(float)


def wrap(obj, name, label):  # type: ignore[no-untyped-def]
    f = getattr(obj, name)

    def timed(*a, **k):  # type: ignore[no-untyped-def]
        t0 = time.process_time()
        r = f(*a, **k)
        acc[label] += time.process_time() - t0
        return r

    setattr(obj, name, timed)


wrap(learner.collector, "collect", "collect")
wrap(compiled, "gae", "gae")
wrap(learner.algo, "update", "update")
backend = learner.algo.backend
wrap(backend, "policy_gradient", "u.policy_gradient")
fisher = backend.fisher_product


def fisher_timed(*a, **k):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    fvp = fisher(*a, **k)
    acc["u.fisher_setup"] += time.process_time() - t0
    if hasattr(fvp, "natural_step"):  # this branch's one call: CG, x^T F x, step size
        wrap(fvp, "natural_step", "u.natural_step(CG+step)")
    return fvp


backend.fisher_product = fisher_timed
for name in ("population_line_search", "fit_critic", "diagnostics", "conjugate_gradient"):
    if hasattr(trpo_mod, name):
        wrap(trpo_mod, name, "u." + name)
for _ in range(5):
    learner.step()
acc.clear()
t0 = time.process_time()
for _ in range(n):
    learner.step()
tot = time.process_time() - t0
print(f"{algo}: {1e3 * tot / n:.2f} ms/iteration (process time, {n} iterations)")
for k, v in sorted(acc.items()):
    print(f"  {k:32s} {1e3 * v / n:6.2f} ms")
rest = acc["update"] - sum(v for k, v in acc.items() if k.startswith("u."))
print(f"  {'update: rest (glue)':32s} {1e3 * rest / n:6.2f} ms")
outside = tot - acc["update"] - acc["collect"] - acc["gae"]
print(f"  {'outside collect/gae/update':32s} {1e3 * outside / n:6.2f} ms")
