"""The ovarian models of ``stan_models/`` against the JAX closed-form models (known answers).

``logistic_horseshoe.stan`` and ``relu_net.stan`` are compiled with the bridge (about a minute
each the first time, then cached in ``$PPL_LOO_STAN_CACHE`` or ``~/.cache/ppl_loo/stan``) on
small synthetic data, and compared on the same draws with
``ppl_loo.models.LogisticRegression(prior="horseshoe")`` and ``ppl_loo.models.ReluNet``:

* horseshoe: the Stan program is non-centered in ``z`` and the JAX model centered in ``beta``,
  so ``log p_stan(u) = log p_jax(T(u)) + log|det dT/du| - (D + 1) log 2`` exactly, where
  ``T`` maps ``z`` to ``beta = z * lam_tilde * tau`` (Jacobian ``sum_j log(lam_tilde_j tau)``)
  and ``(D + 1) log 2`` is the half-t normalization of ``lam`` and ``tau`` that Stan's
  ``student_t`` on a ``<lower=0>`` parameter leaves out;
* ReLU net: the same parameterization, so the log densities agree exactly (all constants are
  kept on both sides), and so does ``pl.loo`` on the same draws.
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

import ppl_loo as pl
from ppl_loo.adapters.stan.posterior import loo_adapter
from ppl_loo.stan_bridge import horseshoe_data

pytestmark = pytest.mark.x64  # calls the models' JAX functions directly: the user's own JAX code (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
HORSESHOE = ROOT / "stan_models" / "logistic_horseshoe.stan"
RELU = ROOT / "stan_models" / "relu_net.stan"

RNG = np.random.default_rng(20240611)
N_HS, D_HS, P0 = 15, 8, 3
X_HS = RNG.normal(size=(N_HS, D_HS))
Y_HS = (X_HS[:, 0] + 0.5 * RNG.normal(size=N_HS) > 0).astype(np.int64)
N_RELU, D_RELU, H = 24, 3, 3
X_RELU = RNG.normal(size=(N_RELU, D_RELU))
Y_RELU = ((X_RELU[:, 0] ** 2 - 0.5 + 0.3 * RNG.normal(size=N_RELU)) > 0).astype(np.int64)


@pytest.fixture(scope="module")
def horseshoe():
    data = horseshoe_data(X_HS, Y_HS, p0=P0)
    stan = pl.StanModel(HORSESHOE, data)
    jm = pl.models.LogisticRegression(X_HS, Y_HS, prior="horseshoe", p0=P0)
    return stan, jm


@pytest.fixture(scope="module")
def relu():
    data = {"N": N_RELU, "D": D_RELU, "H": H, "X": X_RELU, "y": Y_RELU, "prior_scale": 1.0}
    # sampler=True: the same cached library as tests/test_cmdstan_csv.py, which samples with it
    return pl.StanModel(RELU, data, sampler=True), pl.models.ReluNet(X_RELU, Y_RELU, hidden=H)


def test_horseshoe_data_defaults():
    # Paananen et al.'s values on the ovarian shape: p = 1536, n = 54, p0 = 20 gives about 0.0018
    big = horseshoe_data(np.zeros((54, 1536)), np.zeros(54, int))
    assert big["N"] == 54 and big["D"] == 1536 and big["X"].shape == (54, 1536)
    assert (big["scale_icept"], big["slab_scale"], big["slab_df"], big["nu_global"], big["nu_local"]) == (
        5.0, 2.5, 1.0, 1.0, 1.0)
    assert big["scale_global"] == pytest.approx(20 / (1516 * np.sqrt(54)), rel=1e-14)
    assert round(big["scale_global"], 4) == 0.0018
    d = horseshoe_data(X_HS, Y_HS, p0=P0)
    assert d["scale_global"] == pytest.approx(P0 / ((D_HS - P0) * np.sqrt(N_HS)), rel=1e-14)
    # the same as the JAX model's
    assert d["scale_global"] == pl.models.LogisticRegression(X_HS, Y_HS, prior="horseshoe", p0=P0).scale_global
    with pytest.raises(ValueError, match="p0"):
        horseshoe_data(X_HS, Y_HS)  # p0 = 20 >= D = 8
    with pytest.raises(ValueError, match="y"):
        horseshoe_data(X_HS, Y_HS[:-1], p0=P0)


def _hs_map(stan, u):
    """Stan's constrained values at unconstrained ``u`` and the JAX model's theta of the same point."""
    c = stan.split_constrained(stan.param_constrain(u, include_tp=True, include_gq=True),
                               include_tp=True, include_gq=True)
    return c


def test_horseshoe_density_and_log_lik_match_jax(horseshoe):
    stan, jm = horseshoe
    assert stan.dim == 1 + 2 * D_HS + 2 == jm.dim
    u = RNG.normal(scale=0.8, size=(7, stan.dim))
    c = _hs_map(stan, u)
    theta = jm.unconstrain({k: c[k] for k in ("beta0", "beta", "lam", "tau", "caux")})
    np.testing.assert_allclose(c["beta"], c["z"] * c["lam_tilde"] * c["tau"][:, None], rtol=1e-12)
    log_jac = np.sum(np.log(c["lam_tilde"] * c["tau"][:, None]), axis=1)
    lp_stan = stan.log_density(u)
    lp_jax = np.asarray(jm.log_density(jnp.asarray(theta)))
    np.testing.assert_allclose(lp_stan - (lp_jax + log_jac), -(D_HS + 1) * np.log(2.0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(c["log_lik"], np.asarray(jm.log_lik(jnp.asarray(theta))), rtol=0, atol=1e-12)
    # y_rep is a Bernoulli draw
    assert set(np.unique(c["y_rep"])) <= {0.0, 1.0} and c["y_rep"].shape == (7, N_HS)


def test_horseshoe_gradient_matches_jax(horseshoe):
    """Stan's reverse-mode gradient in (beta0, z, log lam, log tau, log caux) equals JAX autodiff
    of the centered JAX density composed with the non-centering map, plus its log-Jacobian."""
    stan, jm = horseshoe
    D = D_HS

    def stan_space_logp(u):
        beta0, z, ulam, utau, ucaux = u[0], u[1:1 + D], u[1 + D:1 + 2 * D], u[1 + 2 * D], u[2 + 2 * D]
        lam, tau, caux = jnp.exp(ulam), jnp.exp(utau), jnp.exp(ucaux)
        c2 = 2.5**2 * caux
        lam_t = jnp.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
        beta = z * lam_t * tau
        theta = jnp.concatenate([beta0[None], beta, ulam, utau[None], ucaux[None]])  # jm's layout
        return jm.logp(theta) + jnp.sum(jnp.log(lam_t * tau)) - (D + 1) * jnp.log(2.0)

    u = RNG.normal(scale=0.8, size=(5, stan.dim))
    lp, g = stan.log_density_gradient(u)
    vg = jax.vmap(jax.value_and_grad(stan_space_logp))(jnp.asarray(u))
    np.testing.assert_allclose(lp, np.asarray(vg[0]), rtol=1e-10)
    np.testing.assert_allclose(g, np.asarray(vg[1]), rtol=1e-8, atol=1e-10)


def test_horseshoe_deletion_gives_log_lik(horseshoe):
    """Exact LOO by data deletion: ``n_obs`` is detected (``N``, not ``D``), ``X`` and ``y`` are
    subset, ``scale_global`` stays, and log p(theta | D) - log p(theta | D without i) is the
    ``log_lik`` generated quantity."""
    stan, _ = horseshoe
    post = loo_adapter(stan)
    assert post.n_obs_key == "N" and set(post.obs_keys) == {"X", "y"} and post.n_obs == N_HS
    u = RNG.normal(scale=0.8, size=(6, stan.dim))
    ll = np.asarray(post.log_lik(u))
    by_deletion = np.stack([stan.log_density(u) - post.deleted_model(i)[0].log_density(u) for i in (0, 7, 14)], 1)
    np.testing.assert_allclose(by_deletion, ll[:, [0, 7, 14]], rtol=1e-9, atol=1e-10)


def _relu_perm(stan, jm):
    """Index of each of the JAX model's theta coordinates in Stan's unconstrained vector."""
    names = stan.unconstrained_param_names()
    pos = {n: j for j, n in enumerate(names)}
    out = [pos[f"W1.{k + 1}.{j + 1}"] for k in range(H) for j in range(D_RELU + 1)]  # JAX: row-major W1
    out += [pos[f"W2.{k + 1}"] for k in range(H)] + [pos["b2"]]
    return np.array(out)


def test_relu_density_gradient_and_log_lik_match_jax(relu):
    stan, jm = relu
    assert stan.dim == H * (D_RELU + 1) + H + 1 == jm.dim
    perm = _relu_perm(stan, jm)
    u = RNG.normal(size=(6, stan.dim))
    theta = u[:, perm]
    c = stan.split_constrained(stan.param_constrain(u, include_gq=True), include_gq=True)
    np.testing.assert_allclose(np.asarray(jm.unconstrain({k: c[k] for k in ("W1", "W2", "b2")})), theta, rtol=0)
    lp, g = stan.log_density_gradient(u)
    lp_j, g_j = (np.asarray(a) for a in jm.log_density_and_grad(jnp.asarray(theta)))
    np.testing.assert_allclose(lp, lp_j, rtol=1e-12)
    np.testing.assert_allclose(g[:, perm], g_j, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(c["log_lik"], np.asarray(jm.log_lik(jnp.asarray(theta))), rtol=0, atol=1e-12)


def test_relu_loo_matches_jax_model(relu):
    """``pl.loo`` with the Stan program (exact LOO by data deletion through the bridge) and with the
    JAX ``ReluNet`` (closed form) on the same NUTS draws: the same plain-PSIS k, the same flagged
    observations, the same candidates (k and elpd of every transformation and step), the same
    result; its dims follow the DataTree's log-likelihood variable (``y`` over ``obs_id``)."""
    stan, jm = relu
    from ppl_loo.sampling import sample_nuts

    dt = sample_nuts(jm, num_chains=2, num_warmup=300, num_samples=300, random_seed=5)
    assert list(dt.log_likelihood.data_vars) == ["y"]
    # adapt the 5 most influential observations (posterior variance of log_lik above a quantile)
    ll = dt.log_likelihood["y"].values.reshape(-1, N_RELU)
    influence = np.var(ll, axis=0, ddof=1)
    # the search alone (no mixture, no SMC): Stan and JAX make the same choices on the same draws; the second
    # opinions sample with each backend's own NUTS
    kw = {"progressbar": False, "second_opinions": {"mixture": False, "smc": False},
          "search": {"transforms": ("mm1", "mm2", "pmm1", "kl"), "adapt": "flagged",
                     "influence_threshold": float(np.sort(influence)[-6])}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res_j = pl.loo(dt, jm, **kw)
        res_s = pl.loo(dt, stan, **kw)
    assert res_s.elpd_i.dims == res_j.elpd_i.dims == ("obs_id",)
    np.testing.assert_array_equal(res_s.elpd_i.coords["obs_id"].values, np.arange(N_RELU))
    np.testing.assert_allclose(res_s.pareto_k_psis.values, res_j.pareto_k_psis.values, rtol=0, atol=1e-10)
    cs, cj = res_s.candidates, res_j.candidates
    assert cs["labels"] == cj["labels"]
    flagged = np.flatnonzero(np.isfinite(cj["k"]).any(axis=1))
    # the 5 most influential, and those whose plain-PSIS k is above 0.5
    expected = np.flatnonzero((influence > kw["search"]["influence_threshold"]) | (res_j.pareto_k_psis.values > 0.5))
    np.testing.assert_array_equal(flagged, expected)
    assert len(flagged) >= 5
    np.testing.assert_array_equal(np.flatnonzero(np.isfinite(cs["k"]).any(axis=1)), flagged)
    # every candidate: moment matching needs densities only; KL needs grad log_lik_i (Stan's
    # autodiff, by deletion) and its Jacobian (the bridge's finite-difference Hessian-vector
    # products vs the closed form of ReluStructure)
    np.testing.assert_allclose(cs["elpd"][flagged], cj["elpd"][flagged], rtol=0, atol=1e-9)
    np.testing.assert_allclose(cs["k"][flagged], cj["k"][flagged], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(res_s.transform.values, res_j.transform.values)
    np.testing.assert_allclose(res_s.elpd_i.values, res_j.elpd_i.values, rtol=0, atol=1e-9)
