"""Adaptive LOO against closed-form LOO on conjugate Gaussian models (exact posterior draws)."""

import warnings

import arviz_stats as azs
import numpy as np
import pytest
from gaussian_models import leverage_regression, normal_mean_model

import ppl_loo as pl

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)


@pytest.fixture(scope="module")
def leverage():
    model = leverage_regression()
    data = model.exact_draws(n_chains=4, n_draws=1000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, progressbar=False)
        plain = azs.loo(data, pointwise=True)
    return model, data, res, plain


def test_leverage_regression_matches_cavity_formula(leverage):
    model, _, res, plain = leverage
    exact = model.exact_elpd_i()
    # the case is hard: plain PSIS is far off on the two high-leverage outliers
    assert abs(plain.elpd - exact.sum()) > 9.0
    err = res.elpd_i.values - exact
    tol = 4 * res.mcse_elpd_i.values + 0.02
    assert np.all(np.abs(err) <= np.maximum(tol, 0.1)), (err, tol)
    assert abs(res.elpd - exact.sum()) < 0.5
    for i in (0, 1):
        assert abs(err[i]) < 0.2
        assert res.pareto_k.values[i] <= res.good_k
        assert res.transform.values[i] not in ("psis", "failed")


def test_leverage_regression_result_fields(leverage):
    _, _, res, _ = leverage
    assert res.pareto_k_psis.values[0] > 0.7  # plain PSIS flags the outlier ...
    assert res.pareto_k.values[0] < 0.5  # ... adaptation fixes it
    # p_loo_i = lpd_i - elpd_i identity
    assert np.isclose(res.p, float(res.p_loo_i.sum()))
    assert res.elpd_i.dims == ("obs",)
    assert not bool(res.doubtful.values[[0, 1]].any())


def test_normal_mean_outlier():
    y = np.r_[np.random.default_rng(3).normal(size=11), 10.0]
    model = normal_mean_model(y, sigma=1.0, tau=10.0)
    data = model.exact_draws(n_chains=4, n_draws=1000, seed=2)
    exact = model.exact_elpd_i()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, progressbar=False)
    err = res.elpd_i.values - exact
    assert res.pareto_k_psis.values[-1] > res.good_k  # plain PSIS fails on the outlier
    assert np.all(np.abs(err) <= 4 * res.mcse_elpd_i.values + 0.02)
    assert abs(err[-1]) < 0.1
    assert res.pareto_k.values[-1] <= res.good_k
    assert res.transform.values[-1] != "psis"


def test_plain_psis_equals_arviz(leverage):
    _, data, _, plain = leverage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, None)
    np.testing.assert_allclose(res.elpd_i.values, plain.elpd_i.values, rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.pareto_k.values, plain.pareto_k.values, rtol=0, atol=1e-8)
    assert abs(res.elpd - plain.elpd) < 1e-8 and abs(res.se - plain.se) < 1e-8


def test_compare_accepts_results(leverage):
    _, data, res, _ = leverage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = pl.loo(data, None)
        table = azs.compare({"adapted": res, "plain": plain}, round_to="none")
    assert set(table.index) == {"adapted", "plain"}
    assert np.isclose(table.loc["adapted", "elpd"], res.elpd)
    assert "ppl_loo" in str(res)


def test_iterated_moment_matching_goes_beyond_one_step():
    """On the high-leverage outliers one MM2 step fails; three mixture iterations are exact."""
    model = leverage_regression()
    data = model.exact_draws(n_chains=4, n_draws=1000, seed=2)
    exact = model.exact_elpd_i()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, k_threshold=-np.inf, progressbar=False, search={"transforms": ["mm2", "mm_iter"]})
    labels = res.candidates["labels"]
    j_one, j_iter = labels.index(("mm2", 1.0)), labels.index(("mm_iter", 3.0))
    for i in (0, 1):
        assert res.candidates["k"][i, j_one] > 0.7
        assert res.candidates["k"][i, j_iter] <= 0.7
        assert abs(res.candidates["elpd"][i, j_iter] - exact[i]) < 0.05


def _regression_tree(model, b):
    import jax.numpy as jnp
    import xarray as xr

    ll = np.asarray(jnp.vectorize(model.loglik, signature="(d)->(n)")(jnp.asarray(b)))
    return xr.DataTree.from_dict({"posterior": xr.Dataset({"beta": (("chain", "draw", "coef"), b)}),
                                  "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)})})


def test_change_of_variables_check_exact_draws_pass_other_draws_fail():
    """For draws from the posterior, ``p(T theta)|J|/p(theta)`` has mean 1 for every invertible map,
    so by Markov's inequality its maximum over L points exceeds ``L * 1e6`` with probability at most
    1e-6: exact posterior draws never trip the check, and the adapted elpd is the closed form. Draws
    from the prior of the same model (not its posterior) move to points of far higher posterior
    density: every adapted observation trips it, is marked doubtful, and the user is warned."""
    from gaussian_models import LinearRegressionKnownNoise

    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 4))
    y = X @ (0.5 * rng.normal(size=4)) + rng.normal(size=30)
    model = LinearRegressionKnownNoise(X, y, sigma=1.0, tau=1.0)
    m, C = model.posterior()
    bound = np.log(2 * 1000) + np.log(1e6)

    exact = _regression_tree(model, m + rng.normal(size=(2, 500, 4)) @ np.linalg.cholesky(C).T)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all on exact draws
        res = pl.loo(exact, model, progressbar=False, search={"adapt": "all"})  # adapt every observation
    ratio = res.candidates["max_log_ratio"]
    assert np.all(np.isfinite(ratio)) and np.nanmax(ratio) < bound - 10
    assert not res.doubtful.values.any()
    assert abs(res.elpd - model.exact_elpd_i().sum()) < 0.1

    prior = _regression_tree(model, rng.normal(size=(2, 500, 4)))
    with pytest.warns(UserWarning, match="change-of-variables check for 30 of 30"):
        res = pl.loo(prior, model, progressbar=False, search={"influence_threshold": 0.0},
                     second_opinions={"mixture": False, "smc": False})  # draws alone
    assert np.all(np.nanmax(res.candidates["max_log_ratio"], axis=1) > bound)
    assert res.doubtful.values.all()
