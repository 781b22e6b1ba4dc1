"""The compiled natural step (one call: CG, x^T F x, step size) against the two calls main
makes for the same work (the compiled CG's `solve` and one Fisher product), on the same
products: TRPO's network in variants_sps.py's setting, 512 random CartPole-shaped samples,
100 calls each, three repeats, process time.

    python natural_step_timing.py
"""

from __future__ import annotations

import time

import torch

from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import make_config

torch.set_num_threads(1)
cfg = make_config("trpo", env_id="CartPole-v1",
                  sets={"num_envs": 4, "num_steps": 128, "eval_every": 0, "torch_threads": 1,
                        "grad_backend": "compiled", "total_steps": 10**9})
learner = BatchedLearner(cfg, [1])
for _ in range(3):
    learner.step()
net, backend = learner.algo.net, learner.algo.backend
torch.manual_seed(0)
obs = torch.randn(1, 512, 4)
flat = net.flat.detach().clone()
g, _, old_out = backend.policy_gradient(net, obs, torch.randint(0, 2, (1, 512)),
                                        torch.full((1, 512), -0.69), torch.randn(1, 512), flat)
fvp = backend.fisher_product(net, obs, old_out, flat, 0.1)
for _ in range(3):
    t0 = time.process_time()
    for _ in range(100):
        x, k, _ = fvp.solve(g, 10, 1e-10, False)
        fvp(x)
    t1 = time.process_time()
    for _ in range(100):
        fvp.natural_step(g, 10, 1e-10, False, 0.01)
    t2 = time.process_time()
    for _ in range(100):
        fvp(x)
    t3 = time.process_time()
    print(f"CG solve + product {10 * (t1 - t0):.3f} ms  natural_step {10 * (t2 - t1):.3f} ms  "
          f"one product {10 * (t3 - t2):.3f} ms  CG products {int(k[0])}")
