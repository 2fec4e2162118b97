"""PVI numerics: variational families, score estimators (T7 of the notes), evaluation scores.

Known answers from the implementer's notes (section 2, checked with numpy/scipy): with
q = N(0.3, 0.8^2), y = 1.7 and the model N(theta, 1), the exact gradient of log q^Y(y) w.r.t.
(m, log s) is (0.853659, 0.076145); estimator (a) has expectation (1.400, -0.640) at M = 1 (the VI
gradient), (1.012, -0.041) at M = 3 and (0.893, 0.054) at M = 10; the exact -CRPS is -0.855607 with
gradient (0.725701, 0.062585).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from ppl_loo.numerics.vi import objective as P
from ppl_loo.numerics.vi import scores as S
from ppl_loo.numerics.vi.families import (
    flatten_params,
    flow,
    get_family,
    meanfield,
)
from ppl_loo.numerics.vi.optim import get_optimizer, step_decay

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

Y = jnp.array([1.7])
LOG_C = -0.5 * math.log(2 * math.pi)  # sup_theta N(y | theta, 1)


def _loglik(th):
    return jax.scipy.stats.norm.logpdf(Y[None, :], th[:, :1], 1.0)


def _sim(th, key):
    return th[:, :1] + jax.random.normal(key, (th.shape[0], 1))


TERMS = P.Terms(1, loglik=_loglik, simulate=_sim, y=Y)
FAM = meanfield()
PARAMS = FAM.init(1, loc=[0.3], scale=0.8)


def _mean_grad(vg, n_rep, seed=0):
    g = jax.jit(jax.vmap(vg))(jax.random.split(jax.random.PRNGKey(seed), n_rep))
    out = []
    for leaf in (g["loc"][:, 0], g["log_scale"][:, 0]):
        leaf = np.asarray(leaf)
        out.append((leaf.mean(), leaf.std(ddof=1) / math.sqrt(leaf.size)))
    return out


# ----------------------------------------------------------------------------- T7 gradients
def test_rejection_estimator_is_unbiased_at_one_draw():
    vg = P._rejection_value_and_grad(FAM, TERMS, P.Settings("log", None, "rejection", draws=1))
    hyper = P.Hyper(0.0, 1.0, jnp.full(1, LOG_C))
    res = _mean_grad(lambda k: vg(PARAMS, k, hyper)[1], 100_000)
    for (m, se), exact in zip(res, (0.853659, 0.076145)):
        assert abs(m - exact) < 4 * se, (m, se, exact)
    # the acceptance rate at M = 1 is q^Y(y) / C (0.4294)
    theta = 0.3 + 0.8 * np.random.default_rng(0).normal(size=200_000)
    acc = np.random.default_rng(1).uniform(size=theta.size) < np.exp(stats.norm.logpdf(1.7, theta, 1) - LOG_C)
    assert abs(acc.mean() - stats.norm.pdf(1.7, 0.3, math.sqrt(1.64)) / math.exp(LOG_C)) < 0.005


@pytest.mark.parametrize("M, expected", [(1, (1.400, -0.640)), (3, (1.012, -0.041)), (10, (0.893, 0.054))])
def test_reparam_log_estimator_expectation(M, expected):
    """Estimator (a) is biased at finite M (known expectations); at M = 1 it is the VI gradient."""
    obj = P.build_objective(FAM, TERMS, P.Settings("log", None, draws=M))
    res = _mean_grad(lambda k: jax.grad(lambda p: obj(p, k, P.Hyper())[0])(PARAMS), 100_000, seed=M)
    for (m, se), exact in zip(res, expected):
        assert abs(m - exact) < 4 * se + 2e-3, (M, m, se, exact)


def test_crps_estimator_is_unbiased_value_and_gradient():
    # closed form of the Gaussian CRPS: predictive N(0.3, 1.64)
    assert float(S.crps_gaussian(0.3, math.sqrt(1.64), 1.7)) == pytest.approx(0.855607, abs=1e-6)
    obj = P.build_objective(FAM, TERMS, P.Settings("crps", None, draws=8))
    vals = jax.jit(jax.vmap(lambda k: obj(PARAMS, k, P.Hyper())[0]))(jax.random.split(jax.random.PRNGKey(3), 100_000))
    vals = np.asarray(vals)
    assert abs(vals.mean() + 0.855607) < 4 * vals.std() / math.sqrt(vals.size)
    res = _mean_grad(lambda k: jax.grad(lambda p: obj(p, k, P.Hyper())[0])(PARAMS), 100_000, seed=4)
    for (m, se), exact in zip(res, (0.725701, 0.062585)):
        assert abs(m - exact) < 4 * se, (m, se, exact)
    # pairs from the *same* draw would estimate a different (wrong) quantity: -1.0149
    y_sim = jnp.stack([jnp.zeros(1), jnp.zeros(1)])
    assert float(S.crps_pairs(y_sim, jnp.ones(1))[0]) == pytest.approx(-1.0)  # |0-1| - 0.5*|0-0|


def test_quadratic_score_u_statistic_is_unbiased():
    """Probit link: P(y = 1) = Phi(m / sqrt(1 + s^2)) under q = N(m, s^2), in closed form."""
    m, s = 0.4, 1.3
    p1 = stats.norm.cdf(m / math.sqrt(1 + s**2))
    exact = 2 * p1 - (p1**2 + (1 - p1) ** 2)  # observation y = 1

    def one(key, unbiased):
        th = m + s * jax.random.normal(key, (5,))
        f1 = jax.scipy.stats.norm.cdf(th)
        probs = jnp.stack([1 - f1, f1], axis=-1)[:, None, :]
        return S.quadratic_score(probs, jnp.array([1]), unbiased)[0]

    keys = jax.random.split(jax.random.PRNGKey(5), 200_000)
    u = np.asarray(jax.vmap(lambda k: one(k, True))(keys))
    plug = np.asarray(jax.vmap(lambda k: one(k, False))(keys))
    se = u.std() / math.sqrt(u.size)
    assert abs(u.mean() - exact) < 4 * se
    assert plug.mean() - exact < -10 * se  # the plug-in P^2 is biased upwards, the score downwards


def test_fair_crps_sorted_equals_pairwise_and_gaussian_closed_form():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 7))
    y = rng.normal(size=7)
    brute = np.abs(x - y).mean(0) - np.abs(x[:, None] - x[None]).sum((0, 1)) / (2 * 50 * 49)
    np.testing.assert_allclose(np.asarray(S.crps_fair(x, y)), brute, rtol=1e-12)
    # energy score with k = 1 is the CRPS
    np.testing.assert_allclose(np.asarray(S.energy_score_fair(x[..., None], y[:, None])), brute, rtol=1e-12)
    # unbiased for the Gaussian closed form
    draws = 1.0 + 2.0 * rng.normal(size=(400, 2000))
    est = np.asarray(S.crps_fair(draws, np.full(2000, 0.5)))
    assert abs(est.mean() - float(S.crps_gaussian(1.0, 2.0, 0.5))) < 4 * est.std() / math.sqrt(est.size)
    # log score of a mixture of identical draws is the log density itself
    ll = jnp.log(jnp.full((10, 3), 0.25))
    np.testing.assert_allclose(np.asarray(S.log_score_eval(ll)), np.log(0.25))
    with pytest.raises(ValueError, match="at least 2"):
        S.crps_fair(x[:1], y)


# ----------------------------------------------------------------------------- families
@pytest.mark.parametrize("name", ["meanfield", "fullrank", "flow"])
def test_family_log_q_matches_its_sampler(name):
    fam = get_family(name)
    d = 3
    p = fam.init(d, loc=np.array([0.5, -1.0, 2.0]), scale=0.7)
    leaves, tree = jax.tree_util.tree_flatten(p)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    p = jax.tree_util.tree_unflatten(tree, [v + 0.3 * jax.random.normal(k, v.shape) for v, k in zip(leaves, keys)])
    eps = 1.5 * jax.random.normal(jax.random.PRNGKey(2), (500, d))
    theta, lq = fam.sample_and_log_q(p, eps)
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda t: fam.log_q(p, t))(theta)), np.asarray(lq), atol=1e-7)
    # change of variables: log q = log N(eps) - log|det d theta / d eps|
    jac = jax.vmap(jax.jacfwd(lambda e: fam.sample(p, e)))(eps[:10])
    base = stats.norm.logpdf(np.asarray(eps[:10])).sum(1)
    np.testing.assert_allclose(base - np.linalg.slogdet(np.asarray(jac))[1], np.asarray(lq[:10]), atol=1e-9)
    if fam.entropy is not None:  # analytic entropy = Monte Carlo -E log q
        big = jax.random.normal(jax.random.PRNGKey(3), (200_000, d))
        assert float(fam.entropy(p)) == pytest.approx(float(-jnp.mean(fam.sample_and_log_q(p, big)[1])), abs=0.02)
        m, s = fam.marginals(p, None)
        th = np.asarray(fam.sample(p, big))
        np.testing.assert_allclose(np.asarray(s), th.std(0), rtol=0.01)
        np.testing.assert_allclose(np.asarray(m), th.mean(0), atol=0.02)


def test_flow_is_a_normalized_density_and_starts_as_meanfield():
    fam = flow(n_layers=3, hidden=8, n_bins=6)
    p0 = fam.init(1, loc=[0.2], scale=0.5)
    mf = meanfield()
    grid = jnp.linspace(-4, 4, 7)[:, None]
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda t: fam.log_q(p0, t))(grid)),
                               np.asarray(jax.vmap(lambda t: mf.log_q(mf.init(1, loc=[0.2], scale=0.5), t))(grid)),
                               atol=1e-10)
    leaves, tree = jax.tree_util.tree_flatten(p0)
    keys = jax.random.split(jax.random.PRNGKey(7), len(leaves))
    p = jax.tree_util.tree_unflatten(tree, [v + 0.4 * jax.random.normal(k, v.shape) for v, k in zip(leaves, keys)])
    xs = jnp.linspace(-40, 40, 400_001)
    dens = jnp.exp(jax.vmap(lambda t: fam.log_q(p, t))(xs[:, None]))
    assert float(jnp.trapezoid(dens, xs)) == pytest.approx(1.0, abs=1e-4)
    flat, info = flatten_params(p)
    assert flat.size == sum(int(np.prod(s)) for _, s in info)


def test_optimizers_and_schedules():
    # ascent on -(x - 3)^2 / 2 reaches 3
    for name, lr in (("adam", 0.1), ("rmsprop", 0.05), ("sgd", 0.1)):
        opt = get_optimizer(name, lr)
        x, st = {"x": jnp.zeros(())}, None
        st = opt.init(x)
        for t in range(600):
            g = {"x": -(x["x"] - 3.0)}
            u, st = opt.update(jax.tree_util.tree_map(jnp.negative, g), st, x)  # optax minimizes
            x = optax.apply_updates(x, u)
        assert float(x["x"]) == pytest.approx(3.0, abs=0.02), name
    sched = step_decay(1.0, 10, 0.1)
    assert float(sched(9)) == 1.0 and float(sched(10)) == pytest.approx(0.1)
    wc = optax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 110, 0.01)  # App. D.2
    assert float(wc(5)) == pytest.approx(0.5) and float(wc(110)) == pytest.approx(0.01)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="rejection"):
        P.check_settings(P.Settings("crps", None, "rejection"), TERMS)
    with pytest.raises(ValueError, match="even"):
        P.check_settings(P.Settings("crps", None, draws=7), TERMS)
    with pytest.raises(ValueError, match="probs"):
        P.check_settings(P.Settings("quadratic", None), TERMS)
    with pytest.raises(ValueError, match="log prior"):
        P.check_settings(P.Settings("log", "prior"), TERMS)
