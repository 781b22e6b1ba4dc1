/* Clip explorer: the PPO-clip term of one sample, both signs of the advantage. */
(function () {
  "use strict";
  const { COLORS, fmt, fmtSigned, el, setText, Plot, snap } = window.TR;

  /** The chapter's clip maths for one sample (the same as trustrl.maths.losses + autograd):
      case 1..4, rho*A, clip(rho)*A, their min, and d/d rho of the min. At the band's edge the
      sample is not clipped (clamp passes the gradient there), so the slope is A. */
  function clipTerm(adv, rho, eps) {
    const lo = 1.0 - eps, hi = 1.0 + eps;
    const unclipped = rho * adv;
    const clipped = Math.min(Math.max(rho, lo), hi) * adv;
    const objective = Math.min(unclipped, clipped);
    let cas;
    if (adv > 0) cas = rho > hi ? 2 : 1;
    else cas = rho < lo ? 4 : 3;
    const slope = cas === 2 || cas === 4 ? 0 : adv;
    return { unclipped, clipped, objective, slope, case: cas };
  }

  const CASE_TEXT = {
    1: "unclipped ρÂ: the gradient pushes ρ up",
    2: "clipped (1+ε)Â: zero gradient, the sample already got what it wanted",
    3: "unclipped ρÂ: the gradient pushes ρ down",
    4: "clipped (1−ε)Â: zero gradient, the sample already got what it wanted",
  };
  const WORKED = [[2, 1.1], [2, 1.5], [2, 0.5], [-1, 0.9], [-1, 0.6], [-1, 1.4]];

  const state = {
    eps: TR.numParam("eps", 0.01, 0.5, 0.2),
    rho: TR.numParam("rho", 0, 2, 1.3),
    adv: { pos: 2, neg: -1 },
  };
  const eps = TR.bindSlider("eps-range", "eps-num", (v) => { state.eps = v; render(); });
  const rho = TR.bindSlider("rho-range", "rho-num", (v) => { state.rho = v; render(); });
  eps.set(state.eps);
  rho.set(state.rho);

  function bindAdv(which, lo, hi) {
    const input = el("adv-" + which);
    input.addEventListener("change", () => {
      let v = Number(input.value);
      if (!Number.isFinite(v) || v === 0) v = state.adv[which];
      v = Math.min(hi, Math.max(lo, v));
      input.value = String(v);
      state.adv[which] = v;
      render();
    });
  }
  bindAdv("pos", 0.1, 5);
  bindAdv("neg", -5, -0.1);

  const plots = { pos: new Plot(el("plot-pos"), { xlabel: "ratio ρ", ylabel: "objective" }),
                  neg: new Plot(el("plot-neg"), { xlabel: "ratio ρ", ylabel: "objective" }) };

  function drawPanel(which) {
    const adv = state.adv[which], e = state.eps, r = state.rho;
    const p = plots[which];
    const top = adv > 0 ? 2 * adv : 0, bottom = adv > 0 ? 0 : 2 * adv;
    const pad = 0.12 * Math.abs(adv) * 2;
    p.setRange(0, 2, bottom - pad, top + pad);
    p.begin();
    p.vband(1 - e, 1 + e, COLORS.band);
    if (adv > 0) p.vband(1 + e, 2, COLORS.zero, COLORS.zeroHatch);
    else p.vband(0, 1 - e, COLORS.zero, COLORS.zeroHatch);
    p.axes();
    p.clipRect();
    p.hline(0, { color: COLORS.axis, width: 1 });
    const xs = [], un = [], cl = [], ob = [];
    for (let i = 0; i <= 400; i++) {
      const x = i / 200;
      const t = clipTerm(adv, x, e);
      xs.push(x); un.push(t.unclipped); cl.push(t.clipped); ob.push(t.objective);
    }
    p.line(xs, un, { color: COLORS.unclipped, width: 1.5, dash: [6, 4] });
    p.line(xs, cl, { color: COLORS.clipped, width: 1.8, dash: [2, 3] });
    p.line(xs, ob, { color: COLORS.objective, width: 3 });
    const t = clipTerm(adv, r, e);
    p.vline(r, { color: COLORS.axis, dash: [3, 3] });
    const px = p.sx(r), py = p.sy(t.objective);
    if (t.slope !== 0) {
      const dir = Math.sign(t.slope);
      p.arrowPx(px, py, px + dir * 58, py, COLORS.arrow, 3.5);
    }
    p.points([r], [t.objective], { color: COLORS.objective, r: 5.5, stroke: "#fff" });
    p.label("1−ε", p.sx(1 - e), p.y1 + 10, { align: "center", color: COLORS.bandEdge,
                                              bg: "rgba(255,255,255,0.85)" });
    p.label("1+ε", p.sx(1 + e), p.y1 + 10, { align: "center", color: COLORS.bandEdge,
                                              bg: "rgba(255,255,255,0.85)" });
    p.unclip();
    return t;
  }

  function readout(which, t) {
    setText(which + "-case", String(t.case));
    setText(which + "-case-text", CASE_TEXT[t.case]);
    setText(which + "-unclipped", fmt(t.unclipped, 3));
    setText(which + "-clipped", fmt(t.clipped, 3));
    setText(which + "-objective", fmt(t.objective, 3));
    setText(which + "-slope", fmtSigned(t.slope, 3));
    el("panel-" + which).dataset.case = String(t.case);
  }

  function renderCases() {
    const body = el("cases").querySelector("tbody");
    body.textContent = "";
    for (const [adv, r] of WORKED) {
      const t = clipTerm(adv, r, 0.2);
      const tr = document.createElement("tr");
      const cells = [fmtSigned(adv, 0), fmt(r, 1), fmt(t.unclipped, 1), fmt(t.clipped, 1),
                     fmt(t.objective, 1), fmtSigned(t.slope, 0), String(t.case)];
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c;
        tr.appendChild(td);
      }
      tr.addEventListener("click", () => {
        const which = adv > 0 ? "pos" : "neg";
        state.adv[which] = adv;
        el("adv-" + which).value = String(adv);
        state.eps = 0.2; eps.set(0.2);
        state.rho = r; rho.set(r);
        render();
      });
      body.appendChild(tr);
    }
  }

  function render() {
    readout("pos", drawPanel("pos"));
    readout("neg", drawPanel("neg"));
  }

  // drag on a plot moves rho (snapped to the slider's 0.01 grid)
  for (const which of ["pos", "neg"]) {
    const c = el("plot-" + which);
    let dragging = false;
    const move = (ev) => {
      const rect = c.getBoundingClientRect();
      const x = plots[which].invx(ev.clientX - rect.left);
      state.rho = snap(x, 0.01, 0, 2);
      rho.set(state.rho);
      render();
    };
    c.addEventListener("pointerdown", (ev) => {
      dragging = true;
      if (c.setPointerCapture) c.setPointerCapture(ev.pointerId);
      move(ev);
    });
    c.addEventListener("pointermove", (ev) => { if (dragging) move(ev); });
    const stop = () => { dragging = false; };
    c.addEventListener("pointerup", stop);
    c.addEventListener("pointercancel", stop);
  }

  el("check").addEventListener("click", async () => {
    const out = el("check-result");
    out.className = "muted";
    out.textContent = "asking trustrl…";
    try {
      let worst = 0;
      const bad = [];
      for (const which of ["pos", "neg"]) {
        const adv = state.adv[which];
        const q = `adv=${adv}&rho=${state.rho}&eps=${state.eps}`;
        const py = await TR.getJSON("/api/clip?" + q);
        const js = clipTerm(adv, state.rho, state.eps);
        for (const k of ["unclipped", "clipped", "objective", "slope"]) {
          const d = Math.abs(py[k] - js[k]);
          worst = Math.max(worst, d);
          if (d > 1e-12) bad.push(`${which} ${k}: page ${js[k]}, trustrl ${py[k]}`);
        }
        if (py.case !== js.case) bad.push(`${which} case: page ${js.case}, trustrl ${py.case}`);
      }
      if (bad.length) {
        out.className = "bad";
        out.textContent = "✗ differs: " + bad.join("; ");
      } else {
        out.className = "good";
        out.textContent = `✓ both panels equal trustrl's numbers (max |difference| ${
          worst.toExponential(1)})`;
      }
    } catch (e) {
      out.className = "bad";
      out.textContent = "Python check unavailable: " + e.message;
    }
  });

  window.ClipExplorer = { clipTerm, state };
  renderCases();
  render();
  TR.onResize(render);
})();
