"""``StanPosterior``: compiled Stan programs in the adaptive LOO engine (exact LOO by data deletion).

Uses the two programs of ``stan_models/`` (compiled once, about a minute each, then cached in
``$PPL_LOO_STAN_CACHE`` or ``~/.cache/ppl_loo/stan``), the CmdStan eight-schools output in
``shared/data/cmdstan-eight-schools`` and, for the normal-mean model, a PyStan 3 fit.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

import jax
import jax.numpy as jnp
import xarray as xr

import ppl_loo as pl
from ppl_loo.stan import read_rdump
from ppl_loo.stan.posterior import StanPosterior
from ppl_loo.workflow.inputs import stack_draws

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "stan_models"
ES_DIR = next((p for p in (ROOT / "shared/data/cmdstan-eight-schools",
                           ROOT.parent / "shared/data/cmdstan-eight-schools",
                           Path("/work/shared/data/cmdstan-eight-schools")) if p.is_dir()), None)


def es_extra(theta, i):
    """Eight schools: deleting school i drops theta_tilde[i] (coordinate 2 + i), whose LOO
    conditional given the other parameters is its N(0, 1) prior."""
    return jax.scipy.stats.norm.logpdf(theta[2 + i])


def fd_hessian(grad_fn, theta, h=1e-5):
    """Central finite-difference Hessian of a NumPy gradient function (one batched call)."""
    d = theta.shape[0]
    step = h * (1.0 + np.max(np.abs(theta)))
    pts = np.concatenate([theta + step * np.eye(d), theta - step * np.eye(d)])
    g = grad_fn(pts)
    H = (g[:d] - g[d:]) / (2 * step)
    return 0.5 * (H + H.T)


# ----------------------------------------------------------------------------- eight schools
@pytest.fixture(scope="module")
def eight_schools():
    if ES_DIR is None:
        pytest.skip("shared/data/cmdstan-eight-schools not found")
    data = read_rdump(ES_DIR / "eight_schools.data.R")
    dt = pl.from_cmdstan(sorted(str(p) for p in ES_DIR.glob("output_*.csv")))
    model = StanPosterior(MODELS / "eight_schools_noncentered.stan", data, n_obs="J", loo_extra=es_extra)
    theta = model.unconstrain(dt)
    return data, dt, model, theta


def test_eight_schools_setup(eight_schools):
    data, dt, model, theta = eight_schools
    assert model.n_obs == 8 and model.dim == 10 and set(model.obs_keys) == {"y", "sigma"}
    assert model.obs_dims == ("log_lik_dim_0",) and not model.factorizes
    assert theta.shape == (400, 10)
    back = model.constrain(theta[:5])
    post = dt.posterior.to_dataset()
    np.testing.assert_allclose(back["mu"], post["mu"].values.reshape(-1)[:5], rtol=1e-5)
    np.testing.assert_allclose(back["theta"], post["theta"].values.reshape(-1, 8)[:5], rtol=1e-5, atol=1e-5)
    # without loo_extra a dimension-changing deletion is refused with an explanation
    bare = StanPosterior(MODELS / "eight_schools_noncentered.stan", data, n_obs="J")
    with pytest.raises(ValueError, match="loo_extra"):
        bare.deleted_model(0)


def test_eight_schools_loglik_and_deletion_identity(eight_schools):
    _, dt, model, theta = eight_schools
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    ref = stack_draws(dt.log_likelihood["log_lik"])
    np.testing.assert_allclose(ll, ref, rtol=1e-5)  # the CSV keeps 6 significant digits
    f = jax.jit(jax.vmap(jax.vmap(model.loglik_i, (None, 0)), (0, None)))
    lli = np.asarray(f(jnp.asarray(theta), jnp.arange(8)))
    np.testing.assert_allclose(lli, ll, rtol=1e-8, atol=1e-8)


def test_eight_schools_one_host_call_per_batch(eight_schools):
    _, _, model, theta = eight_schools
    calls = []
    orig = model.bridge.log_density
    model.bridge.log_density = lambda x, **kw: (calls.append(np.shape(x)), orig(x, **kw))[1]
    try:
        out = np.asarray(jax.jit(jax.vmap(model.logp))(jnp.asarray(theta)))
    finally:
        del model.bridge.log_density
    assert calls == [(400, 10)]
    np.testing.assert_allclose(out, model.bridge.log_density(theta), rtol=1e-14)
    # observation index batched by lax.map: grouped by i on the host
    idx = jnp.array([3, 1, 3, 0])
    g = jax.jit(lambda th, ii: jax.lax.map(lambda i: jax.vmap(lambda t: model.loo_logp(t, i))(th), ii,
                                           batch_size=4))
    res = np.asarray(g(jnp.asarray(theta[:20]), idx))
    for row, i in zip(res, np.asarray(idx)):
        m_i, keep = model.deleted_model(int(i))
        prior = -0.5 * np.log(2 * np.pi) - 0.5 * theta[:20, 2 + i] ** 2
        expect = m_i.log_density(theta[:20][:, keep]) + prior
        np.testing.assert_allclose(row, expect, rtol=1e-12)


def test_eight_schools_derivatives(eight_schools):
    _, _, model, theta = eight_schools
    t0 = theta[7]
    # gradient
    g = np.asarray(jax.grad(model.logp)(jnp.asarray(t0)))
    np.testing.assert_allclose(g, model.bridge.log_density_gradient(t0)[1], rtol=1e-12, atol=1e-12)
    # Hessian of the log density: jacfwd(grad) and jax.hessian against finite differences of the bridge
    H_ref = fd_hessian(lambda x: model.bridge.log_density_gradient(x)[1], t0)
    H1 = np.asarray(jax.jacfwd(jax.grad(model.logp))(jnp.asarray(t0)))
    H2 = np.asarray(jax.hessian(model.logp)(jnp.asarray(t0)))
    np.testing.assert_allclose(H1, H_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(H2, H_ref, rtol=1e-4, atol=1e-4)
    # Hessian of loglik_i by deletion (i = 2) against the bridge: grad full - grad deleted - grad prior
    i = 2
    m_i, keep = model.deleted_model(i)

    def grad_ll(x):
        gg = model.bridge.log_density_gradient(x)[1]
        gd = np.zeros_like(x)
        gd[:, keep] = m_i.log_density_gradient(np.ascontiguousarray(x[:, keep]))[1]
        gd[:, 2 + i] += -x[:, 2 + i]
        return gg - gd

    np.testing.assert_allclose(np.asarray(jax.grad(lambda t: model.loglik_i(t, i))(jnp.asarray(t0))),
                               grad_ll(t0[None])[0], rtol=1e-10, atol=1e-10)
    H_ll = np.asarray(jax.hessian(lambda t: model.loglik_i(t, i))(jnp.asarray(t0)))
    np.testing.assert_allclose(H_ll, fd_hessian(grad_ll, t0), rtol=1e-4, atol=1e-4)
    # loglik_i of a Gaussian observation: only mu, tau, theta_tilde[i] enter
    assert np.all(np.abs(np.delete(np.delete(H_ll, [0, 1, 2 + i], 0), [0, 1, 2 + i], 1)) < 1e-6)
    # the same under vmap with a traced observation index
    Hv = jax.jit(jax.vmap(jax.hessian(model.loglik_i), (0, None)))(jnp.asarray(theta[:3]), jnp.asarray(i))
    np.testing.assert_allclose(np.asarray(Hv[1]), fd_hessian(grad_ll, theta[1]), rtol=1e-4, atol=1e-4)


def test_eight_schools_loo(eight_schools):
    import arviz_stats

    _, dt, model, theta = eight_schools
    res = pl.loo(dt, model, progressbar=False)
    assert res.elpd_i.dims == ("log_lik_dim_0",) and res.elpd_i.shape == (8,)
    assert np.all(np.isfinite(res.elpd_i.values)) and np.all(np.isfinite(res.pareto_k.values))
    assert np.all(np.isfinite(res.pareto_k_psis.values))
    assert np.all(res.pareto_k.values <= res.pareto_k_psis.values + 1e-12)
    # plain PSIS part: arviz_stats on the same draws with the model's (full precision) log_lik ...
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    ds = dt.log_likelihood.to_dataset().copy()
    ds["log_lik"] = (ds["log_lik"].dims, ll.reshape(ds["log_lik"].shape))
    dt2 = dt.copy()
    dt2["log_likelihood"] = xr.DataTree(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = arviz_stats.loo(dt2, pointwise=True)
        ref_csv = arviz_stats.loo(dt, pointwise=True)
    np.testing.assert_allclose(res.pareto_k_psis.values, ref.pareto_k.values, rtol=1e-8, atol=1e-8)
    psis = res.transform.values == "psis"
    np.testing.assert_allclose(res.elpd_i.values[psis], ref.elpd_i.values[psis], rtol=1e-8, atol=1e-8)
    # ... and on the CSV's log_lik, which is rounded to 6 significant digits
    np.testing.assert_allclose(res.pareto_k_psis.values, ref_csv.pareto_k.values, atol=1e-3)


# ----------------------------------------------------------------------------- normal mean, one outlier
Y_NORMAL = np.array([0.31, -0.52, 1.13, 0.24, -0.97, 0.66, -0.18, 0.42, -0.81, 0.09, 10.0, 0.57])
OUTLIER = 10
NORMAL_DATA = {"N": 12, "y": Y_NORMAL, "sigma": 1.0, "mu0": 0.0, "tau0": 10.0}


def closed_form_loo(data):
    y, s, m0, t0 = data["y"], data["sigma"], data["mu0"], data["tau0"]
    out = []
    for i in range(len(y)):
        yi = np.delete(y, i)
        prec = 1 / t0**2 + len(yi) / s**2
        m = (m0 / t0**2 + yi.sum() / s**2) / prec
        var = s**2 + 1 / prec
        out.append(-0.5 * np.log(2 * np.pi * var) - 0.5 * (y[i] - m) ** 2 / var)
    return np.array(out)


@pytest.fixture(scope="module")
def normal_fit():
    code = (MODELS / "normal_known_sigma.stan").read_text()
    try:
        import stan

        fit = stan.build(code, data={**NORMAL_DATA, "y": Y_NORMAL.tolist()}, random_seed=1).sample(
            num_chains=4, num_samples=1000)
        dt = pl.from_cmdstan(fit)
    except Exception as err:  # noqa: BLE001  # pragma: no cover - PyStan unavailable: conjugate draws
        warnings.warn(f"PyStan sampling failed ({err!r}); drawing from the conjugate posterior")
        y, s, m0, t0 = NORMAL_DATA["y"], 1.0, 0.0, 10.0
        prec = 1 / t0**2 + len(y) / s**2
        mean = (m0 / t0**2 + y.sum() / s**2) / prec
        mu = np.random.default_rng(1).normal(mean, prec**-0.5, size=(4, 1000))
        ll = -0.5 * np.log(2 * np.pi) - 0.5 * (y[None, None, :] - mu[..., None]) ** 2
        dt = xr.DataTree.from_dict({
            "posterior": xr.Dataset({"mu": (("chain", "draw"), mu)},
                                    coords={"chain": np.arange(4), "draw": np.arange(1000)}),
            "log_likelihood": xr.Dataset({"log_lik": (("chain", "draw", "log_lik_dim_0"), ll)},
                                         coords={"chain": np.arange(4), "draw": np.arange(1000)}),
        })
    model = StanPosterior(MODELS / "normal_known_sigma.stan", NORMAL_DATA)
    return dt, model


def test_normal_outlier_loo(normal_fit):
    dt, model = normal_fit
    assert model.dim == 1 and model.n_obs == 12 and model.obs_keys == ("y",)
    theta = model.unconstrain(dt)
    assert theta.shape == (4000, 1)
    # same dimension after deletion: exact LOO density without any extra term
    assert model.deleted_model(OUTLIER)[1] is None
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    np.testing.assert_allclose(ll, stack_draws(dt.log_likelihood["log_lik"]), rtol=1e-6, atol=1e-6)
    lli = np.asarray(jax.vmap(lambda t: model.loglik_i(t, OUTLIER))(jnp.asarray(theta)))
    np.testing.assert_allclose(lli, ll[:, OUTLIER], rtol=1e-9, atol=1e-9)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(dt, model, progressbar=False)
    exact = closed_form_loo(NORMAL_DATA)
    err = np.abs(res.elpd_i.values - exact)
    assert np.all(err <= 4 * res.mcse_elpd_i.values + 0.02), (err, res.mcse_elpd_i.values)
    assert res.pareto_k_psis.values[OUTLIER] > res.good_k
    assert res.pareto_k.values[OUTLIER] <= res.good_k
    assert res.transform.values[OUTLIER] != "psis"
