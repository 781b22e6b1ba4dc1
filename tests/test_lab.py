"""The PPO lab: `trustrl lab init | check | solution`, and its graded tests judged three ways:
the generated stubs fail every one with its own message, trustrl's reference passes every one,
and mutants with a classic PPO bug fail with a message that names the bug."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trustrl.cli import main
from trustrl.lab import TASKS
from trustrl.lab.commands import TEMPLATE_FILES, LabReport, init_lab, run_tests

REFERENCE = "from trustrl.lab.solutions import *  # noqa: F401,F403\n"


def cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trustrl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trustrl: error: "), p.stderr
    return lines[0]


def make_lab(path: Path, ppo_source: str | None = None) -> Path:
    init_lab(path)
    if ppo_source is not None:
        (path / "ppo.py").write_text(ppo_source)
    return path


def failures(report: LabReport) -> dict[str, str]:
    return {t.name: t.message for t in report.tests if t.outcome != "passed"}


@pytest.fixture(scope="module")
def stub_lab(tmp_path_factory) -> Path:
    return make_lab(tmp_path_factory.mktemp("lab") / "stubs")


@pytest.fixture(scope="module")
def reference_lab(tmp_path_factory) -> Path:
    return make_lab(tmp_path_factory.mktemp("lab") / "reference", REFERENCE)


# --- lab init -------------------------------------------------------------------------------
def test_init_writes_the_exercise_folder(tmp_path, capsys):
    assert main(["lab", "init", str(tmp_path / "lab")]) == 0
    assert "wrote" in capsys.readouterr().out
    for name in TEMPLATE_FILES:
        assert (tmp_path / "lab" / name).is_file(), name
    tree = ast.parse((tmp_path / "lab" / "ppo.py").read_text())
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    tasks = {"clipped_surrogate_loss": 1, "approx_kl": 2, "clip_fraction": 2, "value_loss": 3,
             "ppo_update": 4}
    assert set(tasks) <= set(funcs)
    for name, task in tasks.items():
        doc = ast.get_docstring(funcs[name]) or ""
        assert "Steps:" in doc and "1. " in doc and "easy mistake" in doc, name
        assert re.search(r"\[B\]", doc), f"{name}: no shapes in the docstring"
        body = ast.unparse(funcs[name].body[-1])
        assert body.startswith(f"raise NotImplementedError('Task {task}:"), body
    ini = (tmp_path / "lab" / "pytest.ini").read_text()
    assert all(f"task{t}:" in ini for t in TASKS)
    readme = (tmp_path / "lab" / "README.md").read_text()
    assert "Self-check" in readme and "Pen-and-paper" in readme and "<details>" in readme


def test_init_defaults_to_ppo_lab_in_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["lab", "init"]) == 0
    assert (tmp_path / "ppo-lab" / "ppo.py").is_file()


def test_init_refuses_a_folder_with_work_in_it_unless_forced(tmp_path):
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "ppo.py").write_text("# my work\n")
    (lab / "notes.txt").write_text("keep me\n")
    line = one_line_error(cli(["lab", "init", str(lab)], tmp_path))
    assert "--force" in line and "already holds files" in line
    assert (lab / "ppo.py").read_text() == "# my work\n"
    assert sorted(p.name for p in lab.iterdir()) == ["notes.txt", "ppo.py"]

    assert main(["lab", "init", str(lab), "--force"]) == 0
    assert "NotImplementedError" in (lab / "ppo.py").read_text()
    assert (lab / "notes.txt").read_text() == "keep me\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["lab", "init", str(empty)]) == 0
    assert main(["lab", "init", str(lab / "notes.txt")]) == 2  # a file, not a folder


# --- the graded tests -----------------------------------------------------------------------
def test_stubs_fail_every_graded_test_with_its_intended_message(stub_lab):
    report = run_tests(stub_lab)
    assert not report.errors
    for task in TASKS:
        assert len(report.of_task(task)) >= 5, task
    assert len(report.tests) >= 25
    for t in report.tests:
        assert t.outcome == "failed", t.name
        assert len(t.tasks) == 1, t.name
        m = re.fullmatch(r"(.+): (\w+) is not implemented yet \(Task (\d): write \2\)", t.message)
        assert m, f"{t.name}: {t.message}"
        assert int(m.group(3)) == t.tasks[0], f"{t.name}: {t.message}"
    # the case is named in front: the worked cases of Task 1 by their numbers and values
    msgs = {t.name: t.message for t in report.tests}
    assert msgs["test_task1_slope[case2]"].startswith("case 2 (A=+2, rho=1.5): ")
    assert msgs["test_task1_value[case6]"].startswith("case 6 (A=-1, rho=1.4): ")


def test_reference_solution_passes_every_graded_test(reference_lab):
    report = run_tests(reference_lab)  # the short CartPole run included (a few seconds)
    assert not report.errors
    assert failures(report) == {}
    assert report.all_pass and len(report.tests) >= 25
    assert any(t.name == "test_task4_cartpole_improves" for t in report.tests)


MAX_INSTEAD_OF_MIN = REFERENCE + textwrap.dedent("""
    import torch

    def clipped_surrogate_loss(logp_new, logp_old, advantages, clip_eps):
        ratio = torch.exp(logp_new - logp_old)
        clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
        return -torch.max(ratio * advantages, clipped * advantages).mean()
""")

CLIPPED_ADVANTAGE = REFERENCE + textwrap.dedent("""
    import torch

    def clipped_surrogate_loss(logp_new, logp_old, advantages, clip_eps):
        ratio = torch.exp(logp_new - logp_old)
        clipped = ratio * torch.clamp(advantages, 1 - clip_eps, 1 + clip_eps)
        return -torch.min(ratio * advantages, clipped).mean()
""")

UPPER_EDGE_ONLY = REFERENCE + textwrap.dedent("""
    import torch

    def clipped_surrogate_loss(logp_new, logp_old, advantages, clip_eps):
        ratio = torch.exp(logp_new - logp_old)
        clipped = torch.clamp(ratio, max=1 + clip_eps) * advantages
        return -torch.min(ratio * advantages, clipped).mean()
""")

# A from-scratch ppo_update with two switches for the classic Task 4 bugs.
HAND_WRITTEN_UPDATE = REFERENCE + textwrap.dedent("""
    import torch

    RECOMPUTE_LOGP_OLD = {recompute}
    WHOLE_BATCH_NORM = {whole}

    def ppo_update(agent, optimizer, batch, *, epochs, minibatch_size, clip_eps, vf_coef,
                   ent_coef, max_grad_norm, target_kl=None, clip=True):
        n = len(batch)
        logp_old = batch.logp_old
        adv_all = batch.advantages
        if WHOLE_BATCH_NORM:
            adv_all = (adv_all - adv_all.mean()) / (adv_all.std() + 1e-8)
        epochs_run = 0
        for _ in range(epochs):
            if RECOMPUTE_LOGP_OLD:
                with torch.no_grad():
                    logp_old = agent.dist(batch.obs).log_prob(batch.actions)
            perm = torch.randperm(n)
            for start in range(0, n, minibatch_size):
                mb = perm[start:start + minibatch_size]
                dist = agent.dist(batch.obs[mb])
                logp = dist.log_prob(batch.actions[mb])
                adv = adv_all[mb]
                if not WHOLE_BATCH_NORM:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                if clip:
                    pl = clipped_surrogate_loss(logp, logp_old[mb], adv, clip_eps)
                else:
                    pl = -(torch.exp(logp - logp_old[mb]) * adv).mean()
                vl = value_loss(agent.value(batch.obs[mb]), batch.returns[mb])
                loss = pl + vf_coef * vl - ent_coef * dist.entropy().mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
                optimizer.step()
            epochs_run += 1
            with torch.no_grad():
                logp_all = agent.dist(batch.obs).log_prob(batch.actions)
            if target_kl is not None and approx_kl(logp_all, logp_old) > target_kl:
                break
        with torch.no_grad():
            logp_all = agent.dist(batch.obs).log_prob(batch.actions)
        return {{"epochs_run": epochs_run, "approx_kl": approx_kl(logp_all, logp_old),
                "clip_fraction": clip_fraction(logp_all, logp_old, clip_eps)}}
""")

MUTANTS = {
    "min replaced by max": (MAX_INSTEAD_OF_MIN, 1, ["max instead of min"]),
    "clipping the advantage": (CLIPPED_ADVANTAGE, 1,
                               ["clipping the advantage instead of the ratio"]),
    "clip on one side only": (UPPER_EDGE_ONLY, 1, ["clipping only the upper edge"]),
    "logp_old recomputed each epoch": (
        HAND_WRITTEN_UPDATE.format(recompute=True, whole=False), 4,
        ["stored logp_old", "never recompute logp_old"]),
    "advantages normalised over the whole batch": (
        HAND_WRITTEN_UPDATE.format(recompute=False, whole=True), 4,
        ["advantage normalisation per minibatch", "not once over the whole batch"]),
}


def test_hand_written_update_without_bugs_passes_task_4(tmp_path):
    """The mutants below differ from this one only by their bug."""
    lab = make_lab(tmp_path / "lab", HAND_WRITTEN_UPDATE.format(recompute=False, whole=False))
    report = run_tests(lab, [4], markexpr="not train")
    assert failures(report) == {} and len(report.tests) >= 5


@pytest.mark.parametrize("bug", list(MUTANTS))
def test_mutant_fails_with_a_message_naming_the_bug(tmp_path, bug):
    source, task, words = MUTANTS[bug]
    lab = make_lab(tmp_path / "lab", source)
    report = run_tests(lab, [task], markexpr="not train")
    failed = failures(report)
    assert failed, f"the mutant '{bug}' passed every Task {task} test"
    assert any(all(w in msg for w in words) for msg in failed.values()), failed


def test_a_ppo_py_that_does_not_import_fails_every_test_saying_so(tmp_path):
    lab = make_lab(tmp_path / "lab", "def clipped_surrogate_loss(:\n")
    report = run_tests(lab, [1, 2])
    assert report.tests and all(t.outcome == "failed" for t in report.tests)
    assert all("cannot import ppo.py: SyntaxError" in t.message for t in report.tests)


# --- lab check ------------------------------------------------------------------------------
def test_check_prints_a_scoreboard_and_exits_1_until_everything_passes(stub_lab, reference_lab):
    p = cli(["lab", "check", str(stub_lab)], stub_lab)
    assert p.returncode == 1, p.stderr
    rows = [ln for ln in p.stdout.splitlines() if re.match(r"\s+task \d", ln)]
    assert len(rows) == 4
    assert re.search(r"task 1 .* 0/\d+ +first failure", p.stdout)
    assert "case 1 (A=+2, rho=1.1): clipped_surrogate_loss is not implemented yet" in \
        " ".join(p.stdout.split())
    assert "graded tests pass. Next: task 1" in " ".join(p.stdout.split())


def test_check_exits_0_when_the_selected_tasks_pass(reference_lab, capsys, monkeypatch):
    monkeypatch.chdir(reference_lab)  # no DIR: the current folder, since it is a lab
    assert main(["lab", "check", "--task", "1", "--task", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"task 1 .* (\d+)/\1 +ok", out)
    assert re.search(r"task 3 .* (\d+)/\1 +ok", out)
    assert "task 2" not in out and "task 4" not in out


def test_check_on_a_folder_that_is_not_a_lab(tmp_path, capsys):
    assert main(["lab", "check", str(tmp_path)]) == 2
    assert main(["lab", "check", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a PPO lab folder" in err[0] and "no such folder" in err[1]


@pytest.mark.parametrize("bad", ["0", "5", "x"])
def test_bad_task_numbers_are_one_line_errors(tmp_path, capsys, bad):
    assert main(["lab", "check", str(tmp_path), "--task", bad]) == 2
    assert main(["lab", "solution", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(f"no task '{bad}'" in ln for ln in err), err


# --- lab solution ---------------------------------------------------------------------------
@pytest.mark.parametrize("task,expected", [
    (1, ["def clipped_surrogate_loss(", "logp_new: Tensor", "trustrl/maths/losses.py",
         "o.minimum(unclipped, clipped)", "o.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)",
         "`o` below is torch"]),
    (2, ["def approx_kl(logp_new", "def clip_fraction(logp_new", "def kl_k3(",
         "trustrl/maths/diagnostics.py"]),
    (3, ["def value_loss(", "o.maximum(err, (v_clip - returns) ** 2)"]),
    (4, ["def ppo_update(", "agent: ActorCritic", "trustrl/algos/ppo.py", "class PPO(",
         'mb["logp_old"]', "def normalize_advantages(", "def clip_grad_norm(",
         "def k_epochs(", "def minibatch(", "target_kl"]),
])
def test_solution_prints_the_reference_and_the_trustrl_code_it_calls(capsys, task, expected):
    assert main(["lab", "solution", str(task)]) == 0
    out = capsys.readouterr().out
    for text in expected:
        assert text in out, text
    assert out.index("trustrl.lab.solutions") < out.index("the trustrl functions they call")


# --- run.py ---------------------------------------------------------------------------------
def test_run_py_with_a_tiny_budget_prints_summaries_and_writes_the_plot(reference_lab):
    out = reference_lab / "plot.png"
    p = subprocess.run([sys.executable, "run.py", "--steps", "1024", "--target-kl", "0.01"],
                       cwd=reference_lab, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for name in ("PPO (K=10", "aggressive (K=40", "aggressive, no clip", "one epoch"):
        assert name in p.stdout, name
    assert "median KL" in p.stdout and "median epochs" in p.stdout
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 20_000
    assert "target_kl 0.01" in p.stdout
