"""`trustrl demo` pages in a real Chromium (Debian's /usr/bin/chromium driven by Playwright).

Every number a page displays is compared with trustrl's Python implementation of the same
quantity, to the precision the page prints it: the K-epoch demo with
trustrl.experiments.kepoch.simulate, the clip explorer with the chapter's six worked cases and
trustrl's clipped objective (autograd slope), the natural-gradient page with the chapter's table
and trustrl's conjugate-gradient natural step. The dashboard is tested on a real run written by
`trustrl train`, plus a row appended while the page is open.

Screenshots of each page go to $TRUSTRL_SCREENSHOTS (e.g. docs/demo) when set, else to tmp.
Skipped (with the reason) only when Chromium or Playwright is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install -y chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright not installed (pip install playwright)")

from trustrl.demo import compute  # noqa: E402
from trustrl.demo.server import make_server  # noqa: E402
from trustrl.experiments.claims_exact import SIX_CASES  # noqa: E402
from trustrl.experiments.kepoch import DemoConfig, simulate  # noqa: E402

# the chapter's natural-gradient table at delta 0.01: theta, pi(right), g, natural step, KL
CHAPTER_TABLE = ((0, "0.500", "0.250", "0.283", "0.0100"), (2, "0.881", "0.105", "0.436", "0.0090"),
                 (4, "0.982", "0.018", "1.064", "0.0073"))


def half_unit(text: str) -> float:
    """Half a unit in the last printed digit of a displayed number ("0.0412" -> 5e-5,
    "1.00e-7" -> 5e-10, "12" -> 0.5)."""
    mant, _, exp = text.lower().partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return 0.5 * 10.0 ** (-decimals + (int(exp) if exp else 0))


def assert_shows(text: str, value: float | None, what: str) -> None:
    """The page's text is `value` rounded to the digits it prints (plus 1e-12 for the last
    bit of float arithmetic), or a dash for a missing value."""
    if value is None:
        assert text == "—", f"{what}: page {text!r}, expected a dash"
        return
    shown = float(text.replace("−", "-"))
    tol = half_unit(text) * (1 + 1e-9) + 1e-12
    assert abs(shown - value) <= tol, f"{what}: page {text!r}, trustrl {value!r}"


@pytest.fixture(scope="module")
def shots_dir(tmp_path_factory) -> Path:
    d = os.environ.get("TRUSTRL_SCREENSHOTS")
    path = Path(d) if d else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    """A real run: `trustrl train --total-steps 2048 --preset chapter` (4 iterations of
    CartPole, seconds)."""
    root = tmp_path_factory.mktemp("runs")
    tests = str(Path(__file__).parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "trustrl.cli", "train", "--total-steps", "2048",
                        "--preset", "chapter", "--runs-dir", str(root), "--quiet"],
                       capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return root


@pytest.fixture(scope="module")
def server(runs_root):
    srv = make_server("127.0.0.1", 0, runs_root)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        yield b
        b.close()


@contextmanager
def checked_page(browser, base: str):
    """A fresh page with `base` (the server's URL); any console error or uncaught exception
    fails the test."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.base = base  # type: ignore[attr-defined]
    yield pg
    ctx.close()
    assert errors == [], f"console errors: {errors}"


@pytest.fixture
def page(browser, server):
    with checked_page(browser, server.url) as pg:
        yield pg


def set_range(page, rid: str, value) -> None:
    """Move a slider as a user does: set its value and fire 'input'."""
    page.eval_on_selector(f"#{rid}", "(e, v) => { e.value = String(v); "
                          "e.dispatchEvent(new Event('input', {bubbles: true})); }", value)


def set_number(page, nid: str, value) -> None:
    page.fill(f"#{nid}", str(value))
    page.dispatch_event(f"#{nid}", "change")


def text(page, sel: str) -> str:
    return page.inner_text(sel).strip()


# ----- every page loads cleanly ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["index", "clip", "kepoch", "natural"])
def test_page_loads_without_console_errors(page, shots_dir, name):
    page.goto(page.base + ("" if name == "index" else name))
    page.wait_for_load_state("networkidle")
    if name == "kepoch":
        page.click("#run1")
        page.click("#run1")
        page.click("#run1")
    if name == "natural":
        set_range(page, "theta-range", 1.5)
    page.screenshot(path=str(shots_dir / f"{name}.png"), full_page=True)


# ----- clip explorer -----------------------------------------------------------------------------
def test_clip_readouts_are_the_chapters_six_worked_cases(page):
    from trustrl.experiments.claims_exact import clip_value_and_slope

    page.goto(page.base + "clip")
    set_range(page, "eps-range", 0.2)
    for adv, rho, ua, ca, mn, slope, case in SIX_CASES:
        which = "pos" if adv > 0 else "neg"
        set_number(page, f"adv-{which}", adv)
        set_range(page, "rho-range", rho)
        shown = {k: text(page, f"#{which}-{k}") for k in ("case", "unclipped", "clipped",
                                                          "objective", "slope")}
        # the chapter's printed row
        assert int(shown["case"]) == case
        for k, v in (("unclipped", ua), ("clipped", ca), ("objective", mn), ("slope", slope)):
            assert round(float(shown[k]), 1) == v, (adv, rho, k, shown[k])
        # trustrl's objective and autograd slope, to the printed digits
        u, c, m, s = clip_value_and_slope(adv, rho, 0.2)
        for k, v in (("unclipped", u), ("clipped", c), ("objective", m), ("slope", s)):
            assert_shows(shown[k], v, f"A={adv} rho={rho} {k}")


def test_clip_eps_slider_drag_and_the_python_check(page, shots_dir):
    page.goto(page.base + "clip")
    set_range(page, "eps-range", 0.05)
    set_range(page, "rho-range", 1.1)
    assert text(page, "#pos-case") == "2" and text(page, "#neg-case") == "3"
    # drag across the A < 0 plot to rho = 0.5: case 4 there, and case 1 (pulled up) on the left
    box = page.locator("#plot-neg").bounding_box()
    x_of = page.evaluate("() => { const c = document.getElementById('plot-neg');"
                         " return [c.clientWidth]; }")[0]
    # the plot's x axis: margin 54 px on the left, 14 on the right, rho from 0 to 2
    x = box["x"] + 54 + (x_of - 68) * 0.5 / 2
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] - 20, y)
    page.mouse.down()
    page.mouse.move(x, y, steps=8)
    page.mouse.up()
    rho = float(page.input_value("#rho-num"))
    assert abs(rho - 0.5) <= 0.011
    assert text(page, "#neg-case") == "4" and text(page, "#neg-slope") == "0.000"
    assert text(page, "#pos-case") == "1"
    page.click("#check")
    page.wait_for_selector("#check-result.good", timeout=60_000)
    set_range(page, "eps-range", 0.2)
    set_range(page, "rho-range", 1.3)
    page.screenshot(path=str(shots_dir / "clip.png"), full_page=True)


# ----- K-epoch bandit demo -----------------------------------------------------------------------
def kepoch_card(page, learner: int) -> dict:
    rows = page.eval_on_selector_all(
        f"#arms-{learner} tbody tr",
        "rows => rows.map(r => Object.fromEntries([...r.children].map("
        "td => [td.dataset.field, td.textContent.trim()])))")
    return {"arms": rows, "kl": text(page, f"#kl-{learner}"), "H": text(page, f"#H-{learner}"),
            "J": text(page, f"#J-{learner}")}


def check_kepoch_page(page, K: int, N: int, eps: float, seed: int, t: int) -> None:
    """Every number on both cards and in both charts against trustrl's simulate."""
    py = compute.kepoch(K, N, eps, seed, t)
    for lrn in (0, 1):
        card = kepoch_card(page, lrn)
        pi, pi_old = py["policies"][t][lrn], py["policies"][t - 1][lrn]
        arms = np.array(py["arms"][t - 1][lrn])
        for a in range(3):
            row = card["arms"][a]
            assert_shows(row["pi"], pi[a], f"learner {lrn} pi[{a}]")
            assert_shows(row["pi_old"], pi_old[a], f"learner {lrn} pi_old[{a}]")
            assert int(row["pulls"]) == int((arms == a).sum())
            assert_shows(row["avg_adv"], py["arm_mean_adv"][t - 1][lrn][a], f"avg adv {a}")
        assert_shows(card["kl"], py["kl_epochs"][t - 1][K - 1][lrn], f"learner {lrn} KL")
        assert_shows(card["H"], py["entropy"][t][lrn], f"learner {lrn} entropy")
        assert_shows(card["J"], py["J"][t][lrn], f"learner {lrn} J")
    kl = json.loads(page.get_attribute("#chart-kl", "data-series"))
    np.testing.assert_allclose(np.array(kl).T, np.array(py["kl_epochs"][t - 1]), rtol=0,
                               atol=1e-9)
    J = json.loads(page.get_attribute("#chart-J", "data-series"))
    np.testing.assert_allclose(np.array(J).T, np.array(py["J"]), rtol=0, atol=1e-9)


@pytest.mark.parametrize("query,K,N,eps,seed", [("", 40, 12, 0.2, 1),
                                                ("?K=25&N=50&eps=0.3&seed=7", 25, 50, 0.3, 7)])
def test_kepoch_three_iterations_equal_the_python_implementation(page, query, K, N, eps, seed):
    page.goto(page.base + "kepoch" + query)
    assert text(page, "#iteration") == "0"
    for t in (1, 2, 3):
        page.click("#run1")
        assert text(page, "#iteration") == str(t)
        check_kepoch_page(page, K, N, eps, seed, t)
    page.click("#check")
    page.wait_for_selector("#check-result.good", timeout=60_000)


def test_kepoch_port_equals_python_on_shared_vectors(page):
    """The page's simulation code, run for several settings and seeds, against simulate: the
    uniforms and the arms drawn bit for bit; the rest to 1e-9. Math.exp/log/cos in the browser
    and numpy's may differ in the last ulp, and K x T sequential gradient steps (up to 1000
    here) carry that drift: about 1e-12 measured, far below the 3-4 digits the page prints."""
    page.goto(page.base + "kepoch")
    from trustrl.experiments.kepoch import Mulberry32

    seeds = [0, 1, 2, 123456789, 4294967295]
    js_u = page.evaluate("seeds => seeds.map(s => { const r = KEpoch.mulberry32(s);"
                         " return Array.from({length: 50}, () => r()); })", seeds)
    np.testing.assert_array_equal(np.array(js_u), Mulberry32(seeds).uniform(50))
    worst = 0.0
    for K, N, eps, seed, T in ((40, 12, 0.2, 1, 30), (1, 12, 0.2, 3, 10), (100, 12, 0.05, 9, 10),
                               (10, 256, 0.5, 11, 5), (3, 1, 0.01, 4242, 20)):
        js = page.evaluate("a => KEpoch.simulate({K: a[0], N: a[1], eps: a[2], seed: a[3]},"
                           " a[4])", [K, N, eps, seed, T])
        run = simulate(DemoConfig(K=K, N=N, eps=eps, iterations=T), [seed])
        np.testing.assert_array_equal(np.array(js["arms"]), run.arms[:, :, 0])
        for key, ref in (("policies", run.policies[:, :, 0]), ("kl_epochs", run.kl_epochs[..., 0]),
                         ("advantages", run.advantages[:, :, 0]), ("J", run.J[:, :, 0]),
                         ("entropy", run.entropy[:, :, 0])):
            d = float(np.max(np.abs(np.array(js[key]) - ref)))
            worst = max(worst, d)
            assert d <= 1e-9, (K, N, eps, seed, key, d)
    print(f"max |JS - Python| over the shared vectors: {worst:.3g}")


def test_kepoch_with_K_1_keeps_both_cards_identical(page):
    page.goto(page.base + "kepoch?seed=3")
    set_range(page, "K-range", 1)
    for _ in range(6):
        page.click("#run1")
    a, b = kepoch_card(page, 0), kepoch_card(page, 1)
    assert a == b
    s = json.loads(page.get_attribute("#chart-J", "data-series"))
    assert s[0] == s[1]
    check_kepoch_page(page, 1, 12, 0.2, 3, 6)


def test_kepoch_auto_starts_and_stops_and_reset_takes_the_next_seed(page, shots_dir):
    page.goto(page.base + "kepoch")
    page.click("#auto")
    assert page.get_attribute("#auto", "aria-pressed") == "true"
    assert "Pause" in text(page, "#auto")
    page.wait_for_function("() => Number(document.getElementById('iteration').textContent) >= 3",
                           timeout=30_000)
    page.click("#auto")
    assert page.get_attribute("#auto", "aria-pressed") == "false"
    assert "Auto" in text(page, "#auto")
    stopped_at = int(text(page, "#iteration"))
    page.wait_for_timeout(1200)  # more than two Auto periods
    assert int(text(page, "#iteration")) == stopped_at
    check_kepoch_page(page, 40, 12, 0.2, 1, stopped_at)
    # Auto runs to the end (30 iterations) and stops by itself
    page.click("#auto")
    page.wait_for_function("() => document.getElementById('iteration').textContent === '30'",
                           timeout=60_000)
    page.wait_for_function("() => document.getElementById('auto').getAttribute('aria-pressed')"
                           " === 'false'", timeout=5_000)
    assert page.is_disabled("#run1")
    page.screenshot(path=str(shots_dir / "kepoch.png"), full_page=True)
    page.click("#reset")
    assert page.input_value("#seed") == "2" and text(page, "#iteration") == "0"
    page.click("#run1")
    check_kepoch_page(page, 40, 12, 0.2, 2, 1)


# ----- natural vs plain gradient -----------------------------------------------------------------
def test_natural_table_and_readouts(page, shots_dir):
    from trustrl.experiments.claims_exact import natural_step, sigmoid_kl

    page.goto(page.base + "natural")
    rows = page.eval_on_selector_all("#table tbody tr", "rows => rows.map(r => "
                                     "[...r.children].map(td => td.textContent.trim()))")
    assert [r[1:] for r in rows] == [list(c[1:]) for c in CHAPTER_TABLE]
    for r, (theta, *_rest) in zip(rows, CHAPTER_TABLE, strict=True):
        d = natural_step(theta, 0.01)
        assert_shows(r[3], d, f"natural step at theta {theta}")
        assert_shows(r[4], sigmoid_kl(theta, theta + d), f"KL at theta {theta}")
    for theta, delta, lr in ((2.0, 0.02, 1.0), (-3.5, 0.005, 4.0), (7.25, 0.1, 0.5)):
        set_range(page, "theta-range", theta)
        set_range(page, "delta-range", delta)
        set_range(page, "lr-range", lr)
        py = compute.natural(theta, delta, lr)
        for sel, key in (("pi", "pi_right"), ("g", "g"), ("fisher", "fisher"),
                         ("plain-step", "plain_step"), ("plain-kl", "plain_kl"),
                         ("nat-step", "natural_step"), ("nat-kl", "natural_kl")):
            assert_shows(text(page, "#" + sel), py[key], f"theta {theta} {key}")
        assert_shows(text(page, "#nat-quad"), delta, "1/2 F step^2 = delta")
    page.click("#check")
    page.wait_for_selector("#check-result.good", timeout=60_000)
    set_range(page, "theta-range", 1.5)
    set_range(page, "delta-range", 0.01)
    set_range(page, "lr-range", 1)
    page.screenshot(path=str(shots_dir / "natural.png"), full_page=True)


# ----- dashboard ---------------------------------------------------------------------------------
def latest_row(page, run: str) -> dict:
    return page.eval_on_selector(
        f"#latest tbody tr[data-run='{run}']",
        "r => Object.fromEntries([...r.children].map(td => [td.dataset.field, "
        "td.textContent.trim()]))")


def test_dashboard_shows_a_run_and_picks_up_an_appended_row(page, runs_root, shots_dir):
    (run,) = [p for p in runs_root.iterdir() if p.is_dir()]
    rows = list(__import__("csv").DictReader(open(run / "metrics.csv", newline="")))
    page.goto(page.base + f"dashboard?run={run.name}&poll=250")
    page.wait_for_selector(f"#latest tbody tr[data-run='{run.name}']", timeout=30_000)
    got = latest_row(page, run.name)
    last = rows[-1]
    assert got["iteration"] == "4 / 4" and got["status"] == "finished"
    assert got["global_step"] == last["global_step"]
    assert_shows(got["approx_kl"], float(last["approx_kl"]), "approx_kl")
    assert_shows(got["clip_fraction"], float(last["clip_fraction"]), "clip_fraction")
    assert_shows(got["entropy"], float(last["entropy"]), "entropy")
    assert_shows(got["explained_variance"], float(last["explained_variance"]), "EV")
    assert_shows(got["eval"], float(last["eval_return_mean"]), "greedy evaluation")
    raw = [float(r["ep_return_mean"]) for r in rows]
    assert_shows(got["return_ma"], float(np.mean(raw[-5:])), "moving average")
    for chart in ("return", "approx_kl", "clip_fraction", "entropy", "explained_variance",
                  "lr", "epochs_run"):
        assert json.loads(page.get_attribute(f"#chart-{chart}", "data-rows")) == {run.name: 4}
    assert "0.001–0.01" in text(page, "#cap-approx_kl")
    assert page.get_attribute("#card-kl_ref", "hidden") is not None  # a language model's only
    assert text(page, "#title-return") == "Episode return"
    page.screenshot(path=str(shots_dir / "dashboard.png"), full_page=True)

    # a row arrives while the page is open: first half of the line, then the rest
    new = dict(last, iteration="5", global_step=str(int(last["global_step"]) + 512),
               approx_kl="0.0421", ep_return_mean="99.0", eval_return_mean="")
    line = ",".join(new[k] for k in rows[0].keys()) + "\r\n"
    with open(run / "metrics.csv", "a", newline="") as f:
        f.write(line[:20])
        f.flush()
        page.wait_for_timeout(800)  # several polls: a half line must not show up
        assert latest_row(page, run.name)["global_step"] == last["global_step"]
        f.write(line[20:])
    page.wait_for_function(
        f"() => document.querySelector(\"#latest tr[data-run='{run.name}'] "
        "td[data-field=iteration]\").textContent.startsWith('5')", timeout=30_000)
    got = latest_row(page, run.name)
    assert got["approx_kl"] == "0.0421" and got["global_step"] == new["global_step"]
    assert_shows(got["return_ma"], float(np.mean((raw + [99.0])[-5:])), "moving average, 5 rows")
    assert json.loads(page.get_attribute("#chart-approx_kl", "data-rows")) == {run.name: 5}


def test_dashboard_overlays_several_runs(page, runs_root, tmp_path):
    (run,) = [p for p in runs_root.iterdir() if p.is_dir() and "copy" not in p.name]
    other = runs_root / "group" / (run.name + "-copy")
    shutil.copytree(run, other)
    try:
        page.goto(page.base + f"dashboard?run={run.name}&run=group/{other.name}&poll=300")
        page.wait_for_selector("#latest tbody tr:nth-child(2)", timeout=30_000)
        assert text(page, "#title") == "2 runs overlaid"
        counts = json.loads(page.get_attribute("#chart-return", "data-rows"))
        assert set(counts) == {run.name, f"group/{other.name}"}
        # unticking one leaves the other
        page.uncheck(f"#runs li[data-run='group/{other.name}'] input")
        page.wait_for_function("() => document.querySelectorAll('#latest tbody tr').length === 1")
        assert text(page, "#title") == run.name
        assert "run=group" not in page.url
    finally:
        shutil.rmtree(other.parent)


def test_dashboard_names_a_missing_run_and_an_empty_folder(browser, tmp_path):
    srv = make_server("127.0.0.1", 0, tmp_path / "nothing-here")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ctx = browser.new_context()
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        pg.goto(srv.url + "dashboard?run=nope")
        pg.wait_for_selector("#message:not([hidden])", timeout=30_000)
        msg = pg.inner_text("#message")
        assert "No runs folder" in msg and "nope" in msg
    finally:
        ctx.close()
        srv.shutdown()
        srv.server_close()
    assert errors == []


# ----- the dashboard on language-model runs (trustrl rlhf ... --model) ---------------------------
@pytest.fixture(scope="module")
def lm_runs_root(tmp_path_factory) -> Path:
    """Real runs on a Hugging Face causal LM: GRPO and PPO, 3 iterations each, on the tests'
    tiny random GPT-2 sort model saved to a folder (seconds)."""
    pytest.importorskip("transformers")
    import hf_sort

    from trustrl.rlhf.hf import HFConfig
    from trustrl.rlhf.hf_run import algo_config, train_hf

    root = tmp_path_factory.mktemp("lm")
    model = hf_sort.make_model(0, n_embd=32)
    model.save_pretrained(root / "model")
    hf_sort.make_tokenizer().save_pretrained(root / "model")
    data = hf_sort.write_prompts(root / "p.jsonl", 32, 1)
    for algo in ("grpo", "ppo"):
        cfg = algo_config(algo)
        cfg.iterations, cfg.runs_dir = 3, str(root / "runs")
        if algo == "ppo":
            cfg.batch_size, cfg.minibatch_size, cfg.epochs = 8, 4, 2
        else:
            cfg.prompts_per_iter, cfg.group_size, cfg.minibatch_size = 2, 4, 4
        train_hf(algo, cfg, HFConfig(model=str(root / "model"), data=str(data),
                                     reward=["hf_sort:small_digits_reward"], max_new_tokens=6),
                 echo=lambda s: None)
    return root / "runs"


@pytest.fixture
def lm_page(browser, lm_runs_root):
    srv = make_server("127.0.0.1", 0, lm_runs_root)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with checked_page(browser, srv.url) as pg:
            yield pg
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("algo,columns", [
    ("grpo", {"return": "reward", "approx_kl": "kl_old/k3",
              "clip_fraction": "clip_ratio/region_mean", "entropy": "entropy"}),
    ("ppo", {"return": "objective/scores", "approx_kl": "kl_old/k3",
             "clip_fraction": "policy/clipfrac_avg", "entropy": "objective/entropy",
             "explained_variance": "val/explained_variance"})])
def test_dashboard_shows_a_language_model_run(lm_page, lm_runs_root, shots_dir, algo, columns):
    """The core's dashboard on a `trustrl rlhf ... --model` run: listed with its model, seed and
    plan; each chart of the core plots the same quantity under the run's (TRL's) name; the KL to
    pi_ref has its chart, the learning rate and epochs theirs; the latest values are the last
    row's."""
    page = lm_page
    (run,) = [p for p in lm_runs_root.iterdir() if f"__{algo}__" in p.name]
    rows = list(__import__("csv").DictReader(open(run / "metrics.csv", newline="")))
    page.goto(page.base + f"dashboard?run={run.name}&poll=250")
    page.wait_for_selector(f"#latest tbody tr[data-run='{run.name}']", timeout=30_000)
    meta = text(page, f"#runs li[data-run='{run.name}'] .meta")
    assert f"{algo} · model · seed 1 · iteration 3 / 3" in meta, meta
    got, last = latest_row(page, run.name), rows[-1]
    assert got["iteration"] == "3 / 3" and got["status"] == "finished"
    assert_shows(got["approx_kl"], float(last[columns["approx_kl"]]), "approx_kl")
    assert_shows(got["clip_fraction"], float(last[columns["clip_fraction"]]), "clip_fraction")
    assert_shows(got["entropy"], float(last[columns["entropy"]]), "entropy")
    assert_shows(got["return_ma"], float(np.mean([float(r[columns["return"]]) for r in rows])),
                 "reward, moving average")
    if algo == "ppo":
        assert_shows(got["explained_variance"], float(last["val/explained_variance"]), "EV")
    assert json.loads(page.get_attribute("#chart-return", "data-rows")) == {run.name: 3}
    lm = {"kl_ref": "kl_ref/exact", "lr": "lr", "epochs_run": "epochs_run"}  # every LM run's
    for chart in ("approx_kl", "clip_fraction", "entropy", "explained_variance", *lm):
        plotted = json.loads(page.get_attribute(f"#chart-{chart}", "data-columns"))
        want = columns.get(chart, lm.get(chart))
        assert plotted == ({run.name: want} if want else {}), chart
        rows_drawn = json.loads(page.get_attribute(f"#chart-{chart}", "data-rows"))
        assert rows_drawn == {run.name: 3 if want else 0}, chart
    assert page.get_attribute("#card-kl_ref", "hidden") is None
    assert text(page, "#title-return").startswith("Reward")
    assert "kl_old/k3" in text(page, "#cap-approx_kl")
    page.screenshot(path=str(shots_dir / f"dashboard_{algo}_lm.png"), full_page=True)
