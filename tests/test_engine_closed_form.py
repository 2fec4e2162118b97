"""The engine's closed-form Jacobian paths (GLM Eq. 28, ReLU eigen-structure) equal autodiff.

The same draws go through the search twice: once with the model's declared structure (closed-form
determinants of the KL, variance and LL maps) and once with the structure removed, where the
engine differentiates Q by autodiff and takes the exact log|det| of the full Jacobian. Every
candidate's k-hat and elpd_i must agree.
"""

import copy

import jax.numpy as jnp
import numpy as np
import pytest

from ppl_loo.models import LogisticRegression, ReluNet
from ppl_loo.numerics.loo import EngineConfig, EngineData, build_engine, mapped_search

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

HBAR = tuple(4.0 ** -np.arange(0, 6))


def _run(model, theta, transforms, jacobian="exact"):
    logp0, g = model.log_density_and_grad(theta)
    ll = np.asarray(model.log_lik(theta))
    cfg = EngineConfig(tuple(transforms), HBAR, 1.0, jacobian)
    search, _ = build_engine(model, cfg)
    data = EngineData(theta, logp0, logp0, g, model.line_cache(theta))
    idx = np.arange(model.n_obs)
    return mapped_search(search, 1)(data, jnp.asarray(idx), jnp.asarray(ll.T))


def _data(seed, n=16, p=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X @ rng.normal(size=p) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return rng, X, y


@pytest.mark.parametrize("prior", ["normal", "horseshoe"])
def test_logistic_closed_form_equals_autodiff(prior):
    rng, X, y = _data(0)
    model = LogisticRegression(X, y, prior=prior, p0=1)
    theta = jnp.asarray(rng.normal(size=(200, model.dim)) * 0.7)
    plain = copy.copy(model)
    plain.structure = None  # generic path: autodiff Q and exact slogdet
    a = _run(model, theta, ["kl", "var", "ll"])
    b = _run(plain, theta, ["kl", "var", "ll"])
    np.testing.assert_allclose(np.asarray(a.k_w), np.asarray(b.k_w), atol=1e-6)
    np.testing.assert_allclose(np.asarray(a.elpd), np.asarray(b.elpd), atol=1e-6)
    assert np.all(np.asarray(a.usable) == np.asarray(b.usable))


def test_relu_closed_form_equals_autodiff():
    rng, X, y = _data(1, n=12, p=2)
    model = ReluNet(X, y, hidden=2)
    theta = jnp.asarray(rng.normal(size=(150, model.dim)))
    plain = copy.copy(model)
    plain.structure = None
    a = _run(model, theta, ["kl", "var", "ll"])
    b = _run(plain, theta, ["kl", "var", "ll"])
    np.testing.assert_allclose(np.asarray(a.k_w), np.asarray(b.k_w), atol=1e-6)
    np.testing.assert_allclose(np.asarray(a.elpd), np.asarray(b.elpd), atol=1e-6)
    # large steps make some ReLU maps non-invertible; both paths must flag the same draws
    np.testing.assert_array_equal(np.asarray(a.n_noninvertible), np.asarray(b.n_noninvertible))


def test_first_order_jacobian_is_exact_for_logistic_regression():
    """Eq. 22 is exact for LR (the Laplacian of mu vanishes and J - I has rank one)."""
    rng, X, y = _data(2)
    model = LogisticRegression(X, y, prior="normal")
    theta = jnp.asarray(rng.normal(size=(200, model.dim)) * 0.7)
    plain = copy.copy(model)
    plain.structure = None
    a = _run(plain, theta, ["kl", "var", "ll"], jacobian="exact")
    b = _run(plain, theta, ["kl", "var", "ll"], jacobian="first_order")
    np.testing.assert_allclose(np.asarray(a.k_w), np.asarray(b.k_w), atol=1e-6)
    np.testing.assert_allclose(np.asarray(a.elpd), np.asarray(b.elpd), atol=1e-6)
