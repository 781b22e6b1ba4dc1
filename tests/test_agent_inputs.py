"""Agent.act and predict on what users pass (issue 53, point 4): lists, tuples and arrays of
any number type work where they are unambiguous; a wrong shape, a missing key, text, NaN or a
Discrete value out of range is one ObservationError line naming what was expected."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from trustrl import Agent
from trustrl.envs.make import spaces_spec
from trustrl.nets.policies import build_policy
from trustrl.util.errors import ObservationError, TrustrlError


def _agent(obs_space: gym.Space, act_space: gym.Space | None = None) -> Agent:
    spec = spaces_spec("x", obs_space, act_space or gym.spaces.Discrete(3))
    torch.manual_seed(0)
    return Agent(build_policy(spec.obs_dim, spec.action, spec.layout()), spec)


BOX = gym.spaces.Box(-1, 1, (4,), np.float32)


def test_lists_tuples_and_number_types_act_as_arrays():
    agent = _agent(BOX)
    obs = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    one = agent.act(obs)
    assert np.shape(one) == ()
    for same in (obs.tolist(), tuple(obs.tolist()), obs.astype(np.float64)):
        assert agent.act(same) == one
    batch = np.stack([obs, -obs])
    many = agent.act(batch)
    assert many.shape == (2,) and many[0] == one
    assert np.array_equal(agent.act(batch.tolist()), many)
    assert np.array_equal(agent.act([tuple(r) for r in batch.tolist()]), many)
    assert agent.act(np.zeros(4, np.int32)) == agent.act(np.zeros(4))
    action, state = agent.predict(obs, deterministic=True)
    assert action == one and state is None


@pytest.mark.parametrize("obs,fragment", [
    (np.zeros(1), "shape (1,): expected (4,) (one observation) or (N, 4) (a batch)"),
    (np.zeros((4, 1)), "shape (4, 1): expected (4,)"),
    (np.zeros((2, 3, 4)), "shape (2, 3, 4)"),
    ([1.0, 2.0], "shape (2,)"),
    ([[1.0, 2.0, 3.0, 4.0], [1.0]], "cannot be read as an array"),
    (["a", "b", "c", "d"], "must hold numbers"),
    (np.array([0.0, np.nan, 0.0, 0.0]), "NaN or inf"),
    (None, "must hold numbers"),
])
def test_a_box_observation_of_another_shape_is_one_line(obs, fragment):
    with pytest.raises(ObservationError) as e:
        _agent(BOX).act(obs)
    assert fragment in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, TrustrlError) and isinstance(e.value, ValueError)


def test_discrete_dict_and_tuple_observations():
    agent = _agent(gym.spaces.Discrete(5, start=1))
    assert agent.act(3) == agent.act(np.int64(3)) == agent.act(3.0)
    assert agent.act([1, 2, 5]).shape == (3,)
    for bad in (0, 6, 2.5, [1, 9]):
        with pytest.raises(ObservationError, match=r"whole numbers in \[1, 5\]"):
            agent.act(bad)
    space = gym.spaces.Dict({"pos": gym.spaces.Discrete(4), "x": gym.spaces.Box(-1, 1, (2,))})
    agent = _agent(space)
    one = agent.act({"pos": 2, "x": [0.5, -0.5]})
    batch = agent.act({"pos": [2, 0], "x": [[0.5, -0.5], [0.0, 0.0]]})
    assert batch.shape == (2,) and batch[0] == one
    with pytest.raises(ObservationError, match=r"observation\['x'\]: the observation has no "
                                               "key 'x'"):
        agent.act({"pos": 2})
    with pytest.raises(ObservationError, match="has 2 row"):
        agent.act({"pos": 2, "x": [[0.5, -0.5], [0.0, 0.0]]})
    agent = _agent(gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiBinary(2))))
    one = agent.act(([1, 2], [0, 1]))
    assert agent.act([[1, 2], [0, 1]]) == one  # a list of the parts reads the same
    with pytest.raises(ObservationError, match=r"observation\[0\].*whole numbers in \[0, 2\]"):
        agent.act(([1, 3], [0, 1]))


def test_the_normaliser_leaves_one_hots_and_bits_alone():
    from trustrl.maths.normalize import ObsNormalizer

    space = gym.spaces.Dict({"pos": gym.spaces.Discrete(3), "bits": gym.spaces.MultiBinary(2),
                             "x": gym.spaces.Box(-10, 10, (2,))})
    agent = _agent(space)
    norm = ObsNormalizer((agent.spec.obs_dim,))
    norm.rms.mean[:] = 0.5
    norm.rms.var[:] = 0.01
    norm.frozen = True
    agent.obs_normalizer = norm
    cols = {p["path"][0]: slice(p["offset"], p["offset"] + p["size"])
            for p in agent.spec.layout()}
    obs = {"pos": np.array([2]), "bits": np.array([[1, 0]]), "x": np.array([[1.5, 0.5]])}
    row = agent.obs_tensor(obs).numpy()[0]
    assert row[cols["pos"]].tolist() == [0, 0, 1] and row[cols["bits"]].tolist() == [1, 0]
    assert row[cols["x"]] == pytest.approx([10.0, 0.0], abs=1e-3)  # (x - 0.5) / 0.1
    # an agent file from before: its one-hots were normalised, and still are
    state = agent.state()
    state.pop("raw_parts")
    state["obs_normalizer"] = norm.state_dict()
    old = Agent.from_state(state)
    assert old.obs_tensor(obs).numpy()[0][cols["pos"]] == pytest.approx([-5, -5, 5], abs=1e-3)
    assert Agent.from_state(agent.state()).raw_parts == agent.raw_parts
