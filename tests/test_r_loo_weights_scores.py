"""R ``loo`` 2.10.1's model weights, (S)CRPS of two predictive sets and k-fold splits in ppl_loo.

R's numbers are committed in ``tests/data/r_loo/reference_weights_scores.npz`` by
``benchmarks/r_loo/make_reference_weights_scores.py`` (R's side: ``reference_weights_scores.R``) on the draws of
``tests/data/r_loo/input.npz``; the test needs no R.

- ``crps`` / ``scrps`` / ``loo_crps`` / ``loo_scrps`` with 1 and 3 permutations, given R's shuffles: R's numbers to
  1e-8 (measured 3e-15).
- ``pseudobma_weights``: without the Bayesian bootstrap, and with it given the Dirichlet draws R used: R's to 1e-12.
- ``stacking_weights``: R's ``constrOptim`` (a log barrier around BFGS) stops short of the maximizer, 2.3e-6 from it
  on the three-model case and 7.5e-5 on the two-model one with its default settings, 2.9e-9 and 8.1e-9 with
  ``reltol = 1e-15`` (1.8e-7 where a weight is 0 at the optimum); ppl_loo's weights satisfy the KKT conditions of
  the maximizer to 1e-9 (the gradient of the log score equals ``n`` on the support, is below it off it) and the
  log score is at least R's.
- ``kfold_split_*``: R's random draws cannot be reproduced; the properties R's functions guarantee are checked.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

import ppl_loo as pl

pytestmark = pytest.mark.x64

DATA = Path(__file__).resolve().parent / "data" / "r_loo"
TOL = 1e-8


@pytest.fixture(scope="module")
def ref():
    out = np.load(DATA / "reference_weights_scores.npz")
    return {key: out[key] for key in out.files}


@pytest.fixture(scope="module")
def inp():
    return np.load(DATA / "input.npz")


def _normal_ll(mu, y, sigma=1.0):
    return -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * ((y[None, :] - mu[:, None]) / sigma) ** 2


def _tree(ll, chains):
    S, n = ll.shape
    arr = ll.reshape(chains, S // chains, n)
    coords = {"chain": np.arange(chains), "draw": np.arange(S // chains), "obs": np.arange(n)}
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset({"a": (("chain", "draw"), arr[..., 0])}, coords=coords),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), arr)}, coords=coords)})


# ------------------------------------------------------------------------------------------------ (S)CRPS
@pytest.mark.parametrize("P", [1, 3])
def test_crps_and_scrps_are_r(ref, inp, P):
    few = inp["mu"][:, :50].reshape(-1)
    y, x, x2 = inp["y"], inp["yrep"], inp["yrep2"]
    ll = _normal_ll(few, y)
    shuffles = ref[f"shuffle_{P}"]
    r_eff = pl.relative_eff(_tree(ll, 4)).values
    for key, fn in (("cr", pl.crps), ("sc", pl.scrps)):
        got = fn(x, x2, y, permutations=shuffles)
        np.testing.assert_allclose(got.pointwise, ref[f"{key}_{P}_i"], rtol=0, atol=TOL)
        np.testing.assert_allclose([got.mean, got.se], ref[f"{key}_{P}"], rtol=0, atol=TOL)
    for key, fn in (("lcr", pl.loo_crps), ("lsc", pl.loo_scrps)):
        got = fn(x, x2, y, ll, permutations=shuffles, reff=r_eff, conventions="R")
        np.testing.assert_allclose(got.pointwise, ref[f"{key}_{P}_i"], rtol=0, atol=TOL)
        np.testing.assert_allclose([got.mean, got.se], ref[f"{key}_{P}"], rtol=0, atol=TOL)
    if P == 1:  # R's default r_eff = 1; one observation as vectors (crps.numeric)
        got = pl.loo_crps(x, x2, y, ll, permutations=shuffles, conventions="R")
        np.testing.assert_allclose(got.pointwise, ref["lcr_1_reff1_i"], rtol=0, atol=TOL)
        one = pl.crps(x[:, 0], x2[:, 0], y[0], permutations=shuffles)
        assert one.mean == pytest.approx(ref["cr_numeric"][0], abs=TOL) and np.isnan(one.se)


def test_crps_random_permutations_and_known_answer():
    """With random shuffles (seeded: reproducible) the CRPS of normal draws is near the closed form of a normal
    predictive, ``sigma (1/sqrt(pi) - 2 phi(z) - z (2 Phi(z) - 1))`` negated; a ``(S, n)`` DataArray of draws gives the
    same numbers as the array."""
    from scipy.stats import norm

    rng = np.random.default_rng(1)
    S, y = 20000, np.array([-1.0, 0.0, 0.5, 2.0])
    x, x2 = rng.normal(size=(S, y.size)), rng.normal(size=(S, y.size))
    got = pl.crps(x, x2, y, permutations=2, random_seed=3)
    again = pl.crps(x, x2, y, permutations=2, random_seed=3)
    np.testing.assert_array_equal(got.pointwise, again.pointwise)
    exact = -(2 * norm.pdf(y) + y * (2 * norm.cdf(y) - 1) - 1 / np.sqrt(np.pi))
    np.testing.assert_allclose(got.pointwise, exact, atol=0.02)
    da = xr.DataArray(x.reshape(2, S // 2, y.size), dims=("chain", "draw", "obs"))
    da2 = xr.DataArray(x2.reshape(2, S // 2, y.size), dims=("chain", "draw", "obs"))
    np.testing.assert_allclose(pl.crps(da, da2, y, permutations=2, random_seed=3).pointwise, got.pointwise,
                               rtol=0, atol=1e-15)


def test_crps_bad_input_names_it():
    x = np.zeros((10, 3))
    with pytest.raises(ValueError, match=r"x2 has shape \(10, 2\) and x \(10, 3\)"):
        pl.crps(x, np.zeros((10, 2)), np.zeros(3))
    with pytest.raises(ValueError, match=r"y has 2 values but x has 3 observations"):
        pl.crps(x, x, np.zeros(2))
    with pytest.raises(ValueError, match=r"permutations=0: give the number of shuffles"):
        pl.crps(x, x, np.zeros(3), permutations=0)
    with pytest.raises(ValueError, match=r"rows are permutations of 0..S-1 \(S = 10"):
        pl.crps(x, x, np.zeros(3), permutations=np.zeros((1, 10), dtype=int))
    with pytest.raises(ValueError, match=r"log_lik has shape \(10, 2\) and x \(10, 3\)"):
        pl.loo_crps(x, x, np.zeros(3), np.zeros((10, 2)))
    with pytest.raises(ValueError, match=r"x, x2 and y must be finite"):
        pl.scrps(np.full((10, 3), np.nan), x, np.zeros(3))
    with pytest.raises(ValueError, match=r"reff=-1.0: give the relative efficiency"):
        pl.loo_scrps(x, x, np.zeros(3), np.zeros((10, 3)), reff=-1.0)


# ------------------------------------------------------------------------------------------------ weights
def _kkt(lpd, w):
    """The gradient ``sum_i exp(lpd_ik) / sum_k w_k exp(lpd_ik)`` of the log score (``n`` on the support)."""
    e = np.exp(lpd - lpd.max(axis=1, keepdims=True))
    return (e / (e @ w)[:, None]).sum(axis=0)


def _log_score(lpd, w):
    return float(np.sum(np.log(np.exp(lpd) @ w)))


@pytest.mark.parametrize("case,cols,tight_tol,default_tol", [("stacking", None, 5e-9, 5e-6),
                                                              ("stacking_two", [0, 2], 2e-8, 1e-4),
                                                              ("stacking_boundary", "boundary", 3e-7, 3e-5)])
def test_stacking_weights_are_the_maximizer(ref, case, cols, tight_tol, default_tol):
    lpd = ref["lpd"]
    if isinstance(cols, list):
        lpd = lpd[:, cols]
    elif cols == "boundary":
        lpd = np.column_stack([lpd[:, 0], lpd[:, 1], lpd[:, 0] - 0.5])
    w = pl.stacking_weights(lpd)
    n = lpd.shape[0]
    assert list(w.index) == [f"model_{k}" for k in range(lpd.shape[1])] and w.sum() == pytest.approx(1, abs=1e-15)
    g = _kkt(lpd, w.values)
    on = w.values > 0
    np.testing.assert_allclose(g[on], n, rtol=0, atol=1e-9)
    assert np.all(g[~on] <= n)
    assert _log_score(lpd, w.values) >= _log_score(lpd, ref[case + "_tight"]) - 1e-12
    np.testing.assert_allclose(w.values, ref[case + "_tight"], rtol=0, atol=tight_tol)
    np.testing.assert_allclose(w.values, ref[case], rtol=0, atol=default_tol)


def test_pseudobma_weights_are_r(ref):
    lpd = ref["lpd"]
    np.testing.assert_allclose(pl.pseudobma_weights(lpd, BB=False).values, ref["pseudobma"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(pl.pseudobma_weights(lpd, dirichlet=ref["dirichlet"]).values, ref["pseudobma_bb"],
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(pl.pseudobma_weights(lpd, dirichlet=ref["dirichlet_alpha05"]).values,
                               ref["pseudobma_bb_alpha05"], rtol=0, atol=1e-12)
    # numpy's Dirichlet draws: seeded, reproducible, and near R's (both Monte Carlo means of the same expectation)
    a = pl.pseudobma_weights(lpd, BB_n=4000, random_seed=5)
    np.testing.assert_array_equal(a.values, pl.pseudobma_weights(lpd, BB_n=4000, random_seed=5).values)
    np.testing.assert_allclose(a.values, ref["pseudobma_bb"], atol=0.05)


def test_loo_model_weights_of_results_and_matrices(ref, inp):
    """R's ``loo_model_weights`` of three ``loo`` objects (pseudo-BMA exactly, stacking to R's optimizer's
    precision) and of the log-likelihood matrices (``loo`` with ``r_eff = 1``); ``pl.compare``'s ``weight`` is
    ``pl.stacking_weights``' (``arviz_stats.compare``'s SLSQP stops 3.2e-6 from it here)."""
    mu, y = inp["mu"].reshape(-1), inp["y"]
    lls = [_normal_ll(mu, y, s) for s in (1.0, 1.5, 3.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = {name: pl.loo(_tree(ll, 4), compute={"conventions": "R"}) for name, ll in zip("abc", lls)}
    got = pl.loo_model_weights(res)
    assert list(got.index) == ["a", "b", "c"]
    np.testing.assert_allclose(got.values, ref["loo_model_weights_stacking"], rtol=0, atol=5e-6)
    np.testing.assert_allclose(got.values, ref["stacking_tight"], rtol=0, atol=5e-9)
    bma = pl.loo_model_weights(list(res.values()), method="pseudobma", BB=False)
    assert list(bma.index) == ["model_0", "model_1", "model_2"]
    np.testing.assert_allclose(bma.values, ref["loo_model_weights_pseudobma"], rtol=0, atol=1e-12)
    mats = pl.loo_model_weights(lls, conventions="R")
    np.testing.assert_allclose(mats.values, pl.stacking_weights(ref["lpd_reff1"]).values, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mats.values, ref["loo_model_weights_matrices"], rtol=0, atol=5e-5)
    table = pl.compare(res)
    np.testing.assert_allclose(table.loc[["a", "b", "c"], "weight"].to_numpy(float), got.values, rtol=0, atol=1e-15)
    theirs = azs.compare(res, round_to="none")
    np.testing.assert_allclose(table.loc[["a", "b", "c"], "weight"].to_numpy(float),
                               theirs.loc[["a", "b", "c"], "weight"].to_numpy(float), rtol=0, atol=1e-5)
    for method in ("pseudo-BMA", "BB-pseudo-BMA"):  # pseudo-BMA: arviz_stats' numbers (its own Dirichlet draws)
        np.testing.assert_allclose(pl.compare(res, method=method)["weight"].to_numpy(float),
                                   azs.compare(res, method=method, round_to="none")["weight"].to_numpy(float),
                                   rtol=0, atol=1e-12)


def test_model_weights_bad_input_names_it(ref):
    lpd = ref["lpd"]
    with pytest.raises(ValueError, match=r"at least two models \(columns of lpd_point\) are required; got 1"):
        pl.stacking_weights(lpd[:, :1])
    with pytest.raises(ValueError, match=r"lpd_point has shape \(13,\)"):
        pl.pseudobma_weights(lpd[:, 0])
    with pytest.raises(ValueError, match=r"lpd_point has NaN or infinite entries"):
        pl.stacking_weights(np.where(np.eye(13, 3) > 0, np.nan, lpd))
    with pytest.raises(ValueError, match=r"dirichlet has shape \(5, 4\); give Dirichlet draws \(BB_n, n\) with n = 13"):
        pl.pseudobma_weights(lpd, dirichlet=np.ones((5, 4)))
    with pytest.raises(ValueError, match=r"BB_n=0"):
        pl.pseudobma_weights(lpd, BB_n=0)
    with pytest.raises(ValueError, match=r"method='bma': use 'stacking' or 'pseudobma'"):
        pl.loo_model_weights(lpd, method="bma")
    with pytest.raises(ValueError, match=r"at least two models; got 1"):
        pl.loo_model_weights([np.zeros((10, 3))])
    with pytest.raises(ValueError, match=r"the log-likelihood matrices have shapes"):
        pl.loo_model_weights([np.zeros((10, 3)), np.zeros((10, 4))])


# ------------------------------------------------------------------------------------------------ k-fold splits
@pytest.mark.parametrize("K,N", [(2, 2), (3, 10), (10, 37), (7, 7)])
def test_kfold_split_random_sizes(K, N):
    folds = pl.kfold_split_random(K, N, random_seed=1)
    sizes = np.bincount(folds, minlength=K + 1)[1:]
    assert folds.shape == (N,) and set(folds.tolist()) == set(range(1, K + 1))
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == N
    np.testing.assert_array_equal(folds, pl.kfold_split_random(K, N, random_seed=1))


def test_kfold_split_stratified_spreads_each_stratum():
    rng = np.random.default_rng(0)
    x = rng.choice(["a", "b", "c"], size=53, p=[0.6, 0.3, 0.1])
    for K in (2, 4, 10):
        folds = pl.kfold_split_stratified(K, x, random_seed=2)
        assert set(folds.tolist()) == set(range(1, K + 1))
        sizes = np.bincount(folds, minlength=K + 1)[1:]
        assert sizes.max() - sizes.min() <= 1
        for lev in np.unique(x):
            counts = np.bincount(folds[x == lev], minlength=K + 1)[1:]
            assert counts.max() - counts.min() <= 1, (K, lev, counts)


def test_kfold_split_grouped_keeps_groups_whole():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 11, size=80)
    for K in (2, 3, 5):
        folds = pl.kfold_split_grouped(K, x, random_seed=4)
        assert set(folds.tolist()) == set(range(1, K + 1))
        for g in np.unique(x):
            assert np.unique(folds[x == g]).size == 1
        per_fold = np.array([np.unique(x[folds == k]).size for k in range(1, K + 1)])
        assert per_fold.max() - per_fold.min() <= 1 and per_fold.sum() == np.unique(x).size
    groups = np.array(["b", "a", "c", "a", "b", "c"])
    np.testing.assert_array_equal(pl.kfold_split_grouped(3, groups), [2, 1, 3, 1, 2, 3])  # K groups: sorted order


def test_kfold_split_bad_input_names_it():
    with pytest.raises(ValueError, match=r"kfold_split_random: N=None; give the number of observations"):
        pl.kfold_split_random(3)
    with pytest.raises(ValueError, match=r"kfold_split_random: K=11; the number of folds must be at least 2 and at "
                                         r"most the number of observations \(10\)"):
        pl.kfold_split_random(11, 10)
    with pytest.raises(ValueError, match=r"K=2.5; give the number of folds as a whole number"):
        pl.kfold_split_stratified(2.5, [0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"kfold_split_stratified needs x="):
        pl.kfold_split_stratified(2)
    with pytest.raises(ValueError, match=r"K=4 is more than the 3 groups of x"):
        pl.kfold_split_grouped(4, [1, 1, 2, 2, 3, 3])
    with pytest.raises(ValueError, match=r"x has NaN labels"):
        pl.kfold_split_grouped(2, [1.0, np.nan, 2.0])
