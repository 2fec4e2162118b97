"""Closed-form Jacobian determinants (ppl_loo.numerics.structured) against autodiff + slogdet."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_loo.numerics.structured import (
    glm_logdet,
    kl_var_coefficients,
    ll_coefficients,
    relu_flatten,
    relu_grad_mu,
    relu_logdet,
    relu_mu,
    relu_param_dim,
    relu_unflatten,
)

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

RTOL = 1e-10
ATOL = 1e-11


# ---------------------------------------------------------------------------------------------
# plain reference implementations on the flat parameter vector
# ---------------------------------------------------------------------------------------------


def mu_flat(theta, x, H, p):
    """Plain mu(theta) of the ReLU net, independent of the module under test."""
    W1 = theta[: H * p].reshape(H, p)
    W2 = theta[H * p : H * p + H]
    b2 = theta[-1]
    return jnp.dot(W2, jax.nn.relu(W1 @ x)) + b2


def ref_slogdet_star(alpha, u, theta, x, H, p):
    """slogdet(I + alpha Hess(mu) + grad(mu) u^T) with autodiff, one draw."""
    Hm = jax.hessian(mu_flat)(theta, x, H, p)
    g = jax.grad(mu_flat)(theta, x, H, p)
    J = jnp.eye(theta.shape[0]) + alpha * Hm + jnp.outer(g, u)
    s, l = jnp.linalg.slogdet(J)
    return l, s


def make_x(rng, p):
    return np.concatenate([rng.normal(size=p - 1), [1.0]])


def make_draws(rng, S, H, p, x, n_inactive):
    """W1 (S,H,p), W2 (S,H), b2 (S,), with ``n_inactive`` units forced to W1_k . x < 0 per draw."""
    W1 = rng.normal(size=(S, H, p))
    W2 = rng.normal(size=(S, H))
    b2 = rng.normal(size=S)
    xx = x @ x
    for s in range(S):
        # make all units active first (well away from the kink), then force some inactive
        for k in range(H):
            z = W1[s, k] @ x
            target = rng.uniform(0.3, 2.0)
            W1[s, k] += (target - z) * x / xx
        off = rng.choice(H, size=n_inactive, replace=False)
        for k in off:
            z = W1[s, k] @ x
            target = -rng.uniform(0.3, 2.0)
            W1[s, k] += (target - z) * x / xx
    return W1, W2, b2


def check_slog(got, ref):
    lg, sg = (np.asarray(a) for a in got)
    lr, sr = (np.asarray(a) for a in ref)
    np.testing.assert_array_equal(sg, sr)
    np.testing.assert_allclose(lg, lr, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# ReLU: mu, gradient, flatten
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("H,p,S", [(3, 4, 7), (5, 7, 12), (3, 6, 20), (5, 5, 5)])
def test_relu_mu_and_grad_match_autodiff(H, p, S):
    rng = np.random.default_rng(100 * H + p)
    x = make_x(rng, p)
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive=1)
    theta = relu_flatten(W1, W2, b2)
    assert theta.shape == (S, relu_param_dim(H, p))
    W1b, W2b, b2b = relu_unflatten(theta, H, p)
    np.testing.assert_array_equal(W1b, W1)
    np.testing.assert_array_equal(W2b, W2)
    np.testing.assert_array_equal(b2b, b2)

    mu_ref = jax.vmap(lambda t: mu_flat(t, x, H, p))(theta)
    np.testing.assert_allclose(relu_mu(W1, W2, b2, x), mu_ref, rtol=1e-13, atol=1e-13)
    g_ref = jax.vmap(jax.grad(lambda t: mu_flat(t, x, H, p)))(theta)
    g = relu_grad_mu(W1, W2, b2, x)
    assert g.shape == (S, relu_param_dim(H, p))
    np.testing.assert_allclose(g, g_ref, rtol=1e-13, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# ReLU: general (*) against autodiff Hessian + slogdet
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "H,p,S,n_inactive",
    [(3, 4, 5, 1), (3, 7, 20, 2), (5, 4, 10, 2), (5, 7, 16, 1), (5, 5, 8, 0), (3, 5, 6, 3)],
)
def test_relu_logdet_matches_slogdet(H, p, S, n_inactive):
    rng = np.random.default_rng(7 + 31 * H + p + 1000 * n_inactive)
    x = make_x(rng, p)
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive)
    P = relu_param_dim(H, p)
    theta = relu_flatten(W1, W2, b2)
    # |u_k| = |x| for active units: alpha |x| spread over (0, 2) makes 1 - alpha|u_k| change sign
    xn = np.linalg.norm(x)
    alpha = rng.uniform(-2.0, 2.0, size=S) / xn
    u = rng.normal(size=(S, P)) * rng.uniform(0.05, 3.0, size=(S, 1))
    # draw 0: alpha = 0, u = -3 e_b2 gives det = -2 exactly (a guaranteed negative determinant);
    # draw 1: u = 0 gives det = prod_k (1 - alpha^2 |u_k|^2), negative for an odd number of
    # active units with alpha |x| > 1
    u[0] = 0.0
    u[0, -1] = -3.0
    alpha[0] = 0.0
    u[1] = 0.0
    alpha[1] = 1.5 / xn
    ref = jax.vmap(lambda a, uu, t: ref_slogdet_star(a, uu, t, x, H, p))(alpha, u, theta)
    got = relu_logdet(alpha, u, W1, W2, x)
    assert got[0].shape == (S,) and got[1].shape == (S,)
    check_slog(got, ref)
    assert np.all(np.isfinite(got[0]))
    assert float(got[1][0]) == -1.0
    np.testing.assert_allclose(got[0][0], np.log(2.0), rtol=1e-14)
    n_act = H - n_inactive
    np.testing.assert_allclose(got[0][1], n_act * np.log(1.25), rtol=1e-13)
    assert float(got[1][1]) == (-1.0) ** n_act


def test_relu_logdet_step_grid_broadcast_and_jit():
    H, p, S, G = 5, 6, 9, 4
    rng = np.random.default_rng(3)
    x = make_x(rng, p)
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive=2)
    P = relu_param_dim(H, p)
    theta = relu_flatten(W1, W2, b2)
    hgrid = 4.0 ** -np.arange(G)  # (G,)
    A = rng.normal(size=S)
    b = rng.normal(size=(S, P))
    alpha, u = kl_var_coefficients(hgrid[:, None] * 3.0, A, b)  # (G, S), (G, S, P)
    assert alpha.shape == (G, S) and u.shape == (G, S, P)
    got = jax.jit(relu_logdet)(alpha, u, W1, W2, x)
    assert got[0].shape == (G, S)
    ref_fn = jax.vmap(jax.vmap(lambda a, uu, t: ref_slogdet_star(a, uu, t, x, H, p)), (0, 0, None))
    check_slog(got, ref_fn(alpha, u, theta))


def test_relu_all_inactive_and_zero_alpha():
    H, p, S = 3, 5, 6
    rng = np.random.default_rng(11)
    x = make_x(rng, p)
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive=H)
    P = relu_param_dim(H, p)
    u = rng.normal(size=(S, P)) * 0.3
    alpha = rng.normal(size=S)
    l, s = relu_logdet(alpha, u, W1, W2, x)
    # all units inactive: grad(mu) = e_b2, Hess = 0 -> det = 1 + u_b2
    np.testing.assert_allclose(l, np.log(np.abs(1 + u[:, -1])), rtol=1e-14)
    np.testing.assert_array_equal(s, np.sign(1 + u[:, -1]))
    # zero alpha and u: identity
    l0, s0 = relu_logdet(np.zeros(S), np.zeros((S, P)), W1, W2, x)
    np.testing.assert_array_equal(l0, 0.0)
    np.testing.assert_array_equal(s0, 1.0)
    # gradients through the formula are finite even with inactive units
    grad = jax.grad(lambda a: jnp.sum(relu_logdet(a, u, W1, W2, x)[0]))(alpha)
    assert np.all(np.isfinite(grad))


def test_relu_singular_hessian_block():
    """alpha |u_k| = 1: M = I + alpha Hess(mu) is singular, det J stays exact (no 0/0).

    All active units share |u_k| = |x|, so 1 - alpha|x| is an eigenvalue of M with multiplicity
    n_active; the rank-one term lifts at most one of them. With one active unit det J is finite
    and nonzero, with two or more it is exactly 0 (sign 0, logabsdet -inf, as slogdet reports).
    """
    H, p, S = 3, 4, 5
    rng = np.random.default_rng(5)
    P = relu_param_dim(H, p)
    x1 = np.array([0.0, 0.0, 0.0, 1.0])  # |x| = 1: alpha = 1 is exactly singular
    u = rng.normal(size=(S, P))
    alpha1 = np.ones(S)
    # one active unit: finite, matches the autodiff reference
    W1, W2, b2 = make_draws(rng, S, H, p, x1, n_inactive=H - 1)
    theta = relu_flatten(W1, W2, b2)
    ref = jax.vmap(lambda a, uu, t: ref_slogdet_star(a, uu, t, x1, H, p))(alpha1, u, theta)
    got = relu_logdet(alpha1, u, W1, W2, x1)
    assert np.all(np.isfinite(got[0]))
    check_slog(got, ref)
    # same with a generic |x| and alpha = 1/|x| up to rounding
    x = make_x(rng, p)
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive=H - 1)
    theta = relu_flatten(W1, W2, b2)
    alpha = np.full(S, 1.0 / np.linalg.norm(x))
    ref = jax.vmap(lambda a, uu, t: ref_slogdet_star(a, uu, t, x, H, p))(alpha, u, theta)
    check_slog(relu_logdet(alpha, u, W1, W2, x), ref)
    # two active units, exactly singular: det J = 0 exactly, no NaN
    W1, W2, b2 = make_draws(rng, S, H, p, x1, n_inactive=1)
    l, s = relu_logdet(alpha1, u, W1, W2, x1)
    assert np.all(np.asarray(l) == -np.inf) and np.all(np.asarray(s) == 0.0)


def test_relu_large_network_no_overflow():
    """Many units with |d_k| >> 1: the rescaled products stay finite and agree with slogdet."""
    H, p, S = 60, 4, 3
    rng = np.random.default_rng(9)
    x = make_x(rng, p)
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive=10)
    P = relu_param_dim(H, p)
    theta = relu_flatten(W1, W2, b2)
    alpha = np.array([1e4, -3e3, 5e2]) / np.linalg.norm(x)
    u = rng.normal(size=(S, P))
    ref = jax.vmap(lambda a, uu, t: ref_slogdet_star(a, uu, t, x, H, p))(alpha, u, theta)
    got = relu_logdet(alpha, u, W1, W2, x)
    assert np.all(np.isfinite(got[0]))
    assert float(got[0][0]) > 800  # |det| > 1e347: naive float64 products would overflow
    lg, sg = (np.asarray(a) for a in got)
    lr, sr = (np.asarray(a) for a in ref)
    np.testing.assert_array_equal(sg, sr)
    np.testing.assert_allclose(lg, lr, rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# GLM
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q,S", [(4, 5), (7, 20)])
def test_glm_logdet_matches_slogdet(q, S):
    rng = np.random.default_rng(q)
    x = make_x(rng, q)
    u = rng.normal(size=(S, q)) * rng.uniform(0.1, 1.5, size=(S, 1))
    alpha = rng.normal(size=S)
    ref = jax.vmap(lambda uu: jnp.linalg.slogdet(jnp.eye(q) + jnp.outer(x, uu))[::-1])(u)
    got = glm_logdet(alpha, u, x)
    assert got[0].shape == (S,)
    check_slog(got, ref)
    assert np.any(np.asarray(got[1]) < 0) and np.any(np.asarray(got[1]) > 0)
    # grid of step sizes, jit, x broadcast over draws
    u3 = u[None] * np.array([1.0, 0.25, 1 / 16])[:, None, None]
    got3 = jax.jit(glm_logdet)(None, u3, np.broadcast_to(x, (S, q)))
    assert got3[0].shape == (3, S)
    np.testing.assert_allclose(got3[0][0], got[0], rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# end to end: exact Jacobian of theta + h Q(theta) for the concrete transformations
# ---------------------------------------------------------------------------------------------


def _toy_relu_problem(H, p, n, seed):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(size=(n, p - 1)), np.ones((n, 1))], axis=1)
    y = rng.integers(0, 2, size=n).astype(float)
    return rng, X, y


def _logp_relu(theta, X, y, H, p):
    """Toy unnormalized log posterior: N(0, I) prior + Bernoulli-logit likelihood."""
    mus = jax.vmap(lambda xx: mu_flat(theta, xx, H, p))(X)
    return -0.5 * theta @ theta + jnp.sum(y * mus - jnp.logaddexp(0.0, mus))


def _relu_draws_for_obs(rng, S, H, p, x):
    W1, W2, b2 = make_draws(rng, S, H, p, x, n_inactive=1)
    return W1, W2, b2, relu_flatten(W1, W2, b2)


@pytest.mark.parametrize("kappa", [1, 2])
@pytest.mark.parametrize("H,p", [(3, 4), (5, 6)])
def test_relu_kl_var_end_to_end(kappa, H, p):
    n, S, i = 8, 6, 2
    rng, X, y = _toy_relu_problem(H, p, n, seed=kappa + 10 * H)
    x, yi = X[i], y[i]
    W1, W2, b2, theta = _relu_draws_for_obs(rng, S, H, p, x)
    sgn = 1.0 - 2.0 * yi

    def log_abs_A(t):
        return _logp_relu(t, X, y, H, p) + kappa * mu_flat(t, x, H, p) * sgn

    def Q(t):
        return sgn * jnp.exp(log_abs_A(t)) * jax.grad(mu_flat)(t, x, H, p)

    logp_grad = jax.vmap(jax.grad(lambda t: _logp_relu(t, X, y, H, p)))(theta)
    logA = jax.vmap(log_abs_A)(theta)
    A = sgn * jnp.exp(logA)
    g = relu_grad_mu(W1, W2, b2, x)
    b = logp_grad + kappa * sgn * g
    exact = jax.jit(jax.vmap(lambda t, h: jnp.linalg.slogdet(jax.jacfwd(lambda v: v + h * Q(v))(t))))
    n_neg = 0
    for target in (0.05, 0.4, 1.3):  # per-draw h*A*|u_k| scales, the largest flips signs
        h = target / (np.abs(np.asarray(A)) * np.linalg.norm(x))  # (S,): one h per draw here
        sr, lr = exact(theta, h)
        alpha, u = kl_var_coefficients(h, A, b)
        lg, sg = relu_logdet(alpha, u, W1, W2, x)
        np.testing.assert_array_equal(sg, sr)
        np.testing.assert_allclose(lg, lr, rtol=RTOL, atol=ATOL)
        n_neg += int(np.sum(np.asarray(sg) < 0))
    assert n_neg > 0, "the largest step should produce some non-invertible draws"


@pytest.mark.parametrize("H,p", [(3, 4), (5, 7)])
def test_relu_ll_end_to_end(H, p):
    S, i = 8, 1
    rng, X, y = _toy_relu_problem(H, p, 5, seed=H + p)
    x, yi = X[i], y[i]
    W1, W2, b2, theta = _relu_draws_for_obs(rng, S, H, p, x)

    def Q(t):
        m = mu_flat(t, x, H, p)
        return -(yi - jax.nn.sigmoid(m)) * jax.grad(mu_flat)(t, x, H, p)

    mu = relu_mu(W1, W2, b2, x)
    g = relu_grad_mu(W1, W2, b2, x)
    exact = jax.jit(
        jax.vmap(lambda t, h: jnp.linalg.slogdet(jax.jacfwd(lambda v: v + h * Q(v))(t)), (0, None))
    )
    n_neg = 0
    for h in (0.1, 1.0, 6.0):
        alpha, u = ll_coefficients(h, mu, yi, g)
        lg, sg = relu_logdet(alpha, u, W1, W2, x)
        sr, lr = exact(theta, h)
        np.testing.assert_array_equal(sg, sr)
        np.testing.assert_allclose(lg, lr, rtol=RTOL, atol=ATOL)
        n_neg += int(np.sum(np.asarray(sg) < 0))
    assert n_neg > 0, "large h should produce some non-invertible draws"


@pytest.mark.parametrize("kappa", [1, 2])
def test_glm_kl_var_and_ll_end_to_end(kappa):
    q, n, S, i = 5, 10, 8, 3
    rng = np.random.default_rng(40 + kappa)
    X = np.concatenate([rng.normal(size=(n, q - 1)), np.ones((n, 1))], axis=1)
    y = rng.integers(0, 2, size=n).astype(float)
    x, yi = X[i], y[i]
    sgn = 1.0 - 2.0 * yi
    beta = rng.normal(size=(S, q))

    def logp(t):
        m = X @ t
        return -0.5 * t @ t + jnp.sum(y * m - jnp.logaddexp(0.0, m))

    def log_abs_A(t):
        return logp(t) + kappa * (x @ t) * sgn

    def Q_kl(t):
        return sgn * jnp.exp(log_abs_A(t)) * x

    def Q_ll(t):
        return -(yi - jax.nn.sigmoid(x @ t)) * x

    A = sgn * jnp.exp(jax.vmap(log_abs_A)(beta))
    b = jax.vmap(jax.grad(logp))(beta) + kappa * sgn * x
    mu = beta @ x
    g = np.broadcast_to(x, (S, q))
    def exact(Qf):
        return jax.jit(
            jax.vmap(lambda t, h: jnp.linalg.slogdet(jax.jacfwd(lambda v: v + h * Qf(v))(t)))
        )

    exact_kl, exact_ll = exact(Q_kl), exact(Q_ll)
    for target in (0.01, 0.2, 1.0, 5.0):
        h = target / np.abs(np.asarray(A))  # one h per draw
        sr, lr = exact_kl(beta, h)
        lg, sg = glm_logdet(*kl_var_coefficients(h, A, b), x)
        np.testing.assert_array_equal(sg, sr)
        np.testing.assert_allclose(lg, lr, rtol=RTOL, atol=ATOL)
        h = np.full(S, 10 * target)
        sr, lr = exact_ll(beta, h)
        lg, sg = glm_logdet(*ll_coefficients(h, mu, yi, g), x)
        np.testing.assert_array_equal(sg, sr)
        assert np.all(np.asarray(sg) == 1.0)  # LL: 1 + h s(1-s)|x|^2 > 0
        np.testing.assert_allclose(lg, lr, rtol=RTOL, atol=ATOL)
    # (negative GLM determinants are exercised in test_glm_logdet_matches_slogdet; here the
    # kappa (1-2y)^2 |x|^2 > 0 term of x.b usually keeps 1 + hA x.b positive)
