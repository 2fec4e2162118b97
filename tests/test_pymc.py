"""The PyMC adapter against PyMC itself, arviz_stats and the closed-form logistic regression.

Real PyMC sampling (small, seeded); no mocks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

pm = pytest.importorskip("pymc")
azs = pytest.importorskip("arviz_stats")

import ppl_loo as pl
from ppl_loo.models import LogisticRegression
from ppl_loo.models.pymc_model import PyMCModel
from ppl_loo.workflow.loo import DEFAULT_TRANSFORMS

SAMPLE = {
    "draws": 500,
    "tune": 500,
    "chains": 2,
    "cores": 1,
    "progressbar": False,
    "compute_convergence_checks": False,
}


def _stack(da):
    """``(chain, draw, ...)`` -> ``(S, ...)`` numpy."""
    return np.asarray(da.values).reshape((-1,) + da.shape[2:])


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def bounded_fit():
    """HalfNormal scale, Uniform with bounds from a parent RV, observed through pm.Data."""
    rng = np.random.default_rng(1)
    n = 15
    x = rng.normal(size=n)
    y = 0.5 + 0.8 * x + rng.normal(scale=0.7, size=n)
    coords = {"obs_id": np.arange(n)}
    with pm.Model(coords=coords) as model:
        xd = pm.Data("x", x, dims="obs_id")
        yd = pm.Data("y_obs", y, dims="obs_id")
        alpha = pm.Normal("alpha", 0, 2)
        slope = pm.Uniform("slope", lower=alpha - 3, upper=alpha + 3)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Potential("pot", -0.1 * slope**2)
        pm.Normal("y", alpha + slope * xd, sigma, observed=yd, dims="obs_id")
        idata = pm.sample(**SAMPLE, random_seed=11, idata_kwargs={"log_likelihood": True})
    return model, idata


@pytest.fixture(scope="module")
def logistic_fit():
    """Bernoulli-logit GLM with a nearly separating covariate (n = 30)."""
    rng = np.random.default_rng(3)
    n = 30
    x1 = rng.normal(size=n)
    x2 = rng.normal(size=n)
    y = (x1 > 0).astype(int)
    y[np.argmin(np.abs(x1))] = 1 - y[np.argmin(np.abs(x1))]  # one point breaks separation
    X = np.column_stack([x1, x2])
    X = (X - X.mean(0)) / X.std(0)
    s, s0 = 2.5, 5.0
    with pm.Model(coords={"feature": [0, 1], "obs_id": np.arange(n)}) as model:
        beta0 = pm.Normal("beta0", 0, s0)
        beta = pm.Normal("b", 0, s, dims="feature")
        pm.Bernoulli("y", logit_p=beta0 + pm.math.dot(X, beta), observed=y, dims="obs_id")
        idata = pm.sample(**SAMPLE, random_seed=5, idata_kwargs={"log_likelihood": True})
    return model, idata, X, y, s, s0


# ---------------------------------------------------------------------- 1. densities, transforms
def test_logp_loglik_match_pymc(bounded_fit):
    model, idata = bounded_fit
    m = PyMCModel(model)
    assert m.value_names == ("alpha", "slope_interval__", "sigma_log__")
    assert m.dim == 3 and m.n_obs == 15
    assert m.obs_dims == ("obs_id",) and m.obs_shape == (15,)
    theta = m.unconstrain(idata)
    assert theta.shape == (1000, 3)

    # unconstrained values from PyMC's own transforms, one point at a time (reference only)
    post = idata["posterior"]
    alpha = _stack(post["alpha"])
    slope = _stack(post["slope"])
    sigma = _stack(post["sigma"])
    lo, hi = alpha - 3, alpha + 3
    ref = np.column_stack([alpha, np.log(slope - lo) - np.log(hi - slope), np.log(sigma)])
    np.testing.assert_allclose(theta, ref, rtol=1e-10, atol=1e-10)

    lp = np.asarray(m.log_density(theta))
    f = model.compile_logp()
    idx = np.arange(0, 1000, 50)
    ref_lp = np.array(
        [f({"alpha": t[0], "slope_interval__": t[1], "sigma_log__": t[2]}) for t in theta[idx]]
    )
    np.testing.assert_allclose(lp[idx], ref_lp, rtol=1e-10, atol=1e-10)

    ll = np.asarray(m.log_lik(theta))
    ref_ll = _stack(idata["log_likelihood"]["y"])
    np.testing.assert_allclose(ll, ref_ll, rtol=1e-10, atol=1e-10)

    back = m.constrain(theta)
    for name in ("alpha", "slope", "sigma"):
        np.testing.assert_allclose(back[name], _stack(post[name]), rtol=1e-10, atol=1e-12)


def test_pl_loo_with_pymc_model(bounded_fit):
    model, idata = bounded_fit
    res = pl.loo(idata, model, progressbar=False)  # a pymc.Model directly, as DESIGN.md's API
    ref = azs.loo(idata, pointwise=True)
    np.testing.assert_allclose(res.pareto_k_psis.values, ref.pareto_k.values, atol=1e-6)
    assert np.isfinite(res.elpd_i.values).all()
    assert res.elpd_i.dims == ("obs_id",)


# ---------------------------------------------------------------------- 2. logistic regression
def test_logistic_matches_closed_form_and_arviz(logistic_fit):
    model, idata, X, y, s, s0 = logistic_fit
    m = PyMCModel(model)
    res = pl.loo(idata, m, progressbar=False)

    # the same draws, named as the closed-form model expects
    post = idata["posterior"].to_dataset()
    renamed = xr.Dataset({"beta0": post["beta0"], "beta": post["b"]})
    dt = xr.DataTree.from_dict(
        {"posterior": renamed, "log_likelihood": idata["log_likelihood"].to_dataset()}
    )
    lr = LogisticRegression(X, y, prior="normal", prior_scale=s, scale_icept=s0)
    theta = m.unconstrain(idata)
    np.testing.assert_allclose(lr.unconstrain(dt), theta, atol=1e-12)
    # equal up to a constant (PyMC's normalizing constants are rounded differently, ~1e-7)
    diff = np.asarray(lr.log_density(theta)) - np.asarray(m.log_density(theta))
    assert np.ptp(diff) < 1e-10 and abs(diff[0]) < 1e-6
    np.testing.assert_allclose(
        np.asarray(lr.log_lik(theta)), np.asarray(m.log_lik(theta)), rtol=1e-10, atol=1e-12
    )
    # both define the Bernoulli variance-descent target (complement probability), so every
    # transformation, "var" included, must give the same result
    assert m.has_var_target
    np.testing.assert_allclose(
        np.asarray(jax.vmap(m.log_var_target, (0, None))(jnp.asarray(theta), 3)),
        np.asarray(jax.vmap(lr.log_var_target, (0, None))(jnp.asarray(theta), 3)), rtol=1e-10)
    same = list(DEFAULT_TRANSFORMS)
    res_same = pl.loo(idata, m, transforms=same, progressbar=False)
    res_lr = pl.loo(dt, lr, transforms=same, progressbar=False)
    np.testing.assert_allclose(res.pareto_k_psis.values, res_lr.pareto_k_psis.values, atol=1e-6)
    np.testing.assert_allclose(res_same.pareto_k_psis.values, res_lr.pareto_k_psis.values, atol=1e-6)
    np.testing.assert_allclose(res_same.elpd_i.values, res_lr.elpd_i.values, atol=1e-6)

    # the peer: arviz_stats moment matching with the same PyMC model
    ref = azs.loo(idata, pointwise=True, moment_match=True, model=model)
    thr = min(1 - 1 / np.log10(1000), 0.7)
    n_bad_ours = int((res.pareto_k.values > thr).sum())
    n_bad_peer = int((np.asarray(ref.pareto_k) > thr).sum())
    assert n_bad_ours <= n_bad_peer
    assert np.isfinite(res.elpd)


# ---------------------------------------------------------------------- 3. errors
def test_discrete_free_variable_raises():
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1.0, observed=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="'k'"):
        PyMCModel(model)


def test_missing_posterior_variable_raises(bounded_fit):
    model, idata = bounded_fit
    post = idata["posterior"].to_dataset().drop_vars("sigma")
    with pytest.raises(ValueError, match="'sigma'"):
        PyMCModel(model).unconstrain(post)
    bad = {"alpha": np.zeros((10,)), "slope": np.zeros((10,)), "sigma": np.ones((10, 2))}
    with pytest.raises(ValueError, match="'sigma'"):
        PyMCModel(model).unconstrain(bad)


def test_var_name_required_with_several_observed():
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("a", mu, 1.0, observed=np.zeros(3))
        pm.Normal("b", mu, 1.0, observed=np.zeros(4))
    with pytest.raises(ValueError, match="var_name"):
        PyMCModel(model)
    m = PyMCModel(model, var_name="b")
    assert m.n_obs == 4 and m.obs_dims == ("b_dim_0",)


def test_non_factorizing_likelihood():
    n = 5
    cov = 0.5 * np.eye(n) + 0.5
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.MvNormal("y", mu * np.ones(n), cov, observed=np.linspace(-1, 1, n))
    with pytest.raises(ValueError, match="loo_log_density"):
        PyMCModel(model)

    import jax.numpy as jnp
    import jax.scipy.stats as st

    yv = jnp.linspace(-1, 1, n)
    prec = jnp.linalg.inv(jnp.asarray(cov))

    def loo_density(values, i):
        # exact: y_{-i} ~ N(mu, cov_{-i,-i}) via the conditional decomposition
        mu_ = values["mu"]
        full = st.multivariate_normal.logpdf(yv, mu_ * jnp.ones(n), jnp.asarray(cov))
        cond_var = 1.0 / prec[i, i]
        cond_mean = yv[i] - cond_var * (prec[i] @ (yv - mu_))
        log_cond = st.norm.logpdf(yv[i], cond_mean, jnp.sqrt(cond_var))
        return st.norm.logpdf(mu_) + full - log_cond

    m = PyMCModel(model, loo_log_density=loo_density)
    assert not m.factorizes and m.n_obs == n
    theta = jnp.array([[0.3]])
    f = model.compile_logp()
    np.testing.assert_allclose(float(m.log_density(theta)[0]), f({"mu": 0.3}), rtol=1e-10)
    ll = np.asarray(m.log_lik(theta))[0]
    assert ll.shape == (n,) and np.isfinite(ll).all()
