"""Adam for P independent members stored as rows of one tensor [P, D].

The arithmetic is torch.optim.Adam's (single-tensor path): m <- lerp(m, g, 1 - b1);
v <- b2 v + (1 - b2) g^2; p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
Each member keeps its own step count t, and a member masked out by `active` (a PPO member that
early-stopped on its KL) is left exactly as it was: parameters, moments and t.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class PopAdam:
    def __init__(self, param: Tensor, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.param, self.eps, self.betas = param, eps, betas
        self.m = torch.zeros_like(param)
        self.v = torch.zeros_like(param)
        self.t = torch.zeros(param.shape[0], dtype=torch.float64, device=param.device)

    @torch.no_grad()
    def step(self, grad: Tensor, lr: float | Tensor, active: Tensor | None = None) -> None:
        b1, b2 = self.betas
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
