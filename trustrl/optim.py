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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

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
            self.m.lerp_(grad, 1.0 - b1)
            self.v.mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
            self._apply(self.m, self.v, self.t, lr, None)
            return
        act = active.to(self.t.dtype)
        self.t += act
        mask = active[:, None]
        self.m.copy_(torch.where(mask, torch.lerp(self.m, grad, 1.0 - b1), self.m))
        self.v.copy_(torch.where(mask, self.v * b2 + (1.0 - b2) * grad * grad, self.v))
        self._apply(self.m, self.v, self.t.clamp(min=1), lr, mask)

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
        (trustrl.compiled's kernels update param, m and v themselves, reading each member's
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

    def _apply(self, m: Tensor, v: Tensor, t: Tensor, lr: float | Tensor,
               mask: Tensor | None) -> None:
        b1, b2 = self.betas
        bc1 = 1.0 - torch.pow(b1, t)
        bc2_sqrt = torch.sqrt(1.0 - torch.pow(b2, t))
        step_size = (lr / bc1).to(m.dtype)[:, None]
        denom = v.sqrt() / bc2_sqrt.to(m.dtype)[:, None] + self.eps
        update = m / denom * step_size
        if mask is not None:
            update = torch.where(mask, update, torch.zeros_like(update))
        self.param.sub_(update)

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
