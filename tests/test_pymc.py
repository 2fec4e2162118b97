"""The PyMC adapter against PyMC itself, arviz_stats and the closed-form logistic regression.

Real PyMC sampling (small, seeded); no mocks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from scipy.special import expit, logsumexp

pm = pytest.importorskip("pymc")
azs = pytest.importorskip("arviz_stats")

import ppl_loo as pl  # noqa: E402
from ppl_loo.adapters.pymc.adapter import PyMCModel  # noqa: E402
from ppl_loo.models import LogisticRegression  # noqa: E402
from ppl_loo.workflow.loo.loo import DEFAULT_TRANSFORMS  # noqa: E402

pytestmark = pytest.mark.x64  # calls the models' JAX functions directly: the user's own JAX code (conftest.py)

SAMPLE = {
    "draws": 500,
    "tune": 500,
    "chains": 2,
    "cores": 1,
    "progressbar": False,
    "compute_convergence_checks": False,
    "nuts_sampler": "pymc",  # PyMC picks nutpie when it is installed; keep the tests' draws fixed
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


@pytest.fixture(scope="module")
def logistic_loo(logistic_fit):
    model, idata, X, y, s, s0 = logistic_fit
    m = PyMCModel(model)
    # only the observations plain PSIS flags: the rest keep plain PSIS (compared with arviz_stats below); the search
    # alone, whose elpd_i are those of the weights pl.loo_expectations uses (a value pooled with a second opinion is
    # not the mean of one set of weights)
    return m, pl.loo(idata, m, progressbar=False, search={"adapt": "flagged"},
                     second_opinions={"mixture": False, "smc": False})


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
def test_logistic_matches_closed_form_and_exact_loo(logistic_fit, logistic_loo):
    model, idata, X, y, s, s0 = logistic_fit
    m, res = logistic_loo
    # the adapter found the linear predictor [1, X] @ (beta0, b) in the graph
    np.testing.assert_allclose(m.structure.X, np.column_stack([np.ones(len(y)), X]), atol=1e-12)
    assert m.structure.offset is None

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
    # the search alone: the same draws and model through two adapters make the same choices (the second opinions
    # run each backend's own sampler)
    res_same = pl.loo(idata, m, progressbar=False, search={"transforms": same},
                      second_opinions={"mixture": False, "smc": False})
    res_lr = pl.loo(dt, lr, progressbar=False, search={"transforms": same},
                    second_opinions={"mixture": False, "smc": False})
    np.testing.assert_allclose(res.pareto_k_psis.values, res_lr.pareto_k_psis.values, atol=1e-6)
    np.testing.assert_allclose(res_same.pareto_k_psis.values, res_lr.pareto_k_psis.values, atol=1e-6)
    np.testing.assert_allclose(res_same.elpd_i.values, res_lr.elpd_i.values, atol=1e-6)
    np.testing.assert_allclose(res_same.pareto_k.values, res_lr.pareto_k.values, atol=1e-6)
    np.testing.assert_array_equal(res_same.transform.values, res_lr.transform.values)
    assert np.sum(res_same.transform.values != "psis") >= 1

    # the known answer: exact LOO by quadrature on a grid over the three parameters (converged to
    # 1e-6 nats between 60 and 90 points per axis); ppl_loo is within 3 of its MCSEs (plus 0.005 nats)
    # wherever it does not say doubtful, every k above the threshold is marked doubtful, and its
    # mean |error| is no larger than plain PSIS's or arviz_stats moment matching's beyond MC error
    exact = _exact_logistic_loo(idata, X, y, s, s0)
    err = res.elpd_i.values - exact
    mcse = res.mcse_elpd_i.values
    ok = res.doubtful.values | (np.abs(err) <= 3 * mcse + 0.005)
    assert ok.all(), (np.flatnonzero(~ok), err[~ok], mcse[~ok])
    thr = min(1 - 1 / np.log10(1000), 0.7)
    assert np.all(res.doubtful.values[res.pareto_k.values > thr])
    ref = azs.loo(idata, pointwise=True, moment_match=True, model=model)
    plain = azs.loo(idata, pointwise=True)
    slack = 2 * np.sqrt(np.sum(mcse**2)) / len(y)
    for peer in (ref, plain):
        assert np.mean(np.abs(err)) <= np.mean(np.abs(np.asarray(peer.elpd_i) - exact)) + slack
    assert np.isfinite(res.elpd)


def _exact_logistic_loo(idata, X, y, s, s0, points=80, width=8.0):
    """elpd_i = log p(y) - log p(y_-i), both normalizers on a grid of mean +- width sd per axis."""
    from scipy.special import log_expit

    post = idata["posterior"]
    th = np.column_stack([post["beta0"].values.reshape(-1), post["b"].values.reshape(-1, X.shape[1])])
    mu, sd = th.mean(0), th.std(0)
    axes = [np.linspace(mu[j] - width * sd[j], mu[j] + width * sd[j], points) for j in range(th.shape[1])]
    g = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, th.shape[1])
    eta = g[:, :1] + g[:, 1:] @ X.T
    ll = np.where(np.asarray(y) == 1, log_expit(eta), log_expit(-eta))
    lp = ll.sum(1) - 0.5 * (g[:, 0] / s0) ** 2 - 0.5 * np.sum((g[:, 1:] / s) ** 2, axis=1)
    return logsumexp(lp) - logsumexp(lp[:, None] - ll, axis=0)


# ---------------------------------------------------------------------- 3. LOO probabilities, ROC, AUC
def test_loo_expectations_predicted_probability(logistic_fit, logistic_loo):
    """Plain-PSIS observations: the PSIS-weighted mean with arviz_stats's smoothed weights; every
    observation: the Bernoulli identity with elpd_i."""
    model, idata, X, y, s, s0 = logistic_fit
    m, res = logistic_loo
    n = len(y)

    def prob(p):
        return expit(np.asarray(p["beta0"])[:, None] + np.asarray(p["b"]) @ X.T)

    e = pl.loo_expectations(idata, res, prob, model=m)
    vals = np.asarray(e.values)
    assert e.dims == res.elpd_i.dims
    assert np.all((vals > 0) & (vals < 1))
    peer = azs.loo(idata, pointwise=True)
    lw = np.asarray(peer.log_weights.transpose("chain", "draw", "obs_id").values).reshape(-1, n)
    lw = lw - logsumexp(lw, axis=0)
    post = idata["posterior"]
    f0 = expit(post["beta0"].values.reshape(-1)[:, None] + post["b"].values.reshape(-1, 2) @ X.T)
    by_hand = np.sum(np.exp(lw) * f0, axis=0)
    psis = np.asarray(res.transform.values) == "psis"
    assert psis.sum() > 0
    np.testing.assert_allclose(vals[psis], by_hand[psis], rtol=0, atol=1e-8)
    # every observation, adapted or not: for a Bernoulli outcome E_-i[p(y = 1 | theta)] is the LOO
    # predictive probability of y = 1, so it equals exp(elpd_i) where y_i = 1 and 1 - exp(elpd_i) where
    # y_i = 0, with the same weights (adapted observations: their proposal's draws and weights)
    p_loo = np.exp(np.asarray(res.elpd_i.values))
    np.testing.assert_allclose(vals, np.where(y == 1, p_loo, 1.0 - p_loo), rtol=0, atol=1e-10)


def test_loo_roc_auc_pr():
    """pl.loo_roc on a GLM with overlapping classes: LOO probabilities read from the PyMC graph, the
    AUC against every (positive, negative) pair, the curves against their definitions."""
    rng = np.random.default_rng(17)
    n = 40
    X = rng.normal(size=(n, 2))
    y = (rng.uniform(size=n) < expit(0.3 + 1.2 * X[:, 0] - 0.8 * X[:, 1])).astype(int)
    j = np.argmax(X[:, 0])
    X[j, 0], y[j] = 3.5, 0  # one surprising label at high leverage: plain PSIS fails there
    with pm.Model(coords={"feature": [0, 1], "obs_id": np.arange(n)}) as model:
        b0 = pm.Normal("b0", 0, 2.5)
        b = pm.Normal("b", 0, 2.5, dims="feature")
        pm.Bernoulli("y", p=pm.math.invlogit(b0 + pm.math.dot(X, b)), observed=y, dims="obs_id")
        idata = pm.sample(**SAMPLE, random_seed=2)
    m = PyMCModel(model)
    assert m.structure is not None  # p = invlogit(affine) is the GLM
    res = pl.loo(idata, m, progressbar=False)

    def prob(p):
        return expit(np.asarray(p["b0"])[:, None] + np.asarray(p["b"]) @ X.T)

    # the adapter's own p(y = 1 | theta), read from the graph, equals the hand-written one
    pts = m.constrain(jnp.asarray(rng.normal(size=(20, m.dim))))
    np.testing.assert_allclose(m.predicted_probability(pts), prob(pts), rtol=1e-12)
    roc = pl.loo_roc(idata, res, model=m)
    p = np.asarray(roc.probability.values)
    assert roc.probability.dims == ("obs_id",)
    np.testing.assert_allclose(p, np.asarray(pl.loo_expectations(idata, res, prob, model=m).values), rtol=1e-12)
    np.testing.assert_array_equal(roc.y, y)
    # AUC: every (positive, negative) pair, ties count 1/2
    pos, neg = p[y == 1], p[y == 0]
    diff = pos[:, None] - neg[None, :]
    auc = float(np.mean((diff > 0) + 0.5 * (diff == 0)))
    assert 0.6 < auc < 1.0
    assert roc.auc == pytest.approx(auc, abs=1e-12)
    assert roc.auc == pytest.approx(np.trapezoid(roc.tpr, roc.fpr), abs=1e-12)
    levels = np.unique(p)[::-1]
    np.testing.assert_allclose(roc.tpr[1:], [np.mean(pos >= t) for t in levels])
    np.testing.assert_allclose(roc.fpr[1:], [np.mean(neg >= t) for t in levels])
    np.testing.assert_allclose(roc.precision[:-1], [np.mean(y[p >= t]) for t in levels[::-1]])
    p_in = prob(m.constrain(m.unconstrain(idata))).mean(axis=0)
    d_in = p_in[y == 1][:, None] - p_in[y == 0][None, :]
    print(f"\nLOO AUC {roc.auc:.4f} (in-sample {np.mean((d_in > 0) + 0.5 * (d_in == 0)):.4f}), LOO average "
          f"precision {roc.average_precision:.4f}; adapted {int(np.sum(res.transform.values != 'psis'))}")
    assert np.sum(res.transform.values != "psis") >= 1  # adapted weights enter the curve
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        pl.loo_roc(idata, res, y=np.arange(n), model=m)


def test_roc_pr_functions_with_ties():
    """Array-level curves against brute force on scores with ties (scikit-learn's conventions)."""
    from ppl_loo.workflow.downstream.loo_roc import average_precision, precision_recall_curve, roc_auc, roc_curve

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, size=40)
    score = np.round(rng.uniform(size=40), 1)  # many ties, across classes too
    pos, neg = score[y == 1], score[y == 0]
    diff = pos[:, None] - neg[None, :]
    assert np.any(diff == 0)
    assert roc_auc(y, score) == pytest.approx(np.mean((diff > 0) + 0.5 * (diff == 0)), abs=1e-12)
    fpr, tpr, thr = roc_curve(y, score)
    levels = np.unique(score)[::-1]
    np.testing.assert_array_equal(thr, np.r_[np.inf, levels])
    np.testing.assert_allclose(tpr, [0] + [np.mean(pos >= t) for t in levels])
    np.testing.assert_allclose(fpr, [0] + [np.mean(neg >= t) for t in levels])
    assert roc_auc(y, score) == pytest.approx(np.trapezoid(tpr, fpr), abs=1e-12)
    precision, recall, pthr = precision_recall_curve(y, score)
    np.testing.assert_array_equal(pthr, levels[::-1])
    np.testing.assert_allclose(precision[:-1], [np.mean(y[score >= t]) for t in levels[::-1]])
    np.testing.assert_allclose(recall[:-1], [np.mean(pos >= t) for t in levels[::-1]])
    assert (precision[-1], recall[-1]) == (1.0, 0.0)
    r = np.r_[[np.mean(pos >= t) for t in levels], ]
    pr = np.array([np.mean(y[score >= t]) for t in levels])
    ap = float(np.sum(np.diff(np.r_[0.0, r]) * pr))
    assert average_precision(y, score) == pytest.approx(ap, abs=1e-12)
    with pytest.raises(ValueError, match="both classes"):
        roc_auc(np.ones(5), np.arange(5.0))
    with pytest.raises(ValueError, match="0 or 1"):
        roc_curve(np.array([0, 2, 1]), np.arange(3.0))


# ---------------------------------------------------------------------- 4. errors
def test_discrete_free_variable_raises(bounded_fit):
    _, idata = bounded_fit
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1.0, observed=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"\['k'\] are discrete.*[Mm]arginalize"):
        pl.loo(idata, model)


def test_missing_posterior_group_raises(bounded_fit):
    model, idata = bounded_fit
    no_post = xr.DataTree.from_dict({"log_likelihood": idata["log_likelihood"].to_dataset()})
    with pytest.raises(ValueError, match="no 'posterior' group"):
        pl.loo(no_post, model)


def _with_posterior(idata, post):
    return xr.DataTree.from_dict({"posterior": post, "log_likelihood": idata["log_likelihood"].to_dataset()})


def test_draws_that_do_not_match_the_model(bounded_fit):
    """Names, shapes, support and values of the draws: a clear error (or warning) each, via pl.loo."""
    model, idata = bounded_fit
    post = idata["posterior"].to_dataset()
    cases = [
        (post.drop_vars("sigma"), r"'sigma' is missing"),
        (post.rename({"alpha": "intercept"}), r"'alpha' is missing"),
        (post.assign(slope=post["slope"].expand_dims(extra=2, axis=-1)), r"'slope' has per-draw shape \(2,\)"),
        (post.assign(sigma=-post["sigma"]), r"'sigma' has 1000 draw\(s\) outside the support"),
        (post.assign(slope=post["alpha"] + 5.0), r"'slope' has \d+ draw\(s\) outside the support"),
        (post.assign(alpha=post["alpha"].where(post["draw"] != 3)), r"'alpha' has non-finite draws"),
    ]
    for bad, msg in cases:
        with pytest.raises(ValueError, match=msg):
            pl.loo(_with_posterior(idata, bad), model, progressbar=False)
    # a dict of arrays with the wrong shape
    bad = {"alpha": np.zeros((10,)), "slope": np.zeros((10,)), "sigma": np.ones((10, 2))}
    with pytest.raises(ValueError, match="'sigma'"):
        PyMCModel(model).unconstrain(bad)
    # a log_likelihood group from other data than the model's: refused; with check_log_lik=False warned, and
    # the model's values are used
    ll = idata["log_likelihood"].to_dataset()
    shifted = xr.DataTree.from_dict({"posterior": post, "log_likelihood": ll + 0.5})
    with pytest.raises(ValueError,
                       match=r"log_likelihood\['y'\] differs from the model's.*compute=\{'check_log_lik': False\}"):
        pl.loo(shifted, model, progressbar=False)
    with pytest.warns(UserWarning, match="differs from the model's"):
        res = pl.loo(shifted, model, progressbar=False, compute={"check_log_lik": False})
    np.testing.assert_allclose(res.elpd, pl.loo(idata, model, progressbar=False).elpd, rtol=1e-12)


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


def test_simulating_through_pymc_prints_nothing(capfd):
    """``pm.sample_posterior_predictive`` (the simulator where the observed distribution has no JAX sampler) logs
    "Sampling: [y]" at every call; ppl_loo calls it once per block of points, so its log is silenced there. The
    draws: ``y_rep ~ N(mu, 1)`` at ``mu = 0``, mean 0 and variance 1 within Monte Carlo error."""
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=np.arange(5.0))
    adapter = PyMCModel(m)
    adapter.__dict__["_predictive_fn"] = None  # the cached JAX sampler set aside: PyMC's own path
    capfd.readouterr()
    y = adapter.replicated_data(np.zeros((4000, 1)), np.random.default_rng(0))
    out, err = capfd.readouterr()
    assert "Sampling" not in out + err
    assert y.shape == (4000, 5)
    assert abs(y.mean()) < 4 / np.sqrt(y.size) and abs(y.var() - 1) < 0.05


def test_draws_of_another_model_are_refused_before_anything_runs():
    """Draws of a hierarchical model of the same data, given with a flat model: the shared variable ``mu`` would be
    read and ``tau`` dropped; the check names the variable the model lacks."""
    y = np.arange(5.0)
    with pm.Model() as other:
        tau = pm.HalfNormal("tau", 1.0)
        mu = pm.Normal("mu", 0.0, tau)
        pm.Normal("y", mu, 1.0, observed=y)
        draws = pm.sample_prior_predictive(draws=200, random_seed=1)
    with pm.Model() as flat:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=y)
    posterior = draws["prior"].to_dataset()[["mu", "tau"]]
    with pytest.raises(ValueError, match=r"variable\(s\) 'tau' that the PyMC model does not have \(its variables: mu"):
        pl.as_model(flat).unconstrain(posterior)
    # the model that was fitted reads them: mu unchanged (an identity transform), tau on the log scale
    theta = pl.as_model(other).unconstrain(posterior)
    names = pl.as_model(other).layout.labels
    np.testing.assert_allclose(np.sort(theta[:, names.index("mu")]), np.sort(np.asarray(posterior["mu"]).ravel()))
