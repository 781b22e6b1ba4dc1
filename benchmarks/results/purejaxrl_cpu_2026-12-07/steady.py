"""PPO's learner in benchmarks/purejaxrl_cpu.py's row `one` (CartPole-v1, 4 envs x 128 steps,
4 epochs x 4 minibatches), imported from the checkout on PYTHONPATH: five warm-up iterations,
then three rounds of ITERS iterations, printing each round's process time per iteration.

    PYTHONPATH=CHECKOUT python steady.py ITERS [--seeds S] [--unfused] [--profile] [--map]

--unfused runs the unfused path (the same compiled kernels, one call each: rollout, GAE,
epochs, diagnostics); --profile prints cProfile's top functions of the timed rounds (each
compiled call's time is its Python caller's tottime); --map writes perf's map of the compiled
functions (perfmap.py) before timing, for `perf record` / `perf report`.
"""

import argparse
import cProfile
import inspect
import io
import os
import pstats
import sys
import time
from pathlib import Path

import torch

ap = argparse.ArgumentParser()
ap.add_argument("iters", type=int)
ap.add_argument("--seeds", type=int, default=1)
ap.add_argument("--unfused", action="store_true")
ap.add_argument("--profile", action="store_true")
ap.add_argument("--map", action="store_true")
a = ap.parse_args()
checkout = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])
sys.path.insert(0, str(checkout / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
torch.set_num_threads(1)
try:
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config
except ImportError:  # the layout before the package's folders (c839e4a)
    from trustrl.config import make_config
    from trustrl.learners import BatchedLearner
import purejaxrl_cpu  # noqa: E402

cmd = purejaxrl_cpu.trustrl_command("one", Path("unused"))
sets = dict(cmd[i + 1].split("=", 1) for i, c in enumerate(cmd) if c == "--set")
sets.update(total_steps=10**9, grad_backend="compiled")
kw = {"env_id": "CartPole-v1", "sets": sets}
if "preset" in inspect.signature(make_config).parameters:
    kw["preset"] = "none"
learner = BatchedLearner(make_config("ppo", **kw), list(range(1, a.seeds + 1)))
if a.unfused:
    learner.fused = False
for _ in range(5):
    learner.step()
if a.map:
    import perfmap

    print("perf map entries", perfmap.write())
prof = cProfile.Profile() if a.profile else None
ms = []
for _ in range(3):
    if prof:
        prof.enable()
    t0 = time.process_time()
    for _ in range(a.iters):
        learner.step()
    ms.append(1000 * (time.process_time() - t0) / a.iters)
    if prof:
        prof.disable()
print(f"{checkout.name} ms/iter", [round(m, 3) for m in ms], "fused", learner.fused)
if prof:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(20)
    print(s.getvalue())
