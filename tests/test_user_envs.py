"""Envs as users have them (issue 15, point 5), continued training and fine-tuning (point 7):
an env class or factory with kwargs and wrappers, by import path from the current folder (CLI)
or as objects (Python API), recorded in config.json so that eval and resume make the same env;
docs/runs.md's "Your own env" commands (moved from the README), run as a user would;
`--resume RUN --total-steps N` on both collectors; `init_from`; and the bad inputs (one line,
exit 2, nothing written)."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import trustrl
from tests.test_bad_inputs import assert_one_line_error, run_cli
from trustrl.settings.config import make_config

ROOT = Path(__file__).resolve().parents[1]

ENV_MODULE = '''
import gymnasium as gym
import numpy as np


class Reach(gym.Env):
    def __init__(self, horizon=20, scale=1.0):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.horizon, self.scale = horizon, scale

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, self.np_random.uniform(-1, 1, (1,)).astype(np.float32)
        return self.x, {}

    def step(self, action):
        reward = -abs((int(action) - 1) - float(self.x[0])) * self.scale
        self.t += 1
        self.x = self.np_random.uniform(-1, 1, (1,)).astype(np.float32)
        return self.x, reward, False, self.t >= self.horizon, {}


def make_reach(horizon=20):
    return Reach(horizon=horizon)


class AddReward(gym.RewardWrapper):
    def __init__(self, env, bonus=0.0):
        super().__init__(env)
        self.bonus = bonus

    def reward(self, reward):
        return reward + self.bonus


class Counted(gym.Wrapper):
    made = 0

    def __init__(self, env):
        super().__init__(env)
        Counted.made += 1


gym.register(id=f"Reach{__name__[-8:]}-v0", entry_point=Reach, max_episode_steps=11)
'''


@pytest.fixture
def envmod(tmp_path, monkeypatch):
    """A fresh module holding the envs above, in a folder on sys.path: its name."""
    name = f"userenv_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / f"{name}.py").write_text(ENV_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    yield name
    sys.modules.pop(name, None)


def small(runs: Path, env, **sets):
    base = dict(total_steps=3 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=2,
                tensorboard=False, minibatch_size=32, update_epochs=2, runs_dir=str(runs))
    base.update(sets)
    cfg = make_config("ppo", "CartPole-v1", flags={k: v for k, v in base.items()
                                                  if k not in ("env_kwargs", "wrappers")})
    cfg.env_id = env
    cfg.env_kwargs = sets.get("env_kwargs", {})
    cfg.wrappers = sets.get("wrappers", [])
    return cfg


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text())


# ----- the Python API: objects in, import paths recorded ------------------------------------------
def test_api_env_class_kwargs_and_wrappers_are_recorded_and_remade(tmp_path, envmod):
    import importlib

    mod = importlib.import_module(envmod)
    res = trustrl.train(small(tmp_path / "runs", mod.Reach, env_kwargs={"horizon": 7},
                              wrappers=[(mod.AddReward, {"bonus": 10.0}), mod.Counted]))
    saved = config(res.run_dir)
    assert saved["env_id"] == f"{envmod}:Reach"
    assert saved["env_kwargs"] == {"horizon": 7}
    assert saved["wrappers"] == [{"wrapper": f"{envmod}:AddReward", "kwargs": {"bonus": 10.0}},
                                 f"{envmod}:Counted"]
    assert res.run_dir.name.startswith("Reach__ppo__")
    # episodes are 7 steps long and each reward is >= 10 - 2: the kwargs and the wrapper acted
    with open(res.run_dir / "episodes.csv", newline="") as f:
        eps = list(csv.DictReader(f))
    assert eps and all(int(e["length"]) == 7 and float(e["return"]) >= 7 * 8 for e in eps)
    # the CLI's eval rebuilds the same env from config.json: the same greedy returns
    rc, out, err = run_cli(["eval", str(res.run_dir), "--episodes", "2"], tmp_path)
    assert rc == 0, err
    mean = float(re.search(r"episodes: (-?[\d.]+)", out).group(1))
    assert mean == pytest.approx(res.final_eval["mean"], abs=0.01)
    assert f"{envmod}:Reach" in out


def test_a_factory_function_and_a_registered_id_with_kwargs(tmp_path, envmod):
    res = trustrl.train(small(tmp_path / "a", f"{envmod}:make_reach",
                              env_kwargs={"horizon": 5}))
    with open(res.run_dir / "episodes.csv", newline="") as f:
        assert {int(e["length"]) for e in csv.DictReader(f)} == {5}
    # a Gymnasium id with kwargs and one of Gymnasium's wrappers with kwargs, by import path
    res = trustrl.train(small(tmp_path / "b", "Pendulum-v1", env_kwargs={"g": 3.0},
                              wrappers=[{"wrapper": "gymnasium.wrappers:TimeLimit",
                                         "kwargs": {"max_episode_steps": 16}}]))
    saved = config(res.run_dir)
    assert saved["vector"] == "sync"  # the batched collector runs no kwargs or wrappers
    with open(res.run_dir / "episodes.csv", newline="") as f:
        assert {int(e["length"]) for e in csv.DictReader(f)} == {16}


def test_a_callable_without_an_import_path_cannot_be_remade(tmp_path, envmod):
    import importlib

    mod = importlib.import_module(envmod)
    res = trustrl.train(small(tmp_path / "runs", lambda horizon: mod.Reach(horizon),
                              env_kwargs={"horizon": 4}))
    saved = config(res.run_dir)
    assert saved["env_id"].startswith("<not importable> ") and "lambda" in saved["env_id"]
    note = json.loads((res.run_dir / "status.json").read_text())["note"]
    assert "cannot re-make the env" in note and "lambda" in note
    rc, _, err = run_cli(["eval", str(res.run_dir), "--episodes", "1"], tmp_path)
    assert_one_line_error(rc, err, "cannot re-make", "import path")
    rc, _, err = run_cli(["train", "--resume", str(res.run_dir), "--total-steps", "512"],
                         tmp_path)
    assert_one_line_error(rc, err, "cannot re-make")
    # from Python, given the callable again (it records as config.json does), it goes on
    make = lambda horizon: mod.Reach(horizon)  # noqa: E731 - the same qualname: <lambda>
    trustrl.resume(res.run_dir, total_steps=4 * 64, env=make)
    assert len(rows(res.run_dir)) == 4
    with pytest.raises(trustrl.ConfigError, match="not this run's env"):
        trustrl.resume(res.run_dir, env=mod.Reach)


# ----- the CLI: kwargs and wrappers, imports from the current folder, bad input ------------------
def test_cli_imports_from_the_current_folder_and_eval_remakes_the_env(tmp_path):
    name = f"cwdenv_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(ENV_MODULE)
    assert str(tmp_path) not in sys.path
    try:
        rc, out, err = run_cli(["train", "--env", f"{name}:Reach", "--set",
                                'env_kwargs={"horizon": 6, "scale": 2.0}', "--set",
                                f"wrappers={name}:Counted,gymnasium.wrappers:FlattenObservation",
                                "--total-steps", "128", "--set", "num_envs=2", "--set",
                                "num_steps=64", "--set", "eval_episodes=2", "--quiet",
                                "--runs-dir", "runs"], tmp_path)
        assert rc == 0, err
        run = next((tmp_path / "runs").iterdir())
        assert config(run)["wrappers"] == [f"{name}:Counted",
                                           "gymnasium.wrappers:FlattenObservation"]
        rc, out2, err = run_cli(["eval", str(run), "--episodes", "2"], tmp_path)
        assert rc == 0, err
        assert float(re.search(r"episodes: (-?[\d.]+)", out2).group(1)) == pytest.approx(
            json.loads((run / "eval.json").read_text())["mean"], abs=0.01)
        # an id the module registers on import ('module:Env-v0'), from the current folder
        rc, out, err = run_cli(["train", "--env", f"{name}:Reach{name[-8:]}-v0",
                                "--total-steps", "128", "--set", "num_envs=2", "--set",
                                "num_steps=64", "--quiet", "--runs-dir", "runs2"], tmp_path)
        assert rc == 0, err
        run = next((tmp_path / "runs2").iterdir())
        with open(run / "episodes.csv", newline="") as f:
            assert {int(e["length"]) for e in csv.DictReader(f)} == {11}
    finally:
        sys.modules.pop(name, None)
        while str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("sets, fragment", [
    (["wrappers=nosuchmodule_xyz:Wrap"], "cannot import module 'nosuchmodule_xyz'"),
    (["wrappers=gymnasium.wrappers:NoSuchWrapper"], "has no attribute 'NoSuchWrapper'"),
    (["wrappers=not a path"], "not an import path"),
    (["wrappers=os:system"], "names the standard library"),
    (["wrappers=[1, 2]"], "neither an import path"),
    (['wrappers=[{"wrapper": "gymnasium.wrappers:ClipReward", "kw": {}}]'], "kwargs"),
    (["env_kwargs=[1, 2]"], "env_kwargs must be a mapping"),
    (["env_kwargs={oops"], "env_kwargs must be a JSON object"),
    (["wrappers=gymnasium.wrappers:ClipReward"], "wrapper 'gymnasium.wrappers:ClipReward' on env"),
    (['env_kwargs={"no_such_kwarg": 1}'], "unexpected keyword argument 'no_such_kwarg'"),
    (["env_kwargs={\"g\": 1}", "vector=torch"], "env_kwargs and wrappers need vector"),
    (["init_from=nowhere/run"], "nowhere/run: no such run folder"),
    (["track=comet"], "track must be one of"),
])
def test_bad_env_kwargs_wrappers_and_sources_are_one_line_and_write_nothing(tmp_path, sets,
                                                                              fragment):
    args = ["train", "--env", "Pendulum-v1", "--runs-dir", "runs", "--quiet"]
    for s in sets:
        args += ["--set", s]
    rc, _, err = run_cli(args, tmp_path)
    assert_one_line_error(rc, err, fragment)
    assert not (tmp_path / "runs").exists()


def test_env_kwargs_as_a_table_of_a_config_file(tmp_path):
    (tmp_path / "c.toml").write_text('total_steps = 128\nnum_envs = 2\nnum_steps = 64\n'
                                     'eval_episodes = 1\n'
                                     'wrappers = [{wrapper = "gymnasium.wrappers:TimeLimit", '
                                     'kwargs = {max_episode_steps = 10}}]\n'
                                     '[env_kwargs]\ng = 2.5\n')
    rc, _, err = run_cli(["train", "--env", "Pendulum-v1", "--config", "c.toml",
                          "--runs-dir", "runs", "--quiet"], tmp_path)
    assert rc == 0, err
    saved = config(next((tmp_path / "runs").iterdir()))
    assert saved["env_kwargs"] == {"g": 2.5}
    assert saved["wrappers"] == [{"wrapper": "gymnasium.wrappers:TimeLimit",
                                  "kwargs": {"max_episode_steps": 10}}]


# ----- docs/runs.md's section, run as a user would ---------------------------------------------
def _readme_section() -> str:
    text = (ROOT / "docs" / "runs.md").read_text()
    start = text.index("## Your own env")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def test_docs_your_own_env_commands_run_from_a_folder_holding_the_module(tmp_path):
    section = _readme_section()
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    module = next(code for lang, code in blocks if lang == "python")
    (tmp_path / "myenv.py").write_text(module)
    commands = [line for lang, code in blocks if lang == "bash"
                for line in code.splitlines() if line.startswith("trustrl ")]
    assert len(commands) >= 4
    exe = shutil.which("trustrl", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the trustrl console script is not installed beside this Python")
    env = {"PATH": f"{Path(exe).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "TRUSTRL_TEST": "1"}
    for cmd in commands:
        cmd = cmd.replace("trustrl ", f"{exe} ", 1)
        p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
    base = next((tmp_path / "runs" / "base").iterdir())
    c = config(base)
    assert c["total_steps"] == 4096 and len(rows(base)) == 4096 // (c["num_envs"] * c["num_steps"])
    tuned = next((tmp_path / "runs" / "tuned").iterdir())
    assert config(tuned)["init_from"] == str(base.resolve())  # given relative, kept absolute
    # the Python snippet too, as a script in the same folder
    api = [code for lang, code in blocks if lang == "python"][1]
    (tmp_path / "api.py").write_text(api)
    p = subprocess.run([sys.executable, "api.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    first = sorted((tmp_path / "runs").glob("Reach__ppo__1__*"))[0]
    assert config(first)["wrappers"] == [{"wrapper": "myenv:ScaleReward",
                                          "kwargs": {"factor": 0.5}}]
    assert config(first)["total_steps"] == 4096


# ----- continued training ------------------------------------------------------------------------
@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_resume_with_total_steps_extends_a_finished_and_a_stopped_run(tmp_path, vector):
    cfg = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=4 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=1,
        tensorboard=False, minibatch_size=32, update_epochs=2, runs_dir=str(tmp_path),
        vector=vector, lr=1e-3))
    res = trustrl.train(cfg)
    run = res.run_dir
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    rc, _, err = run_cli(["train", "--resume", str(run), "--total-steps", "128"], tmp_path)
    assert_one_line_error(rc, err, "already trained 256 steps")
    rc, _, err = run_cli(["train", "--resume", str(run), "--total-steps", "512", "--quiet"],
                         tmp_path)
    assert rc == 0, err
    r = rows(run)
    assert [int(x["iteration"]) for x in r] == list(range(1, 9))
    assert config(run)["total_steps"] == 512
    # the linear annealing recomputed over the new total: lr0 (1 - (it - 1) / 8)
    for x in r[4:]:
        it = int(x["iteration"])
        assert float(x["lr"]) == pytest.approx(1e-3 * (1 - (it - 1) / 8), rel=1e-5)
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    # a run stopped by a callback, extended: it goes on to the new total
    res = trustrl.train(make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=4 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=1,
        tensorboard=False, minibatch_size=32, update_epochs=2, runs_dir=str(tmp_path / "s"),
        vector=vector)), callback=lambda row: row["iteration"] < 2)
    assert json.loads((res.run_dir / "status.json").read_text())["status"] == "stopped"
    trustrl.resume(res.run_dir, total_steps=6 * 64)
    assert len(rows(res.run_dir)) == 6
    # a plain resume after an extension keeps the new total (the checkpoint agrees)
    trustrl.resume(res.run_dir)
    assert len(rows(res.run_dir)) == 6
    if vector == "torch":  # a population: every member's folder goes on, and records the total
        pop = trustrl.train(make_config("ppo", "CartPole-v1", flags=dict(
            total_steps=2 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=1,
            tensorboard=False, minibatch_size=32, update_epochs=2,
            runs_dir=str(tmp_path / "p"))), seeds=[3, 4])
        trustrl.resume(pop.run_dir, total_steps=3 * 64)
        assert config(pop.run_dir)["total_steps"] == 3 * 64
        for m in pop.member_dirs:
            assert len(rows(m)) == 3 and config(m)["total_steps"] == 3 * 64


# ----- fine-tuning ------------------------------------------------------------------------------
@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_init_from_starts_from_the_agent_and_is_recorded(tmp_path, vector):
    flags = dict(total_steps=8 * 64, num_envs=2, num_steps=32, eval_every=1, eval_episodes=3,
                 tensorboard=False, minibatch_size=32, update_epochs=4, runs_dir=str(tmp_path),
                 vector=vector, normalize_obs=True, lr=3e-3)
    src = trustrl.train(make_config("ppo", "CartPole-v1", flags=flags))
    new = trustrl.train(make_config("ppo", "CartPole-v1", flags={**flags, "total_steps": 64}),
                        init_from=src.run_dir)
    assert config(new.run_dir)["init_from"] == str(src.run_dir)
    # its untrained evaluation is the source's final one: the same weights and statistics
    initial = json.loads((new.run_dir / "eval_initial.json").read_text())
    assert initial["returns"] == src.final_eval["returns"]
    fresh = json.loads((src.run_dir / "eval_initial.json").read_text())
    assert fresh["returns"] != src.final_eval["returns"]
    # what does not fit is one line, before any folder
    for bad, fragment in (({"hidden_sizes": (16,)}, "networks differ"),
                          ({"normalize_obs": False}, "normalize_obs"),):
        with pytest.raises(trustrl.ConfigError, match=fragment):
            trustrl.train(make_config("ppo", "CartPole-v1", flags={
                **flags, **bad, "runs_dir": str(tmp_path / "no")}), init_from=src.run_dir)
    with pytest.raises(trustrl.TrustrlError, match="space differs"):
        trustrl.train(make_config("ppo", "Acrobot-v1", flags={
            **flags, "runs_dir": str(tmp_path / "no")}), init_from=src.run_dir)
    assert not (tmp_path / "no").exists()


def test_envs_made_by_a_factory_are_picklable_for_exact_resume(tmp_path, envmod):
    """A sync run of a user class with a wrapper keeps its mid-episode envs in the checkpoint
    (no restart note), so resume is exact: the same rows as a run that never stopped."""
    def cfg(runs):
        return small(runs, f"{envmod}:Reach", env_kwargs={"horizon": 9},
                     wrappers=[f"{envmod}:AddReward"], total_steps=4 * 64)

    whole = trustrl.train(cfg(tmp_path / "a"))
    cut = trustrl.train(cfg(tmp_path / "b"), callback=lambda row: row["iteration"] < 2)
    trustrl.resume(cut.run_dir)
    assert "note" not in json.loads((cut.run_dir / "status.json").read_text())
    skip = {"wall_time", "sps"}
    a = [{k: v for k, v in x.items() if k not in skip} for x in rows(whole.run_dir)]
    b = [{k: v for k, v in x.items() if k not in skip} for x in rows(cut.run_dir)]
    assert a == b


def test_async_vector_env_of_a_factory(tmp_path, envmod):
    res = trustrl.train(small(tmp_path, f"{envmod}:make_reach", env_kwargs={"horizon": 3},
                              vector="async", total_steps=64))
    assert np.isfinite(res.final_eval["mean"])
    assert isinstance(gym.make("CartPole-v1"), gym.Env)


# ----- a run folder from someone else is data: the code its config.json names is not run -------
def test_code_named_by_a_config_json_from_someone_else_is_not_run(tmp_path, envmod,
                                                                   monkeypatch):
    res = trustrl.train(small(tmp_path / "runs", f"{envmod}:make_reach",
                              env_kwargs={"horizon": 3}, wrappers=[f"{envmod}:Counted"]))
    import os

    own_key = os.environ["TRUSTRL_KEY_FILE"]
    run = res.run_dir
    assert (run / "env.sig").is_file()
    rc, _, err = run_cli(["eval", str(run), "--episodes", "1"], tmp_path)
    assert rc == 0, err
    # another user's key: the folder came from elsewhere
    monkeypatch.setenv("TRUSTRL_KEY_FILE", str(tmp_path / "other.key"))
    for args in (["eval", str(run), "--episodes", "1"],
                 ["eval", str(run / "agent.pt"), "--episodes", "1"],
                 ["train", "--resume", str(run), "--total-steps", "512"]):
        rc, _, err = run_cli(args, tmp_path)
        assert_one_line_error(rc, err, "names code", "not signed with your key")
    monkeypatch.setenv("TRUSTRL_TRUST_FILES", "1")  # the user's opt-in
    rc, _, err = run_cli(["eval", str(run), "--episodes", "1"], tmp_path)
    assert rc == 0, err
    # the user's own key again, but config.json edited to name other code: refused
    monkeypatch.delenv("TRUSTRL_TRUST_FILES")
    monkeypatch.setenv("TRUSTRL_KEY_FILE", own_key)
    saved = config(run)
    saved["wrappers"] = ["os:system"]
    (run / "config.json").write_text(json.dumps(saved))
    rc, _, err = run_cli(["eval", str(run), "--episodes", "1"], tmp_path)
    assert_one_line_error(rc, err, "os:system", "not signed with your key")


def test_a_run_written_before_the_env_keys_still_resumes(tmp_path):
    """config.json and the checkpoint of a run from before env_kwargs, wrappers, init_from
    and track: those keys take their defaults, and the run resumes."""
    from trustrl.util.safeio import load_safe, save_safe

    res = trustrl.train(make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=2 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=1,
        tensorboard=False, minibatch_size=32, update_epochs=2, runs_dir=str(tmp_path),
        vector="sync")), callback=lambda row: False)
    new_keys = ("env_kwargs", "wrappers", "init_from", "track")
    saved = {k: v for k, v in config(res.run_dir).items() if k not in new_keys}
    (res.run_dir / "config.json").write_text(json.dumps(saved))
    ck_path = res.run_dir / "checkpoints" / "latest.pt"
    ck = load_safe(ck_path)
    ck["config"] = {k: v for k, v in ck["config"].items() if k not in new_keys}
    save_safe(ck, ck_path)
    trustrl.resume(res.run_dir)
    assert len(rows(res.run_dir)) == 2
