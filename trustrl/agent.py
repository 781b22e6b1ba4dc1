"""Agent = policy network + observation normalizer + what it needs to know about the env."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl.envs.make import EnvSpec, obs_to_array
from trustrl.errors import RunError
from trustrl.normalize import ObsNormalizer
from trustrl.policies import ActionSpec, ActorCritic

AGENT_FORMAT = 1


class Agent:
    """A trained (or training) policy, ready to act on raw env observations.

    `act` normalises with the agent's own statistics (frozen outside training), so observations
    go in exactly as the env returns them and actions come out ready for env.step (Box actions
    clipped to the bounds; the policy's log-probs are always of the unclipped sample).
    """

    def __init__(
        self,
        policy: ActorCritic,
        spec: EnvSpec,
        obs_normalizer: ObsNormalizer | None = None,
        device: str | torch.device = "cpu",
    ):
        self.policy, self.spec, self.obs_normalizer = policy, spec, obs_normalizer
        self.device = torch.device(device)
        if spec.action.kind == "box":
            self._low = np.asarray(spec.action.low, np.float32)
            self._high = np.asarray(spec.action.high, np.float32)

    # --- observation and action plumbing -----------------------------------------------------
    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Raw vector-env observations [N, ...] -> normalised float32 tensor [N, obs_dim]."""
        return self.array_tensor(obs_to_array(obs, self.spec))

    def array_tensor(self, x: np.ndarray) -> torch.Tensor:
        """Observations already as float arrays [N, obs_dim] -> normalised float32 tensor."""
        if self.obs_normalizer is not None:
            x = self.obs_normalizer(x)
        return torch.as_tensor(x, dtype=torch.float32, device=self.device)

    def env_action(self, actions: torch.Tensor) -> np.ndarray:
        """Policy samples -> what env.step takes (clipped to Box bounds, ints for Discrete)."""
        a = actions.cpu().numpy()
        if self.spec.action.kind == "box":
            return np.clip(a, self._low, self._high)
        return a.astype(np.int64)

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Action(s) for one observation or a batch [N, ...]. Greedy (mode) by default."""
        obs = np.asarray(obs)
        single = obs.ndim == (0 if self.spec.obs_kind == "discrete" else 1)
        batch = obs[None] if single else obs
        d = self.policy.dist(self.obs_tensor(batch))
        a = self.env_action(d.mode() if deterministic else d.sample())
        return a[0] if single else a

    def frozen(self) -> Agent:
        """A copy whose normaliser no longer updates (for evaluation)."""
        norm = copy.deepcopy(self.obs_normalizer)
        if norm is not None:
            norm.frozen = True
        return Agent(self.policy, self.spec, norm, self.device)

    # --- files -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "format": AGENT_FORMAT,
            "policy_kwargs": self.policy.kwargs(),
            "policy": {k: v.cpu() for k, v in self.policy.state_dict().items()},
            "obs_normalizer": None if self.obs_normalizer is None
            else self.obs_normalizer.state_dict(),
            "spec": {**self.spec.__dict__, "action": self.spec.action.__dict__},
        }

    def save(self, path: str | Path) -> None:
        """Atomically, tensors and plain values only (loads with weights_only=True)."""
        from trustrl.safeio import save_safe

        save_safe(self.state(), Path(path))

    @classmethod
    def from_state(cls, state: dict[str, Any], device: str = "cpu") -> Agent:
        policy = ActorCritic.from_kwargs(state["policy_kwargs"])
        policy.load_state_dict(state["policy"])
        policy.to(device).eval()
        s = dict(state["spec"])
        a = dict(s.pop("action"))
        a["low"], a["high"] = tuple(a["low"]), tuple(a["high"])
        spec = EnvSpec(action=ActionSpec(**a), **s)
        norm = None
        if state.get("obs_normalizer") is not None:
            norm = ObsNormalizer((spec.obs_dim,))
            norm.load_state_dict(state["obs_normalizer"])
            norm.frozen = True
        return cls(policy, spec, norm, device)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> Agent:
        """Load from agent.pt, a checkpoint file, or a run folder (its agent.pt, else latest
        checkpoint)."""
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
        from trustrl.safeio import load_safe

        state = load_safe(p, "agent file")  # weights_only: nothing in the file can run
        if isinstance(state, dict) and state.get("learner") == "batched":
            raise RunError(f"{p} is a checkpoint of the batched collector (--vector torch): its "
                           "agent.pt "
                           "is written when the run finishes; resume it with trustrl train "
                           "--resume RUN")
        if isinstance(state, dict) and "agent" in state:  # a training checkpoint
            state = state["agent"]
        if not isinstance(state, dict) or state.get("format") != AGENT_FORMAT:
            raise RunError(f"{p} is not a trustrl agent file")
        return cls.from_state(state, device)
