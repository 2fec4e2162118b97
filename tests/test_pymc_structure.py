"""The PyMC adapter's Bernoulli-logit structure: found in the graph, proved, and exact.

- The logit's design matrix and data offset are recovered exactly (random intercepts indexed by
  group, ``pm.Data`` covariates, a data offset, ``logit_p=`` and ``p=sigmoid(...)``); non-affine
  logits (a scale parameter times the predictor, a piecewise-constant operation) are rejected.
- The fast line evaluation (linear predictor plus the prior part of the PyMC graph, quadratic or
  not) equals the generic evaluation of the full model on every displacement type.
- The engine with the detected structure (closed-form Jacobians, Eq. 28) gives the same candidates
  (k-hat and elpd_i of every transformation and step) as the generic autodiff path on the same draws.

Real PyMC models, random draws (no sampling needed for these identities).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

pm = pytest.importorskip("pymc")
pt = pytest.importorskip("pytensor.tensor")

from ppl_loo.adapters.jax.base import PosteriorModel  # noqa: E402
from ppl_loo.adapters.pymc.adapter import PyMCModel  # noqa: E402
from ppl_loo.numerics.loo import EngineConfig, EngineData, build_engine, mapped_search  # noqa: E402
from ppl_loo.numerics.transforms import DiagAffine, LowRank  # noqa: E402

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

N, G = 18, 3


def _data():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(N, 2))
    g = np.arange(N) % G
    off = 0.4 * rng.normal(size=N)
    y = (X[:, 0] + 0.3 * rng.normal(size=N) > 0).astype(int)
    return X, g, off, y


def _model(kind):
    """Bernoulli GLMs with an intercept, two pm.Data covariates, a random intercept and an offset."""
    X, g, off, y = _data()
    with pm.Model(coords={"obs": np.arange(N), "f": [0, 1], "grp": np.arange(G)}) as m:
        Xd = pm.Data("X", X, dims=("obs", "f"))
        if kind == "student":  # non-quadratic prior on a block coordinate; a Potential
            b0 = pm.StudentT("b0", nu=4, mu=0, sigma=2.5)
        else:
            b0 = pm.Normal("b0", 0, 2.5)
        if kind == "mvn":  # a constant, non-diagonal prior Hessian on the block
            b = pm.MvNormal("b", np.zeros(2), np.array([[1.0, 0.5], [0.5, 2.0]]), dims="f")
        else:
            b = pm.Normal("b", 0, 1, dims="f")
        if kind == "hier":  # hyperparameter outside the block
            s = pm.HalfNormal("s", 1)
            u = pm.Normal("u", 0, s, dims="grp")
        else:
            u = pm.Normal("u", 0, 1, dims="grp")
        eta = b0 + pm.math.dot(Xd, b) + u[g] + off
        if kind == "student":
            pm.Potential("shrink", -0.1 * pt.sum(b**2))
            pm.Bernoulli("y", logit_p=eta, observed=y, dims="obs")
        elif kind == "sigmoid":
            pm.Bernoulli("y", p=pm.math.sigmoid(eta), observed=y, dims="obs")
        elif kind == "scaled":  # not affine in theta: exp(s_log__) * X b
            s = pm.HalfNormal("s2", 1)
            pm.Bernoulli("y", logit_p=b0 + s * pm.math.dot(Xd, b), observed=y, dims="obs")
        elif kind == "floor":  # zero symbolic gradient, not affine: caught by the numeric check
            pm.Bernoulli("y", logit_p=eta + pt.floor(b0), observed=y, dims="obs")
        else:
            pm.Bernoulli("y", logit_p=eta, observed=y, dims="obs")
    return m


@pytest.mark.parametrize("kind", ["normal", "student", "sigmoid", "hier", "mvn"])
def test_design_and_offset_recovered(kind):
    X, g, off, y = _data()
    m = PyMCModel(_model(kind))
    assert m.structure is not None, m.structure_note
    # theta layout: b0, b (2), [s_log__], u (3)
    sl = m.slices
    block = np.concatenate([np.arange(sl[n].start, sl[n].stop) for n in ("b0", "b", "u")])
    np.testing.assert_array_equal(np.asarray(m.adapt_index), block)
    design = np.column_stack([np.ones(N), X, np.eye(G)[g]])
    np.testing.assert_allclose(m.structure.X, design, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.structure.offset, off, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(m.structure.y, y)
    assert m.structure.family == "bernoulli_logit"
    assert m.glm.quadratic == (kind != "student")
    assert m.glm.constant_hessian == (kind in ("normal", "sigmoid", "mvn"))  # the prior scale s varies in "hier"
    if kind in ("normal", "sigmoid"):  # N(0, 2.5^2), N(0, 1) x 2, N(0, 1) x 3: -1 / variance
        np.testing.assert_allclose(m.glm.hessian_diag, -1.0 / np.array([6.25, 1, 1, 1, 1, 1]), rtol=1e-12)
    else:
        assert m.glm.hessian_diag is None
    if kind == "hier":
        assert m.dim == block.size + 1  # s_log__ is held fixed by the transformations


@pytest.mark.parametrize("kind, reason", [("scaled", "not affine"), ("floor", "not affine")])
def test_non_affine_logit_not_structured(kind, reason):
    m = PyMCModel(_model(kind))
    assert m.structure is None and m.adapt_index is None
    assert reason in m.structure_note


def test_structure_can_be_turned_off():
    m = PyMCModel(_model("normal"), structure=False)
    assert m.structure is None and m.structure_note == "structure detection off"


def _deltas(m, theta, rng):
    """Dense, LowRank and DiagAffine displacements that move the block only."""
    S, d = theta.shape
    block = np.asarray(m.adapt_index)
    dense = np.zeros((S, d))
    dense[:, block] = rng.normal(size=(S, block.size))
    basis = np.zeros((2, d))
    basis[:, block] = rng.normal(size=(2, block.size))
    shift, slope = np.zeros(d), np.zeros(d)
    shift[block] = rng.normal(size=block.size)
    slope[block] = 0.3 * rng.normal(size=block.size)
    return [jnp.asarray(dense), LowRank(jnp.asarray(rng.normal(size=(S, 2))), jnp.asarray(basis)),
            DiagAffine(jnp.asarray(shift), jnp.asarray(slope))]


@pytest.mark.parametrize("kind", ["normal", "student", "hier", "mvn"])
def test_line_eval_equals_generic(kind):
    """Each way of evaluating the prior part: constant diagonal Hessian ("normal"), constant
    Hessian ("mvn"), quadratic ("hier"), general ("student")."""
    m = PyMCModel(_model(kind))
    rng = np.random.default_rng(0)
    theta = jnp.asarray(rng.normal(size=(7, m.dim)))
    cache = m.line_cache(theta)
    grid = jnp.asarray(4.0 ** -np.arange(11))
    for delta in _deltas(m, theta, rng):
        for ts in (grid, jnp.asarray([1.0])):
            for i in (0, 11):
                lp, ll = m.line_eval(cache, theta, delta, ts, i)
                ref_lp, ref_ll = PosteriorModel.line_eval(m, None, theta, delta, ts, i)
                np.testing.assert_allclose(np.asarray(lp), np.asarray(ref_lp), rtol=1e-10, atol=1e-9)
                np.testing.assert_allclose(np.asarray(ll), np.asarray(ref_ll), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["normal", "hier"])
def test_line_eval_in_blocks_equals_unblocked(kind):
    """The logit recomputed in blocks of 5 rows (18 observations: the last block
    padded), the offset included, gives the cached-logit evaluation to 1e-10."""
    m, mb = PyMCModel(_model(kind)), PyMCModel(_model(kind))
    mb.line_block_rows = 5
    rng = np.random.default_rng(1)
    theta = jnp.asarray(rng.normal(size=(7, m.dim)))
    cache, cache_b = m.line_cache(theta), mb.line_cache(theta)
    assert cache[0].shape == (7, N) and cache_b[0].shape == (N,)  # no (S, n) logit cached in blocks
    for delta in _deltas(m, theta, rng):
        for ts in (jnp.asarray(4.0 ** -np.arange(11)), jnp.asarray([1.0])):
            for i in (0, 17):
                for u, v in zip(m.line_eval(cache, theta, delta, ts, i), mb.line_eval(cache_b, theta, delta, ts, i)):
                    np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-12, atol=1e-10)


def _search(model, theta, transforms):
    logp0, g = model.log_density_and_grad(theta)
    ll = np.asarray(model.log_lik(theta))
    cfg = EngineConfig(tuple(transforms), tuple(4.0 ** -np.arange(6)), 1.0, "exact")
    search, _ = build_engine(model, cfg)
    data = EngineData(theta, logp0, logp0, g, model.line_cache(theta))
    idx = np.arange(model.n_obs)
    return mapped_search(search, 1)(data, jnp.asarray(idx), jnp.asarray(ll.T))


def test_structured_engine_equals_generic_engine():
    """Every candidate of every transformation but the Newton step (whose GLM form averages the
    curvature over the draws, the generic one takes it at the posterior mean) agrees."""
    pmodel = _model("student")  # every parameter is in the block: both paths move the same coordinates
    fast, slow = PyMCModel(pmodel), PyMCModel(pmodel, structure=False)
    assert fast.structure is not None and slow.structure is None
    assert np.array_equal(np.asarray(fast.adapt_index), np.arange(fast.dim))
    rng = np.random.default_rng(2)
    theta = jnp.asarray(0.6 * rng.normal(size=(300, fast.dim)))
    names = ["pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2", "mm3", "mm_iter", "pmm1_mix"]
    a, b = _search(fast, theta, names), _search(slow, theta, names)
    np.testing.assert_array_equal(np.asarray(a.usable), np.asarray(b.usable))
    ok = np.asarray(a.usable)
    np.testing.assert_allclose(np.asarray(a.k_w)[ok], np.asarray(b.k_w)[ok], atol=1e-6)
    np.testing.assert_allclose(np.asarray(a.elpd)[ok], np.asarray(b.elpd)[ok], atol=1e-6)
