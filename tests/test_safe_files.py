"""No file trustrl reads runs code: a __reduce__ payload planted in agent.pt, a checkpoint (the
whole file, or its pickled envs), an RLHF model.pt or a sweep trial's checkpoint is refused
with one line, and runs only when the user opts in (which also shows the payload is real).
Plus: the safe format round-trips RNG states bit for bit, run-folder files follow the umask,
and temp files of killed writers are removed."""

from __future__ import annotations

import io
import os
import pickle
import random
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

import trustrl
from trustrl.records.agent import Agent
from trustrl.rlhf.model import ModelConfig, TinyLM, load_model, save_model
from trustrl.settings.config import make_config
from trustrl.util.errors import RunError
from trustrl.util.safeio import (
    UntrustedFileError,
    decode,
    encode,
    load_safe,
    save_safe,
    sign_pickle,
    verify_pickle,
)


class Payload:
    """Unpickling this writes the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


class Stop(Exception):
    pass


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """A per-test signing key outside the run folders, and no opt-in."""
    monkeypatch.setenv("TRUSTRL_KEY_FILE", str(tmp_path / "keys" / "checkpoint.key"))
    monkeypatch.delenv("TRUSTRL_TRUST_FILES", raising=False)


def small(runs: Path, **sets):
    base = dict(total_steps=6 * 256, num_envs=2, num_steps=128, minibatch_size=64,
                update_epochs=2, eval_every=3, eval_episodes=2, tensorboard=False,
                checkpoint_every=1, vector="sync")  # Gymnasium envs: the pickled-envs path
    base.update(sets)
    return make_config("ppo", "CartPole-v1", flags={"runs_dir": str(runs), **base})


def stopped_run(runs: Path, at: int = 2, **sets) -> Path:
    def stop(row):
        if row["iteration"] == at:
            raise Stop

    with pytest.raises(Stop):
        trustrl.train(small(runs, **sets), callback=stop)
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return run


def cli(args, tmp_path, env_extra=None, timeout=300):
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "trustrl", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trustrl: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


# ----- the format ------------------------------------------------------------------------------
def test_rng_states_and_numpy_values_round_trip_bit_for_bit(tmp_path):
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    random.random(), np.random.normal(), torch.rand(1)  # a cached gaussian in numpy's state
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state(), "obs": np.arange(6, dtype=np.float32).reshape(2, 3),
             "f32": np.float32(0.1), "i64": np.int64(7), "b": np.bool_(True),
             "sd": torch.nn.LayerNorm(2).state_dict(), "t": (1, 2.5, None, "x", b"\x00\xff")}
    save_safe(state, tmp_path / "s.pt")
    raw = torch.load(tmp_path / "s.pt", weights_only=True)  # plain torch can read it safely
    assert raw["trustrl_safe"] == 2 and raw["payload"].dtype == torch.uint8
    back = load_safe(tmp_path / "s.pt")
    want = (random.random(), np.random.random(5).tolist(), torch.rand(3).tolist())
    random.setstate(back["python"])
    np.random.set_state(back["numpy"])
    torch.set_rng_state(back["torch"])
    assert (random.random(), np.random.random(5).tolist(), torch.rand(3).tolist()) == want
    assert back["obs"].dtype == np.float32 and np.array_equal(back["obs"], state["obs"])
    assert type(back["f32"]) is np.float32 and back["f32"] == np.float32(0.1)
    assert type(back["i64"]) is np.int64 and type(back["b"]) is np.bool_
    assert isinstance(back["sd"], OrderedDict) and back["sd"]._metadata == state["sd"]._metadata
    assert back["t"] == state["t"]
    with pytest.raises(TypeError):
        encode({"x": object()})
    assert decode(encode([np.zeros(0), {"a": np.ones((2, 0))}]))[1]["a"].shape == (2, 0)


@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_agent_and_checkpoint_files_load_with_weights_only(tmp_path, vector):
    run = stopped_run(tmp_path / "runs", vector=vector)
    outer = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)
    assert outer["trustrl_safe"] == 2 and len(outer["sha256"]) == len(outer["hmac"]) == 64
    ck = torch.load(io.BytesIO(outer["payload"].numpy().tobytes()), weights_only=True)
    if vector == "sync":
        envs = ck["envs"]  # the one pickle: bytes with its HMAC, not unpickled here
        assert isinstance(envs["data"], bytes) and len(envs["hmac"]) == 64
    else:
        assert ck.get("envs") is None  # batched envs: tensors, no pickle at all
    res = trustrl.resume(run)
    torch.load(res.run_dir / "agent.pt", weights_only=True)
    agent = Agent.load(res.run_dir)
    assert agent.act(np.zeros(4, np.float32)) in (0, 1)


def test_the_key_is_private_and_outside_the_run(tmp_path):
    run = stopped_run(tmp_path / "runs")
    key = tmp_path / "keys" / "checkpoint.key"
    assert key.is_file() and (key.stat().st_mode & 0o777) == 0o600
    assert not any(p.name.endswith(".key") for p in run.rglob("*"))


# ----- planted payloads ------------------------------------------------------------------------
def test_agent_file_with_a_payload_is_refused_by_eval(tmp_path):
    run = stopped_run(tmp_path / "runs")
    trustrl.resume(run)
    marker = tmp_path / "PWNED"
    state = load_safe(run / "agent.pt")
    torch.save({**state, "x": Payload(marker)}, run / "agent.pt")  # a plain pickle
    proc = cli(["eval", str(run), "--episodes", "1"], tmp_path)
    one_line_error(proc, "agent.pt", "TRUSTRL_TRUST_FILES=1")
    assert not marker.exists()
    with pytest.raises(UntrustedFileError):
        Agent.load(run)
    assert not marker.exists()
    # the payload is real: the explicit opt-in runs it
    cli(["eval", str(run), "--episodes", "1"], tmp_path, {"TRUSTRL_TRUST_FILES": "1"})
    assert marker.read_text() == "ran"


def test_checkpoint_with_a_payload_is_refused_by_resume(tmp_path):
    run = stopped_run(tmp_path / "runs")
    marker = tmp_path / "PWNED"
    ck = load_safe(run / "checkpoints" / "latest.pt")
    torch.save({**ck, "x": Payload(marker)}, run / "checkpoints" / "latest.pt")
    proc = cli(["train", "--resume", str(run), "--quiet"], tmp_path)
    one_line_error(proc, "latest.pt", "--trust-checkpoint")
    assert not marker.exists()
    with pytest.raises(UntrustedFileError):
        Agent.load(run / "checkpoints" / "latest.pt")  # eval of a run without agent.pt
    assert not marker.exists()
    cli(["train", "--resume", str(run), "--quiet", "--trust-checkpoint"], tmp_path)
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("how", ["forged", "unsigned"])
def test_a_payload_in_the_pickled_envs_is_refused(tmp_path, how):
    run = stopped_run(tmp_path / "runs")
    marker = tmp_path / "PWNED"
    path = run / "checkpoints" / "latest.pt"
    ck = load_safe(path)
    evil = pickle.dumps(Payload(marker))
    # forged: the payload under the file's old HMAC; unsigned: bare pickle bytes
    ck["envs"] = {**ck["envs"], "data": evil} if how == "forged" else evil
    save_safe(ck, path)
    proc = cli(["train", "--resume", str(run), "--quiet"], tmp_path)
    one_line_error(proc, "not signed with your key", "--trust-checkpoint")
    assert not marker.exists()
    with pytest.raises(UntrustedFileError):
        trustrl.resume(run)
    assert not marker.exists()
    cli(["train", "--resume", str(run), "--quiet", "--trust-checkpoint"], tmp_path)
    assert marker.read_text() == "ran"


def test_a_checkpoint_signed_by_another_key_is_refused_then_resumes_with_opt_in(
        tmp_path, monkeypatch):
    run = stopped_run(tmp_path / "runs")
    other = {"TRUSTRL_KEY_FILE": str(tmp_path / "other-user" / "checkpoint.key")}
    proc = cli(["train", "--resume", str(run), "--quiet"], tmp_path, other)
    one_line_error(proc, "not signed with your key", "--trust-checkpoint")
    proc = cli(["train", "--resume", str(run), "--quiet", "--trust-checkpoint"], tmp_path, other)
    assert proc.returncode == 0, proc.stderr
    # its new checkpoint is signed with the new owner's key
    monkeypatch.setenv("TRUSTRL_KEY_FILE", other["TRUSTRL_KEY_FILE"])
    ck = load_safe(run / "checkpoints" / "latest.pt")
    assert isinstance(verify_pickle(ck["envs"], run, "x"), bytes)


def test_verify_pickle_accepts_only_its_own_signature(tmp_path):
    blob = sign_pickle(b"data")
    assert verify_pickle(blob, tmp_path, "opt in") == b"data"
    for bad in ({**blob, "hmac": "0" * 64}, {**blob, "data": b"datb"}, {**blob, "hmac": None},
                b"data"):
        with pytest.raises(UntrustedFileError, match="opt in"):
            verify_pickle(bad, tmp_path, "opt in")
    with pytest.raises(RunError):
        verify_pickle(["not", "a", "blob"], tmp_path, "opt in")


def test_rlhf_model_file_with_a_payload_is_refused(tmp_path, monkeypatch):
    sft = tmp_path / "sft"
    sft.mkdir()
    model = TinyLM(ModelConfig())
    save_model(model, str(sft / "model.pt"), {"task_n": 5})
    torch.load(sft / "model.pt", weights_only=True)
    back, blob = load_model(str(sft / "model.pt"))
    assert blob["task_n"] == 5 and all(torch.equal(a, b) for a, b in
                                       zip(model.state_dict().values(),
                                           back.state_dict().values(), strict=True))
    marker = tmp_path / "PWNED"
    torch.save({"config": blob["config"], "state": blob["state"], "task_n": 5,
                "x": Payload(marker)}, sft / "model.pt")
    args = ["rlhf", "reward-model", "--sft", str(sft), "--runs-dir", str(tmp_path / "runs"),
            "--quiet"]
    proc = cli(args, tmp_path)
    one_line_error(proc, "model.pt", "TRUSTRL_TRUST_FILES=1")
    assert not marker.exists()
    with pytest.raises(UntrustedFileError):
        load_model(str(sft / "model.pt"))
    assert not marker.exists()
    monkeypatch.setenv("TRUSTRL_TRUST_FILES", "1")
    load_model(str(sft / "model.pt"))
    assert marker.read_text() == "ran"


def test_old_format_agent_file_is_refused_with_the_fix(tmp_path, monkeypatch):
    """An agent.pt of the weights_only=False era (NumPy arrays inside) is refused in one line
    naming the opt-in, and loads with it."""
    run = stopped_run(tmp_path / "runs", normalize_obs=True)
    trustrl.resume(run)
    state = load_safe(run / "agent.pt")
    assert isinstance(state["obs_normalizer"]["rms"]["mean"], np.ndarray)
    torch.save(state, run / "agent.pt")  # what older trustrl wrote
    with pytest.raises(UntrustedFileError, match="older trustrl.*TRUSTRL_TRUST_FILES=1"):
        Agent.load(run)
    monkeypatch.setenv("TRUSTRL_TRUST_FILES", "1")
    agent = Agent.load(run)
    assert np.array_equal(agent.obs_normalizer.rms.mean, state["obs_normalizer"]["rms"]["mean"])


def _sweep_with_planted_checkpoint(tmp_path: Path, marker: Path) -> Path:
    from trustrl.sweep import runner
    from trustrl.sweep.folder import SweepFolder

    spec = tmp_path / "spec.yaml"
    spec.write_text("seeds: [1]\ntotal_steps: 1536\nalgos: {ppo: {update_epochs: 2}}\n"
                    "envs: [CartPole-v1]\ncommon: {num_envs: 2, num_steps: 128, eval_every: 3, "
                    "eval_episodes: 2, tensorboard: false, checkpoint_every: 1}\n")
    folder = runner.start(spec, tmp_path / "sw")
    folder.unlock()
    (trial,) = folder.trials
    d = folder.trial_dir(trial)
    from trustrl.settings.config import config_from_dict

    cfg = config_from_dict(dict(trial.config, runs_dir=str(d)))

    def stop(row):
        if row["iteration"] == 2:
            raise Stop

    with pytest.raises(Stop):
        trustrl.train(cfg, callback=stop)
    (run,) = [p for p in d.iterdir() if p.is_dir()]
    ck = load_safe(run / "checkpoints" / "latest.pt")
    torch.save({**ck, "x": Payload(marker)}, run / "checkpoints" / "latest.pt")
    assert SweepFolder.open(folder.path).status(trial) == "pending"
    return folder.path


def test_sweep_resume_refuses_a_planted_trial_checkpoint(tmp_path):
    import json

    marker = tmp_path / "PWNED"
    sw = _sweep_with_planted_checkpoint(tmp_path, marker)
    proc = cli(["sweep", "--resume", str(sw), "--workers", "1"], tmp_path)
    assert proc.returncode == 1, proc.stderr  # the trial is recorded as failed
    assert not marker.exists()
    (res,) = [json.loads(p.read_text()) for p in sw.glob("trials/*/result.json")]
    assert res["status"] == "failed" and "UntrustedFileError" in res["error"]
    assert "\n" not in res["error"]
    for p in sw.glob("trials/*/result.json"):
        p.unlink()
    cli(["sweep", "--resume", str(sw), "--workers", "1"], tmp_path, {"TRUSTRL_TRUST_FILES": "1"})
    assert marker.read_text() == "ran"  # the worker unpickled it only with the opt-in


# ----- permissions and leftovers ---------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_run_folder_files_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        run = stopped_run(tmp_path / "runs")
        trustrl.resume(run)
    finally:
        os.umask(old)
    files = [p for p in run.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"config.json", "metrics.csv", "latest.pt", "agent.pt", "learning_curve.png",
            "status.json", "eval.json"} <= names
    modes = {p.relative_to(run).as_posix(): oct(p.stat().st_mode & 0o777) for p in files}
    assert set(modes.values()) == {oct(0o666 & ~umask)}, modes


def test_leftover_tmp_files_are_removed_on_resume(tmp_path):
    run = stopped_run(tmp_path / "runs")
    stale = [run / ".status.json.abc123.tmp", run / "checkpoints" / ".latest.pt.k9x.tmp"]
    for p in stale:
        p.write_bytes(b"half a file")
    keep = run / "notes.tmp"  # not one of ours
    keep.write_text("mine")
    trustrl.resume(run)
    assert not any(p.exists() for p in stale)
    assert keep.read_text() == "mine"
    assert not list(run.rglob(".*.tmp"))
