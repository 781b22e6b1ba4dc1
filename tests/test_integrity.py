"""Damage is detected (issue 52, point 2): agent files and checkpoints carry the digest of
their contents, checked on load (one line naming the file); non-finite weights, arrays of
object dtype and absurd shapes are refused in one line; a resume whose metrics.csv lacks
rows before the checkpoint is refused in one line, never silently shortened."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import trustrl
from trustrl.records.agent import Agent
from trustrl.settings.config import make_config
from trustrl.util.errors import RunError
from trustrl.util.safeio import DamagedFileError, _file_mac, load_safe, save_safe, signing_key


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-iteration run (agent.pt, checkpoint at iteration 2, two metrics rows)."""
    runs = tmp_path_factory.mktemp("runs")
    cfg = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=64, num_envs=1, num_steps=32, minibatch_size=32, update_epochs=1,
        eval_every=0, eval_episodes=1, tensorboard=False, checkpoint_every=1, vector="sync",
        runs_dir=str(runs)))
    return trustrl.train(cfg).run_dir


@pytest.fixture
def run(finished, tmp_path):
    dst = tmp_path / finished.name
    shutil.copytree(finished, dst, ignore=shutil.ignore_patterns(".trustrl.lock"))
    return dst


def cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "trustrl", *args], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


def one_line(proc, *needles):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("trustrl: error: ")
    for n in needles:
        assert n in lines[0], lines[0]


def write_raw(path: Path, data) -> None:
    """A file in the safe format, signed with the user's key, of already-encoded data (what an
    editor of the file could write)."""
    inner = io.BytesIO()
    torch.save(data, inner)
    payload = inner.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    torch.save({"trustrl_safe": 2, "sha256": digest,
                "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8),
                "hmac": _file_mac(signing_key(create=True), digest)}, path)


def contents(path: Path) -> tuple[int, int]:
    """Where the contents (the bytes the digest covers) sit in the file, and their size."""
    payload = torch.load(path, weights_only=True)["payload"].numpy().tobytes()
    start = path.read_bytes().find(payload)
    assert start > 0
    return start, len(payload)


def test_flipped_bytes_in_an_agent_file_are_detected(run, tmp_path):
    f = run / "agent.pt"
    original = f.read_bytes()
    want = Agent.load(f).policy.state_dict()
    start, size = contents(f)
    flipped = bytearray(original)
    for i in range(8):
        flipped[start + size // 3 + 37 * i] ^= 0xFF
    f.write_bytes(bytes(flipped))
    with pytest.raises(DamagedFileError, match="agent.pt is damaged"):
        Agent.load(f)
    one_line(cli(["eval", str(run), "--episodes", "1"], tmp_path), "agent.pt", "damaged")
    # one flipped byte anywhere: refused in one line, or (padding) the same weights
    for pos in range(0, len(original), max(1, len(original) // 40)):
        b = bytearray(original)
        b[pos] ^= 0x55
        f.write_bytes(bytes(b))
        try:
            got = Agent.load(f).policy.state_dict()
        except RunError:
            continue
        assert all(torch.equal(got[k], want[k]) for k in want), f"byte {pos}"


def test_a_flipped_or_cut_checkpoint_is_not_resumed(run, tmp_path):
    ck = run / "checkpoints" / "latest.pt"
    data = ck.read_bytes()
    start, size = contents(ck)
    b = bytearray(data)
    b[start + size // 2] ^= 0x01
    ck.write_bytes(bytes(b))
    with pytest.raises(DamagedFileError, match="latest.pt is damaged"):
        trustrl.resume(run, total_steps=96)
    ck.write_bytes(data[: len(data) // 2])
    one_line(cli(["train", "--resume", str(run), "--total-steps", "96"], tmp_path),
             "latest.pt")


def test_non_finite_weights_are_refused(run, tmp_path):
    state = load_safe(run / "agent.pt")
    name = next(iter(state["policy"]))
    state["policy"][name] = torch.full_like(state["policy"][name], float("nan"))
    save_safe(state, run / "agent.pt")
    with pytest.raises(RunError, match=f"non-finite weights .*{name}"):
        Agent.load(run / "agent.pt")
    one_line(cli(["eval", str(run / "agent.pt"), "--episodes", "1"], tmp_path), "non-finite")
    ck = load_safe(run / "checkpoints" / "latest.pt")
    ck["net"].view(-1)[3] = float("inf")
    save_safe(ck, run / "checkpoints" / "latest.pt")
    with pytest.raises(RunError, match="non-finite weights"):
        trustrl.resume(run, total_steps=96)


@pytest.mark.parametrize("array", [
    {"__trustrl__": "ndarray", "dtype": "|O", "shape": [1], "data": b"\0" * 8},
    {"__trustrl__": "ndarray", "dtype": "<f4", "shape": [10**9, 10**9], "data": b""},
    {"__trustrl__": "ndarray", "dtype": "<f4", "shape": [10**12, 10**12], "data": b""},
    {"__trustrl__": "ndarray", "dtype": "not a dtype", "shape": [1], "data": b"\0" * 4},
])
def test_arrays_that_are_not_data_are_one_line(run, tmp_path, array):
    ck = load_safe(run / "checkpoints" / "latest.pt")
    from trustrl.util.safeio import encode

    data = encode(ck)
    data["collector"]["next_obs"] = array
    write_raw(run / "checkpoints" / "latest.pt", data)
    with pytest.raises(RunError, match="cannot read .*latest.pt"):
        trustrl.resume(run, total_steps=96)
    one_line(cli(["train", "--resume", str(run), "--total-steps", "96"], tmp_path),
             "latest.pt")


def rows(run: Path) -> list[int]:
    import csv

    with open(run / "metrics.csv", newline="") as f:
        return [int(r["iteration"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("damage", ["cut", "empty", "garbage", "edited"])
def test_a_metrics_log_that_lost_rows_is_not_silently_shortened(run, tmp_path, damage):
    path = run / "metrics.csv"
    text = path.read_text()
    if damage == "cut":
        path.write_text(text[: len(text.splitlines()[0]) + 1 + len(text.splitlines()[1]) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(bytes(range(256)) * 8)
    else:
        path.write_text(text.replace("\n2,", "\nx,", 1))
    before = path.read_bytes()
    with pytest.raises(RunError, match="metrics.csv"):
        trustrl.resume(run, total_steps=96)
    assert path.read_bytes() == before  # nothing rewritten
    proc = cli(["train", "--resume", str(run), "--total-steps", "96"], tmp_path)
    one_line(proc, "metrics.csv")
    assert json.loads((run / "status.json").read_text())["status"] == "finished"


def test_a_metrics_log_moved_away_resumes_and_says_so(run, tmp_path, capsys):
    (run / "metrics.csv").unlink()
    trustrl.resume(run, total_steps=96)
    assert "metrics.csv is absent: its log restarts at iteration 3" in capsys.readouterr().err
    assert rows(run) == [3]
    # an intact log resumes as before
    trustrl.resume(run, total_steps=128)
    assert rows(run) == [3, 4]


def test_a_run_that_cannot_be_signed_says_so_at_its_start(tmp_path, monkeypatch, capsys):
    """No key can be made (a read-only HOME, say): one warning line at the start naming the
    key and the way to sign (TRUSTRL_KEY_FILE), and the run still trains."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TRUSTRL_KEY_FILE", str(tmp_path / "file" / "checkpoint.key"))
    cfg = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=64, num_envs=1, num_steps=64, minibatch_size=32, update_epochs=1,
        eval_every=0, eval_episodes=1, tensorboard=False, vector="sync",
        runs_dir=str(tmp_path / "runs")))
    trustrl.train(cfg)
    warned = [line for line in capsys.readouterr().err.splitlines() if "signing key" in line]
    assert len(warned) == 1 and "TRUSTRL_KEY_FILE" in warned[0] and "--trust-files" in warned[0]
