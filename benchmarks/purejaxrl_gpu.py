"""PureJaxRL's PPO on CartPole-v1 (gymnax), timed after compilation: the GPU peer of issue 7.

    python3 benchmarks/purejaxrl_gpu.py --purejaxrl .bench/purejaxrl [--runs default wide seeds]
        [--scale 1.0] [--tiny]

--purejaxrl is a folder holding PureJaxRL's purejaxrl/ppo.py and purejaxrl/wrappers.py, copied
unmodified from github.com/luchris429/purejaxrl (never committed here). We import its
make_train(config) and time it in three settings:
- default: its own CartPole-v1 config (4 envs x 128 steps, 4 epochs x 4 minibatches, 5e5 steps);
- wide:    the same with 2048 envs x 128 steps and 8 minibatches, 2e8 steps;
- seeds:   1024 seeds at once, jax.vmap over the seed of the default config (4 envs each,
           5e5 steps per seed), as PureJaxRL's README vmaps it.
Budgets are sized for about 5 to 20 s per timed run on an H200 (scale them with --scale).

Protocol: jax.jit(train) is called once (compilation plus a first run, reported as
`first_s`), then a second call with another seed is timed to jax.block_until_ready:
SPS = env steps of that call / its seconds. One JSON line per setting on stdout, with the mean
return of the episodes finished in the last 10% of updates (learning check, across seeds).

PureJaxRL's wrappers.py imports brax and navix at module level but uses them only in its Brax
and Navix wrappers; when they are not installed this script puts empty placeholder modules in
their place (any use of them raises), so CartPole needs only gymnax and distrax.

GPU machine (no network): `python benchmarks/setup_peers.py --dest .bench --only gpu
--purejaxrl-git $PUREJAXRL_GIT` fills .bench/whl/ (wheels of gymnax, distrax, tfp-nightly,
dm-tree, gast, decorator, gymnasium, farama-notifications) and .bench/purejaxrl/; carry .bench,
then, with SITE a new empty folder (e.g. SITE=$(mktemp -d)):
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .bench/whl/*.whl \\
      && export PYTHONPATH="$SITE" \\
      && python3 benchmarks/purejaxrl_gpu.py --purejaxrl .bench/purejaxrl
On a CPU, the purejaxrl-venv that setup_peers.py builds runs it as is (e.g. with --tiny).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

# PureJaxRL's __main__ config for CartPole-v1 (DEBUG off: its host callback would be timed).
DEFAULT: dict[str, Any] = {
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True, "DEBUG": False,
}
# name -> (config overrides, number of vmapped seeds)
RUNS: dict[str, tuple[dict[str, Any], int]] = {
    "default": ({}, 1),
    "wide": ({"NUM_ENVS": 2048, "NUM_MINIBATCHES": 8, "TOTAL_TIMESTEPS": 2e8}, 1),
    "seeds": ({}, 1024),
}
# --table cpu: the rows of the CPU comparison (benchmarks/purejaxrl_cpu.py runs them): CleanRL's
# CartPole setting, which is PureJaxRL's own, at 99,840 steps; 16 seeds of it at once; 64 envs
# for 999,424 steps.
CPU: dict[str, tuple[dict[str, Any], int]] = {
    "one": ({"TOTAL_TIMESTEPS": 99_840}, 1),
    "seeds": ({"TOTAL_TIMESTEPS": 99_840}, 16),
    "wide": ({"NUM_ENVS": 64, "TOTAL_TIMESTEPS": 999_424}, 1),
}
# --tiny: a CPU smoke test of the same three code paths.
TINY: dict[str, tuple[dict[str, Any], int]] = {
    "default": ({"TOTAL_TIMESTEPS": 4 * 128 * 4}, 1),
    "wide": ({"NUM_ENVS": 64, "NUM_MINIBATCHES": 8, "TOTAL_TIMESTEPS": 64 * 128 * 2}, 1),
    "seeds": ({"TOTAL_TIMESTEPS": 4 * 128 * 2}, 8),
}


def _placeholder(name: str) -> types.ModuleType:
    """A module whose every attribute raises on use (not on import)."""
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, so submodules can hang below it

    def missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        class Missing:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise ImportError(f"{name}.{attr} is a placeholder: {name} is not installed")

        return Missing

    mod.__getattr__ = missing  # type: ignore[method-assign]
    return mod


def _stub_unused_imports() -> list[str]:
    """Placeholders for brax and navix when absent; returns the names stubbed."""
    stubbed = []
    for top, subs in (("brax", ("brax.envs", "brax.envs.wrappers",
                                "brax.envs.wrappers.training")), ("navix", ())):
        if importlib.util.find_spec(top) is not None:
            continue
        for name in (top, *subs):
            sys.modules[name] = _placeholder(name)
        sys.modules["brax"].envs = sys.modules.get("brax.envs")  # type: ignore[attr-defined]
        stubbed.append(top)
    return stubbed


def load_make_train(folder: Path) -> Any:
    """Import make_train from the copied ppo.py (which does `from wrappers import ...`)."""
    if not (folder / "ppo.py").is_file() or not (folder / "wrappers.py").is_file():
        raise SystemExit(f"{folder} must hold PureJaxRL's ppo.py and wrappers.py")
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("purejaxrl_ppo", folder / "ppo.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_train


def final_return(metrics: dict[str, Any], tail: float = 0.1) -> float | None:
    """Mean return of the episodes that ended in the last `tail` of updates (all seeds),
    reduced on the device (the 1024-seed metrics are gigabytes). Metric arrays are
    [updates, steps, envs] or [seeds, updates, steps, envs]."""
    import jax.numpy as jnp

    done = metrics["returned_episode"]
    axis = done.ndim - 3  # the updates axis
    n = done.shape[axis]
    idx = (slice(None),) * axis + (slice(max(0, n - max(1, int(n * tail))), n),)
    d = done[idx].astype(jnp.float32)
    count = float(d.sum())
    return float((metrics["returned_episode_returns"][idx] * d).sum()) / count if count else None


def time_run(make_train: Any, name: str, overrides: dict[str, Any], seeds: int,
             scale: float, once: bool = False) -> dict[str, Any]:
    import jax

    config = dict(DEFAULT, **overrides)
    config["TOTAL_TIMESTEPS"] = config["TOTAL_TIMESTEPS"] * scale
    train = make_train(config)  # fills NUM_UPDATES, MINIBATCH_SIZE into config
    steps = int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * config["NUM_ENVS"] * seeds
    if seeds > 1:
        fn = jax.jit(jax.vmap(train))

        def keys(i: int) -> Any:
            return jax.random.split(jax.random.PRNGKey(i), seeds)
    else:
        fn = jax.jit(train)

        def keys(i: int) -> Any:
            return jax.random.PRNGKey(i)

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(keys(0)))  # compile + first run
    first = time.perf_counter() - t0
    if once:  # launch to result: the first run is the result
        return {"run": name, "seeds": seeds, "env_steps": steps, "first_s": round(first, 3),
                "final_return": final_return(out["metrics"]), "jax": jax.__version__}
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(keys(1)))
    timed = time.perf_counter() - t0
    return {
        "run": name, "num_envs": config["NUM_ENVS"], "num_steps": config["NUM_STEPS"],
        "num_minibatches": config["NUM_MINIBATCHES"], "update_epochs": config["UPDATE_EPOCHS"],
        "seeds": seeds, "updates": int(config["NUM_UPDATES"]), "env_steps": steps,
        "first_s": round(first, 3), "timed_s": round(timed, 3), "sps": round(steps / timed),
        "final_return": final_return(out["metrics"]),
        "device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--purejaxrl", required=True, help="folder with PureJaxRL's ppo.py and "
                   "wrappers.py")
    p.add_argument("--runs", nargs="+", choices=sorted({*RUNS, *CPU}), default=list(RUNS))
    p.add_argument("--scale", type=float, default=1.0, help="multiply every step budget")
    p.add_argument("--tiny", action="store_true", help="tiny budgets (CPU smoke test)")
    p.add_argument("--table", choices=("gpu", "cpu"), default="gpu",
                   help="cpu: the rows one, seeds, wide of benchmarks/purejaxrl_cpu.py")
    p.add_argument("--once", action="store_true",
                   help="one call (compilation and run) and exit: the end-to-end measure")
    p.add_argument("--cache", help="JAX's persistent compilation cache folder (every "
                   "compiled program is kept); default: none")
    a = p.parse_args()
    if a.scale <= 0:
        p.error("--scale must be positive")
    table = TINY if a.tiny else CPU if a.table == "cpu" else RUNS
    if any(r not in table for r in a.runs):
        p.error(f"--runs: the {a.table} table has {', '.join(table)}")
    if a.cache:
        import jax

        jax.config.update("jax_compilation_cache_dir", a.cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    stubbed = _stub_unused_imports()
    make_train = load_make_train(Path(a.purejaxrl))
    for name in a.runs:
        overrides, seeds = table[name]
        result = time_run(make_train, name, overrides, seeds, a.scale, a.once)
        result["placeholders"] = stubbed
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
