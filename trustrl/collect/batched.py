"""The batched collector: P members' classic-control envs stepped together on one device.

A collector knows nothing of the algorithm: it steps every member's N envs with the members'
current policies (pi_old) for T steps and returns the records [T, P, N, ...] with V_old and the
bootstrap values; GAE and the update are the learner's and the algorithm's. How:

- all P members at once: [P, N] tensors and batched matrix products (trustrl.nets.popnet);
- nothing goes to the host during a rollout: actions are sampled with counter-based noise
  drawn for the whole rollout in one call (trustrl.maths.rng), start states likewise, episode
  returns
  are tracked in tensors, V(s) of the whole rollout (and V(final obs) of truncated steps) comes
  from one critic call after it, since the critic does not change during the rollout;
- every counter lives in a device tensor and state is updated in place, so a whole iteration
  can be captured as one CUDA graph (trustrl.learn.learners), or the step function compiled with
  torch.compile; on a CPU the per-step work runs in NumPy (`numpy_rollout`), the same
  arithmetic with a third of the per-operation overhead;
- every number a member draws is a function of its seed and the step, so member p of a
  population follows the same trajectory as a run of that seed alone (to float rounding).

Box actions are clipped to the bounds before the env step (the stored action and its log-prob
are the unclipped sample's), as on the Gymnasium collector (trustrl.collect.rollout).

A recurrent policy (trustrl.nets.popnet.ModuleNet over trustrl.nets.policies.RecurrentActorCritic)
acts
as it does on the Gymnasium collector: one step of the one unroll (`ModuleNet.step`) from the
state each env carries, reset where its observation starts an episode; the state and the
episode-start flags carry over from one rollout to the next, and the rollout returns the flags
and each segment's start state for the update's whole-sequence minibatches
(docs/recurrent.md). Its rollout runs the torch path, eagerly.

An env with invalid actions (MaskedPick-v0: trustrl.envs.classic.MASKED) gives each state's
mask from its dynamics (``mask_fn``); with action_mask 'auto' or 'on' each step draws under
the mask of its state (inside `policy_env_step`, by distributions.mask_logits), the rollout
stores the masks (``action_mask`` [T, P, N, n]) for the update's ratio, and the greedy
evaluation takes the best valid action (docs/masking.md). With 'off' every action is drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.envs import step as env_step
from trustrl.envs.classic import MASKED
from trustrl.envs.make import check_env
from trustrl.envs.numpy_classic import NUMPY_SUPPORTED, make_numpy_dynamics
from trustrl.envs.step import TORCH, observation_input
from trustrl.envs.torch_classic import ResetSampler, TorchVecEnv, make_torch_env
from trustrl.maths import rng
from trustrl.maths.distributions import mask_logits, mask_logits_numpy
from trustrl.maths.normalize import fold_moments_torch
from trustrl.nets.popnet import PopNet

DRAWS_AHEAD = 16
"""Rollouts whose noise and reset states a CPU collector draws at once (one hash each)."""
DRAWS_AHEAD_NUMBERS = 1 << 21
"""... as long as one rollout's draws times that stay under this many numbers."""
_STATE = ("env_state", "elapsed", "obs", "ep_ret", "ep_len", "obs_mean", "obs_var", "obs_count",
          "ret_var", "ret_mean", "ret_count", "disc_return", "it")
"""Tensors that carry the run from one iteration to the next (updated in place)."""
_CARRY = ("env_state", "elapsed", "obs", "ep_ret", "ep_len", "disc_return", "obs_mean",
          "obs_var", "obs_count", "ret_mean", "ret_var", "ret_count")
"""... in the order of `policy_env_step`'s state (trustrl.compute.compiled.records.Carry's)."""
_RECURRENT_STATE = ("hidden", "next_start")
"""... and with a recurrent policy: its state before `obs` [P, N, S] and whether `obs` starts
an episode [P, N]."""


def batched_masks(cfg: Any) -> bool:
    """Whether the batched collector draws `cfg`'s actions under the env's masks: an env with
    masks (trustrl.envs.classic.MASKED) and action_mask not 'off'."""
    return cfg.env_id in MASKED and cfg.action_mask != "off"


def _numpy_actor(net: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The actor's forward pass in NumPy, on views of the current parameters (optimizers update
    them in place, so the function stays current): [P, n, obs_dim] -> [P, n, n_out]."""
    w = {k: v.numpy() for k, v in net.views(net.flat.detach()).items()}
    layers = [(w[f"actor.w{i}"], w[f"actor.b{i}"]) for i in range(len(net.hidden_sizes))]
    w_out, b_out = w["actor.w_out"], w["actor.b_out"]
    relu = net.activation == "relu"

    def forward(x: np.ndarray) -> np.ndarray:
        for wi, bi in layers:
            x = np.matmul(x, wi)
            x += bi
            if relu:
                np.maximum(x, 0.0, out=x)
            else:
                np.tanh(x, out=x)
        out = np.matmul(x, w_out)
        out += b_out
        return out

    return forward


class BatchedCollector:
    """The envs, normalisers and episode trackers of P members, and the rollout with `net`.

    compile: torch.compile the per-step rollout function (CPU or CUDA).
    numpy_rollout: run the rollout's per-step work in NumPy (CPU only; default: on a CPU
    unless compiling).
    compiled_rollout: run that NumPy rollout as one Numba call (trustrl.compute.compiled.rollout)
    wherever the NumPy rollout runs.
    A recurrent `net` (a ModuleNet whose module has `recurrent`) runs the torch rollout
    eagerly (neither NumPy nor compile).
    """

    def __init__(self, cfg: Any, net: PopNet, seeds: list[int],
                 compile: bool = False, numpy_rollout: bool | None = None,
                 compiled_rollout: bool = False):
        self.cfg, self.seeds, self.net = cfg, list(seeds), net
        self.spec = check_env(cfg.env_id)
        dev = self.device = net.flat.device
        P, N, T = len(seeds), cfg.num_envs, cfg.num_steps
        self.P, self.N, self.T, self.D = P, N, T, self.spec.obs_dim
        act = self.spec.action
        self._act_bounds: tuple[Tensor, Tensor] | None = None
        self._act_bounds_np: tuple[np.ndarray, np.ndarray] | None = None
        if act.kind == "box":
            lo = torch.tensor(act.low, dtype=torch.float32, device=dev)
            hi = torch.tensor(act.high, dtype=torch.float32, device=dev)
            self._act_bounds = (lo, hi)
            if dev.type == "cpu":
                self._act_bounds_np = (lo.numpy(), hi.numpy())
        base = rng.seed_keys(self.seeds, dev)
        n_idx = torch.arange(N, device=dev)
        self.action_keys = rng.derive(base[:, None], rng.ACTION, n_idx[None, :])  # [P, N]
        self.eval_base = rng.derive(base, rng.EVAL)  # [P]
        env_keys = rng.derive(base[:, None], rng.ENV, n_idx[None, :]).reshape(P * N)
        self.env: TorchVecEnv = make_torch_env(cfg.env_id, P * N, device=dev)
        self.masked = batched_masks(cfg)
        """Whether actions are drawn (and evaluated) under the env's masks."""
        self.resets = ResetSampler(cfg.env_id, env_keys)
        f64 = dict(dtype=torch.float64, device=dev)
        # everything that carries over between iterations is a tensor, updated in place
        self.env_state = self.resets.sample(1)[0]
        self.elapsed = torch.zeros(P * N, dtype=torch.int64, device=dev)
        self.obs = self.env._observe(self.env_state).to(torch.float32).view(P, N, self.D)
        self.obs_mean = torch.zeros(P, self.D, **f64)
        self.obs_var = torch.ones(P, self.D, **f64)
        self.obs_count = torch.tensor(1e-4, **f64)
        self.ret_mean = torch.zeros(P, **f64)
        self.ret_var = torch.ones(P, **f64)
        self.ret_count = torch.tensor(1e-4, **f64)
        self.disc_return = torch.zeros(P, N, **f64)
        self.ep_ret = torch.zeros(P, N, **f64)
        self.ep_len = torch.zeros(P, N, dtype=torch.int64, device=dev)
        self.it = torch.zeros((), dtype=torch.int64, device=dev)  # rollouts collected
        self._noise_ahead: tuple[int, Tensor] | None = None  # (first rollout, its noise)
        if cfg.normalize_obs:
            self.obs_mean, self.obs_var, self.obs_count = fold_moments_torch(
                self.obs_mean, self.obs_var, self.obs_count, self.obs.double())
        module = getattr(net, "module", None)
        self.recurrent = bool(getattr(module, "recurrent", False))
        self._state_names = _STATE + (_RECURRENT_STATE if self.recurrent else ())
        if self.recurrent:  # zero states, every first observation an episode's start
            self.hidden = module.initial_state(N, dev).expand(P, -1, -1).clone()  # type: ignore[union-attr]  # noqa: E501
            self.next_start = torch.ones(P, N, dtype=torch.bool, device=dev)
            if numpy_rollout or compile:
                raise ValueError("a recurrent policy's rollout runs on torch, eagerly")
            numpy_rollout = False
        self._torch_settings = self._settings(self._act_bounds)
        self._step_fn: Callable[..., Any] = self._policy_env_step
        if numpy_rollout is None:  # the default: NumPy wherever it can run
            numpy_rollout = dev.type == "cpu" and not compile and cfg.env_id in NUMPY_SUPPORTED
        if numpy_rollout and (dev.type != "cpu" or cfg.env_id not in NUMPY_SUPPORTED):
            raise ValueError("the NumPy rollout needs a CPU device and a classic-control env")
        self._np_env = (make_numpy_dynamics(cfg.env_id, np.float32) if numpy_rollout
                        else None)
        self._compiled: Any = None
        if compiled_rollout and self._np_env is not None:  # the NumPy rollout, compiled
            from trustrl.compute.compiled import compiled_rollout as make_compiled_rollout

            self._compiled = make_compiled_rollout(cfg.env_id, self.masked)  # compiled at the
            # first collect
        if compile:
            self._step_fn = torch.compile(self._policy_env_step, dynamic=False)

    @property
    def numpy_rollout(self) -> bool:
        """Whether the rollout runs on the host in NumPy arrays (compiled or not)."""
        return self._np_env is not None

    @property
    def rollout_kind(self) -> str:
        """'compiled', 'numpy' or 'torch'."""
        return ("compiled" if self._compiled is not None
                else "numpy" if self._np_env is not None else "torch")

    # --- pieces -----------------------------------------------------------------------------------
    def normalize(self, obs: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """obs [P, n, obs_dim] -> what the networks see (float32)."""
        if not self.cfg.normalize_obs:
            return obs.float()
        return TORCH.observation_input(obs, mean, var, self.cfg.obs_clip)

    def env_action(self, a: Tensor) -> Tensor:
        """What the env receives for actions `a`: Box actions clipped to the bounds."""
        if self._act_bounds is None:
            return a
        return torch.minimum(torch.maximum(a, self._act_bounds[0]), self._act_bounds[1])

    def _env_action_np(self, a: np.ndarray) -> np.ndarray:
        """`env_action` in NumPy (np.minimum/maximum: np.clip's wrapper costs more here)."""
        if self._act_bounds_np is None:
            return a
        return np.minimum(np.maximum(a, self._act_bounds_np[0]), self._act_bounds_np[1])

    def _settings(self, bounds: Any) -> tuple[Any, ...]:
        """`policy_env_step`'s settings: the normalisers' and the action bounds `bounds`."""
        cfg = self.cfg
        lo, hi = bounds if bounds is not None else (None, None)
        return (bool(cfg.normalize_obs), bool(cfg.normalize_reward), float(cfg.gamma),
                float(cfg.obs_clip), float(cfg.reward_clip), lo, hi)

    def _policy_env_step(self, flat: Any, x: Tensor, noise: Tensor, reset: Tensor,
                         state: tuple[Tensor, ...], hidden: Tensor | None = None,
                         starts: Tensor | None = None) -> tuple[Any, ...]:
        """One step of every env with the current policy (`flat`: its parameters' views), a
        pure function of tensors (the unit torch.compile fuses): the actor's forward pass at
        the network inputs x, then `policy_env_step` over torch from the carried `state`
        (its order). Returns that step's (actions, logp, rewards, terminated, truncated,
        fin_ret, fin_len, final_x, next x, new state).
        A recurrent policy steps from its state `hidden` [P, N, S] with the episode-start
        flags `starts` [P, N] of x (ModuleNet.step: the state is reset there); the step then
        also returns V(x), the next state and the next flags (the episodes that ended).
        `policy_env_step` draws under the env's masks on a masked run, and returns them with
        the (masked) logits after the new state."""
        net = self.net
        if hidden is None:
            out = net.actor(x, flat)  # type: ignore[attr-defined]
        else:
            out, value, hidden = net.step(x, flat, starts, hidden)  # type: ignore[attr-defined]
        dyn = self.env.dyn
        step = env_step.bind(TORCH, dyn._transition, net.discrete, None,
                             dyn._mask if self.masked else None)(
            dyn.k, out, noise, reset, None if net.discrete else net.log_std(flat),
            state, self._torch_settings)
        if hidden is None:
            return step
        return step + (value, hidden, step[3] | step[4])

    # --- the rollout in NumPy (CPU) ---------------------------------------------------------------
    def _numpy_rollout(self, noise: Tensor, resets: Tensor) -> tuple[Tensor, ...]:
        """The T steps of `policy_env_step` over NumPy (the source as written), on the
        collector's CPU tensors.

        A torch op on a tensor of 4 to 256 numbers costs 1-5 us of dispatch, a NumPy op 0.3-1.6
        us, and one env step is some sixty of them; so on a CPU the rollout runs here, with the
        same arithmetic in the same order (the same random numbers, drawn by torch for the whole
        rollout before it). The carried state is updated in place through NumPy views of the
        collector's tensors. Returns the stacked records [T, P, N, ...] as tensors (sharing NumPy's
        memory) and the last observation's network input."""
        net, dyn = self.net, self._np_env
        assert dyn is not None
        P, N, T, D = self.P, self.N, self.T, self.D
        actor = _numpy_actor(net)
        log_std = None if net.discrete else net.views(net.flat.detach())["log_std"].numpy()
        policy_env_step = env_step.bind(env_step, dyn._transition, net.discrete, None,
                                        dyn._mask if self.masked else None)
        noise_np, resets_np = noise.numpy(), resets.numpy()
        carried = [getattr(self, name).numpy() for name in _CARRY]
        state = tuple(carried)
        settings = self._settings(self._act_bounds_np)
        f32 = np.float32
        obs_b = np.empty((T, P, N, D), f32)
        act_b = (np.empty((T, P, N), np.int64) if net.discrete
                 else np.empty((T, P, N, net.n_out), f32))
        logp_b = np.empty((T, P, N), f32)
        rew_b = np.empty((T, P, N), f32)
        term_b = np.empty((T, P, N), bool)
        trunc_b = np.empty((T, P, N), bool)
        fin_ret = np.empty((T, P, N), np.float64)
        fin_len = np.empty((T, P, N), np.int64)
        final_x = np.empty((T, P, N, D), f32)
        recs = (act_b, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len, final_x)
        mask_b = np.empty((T, P, N, net.n_out) if self.masked else (0, 0, 0, 0), bool)
        x = state[2]
        if self.cfg.normalize_obs:
            x = observation_input(x, state[6], state[7], self.cfg.obs_clip)
        for t in range(T):
            obs_b[t] = x
            step = policy_env_step(dyn.k, actor(x), noise_np[t], resets_np[t], log_std, state,
                                   settings)
            for rec, value in zip(recs, step[:8], strict=True):
                rec[t] = value
            x, state = step[8], step[9]
            if self.masked:  # the valid actions the action was drawn under
                mask_b[t] = step[10].reshape(P, N, -1)
        for view, value in zip(carried, state, strict=True):  # carried over, in place
            view[...] = value
        return tuple(torch.from_numpy(r) for r in (obs_b, *recs)) + (
            torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(mask_b))

    def _compiled_rollout(self, noise: Tensor, resets: Tensor) -> dict[str, Tensor]:
        """`collect` on the compiled path: `_numpy_rollout` as one compiled call
        (trustrl.compute.compiled.rollout: the same records, the carried state updated in place
        likewise), then the critic's values and the bootstrap values in one more
        (V(final_x) only where an episode was truncated); the actor's outputs of the rollout
        kept as old_out."""
        net = self.net
        P, N, T, D = self.P, self.N, self.T, self.D
        f32 = np.float32
        act_i = np.zeros((T, P, N) if net.discrete else (0, 0, 0), np.int64)
        act_f = np.zeros((0, 0, 0, 0) if net.discrete else (T, P, N, net.n_out), f32)
        recs = (np.empty((T, P, N, D), f32), np.empty((T, P, N), f32),
                np.empty((T, P, N), f32), np.empty((T, P, N), bool), np.empty((T, P, N), bool),
                np.empty((T, P, N), np.float64), np.empty((T, P, N), np.int64),
                np.empty((T, P, N, D), f32))
        obs_b, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len, final_x = recs
        out_b = np.empty((T, P, N, net.n_out), f32)
        mask_b = np.empty((T, P, N, net.n_out) if self.masked else (0, 0, 0, 0), bool)
        ls_off = 0 if net.discrete else net.segments[-1].offset
        from trustrl.compute.compiled.records import Draws, Policy, Steps

        policy = Policy(net.flat.detach().numpy(),
                        np.array((self.D, *net.hidden_sizes, net.n_out), np.int64),
                        net.activation == "relu", net.discrete, net.critic_slice.start, ls_off)
        x = self._compiled.run(
            policy, Draws(np.ascontiguousarray(noise.numpy(), f32), resets.numpy()),
            *self.rollout_state(),
            Steps(obs_b, act_i, act_f, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len,
                  final_x, out_b, mask_b))
        values = np.empty((T, P, N), f32)
        next_v = np.empty((T, P, N), f32)
        self._compiled.values(
            net.flat.detach().numpy(), net.critic_slice.start,
            np.array((D, *net.hidden_sizes, 1), np.int64), net.activation == "relu", obs_b,
            final_x, x, term_b, trunc_b, values, next_v)
        act_b = act_i if net.discrete else act_f
        named = {"obs": obs_b, "actions": act_b, "logp": logp_b, "rewards": rew_b,
                 "terminated": term_b, "truncated": trunc_b, "final_x": final_x,
                 "fin_ret": fin_ret, "fin_len": fin_len, "values": values,
                 "next_values": next_v, "old_out": out_b}
        if self.masked:
            named["action_mask"] = mask_b
        return {k: torch.from_numpy(v) for k, v in named.items()}

    def rollout_state(self) -> tuple[Any, Any]:
        """The compiled rollout's carried state and settings (trustrl.compute.compiled.records'
        Carry,
        NumPy views of the state the call moves on in place, and EnvSettings: the
        normalisers' settings and the action bounds)."""
        from trustrl.compute.compiled.records import Carry, EnvSettings

        cfg, f32 = self.cfg, np.float32
        bounds = self._act_bounds_np or (np.zeros(1, f32), np.zeros(1, f32))
        carry = Carry(self.env_state.numpy(), self.elapsed.numpy(), self.obs.numpy(),
                      self.ep_ret.numpy(), self.ep_len.numpy(), self.disc_return.numpy(),
                      self.obs_mean.numpy(), self.obs_var.numpy(),
                      self.obs_count.numpy().reshape(1), self.ret_mean.numpy(),
                      self.ret_var.numpy(), self.ret_count.numpy().reshape(1))
        return carry, EnvSettings(bool(cfg.normalize_obs), bool(cfg.normalize_reward),
                                  float(cfg.gamma), float(cfg.obs_clip),
                                  float(cfg.reward_clip), bounds[0], bounds[1])

    def _draws(self) -> tuple[Tensor, Tensor]:
        """The rollout's noise [T, P, N, n_out] and reset states [T, P*N, state_dim]: one
        batched hash each for all T steps; on a CPU for up to DRAWS_AHEAD rollouts at once
        (the same numbers: they are functions of the counters alone), handed out in turn."""
        T, net = self.T, self.net
        draw = rng.gumbel if net.discrete else rng.normal
        keys = self.action_keys[None]
        ahead = 1 if self.device.type != "cpu" else max(1, min(
            DRAWS_AHEAD, DRAWS_AHEAD_NUMBERS // (T * self.P * self.N * max(net.n_out, self.D))))
        if ahead == 1:  # counters as device tensors: a CUDA graph replays this
            ctr = self.it * T + torch.arange(T, device=self.device)
            return draw(keys, ctr[:, None, None], net.n_out), self.resets.sample(T)
        it = int(self.it)
        kept = self._noise_ahead
        if kept is None or not 0 <= it - kept[0] < kept[1].shape[0] // T:
            ctr = it * T + torch.arange(ahead * T)
            kept = self._noise_ahead = (it, draw(keys, ctr[:, None, None], net.n_out))
        first = (it - kept[0]) * T
        return kept[1][first:first + T], self.resets.sample_ahead(T, ahead)

    def collect(self) -> dict[str, Tensor]:
        """The batched collector: T steps of every member's N envs with pi_old. Returns the
        records [T, P, N, ...]: obs (network inputs), actions (unclipped samples), logp,
        rewards (scaled when normalize_reward), terminated, truncated, final_x (network input
        of the true last observation), fin_ret / fin_len (episode return and length so far,
        valid where an episode ended), values V(obs) and next_values (the bootstrap values:
        V(next obs), V(final obs) on truncation, 0 on termination); with the compiled
        rollout also old_out, the actor's outputs (pi_old's: PPO's update need not compute
        them again). With a recurrent policy also old_out, starts (x's episode-start flags
        [T, P, N]) and state0 (the state at the segment's start [P, N, S]). On a masked run
        (`masked`) also action_mask [T, P, N, n], the valid actions each action was drawn
        under (old_out then holds the masked logits). The carried state (envs, trackers,
        normalisers, a recurrent policy's state) moves on in place."""
        net = self.net
        P, N, T, D = self.P, self.N, self.T, self.D
        noise, resets = self._draws()
        if self._compiled is not None:
            return self._compiled_rollout(noise, resets)
        flat = net.views(net.flat.detach())  # fixed during the rollout: views made once
        if self._np_env is not None:
            # the carried state is updated in place by the NumPy rollout (obs included)
            (obs_b, act_b, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len, final_x,
             x, mask_b) = self._numpy_rollout(noise, resets)
        else:
            state = tuple(getattr(self, name) for name in _CARRY)
            # a recurrent policy's state and the episode-start flags of x, carried step to step
            seq = [self.hidden, self.next_start] if self.recurrent else []
            x = self.normalize(self.obs, self.obs_mean, self.obs_var)
            recs: list[tuple[Tensor, ...]] = []
            seq_recs: list[tuple[Tensor, ...]] = []
            masks: list[Tensor] = []
            with torch.no_grad():
                for t in range(T):
                    out = self._step_fn(flat, x, noise[t], resets[t], state, *seq)
                    recs.append((x,) + tuple(out[:8]))
                    x, state = out[8], out[9]
                    if self.masked:  # the valid actions the action was drawn under
                        masks.append(out[10].view(P, N, -1))
                    if seq:  # x's starts, the actor's (masked) output, V(x), the state after
                        seq_recs.append((seq[1], out[11]) + tuple(out[12:14]))
                        seq = list(out[13:15])
                # stacked before the carried state is overwritten: the first records may be
                # views of it (x is self.obs itself without normalisation)
                obs_b, act_b, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len, final_x = (
                    torch.stack(c) for c in zip(*recs, strict=True))
                mask_b = torch.stack(masks) if masks else torch.zeros(0, 0, 0, 0, dtype=bool)
                if seq:
                    starts_b, out_b, values, after_b = (
                        torch.stack(c) for c in zip(*seq_recs, strict=True))
                    state0 = self.hidden.clone()  # the segment's start state
                    self.hidden.copy_(seq[0])
                    self.next_start.copy_(seq[1])
                # carry the state over, in place (a CUDA graph replays on the same memory)
                for name, value in zip(_CARRY, state, strict=True):
                    getattr(self, name).copy_(value)
        seq_out: dict[str, Tensor] = {}
        with torch.no_grad():
            if self.recurrent:
                # V(x) came with each step; V(final obs) is one step on from the state the
                # episode reached, V(last obs) one step from the carried state (the
                # Gymnasium collector's), each over all rows in one call
                rows = (P, T * N)
                final_v = net.step(  # type: ignore[attr-defined]
                    final_x.transpose(0, 1).reshape(*rows, D), flat,
                    torch.zeros(rows, device=self.device),
                    after_b.transpose(0, 1).reshape(*rows, -1))[1]
                final_v = final_v.view(P, T, N).transpose(0, 1)
                last_v = net.step(x, flat, self.next_start, self.hidden)[1]  # type: ignore[attr-defined]  # noqa: E501
                seq_out = {"starts": starts_b, "state0": state0, "old_out": out_b}
            else:
                # the critic is fixed during the rollout: V of every state in one call
                values = net.critic(obs_b.transpose(0, 1).reshape(P, T * N, D), flat)  # type: ignore[attr-defined]  # noqa: E501
                values = values.view(P, T, N).transpose(0, 1)
                final_v = net.critic(final_x.transpose(0, 1).reshape(P, T * N, D), flat)  # type: ignore[attr-defined]  # noqa: E501
                final_v = final_v.view(P, T, N).transpose(0, 1)
                last_v = net.critic(x, flat)  # type: ignore[attr-defined]
            next_v = torch.cat([values[1:], last_v[None]], 0)
            next_v = torch.where(trunc_b, final_v, next_v)
            next_v = torch.where(term_b, torch.zeros_like(next_v), next_v)
        if self.masked:
            seq_out["action_mask"] = mask_b
        return {"obs": obs_b, "actions": act_b, "logp": logp_b, "rewards": rew_b,
                "terminated": term_b, "truncated": trunc_b, "final_x": final_x,
                "fin_ret": fin_ret, "fin_len": fin_len, "values": values,
                "next_values": next_v, **seq_out}

    # --- greedy evaluation on the torch envs ------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, episodes: int) -> Tensor:
        """Greedy returns [P, episodes]: each member plays `episodes` episodes from start states
        fixed by its seed (the same at every evaluation), observations normalised with frozen
        statistics. Runs until every episode ended (at most the time limit)."""
        P, E, D = self.P, episodes, self.D
        dev = self.device
        env = make_torch_env(self.cfg.env_id, P * E, device=dev)
        keys = rng.derive(self.eval_base[:, None], torch.arange(E, device=dev)[None, :])
        state = ResetSampler(self.cfg.env_id, keys.reshape(P * E)).sample(1)[0]
        elapsed = torch.zeros(P * E, dtype=torch.int64, device=dev)
        obs = env._observe(state).to(torch.float32).view(P, E, D)
        total = torch.zeros(P, E, dtype=torch.float64, device=dev)
        running = torch.ones(P, E, dtype=torch.bool, device=dev)
        if self._np_env is not None:
            self._numpy_evaluate(state.numpy(), obs.numpy(), total.numpy(), running.numpy())
            return total
        params = self.net.views(self.net.flat.detach())
        if self.recurrent:  # each episode from the zero state (its first step a start)
            hidden = self.hidden.new_zeros(P, E, self.hidden.shape[-1])
            starts = torch.ones(P, E, device=dev)
        for t in range(env.max_episode_steps):
            x = self.normalize(obs, self.obs_mean, self.obs_var)
            if self.recurrent:  # the state carried through the episode
                out, _, hidden = self.net.step(x, params, starts, hidden)  # type: ignore[attr-defined]  # noqa: E501
                starts = torch.zeros_like(starts)
            else:
                out = self.net.actor(x, params)  # type: ignore[attr-defined]
            if self.masked:  # the best valid action
                out = mask_logits(out, env.dyn.action_mask(state).view(P, E, -1))
            a = (out.argmax(-1).reshape(P * E) if self.net.discrete
                 else self.env_action(out).reshape(P * E, -1))
            state, elapsed, st = env.transition(state, elapsed, a, state)  # no reset needed
            total += torch.where(running, st.reward.view(P, E).double(), 0.0)
            running &= ~(st.terminated | st.truncated).view(P, E)
            obs = st.final_obs.view(P, E, D)
            if t % 64 == 63 and not bool(running.any()):
                break
        return total

    def _numpy_evaluate(self, state: np.ndarray, obs: np.ndarray, total: np.ndarray,
                        running: np.ndarray) -> None:
        """`evaluate`'s loop in NumPy (CPU), accumulating into `total` in place."""
        net, dyn, P, E = self.net, self._np_env, self.P, running.shape[1]
        assert dyn is not None
        actor = _numpy_actor(net)
        mean, var = self.obs_mean.numpy(), self.obs_var.numpy()
        elapsed = np.zeros(P * E, np.int64)
        for _ in range(dyn.max_episode_steps):
            x = observation_input(obs, mean, var, self.cfg.obs_clip) if self.cfg.normalize_obs \
                else obs
            out = actor(x)
            if self.masked:  # the best valid action
                out = mask_logits_numpy(out, dyn.action_mask(state).reshape(P, E, -1))
            a = (out.argmax(-1).reshape(P * E) if net.discrete
                 else self._env_action_np(out).reshape(P * E, -1))
            state, elapsed, _, r, term, trunc, final_obs = dyn.transition(state, elapsed, a, state)
            total += np.where(running, r.reshape(P, E).astype(np.float64), 0.0)
            running &= ~(term | trunc).reshape(P, E)
            obs = final_obs.reshape(obs.shape)
            if not running.any():
                break

    # --- state for checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k).detach().cpu().clone()
                               for k in self._state_names}
        out.update(resets_counter=self.resets.counter.cpu().clone(), seeds=list(self.seeds))
        return out

    def load_state_dict(self, s: dict[str, Any]) -> None:
        if list(s["seeds"]) != self.seeds:
            raise ValueError("checkpoint seeds differ from the run's")
        with torch.no_grad():
            for k in self._state_names:
                getattr(self, k).copy_(s[k])
            self.resets.counter.copy_(s["resets_counter"])


def metrics_rows(metrics: Tensor, columns: tuple[str, ...], int_columns: tuple[str, ...]
                 ) -> list[dict[str, Any]]:
    """[P, columns] -> one dict per member (ints for the counters, None for NaN)."""
    rows = []
    for vals in metrics.cpu().tolist():
        row: dict[str, Any] = {}
        for c, v in zip(columns, vals, strict=True):
            row[c] = None if v != v else (int(v) if c in int_columns else v)
        rows.append(row)
    return rows
