"""ppl_loo against R's ``loo`` package (2.5.1, Debian's) on the same input.

Given R's own PSIS weights, the LOO mean (``E_loo``) and the predictive metrics are identical to R's to 1e-8;
loo 2.5.1's variance, quantile and expectation k-hat are defined differently from ``arviz_stats`` 1.3's (which
``pl.loo_expectations`` follows), and the test pins what R computes there
(``test_what_r_251_computes_for_variance_and_quantiles``). PSIS itself differs between R 2.5.1 and ``arviz_stats`` 1.3
(whose numbers ``pl.loo`` reproduces to 1e-8) in the tail smoothing, at relative 1e-5 in ``elpd_i``: those comparisons,
and the end-to-end ones through ``pl`` functions, carry that tolerance.

The input (a normal mean with known sigma, 12 ordinary observations and one outlier; 4 x 500 draws) and R's
numbers are committed in ``tests/data/r_loo/`` by ``benchmarks/r_loo/make_reference.py`` (R's side:
``benchmarks/r_loo/reference.R``), so this test needs no R. Both sides use ``r_eff = 1``. Compared: ``loo``'s
pointwise ``elpd_loo`` and Pareto k-hats, ``pareto_k_ids`` and ``pareto_k_table``; ``E_loo`` of a pointwise quantity
for the mean, the variance and quantiles, with the k-hat of each expectation; and the LOO predictive metrics (MAE,
MSE, RMSE and their SEs; loo 2.5.1 has no ``loo_predictive_metric``, so R's side applies loo 2.6's formulas to
``E_loo``'s means). Not compared: ``loo_crps``/``loo_scrps`` (loo >= 2.6, and an estimator from two independent
predictive draws, where ``pl.loo_score`` uses ``arviz_stats``' from one: equal in expectation only).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr

import ppl_loo as pl
from ppl_loo.numerics.weighted import function_khat, weighted_summary

DATA = Path(__file__).resolve().parent / "data" / "r_loo"


@pytest.fixture(scope="module")
def fitted():
    inp = np.load(DATA / "input.npz")
    mu, y = inp["mu"], inp["y"]
    ll = -0.5 * np.log(2 * np.pi) - 0.5 * (y - mu[..., None]) ** 2
    coords = {"chain": np.arange(mu.shape[0]), "draw": np.arange(mu.shape[1]), "obs": np.arange(y.size)}
    data = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"mu": (("chain", "draw"), mu)}, coords=coords),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)}, coords=coords),
        "observed_data": xr.Dataset({"y": (("obs",), y)}, coords={"obs": coords["obs"]})})
    model = pl.JaxModel({"mu": ((), None)}, lambda v: jst.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(y, v["mu"], 1.0), obs_dims=("obs",), observed=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, reff=1.0)  # plain PSIS: nothing adapted, as R's loo
    ref = json.loads((DATA / "reference.json").read_text())
    return data, model, res, y, inp["probs"], ref


def _quantity(y):
    return lambda p: (np.asarray(p["mu"]).reshape(-1, 1) - y) ** 2 + np.arange(y.size)


def test_loo_pointwise_and_pareto_k_ids(fitted):
    """PSIS itself: R 2.5.1 (2022) and arviz_stats 1.3 (which ``pl.loo`` equals to 1e-8, tests/test_plain_psis.py)
    smooth the tail slightly differently: elpd_i agree to relative 1e-4 (1.2e-5 seen), k-hats to 0.05 (0.014)."""
    data, model, res, y, probs, ref = fitted
    np.testing.assert_allclose(np.asarray(res.elpd_i).ravel(), ref["elpd_i"], rtol=1e-4)
    np.testing.assert_allclose(np.asarray(res.pareto_k).ravel(), ref["pareto_k"], atol=0.05)
    assert res.elpd == pytest.approx(ref["elpd_loo"], rel=1e-5)
    assert res.se == pytest.approx(ref["se_elpd_loo"], rel=1e-4)
    assert res.p == pytest.approx(ref["p_loo"], rel=1e-3)
    # R's ids are 1-based
    assert list(res.pareto_k_ids(threshold=0.7)) == [i - 1 for i in ref["pareto_k_ids"]]
    # R's table has a fourth row (k > 1 split at 1 and Inf the same way); ours three before adapting
    assert list(res.pareto_k_table()["count"]) == ref["pareto_k_table"][:3] or \
        list(res.pareto_k_table()["count"]) == ref["pareto_k_table"]


def _r_weights_summary(fitted, kind):
    """Our weighted arithmetic (:mod:`ppl_loo.numerics.weighted`, what ``pl.loo_expectations`` runs per observation)
    on R's own PSIS weights: values and k-hats per observation."""
    data, model, res, y, probs, ref = fitted
    inp = np.load(DATA / "input.npz")
    mu, lw = inp["mu"].reshape(-1), inp["r_log_weights"]
    h = _quantity(y)({"mu": mu})
    ll = -0.5 * np.log(2 * np.pi) - 0.5 * (y - mu[:, None]) ** 2
    vals = [weighted_summary(h[:, i], lw[:, i], kind, probs) for i in range(y.size)]
    khat = [function_khat(h[:, i], -ll[:, i], kind) for i in range(y.size)]  # R: from the raw ratios
    return np.asarray(vals), np.asarray(khat), lw, mu


def test_e_loo_mean_on_r_weights(fitted):
    """Given R's PSIS weights, the LOO mean equals R's ``E_loo(type = "mean")`` to 1e-8."""
    ref = fitted[-1]
    vals, _, _, _ = _r_weights_summary(fitted, "mean")
    np.testing.assert_allclose(vals, np.asarray(ref["mean"]["value"]), rtol=1e-8, atol=1e-12)


def test_what_r_251_computes_for_variance_and_quantiles(fitted):
    """loo 2.5.1 defines the LOO variance, quantiles and the expectation's k-hat differently from ``arviz_stats``
    1.3 (which ``pl.loo_expectations`` equals to 1e-8): its ``.wvar`` is ``sum(w^2 (x - m)^2) / r_eff`` (the Monte
    Carlo variance of the weighted mean, not the variance of ``x``: ours is ``sum(w (x - m)^2) / (1 - sum w^2)``,
    larger by about the ESS here), its ``.wquant`` interpolates the weighted CDF linearly (ours: the weighted type-7
    quantile), and its k-hat fits ``sqrt(1 + h^2) r`` (ours: Vehtari et al. 2024's ``max(k(r), k(h r))``). This pins
    those facts on R's own output, so that a reader of the comparison knows why only the mean is compared to 1e-8."""
    data, model, res, y, probs, ref = fitted
    vals, _, lw, mu = _r_weights_summary(fitted, "var")
    h = _quantity(y)({"mu": mu})
    w = np.exp(lw - lw.max(axis=0))
    w /= w.sum(axis=0)
    m = np.sum(w * h, axis=0)
    np.testing.assert_allclose(np.sum(w**2 * (h - m) ** 2, axis=0), ref["variance"]["value"], rtol=1e-8)
    np.testing.assert_allclose(vals, np.sum(w * (h - m) ** 2, axis=0) / (1 - np.sum(w**2, axis=0)), rtol=1e-8)
    quant, _, _, _ = _r_weights_summary(fitted, "quantile")
    # the two interpolations differ by a fraction of the spacing of the draws: relative 1e-2 here (3e-3 seen)
    np.testing.assert_allclose(quant.ravel(), ref["quantile"]["value"], rtol=1e-2)


@pytest.mark.parametrize("kind", ["mae", "mse", "rmse"])
def test_predictive_metrics_on_r_weights(fitted, kind):
    """The LOO predictive metrics ``pl.loo_metrics`` computes (``arviz_stats``' ``metrics`` on the LOO means) from
    R's LOO means equal R's (loo 2.6's formulas) to 1e-8."""
    from arviz_stats.base import array_stats

    data, model, res, y, probs, ref = fitted
    _, _, lw, mu = _r_weights_summary(fitted, "mean")
    pred = np.array([weighted_summary(mu, lw[:, i], "mean") for i in range(y.size)])
    est, se = array_stats.metrics(y, pred, kind=kind)
    assert est == pytest.approx(ref[kind]["estimate"], rel=1e-8)
    assert se == pytest.approx(ref[kind]["se"], rel=1e-8)


def test_pl_functions_against_r_end_to_end(fitted):
    """``pl.loo_expectations`` and ``pl.loo_metrics`` end to end (our PSIS weights) against R: as close as the two
    PSIS implementations' weights are (relative 1e-3 here; 1.2e-4 seen)."""
    data, model, _, y, probs, ref = fitted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # with the model (its weights kept); adapt="flagged": only observations plain PSIS cannot take are searched
        res = pl.loo(data, model, reff=1.0, progressbar=False, search={"adapt": "flagged"},
                     second_opinions={"mixture": False, "smc": False})
    plain = np.asarray(res.transform.values).ravel() == "psis"
    assert plain.sum() >= 12
    got = pl.loo_expectations(data, res, _quantity(y), model=model, kind="mean")
    np.testing.assert_allclose(got.values.ravel()[plain], np.asarray(ref["mean"]["value"])[plain], rtol=1e-3)
    if plain.all():
        m = pl.loo_metrics(data, res, model=model, kind="rmse", y=y,
                           mean=lambda p: np.asarray(p["mu"]).reshape(-1, 1) + np.zeros(y.size))
        assert m.mean == pytest.approx(ref["rmse"]["estimate"], rel=1e-4)
