"""`--preset auto` and the run's budget (issue 57): the rule (trustrl/settings/presets/budget.py),
its record in config.json, the one line a run says, `--preset zoo` unchanged, and the rule and the
docs table as benchmarks/preset_budget.py derives them from the committed results. No test
trains more than two iterations."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_inputs import run_cli

from trustrl.settings.config import (
    PPOConfig,
    config_from_dict,
    config_to_dict,
    make_config,
    preset_choice,
)
from trustrl.settings.presets import AUTO_PRESET_AT, ZOO_PRESETS, auto_source, choose, table
from trustrl.settings.presets.budget import AUTO_PRESET_ENVS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "preset_budget"
DEFAULTS_BATCH = PPOConfig(preset="none").num_envs * PPOConfig(preset="none").num_steps
RULED = ["LunarLander-v3", "Acrobot-v1", "MountainCar-v0", "Hopper-v5", "CartPole-v1",
         "Pendulum-v1"]  # the last two: the chapter's preset, the one auto looks at first


def _bench():
    spec = importlib.util.spec_from_file_location("preset_budget",
                                                  ROOT / "benchmarks" / "preset_budget.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T, F = True, False
# budgets as fractions of the preset's: 5%, 10%, just below 30%, 30%, just below 100%, 100%,
# none given (100%), 300%; and whether auto takes the preset there under each rule
BANDS = [
    ({0.1: T}, [F, T, T, T, T, T, T, T]),
    ({0.1: F, 0.3: T, 1.0: T}, [F, F, F, T, T, T, T, T]),
    ({0.1: T, 0.3: T, 1.0: F}, [F, T, T, T, T, F, F, F]),
    ({0.3: F, 1.0: T}, [F, F, F, F, F, T, T, T]),
    ({0.1: T, 0.3: F}, [F, T, T, F, F, F, F, F]),
    ({0.1: F, 0.3: F, 1.0: F}, [F] * 8),
]


@pytest.mark.parametrize("env", RULED)
@pytest.mark.parametrize("at,want", BANDS)
def test_auto_takes_the_preset_in_the_budgets_where_it_passed(env, at, want, monkeypatch):
    monkeypatch.setitem(AUTO_PRESET_AT["ppo"], env, at)
    source = auto_source("ppo", env)
    preset = table(source)[("ppo", env)]
    budget = preset["total_steps"]
    totals = [budget // 20, budget // 10, budget * 3 // 10 - 1, budget * 3 // 10, budget - 1,
              budget, None, 3 * budget]
    for total, takes in zip(totals, want, strict=True):
        assert (total or budget) >= DEFAULTS_BATCH  # the batch clause is tested below
        c = choose("ppo", env, "auto", total, DEFAULTS_BATCH)
        if takes:
            assert (c.label, c.values, c.note) == (f"{source}:{env}", preset, None), total
            assert c.reason.startswith(f"auto: {source}:{env}")
            continue
        assert c.label is None, total
        assert c.values == ({} if total else {"total_steps": budget})
        assert f"not {source}:{env}" in c.reason and f"{total or budget:,}" in c.reason
        if (total or budget) >= budget:  # at the preset's budget or more: no line
            assert c.note is None
            continue
        assert "\n" not in c.note and f"total_steps {total or budget:,} is" in c.note
        assert "took trustrl's defaults" in c.note and f"--preset {source} forces" in c.note
        # the preset asked for at that budget is applied, and the line says auto would not
        asked = choose("ppo", env, source, total, DEFAULTS_BATCH)
        assert asked.label == f"{source}:{env}" and "auto would take" in asked.note


def test_trustrls_rule_on_the_chapters_envs():
    """What a user of the README meets: the chapter's CartPole preset at its budget and from
    30%, the defaults at 10%; on Pendulum-v1 the chapter's at 10% and 30% of its 122,880
    steps and the defaults at the whole budget (where they tied), which --preset chapter
    overrides."""
    def label(env, total, request="auto"):
        return choose("ppo", env, request, total, DEFAULTS_BATCH).label

    assert label("CartPole-v1", None) == label("CartPole-v1", 30_000) == "chapter:CartPole-v1"
    assert label("CartPole-v1", 10_000) is None
    assert label("Pendulum-v1", 12_288) == label("Pendulum-v1", 36_864) == "chapter:Pendulum-v1"
    assert label("Pendulum-v1", None) is label("Pendulum-v1", 200_000) is None
    assert label("Pendulum-v1", None, "chapter") == "chapter:Pendulum-v1"
    assert make_config("ppo", "Pendulum-v1").gamma == PPOConfig().gamma  # the defaults'
    assert make_config("ppo", "Pendulum-v1", flags={"preset": "chapter"}).gamma == 0.9


def test_auto_keeps_the_preset_below_one_batch_of_the_defaults():
    env = "MountainCarContinuous-v0"  # the zoo's budget 20k: 10% of it is below 2,048
    for total in (8, DEFAULTS_BATCH - 1):
        c = choose("ppo", env, "auto", total, DEFAULTS_BATCH)
        assert c.label == f"zoo:{env}" and c.values == ZOO_PRESETS[("ppo", env)]
        assert f"{DEFAULTS_BATCH:,}" in c.note and "kept" in c.note


@pytest.mark.parametrize("algo,env,label", [
    ("ppo", "PongNoFrameskip-v4", "zoo:PongNoFrameskip-v4"),  # Atari: not measured
    ("trpo", "CartPole-v1", "chapter:CartPole-v1"),  # the chapter's, for TRPO
    ("trpo", "LunarLander-v3", "zoo:LunarLander-v3"),  # TRPO: not measured
    ("ppo", "ALE/Pong-v5", "cleanrl:ALE/Pong-v5"),
    ("ppo", "Humanoid-v5", "zoo:Humanoid-v5"),  # not measured against the defaults
    ("ppo", "BipedalWalkerHardcore-v3", "zoo:BipedalWalkerHardcore-v3"),  # not measured
])
def test_presets_out_of_the_rule_are_kept_and_said(algo, env, label):
    c = choose(algo, env, "auto", 4096, DEFAULTS_BATCH)
    assert c.label == label and c.values
    if not label.startswith("zoo:"):  # the chapter's and CleanRL's budgets are their texts'
        assert c.note is None
        return
    assert "kept" in c.note and "total_steps 4,096 is" in c.note and "\n" not in c.note


def test_the_rule_covers_the_preset_auto_looks_at_first_only(monkeypatch):
    """On CartPole-v1 the rule is the chapter's preset's: `--preset zoo` there is out of it
    (applied, said as below the zoo's budget, no word of auto), `--preset chapter` in it."""
    monkeypatch.setitem(AUTO_PRESET_AT["ppo"], "CartPole-v1", {0.1: False, 0.3: True})
    assert auto_source("ppo", "CartPole-v1") == "chapter"
    zoo = choose("ppo", "CartPole-v1", "zoo", 4096, DEFAULTS_BATCH)
    assert zoo.label == "zoo:CartPole-v1" and zoo.values == ZOO_PRESETS[("ppo", "CartPole-v1")]
    assert "applied as asked" in zoo.note and "auto" not in zoo.note
    assert choose("ppo", "CartPole-v1", "zoo", 50_000, DEFAULTS_BATCH).note is not None
    chapter = choose("ppo", "CartPole-v1", "chapter", 4096, DEFAULTS_BATCH)
    assert chapter.label == "chapter:CartPole-v1"
    assert "--preset auto would take trustrl's defaults here" in chapter.note
    assert choose("ppo", "CartPole-v1", "chapter", 50_000, DEFAULTS_BATCH).note is None
    assert choose("ppo", "CartPole-v1", "auto", 4096, DEFAULTS_BATCH).label is None
    assert choose("ppo", "CartPole-v1", "auto", 50_000, DEFAULTS_BATCH).label == \
        "chapter:CartPole-v1"


@pytest.mark.parametrize("env", sorted(e for (a, e) in ZOO_PRESETS if a == "ppo"))
def test_preset_zoo_gives_the_zoos_values_exactly(env):
    preset = ZOO_PRESETS[("ppo", env)]
    for total in (None, preset["total_steps"] // 10):
        flags = {"preset": "zoo"} | ({} if total is None else {"total_steps": total})
        cfg = make_config("ppo", env, flags=flags)
        got = config_to_dict(cfg)
        want = dict(preset, total_steps=total or preset["total_steps"])
        assert {k: got[k] for k in want} == {
            k: list(v) if isinstance(v, tuple) else v for k, v in want.items()}
        assert got["preset"] == f"zoo:{env}"
        assert got["preset_reason"] == f"--preset zoo asked for zoo:{env}"


def test_config_json_records_the_reason_and_old_configs_still_load():
    cfg = make_config("ppo", "LunarLander-v3", file_values={"preset_reason": "by hand"},
                      flags={"total_steps": 300_000})
    assert cfg.preset is None and "not zoo:LunarLander-v3" in cfg.preset_reason
    assert "300,000" in cfg.preset_reason and "by hand" not in cfg.preset_reason
    assert cfg.num_envs * cfg.num_steps == DEFAULTS_BATCH  # the defaults, not 16 x 1024
    back = config_from_dict(json.loads(json.dumps(config_to_dict(cfg))))
    assert back.preset_reason == cfg.preset_reason
    assert config_from_dict({"algo": "ppo"}).preset_reason is None  # runs from before
    # the budget a layer gives: the top one (--set over the file, a flag over --set)
    c = preset_choice("ppo", "LunarLander-v3", {"total_steps": 5_000_000},
                      {"total_steps": "100000"}, {})
    assert c.label is None and "100,000" in c.reason
    c = preset_choice("ppo", "LunarLander-v3", {}, {"total_steps": "100000"},
                      {"total_steps": 2_000_000})
    assert "2,000,000" in c.reason


def _run(tmp_path: Path, *args: str) -> tuple[dict, list[str]]:
    tmp_path.mkdir()
    rc, _, err = run_cli(["train", "--env", "Acrobot-v1", "--total-steps", "4096", *args,
                          "--runs-dir", "runs", "--quiet", "--set", "eval_episodes=1",
                          "--set", "tensorboard=false"], tmp_path)
    assert rc == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    notes = [line for line in err.splitlines() if "total_steps 4,096 is" in line]
    return json.loads((run / "config.json").read_text()), notes


def test_a_run_far_below_its_presets_budget_says_so_in_one_line(tmp_path):
    """Acrobot's zoo budget is 1M: 4,096 steps are far below it."""
    cfg, notes = _run(tmp_path / "auto")
    assert cfg["preset"] is None and (cfg["num_envs"], cfg["num_steps"]) == (4, 512)
    assert "not zoo:Acrobot-v1" in cfg["preset_reason"]
    assert len(notes) == 1 and notes[0].startswith("trustrl: total_steps 4,096 is 0.41% of "
                                                   "zoo:Acrobot-v1's budget 1,000,000")
    assert "took trustrl's defaults" in notes[0]
    cfg, notes = _run(tmp_path / "zoo", "--preset", "zoo")
    assert cfg["preset"] == "zoo:Acrobot-v1" and (cfg["num_envs"], cfg["num_steps"]) == (16, 256)
    assert len(notes) == 1 and "applied as asked" in notes[0]
    cfg, notes = _run(tmp_path / "none", "--preset", "none")
    assert cfg["preset"] is None and notes == []


def _records(table: dict[tuple[str, float], tuple[list[float], list[float] | None]]) -> list:
    out = []
    for (env, f), (preset, defaults) in table.items():
        for setting, finals in (("zoo", preset), ("none", defaults)):
            for seed in (1, 2, 3):
                rec = {"env": env, "fraction": f, "setting": setting, "seed": seed}
                if finals is None:
                    rec.update(status="refused", error="trustrl: error: below one batch")
                else:
                    rec.update(status="finished", final=finals[seed - 1])
                out.append(rec)
    return out


def test_derive_rule_reads_per_env_and_fraction_whether_the_preset_led_by_its_spread():
    bench = _bench()
    derive = bench.derive_rule
    win, lose = [10.0, 11.0, 12.0], [0.0, 1.0, 2.0]  # medians 11 and 1, spreads 2
    base = {("A", 0.1): (lose, win), ("A", 0.3): (win, lose), ("A", 1.0): (win, lose),
            ("B", 0.1): (win, lose), ("B", 0.3): (lose, win)}
    assert derive(_records(base)) == {"A": {0.1: False, 0.3: True, 1.0: True},
                                      "B": {0.1: True, 0.3: False}}
    # a lead smaller than the preset's own spread is not a pass; a tie at no spread is
    near = [10.0, 12.0, 16.0]  # median 12, one ahead of win's 11, spread 6
    assert derive(_records({("A", 1.0): (near, win)})) == {"A": {1.0: False}}
    assert derive(_records({("A", 1.0): ([13.0, 13.0, 13.0], win)})) == {"A": {1.0: True}}
    flat = [500.0, 500.0, 500.0]
    assert derive(_records({("A", 0.3): (flat, flat)})) == {"A": {0.3: True}}
    assert derive(_records({("A", 0.3): (win, win)})) == {"A": {0.3: False}}
    # a defaults run refused (below one batch) is no verdict: auto's batch clause keeps it
    assert derive(_records({("A", 0.1): (win, None), ("A", 0.3): (win, lose)})) == {
        "A": {0.3: True}}
    # the former rule (until 2026-12-07): from the least fraction at which, and at every
    # larger one, the median was at least the defaults'; with spread, within their spread
    former = bench.former_rule
    assert former(_records(base)) == {"A": {0.1: False, 0.3: True, 1.0: True},
                                      "B": {0.1: False, 0.3: False}}
    assert former(_records({("A", 1.0): (near, win)})) == {"A": {1.0: True}}
    nearer = [9.0, 10.5, 11.5]  # median 10.5 below win's 11, within its spread (2)
    assert former(_records({("A", 1.0): (nearer, win)})) == {"A": {1.0: False}}
    assert former(_records({("A", 1.0): (nearer, win)}), spread=True) == {"A": {1.0: True}}
    # a rule's pick between and below the measured fractions
    records = _records(base)
    rules = derive(records)
    assert [bench.rule_pick(records, rules, "B", f) for f in (0.1, 0.3)] == ["zoo", "none"]


def test_measured_envs_are_those_with_a_whole_cell_of_the_derivation_seeds():
    measured = _bench().measured_envs
    win, lose = [10.0, 11.0, 12.0], [0.0, 1.0, 2.0]
    records = _records({("A", 0.1): (win, lose), ("B", 0.3): (lose, None)})
    assert measured(records) == {"A", "B"}  # B: the defaults refused is a whole cell
    part = [r for r in _records({("C", 0.1): (win, lose)}) if r["seed"] == 1]
    assert measured(records + part) == {"A", "B"}  # C: one seed of three
    no_defaults = [r for r in _records({("D", 1.0): (win, lose)}) if r["setting"] == "zoo"]
    assert measured(records + no_defaults) == {"A", "B"}


def test_the_rule_and_the_docs_table_are_what_the_committed_results_give():
    bench = _bench()
    records = bench.load(RESULTS)
    assert records, "no committed results"
    assert AUTO_PRESET_AT["ppo"] == bench.derive_rule(records)
    # the rule covers the envs measured (a whole cell of seeds 1-3), and those alone
    assert AUTO_PRESET_ENVS == bench.measured_envs(records)
    page = (ROOT / "docs" / "presets.md").read_text()
    assert "\n".join(bench.table_lines(records)) in page


def test_only_selects_the_plans_cells_by_env_or_env_and_percentage(tmp_path):
    bench = _bench()
    assert bench.selected("Hopper-v5", 0.1, None)
    assert bench.selected("Hopper-v5", 0.1, ["Hopper-v5"])
    assert bench.selected("Hopper-v5", 0.1, ["LunarLander-v3:30", "Hopper-v5:10"])
    assert not bench.selected("Hopper-v5", 0.3, ["Hopper-v5:10"])
    assert not bench.selected("Hopper-v5", 0.1, ["Hopper-v4", "HalfCheetah-v5:10"])
    with pytest.raises(SystemExit):  # a cell not in the plan is an error, before any run
        bench.main(["--out", str(tmp_path), "--only", "Hopper-v5:20"])


def test_until_means_the_coming_time_of_day_even_past_midnight(tmp_path, capsys):
    bench = _bench()
    now = dt.datetime(2026, 12, 7, 22, 45, 10, tzinfo=dt.timezone.utc)
    assert bench.next_time("23:30", now) == now.replace(hour=23, minute=30, second=0)
    assert bench.next_time("00:35", now) == dt.datetime(2026, 12, 8, 0, 35,
                                                        tzinfo=dt.timezone.utc)
    assert bench.next_time("22:45", now) == dt.datetime(2026, 12, 8, 22, 45,
                                                        tzinfo=dt.timezone.utc)
    for bad in ("24:00", "7", "ab:cd", "1:2:3"):
        with pytest.raises(SystemExit):  # a one-line usage error, before any run
            bench.main(["--out", str(tmp_path), "--until", bad, "--only", "Hopper-v5:20"])
        assert "--until" in capsys.readouterr().err


def test_processes_side_by_side_pass_over_a_claimed_run_and_rerun_a_dead_ones(tmp_path,
                                                                             monkeypatch):
    bench = _bench()
    claim = tmp_path / "a.running"
    fd, _ = bench.claim_run(claim)
    assert fd is not None and claim.read_text() == str(os.getpid())
    assert bench.claim_run(claim) == (None, os.getpid())  # held: another claim is refused
    claim.unlink()
    os.close(fd)
    # a claimant killed with SIGKILL leaves its file; its lock dies with it
    code = ("import importlib.util, os, sys\n"
            "s = importlib.util.spec_from_file_location("
            f"'b', {str(ROOT / 'benchmarks' / 'preset_budget.py')!r})\n"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
            f"fd, _ = m.claim_run(__import__('pathlib').Path({str(claim)!r}))\n"
            "assert fd is not None\n"
            "os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert claim.is_file()
    fd, _ = bench.claim_run(claim)
    assert fd is not None
    os.close(fd)
    claim.unlink()

    ran = []

    def fake_run(env, setting, fraction, seed, runs_dir):
        ran.append((setting, seed))
        return dict(env=env, setting=setting, fraction=fraction, seed=seed, budget=1,
                    status="finished", final=0.0, wall_s=0.0)

    monkeypatch.setattr(bench, "run_one", fake_run)
    runs = tmp_path / "out" / "runs"
    runs.mkdir(parents=True)
    held = (runs / bench.run_name("CartPole-v1", "none", 0.1, 2)).with_suffix(".running")
    fd, _ = bench.claim_run(held)  # as if a process beside this one were running it
    bench.run_plan(tmp_path / "out", None, ["CartPole-v1:10"])
    assert ("none", 2) not in ran and ("chapter", 2) in ran and len(ran) == 11
    assert not (runs / bench.run_name("CartPole-v1", "none", 0.1, 2)).exists()
    assert sorted(p.suffix for p in runs.iterdir()).count(".running") == 1  # only the held one
    os.close(fd)
