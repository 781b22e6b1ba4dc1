"""Numba kernels of the compiled backend (trustrl.compiled), imported only when it is used.

Arrays are float32 as the eager networks' are; matrix products go through np.dot (BLAS, from
scipy), elementwise work through loops that LLVM vectorises. Numba's np.tanh calls the C
library's tanhf once per element (about 40 ns each: pip's llvmlite has no vector maths
library), so tanh is a rational approximation written as a loop (the coefficients of Eigen's
float tanh; accurate to a few ulp, tested against NumPy's in tests/test_compiled.py).

Parameter layout (trustrl.popnet.PopActorCritic.layout), for an MLP with layer sizes
`sizes` = (n_in, h_1, ..., h_L, n_out): w_1 [n_in, h_1] row-major, b_1 [h_1], ..., w_out
[h_L, n_out], b_out [n_out], one after the other.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_TANH_CLAMP = np.float32(7.90531110763549805)  # tanh is 1 to float32 beyond this
_TP = np.array([4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
                5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
                -2.76076847742355e-16], np.float32)
_TQ = np.array([4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
                1.19825839466702e-06], np.float32)


@njit(cache=True, fastmath=True, error_model="numpy")
def activate_(z, relu):
    """The hidden activation in place on a C-contiguous float32 array."""
    zf = z.reshape(-1)
    if relu:
        for i in range(zf.size):
            if zf[i] < 0.0:
                zf[i] = 0.0
        return
    p0, p1, p2, p3, p4, p5, p6 = _TP[0], _TP[1], _TP[2], _TP[3], _TP[4], _TP[5], _TP[6]
    q0, q1, q2, q3 = _TQ[0], _TQ[1], _TQ[2], _TQ[3]
    for i in range(zf.size):
        x = min(max(zf[i], -_TANH_CLAMP), _TANH_CLAMP)
        x2 = x * x
        num = x * ((((((p6 * x2 + p5) * x2 + p4) * x2 + p3) * x2 + p2) * x2 + p1) * x2 + p0)
        den = ((q3 * x2 + q2) * x2 + q1) * x2 + q0
        zf[i] = num / den


@njit(cache=True, error_model="numpy")
def hidden_size(sizes):
    """How many parameters the hidden layers of an MLP of layer sizes `sizes` have: the offset
    of w_out in its layout."""
    off = 0
    for layer in range(sizes.shape[0] - 2):
        off += sizes[layer] * sizes[layer + 1] + sizes[layer + 1]
    return off


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_forward(theta, sizes, relu, x):
    """The hidden layers' outputs [x, h_1, ..., h_L] of the MLP whose parameters start at
    theta[0] (a 1-d float32 array), for inputs x [M, n_in] (C-contiguous float32)."""
    acts = [x]
    h = x
    off = 0
    for layer in range(sizes.shape[0] - 2):
        a, b = sizes[layer], sizes[layer + 1]
        z = np.dot(h, theta[off:off + a * b].reshape((a, b)))
        bias = theta[off + a * b:off + a * b + b]
        for i in range(z.shape[0]):  # elementwise, not a row slice per i: 3x faster
            for k in range(b):
                z[i, k] += bias[k]
        activate_(z, relu)
        acts.append(z)
        h = z
        off += a * b + b
    return acts


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_out(theta, sizes, relu, x):
    """The MLP's output [M, n_out] (no activation on the output layer) for inputs x [M, n_in]:
    mlp_forward's last hidden output times w_out, plus b_out."""
    L = sizes.shape[0] - 2
    h_L, n = sizes[L], sizes[L + 1]
    off = hidden_size(sizes)
    h = mlp_forward(theta, sizes, relu, x)[L]
    z = np.dot(h, theta[off:off + h_L * n].reshape((h_L, n)))
    for i in range(z.shape[0]):
        for k in range(n):
            z[i, k] += theta[off + h_L * n + k]
    return z


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_outputs(flat, a0, sizes, relu, x, out):
    """mlp_out of each member p: flat [P, *] (the MLP's parameters from column a0), x
    [P, M, n_in] -> out [P, M, n_out]."""
    for p in range(x.shape[0]):
        out[p] = mlp_out(flat[p, a0:], sizes, relu, np.ascontiguousarray(x[p]))


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_backward_hidden(theta, sizes, relu, acts, g_h, grad):
    """Push dLoss/dh_L [M, h_L] back through the hidden layers: writes dW and db of every
    hidden layer into grad (the layout's offsets)."""
    L = sizes.shape[0] - 2
    off = hidden_size(sizes)
    for layer in range(L - 1, -1, -1):
        a, b = sizes[layer], sizes[layer + 1]
        off -= a * b + b
        h = acts[layer + 1]
        g_z = np.empty_like(h)
        if relu:
            for i in range(h.shape[0]):
                for k in range(b):
                    g_z[i, k] = g_h[i, k] if h[i, k] > 0.0 else 0.0
        else:
            for i in range(h.shape[0]):
                for k in range(b):
                    g_z[i, k] = g_h[i, k] - g_h[i, k] * h[i, k] * h[i, k]
        np.dot(acts[layer].T, g_z, grad[off:off + a * b].reshape((a, b)))
        db = grad[off + a * b:off + a * b + b]
        db[:] = 0.0
        for i in range(h.shape[0]):
            for k in range(b):
                db[k] += g_z[i, k]
        if layer > 0:
            g_h = np.dot(g_z, theta[off:off + a * b].reshape((a, b)).T)


@njit(cache=True, fastmath=True, error_model="numpy")
def sum_squares(x):  # type: ignore[no-untyped-def]
    """sum x_j^2 of a 1-d float32 array, accumulated in float64 (fastmath: vectorised)."""
    s = 0.0
    for j in range(x.shape[0]):
        xj = np.float64(x[j])
        s += xj * xj
    return s


@njit(cache=True, fastmath=True, error_model="numpy")
def adam_(theta, m, v, grad, t, lr, b1, b2, eps):  # type: ignore[no-untyped-def]
    """One Adam step of the 1-d float32 arrays theta, m, v in place, with gradient grad and step
    count t (this step included): trustrl.optim's arithmetic (torch.optim.Adam's)."""
    step = np.float32(lr / (1.0 - b1 ** t))
    bc2 = np.float32(math.sqrt(1.0 - b2 ** t))
    c1, c2, beta2, e = np.float32(1.0 - b1), np.float32(1.0 - b2), np.float32(b2), np.float32(eps)
    for j in range(theta.shape[0]):
        gj = grad[j]
        m[j] += (gj - m[j]) * c1
        v[j] = v[j] * beta2 + c2 * gj * gj
        theta[j] -= m[j] / (np.sqrt(v[j]) / bc2 + e) * step


@njit(cache=True, fastmath=True, error_model="numpy")
def critic_fit(flat, c0, m, v, t, obs, ret, order, sizes, relu, mb, lr, b1, b2, eps, last):
    """The critic's regression for P members (algos.common.fit_critic): for each epoch e and
    member p, the minibatches of `mb` samples in the order order[e, p], 1/2 mean (V - R)^2,
    its gradient and one Adam step (trustrl.optim's arithmetic, step counts from t [P], which
    the caller advances). The critic's parameters are the columns c0: c0 + D of flat [P, *],
    its Adam moments m, v [P, D]: all updated in place; last[p] gets the mean minibatch loss
    of the last epoch."""
    P, N = ret.shape
    E = order.shape[0]
    L = sizes.shape[0] - 2
    D = m.shape[1]
    n_in, h_L = sizes[0], sizes[L]
    off_out = hidden_size(sizes)
    for p in range(P):
        th = flat[p, c0:c0 + D].copy()
        mm = m[p].copy()
        vv = v[p].copy()
        tp = t[p]
        grad = np.zeros(D, np.float32)
        for e in range(E):
            acc = np.float32(0.0)
            n_mb = 0
            for s in range(0, N, mb):
                M = min(mb, N - s)
                x = np.empty((M, n_in), np.float32)
                y = np.empty(M, np.float32)
                for i in range(M):
                    j = order[e, p, s + i]
                    x[i] = obs[p, j]
                    y[i] = ret[p, j]
                acts = mlp_forward(th, sizes, relu, x)
                h = acts[L]
                w_out = th[off_out:off_out + h_L]
                b_out = th[off_out + h_L]
                d_v = np.empty(M, np.float32)
                loss = np.float32(0.0)
                for i in range(M):
                    err = np.float32(np.dot(h[i], w_out) + b_out - y[i])
                    loss += np.float32(0.5) * err * err
                    d_v[i] = err / np.float32(M)
                acc += loss / np.float32(M)
                n_mb += 1
                grad[off_out:off_out + h_L] = np.dot(d_v, h)
                grad[off_out + h_L] = d_v.sum()
                g_h = np.empty((M, h_L), np.float32)
                for i in range(M):
                    g_h[i] = d_v[i] * w_out
                mlp_backward_hidden(th, sizes, relu, acts, g_h, grad)
                tp += 1.0
                adam_(th, mm, vv, grad, tp, lr, b1, b2, eps)
            last[p] = acc / np.float32(n_mb)
        flat[p, c0:c0 + D] = th
        m[p] = mm
        v[p] = vv


@njit(cache=True, fastmath=True, error_model="numpy")
def actor_fisher_product(flat, sizes, relu, obs, acts, m_out, discrete, v, damping, ls_off,
                         out):
    """(F + damping I) v for P members (backends.ClosedForm.fisher_product written as one
    loop): J v by forward mode through the actor MLP, u = M J v / B with M the KL's Hessian in
    the output space (diag(p) - p p^T, p = m_out [P, B, n], for a softmax; 1 / sigma^2, m_out
    [P, 1, n], for a Gaussian's mean), then J^T u backwards; 2 v on each log-std column (at
    ls_off, Gaussian only). flat [P, *] holds the actor's parameters from column 0; acts
    [h_1 [P, B, h_1], ..., h_L] are the hidden outputs at theta_old; v and out are [P, D]
    (on the critic's columns out is damping v, as the eager product's)."""
    P, B = obs.shape[0], obs.shape[1]
    L = sizes.shape[0] - 2
    n = sizes[L + 1]
    for p in range(P):
        th = flat[p]
        vp = v[p].copy()
        grad = np.zeros(vp.shape[0], np.float32)
        x = obs[p]
        # forward mode: dz = x dW + db (+ dh W), dh = act'(z) dz
        off = 0
        dh = np.zeros((B, 1), np.float32)
        h_prev = x
        for layer in range(L):
            a, b = sizes[layer], sizes[layer + 1]
            dz = np.dot(h_prev, vp[off:off + a * b].reshape((a, b)))
            db = vp[off + a * b:off + a * b + b]
            if layer > 0:
                dz += np.dot(dh, th[off:off + a * b].reshape((a, b)))
            h = acts[layer][p]
            for i in range(B):
                for k in range(b):
                    z = dz[i, k] + db[k]
                    if relu:
                        dz[i, k] = z if h[i, k] > 0.0 else 0.0
                    else:
                        dz[i, k] = z - z * h[i, k] * h[i, k]
            dh = dz
            h_prev = h
            off += a * b + b
        h_L = sizes[L]
        w_out = th[off:off + h_L * n].reshape((h_L, n))
        jv = np.dot(h_prev, vp[off:off + h_L * n].reshape((h_L, n)))
        if L > 0:
            jv += np.dot(dh, w_out)
        db_out = vp[off + h_L * n:off + h_L * n + n]
        u = np.empty((B, n), np.float32)
        inv_b = np.float32(1.0 / B)
        for i in range(B):
            if discrete:
                s = np.float32(0.0)
                for k in range(n):
                    s += m_out[p, i, k] * (jv[i, k] + db_out[k])
                for k in range(n):
                    u[i, k] = (m_out[p, i, k] * (jv[i, k] + db_out[k])
                               - m_out[p, i, k] * s) * inv_b
            else:
                for k in range(n):
                    u[i, k] = (jv[i, k] + db_out[k]) * m_out[p, 0, k] * inv_b
        # J^T u: the output layer, then the hidden layers as in critic_fit's backward pass
        grad[off:off + h_L * n] = np.dot(h_prev.T, u).reshape(-1)
        grad[off + h_L * n:off + h_L * n + n] = u.sum(0)
        if L > 0:
            hidden = [x]
            for layer in range(L):
                hidden.append(acts[layer][p])
            mlp_backward_hidden(th, sizes, relu, hidden, np.dot(u, w_out.T), grad)
        if not discrete:
            for k in range(n):
                grad[ls_off + k] = np.float32(2.0) * vp[ls_off + k]
        for j in range(grad.shape[0]):
            out[p, j] = grad[j] + np.float32(damping) * vp[j]


@njit(cache=True, error_model="numpy")
def gae(rewards, values, next_values, terminated, truncated, gamma, gl, adv):
    """batched.gae_numpy's backward loop over float32 [T, M] arrays (M = members x envs),
    writing the advantages into adv: the same operations in the same order (no fastmath), so
    the same bits. gamma and gl (gamma * lambda) are rounded to float32 as NumPy rounds a
    Python float meeting a float32 array."""
    T, M = rewards.shape
    g, g_l = np.float32(gamma), np.float32(gl)
    one, zero = np.float32(1.0), np.float32(0.0)
    last = np.zeros(M, np.float32)
    for t in range(T - 1, -1, -1):
        for i in range(M):
            not_term = zero if terminated[t, i] else one
            not_done = zero if (terminated[t, i] or truncated[t, i]) else one
            delta = rewards[t, i] + g * not_term * next_values[t, i] - values[t, i]
            last[i] = delta + g_l * not_done * last[i]
            adv[t, i] = last[i]
