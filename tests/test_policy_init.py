"""ortho_init: orthogonal init by default (unchanged), PyTorch's default init when false.

rl-baselines3-zoo's tuned MuJoCo settings use SB3 policies with ortho_init=False; the option
exists so those settings can be written as trustrl config keys (benchmarks/suite/
mujoco_tuned.yaml). These tests pin both inits against a reference built by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trustrl.nets.policies import ActionSpec, ActorCritic
from trustrl.settings.config import PPOConfig, make_config
from trustrl.util.errors import ConfigError

OBS_DIM = 3
BOX = ActionSpec("box", dim=2, low=(-1.0, -1.0), high=(1.0, 1.0))
DISCRETE = ActionSpec("discrete", n=3)
HIDDEN = (8, 5)


def _linears(policy: ActorCritic) -> list[nn.Linear]:
    """The layers in construction order: actor trunk, critic trunk, policy head, value head."""
    out = [m for m in policy.actor_trunk if isinstance(m, nn.Linear)]
    out += [m for m in policy.critic_trunk if isinstance(m, nn.Linear)]
    return out + [policy.policy_head, policy.value_head]


def _reference(seed: int, n_out: int, ortho: bool) -> list[nn.Linear]:
    """The same layers built by hand, in the same order, from the same RNG state."""
    torch.manual_seed(seed)
    shapes = [(OBS_DIM, 8), (8, 5)] * 2 + [(5, n_out), (5, 1)]
    gains = [math.sqrt(2.0)] * 4 + [0.01, 1.0]
    layers = []
    for (n_in, n_o), gain in zip(shapes, gains, strict=True):
        layer = nn.Linear(n_in, n_o)
        if ortho:
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)
        layers.append(layer)
    return layers


@pytest.mark.parametrize("action", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize("ortho", [True, False])
def test_init_matches_hand_built_reference(action: ActionSpec, ortho: bool) -> None:
    torch.manual_seed(7)
    policy = ActorCritic(OBS_DIM, action, HIDDEN, ortho_init=ortho)
    n_out = action.n if action.kind == "discrete" else action.dim
    for got, want in zip(_linears(policy), _reference(7, n_out, ortho), strict=True):
        torch.testing.assert_close(got.weight, want.weight, rtol=0, atol=0)
        torch.testing.assert_close(got.bias, want.bias, rtol=0, atol=0)


def test_default_is_orthogonal_and_unchanged() -> None:
    torch.manual_seed(3)
    default = ActorCritic(OBS_DIM, BOX, HIDDEN)
    torch.manual_seed(3)
    explicit = ActorCritic(OBS_DIM, BOX, HIDDEN, ortho_init=True)
    for a, b in zip(default.parameters(), explicit.parameters(), strict=True):
        assert torch.equal(a, b)
    first = default.actor_trunk[0].weight  # [8, 3]: orthonormal columns, scaled by sqrt(2)
    torch.testing.assert_close(first.T @ first, 2.0 * torch.eye(OBS_DIM), atol=1e-5, rtol=0)
    head = default.policy_head.weight  # [2, 5]: orthonormal rows, scaled by 0.01
    torch.testing.assert_close(head @ head.T, 1e-4 * torch.eye(2), atol=1e-9, rtol=0)
    assert all(torch.count_nonzero(m.bias) == 0 for m in _linears(default))


def test_pytorch_default_init_is_bounded_uniform_and_not_orthogonal() -> None:
    torch.manual_seed(0)
    policy = ActorCritic(OBS_DIM, BOX, (256, 256), ortho_init=False)
    for layer in _linears(policy):
        bound = 1.0 / math.sqrt(layer.in_features)
        assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound
        assert torch.count_nonzero(layer.bias) == layer.bias.numel()
    hidden = policy.actor_trunk[2].weight  # [256, 256], uniform: var = bound^2 / 3
    assert hidden.var().item() == pytest.approx(1.0 / (3 * 256), rel=0.05)
    gram = hidden @ hidden.T
    assert not torch.allclose(gram, gram[0, 0] * torch.eye(256), atol=1e-2)
    # the policy head is not shrunk to 0.01: its rows have the default scale
    assert policy.policy_head.weight.abs().max() > 0.01
    # log-std is a parameter set by log_std_init either way
    torch.testing.assert_close(policy.log_std, torch.zeros(2))


def test_config_key_default_parse_and_validation() -> None:
    assert PPOConfig().ortho_init is True
    cfg = make_config("ppo", "Pendulum-v1", sets={"ortho_init": "false"})
    assert cfg.ortho_init is False
    with pytest.raises(ConfigError, match="ortho_init"):
        make_config("ppo", "CartPole-v1", sets={"ortho_init": "false", "vector": "torch"})


def test_trainer_builds_the_configured_init(tmp_path) -> None:
    from trustrl.learn.learners import GymLearner

    def first_bias(ortho: bool) -> torch.Tensor:
        cfg = make_config("ppo", "Pendulum-v1", flags={"runs_dir": str(tmp_path / str(ortho))},
                          sets={"ortho_init": str(ortho), "total_steps": "2048",
                                "tensorboard": "false", "vector": "sync"})
        learner = GymLearner(cfg)
        try:
            return learner.agent().policy.actor_trunk[0].bias.detach().clone()
        finally:
            learner.close()

    assert torch.count_nonzero(first_bias(True)) == 0
    assert torch.count_nonzero(first_bias(False)) == 64  # default hidden width 64, none zero
