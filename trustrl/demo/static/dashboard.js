/* Run dashboard: lists the run folders under the server's runs root and plots their
   metrics.csv / episodes.csv, polling for rows appended while a run trains. */
(function () {
  "use strict";
  const { COLORS, fmt, fmtSig, el, setText, Plot, humanSteps } = window.TR;

  const POLL_MS = TR.numParam("poll", 200, 60000, 2000);
  const MA_WINDOW = 5;  // the same trailing moving average as trustrl.records.plotting

  /* Healthy ranges and where they come from (the caption under each chart). */
  const SRC = "chapter 000, “The two numbers to watch” (also docs/diagnostics.md, “The diagnostics " +
    "and their healthy ranges”)";
  const BANDS = {
    approx_kl: {
      good: [0.001, 0.01], bad: [0.1, Infinity],
      caption: "Green 0.001–0.01: the chapter's healthy CartPole lab run. Red ≥ 0.1: “KL " +
        "jumps to 0.1 or more”, updates too aggressive. Source: " + SRC + ". A sudden change " +
        "matters more than the level.",
    },
    clip_fraction: {
      good: [0.05, 0.2], bad: [0.3, 1],
      caption: "Green 0.05–0.2: “a typical healthy run”. Red > 0.3 (with a large KL): too " +
        "aggressive. Source: " + SRC + ".",
    },
    explained_variance: {
      good: [0, 1], bad: [-Infinity, 0],
      caption: "The chapter gives no range for this one. Shading from trustrl's docs/diagnostics.md (“The " +
        "diagnostics and their healthy ranges”): it rises towards 1; ≤ 0 (red) means the " +
        "critic explains nothing of the returns.",
    },
  };

  /* Each chart's column: the core's name, else the same quantity under the name a language-model
     run (trustrl rlhf: TRL's names) logs it. */
  const COLUMNS = {
    return: ["ep_return_mean", "reward", "objective/scores"],
    approx_kl: ["approx_kl", "kl_old/k3"],
    clip_fraction: ["clip_fraction", "clip_ratio/region_mean", "policy/clipfrac_avg"],
    entropy: ["entropy", "objective/entropy"],
    explained_variance: ["explained_variance", "val/explained_variance"],
    lr: ["lr"],
    epochs_run: ["epochs_run"],
    kl_ref: ["kl_ref/exact"],
  };
  const LM_CAPTIONS = {
    approx_kl: "Language-model runs: kl_old/k3, the same k3 estimate of KL(π_old ‖ π) over " +
      "the update's answer tokens.",
    clip_fraction: "Language-model runs: clip_ratio/region_mean (GRPO, RLOO) or " +
      "policy/clipfrac_avg (PPO), TRL's names for the share of clipped tokens.",
    explained_variance: "Language-model runs: val/explained_variance (PPO's critic).",
  };
  function keyOf(d, chart) {
    return COLUMNS[chart].find((c) => d.metrics.columns.includes(c)) || null;
  }
  function isLM(d) { return d.metrics.columns.includes("kl_ref/exact"); }

  const state = {
    root: "", exists: true, runs: [], selected: [], data: new Map(), lastOk: null,
    failed: false,
  };

  function colorOf(name) {
    const i = state.selected.indexOf(name);
    return COLORS.runs[(i < 0 ? 0 : i) % COLORS.runs.length];
  }

  function initialSelection() {
    const p = TR.params();
    return p.getAll("run");
  }

  function syncURL() {
    const q = new URLSearchParams();
    for (const n of state.selected) q.append("run", n);
    if (TR.params().get("poll")) q.set("poll", String(POLL_MS));
    const s = q.toString();
    history.replaceState(null, "", "/dashboard" + (s ? "?" + s : ""));
  }

  /* ---------------------------------------------------------------- data ---------------- */
  function toObjects(columns, rows) {
    return rows.map((r) => {
      const o = {};
      columns.forEach((c, i) => { o[c] = r[i]; });
      return o;
    });
  }

  async function fetchTable(name, what, entry) {
    const t = entry[what];
    const res = await TR.getJSON(`/api/runs/${encodePath(name)}/${what}?since=${t.rows.length}`);
    if (res.total < t.rows.length) {            // the file shrank (a resumed run): start over
      t.rows = [];
      return fetchTable(name, what, entry);
    }
    if (res.rows.length) {
      t.columns = res.columns;
      t.rows = t.rows.concat(toObjects(res.columns, res.rows));
      return true;
    }
    if (!t.columns.length && res.columns.length) t.columns = res.columns;
    return false;
  }

  function encodePath(name) { return name.split("/").map(encodeURIComponent).join("/"); }

  async function refreshRun(name, summary) {
    let entry = state.data.get(name);
    let changed = false;
    if (!entry || (summary && entry.status !== summary.status)) {
      const info = await TR.getJSON(`/api/runs/${encodePath(name)}/info`);
      if (!entry) {
        entry = { info, status: info.status, metrics: { columns: [], rows: [] },
                  episodes: { columns: [], rows: [] } };
        state.data.set(name, entry);
      } else {
        entry.info = info;
        entry.status = info.status;
      }
      changed = true;
    }
    if (summary) { entry.info.iteration = summary.iteration; }
    changed = (await fetchTable(name, "metrics", entry)) || changed;
    changed = (await fetchTable(name, "episodes", entry)) || changed;
    return changed;
  }

  async function poll() {
    let changed = false;
    try {
      const list = await TR.getJSON("/api/runs");
      const before = JSON.stringify(state.runs.map((r) => [r.name, r.status, r.iteration]));
      state.root = list.root; state.exists = list.exists; state.runs = list.runs;
      if (JSON.stringify(state.runs.map((r) => [r.name, r.status, r.iteration])) !== before) {
        changed = true;
      }
      if (!state.initialised) {
        state.initialised = true;
        const wanted = initialSelection();
        const names = new Set(state.runs.map((r) => r.name));
        state.missing = wanted.filter((n) => !names.has(n));
        state.selected = wanted.filter((n) => names.has(n));
        if (!state.selected.length && !wanted.length && state.runs.length) {
          state.selected = [state.runs[0].name];
        }
        syncURL();
        changed = true;
      }
      for (const name of state.selected) {
        const summary = state.runs.find((r) => r.name === name);
        if (!summary) continue;
        changed = (await refreshRun(name, summary)) || changed;
      }
      state.failed = false;
      state.lastOk = new Date();
    } catch (e) {
      state.failed = true;
      state.error = e.message;
    }
    renderLive();
    if (changed) render();
    setTimeout(poll, POLL_MS);
  }

  /* ---------------------------------------------------------------- list ---------------- */
  function renderList() {
    setText("root", state.root);
    const ul = el("runs");
    ul.textContent = "";
    for (const r of state.runs) {
      const li = document.createElement("li");
      li.dataset.run = r.name;
      const cb = document.createElement("input");
      cb.type = "checkbox";
      cb.checked = state.selected.includes(r.name);
      cb.setAttribute("aria-label", "overlay " + r.name);
      cb.addEventListener("change", () => {
        if (cb.checked) state.selected.push(r.name);
        else state.selected = state.selected.filter((n) => n !== r.name);
        selectionChanged();
      });
      const box = document.createElement("div");
      const name = document.createElement("a");
      name.className = "name";
      name.href = "/dashboard?run=" + encodeURIComponent(r.name);
      if (state.selected.includes(r.name)) {
        const sw = document.createElement("span");
        sw.className = "swatch";
        sw.style.background = colorOf(r.name);
        name.appendChild(sw);
      }
      name.appendChild(document.createTextNode(r.name));
      name.addEventListener("click", (ev) => {
        ev.preventDefault();
        state.selected = [r.name];
        selectionChanged();
      });
      const meta = document.createElement("div");
      meta.className = "meta";
      const pill = document.createElement("span");
      pill.className = "pill " + r.status;
      pill.textContent = r.status;
      meta.appendChild(pill);
      meta.appendChild(document.createTextNode(
        ` ${r.algo || "?"} · ${r.env_id || r.model || "?"} · seed ${r.seed ?? "?"} · iteration ` +
        `${r.iteration ?? "?"}${r.iterations ? " / " + r.iterations : ""}`));
      box.appendChild(name); box.appendChild(meta);
      li.appendChild(cb); li.appendChild(box);
      ul.appendChild(li);
    }
  }

  function selectionChanged() {
    syncURL();
    render();
    Promise.all(state.selected.map((n) => refreshRun(n, state.runs.find((r) => r.name === n))))
      .then(() => render()).catch(() => {});
  }

  function renderLive() {
    const live = el("live");
    live.classList.toggle("off", state.failed);
    if (state.failed) {
      setText("live-text", "server not reachable (" + (state.error || "?") + "); retrying");
    } else {
      const t = state.lastOk ? state.lastOk.toLocaleTimeString() : "";
      setText("live-text", `live: checked every ${POLL_MS / 1000} s, last ${t}`);
    }
  }

  /* ---------------------------------------------------------------- charts -------------- */
  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  function column(rows, key) { return rows.map((r) => num(r[key])); }
  function movingAverage(x, w) {
    const out = [];
    for (let i = 0; i < x.length; i++) {
      let s = 0, n = 0;
      for (let j = Math.max(0, i - w + 1); j <= i; j++) if (x[j] !== null) { s += x[j]; n++; }
      out.push(n ? s / n : null);
    }
    return out;
  }
  function extent(arrays, opts) {
    let lo = Infinity, hi = -Infinity;
    for (const a of arrays) for (const v of a) {
      if (v === null || !Number.isFinite(v) || (opts && opts.positive && v <= 0)) continue;
      lo = Math.min(lo, v); hi = Math.max(hi, v);
    }
    return Number.isFinite(lo) ? [lo, hi] : null;
  }
  function xExtent() {
    let hi = 0;
    for (const n of state.selected) {
      const d = state.data.get(n);
      if (!d) continue;
      for (const r of d.metrics.rows) hi = Math.max(hi, num(r.global_step) || 0);
      const c = d.info && d.info.config;   // a run still training: leave room for the rest
      if (c && d.info.iterations && c.num_envs && c.num_steps) {
        hi = Math.max(hi, d.info.iterations * c.num_envs * c.num_steps);
      }
    }
    return [0, Math.max(hi, 1)];
  }

  function lmOnly() {
    const runs = selectedData();
    return runs.length > 0 && runs.every(([, d]) => isLM(d));
  }

  function newPlot(id, opts) {
    const xlabel = lmOnly() ? "answers sampled" : "environment steps";
    return new Plot(el(id), Object.assign({ xlabel, xfmt: humanSteps,
                                            margin: { l: 58, r: 14, t: 10, b: 40 } }, opts));
  }

  function selectedData() {
    return state.selected.map((n) => [n, state.data.get(n)]).filter(([, d]) => d);
  }

  function drawReturn() {
    const runs = selectedData();
    const p = newPlot("chart-return", { ylabel: lmOnly() ? "reward" : "return" });
    const single = runs.length === 1;
    const series = [];
    for (const [name, d] of runs) {
      const rows = d.metrics.rows;
      const steps = column(rows, "global_step");
      const rkey = keyOf(d, "return");
      const raw = rkey ? column(rows, rkey) : [];
      const ma = movingAverage(raw, MA_WINDOW);
      const evs = [0].concat(steps), evy = [d.info.eval_initial ? d.info.eval_initial.mean : null]
        .concat(column(rows, "eval_return_mean"));
      const ep = d.episodes.rows;
      series.push({ name, steps, raw, ma, evs, evy,
                    epx: column(ep, "global_step"), epy: column(ep, "return") });
    }
    el("chart-return").dataset.rows = JSON.stringify(
      Object.fromEntries(series.map((s) => [s.name, s.steps.length])));
    const ys = [];
    for (const s of series) ys.push(s.raw, s.ma, s.evy, single ? s.epy : []);
    const e = extent(ys) || [0, 1];
    const pad = (e[1] - e[0]) * 0.06 || 1;
    const [x0, x1] = xExtent();
    p.setRange(x0, x1, Math.min(0, e[0] - pad), e[1] + pad);
    p.begin(); p.axes(); p.clipRect();
    const legend = el("legend-return");
    legend.textContent = "";
    const key = (cls, text, color) => {
      const item = document.createElement("span");
      item.className = "item";
      const k = document.createElement("span");
      k.className = "key " + cls;
      if (color) k.style.background = color;
      item.appendChild(k);
      item.appendChild(document.createTextNode(text));
      legend.appendChild(item);
    };
    for (const s of series) {
      const c = colorOf(s.name);
      if (single) {
        p.points(s.epx, s.epy, { color: "rgba(31,119,180,0.22)", r: 1.8 });
        p.line(s.steps, s.raw, { color: c, width: 1, dash: [] });
        p.line(s.steps, s.ma, { color: c, width: 2.8 });
        p.line(s.evs.filter((_, i) => s.evy[i] !== null), s.evy.filter((v) => v !== null),
               { color: COLORS.eval, width: 1.2, dash: [5, 4] });
        p.points(s.evs, s.evy, { color: COLORS.eval, r: 3.2 });
      } else {
        p.line(s.steps, s.ma, { color: c, width: 2.4 });
        p.line(s.evs.filter((_, i) => s.evy[i] !== null), s.evy.filter((v) => v !== null),
               { color: c, width: 1, dash: [5, 4] });
        p.points(s.evs, s.evy, { color: c, r: 3 });
      }
    }
    p.unclip();
    setText("title-return", lmOnly() ? "Reward (mean over the iteration's answers)"
      : "Episode return");
    if (single && lmOnly()) {
      key("key-thin", "per-iteration mean reward (" + keyOf(runs[0][1], "return") + ")",
          colorOf(series[0].name));
      key("key-thick", MA_WINDOW + "-iteration moving average", colorOf(series[0].name));
    } else if (single) {
      key("key-dots", "episodes (episodes.csv)", "rgba(31,119,180,0.35)");
      key("key-thin", "per-batch mean return", colorOf(series[0].name));
      key("key-thick", MA_WINDOW + "-iteration moving average", colorOf(series[0].name));
      key("key-eval", "greedy evaluation", "");
    } else {
      for (const s of series) key("key-thick", s.name, colorOf(s.name));
      const k = document.createElement("span");
      k.className = "muted";
      k.textContent = "solid: " + MA_WINDOW + "-iteration moving average; dashed with dots: " +
        "greedy evaluations";
      legend.appendChild(k);
    }
  }

  function drawMetric(key, opts) {
    const runs = selectedData();
    const cap = el("cap-" + key);
    const p = newPlot("chart-" + key, { ylabel: opts.ylabel || "", ylog: !!opts.ylog });
    const have = runs.filter(([, d]) => keyOf(d, key));
    const counts = Object.fromEntries(runs.map(([n, d]) => [n, keyOf(d, key) ?
      column(d.metrics.rows, keyOf(d, key)).filter((v) => v !== null).length : 0]));
    el("chart-" + key).dataset.rows = JSON.stringify(counts);
    el("chart-" + key).dataset.columns = JSON.stringify(
      Object.fromEntries(have.map(([n, d]) => [n, keyOf(d, key)])));
    const ys = have.map(([, d]) => column(d.metrics.rows, keyOf(d, key)));
    let e = extent(ys, { positive: !!opts.ylog });
    const [x0, x1] = xExtent();
    let ylo, yhi;
    if (opts.range) [ylo, yhi] = opts.range(e);
    else if (e) { const pad = (e[1] - e[0]) * 0.08 || Math.abs(e[1]) * 0.1 || 1;
                  ylo = e[0] - pad; yhi = e[1] + pad; }
    else { ylo = 0; yhi = 1; }
    p.setRange(x0, x1, ylo, yhi);
    p.begin();
    const band = opts.band;
    if (band) {
      if (band.bad) p.hband(band.bad[0], band.bad[1], "rgba(214,39,40,0.10)");
      if (band.good) p.hband(band.good[0], band.good[1], "rgba(44,160,44,0.16)");
    }
    p.axes(); p.clipRect();
    if (opts.refLine !== undefined && opts.refLine !== null) {
      p.hline(opts.refLine, { color: "#555", dash: [5, 4], width: 1.2 });
    }
    for (const [name, d] of have) {
      const rows = d.metrics.rows;
      const xs = column(rows, "global_step"), y = column(rows, keyOf(d, key));
      p.line(xs, y, { color: colorOf(name), width: 2 });
      if (rows.length <= 60) p.points(xs, y, { color: colorOf(name), r: 2.2 });
    }
    p.unclip();
    if (!have.length) {
      p.label(runs.length ? "not logged by this algorithm" : "", (p.x0 + p.x1) / 2,
              (p.y0 + p.y1) / 2, { align: "center", color: COLORS.muted });
    }
    const lm = have.some(([, d]) => isLM(d)) && LM_CAPTIONS[key];
    cap.textContent = (opts.caption || "") + (lm ? " " + LM_CAPTIONS[key] : "");
  }

  function entropyOptions() {
    if (lmOnly()) {
      return {
        ylabel: "nats",
        caption: "A language model's entropy over its vocabulary: per answer token (GRPO, " +
          "RLOO: entropy) or summed over the answer (PPO: objective/entropy). No healthy " +
          "range is given for it, so no band is drawn; watch for a collapse.",
      };
    }
    const kinds = selectedData().map(([, d]) => d.info.action_space || { kind: "unknown" });
    const discrete = kinds.length && kinds.every((k) => k.kind === "discrete");
    if (discrete) {
      const n = Math.max(...kinds.map((k) => k.n));
      const hmax = Math.log(n);
      return {
        ylabel: "nats", refLine: hmax,
        band: { bad: [-Infinity, 0.1 * hmax] },
        range: (e) => [0, Math.max(hmax, e ? e[1] : 0) * 1.08],
        caption: `Dashed: ln ${n} = ${fmt(hmax, 3)}, the uniform policy. Red: “entropy falls ` +
          "to near 0 early”, premature collapse (" + SRC + "); the edge at a tenth of ln n is " +
          "our reading of “near 0”. It should fall slowly.",
      };
    }
    const box = kinds.some((k) => k.kind === "box");
    return {
      ylabel: "nats",
      caption: box ? "Gaussian policy: its entropy is not bounded below by 0, so the chapter's " +
        "“near 0” warning has no fixed level here and no band is drawn; watch for a steady fall."
        : "Action space unknown (the env is not in Gymnasium's registry), so no band is drawn.",
    };
  }

  function epochsOptions() {
    const ks = selectedData().map(([, d]) => d.info.config && d.info.config.update_epochs)
      .filter((k) => typeof k === "number");
    const K = ks.length ? Math.max(...ks) : null;
    return {
      ylabel: "epochs", refLine: K,
      range: (e) => [0, Math.max(K || 0, e ? e[1] : 1) + 1],
      caption: K ? `Dashed: K = update_epochs (${K}). Fewer means approx-KL early stopping ` +
        "ended the epochs (target_kl)." : "",
    };
  }

  function drawLatest() {
    const body = el("latest").querySelector("tbody");
    body.textContent = "";
    for (const [name, d] of selectedData()) {
      const rows = d.metrics.rows;
      const last = rows.length ? rows[rows.length - 1] : {};
      const at = (chart) => { const k = keyOf(d, chart); return k ? num(last[k]) : null; };
      const rkey = keyOf(d, "return");
      const raw = rkey ? column(rows, rkey) : [];
      const ma = movingAverage(raw, MA_WINDOW);
      const evals = column(rows, "eval_return_mean").filter((v) => v !== null);
      const summary = state.runs.find((r) => r.name === name) || {};
      const cells = [
        ["run", name], ["status", summary.status || d.status],
        ["iteration", rows.length ? String(last.iteration) + (d.info.iterations ?
          " / " + d.info.iterations : "") : "—"],
        ["global_step", rows.length ? String(last.global_step) : "—"],
        ["return_ma", fmt(ma.length ? ma[ma.length - 1] : null, rkey === "ep_return_mean" ||
          !rkey ? 1 : 3)],
        ["eval", fmt(evals.length ? evals[evals.length - 1] : null, 1)],
        ["approx_kl", fmtSig(at("approx_kl"), 3)],
        ["clip_fraction", fmt(at("clip_fraction"), 3)],
        ["entropy", fmt(at("entropy"), 3)],
        ["explained_variance", fmt(at("explained_variance"), 3)],
        ["lr", fmtSig(num(last.lr), 3)],
        ["epochs_run", num(last.epochs_run) === null ? "—" : String(last.epochs_run)],
      ];
      const tr = document.createElement("tr");
      tr.dataset.run = name;
      for (const [field, text] of cells) {
        const td = document.createElement("td");
        td.dataset.field = field;
        if (field === "run") {
          const sw = document.createElement("span");
          sw.className = "swatch";
          sw.style.background = colorOf(name);
          td.appendChild(sw);
        }
        if (field === "status") {
          const pill = document.createElement("span");
          pill.className = "pill " + text;
          pill.textContent = text;
          td.appendChild(pill);
        } else {
          td.appendChild(document.createTextNode(text));
        }
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  function render() {
    renderList();
    const msg = el("message");
    const notes = [];
    if (!state.exists) {
      notes.push(`No runs folder at ${state.root} yet. Start a run with ` +
                 `trustrl train --runs-dir ${state.root}; it appears here by itself.`);
    } else if (!state.runs.length) {
      notes.push(`No runs under ${state.root} yet. Start one with trustrl train --runs-dir ` +
                 `${state.root}; it appears here by itself.`);
    }
    if (state.missing && state.missing.length) {
      notes.push("No run named " + state.missing.join(", ") + " under " + state.root + ".");
    }
    if (state.runs.length && !state.selected.length) notes.push("Tick a run on the left.");
    msg.hidden = !notes.length;
    msg.textContent = notes.join(" ");
    const any = selectedData().length > 0;
    el("charts").hidden = !any;
    el("latest-card").hidden = !any;
    setText("title", state.selected.length === 1 ? state.selected[0]
      : state.selected.length > 1 ? `${state.selected.length} runs overlaid` : "Run dashboard");
    if (!any) return;
    drawLatest();
    drawReturn();
    drawMetric("approx_kl", { ylog: true, ylabel: "KL", band: BANDS.approx_kl,
      caption: BANDS.approx_kl.caption,
      range: (e) => [Math.min(1e-4, e ? Math.pow(10, Math.floor(Math.log10(e[0]))) : 1e-4),
                     Math.max(1, e ? Math.pow(10, Math.ceil(Math.log10(e[1]))) : 1)] });
    drawMetric("clip_fraction", { ylabel: "fraction", band: BANDS.clip_fraction,
      caption: BANDS.clip_fraction.caption,
      range: (e) => [0, Math.max(0.4, e ? e[1] * 1.1 : 0)] });
    drawMetric("entropy", entropyOptions());
    drawMetric("explained_variance", { ylabel: "EV", band: BANDS.explained_variance,
      caption: BANDS.explained_variance.caption,
      range: (e) => [Math.min(-0.2, e ? e[0] - 0.05 : 0), 1.05] });
    drawMetric("lr", { ylabel: "lr", caption: "Annealed linearly to 0 when anneal_lr is on.",
      range: (e) => [0, e ? e[1] * 1.1 || 1 : 1] });
    drawMetric("epochs_run", epochsOptions());
    const klRef = selectedData().some(([, d]) => keyOf(d, "kl_ref"));
    el("card-kl_ref").hidden = !klRef;
    if (klRef) {
      drawMetric("kl_ref", { ylabel: "nats per token",
        caption: "Language-model runs: kl_ref/exact, the exact KL(π ‖ π_ref) over the " +
          "vocabulary per answer token at sampling time (the leash the KL options pay for).",
        range: (e) => [0, e ? e[1] * 1.1 || 1 : 1] });
    }
  }

  window.Dashboard = { state };
  TR.onResize(render);
  poll();
})();
