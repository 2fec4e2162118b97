"""``pl.loo(data, model=pl.StanModel(...))``: compiled Stan programs in the adaptive LOO engine
(exact LOO by data deletion, :class:`ppl_loo.adapters.stan.posterior.StanPosterior`).

Uses the programs of ``stan_models/`` and one small inline program (compiled once, 30-60 s each,
then cached in ``$PPL_LOO_STAN_CACHE`` or ``~/.cache/ppl_loo/stan``), the CmdStan eight-schools
output in ``tests/data/cmdstan-eight-schools`` and, for the normal-mean model, a PyStan 3 fit.
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
from data_paths import EIGHT_SCHOOLS as ES_DIR

import ppl_loo as pl
from ppl_loo.adapters.stan.posterior import StanPosterior, loo_adapter
from ppl_loo.workflow.loo.inputs import stack_draws
from ppl_loo.workflow.loo.verdict import convergence

pytestmark = pytest.mark.x64  # calls the models' JAX functions directly: the user's own JAX code (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "stan_models"


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
    dt = pl.from_cmdstan(sorted(str(p) for p in ES_DIR.glob("output_*.csv")))
    # what a CmdStan user writes: the program, its R dump data file, the CSV files
    stan = pl.StanModel(MODELS / "eight_schools_noncentered.stan", ES_DIR / "eight_schools.data.R",
                        loo_extra=es_extra)
    model = loo_adapter(stan, data=dt)
    theta = model.unconstrain(dt)
    return stan.data, dt, model, theta


def test_eight_schools_setup(eight_schools):
    data, dt, model, theta = eight_schools
    assert model.n_obs_key == "J"  # detected: the only integer entry that is an array's length
    assert model.n_obs == 8 and model.dim == 10 and set(model.obs_keys) == {"y", "sigma"}
    assert model.obs_dims == ("log_lik_dim_0",) and not model.factorizes
    assert theta.shape == (400, 10)
    back = model.constrain(theta[:5])
    post = dt.posterior.to_dataset()
    np.testing.assert_allclose(back["mu"], post["mu"].values.reshape(-1)[:5], rtol=1e-5)
    np.testing.assert_allclose(back["theta"], post["theta"].values.reshape(-1, 8)[:5], rtol=1e-5, atol=1e-5)
    assert model.loo_method is None or model.loo_method == "loo_extra"
    model.deleted_model(0)
    assert model.loo_method == "loo_extra"  # the override
    # without loo_extra a dimension-changing deletion uses logp - log_lik[i] (the derived program) ...
    bare = StanPosterior(MODELS / "eight_schools_noncentered.stan", data, n_obs="J")
    assert bare.deleted_model(0)[1] == "log_lik program" and bare.loo_method == "log_lik program"
    # ... and without a log_lik generated quantity it is refused with an explanation naming both fixes
    no_ll = StanPosterior(MODELS / "eight_schools_noncentered.stan", data, n_obs="J", log_likelihood=None)
    with pytest.raises(ValueError, match="no log_lik generated quantity.*loo_extra"):
        no_ll.deleted_model(0)
    with pytest.raises(Exception, match="no log_lik generated quantity"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.loo(dt, pl.StanModel(MODELS / "eight_schools_noncentered.stan", data, log_likelihood=None),
               var_name="log_lik", progressbar=False)


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
    theta = theta * (1.0 + 1e-12)  # draws no earlier test evaluated (the full model's last results are kept)
    calls = []
    orig = model.bridge.log_density
    model.bridge.log_density = lambda x, **kw: (calls.append(np.shape(x)), orig(x, **kw))[1]
    try:
        out = np.asarray(jax.jit(jax.vmap(model.logp))(jnp.asarray(theta)))
        assert calls == [(400, 10)]
        again = np.asarray(jax.jit(jax.vmap(model.logp))(jnp.asarray(theta)))  # the same draws: kept, no call
        assert calls == [(400, 10)] and np.array_equal(again, out)
    finally:
        del model.bridge.log_density
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
    # the pl.StanModel itself; the search alone (the second opinions on these draws: test_stan_obs_params.py's
    # test_cmdstan_csv_without_loo_extra)
    res = pl.loo(dt, model.bridge, progressbar=False, second_opinions={"mixture": False, "smc": False})
    assert res.elpd_i.dims == ("log_lik_dim_0",) and res.elpd_i.shape == (8,)
    np.testing.assert_array_equal(res.elpd_i.coords["log_lik_dim_0"].values, np.arange(8))
    # every observation is reported, adapted where plain PSIS needed it
    assert set(res.transform.values) <= {"psis", "failed"} | set(pl.DEFAULT_TRANSFORMS)
    assert np.sum(res.transform.values != "psis") >= 1
    assert np.all(np.isfinite(res.elpd_i.values)) and np.all(np.isfinite(res.pareto_k.values))
    assert np.all(np.isfinite(res.pareto_k_psis.values))
    # the reported k is below the threshold unless the observation is doubtful, which keeps plain PSIS
    # unless a confirmed candidate gave its estimate (the candidate reported is the lowest confirmed
    # estimate, not the lowest k: docs/method.md)
    doubtful = res.doubtful.values
    assert np.all((res.pareto_k.values <= res.good_k) | doubtful)
    kept = doubtful & np.isin(res.transform.values, ["psis", "failed"])
    np.testing.assert_array_equal(res.pareto_k.values[kept], res.pareto_k_psis.values[kept])
    # the draws' convergence: R-hat as arviz_stats computes it; the shipped CSV files (4 chains of 100
    # draws) have R-hat 1.030 for theta_tilde[5] (1-based, as Stan names it), above 1.01; convergence is judged
    # per observation, so every observation whose log-likelihood draws have not mixed (R-hat above 1.01 or bulk
    # ESS below 100) is doubtful
    rhat = max(float(np.nanmax(v.values)) for v in arviz_stats.rhat(dt.posterior.to_dataset()).data_vars.values())
    assert res.max_rhat == pytest.approx(rhat, rel=1e-12) and res.max_rhat_var == "theta_tilde[5]"
    conv = convergence(np.asarray(model.log_lik(jnp.asarray(theta))), 4, rhat)
    assert rhat > 1.01 and doubtful[~conv.ok].all()
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
    stan = pytest.importorskip("stan")
    code = (MODELS / "normal_known_sigma.stan").read_text()
    fit = stan.build(code, data={**NORMAL_DATA, "y": Y_NORMAL.tolist()}, random_seed=1).sample(
        num_chains=4, num_samples=1000)
    return pl.from_cmdstan(fit), pl.StanModel(MODELS / "normal_known_sigma.stan", NORMAL_DATA)


def test_normal_outlier_loo(normal_fit):
    """Normal mean, known sigma, one outlier, sampled with PyStan: adaptive elpd_i within Monte
    Carlo error of the closed-form LOO predictive density; the outlier needed adaptation."""
    dt, stan = normal_fit
    model = loo_adapter(stan, data=dt)
    assert model.dim == 1 and model.n_obs == 12 and model.obs_keys == ("y",) and model.n_obs_key == "N"
    theta = model.unconstrain(dt)
    assert theta.shape == (4000, 1)
    # same dimension after deletion: exact LOO density without any extra term
    assert model.deleted_model(OUTLIER)[1] is None
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    np.testing.assert_allclose(ll, stack_draws(dt.log_likelihood["log_lik"]), rtol=1e-12, atol=1e-12)
    lli = np.asarray(jax.vmap(lambda t: model.loglik_i(t, OUTLIER))(jnp.asarray(theta)))
    np.testing.assert_allclose(lli, ll[:, OUTLIER], rtol=1e-9, atol=1e-9)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the defaults refit the outlier (its refit costs less than SMC and the mixture run): exact
        refit = pl.loo(dt, stan, progressbar=False)
        # the search through Stan's gradients, with no independent evidence asked for
        res = pl.loo(dt, stan, progressbar=False, second_opinions={"smc": False})
    exact = closed_form_loo(NORMAL_DATA)
    assert refit.evidence.values[OUTLIER] == "refit" and refit.mixture_info is None
    assert abs(refit.elpd_i.values[OUTLIER] - exact[OUTLIER]) <= 4 * refit.mcse_elpd_i.values[OUTLIER] + 0.02
    err = np.abs(res.elpd_i.values - exact)
    assert np.all(err <= 4 * res.mcse_elpd_i.values + 0.02), (err, res.mcse_elpd_i.values)
    assert res.pareto_k_psis.values[OUTLIER] > res.good_k
    assert res.pareto_k.values[OUTLIER] <= res.good_k
    assert res.transform.values[OUTLIER] != "psis"
    # adapt="auto" on 12 observations examines those with plain k above 0.3 or a high influence, not every one
    # (the others keep plain PSIS, within their Monte Carlo error of the closed form above)
    k, infl = res.pareto_k_psis.values, res.influence.values
    expected = (k > 0.3) | (infl > np.log(theta.shape[0] / 100))
    np.testing.assert_array_equal(res.searched.values, expected)
    assert 0 < expected.sum() < model.n_obs
    assert np.all(res.transform.values[~expected] == "psis")


# ----------------------------------------------------------------------------- the user-facing path
def test_no_python_loop_over_draws(eight_schools, monkeypatch):
    """Every call into the bridge during ``pl.loo`` carries a whole batch: at least S draws."""
    _, dt, _, theta = eight_schools
    S = theta.shape[0]
    sizes = []
    for name in ("log_density", "log_density_gradient", "param_constrain", "param_unconstrain"):
        orig = getattr(pl.StanModel, name)

        def wrapped(self, x, *args, _orig=orig, **kw):
            sizes.append(np.asarray(x).reshape(-1, np.shape(x)[-1]).shape[0])
            return _orig(self, x, *args, **kw)

        monkeypatch.setattr(pl.StanModel, name, wrapped)
    stan = pl.StanModel(MODELS / "eight_schools_noncentered.stan", ES_DIR / "eight_schools.data.R",
                        loo_extra=es_extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(dt, stan, progressbar=False, search={"transforms": ("pmm1", "kl", "mm1")})
    assert np.all(np.isfinite(res.elpd_i.values))
    assert len(sizes) > 0 and min(sizes) >= S, sorted(sizes)[:10]


def test_a_stan_program_refits_what_its_search_would_cost_more_for(tmp_path):
    """A moderate outlier (plain k-hat about 0.4, examined on a small data set): a refit by Stan's own NUTS costs
    fewer gradient evaluations than the search's callbacks on one observation, so the defaults refit it without
    searching anything; the refit is within 4 of its SEs of the closed form, as plain PSIS is for the others."""
    import ppl_loo.workflow.loo.loo as loo_module
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    y = Y_NORMAL.copy()
    y[OUTLIER] = 4.5
    data = {**NORMAL_DATA, "y": y}
    sampler = pl.StanModel(MODELS / "normal_known_sigma.stan", data, sampler=True)
    paths, _ = sample_cmdstan_csv(sampler, tmp_path, chains=4, random_seed=5, num_warmup=1000, num_samples=1000)
    dt = pl.from_cmdstan([str(p) for p in paths])
    stan = pl.StanModel(MODELS / "normal_known_sigma.stan", data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(dt, stan, progressbar=False)
        saved, loo_module.refits_before_search = loo_module.refits_before_search, lambda *a: False
        try:  # the search's cost not weighed against the refits: the outlier is searched
            searched = pl.loo(dt, stan, progressbar=False)
        finally:
            loo_module.refits_before_search = saved
    exact = closed_form_loo(data)
    assert 0.3 < res.pareto_k_psis.values[OUTLIER] <= 0.5
    assert res.evidence.values[OUTLIER] == "refit" and not res.searched.values.any()
    assert res.refit_info[OUTLIER]["sampler"] == "Stan NUTS on the program without the observation"
    assert res.smc_info["refits_instead"] == [OUTLIER]
    z = (res.elpd_i.values - exact) / res.mcse_elpd_i.values
    assert np.all(np.abs(z) <= 4), z
    assert searched.searched.values[OUTLIER] and searched.evidence.values[OUTLIER] != "refit"


def test_result_dims_follow_log_likelihood_group(eight_schools):
    """The DataTree's log-likelihood variable names the result and its dims, whatever its name."""
    _, _, model, _ = eight_schools
    dt = pl.from_cmdstan(sorted(str(p) for p in ES_DIR.glob("output_*.csv")), log_likelihood={"y": "log_lik"})
    stan = pl.StanModel(MODELS / "eight_schools_noncentered.stan", model.data, loo_extra=es_extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(dt, stan, progressbar=False, search={"transforms": ("mm1",)})
        ref = pl.loo(dt, progressbar=False, search={"transforms": ("mm1",)})  # plain PSIS from the group
    assert res.elpd_i.dims == ("y_dim_0",) and res.pareto_k.dims == ("y_dim_0",)
    np.testing.assert_array_equal(res.elpd_i.coords["y_dim_0"].values, np.arange(8))
    np.testing.assert_allclose(res.pareto_k_psis.values, ref.pareto_k.values, atol=1e-3)  # CSV: 6 digits
    data = pl.add_loo(dt, res)
    assert data["loo"]["elpd_i"].dims == ("y_dim_0",)


def test_draws_from_a_different_model_raise(eight_schools, normal_fit):
    _, dt_es, model, _ = eight_schools
    dt_normal, stan_normal = normal_fit
    # eight-schools draws with the normal-mean program: both have a `mu`, but the CSV's log_lik
    # has 8 observations and the program 12
    with pytest.raises(ValueError, match=r"has 8 observations x 400 draws but the model gives 12 x 400"):
        pl.loo(dt_es, stan_normal, progressbar=False)
    # normal-mean draws with the eight-schools program
    stan_es = pl.StanModel(MODELS / "eight_schools_noncentered.stan", model.data, loo_extra=es_extra)
    with pytest.raises(ValueError, match=r"lacks the parameter\(s\) \['tau', 'theta_tilde'\]"):
        pl.loo(dt_normal, stan_es, progressbar=False)
    # the right program with other data: one school fewer than the draws
    fewer = {"J": 7, "y": model.data["y"][:7], "sigma": model.data["sigma"][:7]}
    with pytest.raises(ValueError, match=r"theta_tilde.*shape \(8,\).*declares \(7,\)"):
        pl.loo(dt_es, pl.StanModel(MODELS / "eight_schools_noncentered.stan", fewer, loo_extra=es_extra),
               progressbar=False)


def test_draw_outside_the_support_raises(eight_schools):
    _, dt, model, _ = eight_schools
    bad = dt.copy()
    post = bad["posterior"].to_dataset()
    tau = post["tau"].values.copy()
    tau[2, 5] = -1.0
    post["tau"] = (post["tau"].dims, tau)
    bad["posterior"] = xr.DataTree(post)
    with pytest.raises(pl.stan_bridge.StanEvaluationError,
                       match=r"(?s)chain index 2, draw index 5.*outside the support.*"
                             r"Lower bounded variable is -1.*real<lower=0> tau;"):
        pl.loo(bad, model.bridge, progressbar=False)


CHECKED_CODE = """
data {
  int<lower=1> N;
  vector[N] y;
  int<lower=0> min_n;
}
parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  if (N < min_n) fatal_error("need at least min_n = ", min_n, " observations, got N = ", N);
  mu ~ normal(0, 10);
  sigma ~ lognormal(0, 1);
  y ~ normal(mu, sigma);
}
generated quantities {
  vector[N] log_lik;
  for (i in 1:N) log_lik[i] = normal_lpdf(y[i] | mu, sigma);
}
"""


def test_n_obs_detection_and_errors_inside_stan():
    """Ambiguous observation size: a clear error asking for n_obs. An exception inside Stan during
    the adaptive search (not a domain error, which is a rejection) stops pl.loo with Stan's message."""
    y = np.array([0.3, -1.2, 0.8, 2.9, 0.1])
    data = {"N": 5, "y": y, "min_n": 5}
    stan = pl.StanModel(CHECKED_CODE, data)
    with pytest.raises(pl.stan_bridge.StanDataError, match=r"ambiguous.*\['N', 'min_n'\].*n_obs="):
        loo_adapter(stan)
    with pytest.raises(pl.stan_bridge.StanDataError, match="n_obs='M' is not a data entry"):
        pl.StanModel(CHECKED_CODE, data, n_obs="M")
    stan = pl.StanModel(CHECKED_CODE, data, n_obs="N")
    assert loo_adapter(stan).obs_keys == ("y",)
    # draws near the posterior (any draws do: the test is about the error path)
    rng = np.random.default_rng(0)
    mu = rng.normal(y.mean(), 0.4, size=(2, 100))
    sigma = np.exp(rng.normal(np.log(y.std()), 0.2, size=(2, 100)))
    dt = xr.DataTree.from_dict({"posterior": xr.Dataset(
        {"mu": (("chain", "draw"), mu), "sigma": (("chain", "draw"), sigma)},
        coords={"chain": np.arange(2), "draw": np.arange(100)})})
    # deleting an observation leaves N = 4 < min_n: Stan's fatal_error inside the engine's callback
    with pytest.raises((pl.stan_bridge.StanDataError, pl.stan_bridge.StanEvaluationError),
                       match="need at least min_n = 5 observations, got N = 4"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.loo(dt, stan, progressbar=False, search={"transforms": ("mm1",), "influence_threshold": 0.0})
    # with min_n = 4 the same run succeeds and every observation is reported
    ok = pl.StanModel(CHECKED_CODE, {**data, "min_n": 4}, n_obs="N")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(dt, ok, progressbar=False, search={"transforms": ("mm1",), "influence_threshold": 0.0})
    assert res.elpd_i.shape == (5,) and np.all(np.isfinite(res.elpd_i.values))
    assert np.all(np.isfinite(res.candidates["k"]).any(axis=1))  # all searched (influence_threshold=0)
