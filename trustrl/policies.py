"""Actor-critic networks: an actor for the action space (categorical, diagonal Gaussian,
independent categoricals or independent bits) and a value critic, MLP heads behind an optional
feature extractor (trustrl.extractors); or a user's whole actor-critic (CustomActorCritic)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trustrl.distributions import (
    Bernoulli,
    Categorical,
    DiagGaussian,
    MultiCategorical,
    mask_logits,
)
from trustrl.envs.spaces import ActionSpec
from trustrl.errors import ConfigError
from trustrl.extractors import (
    CombinedExtractor,
    UserExtractor,
    call_factory,
    features_dim,
    float_pixels,
    layout_space,
    needs_extractor,
)

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def make_dist(action: ActionSpec, out: Tensor, log_std: Tensor | None = None,
              mask: Tensor | None = None):
    """The action distribution of the actor's output `out` [B, n_out]; `mask` [B, n_out] bool
    (Discrete and MultiDiscrete only): the valid actions (trustrl.distributions.mask_logits)."""
    if action.kind == "discrete":
        return Categorical(out, mask)
    if mask is not None and action.kind != "multidiscrete":
        raise ValueError(f"an action mask applies to Discrete and MultiDiscrete actions, not "
                         f"{action.kind}")
    if action.kind == "box":
        assert log_std is not None
        return DiagGaussian(out, log_std)
    if action.kind == "multidiscrete":
        return MultiCategorical(out, action.nvec, mask)
    return Bernoulli(out)


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


class _Acting:
    """What every policy module offers the collectors: dist, sample_step, evaluate_actions."""

    action: ActionSpec
    log_std: nn.Parameter | None

    def dist(self, obs: Tensor, mask: Tensor | None = None):
        """The action distribution at each state. obs: [B, obs_dim] (the flat rows); mask
        [B, n_out] bool or None: the valid actions (Discrete, MultiDiscrete)."""
        return make_dist(self.action, self(obs, "actor"), self.log_std,  # type: ignore[operator]
                         mask)

    @torch.no_grad()
    def sample_step(self, obs: Tensor, with_out: bool = False, mask: Tensor | None = None
                    ) -> tuple[Tensor, ...]:
        """(action, log pi(action|s), V(s)) for the rollout, one call per env step; the
        actor's output and V from one forward(obs, "both") (shared layers run once). With
        `with_out`, the actor's output (logits or means) too: the collector keeps it as
        pi_old's, so the update need not run the actor over the whole batch again. With a
        `mask`, the invalid actions' logits are set aside (mask_logits) in the distribution
        and in the returned output alike."""
        out, v = self(obs, "both")  # type: ignore[operator]
        if mask is not None:
            out = mask_logits(out, mask)
        d = make_dist(self.action, out, self.log_std)
        action = d.sample()
        if with_out:
            return action, d.log_prob(action), v, out
        return action, d.log_prob(action), v

    def evaluate_actions(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(log pi(a|s), entropy, V(s)), each [B], with gradients: what the update needs."""
        out, v = self(obs, "both")  # type: ignore[operator]
        d = make_dist(self.action, out, self.log_std)
        return d.log_prob(actions), d.entropy(), v


def _build_extractor(spec: dict, action: ActionSpec, ortho_init: bool = True) -> nn.Module:
    """A feature extractor from its plain description (saved in agent files)."""
    if spec["kind"] == "combined":
        return CombinedExtractor(spec["layout"], ortho_init)
    module = call_factory(spec["factory"], layout_space(spec["layout"]), action.space())
    if features_dim(module) is None:
        raise ConfigError(f"policy {spec['factory']!r} is used as a feature extractor but has "
                          "no features_dim (or out_features) attribute")
    return UserExtractor(module, spec["layout"])


class ActorCritic(_Acting, nn.Module):
    """pi(a|s) and V(s). Separate actor and critic MLPs by default; shared trunk as an option.

    Orthogonal init: sqrt(2) on hidden layers, 0.01 on the policy head (near-uniform initial
    policy), 1.0 on the value head; ortho_init=False keeps PyTorch's default init on every
    layer instead (heads included). The Gaussian's log-std is a free parameter, not a function
    of the state. Actor and critic parameters are listed explicitly, never found by name.

    extractor: None (the MLPs read the flat observation row), or the plain description of a
    feature extractor in front of them ({"kind": "combined", "layout": ...}: a CNN per image
    part, trustrl.extractors.CombinedExtractor; {"kind": "user", "factory": "module:name",
    "layout": ...}: a user's module); one for the actor and one for the critic, or one shared
    with shared_trunk.
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
        extractor: dict | None = None,
    ):
        super().__init__()
        self.obs_dim, self.action = obs_dim, action
        self.shared_trunk = shared_trunk
        self.extractor = extractor
        n_in = obs_dim
        if extractor is None:
            self.actor_extractor = self.critic_extractor = None
        else:
            self.actor_extractor = _build_extractor(extractor, action, ortho_init)
            self.critic_extractor = (self.actor_extractor if shared_trunk
                                     else _build_extractor(extractor, action, ortho_init))
            n_in = int(self.actor_extractor.features_dim)  # type: ignore[arg-type]
        width = hidden_sizes[-1] if hidden_sizes else n_in
        self.actor_trunk = mlp_trunk(n_in, hidden_sizes, activation, ortho_init)
        self.critic_trunk = (
            self.actor_trunk if shared_trunk
            else mlp_trunk(n_in, hidden_sizes, activation, ortho_init)
        )
        self.policy_head = _layer(width, action.n_out, 0.01, ortho_init)
        self.value_head = _layer(width, 1, 1.0, ortho_init)
        self.log_std = (
            nn.Parameter(torch.full((action.dim,), float(log_std_init)))
            if action.kind == "box"
            else None
        )

    @property
    def closed_form_ok(self) -> bool:
        """Whether the MLP population network (and so the closed-form backend) can hold this
        network: separate plain MLPs on the flat row, Discrete or Box actions."""
        return (not self.shared_trunk and self.extractor is None
                and self.action.kind in ("discrete", "box"))

    # --- parameter groups -------------------------------------------------------------------
    def actor_parameters(self) -> Iterator[nn.Parameter]:
        """Everything pi depends on: extractor, trunk, policy head and log-std."""
        if self.actor_extractor is not None:
            yield from self.actor_extractor.parameters()
        yield from self.actor_trunk.parameters()
        yield from self.policy_head.parameters()
        if self.log_std is not None:
            yield self.log_std

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        """Everything V depends on (with a shared trunk, the trunk is in both lists)."""
        if self.critic_extractor is not None:
            yield from self.critic_extractor.parameters()
        yield from self.critic_trunk.parameters()
        yield from self.value_head.parameters()

    # --- forward ------------------------------------------------------------------------------
    def dist(self, obs: Tensor, mask: Tensor | None = None
             ) -> Categorical | DiagGaussian | MultiCategorical | Bernoulli:
        """The action distribution at each state. obs: [B, obs_dim]; mask [B, n_out] bool or
        None: the valid actions (Discrete, MultiDiscrete)."""
        return make_dist(self.action, self.forward(obs), self.log_std, mask)

    def forward(self, obs: Tensor, part: str = "actor") -> Any:
        """The actor's output (logits or Gaussian means) for part "actor", V(s) for "critic",
        both as a pair for "both" (a shared extractor and trunk run once): what a population
        network calls through torch.func.functional_call."""
        if part == "critic":
            return self.value(obs)
        if part == "both":
            if not self.shared_trunk:
                return self.forward(obs), self.value(obs)
            x = float_pixels(obs) if self.actor_extractor is None else self.actor_extractor(obs)
            h = _plain_forward(self.actor_trunk, x)
            return (F.linear(h, self.policy_head.weight, self.policy_head.bias),
                    F.linear(h, self.value_head.weight, self.value_head.bias).squeeze(-1))
        obs = float_pixels(obs) if self.actor_extractor is None else self.actor_extractor(obs)
        out = _plain_forward(self.actor_trunk, obs)
        return F.linear(out, self.policy_head.weight, self.policy_head.bias)

    def value(self, obs: Tensor) -> Tensor:
        """V(s): [B, obs_dim] -> [B]."""
        obs = float_pixels(obs) if self.critic_extractor is None else self.critic_extractor(obs)
        h = _plain_forward(self.critic_trunk, obs)
        return F.linear(h, self.value_head.weight, self.value_head.bias).squeeze(-1)

    def kwargs(self) -> dict:
        """Constructor arguments, so an agent file can rebuild the network."""
        kw = {
            "obs_dim": self.obs_dim,
            "action": self.action.__dict__,
            "hidden_sizes": [m.out_features for m in self.actor_trunk if isinstance(m, nn.Linear)],
            "activation": next(
                (k for k, v in ACTIVATIONS.items() for m in self.actor_trunk if isinstance(m, v)),
                "tanh",
            ),
            "shared_trunk": self.shared_trunk,
        }
        if self.extractor is not None:
            kw["extractor"] = self.extractor
        return kw

    @classmethod
    def from_kwargs(cls, kw: dict) -> ActorCritic:
        """The network of kwargs(), its weights left to load (no orthogonal init: a CNN's QR
        decompositions take seconds)."""
        kw = dict(kw)
        return cls(action=ActionSpec.from_dict(kw.pop("action")), ortho_init=False, **kw)


class CustomActorCritic(_Acting, nn.Module):
    """A user's whole actor-critic module behind trustrl's policy interface (autograd only).

    The protocol (docs/custom_networks.md): `module(obs)` returns (actor_output, value), where
    obs is the structured observation (trustrl.extractors.unflatten), actor_output [B, n_out]
    (logits; Gaussian means for Box actions, whose state-independent log-std this wrapper
    adds) and value [B] or [B, 1]. Optional `actor_parameters()` and `critic_parameters()`
    name what pi and V depend on (default: every parameter, both; TRPO and NPG need the two
    apart)."""

    shared_trunk = True  # pi and V may share parameters: run as a ModuleNet
    closed_form_ok = False

    def __init__(self, module: nn.Module, obs_dim: int, action: ActionSpec,
                 layout: Sequence[dict], factory: str, log_std_init: float = 0.0):
        super().__init__()
        self.obs_dim, self.action = obs_dim, action
        self.layout, self.factory = [dict(p) for p in layout], factory
        self.net = module
        self.log_std = (nn.Parameter(torch.full((action.dim,), float(log_std_init)))
                        if action.kind == "box" else None)

    def _both(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        from trustrl.extractors import unflatten

        out = self.net(unflatten(obs, self.layout))
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise ConfigError(f"policy {self.factory!r}: forward must return (actor_output, "
                              f"value), got {type(out).__name__}")
        a, v = out
        return a, v.reshape(v.shape[0]) if v.dim() == 2 and v.shape[-1] == 1 else v

    def forward(self, obs: Tensor, part: str = "actor") -> Any:
        a, v = self._both(obs)
        return (a, v) if part == "both" else v if part == "critic" else a

    def value(self, obs: Tensor) -> Tensor:
        return self._both(obs)[1]

    def actor_parameters(self) -> Iterator[nn.Parameter]:
        own = getattr(self.net, "actor_parameters", None)
        yield from (own() if callable(own) else self.net.parameters())
        if self.log_std is not None:
            yield self.log_std

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        own = getattr(self.net, "critic_parameters", None)
        yield from (own() if callable(own) else self.net.parameters())

    def kwargs(self) -> dict:
        return {"custom": self.factory, "obs_dim": self.obs_dim, "action": self.action.__dict__,
                "layout": self.layout}

    @classmethod
    def from_kwargs(cls, kw: dict) -> CustomActorCritic:
        action = ActionSpec.from_dict(kw["action"])
        module = call_factory(kw["custom"], layout_space(kw["layout"]), action.space())
        return cls(module, kw["obs_dim"], action, kw["layout"], kw["custom"])


Policy = ActorCritic | CustomActorCritic


def policy_from_kwargs(kw: dict) -> Policy:
    """Rebuild a policy module from its kwargs() (the agent file's "policy_kwargs")."""
    if "custom" in kw:
        return CustomActorCritic.from_kwargs(kw)
    return ActorCritic.from_kwargs(kw)


def build_policy(obs_dim: int, action: ActionSpec, layout: Sequence[dict],
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                 shared_trunk: bool = False, log_std_init: float = 0.0,
                 ortho_init: bool = True, policy: str = "") -> Policy:
    """The network for an env: with `policy` "" the MLPs (behind a CombinedExtractor when the
    observation holds an image); with `policy` "module:factory" the user's module, as the
    feature extractor in front of the MLP heads when it has `features_dim` (or
    `out_features`), else as a whole actor-critic (CustomActorCritic). The output shapes are
    checked on a batch of two observations (ConfigError with one line)."""
    layout = [dict(p) for p in layout]
    if not policy:
        ext = {"kind": "combined", "layout": layout} if needs_extractor(layout) else None
        return ActorCritic(obs_dim, action, hidden_sizes, activation, shared_trunk,
                           log_std_init, ortho_init, ext)
    module = call_factory(policy, layout_space(layout), action.space())
    pol: Policy
    if features_dim(module) is not None:
        pol = ActorCritic(obs_dim, action, hidden_sizes, activation, shared_trunk, log_std_init,
                          ortho_init, {"kind": "user", "factory": policy, "layout": layout})
    else:
        pol = CustomActorCritic(module, obs_dim, action, layout, policy, log_std_init)
    try:
        with torch.no_grad():
            x = torch.zeros(2, obs_dim)
            out, v = pol(x, "actor"), pol.value(x)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module
        raise ConfigError(f"policy {policy!r}: forward on a batch of observations failed: "
                          f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}") from None
    if tuple(out.shape) != (2, action.n_out) or tuple(v.shape) != (2,):
        raise ConfigError(f"policy {policy!r}: on a batch of 2 observations the actor gives "
                          f"{tuple(out.shape)} (needs (2, {action.n_out})) and the critic "
                          f"{tuple(v.shape)} (needs (2,) or (2, 1))")
    return pol
