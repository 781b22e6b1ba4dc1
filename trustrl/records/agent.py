"""Agent = policy network + observation normalizer + what it needs to know about the env."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl.envs import masks
from trustrl.envs.make import EnvSpec, obs_to_array
from trustrl.envs.spaces import RAW_KINDS, check_observation, raw_columns
from trustrl.maths.normalize import ObsNormalizer
from trustrl.nets.policies import ActionSpec, Policy, build_policy, policy_from_kwargs
from trustrl.util.errors import EnvError, RunError

AGENT_FORMAT = 1


def make_policy(spec: EnvSpec, cfg: Any) -> Policy:
    """The policy network a config asks for on an env (trustrl.nets.policies.build_policy): the
    config's MLPs, behind a CNN extractor for image observations, or the user's module of
    `cfg.policy` ("module:factory")."""
    return build_policy(spec.obs_dim, spec.action, spec.layout(), cfg.hidden_sizes,
                        cfg.activation, cfg.shared_trunk, cfg.log_std_init, cfg.ortho_init,
                        getattr(cfg, "policy", "") or "", getattr(cfg, "recurrent", "none"),
                        getattr(cfg, "recurrent_hidden", 64))


class Agent:
    """A trained (or training) policy, ready to act on raw env observations.

    `act` normalises with the agent's own statistics (frozen outside training; image parts of an
    observation are never normalised, only scaled to [0, 1]), so observations go in exactly as
    the env returns them and actions come out ready for env.step (Box actions clipped to the
    bounds and shaped as the space's; the policy's log-probs are always of the unclipped
    sample).

    Args:
        policy: the actor-critic network (trustrl.nets.policies).
        spec: the env's observation and action layout (trustrl.spaces.EnvSpec).
        obs_normalizer: the running observation statistics, or None (no normalisation).
        device: where the network runs.
        raw_parts: the observation parts the normaliser leaves alone ("image", one-hots, bits).
    """

    def __init__(
        self,
        policy: Policy,
        spec: EnvSpec,
        obs_normalizer: ObsNormalizer | None = None,
        device: str | torch.device = "cpu",
        raw_parts: tuple[str, ...] = RAW_KINDS,
    ):
        self.policy, self.spec, self.obs_normalizer = policy, spec, obs_normalizer
        self.raw_parts = tuple(raw_parts)  # the parts the normaliser leaves alone
        self.device = torch.device(device)
        a = spec.action
        if a.kind == "box":
            self._low = np.asarray(a.low, np.float32)
            self._high = np.asarray(a.high, np.float32)
        self._shape = a.shape if a.kind in ("box", "multibinary") and len(a.shape) > 1 else None
        self._start = np.asarray(a.start, np.int64) if a.start else None
        self._raw_cols = raw_columns(spec.layout(), spec.obs_dim, self.raw_parts)

    # --- observation and action plumbing -----------------------------------------------------
    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Raw vector-env observations [N, ...] -> normalised float32 tensor [N, obs_dim].

        Args:
            obs: a batch of observations as the vector env returns them.
        """
        return self.array_tensor(obs_to_array(obs, self.spec))

    def array_tensor(self, x: np.ndarray) -> torch.Tensor:
        """Observations already as float arrays [N, obs_dim] -> normalised float32 tensor.

        Args:
            x: the flattened observations [N, obs_dim].
        """
        if self.obs_normalizer is not None:
            y = self.obs_normalizer(x)
            if self._raw_cols is not None:  # images (scaled to [0, 1] only), one-hots, bits
                y = np.where(self._raw_cols, x, y)
            x = y
        return torch.as_tensor(x, dtype=torch.float32, device=self.device)

    def env_action(self, actions: torch.Tensor) -> np.ndarray:
        """Policy samples -> what env.step takes: Box actions clipped to the bounds (and shaped
        as the space), integers for Discrete and MultiDiscrete (plus the space's start),
        int8 bits for MultiBinary.

        Args:
            actions: the policy's samples [N, ...].
        """
        a = actions.cpu().numpy()
        kind = self.spec.action.kind
        if kind == "box":
            a = np.clip(a, self._low, self._high)
        elif kind == "multibinary":
            a = a.astype(np.int8)
        else:
            a = a.astype(np.int64)
            if self._start is not None:
                a = a + self._start
        return a if self._shape is None else a.reshape(len(a), *self._shape)

    def mask_tensor(self, action_masks: Any, n: int) -> torch.Tensor | None:
        """Action masks for n observations as a bool tensor [n, n_actions], checked
        (trustrl.envs.masks.check_masks: an EnvError for a bad one).

        Args:
            action_masks: [n_actions] for one observation, [n, n_actions] for a batch
                (MultiDiscrete: sum(nvec) per row), or None (then None is returned).
            n: how many observations.
        """
        if action_masks is None:
            return None
        if masks.mask_size(self.spec.action) is None:
            raise EnvError(f"action masks apply to Discrete and MultiDiscrete actions, not "
                           f"{self.spec.action.kind}")
        m = np.asarray(action_masks)
        m = m.reshape(n, -1) if m.ndim == 1 and n == 1 else m
        return torch.as_tensor(masks.check_masks(m, self.spec.action, n, "action_masks"),
                               device=self.device)

    @property
    def recurrent(self) -> bool:
        """Whether the policy has a recurrent state (recurrent 'lstm' or 'gru')."""
        return bool(getattr(self.policy, "recurrent", False))

    def initial_state(self, n: int) -> np.ndarray | None:
        """A recurrent policy's state before n envs' first steps [n, S] (zeros; LSTM: h and
        c side by side), or None for a memoryless policy.

        Args:
            n: how many envs.
        """
        if not self.recurrent:
            return None
        return np.zeros((n, self.policy.state_size), np.float32)  # type: ignore[union-attr]

    def step_dist(self, x: torch.Tensor, mask: torch.Tensor | None, state: Any = None,
                  episode_start: Any = None) -> tuple[Any, np.ndarray | None]:
        """(the action distribution of normalised rows x [N, obs_dim], the next state): for a
        recurrent policy one step from `state` ([N, S]; None: an episode's start) with
        `episode_start` ([N] booleans: the state is reset there; None: none starts unless
        `state` is None), else the policy's distribution and None.

        Args:
            x: the observation rows (array_tensor's).
            mask: the valid actions [N, n] or None.
            state: the recurrent state, as the last call returned it.
            episode_start: which rows start an episode.
        """
        if not self.recurrent:
            return self.policy.dist(x, mask), None
        n = x.shape[0]
        if state is None:
            h, starts = self.initial_state(n), np.ones(n, np.float32)
        else:
            h = np.asarray(state, np.float32).reshape(n, -1)
            starts = (np.zeros(n, np.float32) if episode_start is None
                      else np.asarray(episode_start, np.float32).reshape(n))
        pol = self.policy
        out, _, nxt = pol.step(x, torch.as_tensor(h, device=self.device),  # type: ignore[union-attr]  # noqa: E501
                               torch.as_tensor(starts, device=self.device))
        from trustrl.nets.policies import make_dist

        return make_dist(self.spec.action, out, pol.log_std, mask), nxt.cpu().numpy()

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = True, action_masks: Any = None,
            state: Any = None, episode_start: Any = None) -> Any:
        """Action(s) for one observation or a batch [N, ...] of any observation space (a
        Dict observation as a dict of arrays, a batch as a dict of batches; lists and tuples
        of numbers too). Greedy (mode) by default. An observation of another shape, or not of
        numbers, is an ObservationError naming the shape expected. A recurrent policy's act
        returns (action(s), next state) instead, as `predict`.

        Args:
            obs: one observation or a batch, as the env returns them.
            deterministic: the distribution's mode (True) or a sample (False).
            action_masks: (Discrete, MultiDiscrete) the valid actions, [n] or [N, n]
                booleans (sb3-contrib's name); an invalid action is then never returned,
                greedy or sampled.
            state: (recurrent policies) the state the previous call returned; None: the
                episodes start here.
            episode_start: (recurrent policies) [N] booleans, True where an episode starts
                at this observation (its state is reset).
        """
        batch, single = check_observation(obs, self.spec.layout())
        x = obs_to_array(batch, self.spec)
        d, nxt = self.step_dist(self.array_tensor(x), self.mask_tensor(action_masks, len(x)),
                                state, episode_start)
        a = self.env_action(d.mode() if deterministic else d.sample())
        a = a[0] if single else a
        return (a, nxt) if self.recurrent else a

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False, action_masks: Any = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """Stable-Baselines3's predict: (action, state) for one observation, (actions, state)
        for a batch; deterministic=False samples, as SB3's default (`act` is greedy by
        default). The state is a recurrent policy's ([N, S] floats: give it back with the
        next observation); None for a memoryless policy.

        Args:
            observation: one observation or a batch.
            state: the recurrent state the previous call returned (None: episodes start).
            episode_start: [N] booleans, True where an episode starts at this observation
                (SB3's argument: the state is reset there).
            deterministic: the mode (True) or a sample (False).
            action_masks: the valid actions, as sb3-contrib's MaskablePPO.predict takes them.
        """
        out = self.act(observation, deterministic=deterministic, action_masks=action_masks,
                       state=state, episode_start=episode_start)
        return out if self.recurrent else (out, None)

    def evaluate(self, env: Any, episodes: int = 10, deterministic: bool = True,
                 **kwargs: Any) -> np.ndarray:
        """trustrl.evaluate(self, env, ...): the returns of `episodes` episodes on `env` (an
        id, 'module:Name', an env class or function, a gymnasium.Env or vector env).

        Args:
            env: the env to play.
            episodes: how many episodes.
            deterministic: greedy (True) or sampled (False) actions.
            **kwargs: the other keywords of trustrl.evaluate (seed, max_parallel, max_steps).
        """
        from trustrl.collect.evaluate import evaluate

        return evaluate(self, env, episodes, deterministic, **kwargs)

    def frozen(self) -> Agent:
        """A copy whose normaliser no longer updates (for evaluation)."""
        norm = copy.deepcopy(self.obs_normalizer)
        if norm is not None:
            norm.frozen = True
        return Agent(self.policy, self.spec, norm, self.device, self.raw_parts)

    # --- files -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What agent.pt holds: tensors and plain values (the network's kwargs and weights,
        the normaliser's statistics, the spec)."""
        return {
            "format": AGENT_FORMAT,
            "policy_kwargs": self.policy.kwargs(),
            "policy": {k: v.cpu() for k, v in self.policy.state_dict().items()},
            "obs_normalizer": None if self.obs_normalizer is None
            else self.obs_normalizer.state_dict(),
            "spec": {**self.spec.__dict__, "action": self.spec.action.__dict__},
            "raw_parts": list(self.raw_parts),
        }

    def save(self, path: str | Path) -> None:
        """Write agent.pt atomically, tensors and plain values only (loads with
        weights_only=True).

        Args:
            path: the file to write.
        """
        from trustrl.util.safeio import save_safe

        save_safe(self.state(), Path(path))

    @classmethod
    def from_state(cls, state: dict[str, Any], device: str = "cpu") -> Agent:
        """The agent `state()` describes (its normaliser frozen).

        Args:
            state: what `state()` returned (or agent.pt loaded).
            device: where the network runs.
        """
        policy = policy_from_kwargs(state["policy_kwargs"])
        policy.load_state_dict(state["policy"])
        policy.to(device).eval()
        s = dict(state["spec"])
        a = dict(s.pop("action"))
        s["obs_layout"] = tuple(s.get("obs_layout", ()))
        spec = EnvSpec(action=ActionSpec.from_dict(a), **s)
        norm = None
        if state.get("obs_normalizer") is not None:
            norm = ObsNormalizer((spec.obs_dim,))
            norm.load_state_dict(state["obs_normalizer"])
            norm.frozen = True
        # files from before raw_parts: the normaliser left the images alone only
        raw = state.get("raw_parts", ["image"])
        return cls(policy, spec, norm, device, tuple(str(k) for k in raw))

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> Agent:
        """Load from agent.pt, a checkpoint file, or a run folder (its agent.pt, else latest
        checkpoint).

        Args:
            path: agent.pt, a checkpoint file or a run folder.
            device: where the network runs.
        """
        p = Path(path)
        if p.is_dir() and (p / "population.json").is_file():
            members = sorted(q.name for q in p.iterdir() if (q / "config.json").is_file())
            raise RunError(f"{p} holds a population of seeds: give one seed's run folder inside "
                           f"it (e.g. {p / members[0]})" if members else
                           f"{p} holds a population of seeds but no seed folder")
        if p.is_dir():
            candidates = [p / "agent.pt", p / "checkpoints" / "latest.pt"]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                raise RunError(f"{p} holds no agent.pt and no checkpoint")
            p = found
        if not p.is_file():
            raise RunError(f"no such agent file or run folder: {p}")
        from trustrl.util.safeio import load_safe, non_finite

        # weights_only: nothing in the file can run; the code it names only if it is signed
        state = load_safe(p, "agent file")
        if isinstance(state, dict) and state.get("learner") == "batched":
            raise RunError(f"{p} is a checkpoint of the batched collector (--vector torch): its "
                           "agent.pt "
                           "is written when the run finishes; resume it with trustrl train "
                           "--resume RUN")
        if isinstance(state, dict) and "agent" in state:  # a training checkpoint
            state = state["agent"]
        if not isinstance(state, dict) or state.get("format") != AGENT_FORMAT:
            raise RunError(f"{p} is not a trustrl agent file")
        bad = non_finite({"policy": state.get("policy"),
                          "obs_normalizer": state.get("obs_normalizer")})
        if bad:
            raise RunError(f"{p} holds non-finite weights ({bad[:80]} has NaN or inf): an "
                           "agent trained into a divergence, or a damaged file")
        try:
            return cls.from_state(state, device)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
            msg = (str(e).splitlines() or [""])[0][:120]
            raise RunError(f"{p} is not a trustrl agent file this version reads "
                           f"({type(e).__name__}: {msg})") from None
