/* The K-epoch bandit demo, step by step: a port of trustrl/experiments/kepoch.py.
   Same random numbers (mulberry32, consumed in the same order), same arithmetic in the same
   order, float64 throughout, so that for a given (K, N, eps, lr, seed) the page shows the
   numbers trustrl.experiments.kepoch.simulate computes. Sums over the batch reproduce numpy's
   pairwise summation, so even the last bits agree (only Math.exp/log/cos may differ from the
   C library in the last ulp). Pure: no DOM. Exposed as window.KEpoch. */
(function (root) {
  "use strict";

  const MEANS = [1.0, 0.6, 0.0];
  const PLAIN = 0, PPO = 1;

  /** mulberry32: the seed is the 32-bit state; each call returns uint32 / 2^32 in [0, 1). */
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function next() {
      a = (a + 0x6D2B79F5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  /** numpy's pairwise summation of a[lo .. lo+n) (what np.sum does along a contiguous axis). */
  function pairwiseSum(a, lo, n) {
    if (n < 8) {
      let r = 0.0;
      for (let i = 0; i < n; i++) r += a[lo + i];
      return r;
    }
    if (n <= 128) {
      const r = [a[lo], a[lo + 1], a[lo + 2], a[lo + 3], a[lo + 4], a[lo + 5], a[lo + 6],
                 a[lo + 7]];
      let i = 8;
      for (; i < n - (n % 8); i += 8) {
        for (let j = 0; j < 8; j++) r[j] += a[lo + i + j];
      }
      let res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
      for (; i < n; i++) res += a[lo + i];
      return res;
    }
    let n2 = Math.floor(n / 2);
    n2 -= n2 % 8;
    return pairwiseSum(a, lo, n2) + pairwiseSum(a, lo + n2, n - n2);
  }

  function logSoftmax(z) {
    let m = z[0];
    for (let i = 1; i < z.length; i++) if (z[i] > m) m = z[i];
    let s = 0.0;
    for (let i = 0; i < z.length; i++) s += Math.exp(z[i] - m);
    const ls = Math.log(s);
    return z.map((v) => v - m - ls);
  }

  function klCategorical(logp, logq) {
    let s = 0.0;
    for (let i = 0; i < logp.length; i++) s += Math.exp(logp[i]) * (logp[i] - logq[i]);
    return s;
  }

  function entropy(p) {
    let s = 0.0;
    for (let i = 0; i < p.length; i++) s += p[i] > 0 ? p[i] * Math.log(p[i]) : 0.0;
    return -s;
  }

  function expectedReward(p, means) {
    let s = 0.0;
    for (let i = 0; i < p.length; i++) s += p[i] * means[i];
    return s;
  }

  /** Gradient of mean_i w_i rho_i A_i on the logits (kepoch.surrogate_grad for one learner):
      w_i = 0 for a clipped sample (A > 0, rho > 1 + eps or A < 0, rho < 1 - eps). */
  function surrogateGrad(z, logpOld, arms, adv, eps) {
    const logp = logSoftmax(z);
    const pi = logp.map(Math.exp);
    const n = arms.length, k = z.length;
    const w = new Array(n);
    for (let i = 0; i < n; i++) {
      const rho = Math.exp(logp[arms[i]] - logpOld[arms[i]]);
      const clipped = (adv[i] > 0 && rho > 1.0 + eps) || (adv[i] < 0 && rho < 1.0 - eps);
      w[i] = clipped ? 0.0 : rho * adv[i];
    }
    const perArm = new Array(k).fill(0.0);
    for (let i = 0; i < n; i++) perArm[arms[i]] += w[i];
    const wsum = pairwiseSum(w, 0, n);
    const g = new Array(k);
    for (let a = 0; a < k; a++) g[a] = (perArm[a] - pi[a] * wsum) / n;
    return g;
  }

  function armMeanAdvantages(arms, adv, k) {
    const out = [];
    for (let a = 0; a < k; a++) {
      const sel = [];
      for (let i = 0; i < arms.length; i++) if (arms[i] === a) sel.push(adv[i]);
      out.push(sel.length ? pairwiseSum(sel, 0, sel.length) / sel.length : null);
    }
    return out;
  }

  /** One run of the demo. history arrays follow DemoRun's layout for a single seed:
      policies[t][learner][arm] (t = 0 .. iteration), klEpochs[t][k][learner],
      arms[t][learner][i], advantages[t][learner][i]. */
  class Demo {
    constructor(cfg) {
      this.K = cfg.K; this.N = cfg.N; this.eps = cfg.eps;
      this.lr = cfg.lr === undefined ? 1.0 : cfg.lr;
      this.seed = cfg.seed;
      this.means = (cfg.means || MEANS).slice();
      this.rng = mulberry32(cfg.seed);
      const k = this.means.length;
      this.z = [new Array(k).fill(0.0), new Array(k).fill(0.0)];
      const p0 = logSoftmax(this.z[0]).map(Math.exp);
      this.policies = [[p0.slice(), p0.slice()]];
      this.klEpochs = [];
      this.arms = [];
      this.advantages = [];
    }
    get iteration() { return this.klEpochs.length; }

    /** One iteration: draw the shared batch, then K epochs for each learner. */
    step() {
      const N = this.N, K = this.K, k = this.means.length;
      const u = new Array(N), noise = new Array(N);
      for (let i = 0; i < N; i++) u[i] = this.rng();
      for (let i = 0; i < N; i++) {
        const v = this.rng(), w = this.rng();
        noise[i] = Math.sqrt(-2.0 * Math.log1p(-v)) * Math.cos(2.0 * Math.PI * w);
      }
      const epsOf = [Infinity, this.eps];
      const kls = [];
      for (let e = 0; e < K; e++) kls.push([0.0, 0.0]);
      const armsT = [], advT = [], polT = [];
      for (let l = 0; l < 2; l++) {
        const logpOld = logSoftmax(this.z[l]);
        const piOld = logpOld.map(Math.exp);
        const cdf = [];
        let c = 0.0;
        for (let a = 0; a < k; a++) { c += piOld[a]; cdf.push(c); }
        const arms = new Array(N), rewards = new Array(N);
        for (let i = 0; i < N; i++) {
          let arm = 0;
          for (let j = 0; j < k - 1; j++) if (u[i] >= cdf[j]) arm += 1;
          arms[i] = arm;
          rewards[i] = this.means[arm] + noise[i];
        }
        const mean = pairwiseSum(rewards, 0, N) / N;
        const adv = rewards.map((r) => r - mean);
        let z = this.z[l];
        for (let e = 0; e < K; e++) {
          const g = surrogateGrad(z, logpOld, arms, adv, epsOf[l]);
          z = z.map((zi, a) => zi + this.lr * g[a]);
          kls[e][l] = klCategorical(logpOld, logSoftmax(z));
        }
        this.z[l] = z;
        armsT.push(arms); advT.push(adv);
        polT.push(logSoftmax(z).map(Math.exp));
      }
      this.klEpochs.push(kls);
      this.arms.push(armsT);
      this.advantages.push(advT);
      this.policies.push(polT);
    }

    J(t, l) { return expectedReward(this.policies[t][l], this.means); }
    entropy(t, l) { return entropy(this.policies[t][l]); }
    /** KL(pi_old || pi) at the end of iteration t's K epochs (t >= 1). */
    klIteration(t, l) { return this.klEpochs[t - 1][this.K - 1][l]; }
    armMeanAdv(t, l) {
      return armMeanAdvantages(this.arms[t - 1][l], this.advantages[t - 1][l],
                               this.means.length);
    }
    pulls(t, l) {
      const c = new Array(this.means.length).fill(0);
      for (const a of this.arms[t - 1][l]) c[a] += 1;
      return c;
    }
  }

  /** The whole run at once, laid out like trustrl.demo.compute.kepoch (for the tests). */
  function simulate(cfg, iterations) {
    const d = new Demo(cfg);
    for (let t = 0; t < iterations; t++) d.step();
    const T = iterations;
    const range = (n) => Array.from({ length: n }, (_, i) => i);
    return {
      policies: d.policies,
      J: range(T + 1).map((t) => [d.J(t, 0), d.J(t, 1)]),
      entropy: range(T + 1).map((t) => [d.entropy(t, 0), d.entropy(t, 1)]),
      kl_epochs: d.klEpochs, arms: d.arms, advantages: d.advantages,
      arm_mean_adv: range(T).map((t) => [d.armMeanAdv(t + 1, 0), d.armMeanAdv(t + 1, 1)]),
    };
  }

  root.KEpoch = { MEANS, PLAIN, PPO, mulberry32, pairwiseSum, logSoftmax, surrogateGrad,
                  klCategorical, entropy, Demo, simulate };
})(typeof window !== "undefined" ? window : globalThis);
