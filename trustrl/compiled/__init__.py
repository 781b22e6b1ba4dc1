"""The compiled gradient backend: the closed form, with whole loops compiled by Numba (CPU).

An eager update pays a dispatch of 2-5 us (torch) per operation on a few thousand numbers, and
TRPO's critic regression is 40 minibatches of some thirty operations each: most of its time is
dispatch (docs/compiled.md). `Compiled` is `ClosedForm` plus one compiled kernel per such loop,
so the loop runs as machine code with no Python between its operations:

    fit_critic     the critic's regression of TRPO and NPG (algos.common.fit_critic): every
                   epoch's shuffled minibatches, the MLP's forward and backward pass and the
                   Adam step, one call per update;
    fisher_product TRPO's and NPG's Fisher-vector product F v = J^T M J v (what
                   ClosedForm.fisher_product computes), one call per product of CG.

The kernels compute what the eager code computes, in the same order of minibatches, with the
same shuffles (drawn by trustrl.rng outside the kernel) and Adam's arithmetic (trustrl.optim);
they agree with the eager closed form to float rounding (tests/test_compiled.py), and a member
of a population computes exactly what it computes alone (the kernel loops over members).

Numba is an optional extra (`pip install "trustrl[compiled]"`: numba, and scipy, whose BLAS
Numba's np.dot calls). Kernels are compiled on first use and cached on disk (`cache=True`:
next to this file, or in Numba's per-user cache folder when that is not writable), so the
compile cost (a few seconds) is paid once per machine; `pick` takes this backend under
`grad_backend = "auto"` only where it is installed.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.backends import ClosedForm
from trustrl.optim import PopAdam
from trustrl.popnet import PopActorCritic


def available() -> bool:
    """Whether Numba and scipy (for np.dot's BLAS) are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("numba", "scipy"))


_KERNELS: dict[str, Any] = {}
_KERNEL_NAMES = ("critic_fit", "fisher_product")


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


def _kernels() -> dict[str, Any]:
    """The compiled functions, built (and loaded from the disk cache) on first use."""
    if not _KERNELS:
        _one_blas_thread()
        from trustrl.compiled import kernels as k  # imports numba: only when used

        _KERNELS.update(critic_fit=k.critic_fit, fisher_product=k.actor_fisher_product)
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
        cold = not all(_cached(ks[k]) for k in kernels)
        if cold:
            print("trustrl: compiling the compiled backend's kernels (once per machine, about "
                  "20 s; cached on disk)", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        d, n, relu = net.obs_dim, net.n_out, net.activation == "relu"
        f32 = np.float32
        if "critic_fit" in kernels:
            D = 2 * d + 5
            ks["critic_fit"](np.zeros((1, D + 1), f32), 1, np.zeros((1, D), f32),
                             np.zeros((1, D), f32), np.zeros(1), np.zeros((1, 2, d), f32),
                             np.zeros((1, 2), f32), np.zeros((1, 1, 2), np.int64),
                             np.array((d, 2, 1), np.int64), relu, 2, 1e-3, 0.9, 0.999, 1e-8,
                             np.zeros(1, f32))
        if "fisher_product" in kernels and net.hidden_sizes:
            from numba.typed import List

            D = 2 * d + 2 + 3 * n + n
            ks["fisher_product"](np.zeros((1, D), f32), np.array((d, 2, n), np.int64), relu,
                                 np.zeros((1, 2, d), f32), List([np.zeros((1, 2, 2), f32)]),
                                 np.ones((1, 2, n), f32), net.discrete, np.zeros((1, D), f32),
                                 0.1, D - n, np.zeros((1, D), f32))
        if cold:
            print(f"trustrl: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
                  flush=True)

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
            flat.numpy(), c0, opt.m.numpy(), opt.v.numpy(), opt.t.numpy(),
            np.ascontiguousarray(_np(obs), np.float32),
            np.ascontiguousarray(_np(returns), np.float32), np.ascontiguousarray(_np(order)),
            np.array((net.obs_dim, *net.hidden_sizes, 1), np.int64), net.activation == "relu",
            int(minibatch_size), float(lr), float(b1), float(b2), float(opt.eps), last)
        opt.count_steps(order.shape[0] * math.ceil(obs.shape[1] / minibatch_size))
        return torch.from_numpy(last)

    @torch.no_grad()
    def fisher_product(self, net: PopActorCritic, obs: Tensor, old_out: Tensor,
                       flat_old: Tensor, damping: float) -> Callable[[Tensor], Tensor]:
        """`ClosedForm.fisher_product` with each product one compiled call (the actor's
        hidden outputs at theta_old computed once, eagerly, as there)."""
        if not net.hidden_sizes:
            return super().fisher_product(net, obs, old_out, flat_old, damping)
        from numba.typed import List

        _, acts = net.mlp_forward("actor", obs, net.views(flat_old))
        hidden = List([np.ascontiguousarray(_np(a)) for a in acts[1:]])
        if net.discrete:
            m_out = torch.softmax(old_out, dim=-1)
            ls_off = 0
        else:
            m_out = torch.exp(-2.0 * net.log_std(flat_old))
            ls_off = net.segments[-1].offset
        flat_np = np.ascontiguousarray(_np(flat_old))
        obs_np = np.ascontiguousarray(_np(obs), np.float32)
        m_np = np.ascontiguousarray(_np(m_out), np.float32)
        sizes = np.array((net.obs_dim, *net.hidden_sizes, net.n_out), np.int64)
        relu, discrete = net.activation == "relu", net.discrete
        kernel = _kernels()["fisher_product"]

        def fvp(v: Tensor) -> Tensor:
            out = np.empty(v.shape, np.float32)
            kernel(flat_np, sizes, relu, obs_np, hidden, m_np, discrete,
                   np.ascontiguousarray(_np(v), np.float32), float(damping), ls_off, out)
            return torch.from_numpy(out)

        return fvp


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
    from trustrl import backends

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
