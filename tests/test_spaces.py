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

from trustrl.compute.backends import Autograd, pick
from trustrl.envs.make import spaces_spec
from trustrl.learn.learners import GymLearner, population_net
from trustrl.maths.distributions import Bernoulli, MultiCategorical
from trustrl.nets.extractors import NatureCNN, SmallCNN
from trustrl.nets.policies import ActionSpec, ActorCritic, build_policy
from trustrl.nets.popnet import ModuleNet
from trustrl.records.agent import Agent
from trustrl.settings.config import make_config
from trustrl.util.errors import ConfigError, EnvError, TrustrlError

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
    from trustrl.maths.normalize import ObsNormalizer

    norm = ObsNormalizer((spec.obs_dim,))
    norm.update(row * 7.0 + 3.0)
    agent = Agent(pol, spec, norm)
    assert torch.allclose(agent.obs_tensor(img), torch.as_tensor(row, dtype=torch.float32))
    assert agent.act(img[0]).shape == () and agent.act(img).shape == (2,)
    # a Box that is not an image (float, or bounds not 0/255) stays a flat vector
    assert spaces_spec("f", gym.spaces.Box(0, 1, shape), gym.spaces.Discrete(2)).obs_kind == "box"


def test_action_shapes_bounds_and_starts_reach_env_step_as_the_space_has_them():
    """Box (2, 3) actions: per-entry bounds in the space's (row-major) order, the flat
    Gaussian sample reshaped; MultiDiscrete and Discrete starts added; MultiBinary as int8
    bits in the space's shape."""
    low = np.arange(6, dtype=np.float32).reshape(2, 3)
    spec = spaces_spec("b", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(low, low + 0.5))
    agent = Agent(build_policy(spec.obs_dim, spec.action, spec.layout()), spec)
    a = agent.env_action(torch.full((4, 6), 100.0))
    assert a.shape == (4, 2, 3) and np.array_equal(a[1], low + 0.5)
    assert agent.act(np.zeros(3)).shape == (2, 3)
    assert gym.spaces.Box(low, low + 0.5).contains(agent.act(np.zeros(3), deterministic=False))
    spec = spaces_spec("m", gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([3, 2], start=[-1, 5]))
    agent = Agent(build_policy(spec.obs_dim, spec.action, spec.layout()), spec)
    assert agent.env_action(torch.tensor([[0, 1], [2, 0]])).tolist() == [[-1, 6], [1, 5]]
    spec = spaces_spec("d", gym.spaces.Discrete(2), gym.spaces.Discrete(3, start=-1))
    agent = Agent(build_policy(spec.obs_dim, spec.action, spec.layout()), spec)
    assert agent.env_action(torch.tensor([0, 2])).tolist() == [-1, 1]
    spec = spaces_spec("mb", gym.spaces.Discrete(2), gym.spaces.MultiBinary([2, 2]))
    agent = Agent(build_policy(spec.obs_dim, spec.action, spec.layout()), spec)
    bits = agent.act(np.array([0, 1]), deterministic=False)
    assert bits.shape == (2, 2, 2) and bits.dtype == np.int8
    assert gym.spaces.MultiBinary([2, 2]).contains(bits[0])


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


# --- learning tests: tiny envs with a known optimum -------------------------------------------

class _Bandit(gym.Env):
    """One-step episodes: a random context is shown, the action is scored, the episode ends.
    Subclasses give the spaces, `context()` and `reward(action)`."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.obs = self.context()
        return self.obs, {}

    def step(self, action):
        r = float(self.reward(action))
        self.obs = self.context()
        return self.obs, r, True, False, {}


class MultiDiscreteActions(_Bandit):
    """Context c in Discrete(3); MultiDiscrete([3, 4]) actions; 1 per dimension right:
    optimum 2, uniform random 7/12."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.MultiDiscrete([3, 4])

    def context(self):
        return int(self.np_random.integers(3))

    def reward(self, a):
        return int(a[0] == self.obs) + int(a[1] == (2 * self.obs + 1) % 4)


class MultiBinaryActions(_Bandit):
    """Context: signs x in {-1, 1}^2 as a Box of shape (2, 1) (observations of 2 dimensions);
    MultiBinary(4) actions, 1 per bit equal to [x0 > 0, x1 > 0, x0 * x1 > 0, 1]: optimum 4,
    uniform random 2."""

    observation_space = gym.spaces.Box(-1, 1, (2, 1))
    action_space = gym.spaces.MultiBinary(4)

    def context(self):
        return self.np_random.choice([-1.0, 1.0], (2, 1)).astype(np.float32)

    def reward(self, a):
        x = self.obs[:, 0]
        return int((np.asarray(a) == [x[0] > 0, x[1] > 0, x[0] * x[1] > 0, 1]).sum())


class MatrixBoxActions(_Bandit):
    """Context x uniform in [-1, 1]^2; Box actions of shape (2, 2); reward -||a - T(x)||^2
    with T(x) = 0.8 [[x0, -x0], [x1, 1]]: optimum 0, the initial greedy policy (a = 0) about
    -1.07."""

    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Box(-1, 1, (2, 2))

    def context(self):
        return self.np_random.uniform(-1, 1, 2).astype(np.float32)

    def reward(self, a):
        x = self.obs
        t = 0.8 * np.array([[x[0], -x[0]], [x[1], 1.0]])
        return -float(((np.asarray(a) - t) ** 2).sum())


class DictObs(_Bandit):
    """Dict observation {pos: Discrete(4), flag: MultiBinary(1), noise: Box(3)};
    MultiDiscrete([4, 2]) actions, 1 for a0 = pos and 1 for a1 = flag (the noise is a
    distractor): optimum 2, uniform random 3/4."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Discrete(4),
                                         "flag": gym.spaces.MultiBinary(1),
                                         "noise": gym.spaces.Box(-1, 1, (3,))})
    action_space = gym.spaces.MultiDiscrete([4, 2])

    def context(self):
        return {"pos": int(self.np_random.integers(4)),
                "flag": self.np_random.integers(0, 2, 1).astype(np.int8),
                "noise": self.np_random.uniform(-1, 1, 3).astype(np.float32)}

    def reward(self, a):
        return int(a[0] == self.obs["pos"]) + int(a[1] == self.obs["flag"][0])


class TupleObs(_Bandit):
    """Tuple observation (MultiDiscrete([2, 3]), MultiBinary(2)); MultiDiscrete([3, 2])
    actions, 1 for a0 = m1 and 1 for a1 = b1 (m0 and b0 distract): optimum 2, uniform random
    5/6."""

    observation_space = gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]),
                                          gym.spaces.MultiBinary(2)))
    action_space = gym.spaces.MultiDiscrete([3, 2])

    def context(self):
        return (self.np_random.integers(0, [2, 3]),
                self.np_random.integers(0, 2, 2).astype(np.int8))

    def reward(self, a):
        m, b = self.obs
        return int(a[0] == m[1]) + int(a[1] == b[1])


class ImageObs(_Bandit):
    """36x36 RGB uint8 images, channels last: a bright 10x10 square in the left or the right
    half, on noise; Discrete(2) actions: 1 for the square's side. Optimum 1, random 1/2."""

    observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def context(self):
        img = self.np_random.integers(0, 60, (36, 36, 3)).astype(np.uint8)
        self.side = int(self.np_random.integers(2))
        r, c = int(self.np_random.integers(0, 26)), int(self.np_random.integers(0, 8))
        c += 18 * self.side
        img[r:r + 10, c:c + 10] = 255
        return img

    def reward(self, a):
        return int(a) == self.side


ENVS = {cls.__name__: cls for cls in (MultiDiscreteActions, MultiBinaryActions,
                                      MatrixBoxActions, DictObs, TupleObs, ImageObs)}
for _name, _cls in ENVS.items():
    if f"trustrl-test/{_name}-v0" not in gym.registry:
        gym.register(f"trustrl-test/{_name}-v0", entry_point=_cls)


def _greedy_returns(env: str, algo: str = "ppo", steps: int = 6144, seeds=(0, 1), **sets):
    """Train on the Gymnasium collector, one learner per seed; the greedy mean return of 64
    evaluation episodes per seed."""
    out = []
    for seed in seeds:
        base = {"num_envs": 8, "num_steps": 32, "seed": seed, "vector": "sync",
                "eval_every": 0, "tensorboard": False, "preset": "none"}
        if algo == "ppo":
            base.update({"minibatch_size": 64, "update_epochs": 4, "lr": 1e-3})
        cfg = make_config(algo, f"trustrl-test/{env}-v0", sets={**base, **sets},
                          flags={"total_steps": steps})
        learner = GymLearner(cfg)
        try:
            for _ in range(cfg.num_iterations):
                learner.iterate()
            out.append(float(learner.evaluate(64).mean()))
        finally:
            learner.close()
    return out


# (env, threshold, optimum, random play, extra config): every seed must reach the threshold.
# Measured on seeds 0 and 1 when written (margin over the threshold): MultiDiscrete 2.0, 2.0
# (+0.1); MultiBinary 4.0, 4.0 (+0.1); Box (2, 2) -0.068, -0.069 (+0.031); Dict 2.0, 2.0
# (+0.1); Tuple 2.0, 2.0 (+0.1); image 1.0, 1.0 (+0.1). Each below 3 s a seed but the image's.
LEARNING = [
    ("MultiDiscreteActions", 1.9, 2.0, 7 / 12, {}),
    ("MultiBinaryActions", 3.9, 4.0, 2.0, {}),
    ("MatrixBoxActions", -0.1, 0.0, -1.07, {"log_std_init": -0.5, "steps": 16384}),
    ("DictObs", 1.9, 2.0, 0.75, {}),
    ("TupleObs", 1.9, 2.0, 5 / 6, {}),
    ("ImageObs", 0.9, 1.0, 0.5, {"steps": 1024}),
]


@pytest.mark.parametrize("env,threshold,optimum,random_play,sets", LEARNING,
                         ids=[x[0] for x in LEARNING])
def test_learns_each_space(env, threshold, optimum, random_play, sets):
    """Every seed's greedy return reaches the threshold (between random play and the
    optimum; margins in LEARNING's comment)."""
    returns = _greedy_returns(env, **sets)
    print(env, returns)
    assert all(r >= threshold for r in returns), (env, returns, threshold)


@pytest.mark.parametrize("env,algo,threshold", [("MultiBinaryActions", "npg", 3.9),
                                                ("DictObs", "trpo", 1.9)])
def test_trust_region_methods_learn_new_spaces(env, algo, threshold):
    """NPG on MultiBinary actions and TRPO on Dict observations with MultiDiscrete actions
    (Fisher products and exact KL of the new distributions, on the default networks through
    ModuleNet): 4.0, 4.0 and 2.0, 2.0 on seeds 0 and 1 when written (margin +0.1 each)."""
    returns = _greedy_returns(env, algo=algo, steps=6144)
    assert all(r >= threshold for r in returns), (env, algo, returns)


# --- user networks (issue 15, point 4) ------------------------------------------------------

MYNETS = textwrap.dedent('''
    """A user's networks, imported by path ("mynets:extractor", "mynets:actor_critic")."""
    import gymnasium as gym
    import torch
    from torch import nn


    def n_out(space):
        if isinstance(space, gym.spaces.MultiDiscrete):
            return int(space.nvec.sum())
        return int(space.n) if isinstance(space, gym.spaces.Discrete) else gym.spaces.flatdim(space)


    class Extractor(nn.Module):
        def __init__(self, observation_space, action_space):
            super().__init__()
            self.features_dim = 32
            self.net = nn.Sequential(nn.Linear(gym.spaces.flatdim(observation_space), 32),
                                     nn.ReLU())

        def forward(self, obs):
            return self.net(obs)


    class ActorCritic(nn.Module):
        def __init__(self, observation_space, action_space):
            super().__init__()
            n = gym.spaces.flatdim(observation_space)
            self.pi = nn.Sequential(nn.Linear(n, 32), nn.Tanh(), nn.Linear(32, n_out(action_space)))
            self.v = nn.Sequential(nn.Linear(n, 32), nn.Tanh(), nn.Linear(32, 1))

        def forward(self, obs):
            if isinstance(obs, dict):  # a Dict observation: a tensor per key
                obs = torch.cat([obs[k] for k in sorted(obs)], dim=-1)
            return self.pi(obs), self.v(obs)

        def actor_parameters(self):
            return self.pi.parameters()

        def critic_parameters(self):
            return self.v.parameters()


    def extractor(observation_space, action_space):
        return Extractor(observation_space, action_space)


    class Shared(ActorCritic):
        actor_parameters = critic_parameters = None  # no split: every parameter in both


    def actor_critic(observation_space, action_space):
        return ActorCritic(observation_space, action_space)


    def not_a_module():
        return 3


    class WrongShape(ActorCritic):
        def forward(self, obs):
            a, v = super().forward(obs)
            return a[:, :1], v


    def wrong_shape(observation_space, action_space):
        return WrongShape(observation_space, action_space)
''')


@pytest.fixture
def mynets(tmp_path, monkeypatch):
    """mynets.py in a fresh current folder (imported from there, as the CLI does)."""
    (tmp_path / "mynets.py").write_text(MYNETS)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    import sys

    sys.modules.pop("mynets", None)


@pytest.mark.parametrize("policy,algo,threshold", [("mynets:extractor", "ppo", 1.9),
                                                   ("mynets:actor_critic", "ppo", 1.9),
                                                   ("mynets:actor_critic", "trpo", 1.9)])
def test_user_networks_learn_multidiscrete_bandit(mynets, policy, algo, threshold):
    """A user's feature extractor (in front of the MLP heads) and a user's whole
    actor-critic, by import path from the current folder, learn the MultiDiscrete bandit
    (optimum 2, random 7/12) on 2 seeds; TRPO too (its Fisher products on the user's
    module)."""
    sets = {"policy": policy} if algo == "ppo" else {"policy": policy, "max_kl": 0.05}
    returns = _greedy_returns("MultiDiscreteActions", algo=algo, steps=6144, **sets)
    print(policy, algo, returns)
    assert all(r >= threshold for r in returns), returns


def test_user_network_saved_by_path_and_reimported(mynets):
    """The agent file holds the state dict, the import path and plain settings (loads with
    weights_only=True); Agent.load imports the module again; without it, one line."""
    import sys

    cfg = make_config("ppo", "trustrl-test/DictObs-v0", sets={
        "policy": "mynets:actor_critic", "num_envs": 2, "num_steps": 16, "vector": "sync",
        "minibatch_size": 16,
        "preset": "none"}, flags={"total_steps": 32})
    learner = GymLearner(cfg)
    learner.iterate()
    agent = learner.agent()
    learner.close()
    agent.save(mynets / "agent.pt")
    torch.load(mynets / "agent.pt", weights_only=True)
    from trustrl.util.safeio import load_safe

    kw = load_safe(mynets / "agent.pt")["policy_kwargs"]
    assert kw["custom"] == "mynets:actor_critic"
    assert sorted(p["kind"] for p in kw["layout"]) == ["box", "discrete", "multibinary"]
    obs = {"pos": np.array([0, 3]), "flag": np.array([[1], [0]], np.int8),
           "noise": np.zeros((2, 3), np.float32)}
    assert agent.act(obs).shape == (2, 2)
    again = Agent.load(mynets / "agent.pt")
    assert (again.act(obs) == agent.act(obs)).all()
    (mynets / "mynets.py").unlink()
    sys.modules.pop("mynets", None)
    with pytest.raises(TrustrlError, match="cannot import module 'mynets'") as e:
        Agent.load(mynets / "agent.pt")
    assert "\n" not in str(e.value)


def test_python_api_takes_the_factory_itself(mynets, monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(mynets))
    mod = importlib.import_module("mynets")
    cfg = make_config("ppo", "CartPole-v1", sets={"policy": mod.extractor, "preset": "none"})
    assert cfg.policy == "mynets:extractor" and cfg.vector in ("auto", "sync")
    cfg.resolve_vector()
    assert cfg.vector == "sync"
    with pytest.raises(ConfigError, match="top level"):
        make_config("ppo", "CartPole-v1", sets={"policy": lambda: None})


def test_cli_policy_and_its_bad_values(mynets):
    """--set policy=module:factory trains from the current folder; every bad value is one
    line and exit 2, with no run folder written."""
    from test_bad_inputs import TINY, assert_one_line_error, run_cli

    rc, _, err = run_cli(["train", "--set", "policy=mynets:actor_critic", "--set",
                          "runs_dir=ok", *TINY], mynets)
    assert rc == 0, err
    (agent_file,) = (mynets / "ok").glob("*/agent.pt")  # not best/agent.pt
    torch.load(agent_file, weights_only=True)
    from trustrl.util.safeio import load_safe

    assert load_safe(agent_file)["policy_kwargs"]["custom"] == "mynets:actor_critic"
    for bad, words in (("notapath", "module:factory"), ("a b:c", "module:factory"),
                       ("missingmod:f", "cannot import module"),
                       ("mynets:nothere", "has no attribute 'nothere'"),
                       ("os:system", "standard library"), ("shutil:rmtree", "standard library"),
                       ("mynets:not_a_module", "not a torch.nn.Module"),
                       ("mynets:wrong_shape", "needs (2, 2)"),
                       ("mynets:actor_critic", "vector 'torch'"),
                       ("mynets:extractor", "grad_backend 'closed-form' needs"),
                       ("mynets:Shared", "trpo needs separate actor and critic parameters")):
        extra = {"vector 'torch'": ["--set", "vector=torch"],
                 "grad_backend 'closed-form' needs": ["--set", "grad_backend=closed-form"],
                 }.get(words, [])
        algo = ["trpo"] if words.startswith("trpo") else []
        rc, _, err = run_cli(["train", *algo, "--set", f"policy={bad}", "--set", "runs_dir=bad",
                              *extra, *TINY], mynets)
        assert rc == 2, (bad, err)
        assert_one_line_error(rc, err)
        assert words in err, (bad, err)
    assert not (mynets / "bad").exists()


class _Walk(gym.Env):
    """Never terminates: episodes end by the time limit only (truncation), so the collector
    bootstraps from V(final observation), taken from info["final_obs"]."""

    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), float(action), False, False, {}


class DictWalk(_Walk):
    observation_space = gym.spaces.Dict({"k": gym.spaces.Discrete(3),
                                         "img": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8)})


class TupleWalk(_Walk):
    observation_space = gym.spaces.Tuple((gym.spaces.MultiBinary(2), gym.spaces.Discrete(2)))


@pytest.mark.parametrize("cls", [DictWalk, TupleWalk], ids=["dict", "tuple"])
def test_truncated_episodes_bootstrap_from_structured_final_observations(cls):
    env_id = f"trustrl-test/{cls.__name__}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=cls, max_episode_steps=3)
    cfg = make_config("ppo", env_id, sets={"num_envs": 2, "num_steps": 8, "vector": "sync",
                                           "minibatch_size": 16, "preset": "none"},
                      flags={"total_steps": 16})
    learner = GymLearner(cfg)
    try:
        rollout, episodes = learner.collector.collect()
    finally:
        learner.close()
    assert len(episodes) == 4 and rollout.truncated.sum() == 4 and not rollout.terminated.any()
    t, n = map(int, torch.nonzero(rollout.truncated)[0])
    assert rollout.next_values[t, n] != 0 and torch.isfinite(rollout.next_values).all()


def test_shared_extractor_sample_step_equals_separate_calls():
    spec = spaces_spec("img", gym.spaces.Box(0, 255, (1, 16, 16), np.uint8),
                       gym.spaces.Discrete(3))
    torch.manual_seed(0)
    pol = build_policy(spec.obs_dim, spec.action, spec.layout(), shared_trunk=True)
    assert pol.critic_extractor is pol.actor_extractor
    x = torch.rand(5, spec.obs_dim)
    torch.manual_seed(1)
    a, lp, v = pol.sample_step(x)
    torch.manual_seed(1)
    with torch.no_grad():
        d = pol.dist(x)
        a2 = d.sample()
        assert torch.equal(a, a2) and torch.allclose(lp, d.log_prob(a2))
        assert torch.allclose(v, pol.value(x))


def test_nature_cnn_channels_last_batches_equal_the_plain_layout():
    """Large CPU batches run NatureCNN in channels-last layout (faster convolutions); the
    features are the same, flattened in the same (C, H, W) order."""
    from trustrl.nets.extractors import CHANNELS_LAST_MIN, NatureCNN

    torch.manual_seed(0)
    m = NatureCNN((4, 40, 44))
    for n in (2, CHANNELS_LAST_MIN, 3 * CHANNELS_LAST_MIN):
        x = torch.rand(n, 4, 40, 44)
        ref = torch.relu(m.linear(torch.flatten(m.convs[:-1](x), 1)))
        assert torch.allclose(m(x), ref, atol=1e-5)


# --- images as uint8 pixel rows ---------------------------------------------------------------

def test_pixel_rows_scaled_by_the_networks_equal_the_float_rows():
    """An observation of images only travels as uint8 rows (channels first, not scaled); the
    networks' float_pixels gives exactly the float rows flatten_obs gives, for every pixel
    value and for channels-last and several image parts; a layout with a non-image part
    has no pixel rows."""
    from trustrl.envs.make import pixel_rows
    from trustrl.envs.spaces import flatten_obs
    from trustrl.nets.extractors import float_pixels

    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (6, 5, 3), np.uint8),
                             "b": gym.spaces.Box(0, 255, (1, 8, 8), np.uint8)})
    spec = spaces_spec("img", space, gym.spaces.Discrete(2))
    assert pixel_rows(spec)
    rng = np.random.default_rng(0)
    obs = {"a": rng.integers(0, 256, (4, 6, 5, 3), dtype=np.uint8),
           "b": rng.integers(0, 256, (4, 1, 8, 8), dtype=np.uint8)}
    obs["a"].reshape(-1)[:256] = np.arange(256)  # every value once
    rows = flatten_obs(obs, spec.layout(), pixels=True)
    assert rows.dtype == np.uint8 and rows.shape == (4, spec.obs_dim)
    floats = flatten_obs(obs, spec.layout())
    assert torch.equal(float_pixels(torch.from_numpy(rows)), torch.from_numpy(floats))
    x = torch.rand(3, 5)
    assert float_pixels(x) is x
    mixed = spaces_spec("mix", DictWalk.observation_space, gym.spaces.Discrete(2))
    assert not pixel_rows(mixed)
    with pytest.raises(ValueError):
        flatten_obs({"k": np.zeros(2, np.int64), "img": np.zeros((2, 8, 8, 1), np.uint8)},
                    mixed.layout(), pixels=True)


def test_cnn_on_pixel_rows_equals_the_cnn_on_float_rows():
    """NatureCNN, in both layouts (below and above CHANNELS_LAST_MIN frames), gives the same
    features on uint8 pixels as on the float rows."""
    torch.manual_seed(0)
    m = NatureCNN((4, 40, 44))
    for n in (2, 40):
        px = torch.randint(0, 256, (n, 4, 40, 44), dtype=torch.uint8)
        f = px.float() * torch.tensor(np.float32(1 / 255))
        assert torch.equal(m(px), m(f))


def test_image_training_on_pixel_rows_equals_training_on_float_rows(monkeypatch):
    """The collector keeps an image observation as uint8 rows; two PPO iterations on them give
    the very metrics and parameters of the same run on float rows."""
    import trustrl.collect.rollout

    def run():
        cfg = make_config("ppo", "trustrl-test/ImageObs-v0", sets={
            "num_envs": 4, "num_steps": 16, "seed": 3, "vector": "sync", "eval_every": 0,
            "tensorboard": False, "preset": "none", "minibatch_size": 32, "update_epochs": 2},
            flags={"total_steps": 128})
        learner = GymLearner(cfg)
        try:
            rows = [learner.iterate()[0][0] for _ in range(2)]
            return learner.collector.pixels, rows, learner.net.flat.detach().clone()
        finally:
            learner.close()

    pixels, rows, flat = run()
    monkeypatch.setattr(trustrl.collect.rollout, "pixel_rows", lambda spec: False)
    floats, rows_f, flat_f = run()
    assert pixels and not floats
    assert torch.equal(flat, flat_f)
    for r, rf in zip(rows, rows_f, strict=True):
        assert {k: v for k, v in r.items() if k not in ("sps", "time")} == \
            {k: v for k, v in rf.items() if k not in ("sps", "time")}


def test_a_nature_cnn_trains_on_every_core_by_default(tmp_path, monkeypatch):
    """torch_threads None: a learner whose network has a NatureCNN (images of sides >= 36) takes
    the available cores; one with a smaller image, or none, keeps one thread; a set value wins."""
    import os

    from trustrl.learn.learners import CORES_ENV
    from trustrl.nets.extractors import nature_cnn

    monkeypatch.delenv(CORES_ENV, raising=False)
    cores = len(os.sched_getaffinity(0))
    image = {"kind": "image", "chw": (4, 84, 84)}
    assert nature_cnn([image]) and nature_cnn([{"kind": "box"}, image])
    assert not nature_cnn([{"kind": "image", "chw": (1, 8, 8)}, {"kind": "box"}])
    before = torch.get_num_threads()
    try:
        for env, sets, want in (("trustrl-test/ImageObs-v0", {}, cores),
                                ("trustrl-test/ImageObs-v0", {"torch_threads": 1}, 1),
                                ("trustrl-test/DictObs-v0", {}, 1)):
            torch.set_num_threads(3 if cores != 3 else 4)
            cfg = make_config("ppo", env, sets={"num_envs": 2, "num_steps": 8, "vector": "sync",
                                                "preset": "none", "minibatch_size": 16, **sets},
                              flags={"total_steps": 16})
            GymLearner(cfg).close()
            assert torch.get_num_threads() == want, (env, sets)
    finally:
        torch.set_num_threads(before)
