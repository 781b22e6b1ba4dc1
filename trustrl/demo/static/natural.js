/* Natural vs plain gradient on pi(right) = sigmoid(theta). */
(function () {
  "use strict";
  const { COLORS, fmt, fmtSig, el, setText, Plot } = window.TR;

  /** log(1 + e^x) without overflow. */
  function softplus(x) { return Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x))); }
  function sigmoid(x) { return x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x)); }
  /** Exact KL(Bernoulli(sigma(a)) || Bernoulli(sigma(b))) from log-probabilities (stable when
      the policy is nearly deterministic). */
  function klSigmoid(a, b) {
    const lpa = -softplus(-a), lqa = -softplus(a);   // log sigma(a), log(1 - sigma(a))
    const lpb = -softplus(-b), lqb = -softplus(b);
    return Math.exp(lpa) * (lpa - lpb) + Math.exp(lqa) * (lqa - lqb);
  }
  /** Everything the page shows at one theta. */
  function steps(theta, delta, lr) {
    const s = sigmoid(theta), F = s * sigmoid(-theta), g = F;  // sigma(1 - sigma), no cancellation
    const plain = lr * g;
    const nat = Math.sqrt(2 * delta / F);   // x = F^-1 g = 1, so sqrt(2 delta / x F x) * x
    return { pi: s, F, g, plain, plainKL: klSigmoid(theta, theta + plain),
             plainPi: sigmoid(theta + plain), plainQuad: 0.5 * F * plain * plain,
             natural: nat, naturalKL: klSigmoid(theta, theta + nat),
             naturalPi: sigmoid(theta + nat), naturalQuad: 0.5 * F * nat * nat };
  }

  const state = { theta: TR.numParam("theta", -10, 10, 0), delta: TR.numParam("delta", 0.001, 0.1, 0.01),
                  lr: TR.numParam("lr", 0, 10, 1) };
  const sT = TR.bindSlider("theta-range", "theta-num", (v) => { state.theta = v; render(); });
  const sD = TR.bindSlider("delta-range", "delta-num", (v) => { state.delta = v; render(); });
  const sL = TR.bindSlider("lr-range", "lr-num", (v) => { state.lr = v; render(); });
  sT.set(state.theta); sD.set(state.delta); sL.set(state.lr);

  const sigPlot = new Plot(el("chart-sigma"), { xlabel: "θ", ylabel: "π(right)" });
  const klPlot = new Plot(el("chart-kl"), { xlabel: "θ", ylabel: "KL of one step", ylog: true });

  function renderTable() {
    const body = el("table").querySelector("tbody");
    body.textContent = "";
    for (const th of [0, 2, 4]) {
      const r = steps(th, 0.01, 1);
      const tr = document.createElement("tr");
      for (const c of [String(th), fmt(r.pi, 3), fmt(r.g, 3), fmt(r.natural, 3),
                       fmt(r.naturalKL, 4)]) {
        const td = document.createElement("td");
        td.textContent = c;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    setText("shrink", fmt(steps(0, 0.01, 1).g / steps(4, 0.01, 1).g, 1));
  }

  function drawSigma(r) {
    const p = sigPlot, th = state.theta;
    // zoom on theta and both steps (a step of 0.3 is invisible on [-10, 10])
    const reach = Math.max(r.natural, r.plain, 0.5);
    const xlo = th - Math.max(1.5, 0.3 * reach), xhi = th + Math.max(1.5, 1.3 * reach);
    p.setRange(xlo, xhi, -0.02, 1.02);
    p.begin();
    p.axes();
    p.clipRect();
    const xs = [], ys = [];
    for (let i = 0; i <= 400; i++) {
      const x = xlo + (xhi - xlo) * i / 400;
      xs.push(x); ys.push(sigmoid(x));
    }
    p.line(xs, ys, { color: "#333", width: 2 });
    const y0 = p.sy(r.pi);
    // each step: a horizontal arrow th -> th + step, then the new policy on the curve
    const arrow = (step, piAfter, color, dy, name) => {
      const a = p.sx(th), b = p.sx(th + step);
      if (Math.abs(b - a) >= 6) p.arrowPx(a, y0 + dy, b, y0 + dy, color, 3);
      p.line([th + step, th + step], [r.pi + (dy > 0 ? -1 : 1) * 0.0, piAfter],
             { color, width: 1, dash: [3, 3] });
      p.points([th + step], [piAfter], { color, r: 4.5, stroke: "#fff" });
      p.label(name + " Δθ = " + fmtSig(step, 3), Math.min(b, p.x1 - 4) + (dy > 0 ? 0 : 0),
              y0 + dy + (dy > 0 ? 14 : -14), { align: b > p.x1 - 120 ? "right" : "left",
                                               color, bg: "rgba(255,255,255,0.85)" });
    };
    arrow(r.plain, r.plainPi, COLORS.plain, 16, "plain");
    arrow(r.natural, r.naturalPi, COLORS.natural, -16, "natural");
    p.points([th], [r.pi], { color: "#111", r: 5, stroke: "#fff" });
    p.unclip();
  }

  function drawKL() {
    const p = klPlot;
    const xs = [], plain = [], nat = [];
    for (let i = 0; i <= 400; i++) {
      const x = -10 + i * 0.05;
      const r = steps(x, state.delta, state.lr);
      xs.push(x); plain.push(r.plainKL); nat.push(r.naturalKL);
    }
    let lo = Infinity, hi = 0;
    for (const v of plain.concat(nat)) if (v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    lo = Math.max(lo, 1e-12);
    p.setRange(-10, 10, Math.pow(10, Math.floor(Math.log10(lo))),
               Math.pow(10, Math.ceil(Math.log10(hi))));
    p.begin();
    p.axes();
    p.clipRect();
    p.hline(state.delta, { color: COLORS.natural, dash: [3, 3], width: 1 });
    p.line(xs, plain, { color: COLORS.plain, width: 2 });
    p.line(xs, nat, { color: COLORS.natural, width: 2 });
    p.vline(state.theta, { color: "#333", dash: [3, 3] });
    p.label("δ = " + state.delta, p.x1 - 6, p.sy(state.delta) - 9,
            { align: "right", color: COLORS.natural, bg: "rgba(255,255,255,0.85)" });
    p.unclip();
  }

  function render() {
    const r = steps(state.theta, state.delta, state.lr);
    setText("theta-show", fmt(state.theta, 2));
    setText("pi", fmt(r.pi, 4));
    setText("fisher", fmtSig(r.F, 4));
    setText("g", fmtSig(r.g, 4));
    setText("plain-step", fmtSig(r.plain, 4));
    setText("plain-pi", fmt(r.plainPi, 4));
    setText("plain-kl", fmtSig(r.plainKL, 4));
    setText("plain-quad", fmtSig(r.plainQuad, 4));
    setText("nat-step", fmtSig(r.natural, 4));
    setText("nat-pi", fmt(r.naturalPi, 4));
    setText("nat-kl", fmtSig(r.naturalKL, 4));
    setText("nat-quad", fmtSig(r.naturalQuad, 4));
    drawSigma(r);
    drawKL();
  }

  el("check").addEventListener("click", async () => {
    const out = el("check-result");
    out.className = "muted";
    out.textContent = "asking trustrl…";
    try {
      const settings = [[state.theta, state.delta, state.lr], [0, 0.01, 1], [2, 0.01, 1],
                        [4, 0.01, 1]];
      let worst = 0;
      const bad = [];
      for (const [th, d, lr] of settings) {
        const py = await TR.getJSON(`/api/natural?theta=${th}&delta=${d}&lr=${lr}`);
        const js = steps(th, d, lr);
        const pairs = [["pi_right", js.pi], ["g", js.g], ["fisher", js.F],
                       ["plain_step", js.plain], ["plain_kl", js.plainKL],
                       ["natural_step", js.natural], ["natural_kl", js.naturalKL]];
        for (const [k, v] of pairs) {
          // relative 1e-9, with an absolute floor of 1e-14: the KL of a tiny step is a
          // difference of log-probabilities near log(1), each rounded to ~ulp(theta)
          const d = Math.abs(py[k] - v);
          worst = Math.max(worst, d);
          if (d > 1e-9 * Math.abs(py[k]) + 1e-14) {
            bad.push(`θ=${th} ${k}: page ${v}, trustrl ${py[k]}`);
          }
        }
      }
      if (bad.length) { out.className = "bad"; out.textContent = "✗ " + bad.join("; "); }
      else {
        out.className = "good";
        out.textContent = `✓ this θ and the table's rows equal trustrl's numbers (max ` +
          `|difference| ${worst.toExponential(1)})`;
      }
    } catch (e) {
      out.className = "bad";
      out.textContent = "Python check unavailable: " + e.message;
    }
  });

  window.NaturalPage = { steps, klSigmoid, sigmoid, state };
  renderTable();
  render();
  TR.onResize(render);
})();
