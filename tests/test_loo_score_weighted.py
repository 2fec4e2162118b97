"""``ppl_loo.workflow.downstream.loo_score``: the CRPS and SCRPS of weighted draws, binary and other discrete outcomes.

Known answers: binary draws with weight ``p`` on 1 have ``E|Y - y| = 1 - p`` (``y = 1``) and ``E|Y - Y'| = 2 p (1 -
p)``, so ``SCRPS = -A / G - log(G) / 2`` and ``CRPS = -(A - G / 2)`` in closed form, also for ``p = 1e-20``, where
``arviz_stats``' ``2 F^- + w - 1`` cancels; a discrete outcome's ``G`` equals the brute-force double sum
``sum_s sum_t w_s w_t |y_s - y_t|``; on draws that are not all equal, ``arviz_stats``' array function to 1e-10; on a
PyMC logistic regression (binary outcome), ``pl.loo_score``' SCRPS and CRPS equal ``arviz_stats.loo_score``'s with
the same plain PSIS weights to 1e-10 at every observation that kept them; constant draws (the SCRPS undefined:
``G = 0``) are refused, before anything is simulated.
"""

from __future__ import annotations

import warnings

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr
from arviz_stats.base import array_stats

import ppl_loo as pl
from ppl_loo.workflow.downstream import points
from ppl_loo.workflow.downstream.loo_score import weighted_scores


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _arviz(y_rep, y_obs, lw, kind):
    return np.asarray(array_stats.loo_score(y_rep, y_obs, lw, kind=kind, chain_axis=None, draw_axis=-1)).ravel()


@pytest.mark.parametrize("p", [0.5, 0.13, 1e-20])
def test_binary_draws_closed_form(p):
    # 0/1 draws, the weight p on the ones, observed y = 1 and y = 0
    y_rep = np.array([[0.0, 1.0, 0.0, 1.0, 0.0]] * 2)
    w = np.array([(1 - p) / 3, p / 2, (1 - p) / 3, p / 2, (1 - p) / 3])
    lw = np.log(np.vstack([w, w]))
    y_obs = np.array([1.0, 0.0])
    g = 2 * p * (1 - p)
    a = np.array([1 - p, p])
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "crps"), -(a - g / 2), rtol=1e-12, atol=0)
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "scrps"), -a / g - 0.5 * np.log(g), rtol=1e-12)


def test_discrete_draws_equal_the_double_sum_and_arviz_stats():
    rng = np.random.default_rng(0)
    y_rep = rng.poisson(2.0, size=(20, 300)).astype(float)  # ties everywhere
    lw = rng.normal(size=(20, 300))
    y_obs = rng.poisson(2.0, size=20).astype(float)
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    a = np.sum(w * np.abs(y_rep - y_obs[:, None]), axis=1)
    g = np.einsum("ns,nt,nst->n", w, w, np.abs(y_rep[:, :, None] - y_rep[:, None, :]))
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "scrps"), -a / g - 0.5 * np.log(g), rtol=1e-12)
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "crps"), -(a - g / 2), rtol=1e-12)
    for kind in ("crps", "scrps"):
        np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, kind), _arviz(y_rep, y_obs, lw, kind),
                                   rtol=0, atol=1e-10)
    # continuous draws, and draws of zero weight (padding) change nothing
    y_rep = rng.normal(size=(20, 300))
    for kind in ("crps", "scrps"):
        got = weighted_scores(y_rep, y_obs, lw, kind)
        np.testing.assert_allclose(got, _arviz(y_rep, y_obs, lw, kind), rtol=0, atol=1e-10)
        padded = weighted_scores(np.c_[y_rep, np.full((20, 7), 5.0)], y_obs, np.c_[lw, np.full((20, 7), -np.inf)],
                                 kind)
        np.testing.assert_allclose(padded, got, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def logistic():
    """A PyMC logistic regression (60 observations, 2 features) with its plain-PSIS ``pl.loo`` result."""
    pm = pytest.importorskip("pymc")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    y = (rng.uniform(size=60) < 1 / (1 + np.exp(-(X @ np.array([0.8, -0.5]))))).astype(int)
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    idata = _quiet(pm.sample, draws=500, tune=500, chains=2, cores=1, random_seed=1, progressbar=False, model=m,
                   idata_kwargs={"log_likelihood": True})
    idata = _quiet(pm.sample_posterior_predictive, idata, model=m, random_seed=2, progressbar=False,
                   extend_inferencedata=True)
    res = _quiet(pl.loo, idata, m, progressbar=False, random_seed=1, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    return m, idata, res


def test_binary_model_equals_arviz_stats_where_weights_are_psis(logistic):
    m, idata, res = logistic
    pp = idata["posterior_predictive"]["y"].values.reshape(-1, 60)
    assert np.all(pp.min(axis=0) < pp.max(axis=0))  # no constant draws: arviz_stats' SCRPS is defined everywhere
    for kind in ("crps", "scrps"):
        got = _quiet(pl.loo_score, idata, res, model=m, kind=kind, random_seed=0, pointwise=True)
        ref = _quiet(azs.loo_score, idata, kind=kind, pointwise=True, log_weights=res.log_weights,
                     pareto_k=res.pareto_k_psis)
        psis = got.pointwise.weights.values == "psis"
        assert psis.sum() >= 55
        np.testing.assert_allclose(got.pointwise.values[psis], ref.pointwise.values[psis], rtol=0, atol=1e-10)
        assert np.all(np.isfinite(got.pointwise.values))
    # plain PSIS-LOO (no model): arviz_stats' own numbers
    plain = _quiet(pl.loo, idata, None, progressbar=False)
    got, ref = _quiet(pl.loo_score, idata, plain, kind="scrps"), _quiet(azs.loo_score, idata, kind="scrps")
    assert got.mean == pytest.approx(ref.mean, abs=1e-10)


def test_constant_draws_refused_before_simulating(logistic):
    m, idata, res = logistic
    tree = idata.copy()
    pp = tree["posterior_predictive"]["y"].values.copy()
    psis = np.flatnonzero(np.asarray(res.transform.values) == "psis")
    j = int(psis[0])
    pp[..., j] = 1  # every draw of observation j is 1: E|Y - Y'| = 0
    tree["posterior_predictive"] = xr.Dataset({"y": (tree["posterior_predictive"]["y"].dims, pp)},
                                              coords=tree["posterior_predictive"].coords)
    calls, before = [], points.BUILT["points"]

    def simulate(params, rng):
        calls.append(1)
        return np.zeros((len(params["b"]), 60))

    with pytest.raises(ValueError, match=rf"scrps of 1 observation\(s\) \(y\[y_dim_0={j}\]\) is not defined"):
        _quiet(pl.loo_score, tree, res, model=m, kind="scrps", random_seed=0, simulate=simulate)
    assert calls == [] and points.BUILT["points"] == before  # refused before any point was built or simulated
    # the CRPS of a constant predictive is defined: |1 - y_j|, as arviz_stats
    crps = _quiet(pl.loo_score, tree, res, model=m, kind="crps", random_seed=0, pointwise=True)
    y_j = float(idata["observed_data"]["y"].values[j])
    assert crps.pointwise.values[j] == pytest.approx(-abs(1 - y_j), abs=1e-12)
