"""`trustrl reproduce`: the deterministic claims at their printed precision, the report, the
exit status, and the whole quick run as CI runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trustrl.cli import main
from trustrl.experiments import claims_training as ct
from trustrl.experiments.registry import (
    DIFFERS,
    REGISTRY,
    REPRODUCED,
    SEED_OFFSET_ENV,
    WITHIN_SPREAD,
    Context,
    Result,
    claim,
)
from trustrl.experiments.report import run_claims, select, write_report

EXACT = ["000.opening-table", "000.fisher-quadratic", "000.natural-gradient-table", "000.ex9.5",
         "000.clip-cases", "000.ex9.3", "000.ex9.4", "002.standardized-advantages",
         "002.importance-sampling", "002.rare-action", "002.clip-printout",
         "002.gaussian-printout"]


@pytest.mark.parametrize("cid", EXACT)
def test_deterministic_claims_reproduce_to_printed_precision(tmp_path, cid):
    (c,) = select([cid])
    result = c.fn(Context(out=tmp_path, quick=True))
    bad = [ch for ch in result.checks if ch.verdict != REPRODUCED]
    assert result.checks and not bad, bad
    for fig in result.figures:
        assert (tmp_path / fig).read_bytes()[:4] == b"\x89PNG"


def test_check_builders_judge_by_the_printed_precision():
    r = Result()
    assert r.exact("x", 0.120, 0.12012, 3)
    assert not r.exact("y", 0.120, 0.1206, 3)
    assert r.spread("z", "about 1", 1.2, 0.5, 1.5, "why")
    assert r.verdict == DIFFERS
    assert [c.verdict for c in r.checks] == [REPRODUCED, DIFFERS, "within spread"]


def test_over_seeds_judges_the_median_against_the_range_widened_by_the_seeds_spread():
    r = Result()
    # values 1, 2, 3: median 2, sd 1, so a stated range [lo, hi] accepts [lo - 2, hi + 2]
    assert r.over_seeds("in", "about 4", [3.0, 1.0, 2.0], [5, 6, 7], 3.9, 5.0, "why")
    assert not r.over_seeds("out", "about 4.5", [3.0, 1.0, 2.0], [5, 6, 7], 4.1, 5.0, "why")
    rb = r.checks[0].robustness
    assert rb is not None and rb.seeds == (5, 6, 7) and rb.values == (3.0, 1.0, 2.0)
    assert (rb.point, rb.sd, rb.lo, rb.hi) == pytest.approx((2.0, 1.0, 1.9, 7.0))
    assert rb.margin == pytest.approx(0.1) and rb.margin_sd == pytest.approx(0.1)
    assert r.checks[1].robustness.margin == pytest.approx(-0.1)
    assert [c.verdict for c in r.checks] == [WITHIN_SPREAD, DIFFERS]
    # an infinite value ("never reached") counts in the median, not in the spread
    assert not r.over_seeds("never", "20k", [1e4, float("inf"), float("inf")], [1, 2, 3],
                            15e3, 35e3, "why")
    assert r.checks[-1].robustness.sd == 0.0 and r.checks[-1].ours == "inf"
    # one seed: no spread, the stated range only
    assert not r.over_seeds("one", "0-1", [1.5], [1], 0.0, 1.0, "why")
    with pytest.raises(ValueError):
        r.over_seeds("bad", "x", [1.0, 2.0], [1], 0.0, 1.0, "why")


def test_seed_offset_shifts_every_seed_and_is_named_in_the_report(tmp_path, monkeypatch):
    seen = []

    @claim("test.seeds", "nowhere", "a claim that records its seeds")
    def _seeds(ctx):
        seen.append((ctx.seeds(full=5, quick=3), ctx.seeds(full=2, quick=2)))
        r = Result()
        r.over_seeds("x", "1", [1.0, 1.0, 1.0], ctx.seeds(full=5, quick=3), 0.5, 2.0, "why")
        return r

    try:
        assert main(["reproduce", "--quick", "--only", "test.seeds", "--out", str(tmp_path)]) == 0
        monkeypatch.setenv(SEED_OFFSET_ENV, "40")
        assert main(["reproduce", "--quick", "--only", "test.seeds", "--out", str(tmp_path)]) == 0
        assert seen == [([0, 1, 2], [0, 1]), ([40, 41, 42], [40, 41])]
        report = (tmp_path / "REPORT.md").read_text()
        assert f"{SEED_OFFSET_ENV}=40 trustrl reproduce --quick" in report
        assert "## How robust the training verdicts are" in report
        assert "| test.seeds | x | 40..42 | 1, 1, 1 | 1 | 0 | [0.5, 2] | +0.5 | within spread |" \
            in report
        assert Context(out=tmp_path, seed_offset=7).seeds(full=2, quick=1) == [7, 8]
    finally:
        REGISTRY.pop("test.seeds")


@pytest.mark.parametrize("bad", ["-1", "x", "1.5", "100001"])
def test_bad_seed_offset_is_one_line_error(tmp_path, monkeypatch, capsys, bad):
    monkeypatch.setenv(SEED_OFFSET_ENV, bad)
    assert main(["reproduce", "--only", "000.ex9.4", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trustrl: error: ") and SEED_OFFSET_ENV in err
    assert err.count("\n") == 1 and not (tmp_path / "REPORT.md").exists()


def test_cartpole_claims_pin_the_gymnasium_path(tmp_path):
    """The lab's figures are those of the Gymnasium path; a new default must not move them."""
    from trustrl.settings.config import make_config

    ctx = Context(out=tmp_path / "figures", quick=True)
    for algo, over in ct.LAB_VARIANTS.values():
        job = ct._cartpole_job(ctx, algo, 1, **over)
        cfg = make_config(job["algo"], "CartPole-v1", flags=job["flags"])
        assert cfg.vector == "sync" and cfg.total_steps == ct.LAB_STEPS


def test_training_runs_are_shared_between_claims(tmp_path, monkeypatch):
    """The K sweep's K = 1 and K = 10 runs are the lab's: each job runs once per context."""
    ran = []
    monkeypatch.setattr(ct, "_pool_map", lambda fn, jobs, cost=None: [
        ran.append(j) or [{"seed": j["flags"]["seed"]}] for j in jobs])
    ctx = Context(out=tmp_path / "figures", quick=True, seed_offset=4)
    runs = ct._lab_runs(ctx)
    assert len(ran) == len(ct.LAB_VARIANTS) * 3
    assert [rows[0]["seed"] for rows in runs["one epoch"]] == [5, 6, 7]
    jobs = [ct._cartpole_job(ctx, "ppo", s, update_epochs=k) for k in (1, 10, 40)
            for s in ct._lab_seeds(ctx)]
    assert [rows[0]["seed"] for rows in ct._train_many(ctx, jobs)] == [5, 6, 7] * 3
    assert len(ran) == len(ct.LAB_VARIANTS) * 3 + 3  # only K = 40 was new
    assert {j["flags"]["update_epochs"] for j in ran[-3:]} == {40}


def test_pool_map_returns_results_in_the_order_of_the_jobs():
    # costliest first on the two processes, answers in the jobs' order
    assert ct._pool_map(abs, [-1, 5, -3, 2], cost=abs) == [1, 5, 3, 2]


@pytest.fixture
def differing_claim():
    @claim("test.differs", "nowhere", "a claim that differs")
    def _differs(ctx):
        r = Result()
        r.exact("two", 2.0, 3.0, 0)
        return r

    yield "test.differs"
    REGISTRY.pop("test.differs")


def test_report_and_nonzero_exit_when_a_claim_differs(tmp_path, differing_claim, capsys):
    code = main(["reproduce", "--only", differing_claim, "000.ex9.4", "--out", str(tmp_path)])
    assert code == 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "1 reproduced, 0 within spread, 1 differ" in report
    assert "[test.differs]" in report and "No explanation yet" in report
    assert "differ without an explanation: test.differs" in capsys.readouterr().err


def test_an_explained_difference_is_reported_but_does_not_fail(tmp_path):
    @claim("test.explained", "nowhere", "a claim that differs for a known reason")
    def _explained(ctx):
        r = Result()
        r.exact("two", 2.0, 3.0, 0)
        r.explain("the text rounds differently")
        r.exact("one", 1.0, 1.0, 0)
        r.explain("not attached: this check passed")
        return r

    try:
        assert main(["reproduce", "--only", "test.explained", "--out", str(tmp_path)]) == 0
        report = (tmp_path / "REPORT.md").read_text()
        assert "0 reproduced, 0 within spread, 1 differ** (1 of them" in report
        assert "the text rounds differently" in report and "not attached" not in report
    finally:
        REGISTRY.pop("test.explained")


def test_unknown_claim_id_is_one_line_error(tmp_path, capsys):
    assert main(["reproduce", "--only", "000.nope", "--out", str(tmp_path)]) == 2
    assert "no claim with id '000.nope'" in capsys.readouterr().err


def test_a_crashing_claim_is_reported_not_fatal(tmp_path):
    @claim("test.crash", "nowhere", "a claim that raises")
    def _crash(ctx):
        raise RuntimeError("boom")

    try:
        (o,) = run_claims(select(["test.crash"]), tmp_path, quick=True, echo=lambda s: None)
        assert o.result.verdict == DIFFERS and "boom" in o.result.checks[0].ours
        write_report([o], tmp_path, True, 0.0)
        assert "RuntimeError" in (tmp_path / "REPORT.md").read_text()
    finally:
        REGISTRY.pop("test.crash")


@pytest.mark.slow
def test_reproduce_quick_exits_zero(tmp_path):
    """What CI requires: at quick scale every claim is reproduced, within spread, or differs
    only where we have written down why (the report says so next to each difference)."""
    p = subprocess.run([sys.executable, "-m", "trustrl", "reproduce", "--quick", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    report = (tmp_path / "REPORT.md").read_text()
    assert "No explanation yet" not in report and "reproduced" in report


def test_blog_update_equals_separate_actor_and_critic_steps():
    """blog_pendulum.update takes one backward pass for both networks; it must equal the blog's
    two separate steps (actor, then critic) exactly."""
    import copy

    import torch

    from trustrl.experiments import blog_pendulum as bp
    from trustrl.maths.losses import clipped_surrogate_loss

    s = bp.BlogSettings(epochs=2, minibatch=16)
    torch.manual_seed(0)
    actor, value = bp.Actor(3, 1, s.log_std_init), bp.critic(3)
    S, A = torch.randn(40, 3), torch.randn(40, 1)
    with torch.no_grad():
        logp = actor.dist(S).log_prob(A) + 0.1 * torch.randn(40)
    batch = (S, A, logp, torch.randn(40) * 5, 0.0)
    a2, v2 = copy.deepcopy(actor), copy.deepcopy(value)
    opts = [torch.optim.Adam(m.parameters(), s.lr) for m in (actor, value, a2, v2)]
    torch.manual_seed(1)
    bp.update(actor, value, opts[0], opts[1], batch, s)
    torch.manual_seed(1)  # the reference: the blog's loop as written there
    with torch.no_grad():
        adv = batch[3] - v2(S).squeeze(-1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for _ in range(s.epochs):
        for idx in torch.randperm(40).split(s.minibatch):
            ratio = torch.exp(a2.dist(S[idx]).log_prob(A[idx]) - logp[idx])
            opts[2].zero_grad()
            clipped_surrogate_loss(ratio, adv[idx], s.clip_eps).backward()
            opts[2].step()
            opts[3].zero_grad()
            (v2(S[idx]).squeeze(-1) - batch[3][idx]).pow(2).mean().backward()
            opts[3].step()
    for m, ref in ((actor, a2), (value, v2)):
        for p, q in zip(m.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p, q)


def test_robustness_sweep_shares_runs_and_tabulates_margins(tmp_path):
    from trustrl.experiments import robustness

    trained = []

    @claim("test.robust", "nowhere", "a training-like claim")
    def _robust(ctx):
        runs = ctx.__dict__.setdefault("_cartpole_runs", {})
        for s in ctx.seeds(full=5, quick=3):
            if s not in runs:
                trained.append(s)
                runs[s] = float(s)
        r = Result()
        seeds = ctx.seeds(full=5, quick=3)
        r.over_seeds("median seed", "0-1", [runs[s] for s in seeds], seeds, 0.0, 1.0, "why")
        return r

    try:
        cache = tmp_path / "runs.pkl"
        results, seconds = robustness.sweep([0, 2], tmp_path, ("test.robust",), echo=lambda s: 0,
                                            cache=cache)
        assert trained == [0, 1, 2, 3, 4]  # seed 2 trained once, for offset 0
        md = robustness.markdown(results, seconds)
        # offset 0: seeds 0..2, median 1, sd 1, accepted [-2, 3]; offset 2: median 3, [-2, 3]
        assert "| test.robust | median seed | 1: +2 (+2.0 sd) | 3: +0 (+0.0 sd) | within |" in md
        robustness.sweep([1], tmp_path, ("test.robust",), echo=lambda s: 0, cache=cache)
        assert trained == [0, 1, 2, 3, 4]  # every run came from the cache file
    finally:
        REGISTRY.pop("test.robust")
