"""Identities of the engine: hbar = 0 is plain PSIS, PMM at hbar = 1 is Paananen's MM1/MM2."""

import warnings

import numpy as np
import pytest
import xarray as xr
from gaussian_models import leverage_regression
from scipy.special import logsumexp

import ppl_loo as pl
from ppl_loo.numerics.psis import psislw

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)


@pytest.fixture(scope="module")
def setup():
    model = leverage_regression(seed=4, n=25)
    data = model.exact_draws(n_chains=2, n_draws=500, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = pl.loo(data, None)
    return model, data, plain


def _run(data, model, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # k_threshold=-inf adapts every observation, so every candidate is evaluated everywhere
        return pl.loo(data, model, progressbar=False, k_threshold=-np.inf, **kw)


def test_hbar_zero_is_plain_psis(setup):
    model, data, plain = setup
    res = _run(data, model, search={"transforms": ["pmm1", "pmm2", "kl", "var", "ll"], "hbar": [0.0]})
    c = res.candidates
    assert c["k_weights"].shape == (25, 5)
    np.testing.assert_allclose(c["k_weights"], np.repeat(plain.pareto_k.values[:, None], 5, 1), atol=1e-9)
    np.testing.assert_allclose(c["elpd"], np.repeat(plain.elpd_i.values[:, None], 5, 1), atol=1e-9)


def test_pmm_at_hbar_one_is_paananen_mm(setup):
    model, data, _ = setup
    res = _run(data, model, search={"transforms": ["pmm1", "pmm2", "mm1", "mm2"], "hbar": [1.0]})
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()))
    import jax

    loglik = np.asarray(jax.vmap(model.loglik)(theta))
    logp = np.asarray(jax.vmap(model.logp)(theta))
    from ppl_loo.workflow.loo.inputs import r_eff_of

    reff = r_eff_of(data, theta.shape[0])
    for i in (0, 1, 7):
        w = np.exp(-loglik[:, i] - logsumexp(-loglik[:, i]))
        mean, mean_w = theta.mean(0), w @ theta
        v = ((theta - mean) ** 2).mean(0)
        v_w = w @ (theta - mean) ** 2
        maps = {"mm1": theta - mean + mean_w, "mm2": np.sqrt(v_w / v) * (theta - mean) + mean_w}
        for name, phi in maps.items():
            logdet = 0.0 if name == "mm1" else np.sum(np.log(np.sqrt(v_w / v)))
            lp = np.asarray(jax.vmap(model.logp)(phi))
            ll_i = np.asarray(jax.vmap(model.loglik)(phi))[:, i]
            log_eta = logdet + lp - ll_i - logp  # Eq. 10 with the exact posterior ratio (Eq. 11)
            lw, k = psislw(log_eta, reff)
            elpd = logsumexp(np.asarray(lw) + ll_i)
            j_mm = res.candidates["labels"].index((name, 1.0))
            j_pmm = res.candidates["labels"].index(("p" + name, 1.0))
            for j in (j_mm, j_pmm):
                assert abs(res.candidates["k_weights"][i, j] - float(k)) < 1e-8
                assert abs(res.candidates["elpd"][i, j] - elpd) < 1e-8


def test_bad_inputs(setup):
    model, data, _ = setup
    with pytest.raises(ValueError, match="posterior"):
        pl.loo(xr.DataTree.from_dict({"log_likelihood": data["log_likelihood"].to_dataset()}), model)
    post = data["posterior"].to_dataset().copy(deep=True)
    post["beta"][0, 3, 1] = np.nan
    bad = xr.DataTree.from_dict({"posterior": post})
    with pytest.raises(ValueError, match="non-finite"):
        pl.loo(bad, model, progressbar=False)
    ll = data["log_likelihood"].to_dataset().copy(deep=True)
    ll["y"][1, 2, 0] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        pl.loo(xr.DataTree.from_dict({"posterior": data["posterior"].to_dataset(), "log_likelihood": ll}))
    short = data["log_likelihood"].to_dataset().isel(obs=slice(0, 10))
    with pytest.raises(ValueError, match="do not match"):
        pl.loo(xr.DataTree.from_dict({"posterior": data["posterior"].to_dataset(), "log_likelihood": short}),
               model, progressbar=False)
    with pytest.raises(ValueError, match="unknown transformation"):
        pl.loo(data, model, search={"transforms": ["kl", "bogus"]})
    with pytest.raises(ValueError, match="no 'log_likelihood' group"):
        pl.loo(xr.DataTree.from_dict({"posterior": data["posterior"].to_dataset()}))
    with pytest.raises(ValueError, match="hbar"):
        pl.loo(data, model, search={"hbar": [-1.0]})


@pytest.mark.parametrize("transforms", [("mm_iter",), ("pmm1", "kl", "newton_mix")])
def test_rebuilt_points_carry_the_chosen_weights(setup, transforms):
    """``points`` (what loo_expectations rebuilds) are the points the chosen candidate's weights sit on:
    the log-likelihood there is the search's ``ll_phi`` exactly, and ``log sum w l`` its ``elpd_i``
    (for ``mm_iter`` its label is the iteration count, 1 to 4)."""
    import jax.numpy as jnp

    from ppl_loo.adapters.as_model import as_model
    from ppl_loo.numerics.loo import EngineConfig, EngineData, build_engine, candidate_labels

    model, data, _ = setup
    m = as_model(model)
    theta = jnp.asarray(np.asarray(model.unconstrain(data["posterior"].to_dataset())))
    logp, grad = m.log_density_and_grad(theta)
    ll = np.asarray(m.log_lik(theta))
    cfg = EngineConfig(transforms, (1.0, 0.25), 1.0)
    search, points = build_engine(m, cfg)
    edata = search.prepare(EngineData(theta, logp, logp, grad, m.line_cache(theta)))
    labels = candidate_labels(cfg)
    for i in (1, 3, 11, 15):  # mm_iter picks its fourth iterate for 1, its third for 15
        r = search(edata, i, jnp.asarray(ll[:, i]))
        name, step = labels[int(r.best)]
        pts = np.asarray(points(edata, i, jnp.asarray(ll[:, i]), name, step))
        ll_pts = np.asarray(m.log_lik(jnp.asarray(pts)))[:, i]
        keep = np.isfinite(np.asarray(r.lw))
        np.testing.assert_allclose(ll_pts[keep], np.asarray(r.ll_phi)[keep], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(logsumexp(np.asarray(r.lw)[keep] + ll_pts[keep]), float(r.elpd[int(r.best)]),
                                   rtol=1e-10, atol=1e-10)
