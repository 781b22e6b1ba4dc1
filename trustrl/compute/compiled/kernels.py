"""Numba kernels of the compiled backend (trustrl.compute.compiled), imported only when it is used.

Arrays are float32 as the eager networks' are; matrix products go through np.dot (BLAS, from
scipy), elementwise work through loops that LLVM vectorises. Numba's np.tanh calls the C
library's tanhf once per element (about 40 ns each: pip's llvmlite has no vector maths
library), so tanh is a rational approximation written as a loop (the coefficients of Eigen's
float tanh; accurate to a few ulp, tested against NumPy's in tests/test_compiled.py).

Parameter layout (trustrl.nets.popnet.PopActorCritic.layout), for an MLP with layer sizes
`sizes` = (n_in, h_1, ..., h_L, n_out): w_1 [n_in, h_1] row-major, b_1 [h_1], ..., w_out
[h_L, n_out], b_out [n_out], one after the other.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from trustrl.compute.compiled.xp import compiled_source
from trustrl.maths import advantages, distributions, losses, optim
from trustrl.maths.trust import cg, line_search
from trustrl.nets import popnet

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


SMALL_ROWS = 8
"""Up to this many rows (an env step's batch) a layer's product is a loop: BLAS's call and
packing cost more than the product there (an MLP 4-64-64-2 on 4 rows: 3.4 against 5.4 us)."""


@njit(cache=True, fastmath=True, error_model="numpy")
def thin_out(h, W, bias, with_bias):
    """h @ W (+ bias) for a W of at most SMALL_ROWS columns (an output layer: a few actions,
    the critic's one): a dot product over each of W's columns, W.T copied contiguous; BLAS's
    product with so few columns runs at half the speed or less (512 x 64 @ 64 x 2: 8.6
    against 4.7 us; 128 rows: 2.3 against 1.2 us)."""
    M = h.shape[0]
    a, b = W.shape
    Wt = np.ascontiguousarray(W.T)  # [b, a], contiguous in a (a copy even for b = 1: a
    # view's layout is not C, and the loop below is then not vectorised: 12x slower)
    b0 = np.zeros(b, np.float32)
    if with_bias:
        b0[:] = bias
    z = np.empty((M, b), np.float32)
    for i in range(M):
        for k in range(b):
            acc = np.float32(0.0)
            for j in range(a):
                acc += h[i, j] * Wt[k, j]
            z[i, k] = acc + b0[k]
    return z


@njit(cache=True, fastmath=True, error_model="numpy")
def dense(h, W, bias):
    """h @ W + bias for h [M, a] and W [a, b] (C-contiguous float32): for an output layer of
    at most SMALL_ROWS units `thin_out` (a 4-64-64-2 MLP on 4 rows: 3.0 -> 2.5 us; the output
    layer alone 0.93 -> 0.12 us), else np.dot (BLAS), or loops for up to SMALL_ROWS rows:
    W's rows in the outer loop."""
    M = h.shape[0]
    a, b = W.shape
    if b <= SMALL_ROWS:
        return thin_out(h, W, bias, True)
    if M > SMALL_ROWS:
        z = np.dot(h, W)
        for i in range(M):  # elementwise, not a row slice per i: 3x faster
            for k in range(b):
                z[i, k] += bias[k]
        return z
    z = np.empty((M, b), np.float32)
    for i in range(M):
        for k in range(b):
            z[i, k] = bias[k]
    for j in range(a):  # W's row j once for every row of h
        for i in range(M):
            hij = h[i, j]
            for k in range(b):
                z[i, k] += hij * W[j, k]
    return z


@njit(cache=True, fastmath=True, error_model="numpy")
def dot_tn(a, b, out):
    """out = a.T @ b for a [M, A] and b [M, B] (C-contiguous float32; out [A, B] may be a
    reshaped slice of the gradient): np.dot (BLAS), or loops when A or B is at most
    SMALL_ROWS (a first layer's few inputs, an output layer's few actions), where BLAS's
    transposed product runs at 4-6 GFLOP/s (8-10 us for 4 x 128 @ 128 x 64)."""
    M, A = a.shape
    B = b.shape[1]
    if A > SMALL_ROWS and B > SMALL_ROWS:
        np.dot(a.T, b, out)
        return
    if B <= SMALL_ROWS:  # accumulate out.T [B, A] (contiguous in A), then write it out
        acc = np.zeros((B, A), np.float32)
        for i in range(M):
            for c in range(B):
                bic = b[i, c]
                for k in range(A):
                    acc[c, k] += bic * a[i, k]
        for k in range(A):
            for c in range(B):
                out[k, c] = acc[c, k]
        return
    for j in range(A):
        for k in range(B):
            out[j, k] = 0.0
    for i in range(M):
        for j in range(A):
            aij = a[i, j]
            for k in range(B):
                out[j, k] += aij * b[i, k]


@njit(cache=True, fastmath=True, error_model="numpy")
def activation(z, relu):
    """`activate_` returning z: the chain rule's `activate` (trustrl.nets.popnet) compiled."""
    activate_(z, relu)
    return z


@njit(cache=True, fastmath=True, error_model="numpy")
def linear(x, W):
    """x @ W: `thin_out` for a W of at most SMALL_ROWS columns, else np.dot (BLAS)."""
    if W.shape[1] <= SMALL_ROWS:
        return thin_out(x, W, W[0], False)
    return np.dot(x, W)


@njit(cache=True, fastmath=True, error_model="numpy")
def linear_t(g, W):
    """g @ W.T: for a W of at most SMALL_ROWS columns (an output layer's: the critic's one,
    a few actions) a loop over g's rows adding g[i, c] times W's column c (W.T copied
    contiguous), where BLAS's product of inner size 1 or 2 costs more than the arithmetic
    (and a dot product over the few columns per element ran at 1-2 GFLOP/s: 512 x 2 @ 2 x 64
    56 against 10.5 us); else np.dot with W.T copied contiguous: BLAS's transposed operand
    cost more than the copy (128 x 64 @ 64 x 64: 13.5-14.3 us, 11.1-12.2)."""
    a, b = W.shape
    if b > SMALL_ROWS:
        return np.dot(g, np.ascontiguousarray(W.T))
    Wt = np.ascontiguousarray(W.T)  # [b, a]
    out = np.zeros((g.shape[0], a), np.float32)
    for i in range(g.shape[0]):
        for c in range(b):
            gic = g[i, c]
            for j in range(a):
                out[i, j] += gic * Wt[c, j]
    return out


@njit(cache=True, fastmath=True, error_model="numpy")
def layer_grad(grads, i, x, g):
    """Layer i's gradient into its views grads[i] = (dW [a, b], db [b]) of the flat gradient:
    dW = x^T g (`dot_tn`), db = g summed over the rows."""
    dW, db = grads[i]
    dot_tn(x, g, dW)
    db[:] = 0.0
    for r in range(g.shape[0]):
        for k in range(g.shape[1]):
            db[k] += g[r, k]


@njit(cache=True, error_model="numpy")
def layer_views(theta, sizes):
    """The (W [a, b], b [b]) views of each layer of the MLP of layer sizes `sizes` whose
    parameters (or gradient, or a direction in parameter space) start at theta[0], in order,
    the output layer last: what trustrl.nets.popnet's chain rule takes as `layers`."""
    layers = []
    off = 0
    for layer in range(sizes.shape[0] - 1):
        a, b = sizes[layer], sizes[layer + 1]
        layers.append((theta[off:off + a * b].reshape((a, b)), theta[off + a * b:off + a * b + b]))
        off += a * b + b
    return layers


@njit(cache=True, fastmath=True, error_model="numpy")
def sum_squares(x):  # type: ignore[no-untyped-def]
    """sum x_j^2 of a 1-d float32 array, accumulated in float64 (fastmath: vectorised)."""
    s = 0.0
    for j in range(x.shape[0]):
        xj = np.float64(x[j])
        s += xj * xj
    return s


adam_step = compiled_source(optim, ("adam_step",), fastmath=True).adam_step
"""trustrl.maths.optim.adam_step compiled over trustrl.compute.compiled.xp: the Adam step PopAdam
runs."""


@njit(cache=True, fastmath=True, error_model="numpy")
def adam_(theta, m, v, grad, t, lr, b1, b2, eps):  # type: ignore[no-untyped-def]
    """One Adam step of the 1-d float32 arrays theta, m, v in place, with gradient grad and step
    count t (this step included): `adam_step` on each element, with the bias corrections of
    count t, every scalar float32 (so float32 arithmetic)."""
    f32 = np.float32
    c1, beta2, c2, e = f32(1.0 - b1), f32(b2), f32(1.0 - b2), f32(eps)
    step, bc2 = f32(lr / (1.0 - b1 ** t)), f32(math.sqrt(1.0 - b2 ** t))
    for j in range(theta.shape[0]):
        theta[j], m[j], v[j] = adam_step(theta[j], m[j], v[j], grad[j], c1, beta2, c2, e, step,
                                         bc2)


_DISTRIBUTIONS = compiled_source(distributions, (
    "gaussian_log_density", "gaussian_entropy_density", "gaussian_kl_density",
    "gaussian_var_ratio", "log_softmax", "categorical_entropy", "categorical_kl",
    "mask_logits"),
    ("categorical_logp_grad", "categorical_entropy_grad", "categorical_kl_grad",
     *distributions.GAUSSIAN_GRADS))
gaussian_log_density = _DISTRIBUTIONS.gaussian_log_density
gaussian_entropy_density = _DISTRIBUTIONS.gaussian_entropy_density
gaussian_kl_density = _DISTRIBUTIONS.gaussian_kl_density
gaussian_var_ratio = _DISTRIBUTIONS.gaussian_var_ratio
"""trustrl.maths.distributions' Gaussian densities compiled over trustrl.compute.compiled.xp,
called on
float32 scalars in the loops below (compiled/rollout.py and compiled/ppo.py too)."""
log_softmax = _DISTRIBUTIONS.log_softmax
categorical_entropy = _DISTRIBUTIONS.categorical_entropy
categorical_kl = _DISTRIBUTIONS.categorical_kl
"""trustrl.maths.distributions' categorical log-softmax, entropy and KL compiled over
trustrl.compute.compiled.xp, called on a batch's rows of logits [..., n] (float32) below and in
compiled/rollout.py and compiled/ppo.py."""
mask_logits = _DISTRIBUTIONS.mask_logits
"""trustrl.maths.distributions.mask_logits compiled over trustrl.compute.compiled.xp: a member's
logits [B, n] with the invalid actions' (mask [B, n] False) at MASKED_LOGIT, before any
log-softmax of a masked batch (below and in compiled/ppo.py)."""


@njit(cache=True, error_model="numpy")
def masked(out, mask, p):  # type: ignore[no-untyped-def]
    """Member p's logits `out` [B, n] masked by its rows of `mask` [P, B, n] (bool;
    `mask_logits`), or `out` itself where `mask` is the unmasked batch's zero-size sentinel
    (NO_MASK): one test per member on an unmasked batch."""
    if mask.shape[0] == 0:
        return out
    return mask_logits(out, mask[p])


NO_MASK = np.zeros((0, 0, 0), np.bool_)
"""The kernels' `mask` on an unmasked batch: zero-size, of the masks' own type (bool, 3-d), so
that masked and unmasked batches run the same compiled code."""
categorical_logp_grad = _DISTRIBUTIONS.categorical_logp_grad
categorical_entropy_grad = _DISTRIBUTIONS.categorical_entropy_grad
categorical_kl_grad = _DISTRIBUTIONS.categorical_kl_grad
(gaussian_logp_grad_mean, gaussian_logp_grad_log_std, gaussian_entropy_grad_log_std,
 gaussian_kl_grad_mean, gaussian_kl_grad_log_std) = (
    getattr(_DISTRIBUTIONS, name) for name in distributions.GAUSSIAN_GRADS)
"""trustrl.maths.distributions' categorical derivatives in the logits and the Gaussian's in its
mean and log-std, elementwise (trustrl.compute.compiled.xp.elementwise): called on float32
scalars in PPO's epoch loop and the policy gradient."""
HALF_LOG_2PI = np.float32(distributions.HALF_LOG_2PI)
ZERO, HALF, ONE, TWO = np.float32(0.0), np.float32(0.5), np.float32(1.0), np.float32(2.0)


# after _DISTRIBUTIONS: binding popnet binds the distributions functions it imports, and
# those must be bound (elementwise or not) as above first
_MLP = compiled_source(popnet, (
    "mlp_hidden_outputs", "mlp_output", "mlp_hidden_grads", "mlp_grads", "mlp_jvp"),
    ("activation_grad",), fastmath=True,
    bind={"affine": dense, "linear": linear, "linear_t": linear_t, "layer_grad": layer_grad,
          "activate": activation})
"""trustrl.nets.popnet's chain rule (the MLP's forward pass, gradient and forward-mode product)
compiled over trustrl.compute.compiled.xp, with this module's products, activation and gradient
writer as its free globals; `activation_grad` elementwise (one loop: as an array expression it
ran at about 5 us on a 128 x 64 minibatch inside PPO's epochs, a quarter of their compiled time
outside BLAS, against about 1 us as the loop, 2026-12-07)."""
mlp_hidden_outputs = _MLP.mlp_hidden_outputs
mlp_output = _MLP.mlp_output
mlp_hidden_grads = _MLP.mlp_hidden_grads
mlp_grads = _MLP.mlp_grads
mlp_jvp = _MLP.mlp_jvp


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_forward(theta, sizes, relu, x):
    """The hidden layers' outputs [x, h_1, ..., h_L] of the MLP whose parameters start at
    theta[0] (a 1-d float32 array), for inputs x [M, n_in] (C-contiguous float32)."""
    return mlp_hidden_outputs(layer_views(theta, sizes), x, relu)


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_out(theta, sizes, relu, x):
    """The MLP's output [M, n_out] (no activation on the output layer) for inputs x [M, n_in]."""
    return mlp_output(layer_views(theta, sizes), x, relu)[0]


@njit(cache=True, fastmath=True, error_model="numpy")
def mlp_backward_hidden(theta, sizes, relu, acts, g_h, grad):
    """Push dLoss/dh_L [M, h_L] back through the hidden layers: writes dW and db of every
    hidden layer into grad (the layout's offsets)."""
    mlp_hidden_grads(layer_views(theta, sizes), acts, g_h, relu, layer_views(grad, sizes))


@njit(cache=True, fastmath=True, error_model="numpy")
def critic_fit(flat, c0, sizes, relu, adam, obs, ret, order, mb, last):  # type: ignore[no-untyped-def]  # noqa: E501
    """The critic's regression for P members (algos.common.fit_critic): for each epoch e and
    member p, the minibatches of `mb` samples in the order order[e, p], 1/2 mean (V - R)^2,
    its gradient and one Adam step (trustrl.maths.optim's arithmetic; `adam` a records.Adam whose
    step counts t [P] the caller advances). The critic (layer sizes `sizes`) has the columns
    c0: c0 + D of flat [P, *], its Adam moments m, v [P, D]: all updated in place; last[p]
    gets the mean minibatch loss of the last epoch."""
    m, v, t, lr, b1, b2, eps = adam
    P, N = ret.shape
    E = order.shape[0]
    D = m.shape[1]
    n_in = sizes[0]
    for p in range(P):
        th = flat[p, c0:c0 + D].copy()
        mm = m[p].copy()
        vv = v[p].copy()
        tp = t[p]
        grad = np.zeros(D, np.float32)
        layers = layer_views(th, sizes)  # views: they follow th as Adam moves it in place
        grads = layer_views(grad, sizes)
        for e in range(E):
            acc = np.float32(0.0)
            n_mb = 0
            for s in range(0, N, mb):
                M = min(mb, N - s)
                x = np.empty((M, n_in), np.float32)
                y = np.empty(M, np.float32)
                for i in range(M):  # element by element: a row slice per i costs more
                    j = order[e, p, s + i]
                    for k in range(n_in):
                        x[i, k] = obs[p, j, k]
                    y[i] = ret[p, j]
                value, acts = mlp_output(layers, x, relu)  # trustrl.nets.popnet's chain rule
                d_v = np.empty((M, 1), np.float32)
                loss = np.float32(0.0)
                for i in range(M):
                    err = value[i, 0] - y[i]
                    loss += np.float32(0.5) * err * err
                    d_v[i, 0] = err / np.float32(M)
                acc += loss / np.float32(M)
                n_mb += 1
                mlp_grads(layers, acts, d_v, relu, grads)
                tp += 1.0
                adam_(th, mm, vv, grad, tp, lr, b1, b2, eps)
            last[p] = acc / np.float32(n_mb)
        flat[p, c0:c0 + D] = th
        m[p] = mm
        v[p] = vv


@njit(cache=True, fastmath=True, error_model="numpy")
def actor_fisher_product(flat, sizes, relu, obs, acts, m_out, discrete, v, damping, ls_off,
                         out):
    """(F + damping I) v for P members (backends.ClosedForm.fisher_product as one loop): J v
    by forward mode through the actor MLP (trustrl.nets.popnet's `mlp_jvp`), u = M J v / B with M
    the KL's Hessian in the output space (diag(p) - p p^T, p = m_out [P, B, n], for a softmax;
    1 / sigma^2, m_out [P, 1, n], for a Gaussian's mean), then J^T u (`mlp_grads`); 2 v on
    each log-std column (at ls_off, Gaussian only). flat [P, *] holds the actor's parameters
    from column 0; acts [h_1 [P, B, h_1], ..., h_L] are the hidden outputs at theta_old; v and
    out are [P, D] (on the critic's columns out is damping v, as the eager product's)."""
    P, B = obs.shape[0], obs.shape[1]
    L = sizes.shape[0] - 2
    n = sizes[L + 1]
    inv_b = np.float32(1.0 / B)
    for p in range(P):
        vp = v[p].copy()
        grad = np.zeros(vp.shape[0], np.float32)
        layers = layer_views(flat[p], sizes)
        hidden = [obs[p]]
        for layer in range(L):
            hidden.append(acts[layer][p])
        jv = mlp_jvp(layers, layer_views(vp, sizes), hidden, relu)  # trustrl.nets.popnet's
        u = np.empty((B, n), np.float32)
        for i in range(B):
            if discrete:
                s = np.float32(0.0)
                for k in range(n):
                    s += m_out[p, i, k] * jv[i, k]
                for k in range(n):
                    u[i, k] = (m_out[p, i, k] * jv[i, k] - m_out[p, i, k] * s) * inv_b
            else:
                for k in range(n):
                    u[i, k] = jv[i, k] * m_out[p, 0, k] * inv_b
        mlp_grads(layers, hidden, u, relu, layer_views(grad, sizes))  # J^T u
        if not discrete:
            for k in range(n):
                grad[ls_off + k] = np.float32(2.0) * vp[ls_off + k]
        for j in range(grad.shape[0]):
            out[p, j] = grad[j] + np.float32(damping) * vp[j]


@njit(cache=True, fastmath=True, error_model="numpy")
def fisher_product_of(args, v):  # type: ignore[no-untyped-def]
    """(F + damping I) v for the product's arguments `args` (flat, sizes, relu, obs, acts,
    m_out, discrete, damping, ls_off: actor_fisher_product's): the `product` that
    trustrl.maths.trust.cg.cg_steps calls, compiled."""
    flat, sizes, relu, obs, acts, m_out, discrete, damping, ls_off = args
    out = np.empty_like(v)
    actor_fisher_product(flat, sizes, relu, obs, acts, m_out, discrete, v, damping, ls_off, out)
    return out


_CG = compiled_source(cg, ("cg_steps", "natural_step"), bind={"product": fisher_product_of})
cg_steps = _CG.cg_steps
"""trustrl.maths.trust.cg.cg_steps compiled over trustrl.compute.compiled.xp with the compiled
Fisher-vector
product: TRPO's and NPG's whole conjugate gradient in one call (before: one call per product,
the CG arithmetic in eager torch between them)."""
natural_step = _CG.natural_step
"""trustrl.maths.trust.cg.natural_step compiled the same way: the CG, x^T F x and the step
size of TRPO and NPG in one call (its arithmetic after the CG in float64, the results
returned as float32 by trustrl.compute.compiled)."""


gae_into = compiled_source(advantages, ("gae_into",), ("gae_step",)).gae_into
"""trustrl.maths.advantages.gae_into compiled over trustrl.compute.compiled.xp: GAE's recursion,
the code the
torch and NumPy paths run (float32 scalars in, so float32 arithmetic, the same bits)."""


@njit(cache=True, error_model="numpy")
def actor_log_probs(policy, p, obs, act_i, act_f, old_out, flat_old, mask):  # type: ignore[no-untyped-def]  # noqa: E501
    """Member p's actor on its whole batch (mlp_out), then per sample (float32): log pi(a|s),
    the entropy and the exact KL(pi_old || pi) from old_out and flat_old's log-std
    (trustrl.maths.distributions' categorical or diagonal Gaussian functions, compiled).
    `policy` a records.Policy: flat [P, *] holds the actor's parameters from column 0 (the
    log-std at ls_off for a Gaussian); act_i [P, B] the actions of a softmax, act_f [P, B, n]
    a Gaussian's; mask [P, B, n] the valid actions of a masked softmax batch (NO_MASK: none),
    its logits masked before the log-softmax (`masked`; old_out then holds pi_old's masked
    logits). What ppo_diagnostics and surrogate_kl read."""
    flat, sizes, relu, discrete, _, ls_off = policy
    B = obs.shape[1]
    n = sizes[sizes.shape[0] - 1]
    f32 = np.float32
    out = mlp_out(flat[p], sizes, relu, np.ascontiguousarray(obs[p]))
    logp = np.empty(B, f32)
    if discrete:  # on the member's whole batch
        lsm = log_softmax(masked(out, mask, p))
        for i in range(B):
            logp[i] = lsm[i, act_i[p, i]]
        return logp, categorical_entropy(lsm), categorical_kl(log_softmax(old_out[p]), lsm)
    inv_std = np.empty(n, f32)
    var_ratio = np.empty(n, f32)
    ent_box = f32(0.0)
    for k in range(n):
        ent_box += gaussian_entropy_density(flat[p, ls_off + k], HALF, HALF_LOG_2PI)
        inv_std[k] = np.exp(-flat[p, ls_off + k])
        var_ratio[k] = gaussian_var_ratio(flat_old[p, ls_off + k], flat[p, ls_off + k], TWO)
    kl = np.empty(B, f32)
    for i in range(B):
        lp = f32(0.0)
        kl_i = f32(0.0)
        for k in range(n):
            ls = flat[p, ls_off + k]
            lp += gaussian_log_density(act_f[p, i, k], out[i, k], ls, inv_std[k], HALF,
                                       HALF_LOG_2PI)
            kl_i += gaussian_kl_density(old_out[p, i, k], flat_old[p, ls_off + k], out[i, k], ls,
                                        inv_std[k], var_ratio[k], HALF, ONE, TWO)
        logp[i] = lp
        kl[i] = kl_i
    return logp, np.full(B, ent_box, f32), kl


@njit(cache=True, error_model="numpy")
def ppo_diagnostics(policy, obs, act_i, act_f, logp_old, old_out, flat_old, clip_eps, qs, res, mask):  # type: ignore[no-untyped-def]  # noqa: E501
    """algos.common.diagnostics for P members in one call: per member, `actor_log_probs` (log
    pi(a|s), the entropy, the exact KL(pi_old || pi)), log_ratio = logp - logp_old and the
    ratio (float32, as torch), and res [P, 7 + len(qs)]: entropy, approx_kl (k3: expm1(r) -
    r), approx_kl_k1, kl_exact, clip_fraction (outside 1 +- clip_eps), ratio_min, ratio_max,
    then the ratio's quantiles qs (linear interpolation of the sorted ratios in float64, as
    common.quantiles). Means accumulate in float64. mask: the batch's valid actions (NO_MASK:
    none), as `actor_log_probs` takes them."""
    P, B = logp_old.shape
    f32 = np.float32
    for p in range(P):
        logp, ent, kl = actor_log_probs(policy, p, obs, act_i, act_f, old_out, flat_old, mask)
        ratio = np.empty(B, np.float64)
        s_ent = 0.0
        s_k3 = 0.0
        s_k1 = 0.0
        s_kl = 0.0
        clipped = 0
        for i in range(B):
            lr = logp[i] - logp_old[p, i]
            r = np.exp(lr)
            ratio[i] = r
            s_ent += ent[i]
            s_k3 += np.expm1(lr) - lr
            s_k1 -= lr
            s_kl += kl[i]
            if r > f32(1.0 + clip_eps) or r < f32(1.0 - clip_eps):
                clipped += 1
        s = np.sort(ratio)
        res[p, 0] = s_ent / B
        res[p, 1] = s_k3 / B
        res[p, 2] = s_k1 / B
        res[p, 3] = s_kl / B
        res[p, 4] = clipped / B
        res[p, 5] = s[0]
        res[p, 6] = s[B - 1]
        for j in range(qs.shape[0]):
            pos = qs[j] * (B - 1)
            lo = math.floor(pos)
            hi = math.ceil(pos)
            res[p, 7 + j] = s[lo] + (s[hi] - s[lo]) * (pos - lo)


_SURROGATE = compiled_source(losses, ("policy_ratio", "surrogate_objective"))
policy_ratio = _SURROGATE.policy_ratio
"""trustrl.maths.losses.policy_ratio (rho = exp(logp - logp_old)) compiled over
trustrl.compute.compiled.xp."""
surrogate_objective = _SURROGATE.surrogate_objective
"""trustrl.maths.losses.surrogate_objective (rho A per sample) compiled over
trustrl.compute.compiled.xp."""


@njit(cache=True, error_model="numpy")
def surrogate_kl(policy, obs, act_i, act_f, logp_old, adv, old_out, flat_old, res, mask):  # type: ignore[no-untyped-def]  # noqa: E501
    """TRPO's line-search evaluation (algos.trpo.TRPO.surrogate_kl) for P members in one
    call, at the parameters of `policy` (a candidate): per member, res[p] = (the surrogate
    mean(rho A), losses.surrogate_objective's mean, and the mean exact KL(pi_old || pi)),
    from `actor_log_probs`; rho = exp(logp - logp_old) in float32, as torch, the means in
    float64. mask: the batch's valid actions (NO_MASK: none)."""
    P = logp_old.shape[0]
    for p in range(P):
        logp, _, kl = actor_log_probs(policy, p, obs, act_i, act_f, old_out, flat_old, mask)
        surr = surrogate_objective(policy_ratio(logp, logp_old[p]), adv[p])
        res[p, 0] = surr.astype(np.float64).mean()
        res[p, 1] = kl.astype(np.float64).mean()


@njit(cache=True, error_model="numpy")
def surrogate_kl_of(args, cand):  # type: ignore[no-untyped-def]
    """(mean(rho A), mean KL(pi_old || pi)) per member [P] at the parameters cand [P, D]
    (`surrogate_kl`), float32 as the eager evaluation returns them: the `evaluate` that
    trustrl.maths.trust.line_search.line_search_steps calls, compiled. `args`: (sizes, relu,
    discrete, c0, ls_off: a records.Policy's fields after flat; obs, act_i, act_f, logp_old,
    adv, old_out, flat_old, mask: surrogate_kl's batch)."""
    sizes, relu, discrete, c0, ls_off, obs, act_i, act_f, logp_old, adv, old_out, flat_old, \
        mask = args
    res = np.empty((logp_old.shape[0], 2), np.float64)
    surrogate_kl((cand, sizes, relu, discrete, c0, ls_off), obs, act_i, act_f, logp_old, adv,
                 old_out, flat_old, res, mask)
    return res[:, 0].astype(np.float32), res[:, 1].astype(np.float32)


line_search_steps = compiled_source(line_search, ("line_search_steps",),
                                    bind={"evaluate": surrogate_kl_of}).line_search_steps
"""trustrl.maths.trust.line_search.line_search_steps compiled over trustrl.compute.compiled.xp
with the compiled evaluation `surrogate_kl_of`: TRPO's whole backtracking line search in one
call (before: one call per candidate, the search's bookkeeping in eager torch between them)."""


@njit(cache=True, fastmath=True, error_model="numpy")
def policy_gradient(policy, obs, act_i, act_f, logp_old, adv, grad, old_out, res, mask):  # type: ignore[no-untyped-def]  # noqa: E501
    """TRPO's and NPG's policy gradient (backends.ClosedForm.policy_gradient) for P members in
    one call, at the parameters of `policy` (theta_old): the actor's output into old_out [P,
    B, n] (popnet's mlp_output), rho = exp(logp - logp_old), the surrogate rho A
    (losses.surrogate_objective) with its mean into res [P], and the gradient of mean(rho A)
    into grad [P, D] (zero outside the actor's columns): g = rho A / B per sample in log pi,
    through the distribution (distributions' categorical_logp_grad, or the Gaussian's
    gaussian_logp_grad_mean and _log_std, the log-std's summed over the batch) and the actor
    (popnet's mlp_grads). mask [P, B, n]: a masked softmax batch's valid actions (NO_MASK:
    none), the output masked first (`masked`): old_out gets the masked logits, and an
    invalid logit's gradient is 0 (its probability is)."""
    flat, sizes, relu, discrete, _, ls_off = policy
    P, B = logp_old.shape
    n = sizes[sizes.shape[0] - 1]
    f32 = np.float32
    b = f32(B)
    inv_std = np.empty(n, f32)
    g_ls = np.empty(n, f32)
    for p in range(P):
        layers = layer_views(flat[p], sizes)
        out, acts = mlp_output(layers, np.ascontiguousarray(obs[p]), relu)
        if discrete:
            out = masked(out, mask, p)
        old_out[p] = out
        g_out = np.empty((B, n), f32)
        s = 0.0
        if discrete:
            lsm = log_softmax(out)
            for i in range(B):
                a = act_i[p, i]
                surr = surrogate_objective(policy_ratio(lsm[i, a], logp_old[p, i]), adv[p, i])
                s += surr
                g = surr / b
                for k in range(n):
                    g_out[i, k] = categorical_logp_grad(g, ONE if k == a else ZERO,
                                                        np.exp(lsm[i, k]))
        else:
            for k in range(n):
                inv_std[k] = np.exp(-flat[p, ls_off + k])
                g_ls[k] = ZERO
            for i in range(B):
                lp = ZERO
                for k in range(n):
                    lp += gaussian_log_density(act_f[p, i, k], out[i, k], flat[p, ls_off + k],
                                               inv_std[k], HALF, HALF_LOG_2PI)
                surr = surrogate_objective(policy_ratio(lp, logp_old[p, i]), adv[p, i])
                s += surr
                g = surr / b
                for k in range(n):
                    z = (act_f[p, i, k] - out[i, k]) * inv_std[k]
                    g_out[i, k] = gaussian_logp_grad_mean(g, z, inv_std[k])
                    g_ls[k] += gaussian_logp_grad_log_std(g, z, ONE)
        grad[p] = ZERO
        mlp_grads(layers, acts, g_out, relu, layer_views(grad[p], sizes))
        if not discrete:
            for k in range(n):
                grad[p, ls_off + k] = g_ls[k]
        res[p] = s / B
