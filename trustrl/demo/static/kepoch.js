/* K-epoch bandit demo page: controls, the two learner cards and the two charts. */
(function () {
  "use strict";
  const { COLORS, fmt, fmtSigned, fmtSig, el, setText, Plot } = window.TR;
  const KE = window.KEpoch;
  const MAX_ITER = 30;
  const ARMS = ["A", "B", "C"];
  const LCOLOR = [COLORS.plain, COLORS.ppo];
  const AUTO_MS = 450;

  const cfg = {
    K: TR.numParam("K", 1, 100, 40), N: TR.numParam("N", 1, 256, 12),
    eps: TR.numParam("eps", 0.01, 0.5, 0.2), seed: TR.numParam("seed", 0, 4294967295, 1),
  };
  let demo = null;
  let timer = null;

  const sK = TR.bindSlider("K-range", "K-num", (v) => { cfg.K = Math.round(v); restart(); });
  const sN = TR.bindSlider("N-range", "N-num", (v) => { cfg.N = Math.round(v); restart(); });
  const sE = TR.bindSlider("eps-range", "eps-num", (v) => { cfg.eps = v; restart(); });
  sK.set(cfg.K); sN.set(cfg.N); sE.set(cfg.eps);
  const seedBox = el("seed");
  seedBox.value = String(cfg.seed);
  seedBox.addEventListener("change", () => {
    let v = Math.round(Number(seedBox.value));
    if (!Number.isFinite(v) || v < 0 || v > 4294967295) v = cfg.seed;
    cfg.seed = v;
    seedBox.value = String(v);
    restart();
  });
  setText("max-iter", String(MAX_ITER));

  const bars = [new Plot(el("bars-0"), { margin: { l: 40, r: 10, t: 12, b: 26 }, ylabel: "π" }),
                new Plot(el("bars-1"), { margin: { l: 40, r: 10, t: 12, b: 26 }, ylabel: "π" })];
  const klChart = new Plot(el("chart-kl"), { ylog: true, xlabel: "epoch k on this batch",
                                             ylabel: "KL" });
  const jChart = new Plot(el("chart-J"), { xlabel: "iteration", ylabel: "J" });

  function restart() {
    stopAuto();
    demo = new KE.Demo({ K: cfg.K, N: cfg.N, eps: cfg.eps, lr: 1.0, seed: cfg.seed });
    el("check-result").className = "muted";
    el("check-result").textContent = "Recomputes this run with trustrl.experiments.kepoch." +
      "simulate (same seed and settings) and compares every number.";
    render();
  }

  function step() {
    if (demo.iteration >= MAX_ITER) { stopAuto(); return; }
    demo.step();
    render();
    if (demo.iteration >= MAX_ITER) stopAuto();
  }

  function startAuto() {
    if (demo.iteration >= MAX_ITER) return;
    const b = el("auto");
    b.textContent = "Pause ❚❚";
    b.setAttribute("aria-pressed", "true");
    timer = setInterval(step, AUTO_MS);
    step();
  }
  function stopAuto() {
    if (timer !== null) clearInterval(timer);
    timer = null;
    const b = el("auto");
    b.textContent = "Auto ▶";
    b.setAttribute("aria-pressed", "false");
  }

  el("run1").addEventListener("click", () => { stopAuto(); step(); });
  el("auto").addEventListener("click", () => { if (timer === null) startAuto(); else stopAuto(); });
  el("reset").addEventListener("click", () => {
    cfg.seed = (cfg.seed + 1) % 4294967296;
    seedBox.value = String(cfg.seed);
    restart();
  });

  function drawBars(l, pi, piOld) {
    const p = bars[l];
    p.setRange(-0.5, 2.5, 0, 1);
    p.begin();
    p.opts.xfmt = (v) => (Number.isInteger(v) && v >= 0 && v <= 2 ? ARMS[v] : "");
    p.axes();
    const ctx = p.ctx;
    const w = (p.sx(1) - p.sx(0)) * 0.56;
    for (let a = 0; a < 3; a++) {
      const x = p.sx(a);
      ctx.fillStyle = LCOLOR[l];
      ctx.globalAlpha = 0.78;
      ctx.fillRect(x - w / 2, p.sy(pi[a]), w, p.sy(0) - p.sy(pi[a]));
      ctx.globalAlpha = 1;
      ctx.save();
      ctx.strokeStyle = "#222"; ctx.lineWidth = 2; ctx.setLineDash([6, 4]);
      ctx.beginPath();
      ctx.moveTo(x - w / 2 - 6, p.sy(piOld[a])); ctx.lineTo(x + w / 2 + 6, p.sy(piOld[a]));
      ctx.stroke();
      ctx.restore();
      const top = p.sy(pi[a]);
      p.label(fmt(pi[a], 3), x, top > p.y1 + 16 ? top - 9 : top + 10,
              { align: "center", font: "bold 11px system-ui, sans-serif",
                color: top > p.y1 + 16 ? "#222" : "#fff" });
    }
  }

  function card(l) {
    const t = demo.iteration;
    const pi = demo.policies[t][l];
    const piOld = t > 0 ? demo.policies[t - 1][l] : pi;
    drawBars(l, pi, piOld);
    const avg = t > 0 ? demo.armMeanAdv(t, l) : [null, null, null];
    const pulls = t > 0 ? demo.pulls(t, l) : [0, 0, 0];
    const body = el("arms-" + l).querySelector("tbody");
    body.textContent = "";
    for (let a = 0; a < 3; a++) {
      const tr = document.createElement("tr");
      const cells = [ARMS[a], fmt(pi[a], 3), fmt(piOld[a], 3), t > 0 ? String(pulls[a]) : "—",
                     fmtSigned(avg[a], 3)];
      const names = ["arm", "pi", "pi_old", "pulls", "avg_adv"];
      cells.forEach((c, i) => {
        const td = document.createElement("td");
        td.textContent = c;
        td.dataset.field = names[i];
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
    setText("kl-" + l, t > 0 ? fmtSig(demo.klIteration(t, l), 3) : "—");
    setText("H-" + l, fmt(demo.entropy(t, l), 3));
    setText("J-" + l, fmt(demo.J(t, l), 3));
  }

  function drawKL() {
    const t = demo.iteration, K = demo.K;
    const series = t > 0 ? [0, 1].map((l) => demo.klEpochs[t - 1].map((r) => r[l])) : [[], []];
    el("chart-kl").dataset.series = JSON.stringify(series);
    let lo = Infinity, hi = -Infinity;
    for (const s of series) for (const v of s) if (v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (!Number.isFinite(lo)) { lo = 1e-4; hi = 1; }
    lo = Math.pow(10, Math.floor(Math.log10(lo)));
    hi = Math.pow(10, Math.ceil(Math.log10(hi) + 1e-12));
    if (hi / lo < 100) lo = hi / 100;
    klChart.setRange(K > 1 ? 1 : 0.5, K > 1 ? K : 1.5, lo, hi);
    klChart.begin();
    klChart.axes();
    klChart.clipRect();
    const xs = Array.from({ length: K }, (_, k) => k + 1);
    for (const l of [0, 1]) {
      klChart.line(xs, series[l], { color: LCOLOR[l], width: 2.2 });
      if (K <= 40) klChart.points(xs, series[l], { color: LCOLOR[l], r: 2 });
    }
    klChart.unclip();
    const zero = (l) => series[l].length > 0 && series[l].every((v) => v <= 0);
    const note = t === 0 ? "run an iteration"
      : zero(0) && zero(1) ? "KL = 0 at every epoch for both learners: every pull was the same arm, so the gradient is zero"
      : zero(0) ? "no clip: KL = 0 at every epoch (every pull was the same arm)"
      : zero(1) ? "PPO-clip: KL = 0 at every epoch (every pull was the same arm)" : "";
    if (note) {
      klChart.label(note, (klChart.x0 + klChart.x1) / 2, (klChart.y0 + klChart.y1) / 2,
                    { align: "center", color: COLORS.muted, bg: "rgba(255,255,255,0.9)" });
    }
  }

  function drawJ() {
    const t = demo.iteration;
    const series = [0, 1].map((l) => demo.policies.map((_, i) => demo.J(i, l)));
    el("chart-J").dataset.series = JSON.stringify(series);
    jChart.setRange(0, Math.max(10, t), 0, 1.05);
    jChart.begin();
    jChart.axes();
    jChart.clipRect();
    jChart.hline(1.0, { color: "#444", dash: [2, 3], width: 1 });
    jChart.hline(0.6, { color: "#999", dash: [2, 3], width: 1 });
    jChart.label("arm A (best)", jChart.x1 - 6, jChart.sy(1.0) + 9, { color: "#444",
                                                                     align: "right" });
    jChart.label("arm B", jChart.x1 - 6, jChart.sy(0.6) + 9, { color: "#777", align: "right" });
    const xs = series[0].map((_, i) => i);
    for (const l of [0, 1]) {
      jChart.line(xs, series[l], { color: LCOLOR[l], width: 2.2 });
      jChart.points(xs, series[l], { color: LCOLOR[l], r: 2.5 });
    }
    jChart.unclip();
  }

  function render() {
    setText("iteration", String(demo.iteration));
    el("run1").disabled = demo.iteration >= MAX_ITER;
    el("auto").disabled = demo.iteration >= MAX_ITER && timer === null;
    card(0); card(1);
    drawKL(); drawJ();
  }

  function maxDiff(a, b, path, worst) {
    if (Array.isArray(a)) {
      if (!Array.isArray(b) || a.length !== b.length) throw new Error("shape differs at " + path);
      a.forEach((x, i) => maxDiff(x, b[i], path + "[" + i + "]", worst));
    } else if (a === null || b === null) {
      if (a !== b) throw new Error("differs at " + path);
    } else {
      const d = Math.abs(a - b);
      if (!(d <= worst.value)) { worst.value = d; worst.at = path; }
    }
    return worst;
  }

  el("check").addEventListener("click", async () => {
    const out = el("check-result");
    out.className = "muted";
    out.textContent = "asking trustrl…";
    const t = demo.iteration;
    const q = `K=${demo.K}&N=${demo.N}&eps=${demo.eps}&seed=${demo.seed}&iterations=${t}`;
    try {
      const py = await TR.getJSON("/api/kepoch?" + q);
      const js = KE.simulate({ K: demo.K, N: demo.N, eps: demo.eps, lr: 1.0, seed: demo.seed }, t);
      const worst = { value: 0, at: "" };
      for (const k of ["policies", "J", "entropy", "kl_epochs", "arms", "advantages",
                       "arm_mean_adv"]) maxDiff(js[k], py[k], k, worst);
      if (worst.value <= 1e-9) {
        out.className = "good";
        out.textContent = `✓ ${t} iteration(s): every number equals trustrl's Python ` +
          `(max |difference| ${worst.value.toExponential(1)})`;
      } else {
        out.className = "bad";
        out.textContent = `✗ differs by ${worst.value} at ${worst.at}`;
      }
    } catch (e) {
      out.className = "bad";
      out.textContent = "Python check: " + e.message;
    }
  });

  window.KEpochPage = { cfg, get demo() { return demo; }, get auto() { return timer !== null; } };
  restart();
  TR.onResize(render);
})();
