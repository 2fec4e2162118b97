"""``pl.loo_expectations(..., kind=, probs=)``: LOO means, variances, sds, medians and quantiles with the adapted
weights, and each estimate's own k-hat.

Known answers: identical to ``arviz_stats.loo_expectations`` (values and k-hats, to 1e-8) on a model where plain
PSIS handles every observation; the closed form of the LOO posterior of the linear predictor ``x_i' beta`` of a
Gaussian regression with two high-leverage outliers (normal with mean ``x_i' m_-i`` and variance
``x_i' C_-i x_i``), where the adapted weights get it and plain PSIS is measurably off; property tests of the
weighted quantile (monotone in the level, ``numpy.quantile`` for equal weights).
"""

from __future__ import annotations

import warnings

import arviz_stats as azs
import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr
from gaussian_models import leverage_fit
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import ppl_loo as pl
from ppl_loo.numerics.weighted import weighted_quantile, weighted_summary
from ppl_loo.sampling import sample_nuts

Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5])


@pytest.fixture(scope="module")
def normal():
    """A normal mean with known sigma and no outlier: plain PSIS handles every observation."""
    model = pl.JaxModel({"mu": ((), None)}, lambda v: jst.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # adapt="flagged": only observations with plain k-hat above 0.5 are searched (none here)
        res = pl.loo(data, model, progressbar=False, search={"adapt": "flagged"},
                     second_opinions={"mixture": False, "smc": False})
    return model, data, res


def _shifted_square(p):
    """A quantity per observation that differs across observations: (mu - y_i)^2 + i."""
    mu = np.asarray(p["mu"]).reshape(-1, 1)
    return (mu - Y) ** 2 + np.arange(Y.size)


@pytest.mark.parametrize("kind,probs", [("mean", None), ("var", None), ("sd", None), ("median", None),
                                        ("quantile", [0.05, 0.5, 0.9])])
def test_identical_to_arviz_stats_where_nothing_is_adapted(normal, kind, probs):
    model, data, res = normal
    assert np.all(np.asarray(res.transform.values) == "psis")
    got = pl.loo_expectations(data, res, _shifted_square, model=model, kind=kind, probs=probs)
    post = data["posterior"]
    h = _shifted_square({"mu": post["mu"].values.reshape(-1)}).reshape(post.sizes["chain"], post.sizes["draw"], -1)
    tree = data.copy()
    tree["posterior_predictive"] = xr.Dataset({"y": (("chain", "draw", "obs"), h)},
                                              coords={"obs": data["log_likelihood"]["y"].coords["obs"]})
    ref, khat = azs.loo_expectations(tree, var_name="y", kind=kind, probs=probs)
    np.testing.assert_allclose(got.values, ref.values, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(got.pareto_k.values, khat.values, rtol=1e-8, atol=1e-10)
    assert set(got.weights.values) == {"psis"} and got.attrs["kind"] == kind
    if kind == "quantile":
        assert got.dims == ref.dims == ("quantile", "obs") and list(got["quantile"].values) == probs


@pytest.fixture(scope="module")
def lev():
    return leverage_fit()


def test_leverage_points_sd_and_quantiles_against_the_closed_form(lev):
    """At the two outliers the LOO posterior of x_i' beta moved more than 3 sds from the full posterior's: the
    adapted weights give its sd and 10/50/90% quantiles to a fraction of the sd, plain PSIS does not."""
    model, data, res = lev
    lin = lambda p: np.asarray(p["beta"]) @ model.X.T  # noqa: E731
    probs = [0.1, 0.5, 0.9]
    mean = np.array([model.X[i] @ model.posterior(drop=i)[0] for i in range(model.n_obs)])
    sd = np.array([np.sqrt(model.X[i] @ model.posterior(drop=i)[1] @ model.X[i]) for i in range(model.n_obs)])
    exact_q = mean[:, None] + sd[:, None] * stats.norm.ppf(probs)[None, :]
    got_sd = pl.loo_expectations(data, res, lin, model=model, kind="sd")
    got_q = pl.loo_expectations(data, res, lin, model=model, kind="quantile", probs=probs)
    for i in (0, 1):
        assert got_sd.weights.values[i] == "adapted" and got_q.weights.values[i] == "adapted"
        assert abs(got_sd.values[i] - sd[i]) < 0.2 * sd[i], (i, got_sd.values[i], sd[i])
        assert np.all(np.abs(got_q.values[:, i] - exact_q[i]) < 0.25 * sd[i]), (i, got_q.values[:, i], exact_q[i])
        assert got_q.pareto_k.values[i] <= 0.7
    # the plain PSIS weights of the same draws, with the same arithmetic, are measurably off there
    lw = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(-1, model.n_obs)
    beta = np.asarray(data["posterior"]["beta"].values).reshape(-1, model.dim)
    for i in (0, 1):
        q_plain = weighted_summary(beta @ model.X[i], lw[:, i], "quantile", probs)
        assert np.max(np.abs(q_plain - exact_q[i])) > 1.0 * sd[i]


def test_compare_counts_the_weights_the_after_loo_functions_use(lev):
    """pl.compare's n_weights_adapted / n_weights_fallback are the observations on which the after-LOO functions use
    the adapted weights, and those (refit, mixture, SMC) on which they fall back to plain PSIS with a warning."""
    import copy

    model, data, res = lev
    lin = lambda p: np.asarray(p["beta"]) @ model.X.T  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        used = np.asarray(pl.loo_expectations(data, res, lin, model=model).weights.values).astype(str)
    table = pl.compare({"lev": res})
    tr = np.asarray(res.transform.values).astype(str)
    assert table.loc["lev", "n_weights_adapted"] == np.sum(used == "adapted") >= 2
    assert table.loc["lev", "n_weights_fallback"] == np.sum(np.isin(tr, ("refit", "mixture", "smc")))
    # one more observation whose elpd_i came from a refit (its draws not kept): a fallback, counted and warned about
    k = int(np.flatnonzero(tr == "psis")[0])
    other = copy.deepcopy(res)
    other.transform.values[k] = "refit"
    with pytest.warns(UserWarning, match=r"refit, mixture importance sampling or SMC.*plain PSIS weights"):
        again = pl.loo_expectations(data, other, lin, model=model)
    assert again.weights.values[k] == "psis"
    both = pl.compare({"lev": res, "other": other})
    assert both.loc["other", "n_weights_fallback"] == table.loc["lev", "n_weights_fallback"] + 1
    assert both.loc["other", "n_weights_adapted"] == table.loc["lev", "n_weights_adapted"]


def test_bad_kind_and_probs_name_the_input(normal):
    model, data, res = normal
    with pytest.raises(ValueError, match=r"kind='mode': use one of 'mean', 'median', 'var', 'sd', 'quantile'"):
        pl.loo_expectations(data, res, _shifted_square, model=model, kind="mode")
    with pytest.raises(ValueError, match=r"kind='quantile' needs probs="):
        pl.loo_expectations(data, res, _shifted_square, model=model, kind="quantile")
    with pytest.raises(ValueError, match=r"probs=\[0.5, 1.5\]: quantile levels must be numbers in \[0, 1\]"):
        pl.loo_expectations(data, res, _shifted_square, model=model, kind="quantile", probs=[0.5, 1.5])
    with pytest.raises(ValueError, match=r"probs= is for kind='quantile'"):
        pl.loo_expectations(data, res, _shifted_square, model=model, kind="mean", probs=[0.5])


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(x=st.lists(finite, min_size=1, max_size=40), p1=st.floats(0, 1), p2=st.floats(0, 1),
       seed=st.integers(0, 2**31 - 1))
def test_weighted_quantile_is_monotone_in_the_level(x, p1, p2, seed):
    w = np.random.default_rng(seed).uniform(0.01, 1.0, size=len(x))
    lo, hi = sorted((p1, p2))
    q_lo, q_hi = weighted_quantile(x, w, lo), weighted_quantile(x, w, hi)
    assert q_lo <= q_hi + 1e-9 * (1 + abs(q_hi))
    assert min(x) - 1e-9 * (1 + abs(min(x))) <= q_lo and q_hi <= max(x) + 1e-9 * (1 + abs(max(x)))


@settings(max_examples=200, deadline=None)
@given(x=st.lists(finite, min_size=1, max_size=40), p=st.floats(0, 1), scale=st.floats(1e-3, 1e3))
def test_equal_weights_give_numpy_quantile(x, p, scale):
    got = weighted_quantile(x, np.full(len(x), scale), p)
    assert got == pytest.approx(float(np.quantile(x, p)), rel=1e-9, abs=1e-6)


def test_values_at_the_draws_equal_the_callable(normal):
    """Values at the posterior draws (an array ``(chain, draw, obs)``, ``(S, n)`` or a DataArray) with a result whose
    weights are all on the posterior draws: the callable's numbers and k-hats (the same weights and raw ratios),
    without a model."""
    model, data, res = normal
    mu = np.asarray(data["posterior"]["mu"].values)
    arr = (mu[..., None] - Y) ** 2 + np.arange(Y.size)
    for kind, probs in (("mean", None), ("sd", None), ("quantile", [0.1, 0.9])):
        want = pl.loo_expectations(data, res, _shifted_square, model=model, kind=kind, probs=probs)
        for values in (arr, arr.reshape(-1, Y.size),
                       xr.DataArray(arr, dims=("chain", "draw", "obs"), coords={"obs": res.elpd_i.obs.values})):
            got = pl.loo_expectations(data, res, values, kind=kind, probs=probs)
            np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-12)
            np.testing.assert_allclose(got.pareto_k.values, want.pareto_k.values, rtol=0, atol=1e-12)


def test_values_at_the_draws_refused_where_adapted(lev):
    """Adapted observations' weights are on transformed draws: values at the posterior draws do not apply there,
    and the error names the fix (a callable with model=)."""
    model, data, res = lev
    assert np.any(np.asarray(res.transform.values) != "psis")
    values = np.zeros((res.n_samples, res.n_data_points))
    with pytest.raises(ValueError, match=r"use adapted proposals.*values\(params\).*model="):
        pl.loo_expectations(data, res, values)


def test_bad_array_input_names_it(normal):
    model, data, res = normal
    S, n = res.n_samples, res.n_data_points
    with pytest.raises(ValueError, match=r"values has 10 draws x 12 observations but the weights 2000 x 12"):
        pl.loo_expectations(data, res, np.zeros((10, n)))
    with pytest.raises(ValueError, match=r"values has shape \(12,\)"):
        pl.loo_expectations(data, res, np.zeros(n))
    with pytest.raises(ValueError, match=r"values has NaN or infinite entries"):
        pl.loo_expectations(data, res, np.full((S, n), np.nan))
    with pytest.raises(ValueError, match=r"needs res= \(a result of pl.loo\) or log_weights="):
        pl.loo_expectations(values=np.zeros((S, n)))
    with pytest.raises(ValueError, match=r"conventions='r'"):
        pl.loo_expectations(data, res, np.zeros((S, n)), conventions="r")
    with pytest.raises(ValueError, match=r"log_weights has 2000 draws x 3 observations and values 2000 x 12"):
        pl.loo_expectations(values=np.zeros((S, n)), log_weights=np.zeros((S, 3)))
    with pytest.raises(ValueError, match=r"needs values="):
        pl.loo_expectations(data, res)


def test_given_log_weights_are_a_weighted_mean():
    """``log_weights=`` alone: the weighted mean is ``sum w x / sum w`` (unnormalized weights accepted), the quantile
    under equal weights is ``numpy.quantile`` (both conventions)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    lw = rng.normal(size=(400, 3))
    got = pl.loo_expectations(values=x, log_weights=lw)
    w = np.exp(lw)
    np.testing.assert_allclose(got.values, np.sum(w * x, 0) / np.sum(w, 0), rtol=1e-12)
    assert set(got.weights.values.tolist()) == {"given"}
    for conv in ("arviz", "R"):
        q = pl.loo_expectations(values=x, log_weights=np.zeros_like(x), kind="quantile", probs=[0.25, 0.5],
                                conventions=conv)
        np.testing.assert_allclose(q.values, np.quantile(x, [0.25, 0.5], axis=0), rtol=1e-12)
