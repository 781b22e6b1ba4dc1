"""Actor-critic networks: an actor for the action space (categorical, diagonal Gaussian,
independent categoricals or independent bits) and a value critic, MLP heads behind an optional
feature extractor (trustrl.nets.extractors); or a user's whole actor-critic (CustomActorCritic)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trustrl.envs.spaces import ActionSpec
from trustrl.maths.distributions import (
    Bernoulli,
    Categorical,
    DiagGaussian,
    MultiCategorical,
    mask_logits,
)
from trustrl.nets.extractors import (
    CombinedExtractor,
    UserExtractor,
    call_factory,
    features_dim,
    float_pixels,
    layout_space,
    needs_extractor,
)
from trustrl.util.errors import ConfigError

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def make_dist(action: ActionSpec, out: Tensor, log_std: Tensor | None = None,
              mask: Tensor | None = None):
    """The action distribution of the actor's output `out` [B, n_out]; `mask` [B, n_out] bool
    (Discrete and MultiDiscrete only): the valid actions
    (trustrl.maths.distributions.mask_logits)."""
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


def _trunk_kwargs(trunk: nn.Sequential) -> dict:
    """hidden_sizes and activation of an mlp_trunk (for an agent file's kwargs)."""
    return {
        "hidden_sizes": [m.out_features for m in trunk if isinstance(m, nn.Linear)],
        "activation": next(
            (k for k, v in ACTIVATIONS.items() for m in trunk if isinstance(m, v)), "tanh"),
    }


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
        return self._sample(out, v, with_out, mask)

    def _sample(self, out: Tensor, v: Tensor, with_out: bool, mask: Tensor | None
                ) -> tuple[Tensor, ...]:
        """sample_step's draw from the actor's output `out` (masked where `mask` says)."""
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
    part, trustrl.nets.extractors.CombinedExtractor; {"kind": "user", "factory": "module:name",
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
            **_trunk_kwargs(self.actor_trunk),
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
    obs is the structured observation (trustrl.nets.extractors.unflatten), actor_output [B, n_out]
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
        from trustrl.nets.extractors import unflatten

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


RECURRENT_KINDS = ("lstm", "gru")


def unroll(kind: str, cell: nn.Module, x: Tensor, starts: Tensor, state: Tensor
           ) -> tuple[Tensor, Tensor]:
    """The one unroll of a recurrent cell (acting, training and evaluation all call it):
    inputs x [T, N, F], episode-start flags starts [T, N] (True where step t is an episode's
    first: the state is zeroed there, state * (1 - start), so nothing flows across an
    episode's end) and the state at the segment's start [N, S] -> (the hidden outputs
    [T, N, H], the state after the last step [N, S]). Acting is T = 1.

    kind 'lstm': `cell` an nn.LSTMCell, the state h and c side by side [N, 2H]; 'gru': an
    nn.GRUCell, the state h [N, H]; the cell's own weights, in PyTorch's multi-step kernels
    (torch.lstm, torch.gru: the cells' arithmetic, gate order i, f, g, o and r, z, n, with the
    time loop in C++). The segment is cut at every step where some env's episode starts; the
    state is zeroed there for those envs, and each run of steps between cuts is one call of
    the kernel (a segment without an episode start is one call, however long)."""
    H = cell.hidden_size
    lstm = kind == "lstm"
    T = x.shape[0]
    keep = (1.0 - starts.to(x.dtype)).unsqueeze(-1)  # [T, N, 1]
    cuts = [0, *(torch.nonzero(starts[1:].any(1)).flatten() + 1).tolist(), T]
    weights = (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    h, c = (state[:, :H], state[:, H:]) if lstm else (state, state)
    outs = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        h = (h * keep[a])[None]
        if lstm:
            y, h, c = torch.lstm(x[a:b], (h, (c * keep[a])[None]), weights, True, 1, 0.0,
                                 False, False, False)
            c = c[0]
        else:
            y, h = torch.gru(x[a:b], h, weights, True, 1, 0.0, False, False, False)
        h = h[0]
        outs.append(y)
    hs = outs[0] if len(outs) == 1 else torch.cat(outs)
    return hs, (torch.cat([h, c], -1) if lstm else h)


class RecurrentActorCritic(_Acting, nn.Module):
    """pi(a | s_1..s_t) and V(s_1..s_t): the flat observation (or an extractor's features,
    e.g. NatureCNN for images) -> one LSTM or GRU -> separate actor and critic MLP heads.

    The recurrent trunk is shared by actor and critic, as CleanRL's ppo_atari_lstm (sb3-
    contrib's RecurrentPPO defaults to one LSTM each): the unroll over a segment is a loop of
    T sequential steps, the cost that dominates a recurrent update, and one trunk runs it
    once for both heads; PPO's one loss (policy + vf_coef * value) trains it
    (docs/recurrent.md). Init: orthogonal sqrt(2) on the MLP layers, 0.01 and 1.0 on the
    heads, PyTorch's init on the cell with zero biases (ortho_init False: PyTorch's init
    everywhere).

    Rows: forward(obs [M, D], part, starts [M], state [m, S]) takes a segment of T = M / m
    steps of m envs in time-major order (row t * m + e), with the state at its start; without
    `state` each row is an episode's first step (zero state). `unroll` is the same on
    [T, N, ...] and also returns the state after the segment; `step` is T = 1.
    """

    recurrent = True
    shared_trunk = True  # actor and critic share the recurrent trunk: a ModuleNet
    closed_form_ok = False

    def __init__(
        self,
        obs_dim: int,
        action: ActionSpec,
        recurrent: str = "lstm",
        recurrent_hidden: int = 64,
        hidden_sizes: Sequence[int] = (64,),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        extractor: dict | None = None,
    ):
        super().__init__()
        if recurrent not in RECURRENT_KINDS:
            raise ConfigError(f"recurrent must be one of none, {', '.join(RECURRENT_KINDS)}; "
                              f"got {recurrent!r}")
        self.obs_dim, self.action, self.kind = obs_dim, action, recurrent
        self.extractor = extractor
        self.features = None if extractor is None else _build_extractor(extractor, action,
                                                                        ortho_init)
        n_in = obs_dim if self.features is None else int(self.features.features_dim)  # type: ignore[arg-type]  # noqa: E501
        H = int(recurrent_hidden)
        self.cell = (nn.LSTMCell if recurrent == "lstm" else nn.GRUCell)(n_in, H)
        if ortho_init:
            nn.init.zeros_(self.cell.bias_ih)
            nn.init.zeros_(self.cell.bias_hh)
        self.state_size = 2 * H if recurrent == "lstm" else H
        width = hidden_sizes[-1] if hidden_sizes else H
        self.actor_trunk = mlp_trunk(H, hidden_sizes, activation, ortho_init)
        self.critic_trunk = mlp_trunk(H, hidden_sizes, activation, ortho_init)
        self.policy_head = _layer(width, action.n_out, 0.01, ortho_init)
        self.value_head = _layer(width, 1, 1.0, ortho_init)
        self.log_std = (nn.Parameter(torch.full((action.dim,), float(log_std_init)))
                        if action.kind == "box" else None)

    def initial_state(self, n: int, device: str | torch.device | None = None) -> Tensor:
        """The state of n envs before any step [n, S] (zeros)."""
        return torch.zeros(n, self.state_size, device=device)

    # --- parameter groups -------------------------------------------------------------------
    def _trunk_parameters(self) -> Iterator[nn.Parameter]:
        if self.features is not None:
            yield from self.features.parameters()
        yield from self.cell.parameters()

    def actor_parameters(self) -> Iterator[nn.Parameter]:
        """Everything pi depends on: extractor, cell, actor MLP, policy head, log-std."""
        yield from self._trunk_parameters()
        yield from self.actor_trunk.parameters()
        yield from self.policy_head.parameters()
        if self.log_std is not None:
            yield self.log_std

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        """Everything V depends on (the extractor and the cell are in both lists)."""
        yield from self._trunk_parameters()
        yield from self.critic_trunk.parameters()
        yield from self.value_head.parameters()

    # --- forward ------------------------------------------------------------------------------
    def unroll(self, obs: Tensor, starts: Tensor, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(actor output [T, N, k], V [T, N], state after the segment [N, S]) of a segment:
        obs [T, N, D], starts [T, N], state at its start [N, S] (trustrl.nets.policies.unroll)."""
        T, N = obs.shape[:2]
        flat = obs.reshape(T * N, -1)
        x = float_pixels(flat) if self.features is None else self.features(flat)
        h, state = unroll(self.kind, self.cell, x.reshape(T, N, -1), starts, state)
        a = _plain_forward(self.actor_trunk, h)
        c = _plain_forward(self.critic_trunk, h)
        out = F.linear(a, self.policy_head.weight, self.policy_head.bias)
        v = F.linear(c, self.value_head.weight, self.value_head.bias).squeeze(-1)
        return out, v, state

    def step(self, obs: Tensor, state: Tensor, starts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of N envs: obs [N, D], state [N, S], starts [N] -> (actor output [N, k],
        V [N], the next state [N, S]): `unroll` with T = 1."""
        out, v, state = self.unroll(obs[None], starts[None], state)
        return out[0], v[0], state

    def forward(self, obs: Tensor, part: str = "actor", starts: Tensor | None = None,
                state: Tensor | None = None) -> Any:
        """The actor's output for part "actor", V for "critic", both for "both", on the rows
        of a segment (the class's docstring); for "step" both and the state after the
        segment [m, S] (with one row per env: `step`, acting). What a population network calls
        through torch.func.functional_call."""
        if state is None:  # every row an episode's first step
            state = self.initial_state(obs.shape[0], obs.device)
            starts = torch.ones(obs.shape[0], device=obs.device)
        assert starts is not None
        m = state.shape[0]
        T = obs.shape[0] // m
        out, v, last = self.unroll(obs.reshape(T, m, -1), starts.reshape(T, m), state)
        out, v = out.reshape(T * m, -1), v.reshape(T * m)
        if part == "step":
            return out, v, last
        return (out, v) if part == "both" else v if part == "critic" else out

    def value(self, obs: Tensor, state: Tensor | None = None, starts: Tensor | None = None
              ) -> Tensor:
        """V at one step of N envs [N] (from the given state, else from an episode's start)."""
        return self.forward(obs, "critic", starts, state)

    @torch.no_grad()
    def sample_step(self, obs: Tensor, with_out: bool = False, mask: Tensor | None = None,
                    state: Tensor | None = None, starts: Tensor | None = None
                    ) -> tuple[Tensor, ...]:
        """_Acting.sample_step for one step of N envs from `state` (zeros if None) with the
        episode-start flags `starts` [N]; the next state [N, S] comes last."""
        if state is None:
            state = self.initial_state(obs.shape[0], obs.device)
            starts = torch.ones(obs.shape[0], device=obs.device)
        assert starts is not None
        out, v, state = self.step(obs, state, starts)
        return (*self._sample(out, v, with_out, mask), state)

    def kwargs(self) -> dict:
        """Constructor arguments, so an agent file can rebuild the network."""
        kw = {
            "obs_dim": self.obs_dim,
            "action": self.action.__dict__,
            "recurrent": self.kind,
            "recurrent_hidden": self.cell.hidden_size,
            **_trunk_kwargs(self.actor_trunk),
        }
        if self.extractor is not None:
            kw["extractor"] = self.extractor
        return kw

    @classmethod
    def from_kwargs(cls, kw: dict) -> RecurrentActorCritic:
        """The network of kwargs(), its weights left to load."""
        kw = dict(kw)
        return cls(action=ActionSpec.from_dict(kw.pop("action")), ortho_init=False, **kw)


Policy = ActorCritic | CustomActorCritic | RecurrentActorCritic


def policy_from_kwargs(kw: dict) -> Policy:
    """Rebuild a policy module from its kwargs() (the agent file's "policy_kwargs")."""
    if "custom" in kw:
        return CustomActorCritic.from_kwargs(kw)
    if "recurrent" in kw:
        return RecurrentActorCritic.from_kwargs(kw)
    return ActorCritic.from_kwargs(kw)


def build_policy(obs_dim: int, action: ActionSpec, layout: Sequence[dict],
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                 shared_trunk: bool = False, log_std_init: float = 0.0,
                 ortho_init: bool = True, policy: str = "", recurrent: str = "none",
                 recurrent_hidden: int = 64) -> Policy:
    """The network for an env: with `policy` "" the MLPs (behind a CombinedExtractor when the
    observation holds an image); with `policy` "module:factory" the user's module, as the
    feature extractor in front of the MLP heads when it has `features_dim` (or
    `out_features`), else as a whole actor-critic (CustomActorCritic). The output shapes are
    checked on a batch of two observations (ConfigError with one line)."""
    layout = [dict(p) for p in layout]
    if recurrent != "none":  # the MLP heads behind an LSTM/GRU (behind a CNN for images)
        if policy:
            raise ConfigError("recurrent builds trustrl's own networks; a policy module of "
                              "your own runs with recurrent none")
        ext = {"kind": "combined", "layout": layout} if needs_extractor(layout) else None
        return RecurrentActorCritic(obs_dim, action, recurrent, recurrent_hidden, hidden_sizes,
                                    activation, log_std_init, ortho_init, ext)
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
