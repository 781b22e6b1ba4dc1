"""Folders from others are data (issue 52, point 1): a run folder, agent file, checkpoint or
sweep folder made elsewhere (signed with another key) that names code -- a policy module, an
extractor factory, an env id 'module:Env-v0', wrappers -- imports nothing on any command
(eval, train --init-from, train --resume with and without a checkpoint, sweep --resume, the
Python API); the refusal is one line. The payload is an installed package (a folder on
PYTHONPATH with its dist-info) whose import writes a marker file, or a module in the current
folder; with the user's opt-in (--trust-files, TRUSTRL_TRUST_FILES=1) it is imported, which
shows the payload is real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trustrl
from trustrl.settings.config import make_config
from trustrl.util.errors import RunError
from trustrl.util.safeio import UntrustedFileError, load_safe, save_safe

PAYLOAD = '''
import os
from pathlib import Path

Path(os.environ["PAYLOAD_MARKER"]).write_text(__name__)

import gymnasium as gym

gym.register(id="Evil-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
             max_episode_steps=50)


def net(observation_space, action_space):
    import torch
    return torch.nn.Linear(4, 3)
'''


@pytest.fixture(scope="module")
def victim_run(tmp_path_factory):
    """A finished one-seed run with its checkpoint, made under the session's key."""
    runs = tmp_path_factory.mktemp("own")
    cfg = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=64, num_envs=1, num_steps=64, minibatch_size=32, update_epochs=1,
        eval_every=0, eval_episodes=1, tensorboard=False, checkpoint_every=1, vector="sync",
        runs_dir=str(runs)))
    return trustrl.train(cfg).run_dir


@pytest.fixture
def world(tmp_path, monkeypatch, victim_run):
    """An installed payload package, the attacker's key, and the user's environment."""
    site = tmp_path / "site"
    (site / "payloadpkg").mkdir(parents=True)
    (site / "payloadpkg" / "__init__.py").write_text(PAYLOAD)
    (site / "payloadpkg-1.0.dist-info").mkdir()
    (site / "payloadpkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: payloadpkg\nVersion: 1.0\n")
    (site / "payloadpkg-1.0.dist-info" / "entry_points.txt").write_text(
        "[console_scripts]\npayload = payloadpkg:net\n")
    (tmp_path / "payload_cwd.py").write_text(PAYLOAD)  # a module in the current folder
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("PAYLOAD_MARKER", str(marker))
    monkeypatch.delenv("TRUSTRL_TRUST_FILES", raising=False)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return {"tmp": tmp_path, "site": site, "marker": marker, "env": env,
            "attacker": str(tmp_path / "attacker.key"), "own": victim_run,
            "victim_key": os.environ["TRUSTRL_KEY_FILE"]}


def foreign_copy(world, name: str, monkeypatch, config=None, agent=None) -> Path:
    """The victim's run copied and changed as an attacker would, every file re-signed with
    the attacker's key: config(dict) and agent(state) edit the contents in place."""
    from trustrl.records.runs import sign_env

    run = world["tmp"] / name
    shutil.copytree(world["own"], run, ignore=shutil.ignore_patterns(".trustrl.lock"))
    monkeypatch.setenv("TRUSTRL_TRUST_FILES", "1")
    monkeypatch.setenv("TRUSTRL_KEY_FILE", world["attacker"])
    saved = json.loads((run / "config.json").read_text())
    if config:
        config(saved)
        (run / "config.json").write_text(json.dumps(saved))
    (run / "env.sig").unlink(missing_ok=True)
    sign_env(run, saved)
    for f in (run / "agent.pt", run / "checkpoints" / "latest.pt"):
        state = load_safe(f)
        if agent:
            agent(state.get("agent", state) if f.parent.name == "checkpoints" else state)
            if "config" in state and config:
                config(state["config"])
        save_safe(state, f)
    monkeypatch.setenv("TRUSTRL_KEY_FILE", world["victim_key"])
    monkeypatch.delenv("TRUSTRL_TRUST_FILES")
    return run


def cli(world, args, trust=False):
    env = dict(world["env"])
    if trust:
        env["TRUSTRL_TRUST_FILES"] = "1"
    return subprocess.run([sys.executable, "-m", "trustrl", *args], env=env, cwd=world["tmp"],
                          capture_output=True, text=True, timeout=300)


def refused(world, proc, *needles):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("trustrl: error: ") and "not signed with your key" in lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
    assert not world["marker"].exists(), "the payload ran"


def set_policy(d):
    d["policy"] = "payloadpkg:net"


def set_env(d):
    d["env_id"] = "payloadpkg:Evil-v0"


def custom_policy(state):
    kw = state["policy_kwargs"]
    state["policy_kwargs"] = {"custom": "payloadpkg:net", "obs_dim": kw["obs_dim"],
                              "action": kw["action"], "layout": [], "log_std_init": 0.0}


def agent_env(state, module="payloadpkg"):
    state["spec"]["env_id"] = f"{module}:Evil-v0"


def test_a_policy_module_named_by_a_foreign_run_is_not_imported(world, monkeypatch):
    run = foreign_copy(world, "run_policy", monkeypatch, config=set_policy, agent=custom_policy)
    for args in (["eval", str(run), "--episodes", "1"],
                 ["eval", str(run / "agent.pt"), "--episodes", "1"],
                 ["train", "--resume", str(run), "--total-steps", "128"],
                 ["train", "--init-from", str(run / "agent.pt"), "--total-steps", "64",
                  "--set", "num_steps=64", "--set", "num_envs=1", "--vector", "sync",
                  "--runs-dir", str(world["tmp"] / "new")]):
        refused(world, cli(world, args), "payloadpkg:net")
    (run / "checkpoints" / "latest.pt").unlink()  # a resume from scratch reads config.json
    refused(world, cli(world, ["train", "--resume", str(run)]), "payloadpkg:net")
    assert not (world["tmp"] / "new").exists()
    # the opt-in imports it (the package is real)
    proc = cli(world, ["eval", str(run / "agent.pt"), "--episodes", "1", "--trust-files"])
    assert world["marker"].read_text() == "payloadpkg", proc.stderr


def test_an_env_id_with_a_module_prefix_from_a_foreign_run_is_not_imported(world, monkeypatch):
    run = foreign_copy(world, "run_env", monkeypatch, config=set_env, agent=agent_env)
    for args in (["eval", str(run), "--episodes", "1"],
                 ["train", "--resume", str(run), "--total-steps", "128"]):
        refused(world, cli(world, args), "payloadpkg:Evil-v0")
    # the agent file alone (no config.json beside it)
    alone = world["tmp"] / "alone"
    alone.mkdir()
    shutil.copy(run / "agent.pt", alone / "agent.pt")
    refused(world, cli(world, ["eval", str(alone / "agent.pt"), "--episodes", "1"]),
            "payloadpkg:Evil-v0")
    proc = cli(world, ["eval", str(run), "--episodes", "1"], trust=True)
    assert proc.returncode == 0, proc.stderr
    assert world["marker"].read_text() == "payloadpkg"


def test_a_module_in_the_current_folder_named_by_a_foreign_agent_is_not_imported(
        world, monkeypatch):
    run = foreign_copy(world, "run_cwd", monkeypatch,
                       agent=lambda s: agent_env(s, "payload_cwd"))
    (run / "config.json").unlink()
    refused(world, cli(world, ["eval", str(run / "agent.pt"), "--episodes", "1"]),
            "payload_cwd:Evil-v0")
    proc = cli(world, ["eval", str(run / "agent.pt"), "--episodes", "1", "--trust-files"])
    assert world["marker"].read_text() == "payload_cwd", proc.stderr


def test_the_python_api_refuses_foreign_code_too(world, monkeypatch):
    run = foreign_copy(world, "run_api", monkeypatch, config=set_policy, agent=custom_policy)
    sys.path.insert(0, str(world["site"]))
    try:
        with pytest.raises(UntrustedFileError, match="payloadpkg:net"):
            trustrl.Agent.load(run)
        with pytest.raises(UntrustedFileError, match="payloadpkg:net"):
            trustrl.resume(run)
        assert not world["marker"].exists()
        monkeypatch.setenv("TRUSTRL_TRUST_FILES", "1")
        with pytest.raises(RunError):  # imported, then its weights do not fit the module
            trustrl.Agent.load(run)
        assert world["marker"].exists()
    finally:
        sys.path.remove(str(world["site"]))
        sys.modules.pop("payloadpkg", None)


def test_a_foreign_agent_naming_no_code_still_loads(world, monkeypatch):
    """Sharing an agent of a registered env stays possible: no code, nothing to trust."""
    run = foreign_copy(world, "run_plain", monkeypatch)
    proc = cli(world, ["eval", str(run), "--episodes", "1"])
    assert proc.returncode == 0, proc.stderr


def test_a_foreign_sweep_folder_naming_code_runs_nothing(world, monkeypatch):
    from trustrl.sweep.folder import SweepFolder
    from trustrl.sweep.spec import parse_spec

    spec = parse_spec({"name": "s", "seeds": [0], "total_steps": 64, "envs": ["CartPole-v1"],
                       "algos": {"ppo": {"num_steps": 64, "num_envs": 1, "vector": "sync"}}})
    monkeypatch.setenv("TRUSTRL_KEY_FILE", world["attacker"])
    spec.trials[0].config["policy"] = "payloadpkg:net"
    folder = SweepFolder.create(world["tmp"] / "sweep", spec, "name: s\n")
    folder.unlock()
    monkeypatch.setenv("TRUSTRL_KEY_FILE", world["victim_key"])
    proc = cli(world, ["sweep", "--resume", str(folder.path), "--workers", "1"])
    refused(world, proc, "payloadpkg:net", "sweep.json")
    assert not any((folder.path / "trials").iterdir())
    with pytest.raises(UntrustedFileError):
        SweepFolder.open(folder.path)
    proc = cli(world, ["sweep", "--resume", str(folder.path), "--workers", "1",
                       "--trust-files"])
    assert world["marker"].exists(), proc.stderr


def test_the_readers_plot_report_and_demo_import_nothing_a_foreign_folder_names(
        world, monkeypatch):
    """plot, report and the demo server read a foreign run or sweep folder that names a
    policy module and an env id 'module:Env-v0' as data: they import nothing of it."""
    import urllib.request

    from trustrl.sweep.folder import SweepFolder
    from trustrl.sweep.spec import parse_spec

    def both(d):
        set_policy(d)
        set_env(d)

    run = foreign_copy(world, "run_read", monkeypatch, config=both,
                       agent=lambda s: (custom_policy(s), agent_env(s)))
    proc = cli(world, ["plot", str(run), "--out", str(world["tmp"] / "curve.png")])
    assert proc.returncode == 0 and (world["tmp"] / "curve.png").is_file(), proc.stderr
    spec = parse_spec({"name": "s", "seeds": [0], "total_steps": 64, "envs": ["CartPole-v1"],
                       "algos": {"ppo": {"num_steps": 64, "num_envs": 1, "vector": "sync"}}})
    monkeypatch.setenv("TRUSTRL_KEY_FILE", world["attacker"])
    both(spec.trials[0].config)
    folder = SweepFolder.create(world["tmp"] / "sweep", spec, "name: s\n")
    folder.unlock()
    monkeypatch.setenv("TRUSTRL_KEY_FILE", world["victim_key"])
    proc = cli(world, ["report", str(folder.path), "--out", str(world["tmp"] / "rep")])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not world["marker"].exists(), "plot or report ran the payload"
    demo = subprocess.Popen([sys.executable, "-m", "trustrl", "demo", "--port", "0", "--runs",
                             str(world["tmp"])], env=world["env"], cwd=world["tmp"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = demo.stdout.readline().split("serving on ", 1)[1].split()[0].rstrip("/")
        for path in ("/api/runs", f"/api/runs/{run.name}/info", f"/files/{run.name}/config.json",
                     "/dashboard"):
            with urllib.request.urlopen(url + path, timeout=30) as r:
                assert r.status == 200, path
    finally:
        demo.terminate()
        demo.communicate(timeout=60)
    assert not world["marker"].exists(), "the demo ran the payload"


def user_extractor(state):
    kw = state["policy_kwargs"]
    kw["extractor"] = {"kind": "user", "factory": "payloadpkg:net", "layout": []}


def set_algo_class(d):
    d["algo_class"] = "payloadpkg:net"


def set_wrappers(d):
    d["wrappers"] = ["payloadpkg:net"]


@pytest.mark.parametrize("name,config,agent,opt_in", [
    ("run_extractor", None, user_extractor, "eval"),  # an extractor's factory (agent file)
    ("run_algo_class", set_algo_class, None, "resume"),  # a user's algorithm class
    ("run_wrappers", set_wrappers, None, "eval"),  # an env wrapper
])
def test_an_extractor_factory_algo_class_or_wrapper_from_a_foreign_run_is_not_imported(
        world, monkeypatch, name, config, agent, opt_in):
    run = foreign_copy(world, name, monkeypatch, config=config, agent=agent)
    for args in (["eval", str(run), "--episodes", "1"],
                 ["eval", str(run / "agent.pt"), "--episodes", "1"],
                 ["train", "--resume", str(run), "--total-steps", "128"]):
        refused(world, cli(world, args), "payloadpkg:net")
    # the opt-in imports it (the path is real code): whatever happens after that
    args = (["eval", str(run), "--episodes", "1"] if opt_in == "eval"
            else ["train", "--resume", str(run), "--total-steps", "128"])
    proc = cli(world, [*args, "--trust-files"])
    assert world["marker"].read_text() == "payloadpkg", proc.stderr[-2000:]


def test_an_rlhf_run_folder_naming_reward_code_imports_nothing_on_resume(world):
    """An RLHF run folder names its reward functions in config.json; a resume imports only
    the functions given again on the command line (the folder's are data): without them, or
    with others, it is refused in one line before any import."""
    run = world["tmp"] / "rlhf_run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({
        "algo": "grpo", "config": {}, "hf": {"reward": ["payloadpkg:net"], "model": "m"}}))
    for extra in ([], ["--reward", "payloadpkg_other:net"]):
        proc = cli(world, ["rlhf", "grpo", "--resume", str(run), *extra])
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert "resume needs the run's reward functions on the command line" in lines[0]
        assert not world["marker"].exists(), "the payload ran"
