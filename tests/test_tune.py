"""`trustrl tune`: the SPEC (distributions, objective, one-line errors before anything runs), a
small Optuna study on CartPole that prunes, is interrupted and resumed with its trial count
adding up, its best trial as a `trustrl train --config` file, and a study folder from elsewhere
read as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trustrl.cli import main
from trustrl.settings.config import config_to_dict, load_config_file, make_config
from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.spec import SpecError
from trustrl.sweep.tune_spec import parse_tune_spec
from trustrl.util.safeio import UntrustedFileError

BASE = {"algo": "ppo", "env": "CartPole-v1", "total_steps": 2048, "trials": 4,
        "common": {"eval_every": 2, "num_envs": 4, "num_steps": 128},
        "space": {"lr": {"log-float": [1e-5, 1e-2]}}}


def test_spec_distributions_and_defaults():
    spec = parse_tune_spec({**BASE, "space": {
        "lr": {"log-float": ["1e-5", 1.0e-2]},  # YAML reads 1e-5 (no dot) as a string
        "clip_eps": {"float": [0.1, 0.3]}, "update_epochs": {"int": [2, 10, 2]},
        "minibatch_size": {"log-int": [32, 128]}, "normalize_obs": {"categorical": [True, False]}},
        "first": [{"lr": 3e-4, "update_epochs": 4}]}, check_envs=False)
    kinds = {k: d.kind for k, d in spec.space.items()}
    assert kinds == {"lr": "log-float", "clip_eps": "float", "update_epochs": "int",
                     "minibatch_size": "log-int", "normalize_obs": "categorical"}
    assert spec.space["lr"].low == 1e-5 and spec.space["update_epochs"].step == 2
    assert (spec.objective, spec.direction, spec.seed) == ("final", "maximize", 0)
    assert spec.sampler == {"tpe": {}} and spec.pruner == {"median": {}}
    c = spec.config({"lr": 0.001, "update_epochs": 6})
    assert (c["lr"], c["update_epochs"], c["num_envs"], c["total_steps"]) == (0.001, 6, 4, 2048)
    again = parse_tune_spec(spec.as_dict(), check_envs=False)  # what tune.json keeps
    assert again.as_dict() == spec.as_dict()


@pytest.mark.parametrize("change, message", [
    ({"space": {"lr": {"log-flaot": [1e-5, 1e-2]}}}, "did you mean log-float"),
    ({"space": {"lr": {"float": [0.1, 0.01]}}}, "must be below high"),
    ({"space": {"lr": {"log-float": [0, 0.01]}}}, "needs low > 0"),
    ({"space": {"lr": {"float": [0.001]}}}, "[low, high]"),
    ({"space": {"lr": {"float": [0.001, 0.01]}, "n_epochs": {"int": [1, 4]}}},
     "did you mean update_epochs"),
    ({"space": {"hidden_sizes": {"categorical": [[32, 32]]}}}, "not a number, string or boolean"),
    ({"space": {"lr": {"float": [0.001, 50.0]}}}, "space.lr: the value 50.0"),
    ({"space": {"seed": {"int": [0, 3]}}}, "not a config override"),
    ({"space": {}}, "space is empty"),
    ({"space": {"num_envs": {"int": [2, 8]}}}, "both in common and in space"),
    ({"trials": 0}, "trials must be an integer"),
    ({"objective": "best"}, "unknown key 'best' in objective"),
    ({"pruner": "medain"}, "did you mean median"),
    ({"pruner": {"median": {"warmup": 1}}}, "did you mean warmup_evals"),
    ({"sampler": {"tpe": {"seed": -1}}}, "sampler.tpe.seed must be an integer"),
    ({"common": {"eval_every": 0, "num_envs": 4}}, "needs periodic evaluations"),
    ({"first": [{"lr": 0.5}]}, "first[0].lr = 0.5 is not a value of space.lr"),
    ({"first": [{"gamma": 0.9}]}, "unknown key 'gamma' in first[0]"),
    ({"first": [{}] * 5}, "first lists 5 points for a study of 4 trials"),
    ({"algo": "ppp"}, "did you mean ppo"),
    ({"env": None}, "env is missing"),
    ({"grid": {"lr": [0.1]}}, "unknown key 'grid' in the spec"),
])
def test_bad_spec_fails_with_one_line(change, message):
    with pytest.raises(SpecError) as e:
        parse_tune_spec({**BASE, **change}, check_envs=False)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_cli_bad_spec_exits_2_with_one_line_and_creates_nothing(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("env: CartPole-v1\ntrials: 3\nspace: {lr: {float: [0.1, 0.01]}}\n")
    assert main(["tune", str(spec), "--out", str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trustrl: error: ") and "must be below high" in err
    assert "\n" not in err and not (tmp_path / "study").exists()
    assert main(["tune", "--resume", str(tmp_path / "nothing")]) == 2
    assert "not a study folder" in capsys.readouterr().err


# ----- a study on CartPole ------------------------------------------------------------------
GOOD, BAD = 1.0e-2, 1.0e-7
STUDY = f"""\
name: cartpole
algo: ppo
env: CartPole-v1
total_steps: 2048
trials: 5
common: {{eval_every: 2, eval_episodes: 5, num_envs: 4, num_steps: 128,
          grad_backend: closed-form, tensorboard: false}}
space:
  lr: {{log-float: [1.0e-7, 1.0e-2]}}
first: [{{lr: {GOOD}}}, {{lr: {BAD}}}, {{lr: {GOOD}}}, {{lr: {BAD}}}]
sampler: {{tpe: {{seed: 0, startup_trials: 4}}}}
pruner: {{median: {{startup_trials: 1}}}}
"""


class _Interrupt:
    """echo() of the driver that stops it like Ctrl-C at the second trial's end, while the
    third (asked when the first ended) runs in the other worker."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith("[2/"):
            raise KeyboardInterrupt


@pytest.mark.slow  # about 40 s here: two spawned pools, five short CartPole runs
def test_study_prunes_resumes_and_writes_its_best_trial(tmp_path):
    """The points tried first are A, B, A, B (two learning rates, the same seed): at the first
    evaluation, trial 2 (A) is pruned if A's value is below B's, else trial 3 (B) is below the
    median of A, B, A: one of them is pruned unless the two evaluations tie exactly."""
    optuna = pytest.importorskip("optuna")
    from trustrl.sweep import tune

    spec = tmp_path / "cartpole.yaml"
    spec.write_text(STUDY)
    path = tune.create(spec, tmp_path / "study")
    with pytest.raises(KeyboardInterrupt):
        tune.run(path, workers=2, echo=_Interrupt())
    folder = SweepFolder.open(path)
    cut = [t for t in folder.trials if folder.result(t) is None]
    assert cut, "a trial should have been cut mid-way"

    out = tune.run(path, workers=2)
    study = optuna.load_study(study_name="cartpole", storage=tune.storage(path))
    states = [t.state for t in study.trials]
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len(states) == 5 and all(s in done for s in states), states
    assert states.count(optuna.trial.TrialState.PRUNED) >= 1
    assert [t.params["lr"] for t in study.trials[:4]] == [GOOD, BAD, GOOD, BAD]
    assert all(t.intermediate_values for t in study.trials)  # every trial reported
    folder = SweepFolder.open(path)
    assert [t.id for t in folder.trials] == [f"trial{i:04d}" for i in range(5)]
    assert all(folder.result(t) is not None for t in folder.trials)
    for t in cut:  # run again under its own number, not asked anew (from its checkpoint
        # where it had one), and ended
        modes = [json.loads(line)["mode"] for line in
                 (folder.trial_dir(t) / "attempts.jsonl").read_text().splitlines()]
        assert modes[0] == "fresh" and len(modes) <= 2, modes
    assert out.complete + out.pruned + out.failed == out.ran

    # the best trial as a config file that `trustrl train --config` resolves to its config
    best = study.best_trial
    trial = next(t for t in folder.trials if t.id == tune.trial_name(best.number))
    res = folder.result(trial)
    run = folder.trial_dir(trial) / res["run"]
    assert best.value == json.loads((run / "eval.json").read_text())["mean"]
    cfg = config_to_dict(make_config("ppo", None, load_config_file(path / "best.yaml"), {}, {}))
    # the same settings (preset_reason records how the preset was asked for: by its label here)
    skip = ("runs_dir", "preset_reason")
    assert {k: v for k, v in cfg.items() if k not in skip} == {
        k: v for k, v in trial.config.items() if k not in skip}


@pytest.mark.slow  # about 30 s here: a local Ray instance starts in several seconds
def test_ray_backend_reports_through_the_study_actor(tmp_path):
    optuna = pytest.importorskip("optuna")
    ray = pytest.importorskip("ray")
    from trustrl.sweep import tune

    spec = tmp_path / "cartpole.yaml"
    spec.write_text(STUDY.replace("trials: 5", "trials: 3").replace(
        f", {{lr: {BAD}}}]", "]"))
    path = tune.create(spec, tmp_path / "study")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tune.run(path, backend="ray", workers=2)
    finally:
        ray.shutdown()
    study = optuna.load_study(study_name="cartpole", storage=tune.storage(path))
    assert len(study.trials) == 3 == out.ran
    assert all(t.intermediate_values for t in study.trials)  # reported from the Ray tasks
    assert (path / "best.yaml").is_file()


# ----- a study folder from elsewhere is data ------------------------------------------------
def test_a_study_folder_naming_code_needs_its_signature(tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    from trustrl.sweep import tune

    monkeypatch.delenv("TRUSTRL_TRUST_FILES", raising=False)
    spec = tmp_path / "code.yaml"
    spec.write_text("env: helper_envs:EzCartPole\ntrials: 2\ntotal_steps: 4096\n"
                    "space: {lr: {float: [0.001, 0.01]}}\n")
    path = tune.create(spec, tmp_path / "study")
    assert tune.check_study_folder(path).env_id == "helper_envs:EzCartPole"  # the user's own
    (path / "env.sig").unlink()  # as from another user or machine
    with pytest.raises(UntrustedFileError) as e:
        tune.check_study_folder(path)
    assert "helper_envs:EzCartPole" in str(e.value) and "\n" not in str(e.value)
    meta = json.loads((path / "tune.json").read_text())
    meta["spec"]["space"] = {"lr": {"float": [0.001, 0.01]}, "seed": {"int": [0, 2]}}
    (path / "tune.json").write_text(json.dumps(meta))
    with pytest.raises(SpecError, match="not a config override"):
        tune.check_study_folder(path)


def test_best_file_keys_resolve_to_the_trial_config():
    spec = parse_tune_spec({**BASE, "common": {**BASE["common"], "ent_coef": 0.01}},
                           check_envs=False)
    keys = spec.best_file({"lr": 0.002})
    assert list(keys) == ["env_id", "preset", "total_steps", "seed", "eval_every", "num_envs",
                          "num_steps", "ent_coef", "lr"]
    cfg = config_to_dict(make_config("ppo", None, dict(keys), {}, {}))
    skip = ("runs_dir", "preset_reason")  # how the preset was asked for, not a setting
    assert {k: v for k, v in cfg.items() if k not in skip} == {
        k: v for k, v in spec.config({"lr": 0.002}).items() if k not in skip}


def test_values_refused_together_fail_that_trial_and_the_study_asks_another(tmp_path):
    optuna = pytest.importorskip("optuna")
    from trustrl.sweep import tune

    spec = tmp_path / "pairs.yaml"  # each value passes alone; 32 x 1024 is above the budget
    spec.write_text("env: CartPole-v1\ntrials: 3\ntotal_steps: 4096\ncommon: {preset: chapter}\n"
                    "space: {num_envs: {categorical: [4, 32]}, "
                    "num_steps: {categorical: [128, 1024]}}\n")
    path = tune.create(spec, tmp_path / "study")
    parsed = tune.check_study_folder(path)
    study = tune.load_study(path, parsed)  # (a SPEC's `first` refuses such a point itself)
    study.enqueue_trial({"num_envs": 32, "num_steps": 1024})
    study.enqueue_trial({"num_envs": 4, "num_steps": 128})
    folder = SweepFolder(path, tune._sweep_meta(parsed))
    lines: list[str] = []
    driver = tune._Driver(parsed, folder, tune.load_study(path, parsed), optuna, lines.append)
    trial = driver.ask()
    assert trial is not None and trial.id == "trial0001" and trial.grid == {
        "num_envs": 4, "num_steps": 128}
    assert "trial 0: its values are refused: " in lines[0] and "less than one batch" in lines[0]
    study = tune.load_study(path, parsed)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    assert [t.id for t in SweepFolder.open(path).trials] == ["trial0001"]  # sweep.json
    assert driver.asked() == 2


def _small_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_text("env: CartPole-v1\ntrials: 3\ntotal_steps: 4096\n"
                    "space: {lr: {float: [0.001, 0.01]}}\n")
    return spec


def test_resume_with_more_trials_grows_the_study(tmp_path, capsys):
    pytest.importorskip("optuna")
    from trustrl.sweep import tune

    spec = _small_spec(tmp_path)
    path = tune.create(spec, tmp_path / "study")
    tune.set_trials(path, 7)
    assert tune.check_study_folder(path).trials == 7
    assert main(["tune", "--resume", str(path), "--trials", "0"]) == 2
    assert "--trials must be in [1, 5,000]" in capsys.readouterr().err
    assert main(["tune", str(spec), "--out", str(path)]) == 2  # a folder in use is not reused
    assert "trustrl tune --resume" in capsys.readouterr().err


def test_objective_mean_is_the_mean_of_the_periodic_evaluations(tmp_path):
    from trustrl.sweep import tune
    from trustrl.sweep.spec import Trial

    spec = parse_tune_spec({**BASE, "objective": "mean"}, check_envs=False)
    run = tmp_path / "trials" / "trial0000" / "run"
    run.mkdir(parents=True)
    (run / "eval_initial.json").write_text(json.dumps({"mean": 9.0}))  # step 0: left out
    (run / "metrics.csv").write_text("iteration,global_step,eval_return_mean\n"
                                     "1,512,\n2,1024,100.0\n3,1536,\n4,2048,300.0\n")
    folder = SweepFolder(tmp_path, {"name": "x", "trials": []})
    trial = Trial("trial0000", "ppo", "CartPole-v1", 0, "ppo#0", {}, {})
    res = {"status": "finished", "run": "run", "final_eval": {"mean": 300.0}}
    assert tune.objective(spec, folder, trial, res) == 200.0
    spec.objective = "final"
    assert tune.objective(spec, folder, trial, res) == 300.0


def test_a_broken_study_file_is_one_line(tmp_path, capsys):
    pytest.importorskip("optuna")
    from trustrl.sweep import tune

    spec = _small_spec(tmp_path)
    path = tune.create(spec, tmp_path / "study")
    (path / "study.db").write_text("not a database")
    assert main(["tune", "--resume", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trustrl: error: cannot open the study in ") and "\n" not in err


def test_without_optuna_tune_says_which_extra(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    spec = _small_spec(tmp_path)
    assert main(["tune", str(spec), "--out", str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'trustrl[tune]'" in err and "\n" not in err
    assert not (tmp_path / "study").exists()
    assert main(["tune", str(spec), "--dry-run"]) == 0  # checking a SPEC needs no Optuna
