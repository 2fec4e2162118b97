"""``pl.loo_pit``: LOO-PIT with the adapted weights and the exact predictive CDF.

Known answers: identical to ``arviz_stats.loo_pit`` (to 1e-12) where nothing is adapted, when the CDF given is the
indicator of the same posterior predictive draws that ``arviz_stats`` counts; the closed form
``Phi((y_i - x_i' m_-i) / sqrt(sigma^2 + x_i' C_-i x_i))`` of a Gaussian regression with two high-leverage
outliers, where the adapted weights get it and plain PSIS weights are measurably off; a PyMC model's own
``logcdf`` (a conjugate normal mean, closed form); the randomized PIT of a discrete PyMC outcome within its exact
bounds, reproducible from its seed.
"""

from __future__ import annotations

import warnings

import arviz_stats as azs
import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr
from gaussian_models import leverage_fit, leverage_regression
from scipy import stats

import ppl_loo as pl
from ppl_loo.numerics.weighted import weighted_summary
from ppl_loo.sampling import sample_nuts

Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5])


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def test_identical_to_arviz_stats_with_the_indicator_of_the_same_predictive_draws():
    model = pl.JaxModel({"mu": ((), None)}, lambda v: jst.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    res = _quiet(pl.loo, data, model, progressbar=False, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    assert np.all(np.asarray(res.transform.values) == "psis")
    mu = np.asarray(data["posterior"]["mu"].values).reshape(-1)

    def replicate(m):  # a predictive draw per draw of mu, a deterministic function of it (NUTS repeats draws)
        m = np.asarray(m, dtype=float).reshape(-1, 1)
        return m + 1.3 * np.sin(1e3 * m + 7.0 * np.arange(Y.size))

    y_rep = replicate(mu)

    def indicator(params):  # 1[y_rep <= y] at the points given, as arviz_stats counts them at the draws
        return (replicate(params["mu"]) <= Y).astype(float)

    got = pl.loo_pit(data, res, model=model, cdf=indicator)
    tree = data.copy()
    tree["posterior_predictive"] = xr.Dataset({"y": (("chain", "draw", "obs"), y_rep.reshape(4, 500, -1))},
                                              coords={"obs": data["log_likelihood"]["y"].coords["obs"]})
    tree["observed_data"] = xr.Dataset({"y": (("obs",), Y)}, coords={"obs": tree["posterior_predictive"]["obs"]})
    ref = azs.loo_pit(tree, var_names="y")["y"]
    np.testing.assert_allclose(got.values, ref.values, rtol=0, atol=1e-12)
    assert got.name == "loo_pit" and set(got.weights.values) == {"psis"}


def test_leverage_points_against_the_closed_form():
    model, data, res = leverage_fit()

    def cdf(params):
        return stats.norm.cdf((model.y - np.asarray(params["beta"]) @ model.X.T) / model.sigma)

    got = pl.loo_pit(data, res, model=model, cdf=cdf)
    exact = np.empty(model.n_obs)
    for i in range(model.n_obs):
        m, C = model.posterior(drop=i)
        x = model.X[i]
        exact[i] = stats.norm.cdf((model.y[i] - x @ m) / np.sqrt(model.sigma**2 + x @ C @ x))
    # the two outliers sit far in the tails of their LOO predictive (PIT 3e-15 and 1 - 2e-7): compared on the
    # normal-quantile scale there, where a PIT's error in the tail shows
    assert exact[0] < 1e-10 and exact[1] > 1 - 1e-6
    assert np.max(np.abs(got.values - exact)) < 0.02, np.abs(got.values - exact)
    assert got.weights.values[0] == got.weights.values[1] == "adapted"
    z = stats.norm.ppf
    lw = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(-1, model.n_obs)
    beta = np.asarray(data["posterior"]["beta"].values).reshape(-1, model.dim)
    for i in (0, 1):
        assert abs(z(got.values[i]) - z(exact[i])) < 0.3, (i, got.values[i], exact[i])
        plain = weighted_summary(cdf({"beta": beta})[:, i], lw[:, i], "mean")
        assert abs(z(plain) - z(exact[i])) > 1.0, (i, plain, exact[i])  # plain PSIS weights: measurably off


def test_pymc_logcdf_normal_and_randomized_poisson():
    pm = pytest.importorskip("pymc")
    y = np.append(Y, 6.0)  # one outlier
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=y)
        idata = _quiet(pm.sample, draws=1000, tune=500, chains=4, cores=1, random_seed=2, progressbar=False)
    res = _quiet(pl.loo, idata, m, progressbar=False)
    got = pl.loo_pit(idata, res, model=m)
    exact = []
    for i in range(y.size):
        rest = np.delete(y, i)
        prec = 1 / 100 + rest.size
        exact.append(stats.norm.cdf((y[i] - rest.sum() / prec) / np.sqrt(1 + 1 / prec)))
    np.testing.assert_allclose(got.values, exact, atol=0.02)

    counts = np.array([2, 3, 1, 4, 2, 3, 2, 15])  # Poisson with a Gamma(2, 1) prior: the LOO predictive is NB
    with pm.Model() as mp:
        lam = pm.Gamma("lam", 2.0, 1.0)
        pm.Poisson("c", lam, observed=counts)
        idp = _quiet(pm.sample, draws=1000, tune=500, chains=4, cores=1, random_seed=3, progressbar=False)
    rp = _quiet(pl.loo, idp, mp, progressbar=False)
    a = pl.loo_pit(idp, rp, model=mp, random_seed=5)
    b = pl.loo_pit(idp, rp, model=mp, random_seed=5)
    np.testing.assert_array_equal(a.values, b.values)
    # random_seed=None: a seed derived from the input, so a rerun reproduces
    c = pl.loo_pit(idp, rp, model=mp)
    np.testing.assert_array_equal(c.values, pl.loo_pit(idp, rp, model=mp).values)
    for i in range(counts.size):
        rest = np.delete(counts, i)
        shape, rate = 2.0 + rest.sum(), 1.0 + rest.size
        nb = stats.nbinom(shape, rate / (rate + 1.0))
        lo, hi = nb.cdf(counts[i] - 1), nb.cdf(counts[i])
        for pit in (a, c):
            assert lo - 0.02 <= pit.values[i] <= hi + 0.02, (i, lo, pit.values[i], hi)


def test_bad_cdf_is_named():
    model = leverage_regression(seed=1, n=40)
    data = model.exact_draws(n_chains=2, n_draws=200, seed=11)
    res = _quiet(pl.loo, data, model, progressbar=False, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    with pytest.raises(ValueError, match="has no predictive CDF; pass cdf="):
        pl.loo_pit(data, res, model=model)
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        pl.loo_pit(data, res, model=model, cdf=lambda p: 2.0 + np.zeros((np.asarray(p["beta"]).shape[0], 40)))
    with pytest.raises(ValueError, match=r"outside \[0, 1\] \(or non-finite\)"):
        pl.loo_pit(data, res, model=model, cdf=lambda p: np.full((np.asarray(p["beta"]).shape[0], 40), np.nan))
    with pytest.raises(TypeError, match="`cdf` must be a callable"):
        pl.loo_pit(data, res, model=model, cdf=0.5)


def test_jax_model_cdf_from_its_declared_output():
    """A JaxModel that declares its output (``Output(fn, "gaussian", sigma)`` or ``"bernoulli"``) and its observed
    values needs no cdf=: identical to the CDF written by hand at the same points."""
    from ppl_loo.model import Output

    y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 4.0, 0.7])
    model = pl.JaxModel({"mu": ((), None)}, lambda v: jst.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(y, v["mu"], 1.0), obs_dims=("obs",), observed=y,
                        output=Output(lambda v: v["mu"] * np.ones((y.size, 1)), "gaussian", 1.0))
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    res = _quiet(pl.loo, data, model, progressbar=False, second_opinions={"mixture": False, "smc": False})
    auto = pl.loo_pit(data, res, model=model)
    by_hand = pl.loo_pit(data, res, model=model, cdf=lambda p: stats.norm.cdf(y, np.asarray(p["mu"])[:, None], 1.0))
    np.testing.assert_allclose(auto.values, by_hand.values, rtol=0, atol=1e-12)
    # the plot through arviz-plots draws these values (backend "none": no figure library needed)
    pc = pl.plot_loo_pit(data, res, model=model, backend="none")
    np.testing.assert_array_equal(pc.data[res.var_name].values, auto.values)
    # bernoulli: P(y_rep <= y) and P(y_rep < y) with P(y_rep = 1) = expit(a + b x)
    x, yb = np.linspace(-2, 2, 9), np.array([0, 0, 1, 0, 1, 1, 0, 1, 1])
    logit = pl.JaxModel({"a": ((), None), "b": ((), None)}, lambda v: 0.0,
                        lambda v: yb * (v["a"] + v["b"] * x) - jnp.logaddexp(0.0, v["a"] + v["b"] * x),
                        observed=yb, output=Output(lambda v: (v["a"] + v["b"] * x)[:, None], "bernoulli"))
    params = {"a": np.array([0.3, -1.0]), "b": np.array([1.5, 0.2])}
    upper, lower = logit.pit_cdf(params)
    p1 = 1 / (1 + np.exp(-(params["a"][:, None] + params["b"][:, None] * x)))
    np.testing.assert_allclose(upper, np.where(yb == 1, 1.0, 1 - p1), rtol=1e-12)
    np.testing.assert_allclose(lower, np.where(yb == 1, 1 - p1, 0.0), rtol=1e-12)
    assert pl.JaxModel({"mu": ((), None)}, lambda v: 0.0, lambda v: jst.norm.logpdf(y, v["mu"], 1.0)).pit_cdf is None


def test_jax_output_cdf_refuses_more_than_one_output_per_observation():
    from ppl_loo.model import Output

    y = np.array([0.1, -0.4, 1.2])
    model = pl.JaxModel({"mu": ((), None)}, lambda v: 0.0, lambda v: jst.norm.logpdf(y, v["mu"], 1.0), observed=y,
                        output=Output(lambda v: v["mu"] * np.ones((y.size, 2)), "gaussian", 1.0))
    with pytest.raises(ValueError, match=r"output.fn gives 6 values per draw for 3 observations.*pass pl.loo_pit cdf="):
        model.pit_cdf({"mu": np.array([0.0, 1.0])})
