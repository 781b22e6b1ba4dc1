"""The preset `--preset auto` starts from against trustrl's defaults at a fraction of the
preset's budget (issue 57).

Every cell is `trustrl train ppo --env ENV --preset SOURCE|none --total-steps N --seed S` with
N = 10%, 30% or 100% of the preset's total_steps, its greedy evaluation over 10 episodes at the
end (eval_every 0: no evaluation before; evaluations do not touch training's generators). The
preset is the one auto looks at first (`preset_source`): the zoo's (its n_timesteps) on every
env but CartPole-v1 and Pendulum-v1, where it is the chapter's (trustrl/settings/presets/
chapter.py: CartPole's 100,000 steps, the zoo's too; Pendulum's 122,880, the zoo's 100,000).
Seeds 1-3 are the ones `--preset auto`'s budget rule (trustrl/settings/presets/budget.py) is derived
from; seeds 4-6 are held out to check it. One JSON file per run under OUT/runs/; a run whose
file exists is not run again (the script resumes where it stopped). One run at a time per
process; several processes (one per core) may run the same plan side by side: each claims a run
by a lock on a file RUN.running (which holds its process id), and the others pass over a run
so claimed; the lock ends with its process, so a run whose process died is run again.

    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget      # run, resume
    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget --until 07:10
    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget \\
        --only LunarLanderContinuous-v3:10 Hopper-v5:10          # these cells of the plan only
    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget --table \\
        --docs docs/presets.md                                # the table, written into the page

The plan (PLAN) is ordered by cost: the cheap cells first, so that a run stopped by its time
limit leaves whole (env, budget) cells; `--table` marks every cell of the plan and every zoo
PPO env that has no run as not measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FRACTIONS = (0.1, 0.3, 1.0)
DERIVE_SEEDS = (1, 2, 3)
HELDOUT_SEEDS = (4, 5, 6)
EVAL_EPISODES = 10

PLAN: list[tuple[str, float, tuple[int, ...]]] = [
    # (env, fraction of the preset's budget, seeds), in the order they run: the cheap cells
    # first (MountainCarContinuous' budget is 20k, CartPole's and Pendulum's about 100k; the
    # classic-control envs run on the batched collector), then the larger fractions and
    # Box2D, then MuJoCo and BipedalWalker at 10%, then MuJoCo at 30%, the cheapest env first
    # (the zoo's Humanoid and HumanoidStandup budgets, 10M steps, are out of this machine's
    # reach at any fraction)
    (env, f, seeds) for env, f in (
        ("MountainCarContinuous-v0", 0.1), ("MountainCarContinuous-v0", 0.3),
        ("MountainCarContinuous-v0", 1.0), ("CartPole-v1", 0.1), ("Pendulum-v1", 0.1),
        ("CartPole-v1", 0.3), ("Pendulum-v1", 0.3), ("CartPole-v1", 1.0),
        ("Pendulum-v1", 1.0), ("Acrobot-v1", 0.1), ("MountainCar-v0", 0.1),
        ("Acrobot-v1", 0.3), ("MountainCar-v0", 0.3), ("LunarLander-v3", 0.1),
        ("Acrobot-v1", 1.0), ("MountainCar-v0", 1.0), ("LunarLander-v3", 0.3),
        ("LunarLanderContinuous-v3", 0.1), ("LunarLanderContinuous-v3", 0.3),
        ("LunarLanderContinuous-v3", 1.0), ("LunarLander-v3", 1.0), ("Hopper-v5", 0.1),
        ("HalfCheetah-v5", 0.1),
        ("Walker2d-v5", 0.1), ("Swimmer-v5", 0.1), ("BipedalWalker-v3", 0.1),
        ("InvertedPendulum-v5", 0.1), ("InvertedDoublePendulum-v5", 0.1), ("Reacher-v5", 0.1),
        ("Ant-v5", 0.1), ("Swimmer-v5", 0.3), ("InvertedPendulum-v5", 0.3),
        ("InvertedDoublePendulum-v5", 0.3), ("Reacher-v5", 0.3), ("Ant-v5", 0.3),
        ("Walker2d-v5", 0.3), ("Hopper-v5", 0.3), ("HalfCheetah-v5", 0.3))
    for seeds in (DERIVE_SEEDS, HELDOUT_SEEDS)]
"""What this script runs, cheapest first (per env: 10% then 30% of the zoo's budget, the
derivation seeds then the held-out ones, the preset then the defaults)."""


def preset_source(env: str) -> str:
    """The preset auto looks at first for PPO on env (trustrl.settings.presets.auto_source),
    the one measured against the defaults: 'chapter' where the chapter has one (CartPole-v1,
    Pendulum-v1), else 'zoo'."""
    from trustrl.settings.presets import auto_source

    return auto_source("ppo", env) or "zoo"


def settings(env: str) -> tuple[str, str]:
    """The two settings compared on env: its preset (`preset_source`) and trustrl's defaults
    (`--preset none`)."""
    return preset_source(env), "none"


def preset_budget(env: str) -> int:
    """The total_steps of env's preset (`preset_source`)."""
    from trustrl.settings.presets import table

    return int(table(preset_source(env))[("ppo", env)]["total_steps"])


def budget_at(env: str, fraction: float) -> int:
    return round(preset_budget(env) * fraction)


def run_name(env: str, setting: str, fraction: float, seed: int) -> str:
    return f"{env}__{setting}__{round(fraction * 100):03d}pct__seed{seed}.json"


def _commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "trustrl"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+changes" if dirty else "")


def run_one(env: str, setting: str, fraction: float, seed: int, runs_dir: Path) -> dict[str, Any]:
    """Train one cell in a subprocess on one thread; its record (status 'finished' with the
    final evaluation, or 'refused' with trustrl's one-line error)."""
    steps = budget_at(env, fraction)
    cmd = [sys.executable, "-m", "trustrl", "train", "ppo", "--env", env, "--preset", setting,
           "--total-steps", str(steps), "--seed", str(seed), "--runs-dir", str(runs_dir),
           "--quiet", "--set", f"eval_episodes={EVAL_EPISODES}", "--set", "eval_every=0"]
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}
    record: dict[str, Any] = dict(
        env=env, setting=setting, fraction=fraction, budget=steps,
        preset_budget=preset_budget(env),
        seed=seed, command="trustrl " + " ".join(cmd[3:13] + cmd[15:]),
        trustrl=_commit(), date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"))
    before = set(runs_dir.iterdir()) if runs_dir.is_dir() else set()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **threads})
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    new = sorted(set(runs_dir.iterdir()) - before) if runs_dir.is_dir() else []
    ev = new[-1] / "eval.json" if new else None
    if proc.returncode == 0 and ev is not None and ev.is_file():
        data = json.loads(ev.read_text())
        cfg = json.loads((new[-1] / "config.json").read_text())
        record.update(status="finished", final=data["mean"], returns=data["returns"],
                      global_step=data["global_step"], preset=cfg.get("preset"),
                      batch=cfg["num_envs"] * cfg["num_steps"])
    else:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
        record.update(status="refused" if proc.returncode == 2 else "failed",
                      error=lines[-1][:300], rc=proc.returncode)
    return record


def selected(env: str, fraction: float, only: list[str] | None) -> bool:
    """Whether the plan's cell (env, fraction) is one of `only` ('ENV' or 'ENV:PCT'; None:
    every cell)."""
    return only is None or any(
        o == env or o == f"{env}:{round(fraction * 100)}" for o in only)


def next_time(hh_mm: str, now: dt.datetime) -> dt.datetime:
    """The first moment at or after `now` whose clock reads HH:MM (tomorrow's where today's
    has passed, so that a deadline after midnight means the coming one)."""
    h, m = (int(x) for x in hh_mm.split(":"))
    if not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(hh_mm)
    at = now.replace(hour=h, minute=m, second=0, microsecond=0)
    return at if at >= now else at + dt.timedelta(days=1)


def claim_run(claim: Path) -> tuple[int | None, int]:
    """Claim the run of `claim` (RUN.running) for this process by a lock on that file, which
    the kernel lets go when the process ends however it ends: (an open descriptor holding the
    lock, 0), or (None, the process id of the live process that holds it)."""
    import fcntl

    while True:
        fd = os.open(claim, os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = int(os.read(fd, 32) or b"0")
            except ValueError:
                holder = 0
            os.close(fd)
            return None, holder
        try:  # the file may have been removed by its last holder between open and lock
            same = os.stat(claim).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            return fd, 0
        os.close(fd)


def run_plan(out: Path, until: dt.datetime | None, only: list[str] | None = None) -> None:
    """Every run of PLAN (of its cells in `only`, see `selected`) without a record, in order;
    with `until`, a run whose expected time (the median seconds per step of the env's runs so
    far) would end after it is skipped."""
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="preset_budget_"))
    for env, fraction, seeds in PLAN:
        if not selected(env, fraction, only):
            continue
        for seed in seeds:
            for setting in settings(env):
                path = runs / run_name(env, setting, fraction, seed)
                if path.is_file():
                    continue
                per_step = [r["wall_s"] / r["budget"] for r in load(out)
                            if r["env"] == env and r["status"] == "finished"]
                need = statistics.median(per_step) * budget_at(env, fraction) if per_step else 0
                now = dt.datetime.now(dt.timezone.utc)
                if until is not None and now + dt.timedelta(seconds=need) > until:
                    print(f"skipped: {path.name} would end after {until:%H:%M} UTC", flush=True)
                    continue
                claim = path.with_suffix(".running")
                fd, holder = claim_run(claim)
                if fd is None:
                    print(f"passed over: {path.name} is being run by process {holder}",
                          flush=True)
                    continue
                try:
                    if path.is_file():  # another process ran it meanwhile
                        continue
                    rec = run_one(env, setting, fraction, seed, scratch)
                    path.write_text(json.dumps(rec, indent=1) + "\n")
                finally:
                    claim.unlink(missing_ok=True)
                    os.close(fd)
                print(f"{path.name}: {rec['status']} {rec.get('final', rec.get('error'))} "
                      f"({rec['wall_s']} s)", flush=True)


def load(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


BEGIN = "<!-- generated by benchmarks/preset_budget.py --table: do not edit by hand -->"
END = "<!-- end of the generated section -->"


def _cell(records: list[dict[str, Any]], env: str, fraction: float, setting: str,
          seeds: tuple[int, ...]) -> dict[str, Any]:
    """One setting's runs at (env, fraction) on these seeds: {'finals': {seed: return}} when
    every seed finished, {'refused': why} when trustrl refused it, {} when not (all) run."""
    got = {r["seed"]: r for r in records if r["env"] == env and r["setting"] == setting
           and math.isclose(r["fraction"], fraction) and r["seed"] in seeds}
    if len(got) < len(seeds):
        return {}
    refused = [r for r in got.values() if r["status"] == "refused"]
    if refused:
        return {"refused": refused[0]["error"].removeprefix("trustrl: error: ")}
    if any(r["status"] != "finished" for r in got.values()):
        return {}
    return {"finals": {s: got[s]["final"] for s in seeds}}


def _median(cell: dict[str, Any]) -> float:
    return statistics.median(cell["finals"].values())


def _spread(cell: dict[str, Any]) -> float:
    v = cell["finals"].values()
    return max(v) - min(v)


def preset_leads(preset: dict[str, Any], defaults: dict[str, Any]) -> bool | None:
    """The rule's test: the preset's median at least the defaults' median plus the preset's
    own spread (max - min over the seeds), so that a lead within the preset's seed-to-seed
    noise keeps the defaults. A defaults run refused (below one batch) is no verdict (auto
    keeps the preset there by its batch clause); None: not measured."""
    if not preset or not defaults or "refused" in preset or "refused" in defaults:
        return None
    return _median(preset) >= _median(defaults) + _spread(preset)


def preset_not_worse(preset: dict[str, Any], defaults: dict[str, Any],
                     spread: bool = False) -> bool | None:
    """The former rules' test: the preset's median at least the defaults' median (with
    `spread`, the defaults' median minus their spread: the tolerance while the rule was one
    fraction for every env). A defaults run refused counts for the preset; None: not
    measured."""
    if not preset or not defaults or "refused" in preset:
        return None
    if "refused" in defaults:
        return True
    return _median(preset) >= _median(defaults) - (_spread(defaults) if spread else 0.0)


def measured_envs(records: list[dict[str, Any]]) -> set[str]:
    """The envs with a whole derivation cell (both settings on seeds 1-3 at some fraction):
    those `derive_rule` reads, so those auto's rule covers (AUTO_PRESET_ENVS). Runs of a cell
    not yet whole (a session's time ran out) wait for the next session to resume it."""
    return {r["env"] for r in records if all(
        _cell(records, r["env"], r["fraction"], s, DERIVE_SEEDS) for s in settings(r["env"]))}


def _verdicts(records: list[dict[str, Any]], env: str, test: Any) -> dict[float, bool]:
    """test(preset cell, defaults cell) on the derivation seeds at each measured fraction of
    env that gives a verdict."""
    out = {}
    for f in FRACTIONS:
        v = test(_cell(records, env, f, preset_source(env), DERIVE_SEEDS),
                 _cell(records, env, f, "none", DERIVE_SEEDS))
        if v is not None:
            out[f] = v
    return out


def derive_rule(records: list[dict[str, Any]]) -> dict[str, dict[float, bool]]:
    """auto's rule from the derivation seeds (trustrl's AUTO_PRESET_AT): per env measured, per
    measured fraction, whether the preset passed `preset_leads` against the defaults."""
    return {env: _verdicts(records, env, preset_leads) for env in sorted(measured_envs(records))}


def former_rule(records: list[dict[str, Any]], spread: bool = False
                ) -> dict[str, dict[float, bool]]:
    """The rule as it was before 2026-12-07, in derive_rule's form: per env, the preset from
    the least measured fraction at which, and at every larger one, `preset_not_worse` held
    (medians; with `spread`, the defaults' spread as a tolerance), the defaults below it."""
    rules = {}
    for env in sorted(measured_envs(records)):
        verdicts = {f: v for f, v in _verdicts(
            records, env, lambda p, d: preset_not_worse(p, d, spread)).items()
            if "refused" not in _cell(records, env, f, "none", DERIVE_SEEDS)}
        start = math.inf
        for f in sorted(verdicts, reverse=True):
            if not verdicts[f]:
                break
            start = f
        rules[env] = {f: f >= start for f in verdicts}
    return rules


def auto_pick(env: str, fraction: float) -> str:
    """What --preset auto takes for PPO on env at this fraction of its preset's budget, by
    the rule in trustrl (trustrl.settings.presets.choose): the preset's source or 'none'."""
    from trustrl.settings.config import defaults_batch
    from trustrl.settings.presets import choose

    c = choose("ppo", env, "auto", budget_at(env, fraction), defaults_batch("ppo"))
    return c.label.split(":", 1)[0] if c.label is not None else "none"


def rule_pick(records: list[dict[str, Any]], rules: dict[str, dict[float, bool]], env: str,
              f: float) -> str:
    """What a rule `rules` (derive_rule's form) would take at (env, f): the preset's source
    or 'none' (the preset where the defaults cannot run; the verdict of the largest measured
    fraction not above f; the defaults below the least)."""
    from trustrl.settings.presets.budget import takes

    if "refused" in _cell(records, env, f, "none", HELDOUT_SEEDS):
        return preset_source(env)
    return preset_source(env) if takes(rules.get(env, {}), f) else "none"


def heldout_check(records: list[dict[str, Any]], env: str, f: float,
                  pick: str | None = None) -> str:
    """Point 4 on the held-out seeds: auto's median (or `pick`'s) >= the better setting's
    median minus the better setting's spread (max - min over the held-out seeds)."""
    cells = {s: _cell(records, env, f, s, HELDOUT_SEEDS) for s in settings(env)}
    if not all(cells.values()):
        return "not measured"
    pick = pick or auto_pick(env, f)
    if "refused" in cells[pick]:
        return f"**no**: auto's pick ({pick}) cannot run"
    ran = {s: c for s, c in cells.items() if "finals" in c}
    best = max(ran, key=lambda s: _median(ran[s]))
    target = _median(ran[best]) - _spread(ran[best])
    got = _median(cells[pick])
    verdict = "yes" if got >= target else "**no**"
    return f"{verdict}: {got:.1f} vs {_median(ran[best]):.1f} - {_spread(ran[best]):.1f}"


def _show(cell: dict[str, Any]) -> str:
    if not cell:
        return "not measured"
    if "refused" in cell:
        return f"cannot run ({cell['refused']})"
    finals = cell["finals"]
    return f"{_median(cell):.1f} ({', '.join(f'{finals[s]:.1f}' for s in sorted(finals))})"


def _setting(s: str) -> str:
    return "the defaults" if s == "none" else "the preset"


def table_lines(records: list[dict[str, Any]]) -> list[str]:
    from trustrl.settings.presets import AUTO_PRESET_AT, PRESETS, ZOO_PRESETS
    from trustrl.settings.presets.budget import rule_text

    rule = derive_rule(records)
    commits = sorted({r["trustrl"] for r in records})
    dates = sorted(r["date"] for r in records)
    lines = [BEGIN, "",
             f"{len(records)} runs, {dates[0] if dates else '-'} to "
             f"{dates[-1] if dates else '-'} UTC, trustrl at {', '.join(commits) or '-'}; "
             "final greedy return over 10 episodes, median (per seed). The preset: the "
             "zoo's, on CartPole-v1 and Pendulum-v1 the chapter's (the one auto looks at "
             "first there), the budget a fraction of its total_steps. Seeds 1-3 derive the "
             "rule, seeds 4-6 check it. `better`: the preset where its median on seeds 1-3 is "
             "at least the defaults' plus its own spread (the rule's test), else the "
             "defaults. "
             "`held-out`: auto's median on seeds 4-6 against the better setting's there (the "
             "higher median) minus its spread (max - min).", "",
             "| env | budget (of the preset's) | preset, seeds 1-3 | defaults, seeds 1-3 | better "
             "| preset, seeds 4-6 | defaults, seeds 4-6 | auto takes | held-out: auto >= "
             "better - spread |",
             "|---|---|---|---|---|---|---|---|---|"]
    envs = [e for e in dict.fromkeys(r["env"] for r in records)]
    for env in envs:
        for f in FRACTIONS:
            c = {(key, k): _cell(records, env, f, s, seeds)
                 for key, s in zip(("preset", "none"), settings(env), strict=True)
                 for k, seeds in (("d", DERIVE_SEEDS), ("h", HELDOUT_SEEDS))}
            if not any(c.values()):
                continue
            v = preset_leads(c["preset", "d"], c["none", "d"])
            better = "-" if v is None else "the preset" if v else "the defaults"
            if "refused" in c["none", "d"]:
                better = "the preset (the defaults cannot run)"
            name = env + (" (the chapter's preset)" if preset_source(env) == "chapter" else "")
            lines.append(f"| {name} | {budget_at(env, f):,} ({round(100 * f)}%) "
                         f"| {_show(c['preset', 'd'])} | {_show(c['none', 'd'])} | {better} "
                         f"| {_show(c['preset', 'h'])} | {_show(c['none', 'h'])} "
                         f"| {_setting(auto_pick(env, f))} | {heldout_check(records, env, f)} |")
    checks = {(env, f): heldout_check(records, env, f) for env in envs for f in FRACTIONS}
    held = [f"{e} at {f:.0%}" for (e, f), v in checks.items() if v.startswith("yes")]
    failed = [f"{e} at {f:.0%}" for (e, f), v in checks.items() if v.startswith("**no")]
    lines += ["", f"Held-out check (seeds 4-6, auto as trustrl has it now): holds on "
              f"{len(held)} of {len(held) + len(failed)} measured cells"
              + (f"; fails on {', '.join(failed)}" if failed else "") + "."]
    def shown(rules: dict[str, dict[float, bool]]) -> str:
        return "; ".join(f"{e} " + (", ".join(f"{f:.0%} {'preset' if v else 'defaults'}"
                                             for f, v in sorted(at.items())) or "-")
                         for e, at in rules.items())

    def fails(rules: dict[str, dict[float, bool]]) -> str:
        bad = [f"{e} at {f:.0%}" for e in envs for f in FRACTIONS
               if heldout_check(records, e, f, rule_pick(records, rules, e, f)
                                ).startswith("**no")]
        return ", ".join(bad) or "no cell"

    medians, lenient = former_rule(records), former_rule(records, spread=True)
    fixed = AUTO_PRESET_AT["ppo"]
    lines += ["", f"Derived rule, per env and measured fraction (`derive_rule`: the preset "
              f"where its median on seeds 1-3 is at least the defaults' plus its own spread; "
              f"a budget between two measured fractions takes the lower one's verdict, one "
              f"below the least measured the defaults): **{shown(rule)}**; trustrl's "
              f"AUTO_PRESET_AT: {'the same' if fixed == rule else shown(fixed)}. The former "
              f"rules, read off the same table, and their held-out checks: the preset from the "
              f"least fraction at which, and at every larger one, its median was at least the "
              f"defaults' (the rule from 2026-12-06 until 2026-12-07) fails on "
              f"{fails(medians)}; the same with the defaults' spread as a tolerance (the "
              f"rule while it was one fraction for every env) fails on {fails(lenient)}. "
              f"In words: {rule_text()}.", ""]
    missing: dict[str, list[str]] = {}
    for (algo, env), values in ZOO_PRESETS.items():
        if algo != "ppo":
            continue
        gaps = [f"{round(100 * f)}%" for f in FRACTIONS
                if not all(_cell(records, env, f, s, seeds) for s in settings(env)
                           for seeds in (DERIVE_SEEDS, HELDOUT_SEEDS))]
        if gaps:
            mark = (" (Atari, out of auto's rule)" if values.get("atari_wrappers") else
                    " (the chapter's preset)" if ("ppo", env) in PRESETS else "")
            missing.setdefault(", ".join(gaps), []).append(env + mark)
    lines += ["Not measured (both settings on seeds 1-6), for want of CPU time (the runs "
              "above ran one at a time per core on a 2-core machine shared with other work, "
              "over several sessions; what the cells would cost: \"The cost of the cells not "
              "measured\" above the table):", ""]
    lines += [f"- at {gaps}: {', '.join(envs)}" for gaps, envs in missing.items()]
    begun: dict[tuple[str, float], int] = {}
    for r in records:
        whole = all(_cell(records, r["env"], r["fraction"], s, seeds) for s in settings(r["env"])
                    for seeds in (DERIVE_SEEDS, HELDOUT_SEEDS))
        if not whole:
            begun[r["env"], r["fraction"]] = begun.get((r["env"], r["fraction"]), 0) + 1
    runs = 2 * (len(DERIVE_SEEDS) + len(HELDOUT_SEEDS))
    lines += [f"- begun, not whole (the script resumes them): {env} at {f:.0%}, {n} of {runs} "
              "runs" for (env, f), n in begun.items()]
    chapter = [e for (a, e) in ZOO_PRESETS if a == "ppo" and preset_source(e) == "chapter"]
    lines += [f"- the zoo's PPO presets of {' and '.join(chapter)}: at no budget (auto looks "
              "at the chapter's first there, measured above; `--preset zoo` takes them)"]
    lines += ["- TRPO's zoo presets: none (auto's rule does not cover them)", "", END]
    return lines


def write_table(records: list[dict[str, Any]], docs: Path | None) -> None:
    lines = table_lines(records)
    if docs is None:
        print("\n".join(lines))
        return
    text = docs.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{docs} has no generated section ({BEGIN} ... {END})")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    docs.write_text(head + "\n".join(lines) + tail)
    print(f"wrote the table into {docs}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="results folder (runs/ inside)")
    p.add_argument("--until", help="HH:MM UTC: start no run expected to end after it")
    p.add_argument("--only", nargs="+", metavar="ENV[:PCT]", help="run these cells of the "
                   "plan only (an env, or an env at a percentage of the zoo's budget), in the "
                   "plan's order")
    p.add_argument("--table", action="store_true", help="write the table; run nothing")
    p.add_argument("--docs", help="with --table: the Markdown page whose generated section "
                   "is replaced")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.table:
        write_table(load(out), Path(args.docs) if args.docs else None)
        return 0
    until = None
    if args.until:
        try:
            until = next_time(args.until, dt.datetime.now(dt.timezone.utc))
        except ValueError:
            p.error(f"--until {args.until!r}: not a time of day as HH:MM")
    plan_cells = {f"{e}:{round(f * 100)}" for e, f, _ in PLAN} | {e for e, _, _ in PLAN}
    unknown = [o for o in args.only or [] if o not in plan_cells]
    if unknown:
        p.error(f"not a cell of the plan: {', '.join(unknown)} (ENV or ENV:PCT, PCT 10, 30 "
                "or 100)")
    run_plan(out, until, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
