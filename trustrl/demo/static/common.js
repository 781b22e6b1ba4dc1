/* trustrl demo: shared helpers (formatting, URL parameters, a small canvas plotting class).
   Hand-written, no dependencies. Everything hangs off window.TR. */
(function () {
  "use strict";

  const COLORS = {
    plain: "#d62728", ppo: "#1f77b4", band: "rgba(44,160,44,0.14)", bandEdge: "#2ca02c",
    zero: "rgba(214,39,40,0.10)", zeroHatch: "rgba(214,39,40,0.35)", grid: "#e6e8eb",
    axis: "#5b6370", text: "#2b2f36", muted: "#7a828e", objective: "#ff7f0e",
    unclipped: "#8c8c8c", clipped: "#1f77b4", arrow: "#1a9c3a", natural: "#6a3d9a",
    eval: "#111111",
    runs: ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f"],
  };

  /** x with d decimals; "—" for null/undefined/NaN; never "-0.000". */
  function fmt(x, d) {
    if (x === null || x === undefined || !Number.isFinite(x)) return "—";
    const s = x.toFixed(d);
    return /^-0\.?0*$/.test(s) ? s.slice(1) : s;
  }
  /** Signed: "+0.500" / "-2.500". */
  function fmtSigned(x, d) {
    const s = fmt(x, d);
    return s === "—" || s.startsWith("-") || Number(s) === 0 ? s : "+" + s;
  }
  /** p significant digits (toPrecision), for quantities spanning decades such as a KL. */
  function fmtSig(x, p) {
    if (x === null || x === undefined || !Number.isFinite(x)) return "—";
    if (x === 0) return "0";
    return x.toPrecision(p).replace("e+", "e");
  }

  /** URL parameters of the page as a Map of string -> string (the server has validated them). */
  function params() {
    return new URLSearchParams(window.location.search);
  }
  function numParam(name, lo, hi, fallback) {
    const raw = params().get(name);
    if (raw === null || raw.trim() === "") return fallback;
    const x = Number(raw);
    return Number.isFinite(x) && x >= lo && x <= hi ? x : fallback;
  }

  function el(id) {
    const e = document.getElementById(id);
    if (!e) throw new Error("missing element #" + id);
    return e;
  }
  function setText(id, text) { el(id).textContent = text; }

  /** Round to the slider's grid so that dragging gives the same values as the slider. */
  function snap(x, step, lo, hi) {
    const k = Math.round((x - lo) / step);
    const v = lo + k * step;
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return Math.min(hi, Math.max(lo, Number(v.toFixed(decimals))));
  }

  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  }
  function linearTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const step = niceStep(hi - lo, count);
    const out = [];
    for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    return out;
  }
  function tickLabel(v, step) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(0).replace("e+", "e");
    const d = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return v.toFixed(Math.min(d, 4));
  }
  function humanSteps(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(a % 1e6 === 0 ? 0 : 1) + "M";
    if (a >= 1e3) return (v / 1e3).toFixed(a % 1e3 === 0 ? 0 : 1) + "k";
    return String(Math.round(v * 100) / 100);
  }

  /** A 2-D plot on a canvas: data -> pixel maps, axes with ticks, and drawing primitives.
      The canvas takes its CSS size; drawing is scaled by devicePixelRatio for sharp lines. */
  class Plot {
    constructor(canvas, opts) {
      this.canvas = canvas;
      this.opts = Object.assign({ margin: { l: 54, r: 14, t: 14, b: 40 }, ylog: false,
                                  xlabel: "", ylabel: "", xfmt: null }, opts || {});
      this.ctx = canvas.getContext("2d");
    }
    setRange(xmin, xmax, ymin, ymax) {
      Object.assign(this.opts, { xmin, xmax, ymin, ymax });
    }
    begin() {
      const c = this.canvas, dpr = window.devicePixelRatio || 1;
      const w = c.clientWidth || 400, h = c.clientHeight || 260;
      if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
        c.width = Math.round(w * dpr);
        c.height = Math.round(h * dpr);
      }
      this.w = w; this.h = h;
      const ctx = this.ctx;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      const m = this.opts.margin;
      this.x0 = m.l; this.x1 = w - m.r; this.y0 = h - m.b; this.y1 = m.t;
      return this;
    }
    _ty(y) { return this.opts.ylog ? Math.log10(Math.max(y, 1e-300)) : y; }
    sx(x) {
      const o = this.opts;
      return this.x0 + (x - o.xmin) / (o.xmax - o.xmin || 1) * (this.x1 - this.x0);
    }
    sy(y) {
      const o = this.opts, lo = this._ty(o.ymin), hi = this._ty(o.ymax);
      return this.y0 - (this._ty(y) - lo) / (hi - lo || 1) * (this.y0 - this.y1);
    }
    invx(px) {
      const o = this.opts;
      return o.xmin + (px - this.x0) / (this.x1 - this.x0) * (o.xmax - o.xmin);
    }
    clipRect() {
      const ctx = this.ctx;
      ctx.save();
      ctx.beginPath();
      ctx.rect(this.x0, this.y1, this.x1 - this.x0, this.y0 - this.y1);
      ctx.clip();
    }
    unclip() { this.ctx.restore(); }
    axes() {
      const ctx = this.ctx, o = this.opts;
      ctx.save();
      ctx.font = "11px system-ui, -apple-system, Segoe UI, sans-serif";
      ctx.fillStyle = COLORS.muted;
      ctx.strokeStyle = COLORS.grid;
      ctx.lineWidth = 1;
      // y ticks
      let yt;
      if (o.ylog) {
        yt = [];
        const e0 = Math.floor(Math.log10(o.ymin)), e1 = Math.ceil(Math.log10(o.ymax));
        const room = Math.max(2, Math.floor((this.y0 - this.y1) / 22));
        const every = Math.max(1, Math.ceil((e1 - e0 + 1) / room));
        for (let e = e0; e <= e1; e++) {
          const v = Math.pow(10, e);
          if (e % every === 0 && v >= o.ymin * 0.999 && v <= o.ymax * 1.001) yt.push(v);
        }
      } else {
        yt = linearTicks(o.ymin, o.ymax, Math.max(3, Math.floor((this.y0 - this.y1) / 40)));
      }
      const ystep = yt.length > 1 ? yt[1] - yt[0] : 1;
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      for (const v of yt) {
        const py = Math.round(this.sy(v)) + 0.5;
        ctx.beginPath(); ctx.moveTo(this.x0, py); ctx.lineTo(this.x1, py); ctx.stroke();
        ctx.fillText(o.ylog ? "1e" + Math.round(Math.log10(v)) : tickLabel(v, ystep),
                     this.x0 - 5, py);
      }
      // x ticks
      const xt = linearTicks(o.xmin, o.xmax, Math.max(3, Math.floor((this.x1 - this.x0) / 70)));
      const xstep = xt.length > 1 ? xt[1] - xt[0] : 1;
      ctx.textAlign = "center"; ctx.textBaseline = "top";
      for (const v of xt) {
        const px = Math.round(this.sx(v)) + 0.5;
        ctx.beginPath(); ctx.moveTo(px, this.y1); ctx.lineTo(px, this.y0); ctx.stroke();
        ctx.fillText(o.xfmt ? o.xfmt(v) : tickLabel(v, xstep), px, this.y0 + 5);
      }
      // frame and labels
      ctx.strokeStyle = COLORS.axis;
      ctx.strokeRect(this.x0 + 0.5, this.y1 + 0.5, this.x1 - this.x0, this.y0 - this.y1);
      ctx.fillStyle = COLORS.text;
      ctx.font = "12px system-ui, -apple-system, Segoe UI, sans-serif";
      if (o.xlabel) {
        ctx.textAlign = "center"; ctx.textBaseline = "bottom";
        ctx.fillText(o.xlabel, (this.x0 + this.x1) / 2, this.h - 3);
      }
      if (o.ylabel) {
        ctx.translate(12, (this.y0 + this.y1) / 2);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "center"; ctx.textBaseline = "middle";
        ctx.fillText(o.ylabel, 0, 0);
      }
      ctx.restore();
    }
    hband(ylo, yhi, fill) {
      const o = this.opts;
      const a = Math.max(ylo, o.ymin), b = Math.min(yhi, o.ymax);
      if (!(b > a)) return;
      this.ctx.fillStyle = fill;
      this.ctx.fillRect(this.x0, this.sy(b), this.x1 - this.x0, this.sy(a) - this.sy(b));
    }
    vband(xlo, xhi, fill, hatch) {
      const o = this.opts;
      const a = Math.max(xlo, o.xmin), b = Math.min(xhi, o.xmax);
      if (!(b > a)) return;
      const ctx = this.ctx, px = this.sx(a), pw = this.sx(b) - px;
      ctx.fillStyle = fill;
      ctx.fillRect(px, this.y1, pw, this.y0 - this.y1);
      if (hatch) {
        ctx.save();
        ctx.beginPath(); ctx.rect(px, this.y1, pw, this.y0 - this.y1); ctx.clip();
        ctx.strokeStyle = hatch; ctx.lineWidth = 1;
        for (let k = -(this.y0 - this.y1); k < pw; k += 9) {
          ctx.beginPath();
          ctx.moveTo(px + k, this.y0); ctx.lineTo(px + k + (this.y0 - this.y1), this.y1);
          ctx.stroke();
        }
        ctx.restore();
      }
    }
    line(xs, ys, style) {
      const s = Object.assign({ color: COLORS.text, width: 1.5, dash: [] }, style || {});
      const ctx = this.ctx;
      ctx.save();
      ctx.strokeStyle = s.color; ctx.lineWidth = s.width; ctx.setLineDash(s.dash);
      ctx.lineJoin = "round";
      ctx.beginPath();
      let pen = false;
      for (let i = 0; i < xs.length; i++) {
        const y = ys[i];
        const ok = y !== null && y !== undefined && Number.isFinite(y) &&
          (!this.opts.ylog || y > 0);
        if (!ok) { pen = false; continue; }
        const px = this.sx(xs[i]), py = this.sy(y);
        if (pen) ctx.lineTo(px, py); else ctx.moveTo(px, py);
        pen = true;
      }
      ctx.stroke();
      ctx.restore();
    }
    points(xs, ys, style) {
      const s = Object.assign({ color: COLORS.text, r: 2.5, stroke: null }, style || {});
      const ctx = this.ctx;
      ctx.save();
      ctx.fillStyle = s.color;
      for (let i = 0; i < xs.length; i++) {
        const y = ys[i];
        if (y === null || y === undefined || !Number.isFinite(y) || (this.opts.ylog && y <= 0))
          continue;
        ctx.beginPath();
        ctx.arc(this.sx(xs[i]), this.sy(y), s.r, 0, 2 * Math.PI);
        ctx.fill();
        if (s.stroke) { ctx.strokeStyle = s.stroke; ctx.lineWidth = 1; ctx.stroke(); }
      }
      ctx.restore();
    }
    hline(y, style) { this.line([this.opts.xmin, this.opts.xmax], [y, y], style); }
    vline(x, style) {
      const s = Object.assign({ color: COLORS.axis, width: 1, dash: [] }, style || {});
      const ctx = this.ctx, px = this.sx(x);
      ctx.save();
      ctx.strokeStyle = s.color; ctx.lineWidth = s.width; ctx.setLineDash(s.dash);
      ctx.beginPath(); ctx.moveTo(px, this.y1); ctx.lineTo(px, this.y0); ctx.stroke();
      ctx.restore();
    }
    /** An arrow between two points given in pixels. */
    arrowPx(ax, ay, bx, by, color, width) {
      const ctx = this.ctx, ang = Math.atan2(by - ay, bx - ax), head = 9;
      ctx.save();
      ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = width || 3;
      ctx.beginPath(); ctx.moveTo(ax, ay);
      ctx.lineTo(bx - Math.cos(ang) * head * 0.8, by - Math.sin(ang) * head * 0.8);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(bx, by);
      ctx.lineTo(bx - head * Math.cos(ang - 0.45), by - head * Math.sin(ang - 0.45));
      ctx.lineTo(bx - head * Math.cos(ang + 0.45), by - head * Math.sin(ang + 0.45));
      ctx.closePath(); ctx.fill();
      ctx.restore();
    }
    label(text, px, py, style) {
      const s = Object.assign({ color: COLORS.text, align: "left", base: "middle",
                                font: "11px system-ui, -apple-system, Segoe UI, sans-serif",
                                bg: null }, style || {});
      const ctx = this.ctx;
      ctx.save();
      ctx.font = s.font; ctx.textAlign = s.align; ctx.textBaseline = s.base;
      if (s.bg) {
        const w = ctx.measureText(text).width;
        const x = s.align === "right" ? px - w : s.align === "center" ? px - w / 2 : px;
        ctx.fillStyle = s.bg;
        ctx.fillRect(x - 3, py - 8, w + 6, 16);
      }
      ctx.fillStyle = s.color;
      ctx.fillText(text, px, py);
      ctx.restore();
    }
  }

  /** Redraw callbacks on resize (debounced by animation frame). */
  function onResize(fn) {
    let pending = false;
    window.addEventListener("resize", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; fn(); });
    });
  }

  /** Connect a range input and its number box; calls onChange(value) on user input. */
  function bindSlider(rangeId, numberId, onChange) {
    const r = el(rangeId), n = el(numberId);
    r.addEventListener("input", () => { n.value = r.value; onChange(Number(r.value)); });
    n.addEventListener("change", () => {
      const lo = Number(r.min), hi = Number(r.max);
      let v = Number(n.value);
      if (!Number.isFinite(v)) v = Number(r.value);
      v = Math.min(hi, Math.max(lo, v));
      n.value = String(v); r.value = String(v);
      onChange(v);
    });
    return {
      get value() { return Number(r.value); },
      set(v) { r.value = String(v); n.value = String(v); },
    };
  }

  async function getJSON(url) {
    const res = await fetch(url, { cache: "no-store" });
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
      throw new Error((body && body.error) || ("HTTP " + res.status));
    }
    return body;
  }

  window.TR = { COLORS, fmt, fmtSigned, fmtSig, params, numParam, el, setText, snap, Plot,
                onResize, bindSlider, getJSON, humanSteps, linearTicks };
})();
