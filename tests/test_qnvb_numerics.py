"""QNVB numerics (Duersch, "Projective Integral Updates"): known answers T1-T11 of notes/qnvb.md.

T1-T3 quadrature sequences (Algorithms 1, 4, Theorem 3.3), T4 one-pair exactness on univariate
cubics, T5 Algorithm 2 on quadratics, T6/T7 QNVB on Gaussian targets (Algorithm 3), T8 projective
LOO on the conjugate normal-means model, T9 the quartic (quadrature bias and the cycling of the
undamped exact update), T10 the spike-and-slab update (eq. 7), T11 QNVB against NumPyro ADVI.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from ppl_loo.numerics import qnvb as Q

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

QUARTIC_SIGMA = 3.0 ** -0.25  # exact mean-field optimum of L = theta^4 / 4


def _signs(d, qs):
    return np.asarray(jax.vmap(lambda q: Q.hadamard_signs(d, q))(jnp.asarray(qs)))


def _quadratic(P, m):
    P, m = jnp.asarray(P), jnp.asarray(m)

    def vg(theta):
        r = theta - m
        return 0.5 * r @ P @ r, P @ r

    return vg


def _pair_coupled(d, rng):
    P = np.zeros((d, d))
    for k in range(0, d, 2):
        a, b = rng.uniform(1.0, 3.0, 2)
        c = rng.uniform(-0.5, 0.5) * math.sqrt(a * b)
        P[k:k + 2, k:k + 2] = [[a, c], [c, b]]
    return P


def _dense(d, rng):
    A = rng.normal(size=(d, d))
    return A @ A.T / d + np.eye(d)


# ----------------------------------------------------------------------------- T1-T3 quadrature
def test_t1_hadamard_signs_d4_and_full_period_identity():
    expected = [[-1, -1, -1, -1], [-1, 1, -1, 1], [-1, -1, 1, 1], [-1, 1, 1, -1]]
    np.testing.assert_array_equal(_signs(4, range(4)), expected)
    np.testing.assert_array_equal(_signs(4, range(4, 8)), expected)  # periodic
    for d in (5, 8, 13):
        period = Q.hadamard_period(d)
        S = _signs(d, range(period))
        np.testing.assert_array_equal(S.T @ S, period * np.eye(d))
        assert not np.array_equal(S[: period // 2].T @ S[: period // 2], period // 2 * np.eye(d))
    assert [Q.hadamard_period(d) for d in (1, 2, 3, 4, 5, 64, 65)] == [1, 2, 4, 4, 8, 64, 128]
    traced = jax.jit(lambda q: Q.hadamard_signs(13, q))
    np.testing.assert_array_equal(traced(11), _signs(13, [11])[0])


def test_antithetic_nodes_order():
    mu, sigma = jnp.array([1.0, 2.0, 3.0]), jnp.array([0.1, 0.2, 0.3])
    nodes = np.asarray(Q.antithetic_nodes(mu, sigma, 2, 2))
    s2, s3 = _signs(3, [2, 3])
    np.testing.assert_allclose(nodes, [mu + s2 * sigma, mu - s2 * sigma, mu + s3 * sigma, mu - s3 * sigma])


def test_t2_theorem_3_3_block_averages_and_exact_pair_counts():
    d = 64
    S = _signs(d, range(d))  # one full period
    prods = S[:, :, None] * S[:, None, :]  # (q, i1, i2)
    upper = np.triu(np.ones((d, d), bool), 1)
    counts = []
    for b in range(1, 7):
        block_means = prods.reshape(d >> b, 1 << b, d, d).mean(axis=1)
        counts.append(int(np.sum(np.all(block_means == 0, axis=0) & upper)))
    assert counts == [1024, 1536, 1792, 1920, 1984, 2016]
    assert counts == [d * d * (2**b - 1) // 2 ** (b + 1) for b in range(1, 7)]
    rng = np.random.default_rng(1)
    for _ in range(50):
        i1, i2 = (int(i) for i in rng.choice(d, 2, replace=False))
        b = ((i1 ^ i2) & -(i1 ^ i2)).bit_length()  # 1-indexed lowest differing bit
        p = S[:, i1] * S[:, i2]
        np.testing.assert_array_equal(p.reshape(-1, 1 << b).mean(axis=1), 0.0)
        assert np.all(np.abs(p.reshape(-1, 1 << (b - 1)).mean(axis=1)) == 1.0)


def test_t3_simplex_sigma_points():
    for d in (1, 2, 3, 7):
        X, w = Q.simplex_sigma_points(d)
        assert X.shape == (d, d + 1) and w == pytest.approx(1 / (d + 1))
        np.testing.assert_allclose(X.sum(axis=1), 0.0, atol=1e-12)
        np.testing.assert_allclose(w * X @ X.T, np.eye(d), atol=1e-12)
        np.testing.assert_allclose(np.sum(X * X, axis=0), d, atol=1e-12)
    X, _ = Q.simplex_sigma_points(2)
    r = math.sqrt(1.5)
    np.testing.assert_allclose(X, [[math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)], [0.0, r, -r]], atol=1e-14)
    X3, _ = Q.simplex_sigma_points(3)  # not exact for cubics: the third moments do not vanish
    assert np.abs(np.mean(X3**3, axis=1)).max() > 0.1


def test_blocked_stochastic_nodes_theorem_3_1():
    d, k = 5, 2  # three 2-D blocks, the last truncated to one coordinate
    mu = jnp.array([0.5, -1.0, 2.0, 0.0, 1.5])
    sd = jnp.array([1.0, 2.0, 0.5, 1.5, 0.7])
    chols = jnp.stack([jnp.diag(jnp.pad(sd, (0, 1))[2 * b: 2 * b + 2]) for b in range(3)])
    nodes = jax.vmap(lambda key: Q.blocked_stochastic_nodes(key, mu, chols))(jax.random.split(jax.random.key(0), 4000))
    nodes = np.asarray(nodes)  # (trials, 3, d)
    assert nodes.shape == (4000, k + 1, d)
    np.testing.assert_allclose(nodes.mean(axis=1), np.broadcast_to(mu, (4000, d)), atol=1e-12)
    x = (nodes - np.asarray(mu)) / np.asarray(sd)
    within = np.einsum("tqi,tqj->tij", x, x) / (k + 1)
    np.testing.assert_allclose(within[:, [0, 2, 4], [0, 2, 4]], 1.0, atol=1e-12)  # univariate quadratics
    np.testing.assert_allclose(within[:, 0, 1], 0.0, atol=1e-12)  # within-block cross term: every trial
    np.testing.assert_allclose(within[:, 2, 3], 0.0, atol=1e-12)
    cross = within[:, 1, 2]  # across blocks: exact only on average over the permutations
    assert np.abs(cross).max() > 0.4
    assert abs(cross.mean()) < 5 * cross.std() / math.sqrt(cross.size)


def test_qmc_nodes_moment_matching():
    key = jax.random.key(3)
    mu, sigma = jnp.array([1.0, -2.0, 0.5]), jnp.array([0.3, 2.0, 1.0])
    mc = np.asarray(Q.qmc_nodes(key, mu, sigma, 6))
    q1 = np.asarray(Q.qmc_nodes(key, mu, sigma, 6, "mean"))
    q2 = np.asarray(Q.qmc_nodes(key, mu, sigma, 6, "mean_var"))
    assert np.abs(mc.mean(0) - mu).max() > 1e-3
    np.testing.assert_allclose(q1.mean(0), mu, atol=1e-12)
    np.testing.assert_allclose(q1 - q1.mean(0), mc - mc.mean(0), atol=1e-12)  # QMC-1 shifts the MC draws
    np.testing.assert_allclose(q2.mean(0), mu, atol=1e-12)
    np.testing.assert_allclose(q2.std(0, ddof=0), sigma, rtol=1e-12)  # divided by n, not n - 1
    with pytest.raises(ValueError, match="match='median'"):
        Q.qmc_nodes(key, mu, sigma, 6, "median")


# ----------------------------------------------------------------------------- T4 one pair
def _one_pair_integral(f, mu, sigma, q=5):
    nodes = Q.antithetic_nodes(jnp.asarray(mu), jnp.asarray(sigma), q, 1)
    return float(jnp.mean(jax.vmap(f)(nodes)))


def _moments_1d(density, support):
    """(E[u], E[u^2], E[u^3]) of a univariate law by numerical integration."""
    return [integrate.quad(lambda u: u**k * density(u), *support, limit=200)[0] for k in (1, 2, 3)]


def test_t4_one_pair_exact_for_univariate_cubics_of_symmetric_laws():
    rng = np.random.default_rng(4)
    d = 6
    mu, sigma = rng.normal(size=d), rng.uniform(0.5, 2.0, d)
    a, b, c = rng.normal(size=(3, d))

    def f(theta):
        return jnp.sum(a * theta + b * theta**2 + c * theta**3)

    def expected(m3):  # E f for standardized third moment m3 of every coordinate
        return np.sum(a * mu + b * (mu**2 + sigma**2) + c * (mu**3 + 3 * mu * sigma**2 + m3 * sigma**3))

    laws = {"normal": (stats.norm.pdf, (-np.inf, np.inf)),
            "laplace": (stats.laplace(scale=1 / math.sqrt(2)).pdf, (-np.inf, np.inf))}
    for density, support in laws.values():
        m1, m2, m3 = _moments_1d(density, support)
        assert abs(m1) < 1e-10 and m2 == pytest.approx(1.0, abs=1e-9)
        assert _one_pair_integral(f, mu, sigma) == pytest.approx(expected(m3), rel=1e-9, abs=1e-9)
    # 1/2 delta(0) + 1/2 N(2, 1), standardized: mean 1, variance 1.5, E[u^3] = 1/sqrt(1.5)
    s = math.sqrt(1.5)
    m3 = (0.5 * (-1 / s) ** 3 + 0.5 * integrate.quad(lambda z: ((z - 1) / s) ** 3 * stats.norm.pdf(z, 2), -20, 25)[0])
    assert m3 == pytest.approx(1 / s, rel=1e-9)
    quad = _one_pair_integral(lambda t: jnp.sum(a * t + b * t**2), mu, sigma)
    assert quad == pytest.approx(np.sum(a * mu + b * (mu**2 + sigma**2)), rel=1e-12, abs=1e-12)  # quadratics exact
    cubic_error = _one_pair_integral(f, mu, sigma) - expected(m3)
    assert cubic_error == pytest.approx(-np.sum(c * m3 * sigma**3), rel=1e-9)  # cubics are not
    assert abs(cubic_error) > 0.1


# ----------------------------------------------------------------------------- T5 Algorithm 2
def test_t5_quadratic_approx_on_quadratics():
    rng = np.random.default_rng(5)
    d = 8
    m, mu, sigma = rng.normal(size=d), rng.normal(size=d), rng.uniform(0.3, 2.0, d)
    for P in (_pair_coupled(d, rng), _dense(d, rng)):
        vg = _quadratic(P, m)
        L_mu = float(vg(jnp.asarray(mu))[0])
        for q1 in (0, 3, 6):  # g from any single pair
            qa = Q.quadratic_approx(vg, mu, sigma, q1, 1)
            np.testing.assert_allclose(qa.g, P @ (mu - m), rtol=1e-12, atol=1e-12)
            assert qa.n_evals == 2
        qa = Q.quadratic_approx(vg, mu, sigma, 8, Q.hadamard_period(d))  # a full aligned period
        np.testing.assert_allclose(qa.h, np.diag(P), rtol=1e-12)
        assert float(qa.l) == pytest.approx(L_mu, rel=1e-12)
    P_pair, P_dense = _pair_coupled(d, rng), _dense(d, rng)
    for q1 in (0, 2, 4, 6):
        qa = Q.quadratic_approx(_quadratic(P_pair, m), mu, sigma, q1, 2)
        np.testing.assert_allclose(qa.h, np.diag(P_pair), rtol=1e-12)
        assert float(qa.l) == pytest.approx(float(_quadratic(P_pair, m)(jnp.asarray(mu))[0]), rel=1e-12)
    qa = Q.quadratic_approx(_quadratic(P_dense, m), mu, sigma, 0, 2)
    assert np.abs(np.asarray(qa.h) - np.diag(P_dense)).max() > 1e-2  # dense: not exact before a full period


def test_stein_approx_reduces_to_algorithm_2():
    rng = np.random.default_rng(6)
    d = 5
    mu, sigma = jnp.asarray(rng.normal(size=d)), jnp.asarray(rng.uniform(0.5, 1.5, d))

    def vg(theta):
        return jax.value_and_grad(lambda t: jnp.sum(jnp.cos(t) * t**3) + jnp.sum(t) ** 2)(theta)

    qa = Q.quadratic_approx(vg, mu, sigma, 4, 4)
    x = (Q.antithetic_nodes(mu, sigma, 4, 4) - mu) / sigma
    qs = Q.stein_approx(vg, mu, sigma, x)
    for a, b in zip(qa[:3], qs[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert qs.n_evals == 8


# ----------------------------------------------------------------------------- T6, T7 QNVB
def _run(P, m, config, steps=3000, mu0=None):
    loss = Q.loss_from_logdensity(lambda th: tuple(-v for v in _quadratic(P, m)(th)))
    mu0 = jnp.zeros(len(m)) if mu0 is None else mu0
    return Q.run(loss, mu0, config, steps, jax.random.key(0))


CFG = Q.QNVBConfig(lam=0.1, sigma_min=1e-3, sigma_max=10.0)


def test_t6_qnvb_reaches_the_mean_field_optimum_of_gaussian_targets():
    rng = np.random.default_rng(7)
    d = 8
    m = rng.normal(size=d)
    P = _pair_coupled(d, rng)
    state, trace = _run(P, m, CFG)
    np.testing.assert_allclose(state.mu, m, atol=1e-12)
    np.testing.assert_allclose(state.sigma, np.diag(P) ** -0.5, atol=1e-12)
    assert int(state.n_evals) == 4 * 3000 and int(trace.n_evals[-1]) == 12000
    sig = np.diag(P) ** -0.5  # ELBO of the optimum (log normalizer of the target dropped)
    elbo = -0.5 * d + np.sum(np.log(sig)) + 0.5 * d * math.log(2 * math.pi * math.e)
    assert float(trace.elbo[-1]) == pytest.approx(elbo, rel=1e-12)
    P = _dense(d, rng)
    exact = np.diag(P) ** -0.5
    state, _ = _run(P, m, CFG)  # n_q = 2: mu exact, sigma biased low (RMS of a fluctuating h)
    np.testing.assert_allclose(state.mu, m, atol=1e-10)
    rel = np.asarray(state.sigma) / exact - 1
    assert np.all(rel < 0) and 0.003 < -rel.min() < 0.1
    state, _ = _run(P, m, CFG._replace(n_pairs=Q.hadamard_period(d)))  # a full period per step: exact
    np.testing.assert_allclose(state.mu, m, atol=1e-10)
    np.testing.assert_allclose(state.sigma, exact, rtol=1e-10)


def test_t6_clamped_hessian_and_qmc_quadrature():
    rng = np.random.default_rng(8)
    d = 6
    m, P = rng.normal(size=d), _pair_coupled(d, rng)
    state, _ = _run(P, m, CFG._replace(hessian="clamp"))
    np.testing.assert_allclose(state.mu, m, atol=1e-12)
    np.testing.assert_allclose(state.sigma, np.diag(P) ** -0.5, rtol=1e-10)
    state, _ = _run(P, m, CFG._replace(quadrature="qmc", n_pairs=4), steps=2000)  # QMC-2: g exact, h noisy
    np.testing.assert_allclose(state.mu, m, atol=1e-8)
    np.testing.assert_allclose(state.sigma, np.diag(P) ** -0.5, rtol=0.15)
    state, _ = _run(P, m, CFG._replace(quadrature="mc", n_pairs=4), steps=2000)  # plain MC: much noisier
    assert np.all(np.isfinite(state.sigma)) and np.abs(np.asarray(state.mu) - m).mean() < 0.5 * np.abs(m).mean()
    with pytest.raises(ValueError, match="power of 2"):
        Q.init(jnp.zeros(3), CFG._replace(n_pairs=3), jax.random.key(0))
    with pytest.raises(ValueError, match="quadrature='sobol'"):
        Q.init(jnp.zeros(3), CFG._replace(quadrature="sobol"), jax.random.key(0))


def test_step_known_answer_first_steps_of_algorithm_3():
    d = 4
    p, m = np.array([1.0, 2.0, 4.0, 0.5]), np.array([3.0, -1.0, 0.2, 0.0])
    loss = Q.loss_from_logdensity(lambda th: tuple(-v for v in _quadratic(np.diag(p), m)(th)))
    mu0 = jnp.zeros(d)
    state = Q.init(mu0, CFG, jax.random.key(0))
    state1, info = jax.jit(lambda s: Q.step(s, loss, CFG))(state)
    g = p * (0 - m)  # first step: n1 = n2 = 1, so gbar = g, sbar = g^2, hbar = |h| = p
    delta = g / np.maximum(p, (np.abs(g) + CFG.eps) / CFG.lam)  # eq. 13: Adam-limited where |g| / lam > h
    np.testing.assert_allclose(state1.mu, -delta, rtol=1e-10)
    np.testing.assert_allclose(state1.sigma, 1.01e-3, rtol=1e-14)  # eq. 14: s_max limits the growth
    np.testing.assert_allclose(state1.gbar, g - p * delta, rtol=1e-10, atol=1e-12)  # gradient consistency
    np.testing.assert_allclose(state1.hbar2, p**2, rtol=1e-10)
    assert int(state1.q) == 2 and int(state1.n_evals) == 4 and float(state1.n1) == 1.0
    assert float(info.loss) == pytest.approx(0.5 * np.sum(p * m * m), rel=1e-14)
    newton = CFG._replace(lam=1e6)  # Newton steps everywhere: exact after one step, and it stays there
    state = Q.init(mu0, newton, jax.random.key(0))
    for _ in range(3):
        state, _ = Q.step(state, loss, newton)
        np.testing.assert_allclose(state.mu, m, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(state.gbar, 0.0, atol=1e-10)


def test_t7_sigma_warm_up_is_rate_limited():
    d = 4
    P, m = np.eye(d), np.zeros(d)  # sigma* = 1 = 1000 sigma_min
    state, _ = _run(P, m, CFG, steps=600)
    np.testing.assert_allclose(state.sigma, 1e-3 * 1.01**600, rtol=1e-10)
    state, _ = _run(P, m, CFG, steps=700)  # ln(1000) / ln(1.01) = 694.2 steps
    np.testing.assert_allclose(state.sigma, 1.0, rtol=1e-12)


def test_minibatch_loss_receives_a_fresh_key_each_step():
    y = jnp.asarray(np.random.default_rng(9).normal(1.0, 1.0, 64))

    def loss_vg(theta, key):  # minibatch of 8 out of 64: L_B = mean (theta - y_c)^2 / 2, w = n
        yb = jax.random.choice(key, y, (8,), replace=False)
        return 0.5 * jnp.mean((theta[0] - yb) ** 2), jnp.array([theta[0] - jnp.mean(yb)])

    cfg = CFG._replace(w=64.0, sigma_min=1e-2, lam=0.05)
    state, trace = Q.run(loss_vg, jnp.zeros(1), cfg, 1500, jax.random.key(1))
    assert np.unique(np.asarray(trace.loss)[-100:]).size > 50  # the batch changes from step to step
    assert float(state.mu[0]) == pytest.approx(float(jnp.mean(y)), abs=0.3)
    assert float(state.sigma[0]) == pytest.approx(1 / 8, rel=0.05)  # (w h)^{-1/2} with h = 1


# ----------------------------------------------------------------------------- T8 projective LOO
def test_t8_projective_loo_reproduces_exact_loo_of_normal_means():
    rng = np.random.default_rng(10)
    n, d, s, prior_prec = 12, 3, 0.8, 0.5
    y = rng.normal(1.0, s, size=(n, d))
    y[3] += 4.0  # one outlying case
    Lam = prior_prec + n / s**2

    def logp(theta):
        return -0.5 * prior_prec * theta @ theta - 0.5 * jnp.sum((jnp.asarray(y) - theta) ** 2) / s**2

    fit, _ = Q.run(Q.loss_from_logdensity(jax.value_and_grad(logp)), jnp.zeros(d), CFG, 1000, jax.random.key(0))
    np.testing.assert_allclose(fit.mu, y.sum(0) / s**2 / Lam, rtol=1e-12)
    np.testing.assert_allclose(fit.sigma, Lam**-0.5, rtol=1e-12)

    def loglik_i(theta, i):
        return jnp.sum(jax.scipy.stats.norm.logpdf(jnp.asarray(y)[i], theta, s))

    loo = jax.jit(jax.vmap(lambda i: Q.projective_loo(lambda th: loglik_i(th, i), fit.mu, fit.sigma)))(jnp.arange(n))
    prec_c = Lam - 1 / s**2
    mean_c = (y.sum(0)[None] - y) / s**2 / prec_c
    np.testing.assert_allclose(loo.mu, mean_c, rtol=1e-10)
    np.testing.assert_allclose(loo.sigma, prec_c**-0.5, rtol=1e-10)
    np.testing.assert_allclose(loo.h, 1 / s**2, rtol=1e-12)
    x, w = Q.gauss_hermite_nodes(1, 20)  # elpd_c = sum_k log int N(y_ck | theta, s^2) q_{-c}(theta_k)
    theta = np.asarray(loo.mu)[:, :, None] + np.asarray(loo.sigma)[:, :, None] * x[:, 0]
    elpd = np.sum(np.log(np.sum(w * stats.norm.pdf(y[:, :, None], theta, s), axis=-1)), axis=1)
    exact = np.sum(stats.norm.logpdf(y, mean_c, math.sqrt(s**2 + 1 / prec_c)), axis=1)
    np.testing.assert_allclose(elpd, exact, rtol=1e-9)
    assert np.argmin(exact) == 3


# ----------------------------------------------------------------------------- T9 quartic
def _quartic(theta):
    return jnp.sum(theta**4) / 4, theta**3


def test_t9_quartic_quadrature_bias_and_damped_exact_update():
    state, _ = Q.run(lambda th, k: _quartic(th), jnp.array([0.5]), CFG, 5000, jax.random.key(0))
    assert float(state.mu[0]) == pytest.approx(0.0, abs=1e-8)
    assert float(state.sigma[0]) == pytest.approx(1.0, abs=1e-3)  # 2-point h = 3 mu^2 + sigma^2 is biased
    und = Q.projective_fixed_point(_quartic, jnp.array([0.3]), jnp.array([0.5]), quadrature="gauss_hermite",
                                   damping=0.0, iters=40)
    s_path = np.asarray(und.sigma_path[:, 0])
    np.testing.assert_allclose(s_path[11:], 1 / (math.sqrt(3) * s_path[10:-1]), rtol=1e-10)  # cycles
    assert abs(s_path[-1] - QUARTIC_SIGMA) > 0.1 and abs(s_path[-2] - QUARTIC_SIGMA) > 0.1
    damped = Q.projective_fixed_point(_quartic, jnp.array([0.3]), jnp.array([0.5]), quadrature="gauss_hermite",
                                      damping=0.5, iters=60)
    assert float(damped.sigma[0]) == pytest.approx(QUARTIC_SIGMA, rel=1e-10)
    assert abs(float(damped.mu[0])) < 1e-10
    # the same bias with the 2-point rule (from mu = 0: h = 3 mu^2 + sigma^2 under-estimates the
    # curvature 3 mu^2 + 3 sigma^2 that g sees, so the undamped mean step overshoots away from 0)
    had = Q.projective_fixed_point(_quartic, jnp.array([0.0]), jnp.array([0.5]), damping=0.5, iters=60)
    assert float(had.sigma[0]) == pytest.approx(1.0, rel=1e-8)


def test_projective_fixed_point_full_period_on_dense_gaussian():
    rng = np.random.default_rng(11)
    d = 5
    m, P = rng.normal(size=d), _dense(d, rng)
    fp = Q.projective_fixed_point(_quadratic(P, m), jnp.zeros(d), jnp.ones(d), iters=300)
    np.testing.assert_allclose(fp.mu, m, atol=1e-10)
    np.testing.assert_allclose(fp.sigma, np.diag(P) ** -0.5, rtol=1e-12)


# ----------------------------------------------------------------------------- T10 eq. 7
def test_t10_spike_slab_update_matches_the_exact_posterior():
    h_p, h, y, zeta_p = 2.0, 5.0, 0.7, math.log(3 / 7)
    exact_zeta = zeta_p + stats.norm.logpdf(y, 0, h**-0.5) - stats.norm.logpdf(y, 0, math.sqrt(1 / h + 1 / h_p))
    assert exact_zeta == pytest.approx(-1.0959164, abs=1e-7)
    for mu_t in (-1.0, 0.0, 0.3, 2.5):  # any expansion point
        out = Q.spike_slab_update(h * (mu_t - y), h, mu_t, h_p, zeta_p)
        assert float(out.zeta) == pytest.approx(-1.0959164, abs=1e-7)
        assert float(out.nu) == pytest.approx(0.5, rel=1e-12)
        assert float(out.tau) == pytest.approx(7**-0.5, rel=1e-12)
    p0 = 1 / (1 + math.exp(1.0959164))
    assert float(out.p_zero) == pytest.approx(p0, rel=1e-6)
    # mixture moments against the draws of q = p0 delta(0) + (1 - p0) N(0.5, 1/7)
    x, w = Q.gauss_hermite_nodes(1, 10)
    slab = 0.5 + 7**-0.5 * x[:, 0]
    mean = (1 - p0) * np.sum(w * slab)
    var = (1 - p0) * np.sum(w * slab**2) - mean**2
    assert float(out.mu) == pytest.approx(mean, rel=1e-6)
    assert float(out.sigma) == pytest.approx(math.sqrt(var), rel=1e-6)


# ----------------------------------------------------------------------------- T11 ADVI
def test_t11_qnvb_and_numpyro_advi_reach_the_same_mean_field_fit():
    import numpyro
    import numpyro.distributions as dist
    import optax
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    rng = np.random.default_rng(12)
    d = 4
    m, P = rng.normal(size=d), _dense(d, rng)
    state, _ = _run(P, m, CFG._replace(n_pairs=Q.hadamard_period(d)))

    def model():
        numpyro.sample("theta", dist.MultivariateNormal(jnp.asarray(m), precision_matrix=jnp.asarray(P)))

    schedule = optax.exponential_decay(0.05, 4000, 0.01)
    svi = SVI(model, AutoNormal(model), numpyro.optim.optax_to_numpyro(optax.adam(schedule)),
              Trace_ELBO(num_particles=16))
    res = svi.run(jax.random.key(0), 4000, progress_bar=False)
    loc, scale = np.asarray(res.params["theta_auto_loc"]), np.asarray(res.params["theta_auto_scale"])
    sd = np.asarray(state.sigma)
    np.testing.assert_allclose(loc, state.mu, atol=0.05 * sd.min())
    np.testing.assert_allclose(scale, sd, rtol=0.03)
    assert np.abs(sd - np.linalg.inv(P).diagonal() ** 0.5).max() > 0.05  # mean-field, not the marginals
