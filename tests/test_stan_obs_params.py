"""Stan programs with a parameter per observation (eight schools' ``theta_tilde`` / ``theta``), without
``loo_extra``: the LOO density ``logp - log_lik[i]`` through the derived program (ppl_loo.stan_bridge.derived).

Known answers:

- the derived program's value and gradient equal the ``log_lik`` generated quantity and the closed-form
  gradient of ``normal_lpdf(y_i | mu + tau theta_tilde_i, sigma_i)``;
- the exact LOO predictive density of eight schools by quadrature: given ``tau``, ``y ~ N(0, D + 25 1 1^T)``
  with ``D = diag(tau^2 + sigma^2)`` (``mu ~ N(0, 5^2)`` and ``theta`` integrated out), so
  ``log p(y_i | y_-i) = log int p(tau) p(y | tau) - log int p(tau) p(y_-i | tau)``, one-dimensional
  integrals over ``log tau`` (scipy.integrate.quad, relative tolerance 1e-11);
- the same model in PyMC on the same draws; the centred and non-centred programs on the same draws;
- brute-force refits of the worst observation;
- a Poisson-lognormal count model (one random effect per observation) by quadrature over (mu, log s)
  and each effect, against PyMC on the same draws and with the doubtful outlier refit.
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
import pymc as pm
import xarray as xr
from data_paths import EIGHT_SCHOOLS
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp

import ppl_loo as pl
from ppl_loo.adapters.stan.posterior import LOG_LIK, StanPosterior, loo_adapter
from ppl_loo.stan_bridge.derived import loglik_program
from ppl_loo.workflow.loo.verdict import convergence

pytestmark = pytest.mark.x64

MODELS = Path(__file__).resolve().parents[1] / "stan_models"
Y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
SIG = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
DATA = {"J": 8, "y": Y, "sigma": SIG}


def _log_evidence(y, sig):
    """``log int p(tau) N(y | 0, diag(tau^2 + sig^2) + 25)`` over tau ~ half-Cauchy(0, 5)."""
    def f(u):
        tau = np.exp(u)
        cov = np.diag(tau**2 + sig**2) + 25.0
        return np.exp(stats.multivariate_normal.logpdf(y, np.zeros(len(y)), cov)
                      + stats.halfcauchy.logpdf(tau, scale=5.0) + u + 30.0)

    value, _ = integrate.quad(f, -30.0, 12.0, limit=500, epsabs=0.0, epsrel=1e-11)
    return np.log(value) - 30.0


def exact_elpd_i() -> np.ndarray:
    full = _log_evidence(Y, SIG)
    return np.array([full - _log_evidence(np.delete(Y, i), np.delete(SIG, i)) for i in range(8)])


EXACT = exact_elpd_i()


def test_quadrature_is_the_exact_answer():
    """The quadrature against a Monte Carlo check of one term: p(y_0 | y_-0) from the closed form of
    the conditional normal, averaged over tau's posterior given y_-0 on a grid (independent code)."""
    tau = np.exp(np.linspace(-12, 8, 40001))
    logw = np.array([stats.multivariate_normal.logpdf(Y[1:], np.zeros(7), np.diag(t**2 + SIG[1:]**2) + 25.0)
                     for t in tau[::100]]) + stats.halfcauchy.logpdf(tau[::100], scale=5.0) + np.log(tau[::100])
    # p(y_0 | y_-0, tau): normal with mean/variance from conditioning the joint normal on y_-0
    dens = []
    for t in tau[::100]:
        cov = np.diag(t**2 + SIG**2) + 25.0
        s12 = cov[0, 1:]
        s22inv = np.linalg.inv(cov[1:, 1:])
        m = s12 @ s22inv @ Y[1:]
        v = cov[0, 0] - s12 @ s22inv @ s12
        dens.append(stats.norm.pdf(Y[0], m, np.sqrt(v)))
    w = np.exp(logw - logw.max())
    assert np.log(np.sum(w * np.array(dens)) / np.sum(w)) == pytest.approx(EXACT[0], abs=1e-6)
    assert EXACT.sum() == pytest.approx(-30.7419, abs=1e-4)


# ----------------------------------------------------------------------------- the derived program
@pytest.fixture(scope="module")
def noncentred():
    return StanPosterior(MODELS / "eight_schools_noncentered.stan", DATA)


def test_derived_program_is_log_lik_with_its_gradient(noncentred):
    """The derived program's density (jacobian=False) is normal_lpdf(y_i | mu + tau tt_i, sigma_i) with the
    closed-form gradient in (mu, log tau, theta_tilde); the program drops the rng statement."""
    code = loglik_program(noncentred.code)
    assert "_rng" not in code and "target += log_lik[ppl_loo_obs_index];" in code
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(0, 5, 50), rng.normal(1, 1, 50), rng.normal(0, 1, (50, 8))])
    mu, tau, tt = x[:, 0], np.exp(x[:, 1]), x[:, 2:]
    for i in (0, 6):
        m, keep = noncentred.deleted_model(i)
        assert keep == LOG_LIK
        lp, g = m.log_density_gradient(x, jacobian=False)
        theta_i = mu + tau * tt[:, i]
        np.testing.assert_allclose(lp, stats.norm.logpdf(Y[i], theta_i, SIG[i]), rtol=1e-12)
        r = (Y[i] - theta_i) / SIG[i] ** 2
        g_ref = np.zeros_like(x)
        g_ref[:, 0], g_ref[:, 1], g_ref[:, 2 + i] = r, r * tau * tt[:, i], r * tau
        np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)
        # the LOO density of the engine: logp - log_lik[i], its JAX gradient and Hessian (central differences
        # of Stan's gradients) equal the full program's minus the closed form
        t0 = jnp.asarray(x[3])
        full_lp, full_g = noncentred.bridge.log_density_gradient(x[3:4])
        assert float(noncentred.loo_logp(t0, i)) == pytest.approx(full_lp[0] - lp[3], rel=1e-12)
        np.testing.assert_allclose(np.asarray(jax.grad(noncentred.loo_logp)(t0, i)), full_g[0] - g_ref[3],
                                   rtol=1e-9, atol=1e-9)
        H = np.asarray(jax.hessian(lambda t: noncentred.loglik_i(t, i))(t0))
        H_ref = np.zeros((10, 10))  # Hessian of normal_lpdf(y | mu + e^u tt, s) in (mu, u, tt_i)
        e, ti, ri = tau[3], tt[3, i], r[3]
        j = 2 + i
        s2 = SIG[i] ** 2
        H_ref[0, 0] = -1 / s2
        H_ref[0, 1] = H_ref[1, 0] = -e * ti / s2
        H_ref[0, j] = H_ref[j, 0] = -e / s2
        H_ref[1, 1] = -(e * ti) ** 2 / s2 + ri * e * ti
        H_ref[1, j] = H_ref[j, 1] = -e * e * ti / s2 + ri * e
        H_ref[j, j] = -e * e / s2
        np.testing.assert_allclose(H, H_ref, rtol=1e-4, atol=1e-5)


def test_derived_program_refuses_what_it_cannot_keep():
    """A "log-likelihood" made of random numbers (the replicates y_hat = normal_rng(...) named as log_lik): the
    derived program cannot keep the rng statements, its value (NaN) disagrees with the generated quantity at
    the test points, and the error says so and to pass loo_extra."""
    with pytest.raises(ValueError, match="disagrees with the 'y_hat' generated quantity.*loo_extra"):
        StanPosterior(MODELS / "eight_schools_noncentered.stan", DATA, log_likelihood="y_hat").deleted_model(0)


def test_refit_falls_back_where_the_derived_program_disagrees():
    """With ``loo_extra`` the search needs no derived program, but a refit samples the derived program of ``logp -
    log_lik[i]``; where that disagrees with the generated quantity (here random replicates named as the
    log-likelihood), the refit says so and falls back to NumPyro on the bridge's LOO density, without failing."""
    def loo_extra(theta, i):  # the dropped school's prior given the others (theta_tilde[i] ~ N(0, 1))
        return jax.scipy.stats.norm.logpdf(theta[2 + i])

    post = StanPosterior(MODELS / "eight_schools_noncentered.stan", DATA, log_likelihood="y_hat", loo_extra=loo_extra)
    assert post.deleted_model(0)[1] is not None and post.loo_method == "loo_extra"
    with pytest.warns(UserWarning, match=r"refit of observation 0: Stan's NUTS cannot sample the derived program .*"
                                         r"disagrees.* NumPyro's NUTS on the bridge's LOO density"):
        assert post._loo_program(0) is None
    assert post.batched_refit_density() is None  # the refits run one after the other (refit_draws)


# ----------------------------------------------------------------------------- exact LOO, PyMC and Stan
@pytest.fixture(scope="module")
def pymc_fit():
    """The non-centred model in PyMC, 4 chains x 1000 draws."""
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        tt = pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
        theta = pm.Deterministic("theta", mu + tau * tt)
        pm.Normal("y", theta, sigma=SIG, observed=Y)
        idata = pm.sample(1000, tune=1000, chains=4, cores=1, random_seed=20261125, target_accept=0.95,
                          progressbar=False, compute_convergence_checks=False,
                          idata_kwargs={"log_likelihood": True})
    return model, idata


def stan_tree(idata, centred=False):
    """The PyMC draws as a Stan user's DataTree (Stan's names and dims, log_lik)."""
    post = idata["posterior"].to_dataset()
    ds = xr.Dataset({"mu": post["mu"], "tau": post["tau"]})
    tt = post["theta_tilde"].values
    th = post["theta"].values
    if centred:
        ds["theta"] = (("chain", "draw", "theta_dim_0"), th)
    else:
        ds["theta_tilde"] = (("chain", "draw", "theta_tilde_dim_0"), tt)
        ds["theta"] = (("chain", "draw", "theta_dim_0"), th)
    ll = idata["log_likelihood"]["y"].values
    return xr.DataTree.from_dict({
        "posterior": ds,
        "log_likelihood": xr.Dataset({"log_lik": (("chain", "draw", "log_lik_dim_0"), ll)}),
        "sample_stats": idata["sample_stats"].to_dataset(),
    })


def _quiet_loo(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pl.loo(*args, progressbar=False, **kwargs)


def _check_exact(res, tol_abs=0.005):
    """Every observation the engine vouches for (not doubtful) within 4 Monte Carlo SEs (+ tol) of the
    quadrature; the doubtful ones (here plain PSIS with k near 0.6, up to 5 SEs off) within 0.05; the total
    within 0.1 (4 SEs of the sum, including the doubtful part, is about 0.05)."""
    e, se, doubtful = res.elpd_i.values, res.mcse_elpd_i.values, res.doubtful.values
    assert np.all(np.isfinite(e)) and np.all(np.isfinite(se))
    err = np.abs(e - EXACT)
    assert np.all(err[~doubtful] <= 4 * se[~doubtful] + tol_abs), (e, EXACT, se, doubtful)
    assert np.all(err[doubtful] <= 0.05) and doubtful.sum() <= 4
    assert abs(e.sum() - EXACT.sum()) <= 0.1


@pytest.fixture(scope="module")
def results(pymc_fit):
    model, idata = pymc_fit
    # the search alone (no mixture, no SMC): Stan and PyMC make the same choices on the same draws; the
    # second opinions sample with each backend's own NUTS, so their numbers differ within MC error
    alone = {"second_opinions": {"mixture": False, "smc": False}}
    res_pm = _quiet_loo(idata, model, **alone)
    res_nc = _quiet_loo(stan_tree(idata), pl.StanModel(MODELS / "eight_schools_noncentered.stan", DATA), **alone)
    res_c = _quiet_loo(stan_tree(idata, centred=True), pl.StanModel(MODELS / "eight_schools_centered.stan", DATA),
                       **alone)
    return res_pm, res_nc, res_c


def test_stan_without_loo_extra_matches_quadrature_and_pymc(results):
    res_pm, res_nc, res_c = results
    for res in results:
        assert res.max_rhat < 1.01
        _check_exact(res)
    assert (res_nc.transform.values != "psis").sum() >= 1  # something was adapted
    # the same draws, the same model: Stan (derived log_lik program, finite-difference Hessians) and PyMC
    # (autodiff) make the same choices and the same numbers
    np.testing.assert_array_equal(res_nc.transform.values, res_pm.transform.values)
    np.testing.assert_array_equal(res_nc.doubtful.values, res_pm.doubtful.values)
    np.testing.assert_allclose(res_nc.pareto_k_psis.values, res_pm.pareto_k_psis.values, rtol=1e-8)
    np.testing.assert_allclose(res_nc.elpd_i.values, res_pm.elpd_i.values, rtol=1e-6, atol=1e-6)
    # centred and non-centred programs are one model: plain PSIS differs only through r_eff (the mean
    # relative ESS over the posterior variables, as arviz_stats computes it: the trees hold different
    # variables); the estimates agree within MC error
    np.testing.assert_allclose(res_c.pareto_k_psis.values, res_nc.pareto_k_psis.values, atol=0.05)
    se = np.hypot(res_nc.mcse_elpd_i.values, res_c.mcse_elpd_i.values)
    assert np.all(np.abs(res_nc.elpd_i.values - res_c.elpd_i.values) <= 4 * se + 1e-6)


def test_refit_of_the_worst_observation_matches_quadrature(pymc_fit, results):
    """Brute force: refit the program without the observation of highest plain k: Stan's NUTS on the derived
    program whose density is logp - log_lik[i] in the full parameter space (the default, and with
    ``batched=False``: a program with a parameter per observation and a ``log_lik`` has no batched refit)."""
    _, idata = pymc_fit
    _, res_nc, _ = results
    worst = int(np.argmax(res_nc.pareto_k_psis.values))
    stan = pl.StanModel(MODELS / "eight_schools_noncentered.stan", DATA)
    for batched in (True, False):
        res = _quiet_loo(stan_tree(idata), stan, refit=[worst], random_seed=3,
                         second_opinions={"mixture": False, "smc": False,
                                          "refit_options": {"chains": 2, "warmup": 500, "draws": 1000,
                                                            "batched": batched}})
        assert res.refit_info[worst]["sampler"] == "Stan NUTS on logp - log_lik[i] (derived program)"
        assert bool(res.refit.values[worst]) and int(res.refit.values.sum()) == 1
        e, se = float(res.elpd_i.values[worst]), float(res.mcse_elpd_i.values[worst])
        assert 0 < se < 0.1
        assert abs(e - EXACT[worst]) <= 4 * se + 0.01, (batched, e, EXACT[worst], se)
    # the other observations keep the search's numbers
    others = np.arange(8) != worst
    np.testing.assert_allclose(res.elpd_i.values[others], res_nc.elpd_i.values[others], rtol=1e-10)


def test_cmdstan_csv_without_loo_extra():
    """What a CmdStan user writes: the CSV files, the program, the data file, nothing else. The shipped draws
    (4 x 100, R-hat 1.03) are doubtful wherever an observation's log-likelihood draws have not mixed, and the
    estimates lie within MC error of the exact answer
    where they have a finite SE; no false alarm about the CSV's 6 significant digits."""
    es = EIGHT_SCHOOLS
    dt = pl.from_cmdstan(sorted(str(p) for p in es.glob("output_*.csv")))
    assert dt.attrs["sig_figs"] == 6
    stan = pl.StanModel(MODELS / "eight_schools_noncentered.stan", es / "eight_schools.data.R")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = pl.loo(dt, stan, progressbar=False,
                     second_opinions={"mixture": False, "smc": False})  # the unconverged draws alone
    assert not any("differs from the model" in str(w.message) for w in caught)
    ll = np.asarray(dt["log_likelihood"]["log_lik"].transpose("chain", "draw", ...).values)
    conv = convergence(ll.reshape(-1, ll.shape[-1]), ll.shape[0], res.max_rhat)
    assert (~conv.ok).sum() >= 1 and res.doubtful.values[~conv.ok].all()
    assert loo_adapter(stan, data=dt).loo_method == LOG_LIK
    assert abs(res.elpd - EXACT.sum()) < 1.0  # -30.50 vs -30.74 from 4 x 100 unconverged draws
    # mixture importance sampling (Stan's NUTS on the derived mixture program, judged by its own diagnostics) as a
    # second opinion settles the observations the unconverged draws cannot vouch for on their own
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mix = pl.loo(dt, stan, progressbar=False, random_seed=4, second_opinions={"mixture": "auto", "smc": "auto"})
    assert mix.doubtful.values.sum() <= 1, mix.reason.values
    assert mix.mixture_info["sampler"] == "Stan NUTS on the mixture program"
    ok = ~mix.doubtful.values
    assert all("mixture" in e for e in mix.evidence.values[ok & ~conv.ok])  # the unmixed draws vouch for nothing alone
    err = np.abs(mix.elpd_i.values - EXACT)
    assert np.all(err[ok] <= 4 * mix.mcse_elpd_i.values[ok] + 0.01), (mix.elpd_i.values, EXACT)


# ----------------------------------------------------------------------------- Poisson-lognormal counts
Y_COUNTS = np.array([0, 1, 3, 2, 0, 5, 1, 12, 2, 1])  # one outlier (12): plain PSIS k about 1.4 there


def exact_counts_elpd_i(n_mu=120, n_u=120, n_z=2001) -> np.ndarray:
    """Exact LOO of the Poisson-lognormal model by quadrature: a (mu, log s) grid (trapezoid, the posterior
    has no mass outside [-4, 5] x [-8, 2.5]) times a z grid for each ``p(y | mu, s) = int Pois(y | e^(mu + s z))
    phi(z) dz``. Doubling the grids changes it by < 1e-5; it agrees with NUTS refits to their MC error."""
    mu = np.linspace(-4, 5, n_mu)
    u = np.linspace(-8, 2.5, n_u)
    z = np.linspace(-9, 9, n_z)
    wz = stats.norm.pdf(z) * (z[1] - z[0])
    M, U = np.meshgrid(mu, u, indexing="ij")
    s = np.exp(U)
    log_prior = stats.norm.logpdf(M, 0, 2) + stats.halfnorm.logpdf(s) + U
    log_l = {}
    for v in np.unique(Y_COUNTS):
        eta = M[..., None] + s[..., None] * z
        log_l[v] = np.log(np.exp(v * eta - np.exp(eta) - gammaln(v + 1)) @ wz)
    total = log_prior + sum(log_l[v] for v in Y_COUNTS)
    full = logsumexp(total)
    return np.array([full - logsumexp(total - log_l[v]) for v in Y_COUNTS])


def test_poisson_lognormal_without_loo_extra():
    """Observation-level random effects (z_i per count): the Stan program without loo_extra equals the same model
    in PyMC on the same draws, matches the quadrature where it vouches for the estimate, and the doubtful outlier
    is replaced by a refit (Stan's NUTS on the derived program of logp - log_lik[i]) that matches it too."""
    exact = exact_counts_elpd_i()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        s = pm.HalfNormal("s", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=10)
        eta = pm.Deterministic("eta", mu + s * z)
        pm.Poisson("y", pm.math.exp(eta), observed=Y_COUNTS)
        idata = pm.sample(1000, tune=1000, chains=4, cores=1, random_seed=7, target_accept=0.95, progressbar=False,
                          compute_convergence_checks=False)
        pm.compute_log_likelihood(idata, progressbar=False)
    post = idata["posterior"].to_dataset()
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"mu": post["mu"], "s": post["s"],
                                 "z": (("chain", "draw", "z_dim_0"), post["z"].values),
                                 "eta": (("chain", "draw", "eta_dim_0"), post["eta"].values)}),
        "log_likelihood": xr.Dataset({"log_lik": (("chain", "draw", "log_lik_dim_0"),
                                                  idata["log_likelihood"]["y"].values)}),
        "sample_stats": idata["sample_stats"].to_dataset(),
    })
    stan = pl.StanModel(MODELS / "poisson_lognormal.stan", {"N": 10, "y": Y_COUNTS})
    res_pm = _quiet_loo(idata, model,
                        second_opinions={"mixture": False, "smc": False})  # the search alone: what the refits are for
    res = _quiet_loo(tree, stan, refit="doubtful", random_seed=5,
                     second_opinions={"mixture": False, "smc": False,
                                      "refit_options": {"chains": 2, "warmup": 500, "draws": 1000}})
    assert loo_adapter(stan, data=tree).loo_method == LOG_LIK
    refit = res.refit.values
    assert refit.tolist() == res_pm.doubtful.values.tolist() and refit[7]  # the outlier, and only doubtful ones
    same = ~refit
    np.testing.assert_allclose(res.elpd_i.values[same], res_pm.elpd_i.values[same], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(res.transform.values[same], res_pm.transform.values[same])
    e, se = res.elpd_i.values, res.mcse_elpd_i.values
    assert np.all(np.abs(e - exact)[same] <= 4 * se[same] + 0.005), (e, exact, se)
    # the refit: plain PSIS was 1 nat off there (k 1.4); the refit is within its Monte Carlo error
    assert abs(res_pm.elpd_i.values[7] - exact[7]) > 0.3
    assert res.refit_info[7]["sampler"] == "Stan NUTS on logp - log_lik[i] (derived program)"
    assert np.all(np.abs(e - exact)[refit] <= 4 * se[refit] + 0.01), (e[refit], exact[refit], se[refit])
