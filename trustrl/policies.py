"""Actor-critic networks: a categorical or diagonal-Gaussian actor and a value critic."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trustrl.distributions import Categorical, DiagGaussian

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


@dataclass(frozen=True)
class ActionSpec:
    """What the actor outputs: 'discrete' with n actions, or 'box' with dim and bounds."""

    kind: str
    n: int = 0
    dim: int = 0
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()


def _layer(n_in: int, n_out: int, gain: float, ortho_init: bool = True) -> nn.Linear:
    """A linear layer, orthogonal with `gain` and zero bias; with ortho_init False it keeps
    PyTorch's default init (uniform in +-1/sqrt(n_in)), as SB3 policies with ortho_init=False
    do (rl-baselines3-zoo's tuned MuJoCo settings were found with that init)."""
    layer = nn.Linear(n_in, n_out)
    if ortho_init:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def _plain_forward(trunk: nn.Sequential, x: Tensor) -> Tensor:
    """trunk(x) without module calls: F.linear and the activation function per layer (what
    nn.Linear.forward and nn.Tanh/nn.ReLU.forward do, so the same numbers and gradients). At a
    rollout's batch of a few states the module machinery (__call__, hooks, Sequential) costs
    more than the arithmetic, and the rollout calls the networks once per env step."""
    for m in trunk:
        if isinstance(m, nn.Linear):
            x = F.linear(x, m.weight, m.bias)
        elif isinstance(m, nn.Tanh):
            x = torch.tanh(x)
        elif isinstance(m, nn.ReLU):
            x = torch.relu(x)
        else:
            x = m(x)
    return x


def mlp_trunk(n_in: int, hidden_sizes: Sequence[int], activation: str,
              ortho_init: bool = True) -> nn.Sequential:
    """Hidden layers only, orthogonal init with gain sqrt(2) (PyTorch's default if not
    ortho_init)."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [_layer(n_in, size, math.sqrt(2.0), ortho_init), ACTIVATIONS[activation]()]
        n_in = size
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """pi(a|s) and V(s). Separate actor and critic MLPs by default; shared trunk as an option.

    Orthogonal init: sqrt(2) on hidden layers, 0.01 on the policy head (near-uniform initial
    policy), 1.0 on the value head; ortho_init=False keeps PyTorch's default init on every
    layer instead (heads included). The Gaussian's log-std is a free parameter, not a function
    of the state. Actor and critic parameters are listed explicitly, never found by name.
    """

    def __init__(
        self,
        obs_dim: int,
        action: ActionSpec,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        shared_trunk: bool = False,
        log_std_init: float = 0.0,
        ortho_init: bool = True,
    ):
        super().__init__()
        self.obs_dim, self.action = obs_dim, action
        self.shared_trunk = shared_trunk
        width = hidden_sizes[-1] if hidden_sizes else obs_dim
        self.actor_trunk = mlp_trunk(obs_dim, hidden_sizes, activation, ortho_init)
        self.critic_trunk = (
            self.actor_trunk if shared_trunk
            else mlp_trunk(obs_dim, hidden_sizes, activation, ortho_init)
        )
        n_out = action.n if action.kind == "discrete" else action.dim
        self.policy_head = _layer(width, n_out, 0.01, ortho_init)
        self.value_head = _layer(width, 1, 1.0, ortho_init)
        self.log_std = (
            nn.Parameter(torch.full((action.dim,), float(log_std_init)))
            if action.kind == "box"
            else None
        )

    # --- parameter groups -------------------------------------------------------------------
    def actor_parameters(self) -> Iterator[nn.Parameter]:
        """Everything pi depends on: trunk, policy head and log-std."""
        yield from self.actor_trunk.parameters()
        yield from self.policy_head.parameters()
        if self.log_std is not None:
            yield self.log_std

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        """Everything V depends on (with a shared trunk, the trunk is in both lists)."""
        yield from self.critic_trunk.parameters()
        yield from self.value_head.parameters()

    # --- forward ------------------------------------------------------------------------------
    def dist(self, obs: Tensor) -> Categorical | DiagGaussian:
        """The action distribution at each state. obs: [B, obs_dim]."""
        out = _plain_forward(self.actor_trunk, obs)
        out = F.linear(out, self.policy_head.weight, self.policy_head.bias)
        if self.log_std is None:
            return Categorical(out)
        return DiagGaussian(out, self.log_std)

    def forward(self, obs: Tensor, part: str = "actor") -> Tensor:
        """The actor's output (logits or Gaussian means) for part "actor", V(s) for "critic":
        what a population network calls through torch.func.functional_call."""
        if part == "critic":
            return self.value(obs)
        out = _plain_forward(self.actor_trunk, obs)
        return F.linear(out, self.policy_head.weight, self.policy_head.bias)

    def value(self, obs: Tensor) -> Tensor:
        """V(s): [B, obs_dim] -> [B]."""
        h = _plain_forward(self.critic_trunk, obs)
        return F.linear(h, self.value_head.weight, self.value_head.bias).squeeze(-1)

    @torch.no_grad()
    def sample_step(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(action, log pi(action|s), V(s)) for the rollout, one call per env step."""
        d = self.dist(obs)
        action = d.sample()
        return action, d.log_prob(action), self.value(obs)

    def evaluate_actions(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(log pi(a|s), entropy, V(s)), each [B], with gradients: what the update needs."""
        d = self.dist(obs)
        return d.log_prob(actions), d.entropy(), self.value(obs)

    def kwargs(self) -> dict:
        """Constructor arguments, so an agent file can rebuild the network."""
        return {
            "obs_dim": self.obs_dim,
            "action": self.action.__dict__,
            "hidden_sizes": [m.out_features for m in self.actor_trunk if isinstance(m, nn.Linear)],
            "activation": next(
                (k for k, v in ACTIVATIONS.items() for m in self.actor_trunk if isinstance(m, v)),
                "tanh",
            ),
            "shared_trunk": self.shared_trunk,
        }

    @classmethod
    def from_kwargs(cls, kw: dict) -> ActorCritic:
        kw = dict(kw)
        action = dict(kw.pop("action"))
        action["low"], action["high"] = tuple(action["low"]), tuple(action["high"])
        return cls(action=ActionSpec(**action), **kw)
