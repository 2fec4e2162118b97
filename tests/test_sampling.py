"""``ppl_loo.sampling.sample_nuts``: one entry point, Stan's own NUTS for a Stan program and NumPyro's for a JAX
model, both against the closed-form posterior of a normal mean with known sigma and a normal prior:
``mu | y ~ N(m, v)`` with ``v = 1 / (1 / tau0^2 + N / sigma^2)`` and ``m = v (mu0 / tau0^2 + sum(y) / sigma^2)``."""

from pathlib import Path

import jax.scipy.stats as jst
import numpy as np
import pytest

import ppl_loo as pl
from ppl_loo.sampling import sample_nuts

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
Y = np.array([0.3, -1.2, 0.8, 1.9, 0.1, -0.4, 2.6, 0.5])
DATA = {"N": len(Y), "y": Y, "sigma": 1.0, "mu0": 0.0, "tau0": 2.0}
V = 1.0 / (1.0 / 2.0**2 + len(Y))
M = V * Y.sum()


def _check(tree, draws, atol):
    mu = np.asarray(tree.posterior["mu"]).ravel()
    assert mu.size == draws
    se = np.sqrt(V / 400)  # an effective sample size of at least 400 of the draws
    assert abs(mu.mean() - M) < 4 * se
    assert abs(mu.var() / V - 1) < 0.25
    ll = np.asarray(tree.log_likelihood["log_lik" if "log_lik" in tree.log_likelihood else "y"])
    # log p(y_i | mu) at every draw: the closed form of the normal density (CSV values carry 6 significant digits)
    np.testing.assert_allclose(ll.reshape(draws, -1), -0.5 * np.log(2 * np.pi) - 0.5 * (Y - mu[:, None]) ** 2,
                               rtol=atol, atol=atol)


def test_stan_program_runs_stans_own_nuts():
    sm = pl.StanModel(NORMAL, DATA, sampler=True)
    tree = sample_nuts(sm, num_chains=2, num_warmup=300, num_samples=1000, random_seed=5)
    _check(tree, 2000, 2e-5)
    again = sample_nuts(sm, num_chains=2, num_warmup=300, num_samples=1000, random_seed=5)
    np.testing.assert_array_equal(again.posterior["mu"], tree.posterior["mu"])  # a seed reproduces the draws


def test_stan_program_without_the_sampler_is_refused():
    with pytest.raises(ValueError, match="sampler=True"):
        sample_nuts(pl.StanModel(NORMAL, DATA), num_chains=1, num_samples=10, random_seed=1)


def test_jax_model_runs_numpyro_nuts():
    model = pl.JaxModel({"mu": ((), None)}, lambda p: jst.norm.logpdf(p["mu"], 0.0, 2.0),
                        lambda p: jst.norm.logpdf(Y, p["mu"], 1.0), observed=Y)
    tree = sample_nuts(model, num_chains=2, num_warmup=300, num_samples=1000, random_seed=5)
    _check(tree, 2000, 1e-10)
