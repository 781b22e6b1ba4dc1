"""The compiled gradient backend: the closed form, with whole loops compiled by Numba (CPU).

An eager update pays a dispatch of 2-5 us (torch) per operation on a few thousand numbers, and
TRPO's critic regression is 40 minibatches of some thirty operations each: most of its time is
dispatch (docs/compiled.md). `Compiled` is `ClosedForm` plus one compiled kernel per such loop,
so the loop runs as machine code with no Python between its operations:

    fit_critic     the critic's regression of TRPO and NPG (algos.common.fit_critic): every
                   epoch's shuffled minibatches, the MLP's forward and backward pass and the
                   Adam step, one call per update;
    fisher_product TRPO's and NPG's Fisher-vector product F v = J^T M J v (what
                   ClosedForm.fisher_product computes), with the conjugate gradient, x^T F x
                   and the step size on these products as one call (trust.cg.natural_step
                   compiled: the products' `natural_step`);
    line_search    TRPO's backtracking line search (trust.line_search.line_search_steps
                   compiled with the compiled line-search evaluation), one call per update;
    ppo_epochs     PPO's epochs of minibatch steps (trust.kl_control.k_epochs, the loop
                   algos.ppo.PPO.update runs eagerly, compiled with a compiled minibatch step:
                   forward, loss terms, backward, gradient clip, Adam), one call per update,
                   its KL early stop included (trustrl.compute.compiled.ppo).

The kernels compute what the eager code computes, in the same order of minibatches, with the
same shuffles (drawn by trustrl.maths.rng outside the kernel) and Adam's arithmetic
(trustrl.maths.optim);
they agree with the eager closed form to float rounding (tests/test_compiled.py), and a member
of a population computes exactly what it computes alone (the kernel loops over members).

Numba is an optional extra (`pip install "trustrl[compiled]"`: numba, and scipy, whose BLAS
Numba's np.dot calls). Kernels are compiled on first use and cached on disk (`cache=True`:
next to this file, or in Numba's per-user cache folder when that is not writable), so the
compile cost (a few seconds) is paid once per machine; `pick` takes this backend under
`grad_backend = "auto"` only where it is installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.compute.backends import ClosedForm
from trustrl.compute.compiled import records
from trustrl.maths import losses
from trustrl.maths.advantages import done_masks
from trustrl.maths.losses import Objective
from trustrl.maths.optim import PopAdam
from trustrl.nets.popnet import PopActorCritic
from trustrl.util.errors import NotCompilable


def available() -> bool:
    """Whether Numba and scipy (for np.dot's BLAS) are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("numba", "scipy"))


STATS = ("ep_return_mean", "ep_length_mean", "episodes", "explained_variance",
         "value_loss_fresh")
"""The learner's metrics the compiled iteration (Compiled.ppo_iteration) writes into its
`stats` [P, 5], in this order."""

_KERNELS: dict[str, Any] = {}
_READY: dict[str, bool] = {}  # kernels called once in this process (loaded or compiled)
ITERATION_COMPILE_SECONDS = 131
"""What compiling PPO's fused iteration (with everything it calls) takes on an empty Numba
cache: `trustrl train --set grad_backend=compiled` on CartPole-v1 (PPO's chapter preset,
100,000 steps), its training time (metrics.csv's wall_time) less that of the same command with
the cache warm, on one core with the other idle, at `OPT_LEVEL` (docs/compiled.md, "LLVM's
optimisation level", 2026-12-07: 131 s; 220 s at Numba's default level). The note printed
while it compiles and the cold-start rule (learners.COMPILE_PAYS_STEPS) read it."""
_KERNEL_NAMES = ("critic_fit", "fisher_product", "cg_steps", "natural_step", "surrogate_kl",
                 "line_search", "policy_gradient")


def _one_blas_thread() -> None:
    """Numba's np.dot calls scipy's OpenBLAS, which splits a product over threads by default,
    and a different split rounds differently: the same run gave other numbers with
    OPENBLAS_NUM_THREADS=1 and 2. Set that library to one thread (trustrl runs one torch
    thread per process too), so a run's numbers do not depend on the machine's core count or
    a worker's environment. Linux: the library is found among the process's mapped files."""
    import ctypes

    import scipy.linalg.cython_blas  # noqa: F401  (loads the library Numba calls)

    try:
        with open("/proc/self/maps") as f:
            paths = {p for p in (line.split()[-1] for line in f)
                     if "openblas" in p.lower() and "scipy" in p.split("/")[-2]}
    except OSError:
        return
    for path in paths:
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_set_num_threads", "openblas_set_num_threads"):
            setter = getattr(lib, name, None)
            if setter is not None:
                setter(ctypes.c_int(1))
                break


_SOURCES = ("maths/advantages.py", "maths/diagnostics.py", "maths/distributions.py",
            "maths/normalize.py", "maths/optim.py", "maths/losses.py", "maths/trust/cg.py",
            "maths/trust/kl_control.py", "maths/trust/line_search.py",
            "compute/compiled/kernels.py", "compute/compiled/rollout.py", "compute/compiled/ppo.py",
            "compute/compiled/xp.py",
            "compute/compiled/iteration.py", "envs/classic.py", "envs/step.py",
            "nets/popnet.py")
"""The files compiled code is built from (relative to the package). Numba's disk cache checks
only a function's own
file, but a compiled function includes the code of those it calls from other files."""


def _cache_folder(source: Any) -> Any:
    """The folder where Numba's disk cache keeps the compiled functions of the file `source`
    (a Path): its folder under NUMBA_CACHE_DIR where that is set (Numba's name for it: the
    source folder's name and a digest of its path), else the __pycache__ beside it."""
    from pathlib import Path

    try:
        from numba.core import config
        from numba.core.caching import _CacheLocator  # Numba's own naming, not public

        if config.CACHE_DIR:
            return Path(config.CACHE_DIR) / _CacheLocator.get_suitable_cache_subpath(
                str(source))
    except (ImportError, AttributeError):  # another Numba: the in-tree folder, as before
        pass
    return source.parent / "__pycache__"


def _drop_stale_caches() -> None:
    """Delete trustrl's Numba cache files when any of `_SOURCES` changed since they were written
    (a fingerprint of their contents is kept beside them), so that compiled code never
    includes an older version of a function from another file (an edited checkout; an
    installed package rewrites every file, which Numba notices itself). The cache folders are
    Numba's: NUMBA_CACHE_DIR's where it is set, else the __pycache__ beside each source. Only
    where they are writable; silent otherwise."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # the package: trustrl/compute/compiled/..
    h = hashlib.sha256()
    for rel in _SOURCES:
        try:
            h.update((root / rel).read_bytes())
        except OSError:
            return
    digest = h.hexdigest()
    stamp = _cache_folder(Path(__file__).resolve()) / "numba-sources.sha256"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for folder in {_cache_folder(root / rel) for rel in _SOURCES}:
            for f in folder.glob("*.nb[ic]"):
                f.unlink(missing_ok=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        pass


def _kernels() -> dict[str, Any]:
    """The compiled functions, built (and loaded from the disk cache) on first use."""
    if not _KERNELS:
        _drop_stale_caches()
        _one_blas_thread()
        from trustrl.compute.compiled import kernels as k  # imports numba: only when used
        from trustrl.compute.compiled import ppo

        _KERNELS.update(critic_fit=k.critic_fit, fisher_product=k.actor_fisher_product,
                        cg_steps=k.cg_steps, natural_step=k.natural_step,
                        mlp_forward=k.mlp_forward, gae=k.gae_into,
                        ppo_epochs=ppo.epochs_kernel(losses.clipped_surrogate_objective,
                                                     losses.clipped_surrogate_objective_grad),
                        ppo_diagnostics=k.ppo_diagnostics, surrogate_kl=k.surrogate_kl,
                        line_search=k.line_search_steps,
                        policy_gradient=k.policy_gradient)
    return _KERNELS


def _np(x: Tensor) -> np.ndarray:
    return x.detach().numpy()


class Compiled(ClosedForm):
    name = "compiled"

    def __init__(self) -> None:
        super().__init__(compile=False)

    def prepare(self, net: PopActorCritic, kernels: tuple[str, ...]) -> None:
        """Load (or, the first time on a machine, compile) the kernels an algorithm will call,
        before its first update, saying so on stderr when they are compiled: each is called
        once on a tiny network of the same types (one hidden layer of 2, two samples)."""
        kernels = tuple(k for k in kernels if k in _KERNEL_NAMES)
        if not kernels:
            return
        ks = _kernels()
        with _announce_compiling("compiling the compiled backend's kernels (once per machine, "
                                 "about a minute; cached on disk)", *(ks[k] for k in kernels)):
            d, n, relu = net.obs_dim, net.n_out, net.activation == "relu"
            f32 = np.float32
            if "critic_fit" in kernels:
                D = 2 * d + 5
                ks["critic_fit"](np.zeros((1, D + 1), f32), 1, np.array((d, 2, 1), np.int64), relu,
                                 records.Adam(np.zeros((1, D), f32), np.zeros((1, D), f32),
                                              np.zeros(1), 1e-3, 0.9, 0.999, 1e-8),
                                 np.zeros((1, 2, d), f32), np.zeros((1, 2), f32),
                                 np.zeros((1, 1, 2), np.int64), 2, np.zeros(1, f32))
            if "fisher_product" in kernels and net.hidden_sizes:
                L = len(net.hidden_sizes)  # the hidden outputs' tuple has one array per layer
                sizes = np.array((d, *(2,) * L, n), np.int64)
                A = int((sizes[:-1] * sizes[1:] + sizes[1:]).sum())  # the actor's parameters
                D = A + n  # and the log-std
                args = (np.zeros((1, D), f32), sizes, relu, np.zeros((1, 2, d), f32),
                        tuple(np.zeros((1, 2, 2), f32) for _ in range(L)),
                        np.ones((1, 2, n), f32), net.discrete, 0.1, A)
                ks["fisher_product"](*args[:7], np.zeros((1, D), f32), *args[7:],
                                     np.zeros((1, D), f32))
                if "cg_steps" in kernels:
                    ks["cg_steps"](args, np.ones((1, D), f32), 2, 1e-10, False)
                if "natural_step" in kernels:
                    ks["natural_step"](args, np.ones((1, D), f32), 2, 1e-10, False, 0.01)
            D = 2 * d + 2 + 3 * n + n  # one hidden layer of 2, the critic and the log-std
            policy = records.Policy(np.zeros((1, D), f32), np.array((d, 2, n), np.int64), relu,
                                    net.discrete, 0, D - n)
            batch = (np.zeros((1, 2, d), f32), *self._actions_in(
                net, torch.zeros((1, 2), dtype=torch.long) if net.discrete
                else torch.zeros((1, 2, n))), np.zeros((1, 2), f32), np.zeros((1, 2), f32))
            if "surrogate_kl" in kernels and net.hidden_sizes:
                ks["surrogate_kl"](policy, *batch, np.zeros((1, 2, n), f32), np.zeros((1, D), f32),
                                   np.zeros((1, 2)), _mask(None))
            if "line_search" in kernels and net.hidden_sizes:
                theta = np.zeros((1, D), f32)
                ks["line_search"]((*policy[1:], *batch, np.zeros((1, 2, n), f32), theta,
                                   _mask(None)), theta, theta, np.zeros(1, f32), 0.01,
                                  np.ones(2, f32), np.ones(1, np.bool_), False)
            if "policy_gradient" in kernels and net.hidden_sizes:
                ks["policy_gradient"](policy, *batch, np.zeros((1, D), f32),
                                      np.zeros((1, 2, n), f32), np.zeros(1), _mask(None))

    def fit_critic(self, net: PopActorCritic, opt: PopAdam, obs: Tensor, returns: Tensor,
                   order: Tensor, minibatch_size: int, lr: float | Tensor) -> Tensor:
        """`algos.common.fit_critic` in one compiled call: for each epoch e, the minibatches of
        `minibatch_size` samples in the order order[e] [P, N] (each member's shuffle), 1/2 (V -
        R)^2 per minibatch, its gradient through the critic MLP and one Adam step of `opt` (the
        critic's optimizer, over the flat parameters' critic columns). Returns each member's
        mean loss over the last epoch [P]."""
        flat = net.flat.detach()
        c0 = net.critic_slice.start
        if not (flat.is_contiguous() and opt.m.is_contiguous() and opt.v.is_contiguous()
                and opt.param.data_ptr() == flat[:, c0:].data_ptr()):
            raise ValueError("the compiled critic fit needs the critic's Adam over the "
                             "contiguous flat parameters' critic columns")
        P = obs.shape[0]
        last = np.zeros(P, np.float32)
        b1, b2 = opt.betas
        _kernels()["critic_fit"](
            flat.numpy(), c0, np.array((net.obs_dim, *net.hidden_sizes, 1), np.int64),
            net.activation == "relu",
            records.Adam(opt.m.numpy(), opt.v.numpy(), opt.t.numpy(), float(lr), float(b1),
                         float(b2), float(opt.eps)),
            np.ascontiguousarray(_np(obs), np.float32),
            np.ascontiguousarray(_np(returns), np.float32), np.ascontiguousarray(_np(order)),
            int(minibatch_size), last)
        opt.count_steps(order.shape[0] * math.ceil(obs.shape[1] / minibatch_size))
        return torch.from_numpy(last)

    def ppo_epochs(self, algo: Any, batch: dict[str, Tensor], order: Tensor, lr: float | Tensor,
                   old_out: Tensor, flat_old: Tensor, objective: Objective,
                   quantiles: tuple[float, ...]) -> dict[str, Tensor]:
        """`algo`'s epochs (a trustrl.algos.ppo.PPO: trust.kl_control.k_epochs) in one
        compiled call, with `objective` as the policy term (PPO-clip's, a variant's or a
        user's, compiled from its source by trustrl.compute.compiled.ppo.epochs_kernel;
        NotCompilable where it does not compile, before any parameter moved): for each epoch
        e, the minibatches of algo.minibatch_size samples of each active member in the order
        order[e] [P, N], each a closed-form gradient, the norm clip and a step of algo.opt
        (Adam over all of flat); with algo.target_kl, after each epoch the diagnostics
        against pi_old (old_out [P, N, n], flat_old [P, D]) and each member's stop. The
        penalty algo.kl_coef on KL(pi_old || pi) per member reads batch["old_out"] and
        batch["flat_old"]. Returns [P] tensors: the last epoch's mean policy_loss,
        value_loss, grad_norm and algo.mb_stat, epochs_run and, with a KL target, the
        diagnostics (`quantiles`: the ratio's quantiles they report). A masked batch (an
        "action_mask" entry [P, N, n]) is masked in the kernel, as the closed form masks it."""
        net, opt, cfg = algo.net, algo.opt, algo.cfg
        flat = net.flat.detach()
        if not (flat.is_contiguous() and flat.dtype == torch.float32
                and opt.param.data_ptr() == flat.data_ptr() and opt.m.is_contiguous()
                and opt.v.is_contiguous() and net.action.kind in ("discrete", "box")):
            raise ValueError("the compiled PPO epoch needs float32 MLP actor-critics with Adam "
                             "over the whole contiguous flat parameters")
        P, N = batch["logp_old"].shape
        f32 = np.float32
        acts = batch["actions"]
        if algo.kl_coef is None:
            kl_args: tuple[Any, ...] = (np.zeros(P), np.zeros((1, 1, 1), f32),
                                        np.zeros((1, 1), f32))
        else:
            kl_args = (np.ascontiguousarray(_np(algo.kl_coef), np.float64),
                       np.ascontiguousarray(_np(batch["old_out"]), f32),
                       np.zeros((1, 1), f32) if net.discrete else np.ascontiguousarray(
                           _np(net.log_std(batch["flat_old"])).reshape(P, -1), f32))
        b1, b2 = opt.betas
        t = opt.t.numpy().copy()  # the kernel counts on a copy; count_steps counts for real
        _kernels()
        from trustrl.compute.compiled import ppo

        kernel = ppo.epochs_kernel(objective.fn, objective.grad)
        res = np.zeros((P, 7 + len(quantiles)), np.float64)
        last, runs = np.zeros((P, 5), f32), np.zeros(P, f32)
        kl_stop = algo.target_kl is not None
        args = (
            records.Update(
                _policy(net),
                records.Adam(opt.m.numpy(), opt.v.numpy(), t, float(lr), float(b1), float(b2),
                             float(opt.eps)),
                records.Batch(
                    np.ascontiguousarray(_np(batch["obs"]), f32),
                    # the actions: int64 [P, N] or float32 [P, N, n]; the other a placeholder
                    np.ascontiguousarray(_np(acts), np.int64) if net.discrete
                    else np.zeros((1, 1), np.int64),
                    np.zeros((1, 1, 1), f32) if net.discrete
                    else np.ascontiguousarray(_np(acts), f32),
                    *(np.ascontiguousarray(_np(batch[k]), f32)
                      for k in ("logp_old", "advantages", "returns", "values_old")),
                    _mask(batch.get("action_mask"))),
                _loss(cfg, objective, algo.clip_eps), records.Penalty(*kl_args),
                np.zeros(flat.shape, f32), np.ascontiguousarray(_np(old_out), f32),
                np.ascontiguousarray(_np(flat_old), f32), np.array(quantiles, np.float64),
                res),
            np.ascontiguousarray(_np(order)), int(algo.minibatch_size), np.ones(P, np.bool_),
            kl_stop, f32(algo.target_kl if kl_stop else 0.0), True, last, runs)
        _compiling_objective(f"ppo_epochs:{kernel.source_tag}", "compiling PPO's update (once "
                             "per machine, about a minute; cached on disk)", kernel, *args)
        _count_epochs(opt, runs, order.shape[0], math.ceil(N / algo.minibatch_size))
        s = torch.from_numpy(last)
        columns = ("policy_loss", "value_loss", "grad_norm", "clip_fraction_mb", "kl_penalty")
        out = {k: s[:, columns.index(k)] for k in ("policy_loss", "value_loss", "grad_norm",
                                                     algo.mb_stat)}
        if kl_stop:  # the diagnostics after the last epoch run: of every final policy
            out.update(_diagnostics(res, algo.clip_eps, quantiles))
        out["epochs_run"] = torch.from_numpy(runs)
        return out

    def ppo_iteration(self, algo: Any, rollout: CompiledRollout, state: tuple[Any, ...],
                      noise: Tensor, resets: Tensor, order: Tensor, lr: float,
                      objective: Objective, quantiles: tuple[float, ...]
                      ) -> dict[str, np.ndarray]:
        """A whole PPO iteration of the batched collector as one compiled call
        (trustrl.compute.compiled.iteration), for `algo` (a trustrl.algos.ppo.PPO: its
        network, optimiser, config, minibatch size, clip range and KL target): `rollout`'s T
        steps from the collector's carried `state` (BatchedCollector.rollout_state, moved on
        in place), the values, GAE, the K epochs of minibatch steps in the orders order
        [K, P, T*N] (each member stopping on its own past algo.target_kl), the diagnostics
        and the learner's metrics. Adam's step counts are advanced in algo.opt as the epochs'
        calls would. Returns NumPy arrays:
        term, trunc, fin_ret, fin_len [T, P, N]; last [P, 4] (the last epoch's mean policy
        loss, value loss, grad norm, clip fraction); epochs_run [P]; diag [P, 7 + len(
        quantiles)] (ppo_diagnostics' columns); stats [P, 5] (STATS)."""
        net, opt, cfg = algo.net, algo.opt, algo.cfg
        minibatch_size, clip_eps, target_kl = algo.minibatch_size, algo.clip_eps, algo.target_kl
        T, P, N, _ = noise.shape
        f32 = np.float32
        out = {"term": np.empty((T, P, N), bool), "trunc": np.empty((T, P, N), bool),
               "fin_ret": np.empty((T, P, N), np.float64),
               "fin_len": np.empty((T, P, N), np.int64), "last": np.empty((P, 4), f32),
               "epochs_run": np.empty(P, f32),
               "diag": np.empty((P, 7 + len(quantiles)), np.float64),
               "stats": np.empty((P, 5), np.float64),
               "action_mask": np.empty((T, P, N, net.n_out) if rollout.masked else (0, 0, 0, 0),
                                       np.bool_)}
        b1, b2 = opt.betas
        t = opt.t.numpy().copy()  # the kernel counts on a copy; count_steps counts for real
        kernel = rollout.iteration(objective)
        args = (rollout.dynamics.k, _policy(net),
                records.Draws(np.ascontiguousarray(noise.numpy(), f32), resets.numpy()),
                *state, float(cfg.gamma * cfg.gae_lambda),
                records.Adam(opt.m.numpy(), opt.v.numpy(), t, float(lr), float(b1), float(b2),
                             float(opt.eps)),
                records.Epochs(np.ascontiguousarray(_np(order)), int(minibatch_size),
                               target_kl is not None, float(target_kl or 0.0)),
                _loss(cfg, objective, clip_eps), np.array(quantiles, np.float64),
                records.IterationOut(out["term"], out["trunc"], out["fin_ret"],
                                     out["fin_len"], out["last"], out["epochs_run"],
                                     out["diag"], out["stats"], out["action_mask"]))
        _compiling_objective(f"ppo_iteration:{rollout.dynamics.env_id}:{kernel.source_tag}",
                              f"compiling PPO's iteration on {rollout.dynamics.env_id} (once "
                              f"per machine, about {ITERATION_COMPILE_SECONDS / 60:.0f} "
                              "minutes; cached on disk)", kernel, *args)
        _count_epochs(opt, out["epochs_run"], order.shape[0], -(-(T * N) // minibatch_size))
        return out

    @staticmethod
    def _actions_in(net: PopActorCritic, actions: Tensor) -> tuple[np.ndarray, np.ndarray]:
        """The kernels' (act_i, act_f) for `actions`: a softmax's as int64 [P, B] with a
        placeholder for the other, a Gaussian's as float32 [P, B, n]."""
        if net.discrete:
            return np.ascontiguousarray(_np(actions), np.int64), np.zeros((1, 1, 1), np.float32)
        return np.zeros((1, 1), np.int64), np.ascontiguousarray(_np(actions), np.float32)

    @torch.no_grad()
    def policy_gradient(self, net: PopActorCritic, obs: Tensor, actions: Tensor,
                        logp_old: Tensor, adv: Tensor, flat_old: Tensor,
                        action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """`ClosedForm.policy_gradient` in one compiled call (kernels.policy_gradient) for an
        MLP with hidden layers, masked by `action_mask` [P, B, n] where given (old_out then
        the masked logits); the closed form in torch otherwise."""
        if not _mlp_on_cpu(net) or not net.hidden_sizes:
            return super().policy_gradient(net, obs, actions, logp_old, adv, flat_old,
                                           action_mask)
        f32 = np.float32
        P, B = logp_old.shape
        grad = np.empty((P, net.flat.shape[1]), f32)
        old_out = np.empty((P, B, net.n_out), f32)
        res = np.empty(P, np.float64)
        policy = _policy(net)._replace(flat=np.ascontiguousarray(_np(flat_old), f32))
        args = (policy, np.ascontiguousarray(_np(obs), f32), *self._actions_in(net, actions),
                np.ascontiguousarray(_np(logp_old), f32), np.ascontiguousarray(_np(adv), f32),
                grad, old_out, res, _mask(action_mask))
        _first_call_announced("policy_gradient", "compiling the policy gradient (once per "
                              "machine, about 10 s; cached on disk)",
                              _kernels()["policy_gradient"], *args)
        return (torch.from_numpy(grad), torch.from_numpy(res).to(torch.float32),
                torch.from_numpy(old_out))

    @torch.no_grad()
    def surrogate_kl(self, net: PopActorCritic, batch: dict[str, Tensor], adv: Tensor,
                     old_out: Tensor, flat_old: Tensor, cand: Tensor
                     ) -> tuple[Tensor, Tensor] | None:
        """TRPO's line-search evaluation at the parameters cand [P, D] in one compiled call
        (kernels.surrogate_kl): (mean(rho A), mean KL(pi_old || pi)) per member, float32,
        over the valid actions of a masked batch (its "action_mask"); None where the kernels
        do not apply (the caller computes them with torch)."""
        if not _mlp_on_cpu(net) or not net.hidden_sizes:
            return None
        f32 = np.float32
        P = batch["logp_old"].shape[0]
        res = np.empty((P, 2), np.float64)
        policy = _policy(net)._replace(flat=np.ascontiguousarray(_np(cand), f32))
        args = (policy, np.ascontiguousarray(_np(batch["obs"]), f32),
                *self._actions_in(net, batch["actions"]),
                np.ascontiguousarray(_np(batch["logp_old"]), f32),
                np.ascontiguousarray(_np(adv), f32), np.ascontiguousarray(_np(old_out), f32),
                np.ascontiguousarray(_np(flat_old), f32), res, _mask(batch.get("action_mask")))
        _first_call_announced("surrogate_kl", "compiling TRPO's line-search evaluation (once "
                              "per machine, about 10 s; cached on disk)",
                              _kernels()["surrogate_kl"], *args)
        r = torch.from_numpy(res).to(torch.float32)
        return r[:, 0], r[:, 1]

    @staticmethod
    def learner_stats(done: Tensor, fin_ret: Tensor, fin_len: Tensor, values_old: Tensor,
                      returns: Tensor) -> tuple[Tensor, ...] | None:
        """The batched learner's per-member metrics of an unfused iteration: episodes, mean
        return and length of the episodes that ended (trustrl.maths.diagnostics.episode_stats,
        from done, fin_ret, fin_len [T, P, N]) and the explained variance and fresh value loss
        (critic_stats, from V_old and the returns [P, B]), each compiled from that source (the
        functions the fused iteration calls), in float64 as the learner's torch call; None off
        the CPU."""
        if any(x.device.type != "cpu" for x in (done, fin_ret, values_old)):
            return None
        from trustrl.compute.compiled import iteration

        f64 = np.float64
        ep = _first_call_announced(
            "episode_stats", "compiling the learner's metrics (once per machine, about 5 s; "
            "cached on disk)", iteration.episode_stats, np.ascontiguousarray(_np(done)),
            np.ascontiguousarray(_np(fin_ret), f64), np.ascontiguousarray(_np(fin_len), f64),
            np.nan)
        cs = _first_call_announced(
            "critic_stats", "compiling the learner's metrics (once per machine, about 5 s; "
            "cached on disk)", iteration.critic_stats,
            np.ascontiguousarray(_np(values_old), f64), np.ascontiguousarray(_np(returns), f64),
            np.nan)
        return tuple(torch.from_numpy(np.asarray(x)) for x in (*ep, *cs))

    @torch.no_grad()
    def line_search_evaluation(self, net: PopActorCritic, batch: dict[str, Tensor],
                               adv: Tensor, old_out: Tensor, flat_old: Tensor
                               ) -> Callable[[Tensor], tuple[Tensor, Tensor]] | None:
        """TRPO's line-search evaluation at candidates cand [P, D] (`surrogate_kl`), its
        arguments converted once, with the whole search compiled as its `search`
        (trust.line_search.line_search_steps bound to kernels.surrogate_kl_of: one call);
        None where the kernels do not apply."""
        if not _mlp_on_cpu(net) or not net.hidden_sizes:
            return None
        f32 = np.float32
        policy = _policy(net)
        args = (*policy[1:], np.ascontiguousarray(_np(batch["obs"]), f32),
                *self._actions_in(net, batch["actions"]),
                np.ascontiguousarray(_np(batch["logp_old"]), f32),
                np.ascontiguousarray(_np(adv), f32), np.ascontiguousarray(_np(old_out), f32),
                np.ascontiguousarray(_np(flat_old), f32), _mask(batch.get("action_mask")))
        kernel = _kernels()["line_search"]

        def evaluate(cand: Tensor) -> tuple[Tensor, Tensor]:
            got = self.surrogate_kl(net, batch, adv, old_out, flat_old, cand)
            assert got is not None
            return got

        def search(theta_old: Tensor, full_step: Tensor, surrogate_old: Tensor, max_kl: float,
                   fracs: Tensor, searching: Tensor, lockstep: bool) -> tuple[Tensor, ...]:
            got = _first_call_announced(
                "line_search", "compiling TRPO's line search (once per machine, about 10 s; "
                "cached on disk)", kernel, args, np.ascontiguousarray(_np(theta_old), f32),
                np.ascontiguousarray(_np(full_step), f32),
                np.ascontiguousarray(_np(surrogate_old), f32), float(max_kl),
                np.ascontiguousarray(_np(fracs), f32), np.ascontiguousarray(_np(searching)),
                bool(lockstep))
            return tuple(torch.from_numpy(a) for a in got)

        evaluate.search = search  # type: ignore[attr-defined]  # trust.line_search's hook
        return evaluate

    @torch.no_grad()
    def diagnostics(self, net: PopActorCritic, batch: dict[str, Tensor], old_out: Tensor,
                    flat_old: Tensor, clip_eps: float, quantiles: tuple[float, ...]
                    ) -> dict[str, Tensor] | None:
        """`algos.common.diagnostics` in one compiled call (the actor's forward pass on the
        whole batch, the log-probabilities, entropies, KLs, clip fraction and the ratio's
        order statistics), for MLP networks with a Discrete or Box action; None for another
        network (the caller then computes them with torch). Loaded (or compiled, saying so)
        at its first call in a process. `quantiles`: the ratio's quantiles to report
        (those of algos.common). A masked batch (an "action_mask" entry) is masked in the
        kernel."""
        if not _mlp_on_cpu(net):
            return None
        kernel = _kernels()["ppo_diagnostics"]
        P = batch["logp_old"].shape[0]
        f32 = np.float32
        acts = batch["actions"]
        res = np.empty((P, 7 + len(quantiles)), np.float64)
        args = (_policy(net), np.ascontiguousarray(_np(batch["obs"]), f32),
                np.ascontiguousarray(_np(acts), np.int64) if net.discrete
                else np.zeros((1, 1), np.int64),
                np.zeros((1, 1, 1), f32) if net.discrete else np.ascontiguousarray(_np(acts), f32),
                np.ascontiguousarray(_np(batch["logp_old"]), f32),
                np.ascontiguousarray(_np(old_out), f32), np.ascontiguousarray(_np(flat_old), f32),
                float(clip_eps), np.array(quantiles, np.float64), res,
                _mask(batch.get("action_mask")))
        _first_call_announced("ppo_diagnostics", "compiling the diagnostics (once per machine, "
                              "about 10 s; cached on disk)", kernel, *args)
        return _diagnostics(res, clip_eps, quantiles)

    @torch.no_grad()
    def fisher_product(self, net: PopActorCritic, obs: Tensor, old_out: Tensor,
                       flat_old: Tensor, damping: float, action_mask: Tensor | None = None
                       ) -> Callable[[Tensor], Tensor]:
        """`ClosedForm.fisher_product` with each product one compiled call (the actor's
        hidden outputs at theta_old computed once, by the compiled forward pass), and the
        conjugate gradient on these products as one compiled call (its `solve`). As the
        closed form's, it reads no mask: on a masked batch old_out holds pi_old's masked
        logits, so M = diag(p) - p p^T is 0 on the invalid actions (tests/test_masking_compiled.py
        holds it to the autograd Hessian of the masked KL)."""
        if not net.hidden_sizes:
            return super().fisher_product(net, obs, old_out, flat_old, damping)
        flat_np = np.ascontiguousarray(_np(flat_old))
        obs_np = np.ascontiguousarray(_np(obs), np.float32)
        sizes = np.array((net.obs_dim, *net.hidden_sizes, net.n_out), np.int64)
        relu, discrete = net.activation == "relu", net.discrete
        forward = _kernels()["mlp_forward"]  # the hidden outputs at theta_old, per member
        per_member = [forward(flat_np[p], sizes, relu, obs_np[p])[1:]
                      for p in range(flat_np.shape[0])]
        # a tuple of arrays, not a numba.typed.List: Numba types a tuple of arrays in its C
        # dispatcher, where a typed List (and a tuple holding one) costs about 1 ms of Python
        # typing per call (a tenth of a TRPO iteration on the batched CartPole)
        hidden = tuple(np.stack([acts[layer] for acts in per_member])
                       for layer in range(len(net.hidden_sizes)))
        if net.discrete:
            m_out = torch.softmax(old_out, dim=-1)
            ls_off = 0
        else:
            m_out = torch.exp(-2.0 * net.log_std(flat_old))
            ls_off = net.segments[-1].offset
        m_np = np.ascontiguousarray(_np(m_out), np.float32)
        kernel = _kernels()["fisher_product"]

        def fvp(v: Tensor) -> Tensor:
            out = np.empty(v.shape, np.float32)
            kernel(flat_np, sizes, relu, obs_np, hidden, m_np, discrete,
                   np.ascontiguousarray(_np(v), np.float32), float(damping), ls_off, out)
            return torch.from_numpy(out)

        args = (flat_np, sizes, relu, obs_np, hidden, m_np, discrete, float(damping), ls_off)
        steps = _kernels()["cg_steps"]

        def solve(b: Tensor, iters: int, residual_tol: float,
                  lockstep: bool) -> tuple[Tensor, Tensor, Tensor]:
            """trust.cg.cg_steps on these products, compiled: the whole CG in one call."""
            x, k, res = steps(args, np.ascontiguousarray(_np(b), np.float32), int(iters),
                              float(residual_tol), bool(lockstep))
            return torch.from_numpy(x), torch.from_numpy(k), torch.from_numpy(res)

        natural = _kernels()["natural_step"]

        def natural_step(g: Tensor, iters: int, residual_tol: float, lockstep: bool,
                         max_kl: float) -> tuple[Tensor, ...]:
            """trust.cg.natural_step on these products, compiled: the CG, x^T F x and the
            step in one call (float32 results, as the eager step's)."""
            got = natural(args, np.ascontiguousarray(_np(g), np.float32), int(iters),
                          float(residual_tol), bool(lockstep), float(max_kl))
            return tuple(torch.from_numpy(a if a.dtype != np.float64 else a.astype(np.float32))
                         for a in got)

        fvp.solve = solve  # type: ignore[attr-defined]  # trust.cg.conjugate_gradient's hook
        fvp.natural_step = natural_step  # type: ignore[attr-defined]  # algos.trpo's hook
        return fvp


def _count_epochs(opt: PopAdam, runs: np.ndarray, K: int, n_mb: int) -> None:
    """Advance Adam's step counts as the compiled epochs did on a copy: `n_mb` steps an epoch,
    for each member the epochs_run `runs` [P] it ran of K."""
    if bool((runs == K).all()):
        opt.count_steps(K * n_mb)
    else:  # each epoch, the members still active
        for e in range(int(runs.max())):
            opt.count_steps(n_mb, torch.from_numpy(runs > e))


def _diagnostics(res: np.ndarray, clip_eps: float, quantiles: tuple[float, ...]
                 ) -> dict[str, Tensor]:
    """kernels.ppo_diagnostics' columns `res` [P, 7 + len(quantiles)] as the diagnostics'
    entries (algos.common.diagnostics')."""
    r = torch.from_numpy(res)
    f = r.to(torch.float32)
    d = {"entropy": f[:, 0], "approx_kl": f[:, 1], "approx_kl_k1": f[:, 2],
         "kl_exact": f[:, 3], "clip_fraction": f[:, 4],
         "clip_eps": torch.full((r.shape[0],), clip_eps), "ratio_min": f[:, 5],
         "ratio_max": f[:, 6]}
    for j, q in enumerate(quantiles):
        d[f"ratio_q{int(round(q * 100)):02d}"] = r[:, 7 + j]
    return d


def _mask(mask: Tensor | None) -> np.ndarray:
    """The kernels' `mask`: a masked batch's valid actions [P, B, n] as a C-contiguous bool
    array, or the zero-size sentinel of an unmasked one (kernels.NO_MASK, the same type)."""
    if mask is None:
        from trustrl.compute.compiled.kernels import NO_MASK

        return NO_MASK
    return np.ascontiguousarray(_np(mask), np.bool_)


def _policy(net: PopActorCritic) -> records.Policy:
    """The kernels' view of an MLP population (NumPy views: a kernel moves the parameters
    in place)."""
    return records.Policy(net.flat.detach().numpy(),
                          np.array((net.obs_dim, *net.hidden_sizes, net.n_out), np.int64),
                          net.activation == "relu", net.discrete, net.critic_slice.start,
                          0 if net.discrete else net.segments[-1].offset)


def _loss(cfg: Any, objective: Objective, clip_eps: float) -> records.Loss:
    """PPO.loss's settings for the kernels."""
    return records.Loss(float(clip_eps), float(cfg.vf_coef), float(cfg.ent_coef),
                        bool(cfg.norm_adv), tuple(map(float, objective.args)),
                        bool(getattr(cfg, "clip_value_loss", False)), float(cfg.max_grad_norm))


def gae(rewards: Tensor, values: Tensor, next_values: Tensor, terminated: Tensor,
        truncated: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """trustrl.maths.advantages.gae_numpy with the recursion (advantages.gae_into) compiled: the
    same
    float32 operations in the same order, so the same bits. Returns
    (advantages, returns = advantages + values)."""
    T = rewards.shape[0]
    flat = [np.ascontiguousarray(_np(x)).reshape(T, -1)
            for x in (rewards, values, next_values, terminated, truncated)]
    if flat[0].dtype != np.float32:
        raise ValueError("the compiled GAE takes float32 rewards and values")
    adv = np.empty(flat[0].shape, np.float32)
    not_term, not_done = done_masks(flat[3], flat[4], np.float32)
    _kernels()["gae"](adv, *flat[:3], not_term, not_done, np.float32(gamma),
                      np.float32(gamma * lam))
    a = torch.from_numpy(adv).view(rewards.shape)
    return a, a + values


def compiled_dynamics(env_id: str, dtype: Any = np.float32) -> Any:
    """The dynamics of one of the five classic-control envs (trustrl.envs.classic.DYNAMICS)
    compiled by Numba from the source the NumPy and torch envs run (over
    trustrl.compute.compiled.xp):
    the same ``transition``, on NumPy arrays."""
    from trustrl.compute.compiled import xp
    from trustrl.envs import classic

    _kernels()
    return classic.DYNAMICS[env_id](xp, dtype, wrap=xp.jit)


class CompiledRollout:
    """The compiled rollout of one classic-control env (trustrl.compute.compiled.rollout): the env's
    dynamics compiled from trustrl.envs.classic's source over trustrl.compute.compiled.xp."""

    def __init__(self, env_id: str, masked: bool = False) -> None:
        from trustrl.compute.compiled import rollout

        self.dynamics = compiled_dynamics(env_id, np.float32)
        self.masked = masked
        """Whether actions are drawn under the env's masks (an env with masks, action_mask
        not 'off'): the rollout then writes them (records.Steps.action_mask)."""
        if masked and not self.dynamics.masked:
            raise ValueError(f"{env_id} gives no action masks")
        self._run = rollout.bind(self.dynamics, masked)
        _typed_once(self._run, self.dynamics.k)
        self._ready = False
        self._iterations: dict[Any, Any] = {}

    def run(self, *args: Any) -> Any:
        """trustrl.compute.compiled.rollout.rollout with this env's constants. The first call in a
        process loads the rollout (and GAE, which the learner calls next) from the disk cache
        or, the first time on a machine, compiles them (about a minute: 46-62 s on CartPole-v1,
        2026-12-07), saying so on stderr when it compiles."""
        if self._ready:
            return self._run(self.dynamics.k, *args)
        gae = _kernels()["gae"]
        with _announce_compiling(f"compiling the rollout of {self.dynamics.env_id} (once per "
                                 "machine, about a minute; cached on disk)", self._run, gae):
            out = self._run(self.dynamics.k, *args)
            f32 = np.float32
            gae(*(np.zeros((1, 1), f32),) * 6, f32(0.99), f32(0.95))
        self._ready = True
        return out

    def iteration(self, objective: Objective) -> Any:
        """trustrl.compute.compiled.iteration.ppo_iteration around this env's rollout and the epochs
        of `objective` (bound at the first call for each)."""
        key = (objective.fn, objective.grad)
        it = self._iterations.get(key)
        if it is None:
            from trustrl.compute.compiled import iteration, ppo

            epochs = ppo.epochs_kernel(objective.fn, objective.grad)
            it = self._iterations[key] = iteration.bind(self._run, epochs)
            it.source_tag = epochs.source_tag
        _typed_once(it, self.dynamics.k)
        return it

    def values(self, *args: Any) -> None:
        """trustrl.compute.compiled.rollout.bootstrap_values (the rollout's values and bootstrap
        values), saying so on stderr when its first call in a process compiles it."""
        from trustrl.compute.compiled import rollout

        _first_call_announced("bootstrap_values", "compiling the rollout's values (once per "
                              "machine, about 5 s; cached on disk)", rollout.bootstrap_values,
                              *args)


class CompiledActing:
    """The Gymnasium collector's per-step policy work for one member's MLP actor-critic with a
    Box or Discrete action (trustrl.compute.compiled.rollout.gaussian_step, categorical_step): the
    actor's and critic's forward passes, the sample from torch's own draw (the normal noise
    of a Gaussian sample; the Exp(1) numbers of torch.multinomial), its log-probability and
    the records' row, one compiled call per env step instead of some twenty torch operations
    (about 100 us a step on MuJoCo's 256x256 networks). Equal to `ActorCritic.sample_step` to
    float rounding (tests/test_compiled.py); the draws are torch's, so a run keeps its random
    stream."""

    def __init__(self, net: PopActorCritic) -> None:
        from trustrl.compute.compiled import rollout

        self.net = net
        self._kernel = rollout.categorical_step if net.discrete else rollout.gaussian_step
        hidden = net.hidden_sizes
        self._sizes_a = np.array((net.obs_dim, *hidden, net.n_out), np.int64)
        self._sizes_c = np.array((net.obs_dim, *hidden, 1), np.int64)
        self._c0 = net.critic_slice.start
        self._ls_off = 0 if net.discrete else net.segments[-1].offset
        self._relu = net.activation == "relu"
        self._records: Any = None
        self._flat = np.zeros(0, np.float32)

    def begin(self, obs: Tensor, actions: Tensor, logp: Tensor, values: Tensor, out: Tensor
              ) -> None:
        """Start a rollout writing into these record tensors [T, N, ...] (CPU, float32): the
        current parameters are read from the network's flat row."""
        self._flat = self.net.flat.detach().numpy()[0]
        self._records = records.Rows(*(r.numpy() for r in (obs, actions, logp, values, out)))

    def step(self, t: int, x: Tensor) -> Tensor:
        """Row t of the records from the network inputs x [N, D]; returns the actions ([N, n]
        for a Box, [N] for Discrete: a view of the actions' record). The first call in a
        process loads the kernel from the disk cache or, the first time on a machine, compiles
        it, saying so on stderr."""
        shape = (x.shape[0], self.net.n_out)
        xs = np.ascontiguousarray(x.numpy(), np.float32)
        if self.net.discrete:  # torch.multinomial's draw for one sample per row
            q = torch.empty(shape, dtype=torch.float32).exponential_(1).numpy()
            args = (self._flat, self._sizes_a, self._c0, self._sizes_c, self._relu, xs, q, t,
                    self._records)
        else:  # DiagGaussian.sample's: torch.randn_like(means)
            noise = torch.randn(shape, dtype=torch.float32).numpy()
            args = (self._flat, self._sizes_a, self._c0, self._sizes_c, self._relu,
                    self._ls_off, xs, noise, t, self._records)
        _first_call_announced(self._kernel.__name__, "compiling the policy's step (once per "
                              "machine, about 10 s; cached on disk)", self._kernel, *args)
        return torch.from_numpy(self._records.actions[t])


def acting(net: Any, backend: Any) -> CompiledActing | None:
    """The compiled per-step policy for the Gymnasium collector where it applies: the compiled
    backend (so Numba is installed and the network is the MLP population network on the CPU,
    with a Discrete or Box action); None otherwise (the collector then calls the policy
    module)."""
    if isinstance(backend, Compiled) and _mlp_on_cpu(net) and net.population == 1:
        _kernels()
        return CompiledActing(net)
    return None


def _mlp_on_cpu(net: Any) -> bool:
    """Whether the kernels apply to `net`: the closed-form MLP population network, float32 on
    the CPU, with a Discrete or Box action."""
    return (getattr(net, "closed_form", False) and net.action.kind in ("box", "discrete")
            and net.flat.device.type == "cpu" and net.flat.dtype == torch.float32)


_TYPED_MAX = 64


def _typed_once(kernel: Any, value: Any) -> None:
    """Let the Numba dispatcher `kernel` type `value` (an env's constants, passed on every
    call) from a table, by identity, instead of afresh on every call. Numba types the other
    arguments (arrays, numbers) in C, but falls back to Python for a namedtuple holding
    NumPy dtypes: about 95 us a call, 2% of a single seed's compiled CartPole iteration. The
    type is the dispatcher's own answer for the same object (the constants are never
    modified); any other object is typed as before."""
    known = kernel.__dict__.get("_trustrl_typed")
    if known is None:
        known = {}
        fallback = kernel.typeof_pyval

        def typeof_pyval(val: Any) -> Any:  # numba._dispatcher's fallback for such values
            hit = known.get(id(val))
            return hit[1] if hit is not None and hit[0] is val else fallback(val)

        kernel.typeof_pyval = typeof_pyval
        kernel._trustrl_typed = known
    if id(value) not in known:
        if len(known) >= _TYPED_MAX:  # a bound on what the table keeps alive
            known.clear()
        known[id(value)] = (value, type(kernel).typeof_pyval(kernel, value))


def _first_call_announced(name: str, what: str, kernel: Any, *args: Any) -> Any:
    """kernel(*args). Its first call in a process (by `name`) loads it from the disk cache or,
    the first time on a machine, compiles it: then "trustrl: <what>" goes to stderr."""
    if _READY.get(name):
        return kernel(*args)
    with _announce_compiling(what, kernel):
        out = kernel(*args)
    _READY[name] = True
    return out


def _compiling_objective(name: str, what: str, kernel: Any, *args: Any) -> Any:
    """`_first_call_announced` for a kernel bound to an algorithm's objective: where Numba
    cannot compile the objective (its typing fails, before the kernel runs), NotCompilable."""
    if _READY.get(name):
        return kernel(*args)
    from numba.core.errors import NumbaError

    try:
        return _first_call_announced(name, what, kernel, *args)
    except NumbaError as e:
        lines = [ln.strip() for ln in str(e).splitlines()
                 if ln.strip() and not ln.startswith("Failed in")]
        raise NotCompilable(lines[0] if lines else type(e).__name__) from e


@contextlib.contextmanager
def _announce_compiling(what: str, *kernels: Any) -> Any:
    """Print "trustrl: <what>" on stderr before the block and how long it took after it, when
    one of `kernels` has no compiled code on disk for its current source (the first run on a
    machine, or an edited checkout): loading cached code says nothing, however long a loaded
    machine takes to do it. What the block compiles, LLVM optimises at `OPT_LEVEL`."""
    announce = not all(_cached(k) for k in kernels)
    if announce:
        print(f"trustrl: {what}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        with _opt_level():
            yield
    finally:
        if announce:
            print(f"trustrl: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
                  flush=True)


OPT_LEVEL = 2
"""LLVM's optimisation level for the kernels trustrl compiles (what Numba's NUMBA_OPT sets; its
default is 3), unless the user set NUMBA_OPT: on PPO's fused iteration level 2 compiled in
0.59x the time of level 3 (131 s against 220 s) and trained as fast, within the noise of the
measurement (docs/compiled.md, "LLVM's optimisation level")."""


@contextlib.contextmanager
def _opt_level() -> Any:
    """Numba's optimisation level set to `OPT_LEVEL` for the block (what Numba compiles in it:
    its pass builders read the level at each compile), and back after it; where the user set
    NUMBA_OPT, theirs."""
    from numba.core import config

    before = config.OPT
    if "NUMBA_OPT" in os.environ or before != 3 or getattr(before, "is_opt_max", False):
        yield  # the user's level (or one set in this process) stands
        return
    config.OPT = type(before)(OPT_LEVEL)
    try:
        yield
    finally:
        config.OPT = before


_ROLLOUTS: dict[tuple[str, bool], CompiledRollout] = {}


def compiled_rollout(env_id: str, masked: bool = False) -> CompiledRollout:
    """The (per process cached) compiled rollout of ``env_id``, one of the batched envs
    (trustrl.envs.classic.DYNAMICS), its actions drawn under the env's masks where `masked`.
    Its code is compiled at its first call (cached on disk after that)."""
    r = _ROLLOUTS.get((env_id, masked))
    if r is None:
        r = _ROLLOUTS[env_id, masked] = CompiledRollout(env_id, masked)
    return r


def run_cached(algo: Any, env_id: str, masked: bool = False, gym: bool = False) -> bool:
    """Whether the compiled code a run of `algo` on `env_id` calls is on disk (Numba's cache,
    as `_cached` tells): the algorithm's kernels (TRPO's critic fit and Fisher product; PPO's
    epochs bound to its objective), GAE, the diagnostics and, on the batched collector, the
    env's compiled rollout (`masked`: drawing under its masks) and fused iteration where it
    has them; on the Gymnasium collector (`gym`), the policy's per-step kernel
    (`CompiledActing`, for an unmasked run). Builds no code."""
    from trustrl.compute.compiled import ppo, rollout
    from trustrl.envs import classic

    ks = _kernels()
    needed = [ks[k] for k in getattr(algo, "kernels", ()) if k in ks]
    needed += [ks["gae"], ks["ppo_diagnostics"]]
    objective = algo.compiled_objective() if hasattr(algo, "compiled_objective") else None
    if objective is not None:
        try:
            needed.append(ppo.epochs_kernel(objective.fn, objective.grad))
        except NotCompilable:  # runs eagerly anyway, and says so
            return True
    if gym:
        if not masked:
            needed.append(rollout.categorical_step if algo.net.discrete
                          else rollout.gaussian_step)
    elif env_id in classic.DYNAMICS:
        r = compiled_rollout(env_id, masked)
        needed.append(r._run)
        if objective is not None:
            needed.append(r.iteration(objective))
    return all(_cached(k) for k in needed)


def _cached(kernel: Any) -> bool:
    """Whether a kernel has compiled code on disk (Numba's cache index file), as far as can be
    told: True when unsure, so that nothing is announced wrongly."""
    try:
        return bool(kernel._cache._cache_file._load_index())
    except Exception:
        return True


def pick(net: Any, choice: str = "auto", compile: bool = False) -> Any:
    """`backends.pick` with this backend: 'compiled' asks for it (an error without Numba or the
    closed form, or off the CPU); 'auto' takes it where the closed form applies on a CPU and
    Numba is installed, unless torch.compile was asked for (`jit = "compile"`)."""
    from trustrl.compute import backends

    on_cpu = net.flat.device.type == "cpu"
    if choice == "compiled":
        if not available():
            raise ValueError("grad_backend 'compiled' needs Numba: pip install "
                             "\"trustrl[compiled]\"")
        if not (net.closed_form and on_cpu):
            raise ValueError("grad_backend 'compiled' needs the MLP population network on "
                             "the CPU")
        return Compiled()
    if choice == "auto" and net.closed_form and on_cpu and not compile and available():
        return Compiled()
    return backends.pick(net, choice, compile)
