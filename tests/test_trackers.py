"""Experiment trackers as optional extras (issue 15, point 9): `--set track=wandb` and `--set
track=mlflow` log the scalars TensorBoard gets, under the same names, and the config; offline
(W&B's offline mode under the run folder, MLflow's local file store under tmp_path). Each
test skips, saying why, where its package is not installed; a missing package is one line
naming the extra, exit 2, before any run folder."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

import trustrl
from tests.test_bad_inputs import TINY, assert_one_line_error, run_cli
from trustrl.records.runs import scalars
from trustrl.settings.config import make_config


def tiny(runs: Path, **sets):
    base = dict(total_steps=3 * 64, num_envs=2, num_steps=32, eval_every=2, eval_episodes=1,
                tensorboard=False, minibatch_size=32, update_epochs=2, runs_dir=str(runs))
    base.update(sets)
    return make_config("ppo", "CartPole-v1", flags=base)


def metric_rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("kind", ["wandb", "mlflow"])
def test_a_missing_tracker_package_is_one_line_naming_the_extra(tmp_path, monkeypatch, kind):
    monkeypatch.setitem(sys.modules, kind, None)  # find_spec -> None: as if not installed
    rc, _, err = run_cli(["train", *TINY, "--set", f"track={kind}", "--runs-dir", "runs"],
                         tmp_path)
    assert_one_line_error(rc, err, f'pip install "trustrl[{kind}]"')
    assert not (tmp_path / "runs").exists()


def test_mlflow_without_a_store_it_can_use_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow (the [mlflow] extra) is not installed")
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # mlflow-skinny: no database store
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rc, _, err = run_cli(["train", *TINY, "--set", "track=mlflow", "--runs-dir", "runs"],
                         tmp_path)
    assert_one_line_error(rc, err, "MLFLOW_TRACKING_URI", "sqlite")
    assert not (tmp_path / "runs").exists()


def test_a_population_with_a_tracker_is_refused_before_any_folder(tmp_path):
    pytest.importorskip("mlflow", reason="mlflow (the [mlflow] extra) is not installed")
    rc, _, err = run_cli(["train", *TINY, "--seeds", "0-1", "--set", "track=mlflow",
                          "--runs-dir", "runs"], tmp_path)
    assert_one_line_error(rc, err, "one-seed runs")
    assert not (tmp_path / "runs").exists()


def test_mlflow_logs_the_tensorboard_scalars_and_the_config(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow (the [mlflow] extra) is not installed")
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "trustrl-test")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: a local file store
    res = trustrl.train(tiny(tmp_path / "runs", track="mlflow", vector="sync"),
                        callback=lambda row: row["iteration"] < 2)
    run_id = json.loads((res.run_dir / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.run_name == res.run_dir.name
    assert json.loads(run.data.params["env_id"]) == "CartPole-v1"
    assert json.loads(run.data.params["num_steps"]) == 32
    rows = metric_rows(res.run_dir)
    expected = scalars({k: _num(v) for k, v in rows[-1].items()})
    assert {"charts/lr", "charts/ep_return_mean", "losses/value_loss",
            "diagnostics/approx_kl"} <= set(expected)
    assert set(run.data.metrics) == set(expected) | {"charts/eval_return_mean",
                                                     "charts/eval_return_std"}
    for key in ("charts/lr", "diagnostics/approx_kl"):
        hist = client.get_metric_history(run_id, key)
        assert [m.step for m in hist] == [int(r["global_step"]) for r in rows]
        assert [m.value for m in hist] == pytest.approx([float(r[key.split("/")[1]])
                                                         for r in rows])
    # resumed: the same MLflow run goes on
    trustrl.resume(res.run_dir)
    assert json.loads((res.run_dir / "trackers.json").read_text())["mlflow"] == run_id
    assert len(client.get_metric_history(run_id, "charts/lr")) == 3
    assert client.get_run(run_id).info.status == "FINISHED"


def test_wandb_offline_logs_the_tensorboard_scalars_and_the_config(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb (the [wandb] extra) is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-elsewhere"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    res = trustrl.train(tiny(tmp_path / "runs", track="wandb", vector="sync"))
    run_id = json.loads((res.run_dir / "trackers.json").read_text())["wandb"]
    files = list((res.run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 1, list((res.run_dir / "wandb").rglob("*"))
    records = _wandb_records(files[0])
    logged = [r for r in records if "charts/lr" in r]
    rows = metric_rows(res.run_dir)
    assert [r["global_step"] for r in logged] == [int(r["global_step"]) for r in rows]
    assert [r["charts/lr"] for r in logged] == pytest.approx([float(r["lr"]) for r in rows])
    assert set(logged[-1]) >= set(scalars({k: _num(v) for k, v in rows[-1].items()}))
    config: dict = {}
    for r in records:
        config.update(r.get("__config__", {}))
    assert config["env_id"] == "CartPole-v1" and config["num_steps"] == 32


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def _wandb_records(path: Path) -> list[dict]:
    """The history rows ({key: value}) and the config ({"__config__": {...}}) of an offline
    W&B run file: W&B's LevelDB-style log (a 7-byte header, then 32 KiB blocks of records
    crc32 | length | type (full, first, middle, last) | data) of Record protobufs."""
    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert raw[:4] == b":W&B", raw[:8]
    block, pos, chunks, datas = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        room = block - pos % block
        if room < 7:  # block trailer
            pos += room
            continue
        length, kind = int.from_bytes(raw[pos + 4:pos + 6], "little"), raw[pos + 6]
        data = raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        chunks = data if kind in (1, 2) else chunks + data
        if kind in (1, 4):
            datas.append(chunks)
    out: list[dict] = []
    for data in datas:
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            out.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                        for i in rec.history.item})
        elif kind in ("config", "run"):  # the config comes with the run record
            update = rec.config.update if kind == "config" else rec.run.config.update
            out.append({"__config__": {i.key: json.loads(i.value_json) for i in update}})
    return out
