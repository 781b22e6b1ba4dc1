"""Probe for the compiled CPU backend (the issue "Faster than PureJaxRL on a CPU"): how fast is
a whole PPO iteration when it runs as compiled code, before any of it is built into trustrl?

A self-contained Numba prototype of one CartPole PPO iteration in CleanRL's setting (4 envs x
128 steps, 4 epochs x 4 minibatches of 128, 64x64 tanh actor and critic, clip 0.2 with value
clipping, entropy 0.01, advantage normalisation, gradient clipping 0.5, Adam): the env step,
the policy forward and sampling, GAE, the closed-form minibatch gradient and Adam, all in
`@njit(cache=True)` functions. It is a measurement to choose the tool (docs/compiled.md), not
trustrl code, and goes when the backend lands: its random numbers come from NumPy's generator
inside Numba, not trustrl.maths.rng; it has no normalisers; a truncated step bootstraps from V(s_t).

It prints, in CPU seconds of this process (robust to other load on the machine), the
steady-state SPS of the prototype, the CPU time of its first call (compilation, or loading
the on-disk cache from the second run on), trustrl's own eager batched iteration on the same
setting in the same process, and whether the prototype learns (CartPole's training return
over the last 20 iterations; trustrl reaches about 270 there in this setting).

    pip install numba scipy      # not trustrl dependencies; scipy gives Numba's np.dot BLAS
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/compiled_probe.py
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

try:
    from numba import njit
except ImportError as e:  # pragma: no cover - a probe with a stated requirement
    raise SystemExit("this probe needs numba: pip install numba") from e

N_ENVS, T, EPOCHS, N_MB, H = 4, 128, 4, 4, 64
OBS, ACT = 4, 2
CLIP, VF, ENT, MAXG, LR, GAMMA, LAM = 0.2, 0.5, 0.01, 0.5, 2.5e-4, 0.99, 0.95

# parameter layout: actor w0 b0 w1 b1 wo bo | critic w0 b0 w1 b1 wo bo
SHAPES = [(OBS, H), (H,), (H, H), (H,), (H, ACT), (ACT,),
          (OBS, H), (H,), (H, H), (H,), (H, 1), (1,)]
OFFS = np.cumsum([0] + [int(np.prod(s)) for s in SHAPES])
D = int(OFFS[-1])


def init_params(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = np.zeros(D, np.float32)
    gains = [math.sqrt(2), 0, math.sqrt(2), 0, 0.01, 0, math.sqrt(2), 0, math.sqrt(2), 0, 1.0, 0]
    for i, (s, g) in enumerate(zip(SHAPES, gains)):
        if len(s) == 2:
            a = rng.standard_normal(s)
            q, r = np.linalg.qr(a if s[0] >= s[1] else a.T)
            q = q * np.sign(np.diag(r))
            w = q if s[0] >= s[1] else q.T
            theta[OFFS[i]:OFFS[i + 1]] = (g * w).astype(np.float32).ravel()
    return theta


@njit(cache=True)
def _views(theta):
    o = OFFS_NB
    return (theta[o[0]:o[1]].reshape(OBS, H), theta[o[1]:o[2]],
            theta[o[2]:o[3]].reshape(H, H), theta[o[3]:o[4]],
            theta[o[4]:o[5]].reshape(H, ACT), theta[o[5]:o[6]],
            theta[o[6]:o[7]].reshape(OBS, H), theta[o[7]:o[8]],
            theta[o[8]:o[9]].reshape(H, H), theta[o[9]:o[10]],
            theta[o[10]:o[11]].reshape(H, 1), theta[o[11]:o[12]])


OFFS_NB = OFFS.astype(np.int64)
ONE = np.float32(1.0)

# tanh as Eigen's float rational approximation (vectorisable: Numba's np.tanh calls libm per
# element, ~40 ns each, since pip's llvmlite has no SVML)
_A = np.array([4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
               5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
               -2.76076847742355e-16], np.float32)
_B = np.array([4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
               1.19825839466702e-06], np.float32)


@njit(cache=True, fastmath=True)
def tanh_(x):
    out = np.empty_like(x)
    xf, of = x.reshape(-1), out.reshape(-1)
    a0, a1, a2, a3, a4, a5, a6 = _A[0], _A[1], _A[2], _A[3], _A[4], _A[5], _A[6]
    b0, b1, b2, b3 = _B[0], _B[1], _B[2], _B[3]
    for i in range(xf.size):
        v = min(max(xf[i], np.float32(-7.90531110763549805)), np.float32(7.90531110763549805))
        v2 = v * v
        p = v2 * a6 + a5
        p = v2 * p + a4
        p = v2 * p + a3
        p = v2 * p + a2
        p = v2 * p + a1
        p = v2 * p + a0
        p = v * p
        q = v2 * b3 + b2
        q = v2 * q + b1
        q = v2 * q + b0
        of[i] = p / q
    return out


@njit(cache=True, fastmath=True)
def mm(a, b):
    """a @ b, i-k-j order, for the rollout's 4-row products (np.dot's BLAS call is 3x faster
    than this loop at the update's 128 x 64 x 64, and slower at 4 rows)."""
    M, K = a.shape
    N = b.shape[1]
    out = np.zeros((M, N), a.dtype)
    for i in range(M):
        for k in range(K):
            aik = a[i, k]
            for j in range(N):
                out[i, j] += aik * b[k, j]
    return out


@njit(cache=True, fastmath=True)
def mm_tn(a, b):
    """a.T @ b: out[i, j] = sum_k a[k, i] b[k, j]."""
    K, M = a.shape
    N = b.shape[1]
    out = np.zeros((M, N), a.dtype)
    for k in range(K):
        for i in range(M):
            aki = a[k, i]
            for j in range(N):
                out[i, j] += aki * b[k, j]
    return out


@njit(cache=True, fastmath=True)
def linear(x, w, b):
    out = mm(x, w)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] += b[j]
    return out


@njit(cache=True)
def _cartpole_step(s, a):
    """Gymnasium's CartPole-v1 transition (euler), float64 state [4]; returns terminated."""
    x, xd, th, thd = s[0], s[1], s[2], s[3]
    force = 10.0 if a == 1 else -10.0
    ct, st = math.cos(th), math.sin(th)
    temp = (force + 0.05 * thd * thd * st) / 1.1
    thacc = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct * ct / 1.1))
    xacc = temp - 0.05 * thacc * ct / 1.1
    s[0] = x + 0.02 * xd
    s[1] = xd + 0.02 * xacc
    s[2] = th + 0.02 * thd
    s[3] = thd + 0.02 * thacc
    return s[0] < -2.4 or s[0] > 2.4 or s[2] < -0.2095 or s[2] > 0.2095


@njit(cache=True)
def rollout(theta, state, steps, obs_buf, act_buf, logp_buf, val_buf, rew_buf, term_buf,
            trunc_buf, next_val, ep_ret, ep_len, finished):
    """T steps of N envs: policy forward, Gumbel-max sampling, env step, same-step reset."""
    aw0, ab0, aw1, ab1, awo, abo, cw0, cb0, cw1, cb1, cwo, cbo = _views(theta)
    n_fin = 0
    o32 = np.empty((N_ENVS, OBS), np.float32)
    for t in range(T):
        for i in range(N_ENVS):
            for k in range(OBS):
                o32[i, k] = state[i, k]
        h = tanh_(linear(tanh_(linear(o32, aw0, ab0)), aw1, ab1))
        logits = linear(h, awo, abo)
        hv = tanh_(linear(tanh_(linear(o32, cw0, cb0)), cw1, cb1))
        v = mm(hv, cwo)[:, 0] + cbo[0]
        for i in range(N_ENVS):
            mx = max(logits[i, 0], logits[i, 1])
            lse = mx + math.log(math.exp(logits[i, 0] - mx) + math.exp(logits[i, 1] - mx))
            g0 = logits[i, 0] - math.log(-math.log(np.random.random() + 1e-12) + 1e-12)
            g1 = logits[i, 1] - math.log(-math.log(np.random.random() + 1e-12) + 1e-12)
            a = 1 if g1 > g0 else 0
            obs_buf[t, i] = o32[i]
            act_buf[t, i] = a
            logp_buf[t, i] = logits[i, a] - lse
            val_buf[t, i] = v[i]
            term = _cartpole_step(state[i], a)
            steps[i] += 1
            trunc = (not term) and steps[i] >= 500
            rew_buf[t, i] = 1.0
            ep_ret[i] += 1.0
            ep_len[i] += 1
            term_buf[t, i] = term
            trunc_buf[t, i] = trunc
            if term or trunc:
                finished[n_fin] = ep_ret[i]
                n_fin += 1
                ep_ret[i] = 0.0
                ep_len[i] = 0
                steps[i] = 0
                for k in range(4):
                    state[i, k] = np.random.uniform(-0.05, 0.05)
    for i in range(N_ENVS):  # bootstrap value of the last observation
        for k in range(OBS):
            o32[i, k] = state[i, k]
    hv = tanh_(linear(tanh_(linear(o32, cw0, cb0)), cw1, cb1))
    next_val[:] = mm(hv, cwo)[:, 0] + cbo[0]
    return n_fin


@njit(cache=True)
def gae(rew, val, next_val, term, trunc, adv, ret):
    """GAE over [T, N]; a truncated step bootstraps from V(s_t), standing in for V of the
    final state (which trustrl keeps; CartPole truncates only at 500 steps)."""
    last = np.zeros(N_ENVS, np.float32)
    for t in range(T - 1, -1, -1):
        for i in range(N_ENVS):
            nv = next_val[i] if t == T - 1 else val[t + 1, i]
            if term[t, i]:
                nv = 0.0
            cont = 0.0 if (term[t, i] or trunc[t, i]) else 1.0
            if trunc[t, i]:
                nv = val[t, i]
            delta = rew[t, i] + GAMMA * nv - val[t, i]
            last[i] = delta + GAMMA * LAM * cont * last[i]
            adv[t, i] = last[i]
            ret[t, i] = last[i] + val[t, i]


@njit(cache=True)
def minibatch_step(theta, m, v, step, o, a, lp_old, adv_raw, ret, v_old, lr):
    """The PPO loss's closed-form gradient on one minibatch and an Adam step."""
    aw0, ab0, aw1, ab1, awo, abo, cw0, cb0, cw1, cb1, cwo, cbo = _views(theta)
    M = o.shape[0]
    adv = ((adv_raw - adv_raw.mean()) / (adv_raw.std() * math.sqrt(M / (M - 1.0)) + 1e-8)
           ).astype(np.float32)
    h1 = tanh_(np.dot(o, aw0) + ab0)
    h2 = tanh_(np.dot(h1, aw1) + ab1)
    logits = np.dot(h2, awo) + abo
    c1 = tanh_(np.dot(o, cw0) + cb0)
    c2 = tanh_(np.dot(c1, cw1) + cb1)
    val = np.dot(c2, cwo)[:, 0] + cbo[0]
    g_logits = np.empty_like(logits)
    g_val = np.empty(M, np.float32)
    for b in range(M):
        mx = max(logits[b, 0], logits[b, 1])
        e0, e1 = math.exp(logits[b, 0] - mx), math.exp(logits[b, 1] - mx)
        p0, p1 = e0 / (e0 + e1), e1 / (e0 + e1)
        lse = mx + math.log(e0 + e1)
        ab = a[b]
        logp = logits[b, ab] - lse
        ratio = math.exp(logp - lp_old[b])
        A = adv[b]
        # d(-min(rA, clip(r)A))/dr
        clipped = min(max(ratio, 1 - CLIP), 1 + CLIP)
        d_r = -A if ratio * A <= clipped * A else 0.0
        d_logp = d_r * ratio / M
        # d logp / d logits = onehot - p; entropy H = -sum p log p, dH/dlogit_j = -p_j(log p_j + H)
        lp0, lp1 = logits[b, 0] - lse, logits[b, 1] - lse
        Hb = -(p0 * lp0 + p1 * lp1)
        dH0, dH1 = -p0 * (lp0 + Hb), -p1 * (lp1 + Hb)
        g_logits[b, 0] = d_logp * ((1.0 if ab == 0 else 0.0) - p0) - ENT / M * dH0
        g_logits[b, 1] = d_logp * ((1.0 if ab == 1 else 0.0) - p1) - ENT / M * dH1
        # clipped value loss 0.5 max((v-R)^2, (v_clip-R)^2)
        vc = v_old[b] + min(max(val[b] - v_old[b], -CLIP), CLIP)
        e_u, e_c = val[b] - ret[b], vc - ret[b]
        if e_u * e_u >= e_c * e_c:
            g_val[b] = VF * e_u / M
        else:
            inside = -CLIP < val[b] - v_old[b] < CLIP
            g_val[b] = VF * e_c / M if inside else 0.0
    g = np.empty(D, np.float32)
    o_ = OFFS_NB
    # actor backward
    g[o_[4]:o_[5]] = np.dot(h2.T, g_logits).ravel()
    g[o_[5]:o_[6]] = g_logits.sum(axis=0)
    gz2 = np.dot(g_logits, awo.T) * (ONE - h2 * h2)
    g[o_[2]:o_[3]] = np.dot(h1.T, gz2).ravel()
    g[o_[3]:o_[4]] = gz2.sum(axis=0)
    gz1 = np.dot(gz2, aw1.T) * (ONE - h1 * h1)
    g[o_[0]:o_[1]] = np.dot(o.T, gz1).ravel()
    g[o_[1]:o_[2]] = gz1.sum(axis=0)
    # critic backward
    gv = g_val.reshape(M, 1)
    g[o_[10]:o_[11]] = np.dot(c2.T, gv).ravel()
    g[o_[11]:o_[12]] = gv.sum()
    gc2 = np.dot(gv, cwo.T) * (ONE - c2 * c2)
    g[o_[8]:o_[9]] = np.dot(c1.T, gc2).ravel()
    g[o_[9]:o_[10]] = gc2.sum(axis=0)
    gc1 = np.dot(gc2, cw1.T) * (ONE - c1 * c1)
    g[o_[6]:o_[7]] = np.dot(o.T, gc1).ravel()
    g[o_[7]:o_[8]] = gc1.sum(axis=0)
    norm = math.sqrt(float((g.astype(np.float64) ** 2).sum()))
    if norm > MAXG:
        g *= MAXG / (norm + 1e-6)
    # Adam
    step += 1
    bc1, bc2 = 1.0 - 0.9 ** step, 1.0 - 0.999 ** step
    for j in range(D):
        m[j] = 0.9 * m[j] + 0.1 * g[j]
        v[j] = 0.999 * v[j] + 0.001 * g[j] * g[j]
        theta[j] -= lr / bc1 * m[j] / (math.sqrt(v[j]) / math.sqrt(bc2) + 1e-5)
    return step


@njit(cache=True)
def update(theta, m, v, step, obs, act, logp, adv, ret, val, lr):
    B = obs.shape[0]
    size = B // N_MB
    for _ in range(EPOCHS):
        perm = np.random.permutation(B)
        for k in range(N_MB):
            idx = perm[k * size:(k + 1) * size]
            step = minibatch_step(theta, m, v, step, obs[idx], act[idx], logp[idx], adv[idx],
                                  ret[idx], val[idx], lr)
    return step


@njit(cache=True)
def seed_numba(s):
    np.random.seed(s)


def run_probe(iterations: int, seed: int) -> tuple[float, float, list[float]]:
    """(first-call seconds, steady SPS, mean training return per iteration)."""
    seed_numba(seed)
    theta = init_params(seed)
    m, v = np.zeros(D, np.float32), np.zeros(D, np.float32)
    state = np.random.default_rng(seed).uniform(-0.05, 0.05, (N_ENVS, 4))
    steps = np.zeros(N_ENVS, np.int64)
    obs = np.zeros((T, N_ENVS, OBS), np.float32)
    act = np.zeros((T, N_ENVS), np.int64)
    logp, val, rew = (np.zeros((T, N_ENVS), np.float32) for _ in range(3))
    term, trunc = np.zeros((T, N_ENVS), np.bool_), np.zeros((T, N_ENVS), np.bool_)
    adv, ret = np.zeros((T, N_ENVS), np.float32), np.zeros((T, N_ENVS), np.float32)
    next_val = np.zeros(N_ENVS, np.float32)
    ep_ret, ep_len = np.zeros(N_ENVS), np.zeros(N_ENVS, np.int64)
    finished = np.zeros(T * N_ENVS)
    step, returns, t_first, t_loop = 0, [], 0.0, 0.0
    for it in range(iterations):
        t0 = time.process_time()
        lr = np.float32(LR * (1.0 - it / iterations))
        n = rollout(theta, state, steps, obs, act, logp, val, rew, term, trunc, next_val,
                    ep_ret, ep_len, finished)
        gae(rew, val, next_val, term, trunc, adv, ret)
        B = T * N_ENVS
        step = update(theta, m, v, step, obs.reshape(B, OBS), act.reshape(B), logp.reshape(B),
                      adv.reshape(B), ret.reshape(B), val.reshape(B), lr)
        dt = time.process_time() - t0
        if it == 0:
            t_first = dt
        else:
            t_loop += dt
        returns.append(float(finished[:n].mean()) if n else math.nan)
    return t_first, (iterations - 1) * T * N_ENVS / t_loop, returns


def pieces() -> None:
    """CPU time per call of each compiled piece, on a batch from one rollout."""
    seed_numba(0)
    theta = init_params(0)
    m, v = np.zeros(D, np.float32), np.zeros(D, np.float32)
    state = np.random.default_rng(0).uniform(-0.05, 0.05, (N_ENVS, 4))
    steps = np.zeros(N_ENVS, np.int64)
    obs = np.zeros((T, N_ENVS, OBS), np.float32)
    act = np.zeros((T, N_ENVS), np.int64)
    logp, val, rew = (np.zeros((T, N_ENVS), np.float32) for _ in range(3))
    term, trunc = np.zeros((T, N_ENVS), np.bool_), np.zeros((T, N_ENVS), np.bool_)
    adv, ret = np.zeros((T, N_ENVS), np.float32), np.zeros((T, N_ENVS), np.float32)
    nv, er, el = np.zeros(N_ENVS, np.float32), np.zeros(N_ENVS), np.zeros(N_ENVS, np.int64)
    fin, B = np.zeros(T * N_ENVS), T * N_ENVS
    lr = np.float32(1e-4)
    x, w = np.ones((128, 64), np.float32), np.ones((64, 64), np.float32)

    def ro():
        rollout(theta, state, steps, obs, act, logp, val, rew, term, trunc, nv, er, el, fin)

    def up():
        update(theta, m, v, 0, obs.reshape(B, OBS), act.reshape(B), logp.reshape(B),
               adv.reshape(B), ret.reshape(B), val.reshape(B), lr)

    def mb():
        f = adv.reshape(B)[:128].copy()
        minibatch_step(theta, m, v, 0, obs.reshape(B, OBS)[:128].copy(),
                       act.reshape(B)[:128].copy(), f, f, f, f, lr)

    for name, fn, n in (("rollout, 128 steps", ro, 50),
                        ("gae", lambda: gae(rew, val, nv, term, trunc, adv, ret), 200),
                        ("update, 16 minibatches", up, 20), ("one minibatch step", mb, 200),
                        ("rational tanh 128x64", lambda: tanh_(x), 2000),
                        ("loop matmul 128x64 @ 64x64", lambda: mm(x, w), 2000)):
        fn()
        t0 = time.process_time()
        for _ in range(n):
            fn()
        print(f"{name:28s} {(time.process_time() - t0) / n * 1e6:9.1f} us")


def trustrl_eager_sps(iterations: int) -> float:
    """trustrl's own batched iteration (NumPy rollout, closed form) on the same setting."""
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config

    sets = {"vector": "torch", "num_envs": "4", "num_steps": "128", "update_epochs": "4",
            "minibatch_size": "128", "lr": "2.5e-4", "ent_coef": "0.01",
            "clip_value_loss": "true", "eval_every": "0"}
    learner = BatchedLearner(make_config("ppo", "CartPole-v1", sets=sets), [1])
    learner.step()
    t0 = time.process_time()
    for _ in range(iterations - 1):
        learner.step()
    return (iterations - 1) * T * N_ENVS / (time.process_time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=195)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--pieces", action="store_true", help="CPU time of each piece, then exit")
    args = ap.parse_args()
    if args.pieces:
        pieces()
        return
    for s in range(args.seeds):
        first, sps, rets = run_probe(args.iterations, s)
        last = [r for r in rets[-20:] if not math.isnan(r)]
        print(f"probe seed {s}: first call {first:.2f} s, steady {sps:,.0f} SPS, training "
              f"return of the last 20 iterations {np.mean(last):.1f}")
    try:
        print(f"trustrl eager batched iteration: {trustrl_eager_sps(args.iterations):,.0f} SPS")
    except ImportError:
        print("trustrl not importable here: its eager figure skipped")


if __name__ == "__main__":
    main()
