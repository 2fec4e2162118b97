"""``pl.loo_subsample``: the numbers of ``arviz_stats.loo_subsample`` (1e-8), the estimators against
identities and the truth, the adaptive engine on the subsample against closed-form LOO, and the input errors."""

import warnings

import arviz_stats as azs
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from gaussian_models import LinearRegressionKnownNoise
from scipy import stats

import ppl_loo as pl
from ppl_loo.numerics.subsample import diff_srs, hansen_hurwitz, srs

pytestmark = pytest.mark.x64

FIELDS = ("elpd", "se", "subsampling_se", "p")
TRANSFORMS = ("mm_iter", "mm2", "newton_mix", "pmm1_mix")  # a smaller search compiles faster


@pytest.fixture(scope="module")
def synthetic():
    """Normal model, n = 2000, S = 2 x 500, one draw of mu per (chain, draw): a log-likelihood with
    known structure (no model needed)."""
    rng = np.random.default_rng(0)
    n = 2000
    mu = rng.normal(0.0, 0.05, (2, 500))
    sigma = np.exp(rng.normal(0.0, 0.03, (2, 500)))
    y = rng.normal(size=n)
    ll = stats.norm.logpdf(y, mu[..., None], sigma[..., None])
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset({"mu": (("chain", "draw"), mu), "sigma": (("chain", "draw"), sigma)}),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)}),
        "observed_data": xr.Dataset({"y": (("obs",), y)}),
    })


def _assert_same_as_arviz(ours, ref):
    for f in FIELDS:
        assert ours[f] == pytest.approx(ref[f], rel=1e-8, abs=1e-8), f
    np.testing.assert_array_equal(ours.loo_subsample_observations, ref.loo_subsample_observations)
    np.testing.assert_allclose(ours.elpd_i.values, ref.elpd_i.values, rtol=1e-8, atol=1e-8)  # NaN where not sampled
    np.testing.assert_allclose(ours.pareto_k.values, ref.pareto_k.values, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(ours.elpd_loo_approx.values, ref.elpd_loo_approx.values, rtol=1e-10)
    assert ours.subsample_size == ref.subsample_size and ours.n_data_points == ref.n_data_points


@pytest.mark.parametrize("observations", [200, np.array([5, 17, 3, 1999, 400, 801, 1200, 77, 9, 1500])])
def test_plain_equals_arviz(synthetic, observations):
    ref = azs.loo_subsample(synthetic, observations=observations, pointwise=True, seed=3)
    ours = pl.loo_subsample(synthetic, observations=observations, random_seed=3)
    _assert_same_as_arviz(ours, ref)
    assert isinstance(ours, azs.utils.ELPDDataLOOSubsample)
    assert "subsampling SE" in str(ours) and "2000 total observations" in str(ours)
    # approximation="lpd" is the default (arviz_stats' method="lpd")
    assert pl.loo_subsample(synthetic, observations=observations, random_seed=3, approximation="lpd").elpd == ours.elpd


def test_all_observations_is_full_loo(synthetic):
    full = pl.loo(synthetic)
    res = pl.loo_subsample(synthetic, observations=2000)
    assert res.elpd == pytest.approx(full.elpd, rel=1e-12)
    assert res.subsampling_se == 0.0
    # Eq. 9 estimates sum(y^2) - (sum y)^2 / N: the population variance, N / (N - 1) of the sample one
    assert res.se == pytest.approx(full.se * np.sqrt(1999 / 2000), rel=1e-10)
    assert res.p == pytest.approx(full.p, rel=1e-10)
    np.testing.assert_allclose(res.elpd_i.values, full.elpd_i.values, rtol=1e-12)


@pytest.mark.parametrize("estimator", ["diff_srs", "srs", "hh_pps"])
def test_estimates_cover_the_full_data_elpd(synthetic, estimator):
    full = pl.loo(synthetic)
    for seed in range(3):  # (each new subsample size compiles PSIS once more)
        res = pl.loo_subsample(synthetic, observations=300, estimator=estimator, random_seed=seed)
        assert abs(res.elpd - full.elpd) < 4 * res.subsampling_se, (seed, res.elpd, full.elpd, res.subsampling_se)
        assert res.se == pytest.approx(full.se, rel=0.3)  # one subsample of 300 estimates the spread
        assert res.estimator == estimator


def test_estimators_closed_forms():
    rng = np.random.default_rng(1)
    y_all = -np.abs(rng.normal(1.0, 0.5, 50))
    idx = np.arange(0, 50, 5)
    # srs: N mean(y), N^2 (1 - m/N) var / m, N var
    total, sub_se, se = srs(y_all[idx], 50)
    assert total == pytest.approx(50 * y_all[idx].mean())
    assert sub_se == pytest.approx(np.sqrt(50**2 * (1 - 10 / 50) * y_all[idx].var(ddof=1) / 10))
    assert se == pytest.approx(np.sqrt(50 * y_all[idx].var(ddof=1)))
    # the difference estimator is exact when the approximation is off by a constant
    total, sub_se, _ = diff_srs(y_all[idx], y_all[idx] - 0.3, y_all - 0.3, 50)
    assert total == pytest.approx(y_all.sum(), rel=1e-12) and sub_se == pytest.approx(0.0, abs=1e-9)
    # Hansen-Hurwitz with probabilities proportional to |y| is exact (y / z constant)
    z = np.abs(y_all) / np.abs(y_all).sum()
    total, sub_se, _ = hansen_hurwitz(y_all[idx], z[idx], np.ones(10), 50)
    assert total == pytest.approx(y_all.sum(), rel=1e-12) and sub_se == pytest.approx(0.0, abs=1e-9)


def test_compare_accepts_subsample_results(synthetic):
    a = pl.loo_subsample(synthetic, observations=300, random_seed=1)
    b = azs.loo_subsample(synthetic, observations=300, pointwise=True, seed=1)
    table = azs.compare({"ours": a, "arviz": b})
    assert abs(table.loc["arviz", "elpd_diff"]) < 1e-8
    assert "subsampling_dse" in table.columns


# ------------------------------------------------------------------ with a model: adaptive on the subsample
@pytest.fixture(scope="module")
def leverage_fit():
    """Linear regression with two high-leverage gross outliers (n = 400, closed-form LOO) and a subsample
    that holds both of them."""
    rng = np.random.default_rng(1)
    n = 400
    x = rng.normal(size=(n, 2))
    x[0], x[1] = [8.0, 7.0], [-7.0, 8.0]
    X = np.column_stack([np.ones(n), x])
    y = X @ np.array([0.5, 1.0, -1.0]) + rng.normal(size=n)
    y[0] -= 15.0
    y[1] += 15.0
    model = LinearRegressionKnownNoise(X, y)
    data = model.exact_draws(n_chains=4, n_draws=250, seed=0)
    obs = np.r_[0, 1, np.random.default_rng(5).choice(np.arange(2, n), 48, replace=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapted = pl.loo_subsample(data, model, observations=obs, progressbar=False, search={"transforms": TRANSFORMS})
        plain = pl.loo_subsample(data, observations=obs)
    return model, data, obs, adapted, plain, model.exact_elpd_i()


def test_adapted_subsample_matches_closed_form(leverage_fit):
    _, _, obs, res, plain, exact = leverage_fit
    idx = res.loo_subsample_observations
    np.testing.assert_array_equal(idx, np.sort(obs))
    assert np.all(res.pareto_k_psis.values[[0, 1]] > 1.0)  # plain PSIS fails on both outliers ...
    assert np.all(np.abs(plain.elpd_i.values[[0, 1]] - exact[[0, 1]]) > 5.0)  # ... and is nats off
    err = res.elpd_i.values[idx] - exact[idx]
    assert np.all(np.abs(err) <= 4 * res.mcse_elpd_i.values[idx] + 0.02), err
    assert np.all(res.pareto_k.values[[0, 1]] <= res.good_k)
    assert set(res.transform.values[[0, 1]]) & {"psis", "failed"} == set()
    assert not res.doubtful.values.any() and res.searched.values[[0, 1]].all() and res.adapted
    # the estimate is the difference estimator with the exact elpd_i of the same subsample (the oracle)
    approx = res.elpd_loo_approx.values
    oracle = diff_srs(exact[idx], approx[idx], approx, 400)
    assert abs(res.elpd - oracle[0]) < 4 * 400 / len(idx) * np.sqrt(np.sum(res.mcse_elpd_i.values[idx] ** 2))
    assert abs(plain.elpd - oracle[0]) > 50.0  # plain's error on two observations, times N / m
    assert res.subsampling_se == pytest.approx(oracle[1], rel=0.01)
    np.testing.assert_allclose(approx, plain.elpd_loo_approx.values, rtol=1e-12)  # lpd from the stored group


def test_all_observations_with_model_is_pl_loo(leverage_fit):
    model, data, _, _, _, _ = leverage_fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # pl.loo_subsample runs the search alone: pl.loo without its second opinions (mixture IS, SMC)
        full = pl.loo(data, model, progressbar=False, search={"transforms": TRANSFORMS},
                      second_opinions={"mixture": False, "smc": False})
        res = pl.loo_subsample(data, model, observations=np.arange(400), progressbar=False,
                               search={"transforms": TRANSFORMS})
    assert res.elpd == pytest.approx(full.elpd, abs=1e-8)
    np.testing.assert_allclose(res.elpd_i.values, full.elpd_i.values, atol=1e-10)
    np.testing.assert_array_equal(res.transform.values, full.transform.values)


def test_plpd_is_log_lik_at_posterior_mean(leverage_fit):
    model, data, obs, _, _, _ = leverage_fit
    with pytest.warns(UserWarning, match=r"greater than 0.67 for 2 observation\(s\) \(y\[obs=0\], y\[obs=1\]\)"):
        res = pl.loo_subsample(data, model, observations=obs, approximation="plpd", search={"adapt": "none"})
    beta_bar = data["posterior"]["beta"].mean(("chain", "draw")).values
    expected = stats.norm.logpdf(model.y, model.X @ beta_bar, 1.0)
    np.testing.assert_allclose(res.elpd_loo_approx.values, expected, rtol=1e-10)
    assert res.approximation == "plpd" and not res.adapted
    assert res.doubtful.values[[0, 1]].all()  # adapt="none": plain PSIS, and k-hat is high there


def test_stored_log_likelihood_that_differs_from_the_model_warns(leverage_fit):
    model, data, obs, _, _, _ = leverage_fit
    bad = data.copy()
    ll = bad["log_likelihood"].to_dataset()
    ll["y"] = ll["y"] + 0.5 * (ll["obs"] == obs[3])
    bad["log_likelihood"] = ll
    with pytest.warns(UserWarning) as record:
        pl.loo_subsample(bad, model, observations=obs, search={"adapt": "none"})
    assert any("stored log_likelihood['y'] differs from the model's by up to 0.5" in str(w.message) for w in record)


def test_dask_backed_log_likelihood_gives_the_same_numbers(synthetic):
    lazy = synthetic.copy()
    lazy["log_likelihood"] = synthetic["log_likelihood"].to_dataset().chunk({"obs": 300})
    a = pl.loo_subsample(synthetic, observations=100, random_seed=2)
    b = pl.loo_subsample(lazy, observations=100, random_seed=2)
    for f in FIELDS:  # the same up to the rounding of a reduction by chunks
        assert b[f] == pytest.approx(a[f], rel=1e-12), f
    np.testing.assert_array_equal(a.elpd_i.values, b.elpd_i.values)
    assert type(lazy["log_likelihood"]["y"].data).__module__.startswith("dask")  # never loaded into the tree


def test_model_log_likelihood_by_chunks_of_draws(leverage_fit):
    from ppl_loo.workflow.subsample.model import _log_lik_columns, _lpd_from_model

    model, data, obs, _, _, _ = leverage_fit
    pm = pl.as_model(model)
    theta = jnp.asarray(pm.unconstrain(data["posterior"].to_dataset()))
    whole = np.asarray(pm.log_lik(theta))
    # 1000 draws x 400 observations in chunks of 3 draws (the last one shorter)
    np.testing.assert_allclose(_log_lik_columns(pm, theta, obs, 400, max_values=1200), whole[:, obs], rtol=1e-14)
    lpd = np.log(np.mean(np.exp(whole), axis=0))
    np.testing.assert_allclose(_lpd_from_model(pm, theta, 400, max_values=1200), lpd, rtol=1e-12)


# ------------------------------------------------------------------ inputs
@pytest.mark.parametrize("observations, match", [
    (np.array([0, 2000]), r"outside 0..1999"),
    (np.array([3, 3, 4]), r"repeats index\(es\) \[3\]"),
    (np.array([], dtype=int), r"observations is empty"),
    (2001, r"between 1 and 2000"),
    (0, r"between 1 and 2000"),
])
def test_bad_observations(synthetic, observations, match):
    with pytest.raises(ValueError, match=match):
        pl.loo_subsample(synthetic, observations=observations)


def test_bad_arguments(synthetic):
    with pytest.raises(TypeError, match="1-d array of integer"):
        pl.loo_subsample(synthetic, observations=np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="estimator='ratio'.*'diff_srs', 'srs', 'hh_pps'"):
        pl.loo_subsample(synthetic, observations=10, estimator="ratio")
    with pytest.raises(ValueError, match="approximation='waic'.*'lpd', 'plpd'"):
        pl.loo_subsample(synthetic, observations=10, approximation="waic")
    with pytest.raises(ValueError, match="plpd.*needs the model"):
        pl.loo_subsample(synthetic, observations=10, approximation="plpd")
    with pytest.raises(ValueError, match=r"var_name='z' is not in the 'log_likelihood' group"):
        pl.loo_subsample(synthetic, observations=10, var_name="z")
    no_ll = xr.DataTree.from_dict({"posterior": synthetic["posterior"].to_dataset()})
    with pytest.raises(ValueError, match="no 'log_likelihood' group"):
        pl.loo_subsample(no_ll, observations=10)
    # repeats are how often an observation was drawn for Hansen-Hurwitz
    res = pl.loo_subsample(synthetic, observations=np.array([3, 3, 4, 10]), estimator="hh_pps")
    np.testing.assert_array_equal(res.subsample_counts, [2, 1, 1])


def test_add_loo_and_pl_compare_refuse_clearly(synthetic):
    res = pl.loo_subsample(synthetic, observations=10)
    with pytest.raises(TypeError, match="pl.loo_subsample result.*run pl.loo for the full result"):
        pl.add_loo(synthetic, res)
    with pytest.raises(TypeError, match="'a' is a SubsampleResult"):
        pl.compare({"a": res, "b": pl.loo(synthetic)})
    import pickle
    back = pickle.loads(pickle.dumps(res))
    assert back.elpd == res.elpd and back.estimator == "diff_srs"


# ------------------------------------------------------------------ a real PyMC model
@pytest.fixture(scope="module")
def pymc_fit():
    pm = pytest.importorskip("pymc")
    rng = np.random.default_rng(2)
    n = 1000
    x = rng.normal(size=n)
    y = 0.3 + 0.7 * x + rng.standard_t(4, size=n)
    with pm.Model(coords={"obs_id": np.arange(n)}) as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + b * x, s, observed=y, dims="obs_id")
        idata = pm.sample(draws=500, tune=400, chains=2, cores=1, progressbar=False, random_seed=4,
                          compute_convergence_checks=False, nuts_sampler="pymc")
        pm.compute_log_likelihood(idata, progressbar=False)
    return model, idata


def test_pymc_plain_and_plpd_equal_arviz(pymc_fit):
    model, idata = pymc_fit
    ref = azs.loo_subsample(idata, observations=150, pointwise=True, seed=7)
    _assert_same_as_arviz(pl.loo_subsample(idata, observations=150, random_seed=7), ref)
    # plpd: arviz_stats builds the log-likelihood at the posterior mean from the PyMC model; ppl_loo through its
    # own adapter (adapt="none": the subsample keeps plain PSIS, as arviz_stats)
    ref = azs.loo_subsample(idata, observations=150, pointwise=True, seed=7, method="plpd", model=model)
    ours = pl.loo_subsample(idata, model, observations=150, random_seed=7, approximation="plpd",
                            search={"adapt": "none"})
    _assert_same_as_arviz(ours, ref)


def test_random_seed_none_draws_the_same_subsample_on_the_same_draws(synthetic):
    """random_seed=None: the seed derived from the posterior draws (as in pl.loo); a rerun draws the same subsample."""
    from ppl_loo.workflow.loo.inputs import posterior_seed

    a = pl.loo_subsample(synthetic, observations=100)
    b = pl.loo_subsample(synthetic, observations=100)
    c = pl.loo_subsample(synthetic, observations=100, random_seed=posterior_seed(None, synthetic))
    np.testing.assert_array_equal(a.loo_subsample_observations, b.loo_subsample_observations)
    np.testing.assert_array_equal(a.loo_subsample_observations, c.loo_subsample_observations)
    assert a.elpd == b.elpd == c.elpd
    d = pl.loo_subsample(synthetic, observations=100, random_seed=315)  # arviz_stats' default seed
    assert not np.array_equal(a.loo_subsample_observations, d.loo_subsample_observations)
