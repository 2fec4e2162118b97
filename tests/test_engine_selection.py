"""How the engine chooses among candidates and when it vouches for one (docs/method.md, sections 4-5).

Known answers on constructed candidate tables (``select_candidate``, ``candidate_checks``) and, end
to end, on a model whose draws cannot support any adaptation (prior draws: every observation
doubtful, with the plain PSIS values kept), plus the printed summary of what doubtful observations
carry.
"""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from gaussian_models import leverage_regression
from scipy import stats

import ppl_loo as pl
from ppl_loo.numerics.loo import PLAIN_LIKE_TV, candidate_checks, select_candidate
from ppl_loo.workflow.loo.inputs import rank_rhat

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

# three candidates of group 0 (moments), two of group 1 (gradient flows), one of group 2 (Newton)
GROUP = np.array([0, 0, 0, 1, 1, 2])


def _sel(elpd, se, ok=None, k=None, dev=None, tv=None):
    n = len(elpd)
    tv = np.full(n, 0.5) if tv is None else np.asarray(tv, float)
    ok = np.ones(n, bool) if ok is None else np.asarray(ok)
    k = np.full(n, 0.3) if k is None else np.asarray(k, float)
    dev = np.zeros(n) if dev is None else np.asarray(dev, float)
    best, trusted, se_best = select_candidate(jnp.asarray(ok), jnp.asarray(ok), jnp.asarray(k),
                                              jnp.asarray(elpd, float), jnp.asarray(se, float), jnp.asarray(dev),
                                              GROUP, jnp.asarray(tv))
    return int(best), bool(trusted), float(se_best)


def test_lowest_confirmed_group_representative_is_reported():
    elpd = np.array([-1.00, -1.02, -1.30, -1.03, -1.05, -1.04])
    se = np.array([0.010, 0.020, 0.010, 0.012, 0.010, 0.011])
    best, trusted, se_best = _sel(elpd, se)
    # -1.30 agrees with nobody: not corroborated. Group reps by smallest error: 0 (-1.00), 4 (-1.05), 5 (-1.04)
    assert trusted and best == 4
    corr = elpd[[0, 1, 3, 4, 5]]
    assert se_best == pytest.approx(np.hypot(0.010, np.std(corr, ddof=1)), rel=1e-12)


def test_one_group_alone_is_not_trusted():
    elpd = np.array([-1.00, -1.01, -1.02, -2.0, -2.0, -2.0])
    ok = [True, True, True, False, False, False]
    best, trusted, _ = _sel(elpd, np.full(6, 0.01), ok=ok)
    assert not trusted and best in (0, 1, 2)


def test_plain_like_candidates_confirm_nothing():
    """A map whose weights sit on the same draws as plain PSIS's (total variation below
    PLAIN_LIKE_TV) is no second opinion, even where its estimate agrees."""
    elpd = np.array([-1.20, -9.0, -9.0, -1.21, -9.0, -9.0])
    ok = [True, False, False, True, False, False]
    tv = np.array([0.6, 0.0, 0.0, PLAIN_LIKE_TV / 2, 0.0, 0.0])  # candidate 3 barely moved the weights
    best, trusted, _ = _sel(elpd, np.full(6, 0.05), ok=ok, tv=tv)
    assert not trusted
    tv2 = tv.copy()
    tv2[3] = 2 * PLAIN_LIKE_TV  # the same estimate from weights that moved: an independent confirmation
    best2, trusted2, _ = _sel(elpd, np.full(6, 0.05), ok=ok, tv=tv2)
    assert trusted2 and best2 == 3  # the lower of the two confirmed group representatives


def test_checks_normalizer_and_in_sample_bound():
    ll0 = jnp.log(jnp.full(100, 0.5))  # lpd = log 0.5
    dev = jnp.array([0.0, 0.05, 0.05, 0.0])
    se_dev = jnp.array([0.01, 0.01, 0.02, 0.01])
    elpd = jnp.array([np.log(0.4), np.log(0.4), np.log(0.4), np.log(0.6)])
    mcse = jnp.full(4, 0.01)
    ok = np.asarray(candidate_checks(dev, se_dev, elpd, mcse, ll0))
    # 5 SE off the exact normalizer fails, 2.5 SE passes; elpd above lpd = log 0.5 fails
    assert ok.tolist() == [True, False, True, False]


def test_prior_draws_make_every_observation_doubtful_with_plain_values():
    model = leverage_regression(seed=4, n=20)
    rng = np.random.default_rng(0)
    import xarray as xr

    beta = rng.normal(0.0, model.tau, size=(2, 500, model.dim))
    data = xr.DataTree.from_dict({"posterior": xr.Dataset({"beta": (("chain", "draw", "beta_dim"), beta)})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = pl.loo(model_free_tree(model, data))
        # the search alone: the second opinions sample the model themselves and would settle what prior draws cannot
        res = pl.loo(data, model, progressbar=False, second_opinions={"mixture": False, "smc": False})
    doubtful = res.doubtful.values
    assert doubtful.mean() > 0.8
    np.testing.assert_allclose(res.elpd_i.values[doubtful], plain.elpd_i.values[doubtful], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.pareto_k.values[doubtful], plain.pareto_k.values[doubtful], rtol=0, atol=1e-12)
    lines = res.trust_lines()
    carried = float(np.sum(res.elpd_i.values[doubtful]))
    assert f"{int(doubtful.sum())} doubtful: they carry {carried:.2f} of elpd_loo {res.elpd:.2f}" in "\n".join(lines)
    assert "refit='doubtful'" in str(res)


def model_free_tree(model, data):
    """The same draws with their log-likelihood group, for plain PSIS without the model."""
    import jax
    import xarray as xr

    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()))
    ll = np.asarray(jax.vmap(model.loglik)(jnp.asarray(theta))).reshape(2, 500, -1)
    return xr.DataTree.from_dict({"posterior": data["posterior"].to_dataset(),
                                  "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)})})


def test_draws_that_have_not_converged_make_their_observations_doubtful():
    """Exact posterior draws in 4 chains, then the same with one chain stuck one posterior sd away in
    ``beta[0]``: R-hat (the identity with ``arviz_stats``' rank-normalized R-hat) rises above 1.01, and every
    observation whose log-likelihood draws have not mixed is doubtful whatever its k-hat; the text names the
    variable."""
    import xarray as xr
    from arviz_stats.base import array_stats

    model = leverage_regression(seed=4, n=20)
    good = model.exact_draws(n_chains=4, n_draws=1000, seed=1)
    beta = np.asarray(good["posterior"]["beta"].values).copy()
    _, cov = model.posterior()
    beta[0, :, 0] += np.sqrt(cov[0, 0])
    bad = xr.DataTree.from_dict({"posterior": xr.Dataset({"beta": (("chain", "draw", "coef"), beta)})})

    rhat_good = np.asarray(array_stats.rhat(good["posterior"]["beta"].values, chain_axis=0, draw_axis=1))
    rhat_bad = np.asarray(array_stats.rhat(beta, chain_axis=0, draw_axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res_good = pl.loo(good, model, progressbar=False)
    assert res_good.max_rhat == pytest.approx(float(rhat_good.max()), rel=1e-12) and res_good.max_rhat <= 1.01
    assert res_good.max_rhat_var == f"beta[{int(rhat_good.argmax())}]"
    assert not res_good.doubtful.values.all()
    assert "have not converged" not in str(res_good)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(bad, model, progressbar=False,
                     second_opinions={"mixture": False, "smc": False})  # the shifted draws alone
    assert rhat_bad.argmax() == 0 and res.max_rhat > 1.05
    assert res.max_rhat == pytest.approx(float(rhat_bad[0]), rel=1e-12)
    # judged per observation: doubtful wherever its log-likelihood draws have not mixed (most of them here)
    ll = stats.norm.logpdf(model.y, beta @ model.X.T, model.sigma).reshape(4, 1000, -1)
    unmixed = rank_rhat(ll) > 1.01
    assert unmixed.sum() >= 10 and res.doubtful.values[unmixed].all()
    assert "R-hat" in str(res) and "beta[0]" in str(res)


def test_rank_rhat_equals_arviz_stats():
    """The vectorized rank-normalized split R-hat gives arviz_stats' numbers column by column: continuous,
    one chain shifted, constant (NaN), discrete with ties, an odd number of draws, one chain (NaN)."""
    from arviz_stats.base import array_stats

    from ppl_loo.workflow.loo.inputs import rank_rhat

    rng = np.random.default_rng(3)
    a = rng.normal(size=(4, 101, 5))
    a[..., 1] = 3.0
    a[1, :, 2] += 0.5
    a[..., 3] = rng.poisson(1.0, size=(4, 101))
    a[..., 4] = np.cumsum(a[..., 4], axis=1)  # random walks: far from converged
    a[0, 5, 0] = a[2, 7, 0] = -np.inf  # log-likelihoods can be -inf: ranked, not dropped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = np.asarray(array_stats.rhat(a, chain_axis=0, draw_axis=1))
        mine = rank_rhat(a)
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(ref))
    np.testing.assert_allclose(mine[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-12, atol=0)
    assert np.isnan(mine[1]) and mine[4] > 1.1 and mine[2] > 1.01
    assert np.all(np.isnan(rank_rhat(a[:1])))
