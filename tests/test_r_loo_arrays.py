"""R ``loo`` 2.10.1's array-level functions against ppl_loo's (``pl.loo`` of an array, ``pl.loo_function``,
``pl.loo_approximate_posterior``, ``pl.waic``, ``pl.elpd``, ``pl.pointwise``, ``pl.psis`` / ``sis`` / ``tis``,
``pl.psis_n_eff_values``, ``pl.gpdfit``), to 1e-8 on the five cases of ``tests/test_r_loo_reference.py``.

R's numbers: ``tests/data/r_loo/arrays.npz`` (``benchmarks/r_loo/make_reference_arrays.py``, ``reference_arrays.R``)
and, for ``waic`` and PSIS's normalized weights, ``reference.npz``. The log-likelihoods are rebuilt from
``input.npz`` as there. On 4 chains of 50 draws R's ``relative_eff`` differs from ppl_loo's by up to 0.0044
(``test_relative_eff`` there): the tail length is ``0.2 S`` with either, so only ``n_eff = r_eff / sum w^2`` shows
it, and it is compared with R's ``r_eff``.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import ppl_loo as pl
from tests.test_r_loo_reference import CASES, DATA, TOL, _inputs, _normal_ll, _tree


@pytest.fixture(scope="module")
def ref():
    out = np.load(DATA / "arrays.npz")
    return {key: out[key] for key in out.files}


@pytest.fixture(scope="module")
def old():
    out = np.load(DATA / "reference.npz")
    return {key: out[key] for key in out.files}


@pytest.fixture(scope="module", params=CASES)
def case(request, ref, old):
    name = request.param
    ll, chains, _, _ = _inputs()[name]
    r = {key.split("/", 1)[1]: value for key, value in ref.items() if key.startswith(name + "/")}
    r.update({"old_" + key.split("/", 1)[1]: value for key, value in old.items() if key.startswith(name + "/")})
    return name, ll, chains, r


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _close(got, want, tol=TOL):
    np.testing.assert_allclose(np.asarray(got, dtype=float).ravel(), np.asarray(want, dtype=float).ravel(), rtol=0,
                               atol=tol)


def _assert_loo(res, r, prefix, n_eff_scale=1.0):
    _close(res.elpd_i.values, r[prefix + "elpd_loo_i"])
    _close(res.p_loo_i.values, r[prefix + "p_loo_i"])
    _close(res.pareto_k.values, r[prefix + "pareto_k"])
    np.testing.assert_allclose(pl.psis_n_eff_values(res) * n_eff_scale, r[prefix + "n_eff"], rtol=1e-8)
    assert res.elpd == pytest.approx(r[prefix + "elpd_loo"][0], abs=TOL)
    assert res.se == pytest.approx(r[prefix + "se_elpd_loo"][0], abs=TOL)
    assert res.p == pytest.approx(r[prefix + "p_loo"][0], abs=TOL)
    _close(pl.pointwise(res, "looic").values, -2 * r[prefix + "elpd_loo_i"])


def test_versions():
    versions = json.loads((DATA / "arrays.json").read_text())
    assert versions["loo_version"] == "2.10.1" and versions["posterior_version"] == "1.7.1"


def test_loo_of_an_array_and_a_matrix(case):
    """``pl.loo(array)`` is R's ``loo.array`` with ``r_eff = relative_eff(exp(array))`` (R's conventions compute it),
    ``pl.loo(matrix, reff=1.0)`` R's ``loo.matrix`` with its default ``r_eff = 1``; a DataArray gives the same."""
    name, ll, chains, r = case
    S, n = ll.shape
    arr = ll.reshape(chains, S // chains, n)
    res = _quiet(pl.loo, arr, compute={"conventions": "R"})
    ours = pl.relative_eff(_tree(ll, chains)).values
    _assert_loo(res, r, "array_", n_eff_scale=r["r_eff"] / ours)
    if name != "few_draws":
        _close(ours, r["r_eff"])
    mat = _quiet(pl.loo, ll, reff=1.0, compute={"conventions": "R"})
    _assert_loo(mat, r, "matrix_")
    assert mat.elpd_i.dims == ("log_lik_dim_0",) and mat.var_name == "log_lik"
    da = xr.DataArray(arr, dims=("chain", "draw", "obs"), coords={"obs": np.arange(n) + 10}, name="y")
    same = _quiet(pl.loo, da, compute={"conventions": "R"})
    _close(same.elpd_i.values, res.elpd_i.values, 1e-12)
    assert same.elpd_i.dims == ("obs",) and int(same.elpd_i.obs[0]) == 10 and same.var_name == "y"
    one_chain = _quiet(pl.loo, xr.DataArray(ll, dims=("draw", "obs")), reff=1.0, compute={"conventions": "R"})
    _close(one_chain.elpd_i.values, mat.elpd_i.values, 1e-12)


def test_psis_sis_tis(case):
    """R's ``psis`` / ``sis`` / ``tis`` of ``-log_lik``: the normalized and unnormalized weights, k-hat, tail length,
    ``n_eff`` (``psis_n_eff_values``), on ``(chain, draw, n)``, ``(S, n)`` and ``(S,)`` input."""
    name, ll, chains, r = case
    S, n = ll.shape
    p = pl.psis(-ll.reshape(chains, S // chains, n), r_eff=r["r_eff"], conventions="R")
    assert p.shape == (S, n) and p.method == "psis"
    _close(p.log_weights, r["old_log_weights"].T)
    _close(p.weights(normalize=False), r["psis_lw_raw"])
    _close(p.norm_const_log, r["psis_norm_const_log"])
    _close(p.pareto_k, r["psis_pareto_k"])
    assert p.tail_len.tolist() == r["psis_tail_len"].astype(int).tolist()
    np.testing.assert_allclose(pl.psis_n_eff_values(p), r["psis_n_eff"], rtol=1e-8)
    _close(p.weights(log=False).sum(axis=0), np.ones(n), 1e-12)
    s = pl.sis(-ll)
    _close(s.norm_const_log, r["sis_norm_const_log"])
    _close(s.log_weights, -ll - r["sis_norm_const_log"][None, :])
    np.testing.assert_allclose(s.n_eff, r["sis_n_eff"], rtol=1e-8)
    assert np.all(s.pareto_k == r["sis_pareto_k"]) and s.tail_len is None
    t = pl.tis(-ll, r_eff=r["r_eff"])
    _close(t.log_weights, r["tis_lw"])
    _close(t.norm_const_log, r["tis_norm_const_log"])
    np.testing.assert_allclose(t.n_eff, r["tis_n_eff"], rtol=1e-8)
    assert np.all(t.pareto_k == r["tis_pareto_k"])
    v = pl.psis(-ll[:, 0], conventions="R")  # R's default r_eff = 1
    _close(v.log_weights[:, 0], r["psis_vector_weights"])
    _close(v.pareto_k, r["psis_vector_pareto_k"])


def test_gpdfit(case):
    """R's ``gpdfit`` (``posterior::gpdfit``) of the exceedances in PSIS's Pareto tail: with and without the weakly
    informative prior, with a 10-point grid, unsorted input sorted; with the prior it is PSIS's k-hat."""
    name, ll, chains, r = case
    x = r["gpd_x"]
    np.testing.assert_allclose(pl.gpdfit(x), r["gpd_wip"], rtol=1e-8)
    np.testing.assert_allclose(pl.gpdfit(x, wip=False), r["gpd_nowip"], rtol=1e-8)
    np.testing.assert_allclose(pl.gpdfit(x, min_grid_pts=10), r["gpd_grid10"], rtol=1e-8)
    shuffled = np.random.default_rng(0).permutation(x)
    assert pl.gpdfit(shuffled) == pl.gpdfit(x)
    assert pl.gpdfit(x)[0] == pytest.approx(r["gpd_k_psis"][0], abs=TOL)


def test_elpd_and_waic(case):
    """R's ``elpd`` (log mean exp per observation, ``ic``) and ``waic`` (``reference.npz``) of the 3-D array."""
    name, ll, chains, r = case
    S, n = ll.shape
    arr = ll.reshape(chains, S // chains, n)
    e = pl.elpd(arr)
    _close(e.elpd_i.values, r["elpd_i"])
    _close(pl.pointwise(e, "ic").values, r["ic_i"])
    _close(e.estimates.values, r["elpd_estimates"])
    assert e.elpd == pytest.approx(r["elpd_estimates"][0, 0], abs=TOL) and "elpd" in str(e)
    w = _quiet(pl.waic, arr)
    for q, got in (("elpd_waic", w.elpd_i), ("p_waic", w.p_waic_i), ("waic", w.waic_i)):
        _close(got.values, r[f"old_{q}_i"])
        _close(pl.pointwise(w, q).values, r[f"old_{q}_i"])
        assert w.estimates.loc[q, "Estimate"] == pytest.approx(r[f"old_{q}"][0], abs=TOL)
        assert w.estimates.loc[q, "SE"] == pytest.approx(r[f"old_se_{q}"][0], abs=TOL)
    assert (w.elpd, w.se, w.p) == pytest.approx((r["old_elpd_waic"][0], r["old_se_elpd_waic"][0],
                                                r["old_p_waic"][0]), abs=TOL)
    assert "elpd_waic" in str(w) and w.warning == bool(np.any(r["old_p_waic_i"] > 0.4))
    same = _quiet(pl.waic, _tree(ll, chains))
    _close(same.elpd_i.values, w.elpd_i.values, 1e-12)


def _ll_block(block, mu):
    return _normal_ll(mu, np.asarray(block, dtype=float).ravel())


def test_loo_function(ref):
    """``pl.loo_function`` in blocks of 4 observations is ``pl.loo(matrix)`` to 1e-12 and R's ``loo.function``
    (one observation per call, R's ``r_eff``) to 1e-8; with ``chain_id`` under R's conventions it is
    ``pl.loo(array)``."""
    ll, chains, _, y = _inputs()["normal_outlier"]
    mu = np.load(DATA / "input.npz")["mu"].reshape(-1)
    r = {key.split("/", 1)[1]: v for key, v in ref.items() if key.startswith("normal_outlier/")}
    got = _quiet(pl.loo_function, _ll_block, y, mu, r_eff=r["r_eff"], block_size=4, compute={"conventions": "R"})
    _assert_loo(got, r, "function_")
    mat = _quiet(pl.loo, ll, reff=r["r_eff"], compute={"conventions": "R"})
    for key in ("elpd_i", "p_loo_i", "pareto_k", "mcse_elpd_i", "n_eff_i"):
        _close(getattr(got, key).values, getattr(mat, key).values, 1e-12)
    assert (got.elpd, got.se, got.p) == pytest.approx((mat.elpd, mat.se, mat.p), abs=1e-12)
    frame = pd.DataFrame({"y": y})
    chain_id = np.repeat(np.arange(1, chains + 1), ll.shape[0] // chains)
    by_chain = _quiet(pl.loo_function, lambda b, m: _ll_block(b["y"].to_numpy(), m), frame, mu, chain_id=chain_id,
                      compute={"conventions": "R"})
    arr = _quiet(pl.loo, ll.reshape(chains, -1, y.size), compute={"conventions": "R"})
    for key in ("elpd_i", "pareto_k", "mcse_elpd_i", "n_eff_i"):
        _close(getattr(by_chain, key).values, getattr(arr, key).values, 1e-12)
    plain = _quiet(pl.loo_function, _ll_block, y, mu)  # r_eff 1, arviz's tail length: pl.loo(matrix)'s default
    _close(plain.elpd_i.values, _quiet(pl.loo, ll).elpd_i.values, 1e-12)


def test_loo_approximate_posterior(ref):
    """R's ``loo_approximate_posterior``: log ratios ``-log_lik + log_p - log_g`` for draws of a Gaussian
    approximation of the normal mean, PSIS with ``r_eff = 1``."""
    y = np.load(DATA / "input.npz")["y"]
    mu, log_p, log_q = ref["approx_mu"], ref["approx_log_p"], ref["approx_log_q"]
    r = {key.split("/", 1)[1]: v for key, v in ref.items() if key.startswith("approx/")}
    ll = _normal_ll(mu, y)
    res = _quiet(pl.loo_approximate_posterior, ll, log_p[None], log_q, conventions="R")
    _assert_loo(res, r, "ap_")
    assert res.approx_posterior
    plain = _quiet(pl.loo, ll, reff=1.0, compute={"conventions": "R"})
    assert np.max(np.abs(plain.elpd_i.values - res.elpd_i.values)) > 1e-3  # the correction matters here


def test_pointwise_names(case):
    name, ll, chains, r = case
    res = _quiet(pl.loo, ll, reff=1.0, compute={"conventions": "R"})
    _close(pl.pointwise(res, "elpd_loo").values, r["matrix_elpd_loo_i"])
    _close(pl.pointwise(res, "p_loo").values, r["matrix_p_loo_i"])
    _close(pl.pointwise(res, "influence_pareto_k").values, r["matrix_pareto_k"])
    _close(pl.pointwise(res, "pareto_k").values, r["matrix_pareto_k"])
    assert pl.pointwise(res, "mcse_elpd_loo").name == "mcse_elpd_loo"
    with pytest.raises(ValueError, match=r"'elpd_lo' is not a pointwise quantity of this LooResult\. Available: "
                                         r"'elpd_loo', 'mcse_elpd_loo', 'p_loo', 'looic', 'influence_pareto_k'"):
        pl.pointwise(res, "elpd_lo")
    with pytest.raises(ValueError, match=r"Available: 'elpd', 'ic', 'elpd_i', 'ic_i'"):
        pl.pointwise(pl.elpd(ll), "elpd_loo")
    with pytest.raises(TypeError, match=r"give the result of pl.loo, pl.waic or pl.elpd"):
        pl.pointwise(ll, "elpd_loo")
    with pytest.raises(TypeError, match=r"name=3: give the name"):
        pl.pointwise(res, 3)


def test_bad_arrays_are_named():
    ll, chains, _, y = _inputs()["few_draws"]
    with pytest.raises(ValueError, match=r"data has shape \(200,\): give the log-likelihood as a matrix"):
        pl.loo(ll[:, 0])
    bad = ll.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"data has 1 non-finite value\(s\)"):
        pl.loo(bad)
    with pytest.raises(ValueError, match=r"reff has 12 values and log_likelihood\['log_lik'\] has 13 observations"):
        pl.loo(ll, reff=np.ones(12))
    model = pl.JaxModel({"mu": ((), None)}, lambda v: -0.5 * v["mu"] ** 2,
                        lambda v: -0.5 * (v["mu"] - np.zeros(13)) ** 2, obs_dims=("obs",), observed=np.zeros(13))
    with pytest.raises(ValueError, match=r"data is a ndarray of log-likelihood values, and a model was given"):
        pl.loo(ll, model)
    with pytest.raises(ValueError, match=r"log_q= without a model.*pl.loo\(data, model, log_q=\.\.\.\).*"
                                         r"pl.loo_approximate_posterior\(log_lik, log_p, log_q\)"):
        pl.loo(_tree(ll, chains), log_q=np.zeros((chains, 50)))
    with pytest.raises(ValueError, match=r"data has shape \(200,\)"):
        pl.waic(ll[:, 0])
    with pytest.raises(ValueError, match=r"data has 1 non-finite value\(s\)"):
        pl.elpd(bad)


def test_bad_weights_input_is_named():
    ll, _, _, _ = _inputs()["few_draws"]
    with pytest.raises(ValueError, match=r"log_ratios has 1 NaN or \+inf value\(s\) \(first in column 2\)"):
        pl.psis(np.where(np.arange(13) == 2, np.where(np.arange(200)[:, None] == 0, np.inf, -ll), -ll))
    with pytest.raises(ValueError, match=r"log_ratios has shape \(2, 2, 50, 13\)"):
        pl.sis(-ll.reshape(2, 2, 50, 13))
    with pytest.raises(ValueError, match=r"r_eff has 12 values and log_ratios has 13 columns"):
        pl.psis(-ll, r_eff=np.ones(12))
    with pytest.raises(ValueError, match=r"r_eff must be positive and finite"):
        pl.tis(-ll, r_eff=np.r_[np.ones(12), np.nan])
    with pytest.raises(ValueError, match=r"20 draws with r_eff=1 leave 4 draws in the Pareto tail of column 0"):
        pl.psis(-ll[:20])
    with pytest.raises(ValueError, match=r"conventions='r'"):
        pl.psis(-ll, conventions="r")
    with pytest.raises(ValueError, match=r"x has shape \(2, 3\)"):
        pl.gpdfit(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"x has 1 negative or non-finite value"):
        pl.gpdfit(np.r_[1.0, 2.0, -1.0])
    with pytest.raises(ValueError, match=r"min_grid_pts=0"):
        pl.gpdfit(np.arange(10.0), min_grid_pts=0)
    with pytest.raises(TypeError, match=r"give the result of pl.psis"):
        pl.psis_n_eff_values(ll)


def test_bad_function_input_is_named():
    ll, chains, _, y = _inputs()["few_draws"]
    mu = np.load(DATA / "input.npz")["mu"][:, :50].reshape(-1)
    with pytest.raises(ValueError, match=r"llfun returned shape \(1, 200\) for observations 0\.\.0: .* \(S, 1\)"):
        pl.loo_function(lambda b, m: _ll_block(b, m).T, y, mu)
    with pytest.raises(ValueError, match=r"llfun's values for observations 12\.\.12 has 200 non-finite"):
        pl.loo_function(lambda b, m: _ll_block(b, m) * (np.nan if b[0] > 4 else 1.0), y, mu, block_size=1)
    with pytest.raises(ValueError, match=r"r_eff has 12 values and data has 13 observations"):
        pl.loo_function(_ll_block, y, mu, r_eff=np.ones(12))
    with pytest.raises(ValueError, match=r"chain_id has 199 values and llfun returns 200 draws"):
        pl.loo_function(_ll_block, y, mu, chain_id=np.ones(199))
    with pytest.raises(ValueError, match=r"chain_id: the chains have \[50, 150\] draws"):
        pl.loo_function(_ll_block, y, mu, chain_id=np.repeat([1, 2], [50, 150]))
    with pytest.raises(ValueError, match=r"block_size=0"):
        pl.loo_function(_ll_block, y, mu, block_size=0)
    with pytest.raises(TypeError, match=r"llfun=3"):
        pl.loo_function(3, y, mu)
    with pytest.raises(ValueError, match=r"log_p has shape \(199,\) and log_lik has 200 draws"):
        pl.loo_approximate_posterior(ll, np.zeros(199), np.zeros(200))
    with pytest.raises(ValueError, match=r"log_q has 1 NaN or infinite value"):
        pl.loo_approximate_posterior(ll, np.zeros(200), np.r_[np.zeros(199), np.nan])
