"""ppl_loo against R's ``loo`` 2.10.1 (with ``posterior`` 1.7.1) on the same inputs.

R's numbers are committed in ``tests/data/r_loo/`` by ``benchmarks/r_loo/make_reference.py`` (R's side:
``benchmarks/r_loo/reference.R``; R itself: ``benchmarks/r_loo/install_r_loo.sh``), so this test needs no R. Five
cases: R's ``example_loglik_array()``; a normal mean with one outlier (4 x 500 draws); its first 4 x 50 draws; a
linear regression with a high-leverage outlier; a logistic regression. R runs its recommended workflow,
``loo(log_lik, r_eff = relative_eff(exp(log_lik), chain_id))``; ppl_loo the same with
``pl.loo(data, compute={"conventions": "R"})``.

Where the definitions agree, ppl_loo equals R to 1e-8 (measured: 1e-13): ``relative_eff``; PSIS (the tail length,
the smoothed weights, k-hats, also with ``r_eff = 1``); ``loo``'s pointwise elpd, p_loo and looic, their sums and
SEs, ``pareto_k_table`` with its minimum ``n_eff``; ``waic``; ``E_loo``'s mean, variance, sd, quantiles and each one's
k-hat (``pl.loo_expectations(data, res, values, conventions="R")``); ``loo_predictive_metric``; ``loo_crps`` and
``loo_scrps`` (``pl.loo_crps`` / ``pl.loo_scrps`` given R's shuffle); ``loo_compare``'s ``se_diff``
(``pl.compare``'s ``dse``). R's ``mcse_elpd_loo`` and ``n_eff`` are other estimators than ppl_loo's (ppl_loo's MCSE
adds the spread over chains): the test computes R's formulas on ppl_loo's weights and gets R's numbers to 1e-8.

Where they do not agree, R's numbers are pinned with a sentence: ``E_loo``'s quantiles and k-hats under
``arviz_stats``' conventions (``pl.loo_expectations``' default for results computed so; R interpolates the weighted
CDF linearly between draws and fits ``posterior::pareto_khat`` with the PSIS tail length), and the relative
efficiency of very short chains (``posterior``'s Geyer sequence stops two lags earlier than ``arviz_stats``').
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr
from scipy.special import logsumexp

import ppl_loo as pl
from ppl_loo.numerics.psis import khat_threshold, psis_tail_length, psislw
from ppl_loo.numerics.weighted import function_khat, weighted_summary

pytestmark = pytest.mark.x64

DATA = Path(__file__).resolve().parent / "data" / "r_loo"
CASES = ("example", "normal_outlier", "few_draws", "leverage", "logistic")
TOL = 1e-8


def _normal_ll(mu, y, sigma=1.0):
    return -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * ((y[None, :] - mu[:, None]) / sigma) ** 2


def _inputs():
    """``{case: (ll (S, n), chains, pred or None, y or None)}`` rebuilt from the stored draws as
    ``make_reference.py`` built them."""
    inp = np.load(DATA / "input.npz")
    mu, y = inp["mu"], inp["y"]
    few = mu[:, :50].reshape(-1)
    b_lev, b_log = inp["beta_leverage"].reshape(-1, 2), inp["beta_logistic"].reshape(-1, 2)
    X, yl = inp["X_leverage"], inp["y_leverage"]
    Xg, yg = inp["X_logistic"], inp["y_logistic"]
    eta = b_log @ Xg.T
    return {
        "example": (inp["example_log_lik"], 2, None, None),
        "normal_outlier": (_normal_ll(mu.reshape(-1), y), 4, np.repeat(mu.reshape(-1, 1), y.size, 1), y),
        "few_draws": (_normal_ll(few, y), 4, np.repeat(few[:, None], y.size, 1), y),
        "leverage": (-0.5 * np.log(2 * np.pi) - 0.5 * (yl[None, :] - b_lev @ X.T) ** 2, 4, b_lev @ X.T, yl),
        "logistic": (yg * -np.logaddexp(0, -eta) + (1 - yg) * -np.logaddexp(0, eta), 4, 1 / (1 + np.exp(-eta)), yg),
    }


def _tree(ll, chains):
    S, n = ll.shape
    arr = ll.reshape(chains, S // chains, n)
    coords = {"chain": np.arange(chains), "draw": np.arange(S // chains), "obs": np.arange(n)}
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset({"a": (("chain", "draw"), arr[..., 0])}, coords=coords),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), arr)}, coords=coords)})


@pytest.fixture(scope="module")
def ref():
    out = np.load(DATA / "reference.npz")
    return {key: out[key] for key in out.files}


@pytest.fixture(scope="module", params=CASES)
def case(request, ref):
    name = request.param
    ll, chains, pred, y = _inputs()[name]
    data = _tree(ll, chains)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, compute={"conventions": "R"})
    r = {key.split("/", 1)[1]: value for key, value in ref.items() if key.startswith(name + "/")}
    return name, ll, chains, pred, y, data, res, r


def test_versions():
    versions = json.loads((DATA / "reference.json").read_text())
    assert versions["loo_version"] == "2.10.1" and versions["posterior_version"] == "1.7.1"


def test_relative_eff(case):
    """``pl.relative_eff`` is R's ``relative_eff(exp(log_lik), chain_id)``; on 4 chains of 50 draws ``posterior``'s
    Geyer sequence (``while t < n - 5``) stops two lags before ``arviz_stats``' (``t < n - 3``) on some
    observations: R's value is pinned there (0.0044 apart at most)."""
    name, ll, chains, pred, y, data, res, r = case
    got = pl.relative_eff(data).values
    if name == "few_draws":
        assert np.max(np.abs(got - r["r_eff"])) == pytest.approx(0.0044, abs=5e-4)
        # the tail length is 0.2 S = 40 whichever value is used: loo's numbers still agree to 1e-8 (below)
    else:
        np.testing.assert_allclose(got, r["r_eff"], rtol=TOL)


def test_psis_weights_k_and_tail_length(case):
    """R's ``psis`` with its own ``r_eff``: the tail length ``ceiling(min(0.2 S, 3 sqrt(S / r_eff)))``, the
    normalized smoothed log weights and the k-hats, with ``psislw(..., conventions="R")``."""
    name, ll, chains, pred, y, data, res, r = case
    S = ll.shape[0]
    assert [psis_tail_length(S, v, "R") for v in r["r_eff"]] == list(r["tail_len"].astype(int))
    lw, k = psislw(-ll.T, r["r_eff"], "R")
    np.testing.assert_allclose(np.asarray(lw), r["log_weights"], rtol=0, atol=TOL)
    np.testing.assert_allclose(np.asarray(k), r["pareto_k"], rtol=0, atol=TOL)
    assert khat_threshold(S) == pytest.approx(r["k_threshold"][0], rel=1e-15)


def test_loo_estimates_and_pointwise(case):
    name, ll, chains, pred, y, data, res, r = case
    n = ll.shape[1]
    np.testing.assert_allclose(res.elpd_i.values, r["elpd_loo_i"], rtol=0, atol=TOL)
    np.testing.assert_allclose(res.p_loo_i.values, r["p_loo_i"], rtol=0, atol=TOL)
    np.testing.assert_allclose(-2 * res.elpd_i.values, r["looic_i"], rtol=0, atol=TOL)
    np.testing.assert_allclose(res.pareto_k.values, r["pareto_k"], rtol=0, atol=TOL)
    np.testing.assert_allclose(res.pareto_k.values, r["influence_pareto_k"], rtol=0, atol=TOL)
    assert res.elpd == pytest.approx(r["elpd_loo"][0], abs=TOL)
    assert res.se == pytest.approx(r["se_elpd_loo"][0], abs=TOL)
    assert res.p == pytest.approx(r["p_loo"][0], abs=TOL)
    assert np.sqrt(n) * np.std(res.p_loo_i.values, ddof=1) == pytest.approx(r["se_p_loo"][0], abs=TOL)
    assert -2 * res.elpd == pytest.approx(r["looic"][0], abs=TOL) and 2 * res.se == pytest.approx(r["se_looic"][0],
                                                                                                    abs=TOL)
    est = res.estimates  # R's fit$estimates
    want = [[r[q][0], r[f"se_{q}"][0]] for q in ("elpd_loo", "p_loo", "looic")]
    np.testing.assert_allclose(est.loc[["elpd_loo", "p_loo", "looic"], ["Estimate", "SE"]].values, want, rtol=0,
                               atol=TOL)
    assert res.looic == est.loc["looic", "Estimate"] and res.se_looic == est.loc["looic", "SE"]
    # r_eff = 1 (R's default; pl.loo's reff=1.0): only the tail length's rounding differs from arviz_stats
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = pl.loo(data, reff=1.0, compute={"conventions": "R"})
        mine = pl.loo(data, reff=1.0)
        theirs = azs.loo(data, reff=1.0, pointwise=True)
    np.testing.assert_allclose(one.elpd_i.values, r["elpd_loo_i_reff1"], rtol=0, atol=TOL)
    np.testing.assert_allclose(one.pareto_k.values, r["pareto_k_reff1"], rtol=0, atol=TOL)
    np.testing.assert_allclose(mine.elpd_i.values, theirs.elpd_i.values, rtol=0, atol=1e-10)  # arviz's conventions
    # one r_eff per observation given as reff=: the same numbers as computing them
    given = pl.loo(data, reff=pl.relative_eff(data), compute={"conventions": "R"})
    np.testing.assert_allclose(given.elpd_i.values, res.elpd_i.values, rtol=0, atol=1e-12)


def test_mcse_n_eff_and_pareto_k_table(case):
    """R's ``mcse_elpd_loo`` (the log-normal approximation of ``sum w^2 (l - E l)^2 / r_eff``) and ``n_eff``
    (``r_eff / sum w^2``) computed on ppl_loo's weights; ``pareto_k_table``'s counts (k at most the threshold, at
    most 1, above 1) and the smallest ``n_eff`` of the first row (R reports none above the threshold: NaN)."""
    name, ll, chains, pred, y, data, res, r = case
    lw, k = (np.asarray(a) for a in psislw(-ll.T, r["r_eff"], "R"))
    w = np.exp(lw)
    lik = np.exp(ll.T)
    E = np.exp(logsumexp(lw + ll.T, axis=1))
    var = np.sum(w**2 * (lik - E[:, None]) ** 2, axis=1) / r["r_eff"]
    np.testing.assert_allclose(np.sqrt(np.log1p(var / E**2)), r["mcse_elpd_loo_i"], rtol=1e-8)
    n_eff = r["r_eff"] / np.sum(w**2, axis=1)
    np.testing.assert_allclose(n_eff, r["n_eff"], rtol=1e-8)
    thr = khat_threshold(ll.shape[0])
    rows = [k <= thr, (k > thr) & (k <= 1), k > 1]
    assert [int(m.sum()) for m in rows] == list(r["pareto_k_table"].astype(int))
    want = r["pareto_k_table_min_n_eff"]
    assert np.isnan(want[0]) if not rows[0].any() else np.min(n_eff[rows[0]]) == pytest.approx(want[0], rel=1e-8)
    assert np.all(np.isnan(want[1:]))


def test_waic(case):
    """R's ``waic``: ``lpd_i - var(ll_i)`` with the sample variance; ``arviz_stats.waic`` where it exists."""
    name, ll, chains, pred, y, data, res, r = case
    n = ll.shape[1]
    lpd = logsumexp(ll, axis=0) - np.log(ll.shape[0])
    p = np.var(ll, axis=0, ddof=1)
    np.testing.assert_allclose(lpd - p, r["elpd_waic_i"], rtol=0, atol=TOL)
    np.testing.assert_allclose(p, r["p_waic_i"], rtol=0, atol=TOL)
    assert np.sum(lpd - p) == pytest.approx(r["elpd_waic"][0], abs=TOL)
    assert np.sqrt(n) * np.std(lpd - p, ddof=1) == pytest.approx(r["se_elpd_waic"][0], abs=TOL)
    assert -2 * np.sum(lpd - p) == pytest.approx(r["waic"][0], abs=TOL)


def _needs_pred(case):
    if case[3] is None:
        pytest.skip("R's example log-likelihood has no prediction")


def test_e_loo_mean_variance_sd(case):
    """``E_loo`` of the prediction with ppl_loo's weighted arithmetic (what ``pl.loo_expectations`` runs per
    observation) on ppl_loo's PSIS weights under R's conventions."""
    _needs_pred(case)
    name, ll, chains, pred, y, data, res, r = case
    lw = np.asarray(psislw(-ll.T, r["r_eff"], "R")[0])
    for kind, key in (("mean", "E_mean"), ("var", "E_variance"), ("sd", "E_sd")):
        got = np.array([weighted_summary(pred[:, i], lw[i], kind) for i in range(ll.shape[1])])
        np.testing.assert_allclose(got, r[key], rtol=1e-8, atol=1e-12, err_msg=kind)


def test_e_loo_through_loo_expectations_is_r(case):
    """``pl.loo_expectations(data, res, pred)`` with the values at the draws (R's ``E_loo(pred, psis_object,
    log_ratios = -log_lik)``), on a result of ``pl.loo(data, compute={"conventions": "R"})``: R's conventions by
    default (the result records them), R's mean, variance, sd, quantiles and every k-hat to 1e-8; the same from the
    weights given directly (``log_weights=``, ``log_ratios=``, ``reff=``) and from a DataArray of the values."""
    _needs_pred(case)
    name, ll, chains, pred, y, data, res, r = case
    probs = np.load(DATA / "input.npz")["probs"]
    lw = np.asarray(psislw(-ll.T, r["r_eff"], "R")[0]).T
    assert res.conventions == "R"
    for kind, key in (("mean", "E_mean"), ("var", "E_variance"), ("sd", "E_sd"), ("quantile", "E_quantile")):
        p = probs if kind == "quantile" else None
        got = pl.loo_expectations(data, res, pred, kind=kind, probs=p)
        value = got.values.T if kind == "quantile" else got.values
        np.testing.assert_allclose(value, r[key], rtol=0, atol=TOL, err_msg=kind)
        np.testing.assert_allclose(got.pareto_k.values, r[key + "_k"], rtol=0, atol=TOL, err_msg=kind)
        assert set(got.weights.values.tolist()) == {"psis"}
        given = pl.loo_expectations(values=pred, log_weights=lw, log_ratios=-ll, reff=r["r_eff"], kind=kind, probs=p,
                                    conventions="R")
        np.testing.assert_allclose(given.values, got.values, rtol=0, atol=1e-12, err_msg=kind)
        np.testing.assert_allclose(given.pareto_k.values, got.pareto_k.values, rtol=0, atol=1e-12, err_msg=kind)
    arr = pred.reshape(chains, -1, pred.shape[1])
    da = xr.DataArray(arr, dims=("chain", "draw", "obs"), coords={"obs": np.arange(pred.shape[1])})
    np.testing.assert_allclose(pl.loo_expectations(data, res, da).values, r["E_mean"], rtol=0, atol=TOL)
    np.testing.assert_allclose(pl.loo_expectations(data, res, arr).values, r["E_mean"], rtol=0, atol=TOL)


def test_e_loo_quantiles_and_khat_pinned(case):
    """Under ``arviz_stats``' conventions (``pl.loo_expectations(..., conventions="arviz")``), quantiles: R's
    ``.wquant`` interpolates the weighted CDF linearly between the sorted draws, ppl_loo
    (``arviz_stats``) takes another weighted quantile: where PSIS's k-hat is at most the threshold they differ by a
    fraction of the spacing of the draws (below 0.1 of the LOO predictive SD here, 0.074 measured); above it the
    weight of a few draws separates them (1.05 SDs on the regression's leverage point). The k-hat of an expectation:
    R fits ``posterior::pareto_khat`` of ``r`` and of ``h r`` (both tails) with PSIS's tail length, ppl_loo
    ``arviz_stats``' own tail length: equal where both are ``0.2 S`` (the 4 x 50 case, 2e-15), up to 0.40 apart
    elsewhere. R's numbers are the pinned reference of both comparisons."""
    _needs_pred(case)
    name, ll, chains, pred, y, data, res, r = case
    lw = np.asarray(psislw(-ll.T, r["r_eff"], "R")[0])
    probs = np.load(DATA / "input.npz")["probs"]
    q = np.array([weighted_summary(pred[:, i], lw[i], "quantile", probs) for i in range(ll.shape[1])])
    via = pl.loo_expectations(data, res, pred, kind="quantile", probs=probs, conventions="arviz")
    np.testing.assert_allclose(via.values.T, q, rtol=0, atol=1e-12)
    assert r["E_quantile"].shape == q.shape
    good = r["pareto_k"] <= khat_threshold(ll.shape[0])
    assert np.all(np.abs(q - r["E_quantile"])[good] <= 0.1 * r["E_sd"][good, None])
    assert np.all(np.abs(q - r["E_quantile"]) <= 1.1 * r["E_sd"][:, None])
    k = np.array([function_khat(pred[:, i], -ll[:, i], "mean") for i in range(ll.shape[1])])
    np.testing.assert_allclose(k, r["E_mean_k"], rtol=0, atol=1e-12 if name == "few_draws" else 0.45)
    np.testing.assert_allclose(pl.loo_expectations(data, res, pred, conventions="arviz").pareto_k.values, k, rtol=0,
                               atol=1e-12)


def test_loo_predictive_metric(case):
    """``loo_predictive_metric``: ``pl.loo_metrics``' formulas (``arviz_stats``' ``metrics``) on the LOO means; R's
    ``acc`` SE is ``sqrt(acc (1 - acc) / n)``, its balanced accuracy the mean of the two class-wise rates."""
    _needs_pred(case)
    from arviz_stats.base import array_stats

    name, ll, chains, pred, y, data, res, r = case
    lw = np.asarray(psislw(-ll.T, r["r_eff"], "R")[0])
    mean = np.array([weighted_summary(pred[:, i], lw[i], "mean") for i in range(ll.shape[1])])
    for kind in ("mae", "rmse", "mse"):
        est, se = array_stats.metrics(y, mean, kind=kind)
        np.testing.assert_allclose([est, se], r[f"metric_{kind}"], rtol=1e-8, err_msg=kind)
    if "metric_acc" in r:
        hit = (mean > 0.5).astype(int) == y
        acc = hit.mean()
        np.testing.assert_allclose([acc, np.sqrt(acc * (1 - acc) / y.size)], r["metric_acc"], rtol=1e-12)
        bal = (hit[y == 0].mean() + hit[y == 1].mean()) / 2
        assert bal == pytest.approx(r["metric_balanced_acc"][0], rel=1e-12)


def test_loo_crps_and_scrps(case):
    """R's ``loo_crps`` / ``loo_scrps`` (``pl.loo_crps`` / ``pl.loo_scrps``): ``E|X - y|`` under the PSIS weights of
    ``-log_lik`` and ``E|X - X'|``
    under those of ``-log_lik - log_lik[shuffle]`` (``x2`` and ``log_lik`` permuted by R's ``sample(1:S)``, stored),
    with R's conventions; the SE from the sample SD. ``pl.loo_score`` uses ``arviz_stats``' estimator from one set
    of draws instead (equal in expectation)."""
    name, ll, chains, pred, y, data, res, r = case
    if "crps" not in r:
        pytest.skip("computed on the 4 x 50 case only")
    inp = np.load(DATA / "input.npz")
    x, x2 = inp["yrep"], inp["yrep2"]
    perm = r["crps_shuffle"].astype(int) - 1
    lw = np.asarray(psislw(-ll.T, r["r_eff"], "R")[0])
    lw2 = np.asarray(psislw(-(ll + ll[perm]).T, r["r_eff"], "R")[0])
    exy = np.sum(np.exp(lw) * np.abs(x - y).T, axis=1)
    exx = np.sum(np.exp(lw2) * np.abs(x - x2[perm]).T, axis=1)
    n = y.size
    for key, pw in (("crps", 0.5 * exx - exy), ("scrps", -exy / exx - 0.5 * np.log(exx))):
        np.testing.assert_allclose(pw, r[f"{key}_i"], rtol=1e-8)
        np.testing.assert_allclose([pw.mean(), np.std(pw, ddof=1) / np.sqrt(n)], r[key], rtol=1e-8)
        fn = pl.loo_crps if key == "crps" else pl.loo_scrps
        got = fn(x, x2, y, ll, permutations=perm[None], reff=r["r_eff"], conventions="R")
        np.testing.assert_allclose(got.pointwise, r[f"{key}_i"], rtol=0, atol=TOL)
        np.testing.assert_allclose([got.mean, got.se], r[key], rtol=0, atol=TOL)


def test_loo_compare_se_diff(ref):
    """``loo_compare``'s ``se_diff`` is ``pl.compare``'s ``dse`` (the sample SD of the pointwise differences)."""
    ll, chains, _, y = _inputs()["normal_outlier"]
    mu = np.load(DATA / "input.npz")["mu"].reshape(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = pl.loo(_tree(ll, chains), compute={"conventions": "R"})
        b = pl.loo(_tree(_normal_ll(mu, y, 1.5), chains), compute={"conventions": "R"})
        table = pl.compare({"a": a, "b": b})
    np.testing.assert_allclose(b.elpd_i.values, ref["normal_outlier/elpd_loo_i_2"], rtol=0, atol=TOL)
    worse = table.index[1]
    assert table.loc[worse, "elpd_diff"] == pytest.approx(ref["normal_outlier/compare_elpd_diff"][1], abs=TOL)
    assert table.loc[worse, "dse"] == pytest.approx(ref["normal_outlier/compare_se_diff"][1], abs=TOL)


def test_bad_conventions_and_reff_are_named():
    ll, chains, _, _ = _inputs()["few_draws"]
    data = _tree(ll, chains)
    with pytest.raises(ValueError, match=r"conventions='r': use 'arviz' .* or 'R'"):
        pl.loo(data, compute={"conventions": "r"})
    with pytest.raises(ValueError, match=r"reff has 12 values and log_likelihood\['y'\] has 13 observations"):
        pl.loo(data, reff=np.ones(12))
    with pytest.raises(ValueError, match=r"must be positive and finite"):
        pl.loo(data, reff=np.r_[np.ones(12), -1.0])
    model = pl.JaxModel({"mu": ((), None)}, lambda v: -0.5 * v["mu"] ** 2,
                        lambda v: -0.5 * (v["mu"] - np.zeros(13)) ** 2, obs_dims=("obs",), observed=np.zeros(13))
    with pytest.raises(ValueError, match=r"applies to plain PSIS-LOO without a model"):
        pl.loo(data, model, compute={"conventions": "R"})
    with pytest.raises(ValueError, match=r"one relative efficiency per observation applies to plain PSIS-LOO"):
        pl.loo(data, model, reff=np.ones(13))
