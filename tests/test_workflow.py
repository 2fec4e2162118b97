"""User-facing workflow: JaxModel end to end, Eq. 13 weights, loo_expectations, add_loo."""

import warnings

import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr
from gaussian_models import leverage_fit, leverage_regression

import ppl_loo as pl
from ppl_loo.adapters.jax.bijectors import Exp


@pytest.fixture(scope="module")
def lev():
    return leverage_fit()


def _jax_version(model):
    """The same Gaussian linear regression written by a user with pl.JaxModel."""
    X, y, sigma, tau = jnp.asarray(model.X), jnp.asarray(model.y), model.sigma, model.tau

    def log_prior(p):
        return jnp.sum(jst.norm.logpdf(p["beta"], 0.0, tau))

    def log_lik(p):
        return jst.norm.logpdf(y, X @ p["beta"], sigma)

    return pl.JaxModel({"beta": ((X.shape[1],), None)}, log_prior, log_lik, var_name="y", obs_dims=("obs",))


def test_jax_model_gives_the_same_answer(lev):
    model, data, res = lev
    jm = _jax_version(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res2 = pl.loo(data, jm, progressbar=False)
    np.testing.assert_allclose(res2.elpd_i.values, res.elpd_i.values, atol=1e-8)
    # the same observations adapted and vouched for (the label may differ where two maps tie, e.g.
    # PMM2 and MM2 giving the same estimate to 1e-8)
    np.testing.assert_array_equal(res2.doubtful.values, res.doubtful.values)
    np.testing.assert_array_equal(res2.transform.values == "psis", res.transform.values == "psis")
    exact = model.exact_elpd_i()
    assert abs(res2.elpd - exact.sum()) < 0.5


def test_loo_expectations_of_linear_predictor(lev):
    model, data, res = lev
    got = pl.loo_expectations(data, res, lambda p: np.asarray(p["beta"]) @ model.X.T, model=model)
    exact = np.array([model.X[i] @ model.posterior(drop=i)[0] for i in range(model.n_obs)])
    # posterior sd of x_i beta under the LOO posterior sets the Monte Carlo scale
    sd = np.array([np.sqrt(model.X[i] @ model.posterior(drop=i)[1] @ model.X[i]) for i in range(model.n_obs)])
    assert np.all(np.abs(got.values - exact) < 0.15 * sd + 1e-3), np.abs(got.values - exact) / sd
    # the two outliers moved far from their full-posterior fit; plain PSIS can not follow them
    full = model.X @ model.posterior()[0]
    assert np.all(np.abs(exact[:2] - full[:2]) > 3 * sd[:2])
    assert got.dims == ("obs",)


def test_variational_weights_eq13():
    """Draws from a wider Gaussian q with its log density passed in: Eq. 13 weights."""
    model = leverage_regression(seed=2, n=30)
    m, C = model.posterior()
    rng = np.random.default_rng(5)
    Cq = 1.5 * C
    b = rng.multivariate_normal(m, Cq, size=(4, 1000))
    from scipy import stats

    log_q = stats.multivariate_normal(m, Cq).logpdf(b)
    data = xr.DataTree.from_dict({"posterior": xr.Dataset({"beta": (("chain", "draw", "coef"), b)})})
    exact = model.exact_elpd_i()
    # log q given as values at the draws: Eq. 13 weights; the well-behaved observations are exact
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, log_q=log_q, progressbar=False)
    assert res.approx_posterior
    err = res.elpd_i.values - exact
    ok = res.pareto_k.values <= res.good_k
    assert ok.sum() >= 28
    assert np.all(np.abs(err[ok]) <= 4 * res.mcse_elpd_i.values[ok] + 0.05), err
    # the two high-leverage outliers are beyond these proposals from q: reported, never silent
    bad = np.flatnonzero(~ok)
    assert set(bad) == {0, 1}
    assert np.all(res.transform.values[bad] == "failed") and np.all(res.doubtful.values[bad])
    # log q as a JAX function (enables the q-mixtures): the same answers where k is good
    Pq, mq = jnp.asarray(np.linalg.inv(Cq)), jnp.asarray(m)

    def log_q_fn(theta):
        return -0.5 * (theta - mq) @ Pq @ (theta - mq)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res2 = pl.loo(data, model, log_q=log_q_fn, progressbar=False)
    ok2 = res2.pareto_k.values <= res2.good_k
    assert ok2.sum() >= 28
    err2 = res2.elpd_i.values - exact
    assert np.all(np.abs(err2[ok2]) <= 4 * res2.mcse_elpd_i.values[ok2] + 0.05), err2
    # without the correction the draws are treated as posterior draws and the answer is wrong
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrong = pl.loo(data, model, progressbar=False,
                       second_opinions={"mixture": False, "smc": False})  # the draws alone, uncorrected
    e_ok = exact[ok].sum()
    assert abs(wrong.elpd_i.values[ok].sum() - e_ok) > 5 * abs(res.elpd_i.values[ok].sum() - e_ok) + 0.3
    with pytest.raises(ValueError, match="log_q"):
        pl.loo(data, model, log_q=log_q[:, :10])


def test_add_loo_writes_group(lev):
    _, data, res = lev
    out = pl.add_loo(data, res)
    g = out["loo"].to_dataset()
    assert "loo" not in data.children  # the input is not modified
    assert g["elpd_i"].dims == ("obs",) and g.sizes["obs"] == 40
    np.testing.assert_allclose(g["elpd_i"].values, res.elpd_i.values)
    assert g.attrs["elpd"] == pytest.approx(res.elpd)
    assert set(np.unique(g["transform"].values)) <= {"psis", "failed", *pl.DEFAULT_TRANSFORMS}
    np.testing.assert_allclose(g["pareto_k_psis"].values, res.pareto_k_psis.values)


def _assert_same_result(got, res):
    """Every field of two LOO results: numbers, strings, DataArrays and the candidates' table."""
    import dataclasses

    for f in dataclasses.fields(res):
        a, b = getattr(got, f.name), getattr(res, f.name)
        if isinstance(b, xr.DataArray):
            assert a.dims == b.dims, f.name
            if b.dtype.kind in "US":
                np.testing.assert_array_equal(a.values, b.values, err_msg=f.name)
            else:
                np.testing.assert_array_equal(np.asarray(a.values, b.dtype), b.values, err_msg=f.name)
            for name, coord in b.coords.items():
                np.testing.assert_array_equal(np.asarray(a.coords[name].values), coord.values, err_msg=name)
        elif f.name == "candidates":
            assert a["labels"] == b["labels"] and set(a) == set(b)
            for key in b:
                if key != "labels":
                    np.testing.assert_array_equal(a[key], np.asarray(b[key]), err_msg=key)
        elif isinstance(b, float) and np.isnan(b):
            assert np.isnan(a), f.name
        else:
            assert a == b, f.name


def test_result_is_plain_data_pickle_and_netcdf(lev, tmp_path):
    """The result pickles, and add_loo's group written to netCDF and read back rebuilds it field by
    field: the same printout, compare table and LOO expectations (with model=)."""
    import pickle

    import arviz_stats as azs

    model, data, res = lev
    assert res.adapted_log_weights.sizes["adapted"] > 0  # adapted weights are part of the round trip
    _assert_same_result(pickle.loads(pickle.dumps(res)), res)
    path = tmp_path / "fit.nc"
    pl.add_loo(data, res).to_netcdf(path)
    back = xr.open_datatree(path).load()
    got = pl.LooResult.from_datatree(back)
    _assert_same_result(got, res)
    assert str(got) == str(res) and got.trust_lines() == res.trust_lines()
    assert got.summary_table().equals(res.summary_table())
    plain = azs.loo(data, pointwise=True)
    table = azs.compare({"adaptive": res, "other": plain})
    table2 = azs.compare({"adaptive": got, "other": plain})
    assert table.drop(columns=["elpd_i"], errors="ignore").equals(table2.drop(columns=["elpd_i"], errors="ignore"))
    f = lambda p: np.asarray(p["beta"]) @ model.X.T  # noqa: E731
    np.testing.assert_allclose(pl.loo_expectations(back, got, f, model=model).values,
                               pl.loo_expectations(data, res, f, model=model).values, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="needs model="):
        pl.loo_expectations(data, got, f)


def test_jax_model_with_constrained_parameter():
    """Unknown noise scale behind an Exp bijector: the engine works in the unconstrained space."""
    rng = np.random.default_rng(0)
    y = np.r_[rng.normal(size=19), 6.0]

    def log_prior(p):
        return jst.norm.logpdf(p["mu"], 0, 10) + jst.norm.logpdf(jnp.log(p["sigma"]), 0, 1) - jnp.log(p["sigma"])

    def log_lik(p):
        return jst.norm.logpdf(jnp.asarray(y), p["mu"], p["sigma"])

    jm = pl.JaxModel({"mu": ((), None), "sigma": ((), Exp())}, log_prior, log_lik, obs_dims=("obs",))
    from ppl_loo.sampling import sample_nuts

    data = sample_nuts(jm, num_chains=2, num_warmup=300, num_samples=1000, random_seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, jm, progressbar=False, search={"adapt": "all"})
    # brute force: the LOO predictive density of the outlier by quadrature over (mu, log sigma)
    mu = np.linspace(-3, 4, 351)
    ls = np.linspace(-1.5, 1.8, 331)
    M, L = np.meshgrid(mu, ls, indexing="ij")
    from scipy import stats

    s = np.exp(L)
    lp = stats.norm.logpdf(M, 0, 10) + stats.norm.logpdf(L, 0, 1)  # density in (mu, log sigma)
    lp = lp + stats.norm.logpdf(y[:-1, None, None], M, s).sum(0)
    w = np.exp(lp - lp.max())
    exact = np.log(np.sum(w * stats.norm.pdf(y[-1], M, s)) / np.sum(w))
    assert abs(res.elpd_i.values[-1] - exact) < 4 * res.mcse_elpd_i.values[-1] + 0.02


def test_compiled_engine_cache_is_per_model_and_goes_with_it():
    """Repeated calls reuse one compiled engine per (model, settings), also through a new
    ``as_model`` of the same adapter; no module-level cache keeps the model alive."""
    import gc
    import weakref

    from gaussian_models import normal_mean_model

    from ppl_loo.adapters.as_model import as_model
    from ppl_loo.numerics.loo import EngineConfig
    from ppl_loo.workflow.loo.engine import compiled_engine

    model = normal_mean_model(np.arange(5.0))
    cfg = EngineConfig(("pmm1",), (1.0, 0.5), 1.0)
    first = compiled_engine(as_model(model), cfg, True, 2)
    assert compiled_engine(as_model(model), cfg, True, 2) is first
    assert compiled_engine(as_model(model), cfg, True, 1) is not first
    ref = weakref.ref(model)
    del model, first
    gc.collect()
    assert ref() is None
