"""``pl.loo_r2`` and ``pl.loo_metrics`` with the adapted weights.

Known answers: identical to ``arviz_stats.loo_r2`` / ``loo_metrics`` (to 1e-10) where nothing is adapted (the
posterior predictive group holding the predictive means arviz_stats averages); on a Gaussian regression with two
high-leverage outliers, the LOO predictive means are the closed form ``x_i' m_-i`` up to a fraction of their sd,
so the metrics equal those of the closed-form predictions, and plain PSIS weights give measurably different ones;
a PyMC model's own predictive mean (``moments.mean``), against the conjugate closed form.
"""

from __future__ import annotations

import warnings

import arviz_stats as azs
import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr
from gaussian_models import leverage_fit

import ppl_loo as pl
from ppl_loo.sampling import sample_nuts

Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5])


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


@pytest.fixture(scope="module")
def normal():
    x = np.linspace(-1, 1, 40)
    yy = 2.0 * x + np.random.default_rng(1).normal(size=40)
    model = pl.JaxModel({"a": ((), None), "b": ((), None)},
                        lambda v: jst.norm.logpdf(v["a"], 0.0, 10.0) + jst.norm.logpdf(v["b"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(yy, v["a"] + v["b"] * x, 1.0), obs_dims=("obs",), observed=yy)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    res = _quiet(pl.loo, data, model, progressbar=False, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    return model, data, res, x, yy


def test_identical_to_arviz_stats_where_nothing_is_adapted(normal):
    model, data, res, x, yy = normal
    assert np.all(np.asarray(res.transform.values) == "psis")

    def mean(p):
        return np.asarray(p["a"]).reshape(-1, 1) + np.asarray(p["b"]).reshape(-1, 1) * x

    post = data["posterior"]
    mu = mean({"a": post["a"].values.reshape(-1), "b": post["b"].values.reshape(-1)}).reshape(4, 500, -1)
    tree = data.copy()
    obs = data["log_likelihood"]["y"].coords["obs"]
    tree["posterior_predictive"] = xr.Dataset({"y": (("chain", "draw", "obs"), mu)}, coords={"obs": obs})
    tree["observed_data"] = xr.Dataset({"y": (("obs",), yy)}, coords={"obs": obs})
    got = pl.loo_r2(data, res, model=model, mean=mean, random_seed=42)  # arviz_stats' bootstrap seed
    ref = azs.loo_r2(tree, var_name="y", summary=False)
    np.testing.assert_allclose(got.values, np.asarray(ref).ravel(), rtol=0, atol=1e-10)
    # random_seed=None: a seed derived from the input, so a rerun reproduces; the same R² distribution
    derived = pl.loo_r2(data, res, model=model, mean=mean)
    np.testing.assert_array_equal(derived.values, pl.loo_r2(data, res, model=model, mean=mean).values)
    assert float(derived.mean()) == pytest.approx(float(np.mean(ref)), abs=0.01)
    for kind in ("mae", "mse", "rmse"):
        m = pl.loo_metrics(data, res, model=model, kind=kind, mean=mean)
        r = azs.loo_metrics(tree, kind=kind, round_to="none")
        assert m.kind == kind and m.mean == pytest.approx(r.mean, abs=1e-10) and m.se == pytest.approx(r.se, abs=1e-10)


def test_leverage_points_against_the_closed_form():
    model, data, res = leverage_fit()

    def mean(p):
        return np.asarray(p["beta"]) @ model.X.T

    exact = np.array([model.X[i] @ model.posterior(drop=i)[0] for i in range(model.n_obs)])
    got = pl.loo_r2(data, res, model=model, mean=mean, y=model.y, random_seed=42)
    np.testing.assert_allclose(got.attrs["ypred_loo"][:2], exact[:2], atol=0.3)
    want = xr.DataArray(model.y, dims=["obs"]).azstats.loo_r2(ypred_loo=xr.DataArray(exact, dims=["obs"]))
    assert abs(float(got.mean()) - float(np.mean(want))) < 0.01
    rmse = pl.loo_metrics(data, res, model=model, kind="rmse", mean=mean, y=model.y)
    assert rmse.mean == pytest.approx(np.sqrt(np.mean((model.y - exact) ** 2)), rel=0.01)
    # plain PSIS weights' predictive means of the two outliers are far from the closed form: another rmse
    lw = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(-1, model.n_obs)
    beta = np.asarray(data["posterior"]["beta"].values).reshape(-1, model.dim)
    w = np.exp(lw - lw.max(axis=0))
    plain = np.sum(w * (beta @ model.X.T), axis=0) / w.sum(axis=0)
    assert np.max(np.abs(plain[:2] - exact[:2])) > 1.0
    plain_rmse = np.sqrt(np.mean((model.y - plain) ** 2))
    assert abs(plain_rmse - rmse.mean) > 0.05


def test_pymc_predictive_mean_and_bad_inputs():
    pm = pytest.importorskip("pymc")
    y = np.append(Y, 6.0)
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=y)
        idata = _quiet(pm.sample, draws=1000, tune=500, chains=4, cores=1, random_seed=2, progressbar=False)
    res = _quiet(pl.loo, idata, m, progressbar=False)
    mae = pl.loo_metrics(idata, res, model=m, kind="mae")
    exact = np.array([np.delete(y, i).sum() / (1 / 100 + y.size - 1) for i in range(y.size)])
    assert mae.mean == pytest.approx(np.mean(np.abs(y - exact)), abs=0.01)
    with pytest.raises(ValueError, match=r"kind='r2': use one of 'mae', 'mse', 'rmse', 'acc', 'acc_balanced'"):
        pl.loo_metrics(idata, res, model=m, kind="r2")
    with pytest.raises(ValueError, match=r"y has 3 values but the LOO result has 13 observations"):
        pl.loo_r2(idata, res, model=m, y=[1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="`mean` must be a callable"):
        pl.loo_r2(idata, res, model=m, mean=np.zeros(13))


def test_logistic_regression_has_its_predictive_mean():
    """``pl.models.LogisticRegression``'s predictive mean is its predicted probability ``sigmoid(beta0 + x beta)``:
    ``pl.loo_metrics`` and ``pl.loo_r2`` need no ``mean=``, and give the numbers of that function passed as
    ``mean=`` (mae: the mean absolute difference of ``y`` and the LOO probabilities)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = (rng.uniform(size=40) < 1 / (1 + np.exp(-1.5 * X[:, 0]))).astype(int)
    model = pl.models.LogisticRegression(X, y)
    data = sample_nuts(model, num_chains=2, num_warmup=200, num_samples=200, random_seed=1)
    res = _quiet(pl.loo, data, model, progressbar=False)
    params = {k: data["posterior"][k].values.reshape(400, *data["posterior"][k].shape[2:]) for k in ("beta0", "beta")}
    np.testing.assert_allclose(model.predicted_probability(params),
                               1 / (1 + np.exp(-(params["beta0"][:, None] + params["beta"] @ X.T))), rtol=1e-12)

    def mean(p):
        return 1 / (1 + np.exp(-(np.asarray(p["beta0"])[:, None] + np.asarray(p["beta"]) @ X.T)))

    got = pl.loo_metrics(data, res, model=model, kind="mae")
    want = pl.loo_metrics(data, res, model=model, kind="mae", mean=mean)
    assert got.mean == pytest.approx(want.mean, rel=1e-12) and got.se == pytest.approx(want.se, rel=1e-12)
    prob = pl.loo_expectations(data, res, mean, model=model).values
    assert got.mean == pytest.approx(np.mean(np.abs(y - prob)), rel=1e-12)
    r2 = pl.loo_r2(data, res, model=model, random_seed=1)
    np.testing.assert_allclose(r2.values, pl.loo_r2(data, res, model=model, mean=mean, random_seed=1).values,
                               rtol=0, atol=1e-14)
