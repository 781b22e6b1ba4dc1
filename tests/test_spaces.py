"""Every Gymnasium space (issue 15, points 1, 2 and 4): the new action distributions' maths
(log-prob, entropy, exact KL and TRPO's Fisher products against the explicit Fisher), the
observation encodings, images, Agent.act on any observation shape, agent files, and user
networks; then one learning test per space on a tiny env with a known optimum.

Each learning test trains PPO (or TRPO) on the Gymnasium collector for a few thousand steps,
on 2 seeds, and asserts on every seed that the greedy return reaches a named threshold below
the optimum; the margins measured when the test was written are in each test's docstring."""

from __future__ import annotations

import itertools
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from trustrl.agent import Agent
from trustrl.backends import Autograd, pick
from trustrl.config import make_config
from trustrl.distributions import Bernoulli, MultiCategorical
from trustrl.envs.make import spaces_spec
from trustrl.errors import ConfigError, EnvError, TrustrlError
from trustrl.extractors import NatureCNN, SmallCNN
from trustrl.learners import GymLearner, population_net
from trustrl.policies import ActionSpec, ActorCritic, build_policy
from trustrl.popnet import ModuleNet

F64 = torch.float64
MD = ActionSpec("multidiscrete", n=5, dim=2, nvec=(2, 3))
MB = ActionSpec("multibinary", n=3, dim=3, shape=(3,))


# --- the distributions' maths ---------------------------------------------------------------

def _module_net(action: ActionSpec, seed: int = 0) -> ModuleNet:
    torch.manual_seed(seed)
    pol = ActorCritic(3, action, (5,), "tanh").double()
    flat = torch.cat([p.detach().reshape(-1) for p in pol.parameters()])[None]
    flat = flat + 0.5 * torch.randn_like(flat)  # away from the near-uniform init
    return ModuleNet(pol, action, flat.clone().requires_grad_(True))


def _all_actions(action: ActionSpec) -> torch.Tensor:
    if action.kind == "multidiscrete":
        return torch.tensor(list(itertools.product(*[range(n) for n in action.nvec])), dtype=F64)
    return torch.tensor(list(itertools.product((0, 1), repeat=action.n)), dtype=F64)


@pytest.mark.parametrize("action", [MD, MB], ids=["multidiscrete", "multibinary"])
def test_log_prob_entropy_and_kl_against_enumeration(action):
    """log-probs sum to one over every joint action; the entropy and the exact KL equal their
    sums over the joint actions; the distributions' classes agree with PopNet's maths."""
    net = _module_net(action)
    obs = torch.randn(1, 4, 3, dtype=F64)
    out = net.actor(obs)
    old_out = out.detach() + 0.3 * torch.randn_like(out)
    acts = _all_actions(action)  # [K, d]
    K = len(acts)
    lp = torch.stack([net.log_prob(out, acts[k].expand(1, 4, -1)) for k in range(K)], -1)
    lpo = torch.stack([net.log_prob(old_out, acts[k].expand(1, 4, -1)) for k in range(K)], -1)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(1, 4, dtype=F64), atol=1e-12)
    ent = -(lp.exp() * lp).sum(-1)
    kl = (lpo.exp() * (lpo - lp)).sum(-1)
    _, got_ent = net.log_prob_entropy(out, acts[0].expand(1, 4, -1))
    assert torch.allclose(got_ent, ent, atol=1e-10)
    assert torch.allclose(net.kl_from(old_out, out, net.flat.detach()), kl, atol=1e-10)
    d = (MultiCategorical(out[0], action.nvec) if action.kind == "multidiscrete"
         else Bernoulli(out[0]))
    do = (MultiCategorical(old_out[0], action.nvec) if action.kind == "multidiscrete"
          else Bernoulli(old_out[0]))
    assert torch.allclose(d.entropy(), ent[0], atol=1e-10)
    assert torch.allclose(do.kl(d), kl[0], atol=1e-10)
    assert torch.allclose(d.log_prob(acts[1].expand(4, -1)), lp[0, :, 1], atol=1e-12)
    assert d.sample().shape == d.mode().shape == (4, action.dim)


@pytest.mark.parametrize("action", [MD, MB], ids=["multidiscrete", "multibinary"])
def test_fisher_product_equals_explicit_fisher(action):
    """TRPO/NPG's Fisher product on the autograd backend (the Hessian of the mean exact KL by
    double backprop) against the explicit Fisher E_s sum_a pi(a|s) g g^T, g = grad log pi,
    every joint action enumerated; damping adds damping * v."""
    net = _module_net(action, seed=1)
    S = 6
    obs = torch.randn(1, S, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    flat_old = net.flat.detach().clone()
    mask = net.actor_mask
    old_out = net.actor(obs, flat_old).detach()
    acts = _all_actions(action)
    D = flat_old.shape[1]
    F = torch.zeros(D, D, dtype=F64)
    for s in range(S):
        for a in acts:
            x = flat_old.clone().requires_grad_(True)
            lp = net.log_prob(net.actor(obs[:, s:s + 1], x), a.expand(1, 1, -1), x).sum()
            (g,) = torch.autograd.grad(lp, x)
            F += lp.exp().detach() * torch.outer(g[0], g[0])
    F /= S
    assert F[~mask].abs().max() == 0  # the critic's columns are outside the Fisher
    fvp = Autograd().fisher_product(net, obs, old_out, flat_old, 0.0)
    damped = Autograd().fisher_product(net, obs, old_out, flat_old, 0.1)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        v = torch.randn(1, D, dtype=F64, generator=g) * mask
        ref = (F @ v[0])[None]
        assert torch.allclose(fvp(v), ref, atol=1e-9), (fvp(v) - ref).abs().max()
        assert torch.allclose(damped(v), ref + 0.1 * v, atol=1e-9)


def test_closed_form_kept_where_it_applies_autograd_picked_elsewhere():
    """The MLP population network (closed form) for Discrete/Box on flat observations; a
    ModuleNet with autograd for the new action spaces and for a CNN extractor."""
    box = ActionSpec("box", dim=2, low=(-1.0, -1.0), high=(1.0, 1.0))
    spec_img = spaces_spec("img", gym.spaces.Box(0, 255, (36, 36, 3), np.uint8),
                           gym.spaces.Discrete(2))
    for pol, closed in ((ActorCritic(4, box), True), (ActorCritic(4, MD), False),
                        (ActorCritic(4, MB), False),
                        (build_policy(spec_img.obs_dim, spec_img.action, spec_img.layout()),
                         False)):
        net = population_net([pol], spaces_spec("x", gym.spaces.Box(-1, 1, (4,)),
                                                gym.spaces.Discrete(2)), "cpu")
        assert net.closed_form is closed
        assert pick(net).name == ("closed-form" if closed else "autograd")


# --- spaces ---------------------------------------------------------------------------------

def test_spaces_to_specs_and_flat_rows():
    spec = spaces_spec("t", gym.spaces.Dict({
        "md": gym.spaces.MultiDiscrete([2, 3]), "mb": gym.spaces.MultiBinary(2),
        "pos": gym.spaces.Discrete(3, start=1), "v": gym.spaces.Box(-1, 1, (2, 2))}),
        gym.spaces.Box(-1, 1, (2, 3)))
    assert spec.obs_kind == "dict" and spec.obs_dim == 5 + 2 + 3 + 4
    assert spec.action.kind == "box" and spec.action.dim == 6 and spec.action.shape == (2, 3)
    from trustrl.envs.make import obs_to_array

    obs = {"md": np.array([[1, 2]]), "mb": np.array([[1, 0]]), "pos": np.array([3]),
           "v": np.arange(4.0).reshape(1, 2, 2)}
    row = obs_to_array(obs, spec)
    by_key = {p["path"][0]: row[0, p["offset"]:p["offset"] + p["size"]] for p in spec.layout()}
    assert by_key["md"].tolist() == [0, 1, 0, 0, 1]
    assert by_key["mb"].tolist() == [1, 0] and by_key["pos"].tolist() == [0, 0, 1]
    assert by_key["v"].tolist() == [0, 1, 2, 3]
    t = spaces_spec("t", gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(3))),
                    gym.spaces.MultiBinary(4))
    assert t.obs_kind == "tuple" and t.obs_dim == 5 and t.action.kind == "multibinary"
    with pytest.raises(EnvError, match="Graph|Text|Sequence"):
        spaces_spec("t", gym.spaces.Text(5), gym.spaces.Discrete(2))
    with pytest.raises(EnvError, match="action space"):
        spaces_spec("t", gym.spaces.Discrete(2), gym.spaces.Text(5))


@pytest.mark.parametrize("shape,chw", [((36, 36, 3), (3, 36, 36)), ((1, 16, 16), (1, 16, 16)),
                                       ((4, 40, 44), (4, 40, 44))])
def test_images_detected_scaled_transposed_and_not_normalised(shape, chw):
    """uint8 images with 1/3/4 channels first or last: one part of kind image, scaled to [0,
    1] and channels-first; NatureCNN from 36 pixels, a small CNN below; the agent's normaliser
    leaves image columns as they are; act takes one observation or a batch."""
    spec = spaces_spec("img", gym.spaces.Box(0, 255, shape, np.uint8), gym.spaces.Discrete(3))
    (part,) = spec.layout()
    assert spec.obs_kind == "image" and part["chw"] == list(chw)
    from trustrl.envs.make import obs_to_array

    img = np.random.default_rng(0).integers(0, 256, (2, *shape), dtype=np.uint8)
    row = obs_to_array(img, spec)
    ref = img if list(shape) == list(chw) else img.transpose(0, 3, 1, 2)
    assert np.allclose(row, ref.reshape(2, -1) / 255.0)
    pol = build_policy(spec.obs_dim, spec.action, spec.layout())
    cnn = pol.actor_extractor.cnns[0]
    assert type(cnn) is (NatureCNN if min(chw[1:]) >= 36 else SmallCNN)
    from trustrl.normalize import ObsNormalizer

    norm = ObsNormalizer((spec.obs_dim,))
    norm.update(row * 7.0 + 3.0)
    agent = Agent(pol, spec, norm)
    assert torch.allclose(agent.obs_tensor(img), torch.as_tensor(row, dtype=torch.float32))
    assert agent.act(img[0]).shape == () and agent.act(img).shape == (2,)
    # a Box that is not an image (float, or bounds not 0/255) stays a flat vector
    assert spaces_spec("f", gym.spaces.Box(0, 1, shape), gym.spaces.Discrete(2)).obs_kind == "box"


def test_agent_acts_on_dict_obs_and_saves_and_loads_with_weights_only(tmp_path):
    spec = spaces_spec("d", gym.spaces.Dict({
        "img": gym.spaces.Box(0, 255, (16, 16, 1), np.uint8), "k": gym.spaces.Discrete(4)}),
        gym.spaces.MultiDiscrete([3, 2]))
    torch.manual_seed(0)
    agent = Agent(build_policy(spec.obs_dim, spec.action, spec.layout()), spec)
    rng = np.random.default_rng(1)
    batch = {"img": rng.integers(0, 256, (5, 16, 16, 1), dtype=np.uint8),
             "k": np.array([0, 1, 2, 3, 0])}
    a = agent.act(batch, deterministic=False)
    assert a.shape == (5, 2) and a.dtype == np.int64 and (a[:, 0] < 3).all()
    greedy = agent.act(batch)
    one = agent.act({"img": batch["img"][2], "k": 2})
    assert one.shape == (2,) and (one == greedy[2]).all()
    agent.save(tmp_path / "agent.pt")
    torch.load(tmp_path / "agent.pt", weights_only=True)
    again = Agent.load(tmp_path / "agent.pt")
    assert (again.act(batch) == greedy).all()
