"""Collect T steps from N vector envs with the current policy (pi_old).

Gymnasium 1.x vector envs run here in SAME_STEP autoreset mode: when a step ends an episode the
returned observation is already the next episode's first one, and the true last observation is
in info['final_obs']. So every stored step is a real transition, terminated and truncated stay
apart, and truncated steps bootstrap from V(final observation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.envs import masks
from trustrl.envs.make import obs_to_array, pixel_rows
from trustrl.envs.spaces import stack_obs
from trustrl.maths.normalize import RewardScaler
from trustrl.records.agent import Agent
from trustrl.util.errors import NonFiniteError


@dataclass
class Rollout:
    """One batch, all [T, N, ...]. logp and values are frozen at collection (pi_old, V_old)."""

    obs: Tensor
    actions: Tensor
    logp: Tensor
    values: Tensor
    rewards: Tensor
    next_values: Tensor
    terminated: Tensor
    truncated: Tensor
    actor_out: Tensor | None = None
    """pi_old's output (logits or Gaussian means) [T, N, k] from the rollout's own forward
    passes, when the policy gave it (sample_step with_out); masked logits on a masked run."""
    action_mask: Tensor | None = None
    """The valid actions [T, N, n] (bool) each action was sampled under, on a masked run: the
    update's log-probs, entropy and KLs use the same masks (trustrl.envs.masks)."""
    starts: Tensor | None = None
    """A recurrent policy's episode-start flags [T, N] (True: step t is an episode's first,
    its state was reset there)."""
    state0: Tensor | None = None
    """A recurrent policy's state at the segment's start [N, S] (docs/recurrent.md)."""

    def flatten(self, advantages: Tensor, returns: Tensor) -> Batch:
        """[T, N] -> [B = T*N], with the GAE advantages and critic targets attached."""
        n = self.values.numel()
        return Batch(
            obs=self.obs.reshape(n, -1),
            actions=self.actions.reshape(n, *self.actions.shape[2:]),
            logp_old=self.logp.reshape(n),
            values_old=self.values.reshape(n),
            advantages=advantages.reshape(n),
            returns=returns.reshape(n),
            old_out=None if self.actor_out is None else self.actor_out.reshape(
                n, *self.actor_out.shape[2:]),
            action_mask=None if self.action_mask is None else self.action_mask.reshape(n, -1),
            starts=None if self.starts is None else self.starts.reshape(n),
            state0=self.state0,
        )


@dataclass
class Batch:
    """A rollout flattened to [B]; logp_old and values_old are frozen at collection."""

    obs: Tensor
    actions: Tensor
    logp_old: Tensor
    values_old: Tensor
    advantages: Tensor
    returns: Tensor
    old_out: Tensor | None = None
    action_mask: Tensor | None = None
    starts: Tensor | None = None  # [B], time-major as the rows (recurrent)
    state0: Tensor | None = None  # [N, S]: each env's state at the segment's start

    def __len__(self) -> int:
        return self.logp_old.shape[0]


@dataclass
class Episode:
    global_step: int
    env_index: int
    ret: float
    length: int


@dataclass
class RolloutState:
    """What the collector carries between rollouts (saved in checkpoints)."""

    next_obs: np.ndarray
    ep_return: np.ndarray
    ep_length: np.ndarray
    global_step: int = 0
    next_mask: np.ndarray | None = None
    """The action masks of next_obs [N, n] on a masked run whose env gives them in its info
    (an action_masks() method is asked at each step instead)."""
    hidden: np.ndarray | None = None
    """A recurrent policy's state before next_obs [N, S] (float32), carried across steps and
    iterations; None for a memoryless policy."""
    next_start: np.ndarray | None = None
    """(recurrent) [N] bool: next_obs is an episode's first observation."""


class Collector:
    def __init__(
        self,
        envs: Any,
        agent: Agent,
        num_steps: int,
        reward_scaler: RewardScaler | None,
        state: RolloutState,
        game_episodes: bool = False,
        acting: Any = None,
        mask_source: str | None = None,
    ):
        self.envs, self.agent, self.num_steps = envs, agent, num_steps
        self.reward_scaler, self.state = reward_scaler, state
        self.num_envs = envs.num_envs
        # True: the env records its own episodes (Gymnasium's RecordEpisodeStatistics inside
        # the wrappers, as the Atari chain does: whole games with raw scores, while its
        # learner's episodes are lives with clipped rewards); they are what gets logged
        self.game_episodes = game_episodes
        # the compiled per-step policy (trustrl.compute.compiled.CompiledActing: the same numbers as
        # the policy's sample_step, to rounding, in one call) or None: the policy module
        self.acting = acting
        # observations of images only are kept as uint8 pixel rows (the networks scale them
        # to the float32 values of the float rows): an Atari batch is 29 MB instead of 115,
        # in the rollout, in each epoch's shuffled copy and in the CNN's layout change
        self.pixels = acting is None and agent.obs_normalizer is None and pixel_rows(agent.spec)
        # where the action masks come from ('method', 'info': trustrl.envs.masks), or None;
        # the compiled per-step policy does not mask
        self.mask_source = mask_source
        if mask_source is not None and acting is not None:
            raise ValueError("the compiled per-step policy does not take action masks")

    def _masks(self, info: dict[str, Any]) -> np.ndarray:
        """The masks of the current observations [N, n] (an EnvError for a bad one)."""
        assert self.mask_source is not None
        return masks.read_masks(self.envs, self.mask_source, info, self.agent.spec.action,
                                f"env {self.agent.spec.env_id!r}")

    @staticmethod
    def start(envs: Any, agent: Agent, seed: int, mask_source: str | None = None
              ) -> RolloutState:
        """Reset the envs with seeds seed, seed+1, ... and start the trackers (and, on a masked
        run, check and keep the first observations' masks)."""
        obs, info = envs.reset(seed=[seed + i for i in range(envs.num_envs)])
        if agent.obs_normalizer is not None:
            agent.obs_normalizer.update(obs_to_array(obs, agent.spec))
        n = envs.num_envs
        mask = None if mask_source is None else masks.read_masks(
            envs, mask_source, info, agent.spec.action, f"env {agent.spec.env_id!r}")
        hidden = agent.initial_state(n)
        return RolloutState(obs, np.zeros(n), np.zeros(n, np.int64), 0, mask, hidden,
                            None if hidden is None else np.ones(n, bool))

    def _check_finite(self, what: str, rows: np.ndarray, env_index: np.ndarray | None = None
                      ) -> None:
        """Raise NonFiniteError naming the first env whose row holds NaN or inf. rows: one per
        env, or one per entry of env_index."""
        if np.isfinite(rows).all():  # the usual case, in one call
            return
        x = np.asarray(rows, np.float64).reshape(len(rows), -1)
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            first = int(np.argmax(bad))
            env = first if env_index is None else int(env_index[first])
            raise NonFiniteError(what, env, self.state.global_step)

    def _tensor(self, x: np.ndarray) -> Tensor:
        """Rows of obs_to_array(..., self.pixels) as the networks take them: uint8 pixels as
        they are, float rows normalised (Agent.array_tensor)."""
        return torch.from_numpy(x).to(self.agent.device) if self.pixels else \
            self.agent.array_tensor(x)

    @torch.no_grad()
    def collect(self) -> tuple[Rollout, list[Episode]]:
        T, N, agent, st = self.num_steps, self.num_envs, self.agent, self.state
        policy, device = agent.policy, agent.device
        obs_buf = torch.zeros((T, N, agent.spec.obs_dim), device=device,
                              dtype=torch.uint8 if self.pixels else torch.float32)
        if agent.spec.action.kind == "discrete":
            act_buf = torch.zeros((T, N), dtype=torch.long, device=device)
        else:
            act_buf = torch.zeros((T, N, agent.spec.action.dim), device=device)
        logp_buf = torch.zeros((T, N), device=device)
        val_buf = torch.zeros((T, N), device=device)
        rew_buf = torch.zeros((T, N), device=device)
        term_buf = torch.zeros((T, N), dtype=torch.bool, device=device)
        trunc_buf = torch.zeros((T, N), dtype=torch.bool, device=device)
        final_val = torch.zeros((T, N), device=device)  # V(final obs) on truncated steps
        episodes: list[Episode] = []
        out_buf: Tensor | None = None
        # on a CPU the per-step rows go in through NumPy views of the records (the same
        # values: float64 rewards rounded to float32 either way), a fraction of torch's cost
        views = (rew_buf.numpy(), term_buf.numpy(), trunc_buf.numpy()) \
            if rew_buf.device.type == "cpu" else None
        acting = self.acting
        if acting is not None:
            out_buf = torch.zeros((T, N, acting.net.n_out))
            acting.begin(obs_buf, act_buf, logp_buf, val_buf, out_buf)
        mask_buf: Tensor | None = None
        if self.mask_source is not None:
            n_mask = masks.mask_size(agent.spec.action)
            mask_buf = torch.zeros((T, N, n_mask), dtype=torch.bool, device=device)

        # a recurrent policy: its state carried from step to step (and in st between
        # rollouts), the segment's start state and the episode starts kept for the update
        hidden = None if st.hidden is None else torch.as_tensor(st.hidden, device=device)
        state0 = None if hidden is None else hidden.clone()
        start_buf = None if hidden is None else torch.zeros((T, N), dtype=torch.bool,
                                                            device=device)
        obs_t = self._tensor(obs_to_array(st.next_obs, agent.spec, self.pixels))
        for t in range(T):
            if acting is not None:  # the same records, written by one compiled call
                action = acting.step(t, obs_t)
            else:
                # = dist(obs).sample(), .log_prob(action), value(obs), without module
                # overhead; the actor's output kept as pi_old's (a policy may give only the
                # first three); on a masked run, under the current observations' masks
                kw: dict[str, Any] = {}
                if mask_buf is not None:  # (a policy's own sample_step need not take masks)
                    mask = st.next_mask if self.mask_source == "info" else self._masks({})
                    mask_buf[t] = kw["mask"] = torch.as_tensor(mask, device=device)
                if start_buf is not None:  # one step of the unroll from the carried state
                    start_buf[t] = kw["starts"] = torch.as_tensor(st.next_start, device=device)
                    kw["state"] = hidden
                    *res, hidden = policy.sample_step(obs_t, with_out=True, **kw)
                else:
                    res = policy.sample_step(obs_t, with_out=True, **kw)
                action, logp, value, *out = res
                obs_buf[t], act_buf[t] = obs_t, action
                logp_buf[t], val_buf[t] = logp, value
                if out:
                    if out_buf is None:
                        out_buf = torch.zeros((T, *out[0].shape), device=device)
                    out_buf[t] = out[0]

            next_obs, reward, term, trunc, info = self.envs.step(agent.env_action(action))
            st.global_step += N
            next_x = obs_to_array(next_obs, agent.spec, self.pixels)  # once per step
            if not self.pixels:  # pixels are finite
                self._check_finite("observation", next_x)
            self._check_finite("reward", reward)
            done = np.logical_or(term, trunc)
            if start_buf is not None:
                st.next_start = done  # SAME_STEP autoreset: next_obs starts an episode

            st.ep_return += reward
            st.ep_length += 1
            if self.game_episodes:  # the env's own record of whole games (raw scores)
                fin = info.get("final_info", {})
                if "episode" in fin:
                    rec = fin["episode"]
                    for i in np.flatnonzero(fin["_episode"]):
                        episodes.append(Episode(st.global_step, int(i), float(rec["r"][i]),
                                                int(rec["l"][i])))
            else:
                for i in np.flatnonzero(done):
                    episodes.append(Episode(st.global_step, int(i), float(st.ep_return[i]),
                                            int(st.ep_length[i])))
            st.ep_return[done] = 0.0
            st.ep_length[done] = 0

            if agent.obs_normalizer is not None:
                agent.obs_normalizer.update(next_x)
            if trunc.any():
                idx = np.flatnonzero(trunc)
                final = obs_to_array(stack_obs([info["final_obs"][i] for i in idx]),
                                     agent.spec)  # any space: Dict, Tuple, images...
                self._check_finite("final observation", final, idx)
                # a recurrent V of the final observation: from the state after step t
                seq = {} if hidden is None else {
                    "state": hidden[torch.as_tensor(idx)],
                    "starts": torch.zeros(len(idx), device=device)}
                final_val[t, torch.as_tensor(idx)] = policy.value(agent.array_tensor(final),
                                                                  **seq)
            if self.reward_scaler is not None:
                reward = self.reward_scaler(reward, done)
            if views is not None:
                views[0][t], views[1][t], views[2][t] = reward, term, trunc
            else:
                rew_buf[t] = torch.as_tensor(reward, dtype=torch.float32, device=device)
                term_buf[t] = torch.as_tensor(term, device=device)
                trunc_buf[t] = torch.as_tensor(trunc, device=device)
            st.next_obs = next_obs
            if self.mask_source == "info":  # the masks of next_obs (SAME_STEP: the reset's
                st.next_mask = self._masks(info)  # where an episode ended)
            obs_t = self._tensor(next_x)

        if hidden is None:
            last_val = policy.value(obs_t)
        else:
            st.hidden = hidden.cpu().numpy()
            last_val = policy.value(obs_t, state=hidden,
                                    starts=torch.as_tensor(st.next_start, device=device))
        next_values = torch.cat([val_buf[1:], last_val[None]], dim=0)
        next_values = torch.where(trunc_buf, final_val, next_values)
        next_values = torch.where(term_buf, torch.zeros_like(next_values), next_values)
        return (
            Rollout(obs_buf, act_buf, logp_buf, val_buf, rew_buf, next_values, term_buf, trunc_buf,
                    out_buf, mask_buf, start_buf, state0),
            episodes,
        )
