"""Where a cold compile of PPO's fused iteration goes: the PureJaxRL row `one`'s learner
(CartPole-v1, 4 envs x 128 steps) takes one step on an empty Numba cache, and Numba's compile
events are timed per compiled function.

    NUMBA_CACHE_DIR=EMPTY_FOLDER PYTHONPATH=CHECKOUT python compile_profile.py

Prints, per function (largest first): its exclusive seconds (its own typing, lowering and
LLVM work, the compiles of the functions it calls subtracted), the part of them spent holding
Numba's LLVM lock (code generation and LLVM's optimisation), its inclusive seconds and how many
signatures were compiled.
"""

import collections
import os
import sys
import time
from pathlib import Path

import numba.core.event as ev
import torch

checkout = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])
sys.path.insert(0, str(checkout / "benchmarks"))
torch.set_num_threads(1)
import purejaxrl_cpu  # noqa: E402

from trustrl.learn.learners import BatchedLearner  # noqa: E402
from trustrl.settings.config import make_config  # noqa: E402

cmd = purejaxrl_cpu.trustrl_command("one", Path("unused"))
sets = dict(cmd[i + 1].split("=", 1) for i, c in enumerate(cmd) if c == "--set")
sets.update(total_steps=10**9, grad_backend="compiled")

stack: list[list] = []  # [function, start, seconds of the compiles it started]
exclusive: collections.Counter = collections.Counter()
inclusive: collections.Counter = collections.Counter()
llvm: collections.Counter = collections.Counter()
count: collections.Counter = collections.Counter()


def _name(dispatcher) -> str:
    f = getattr(dispatcher, "py_func", dispatcher)
    return f"{f.__module__}.{f.__qualname__}"


class Compiles(ev.Listener):
    def on_start(self, event):
        stack.append([_name(event.data["dispatcher"]), time.perf_counter(), 0.0])

    def on_end(self, event):
        name, t0, inner = stack.pop()
        dt = time.perf_counter() - t0
        exclusive[name] += dt - inner
        inclusive[name] += dt
        count[name] += 1
        if stack:
            stack[-1][2] += dt


class LLVMLock(ev.Listener):
    def on_start(self, event):
        self.t0 = time.perf_counter()

    def on_end(self, event):
        if stack:
            llvm[stack[-1][0]] += time.perf_counter() - self.t0


ev.register("numba:compile", Compiles())
ev.register("numba:llvm_lock", LLVMLock())
t0 = time.perf_counter()
learner = BatchedLearner(make_config("ppo", env_id="CartPole-v1", sets=sets), [1])
learner.step()
print(f"first step {time.perf_counter() - t0:.1f} s, fused {learner.fused}")
print(f"exclusive seconds in all {sum(exclusive.values()):.1f}, "
      f"under the LLVM lock {sum(llvm.values()):.1f}")
print("exclusive  LLVM lock  inclusive  signatures  function")
for name, s in exclusive.most_common(40):
    print(f"{s:9.2f} {llvm[name]:10.2f} {inclusive[name]:10.2f} {count[name]:11d}  {name}")
