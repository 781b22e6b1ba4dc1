"""Adam for P independent members stored as rows of one tensor [P, D].

The arithmetic is torch.optim.Adam's (single-tensor path): m <- lerp(m, g, 1 - b1);
v <- b2 v + (1 - b2) g^2; p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
Each member keeps its own step count t, and a member masked out by `active` (a PPO member that
early-stopped on its KL) is left exactly as it was: parameters, moments and t.

On a CPU the step is torch's fused Adam kernel (what torch.optim.Adam(fused=True) runs), one
call over the members' rows with their own step counts: about 5 us where the fourteen
elementwise operations above take 35 us for a 4,500-parameter member, and the optimizer step
is taken once per minibatch. A masked-out member's row is simply not passed. On CUDA the
elementwise form stays (the mask is applied on the device, with no host synchronisation, as a
CUDA graph needs).

The step itself is written once, `adam_step`, an elementwise function over a free array
namespace ``o`` (torch here), as trustrl.maths.losses' terms are: PopAdam's elementwise form runs it
on torch tensors and the compiled backend compiles the same code with Numba and calls it on
each element (trustrl.compute.compiled.kernels.adam_, the Adam step of its PPO epochs and critic
fit); tests/test_one_source.py checks the identity.
torch's fused kernel is the library's own implementation of the same arithmetic.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

o: Any = torch
"""The array namespace of `adam_update` (see the module's docstring)."""


def adam_step(param: Any, m: Any, v: Any, grad: Any, one_minus_b1: Any, b2: Any,
              one_minus_b2: Any, eps: Any, step_size: Any, bc2_sqrt: Any) -> tuple[Any, Any, Any]:
    """One Adam step, elementwise (torch.optim.Adam's single-tensor arithmetic): the new
    (param, m, v),

        m <- m + (g - m) (1 - b1)          (torch's lerp of m towards g)
        v <- v b2 + (1 - b2) g^2
        p <- p - m / (sqrt(v) / sqrt(1 - b2^t) + eps) * lr / (1 - b1^t)

    with step_size = lr / (1 - b1^t) and bc2_sqrt = sqrt(1 - b2^t) for this step's count t
    (t includes this step): scalars, or columns [P, 1] of per-member values on arrays [P, D].
    Compiled code calls it on scalars in a loop over the elements, every scalar of the arrays'
    dtype (a float64 one would promote float32 arithmetic). The easy mistake: eps under the
    square root, or the bias corrections of the count before the step."""
    m = m + (grad - m) * one_minus_b1
    v = v * b2 + one_minus_b2 * grad * grad
    return param - m / (o.sqrt(v) / bc2_sqrt + eps) * step_size, m, v


def clip_coefficient(norm: Any, max_norm: Any, eps: Any, one: Any) -> Any:
    """The factor that scales a gradient of global norm `norm` to a norm of at most max_norm:
    max_norm / (norm + eps), at most one (torch.nn.utils.clip_grad_norm_'s), elementwise:
    common.clip_grad_norm runs it on each member's norm [P], the compiled minibatch step on
    the member's float32 norm (one = 1 of that dtype)."""
    coef = max_norm / (norm + eps)
    return o.where(coef < one, coef, one)


_FUSED = hasattr(torch, "_fused_adam_")


class PopAdam:
    def __init__(self, param: Tensor, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.param, self.eps, self.betas = param, eps, betas
        self.m = torch.zeros_like(param)
        self.v = torch.zeros_like(param)
        self.t = torch.zeros(param.shape[0], dtype=torch.float64, device=param.device)
        self.fused = _FUSED and param.device.type == "cpu" and param.dtype == torch.float32
        if self.fused:  # the fused kernel's per-row views and float32 step counts
            P = param.shape[0]
            self._t32 = torch.zeros(P, dtype=torch.float32)
            self._rows = [(param[i], self.m[i], self.v[i], self._t32[i]) for i in range(P)]
            # while every member has taken every step, one call on the whole tensor
            self._t_all = torch.zeros((), dtype=torch.float32)
            self._uniform = param.is_contiguous()

    @torch.no_grad()
    def step(self, grad: Tensor, lr: float | Tensor, active: Tensor | None = None) -> None:
        b1, b2 = self.betas
        if self.fused:
            self._fused_step(grad, lr, active)
            return
        if active is None:
            self.t += 1
            p, m, v = adam_step(self.param, self.m, self.v, grad, 1.0 - b1, b2, 1.0 - b2,
                                self.eps, *self._corrections(self.t, lr))
            self.param.copy_(p)
            self.m.copy_(m)
            self.v.copy_(v)
            return
        # a masked step with no host synchronisation: the step everywhere, kept where active
        mask = active[:, None]
        t = self.t + active.to(self.t.dtype)
        param, m, v = adam_step(self.param, self.m, self.v, grad, 1.0 - b1, b2, 1.0 - b2,
                                self.eps, *self._corrections(t.clamp(min=1), lr))
        self.t.copy_(t)
        self.m.copy_(torch.where(mask, m, self.m))
        self.v.copy_(torch.where(mask, v, self.v))
        self.param.copy_(torch.where(mask, param, self.param))

    def _corrections(self, t: Tensor, lr: float | Tensor) -> tuple[Tensor, Tensor]:
        """Adam's step size lr / (1 - b1^t) and sqrt(1 - b2^t) per member, as columns [P, 1]
        of the parameters' dtype (computed in float64 from the float64 counts)."""
        b1, b2 = self.betas
        step_size = (lr / (1.0 - torch.pow(b1, t))).to(self.m.dtype)[:, None]
        return step_size, torch.sqrt(1.0 - torch.pow(b2, t)).to(self.m.dtype)[:, None]

    def _fused_step(self, grad: Tensor, lr: float | Tensor, active: Tensor | None) -> None:
        keep = (range(len(self._rows)) if active is None
                else [i for i, a in enumerate(active.tolist()) if a])
        if not keep:
            return
        b1, b2 = self.betas
        if self._uniform and len(keep) == len(self._rows):
            self._t_all += 1.0
            torch._fused_adam_(  # type: ignore[attr-defined]
                [self.param], [grad], [self.m], [self.v], [], [self._t_all], lr=float(lr),
                beta1=b1, beta2=b2, weight_decay=0.0, eps=self.eps, amsgrad=False,
                maximize=False)
            self.t += 1
            return
        if self._uniform:  # from now on, each member counts its own steps
            self._uniform = False
            self._t32.fill_(float(self._t_all))
        rows = [self._rows[i] for i in keep]
        steps = [r[3] for r in rows]
        torch._foreach_add_(steps, 1.0)
        torch._fused_adam_(  # type: ignore[attr-defined]
            [r[0] for r in rows], [grad[i] for i in keep], [r[1] for r in rows],
            [r[2] for r in rows], [], steps, lr=float(lr), beta1=b1, beta2=b2,
            weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
        if active is None:
            self.t += 1
        else:
            self.t += active.to(self.t.dtype)

    def count_steps(self, n: int, active: Tensor | None = None) -> None:
        """Count n steps that every member (or every `active` one) took outside `step`
        (trustrl.compute.compiled's kernels update param, m and v themselves, reading each member's
        count from t)."""
        if active is not None and bool(active.all()):
            active = None
        self.t += n if active is None else n * active.to(self.t.dtype)
        if self.fused:
            if self._uniform and active is None:
                self._t_all += float(n)
                return
            if self._uniform:  # from now on, each member counts its own steps
                self._uniform = False
                self._t32.fill_(float(self._t_all))
            self._t32 += float(n) if active is None else float(n) * active.float()

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m.cpu(), "v": self.v.cpu(), "t": self.t.cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        dev = self.param.device
        self.m.copy_(state["m"].to(dev))
        self.v.copy_(state["v"].to(dev))
        self.t.copy_(state["t"].to(dev))
        if self.fused:
            self._t32.copy_(self.t.float())
            self._uniform = bool((self.t == self.t[0]).all()) and self.param.is_contiguous()
            self._t_all.fill_(float(self.t[0]))


class ModuleOptimizer:
    """A torch optimizer over one module's parameters, behind PopAdam's `step(grad, lr,
    active)` for a population of one (P = 1): the gradient row goes into the parameters'
    .grad, the optimizer steps (with its own learning rate), and the network's flat row is
    refreshed from the module. For code that owns its optimizer (the PPO lab's ppo_update)."""

    def __init__(self, optimizer: torch.optim.Optimizer, module: torch.nn.Module, flat: Tensor):
        self.optimizer, self.module, self.flat = optimizer, module, flat

    @torch.no_grad()
    def step(self, grad: Tensor, lr: float | Tensor | None = None,
             active: Tensor | None = None) -> None:
        if active is not None and not bool(active[0]):
            return
        off = 0
        for p in self.module.parameters():
            k = p.numel()
            p.grad = grad[0, off:off + k].view_as(p).to(p.dtype).clone()
            off += k
        self.optimizer.step()
        self.flat[0].copy_(torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]))

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)
