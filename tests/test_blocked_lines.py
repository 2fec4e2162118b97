"""Line evaluations of a logistic regression in blocks of observations (bounded memory for large n): the blocked
path equals the unblocked one to 1e-10, in the model's functions and in every pointwise array of pl.loo."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_loo as pl
from ppl_loo.models import LogisticRegression
from ppl_loo.numerics.glm_lines import LINE_BLOCK_BYTES, line_block_rows, line_bytes
from ppl_loo.numerics.transforms import DiagAffine, LowRank
from ppl_loo.sampling import sample_nuts
from ppl_loo.workflow.loo.adapt import auto_batch_size

pytestmark = pytest.mark.x64  # calls the model's JAX functions directly (conftest.py)

N, S, BLOCK = 61, 400, 7  # 7 does not divide 61: the last block is padded


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, 3))
    X[0] = [6.0, -5.0, 4.0]  # a high-leverage observation, so that the search has work
    y = (rng.random(N) < 1 / (1 + np.exp(-(0.3 + X @ [1.0, -0.5, 0.8])))).astype(int)
    y[0] = 0
    return X, y


def _pair(prior="normal"):
    X, y = _data()
    kw = {"p0": 1} if prior == "horseshoe" else {}
    plain, blocked = LogisticRegression(X, y, prior=prior, **kw), LogisticRegression(X, y, prior=prior, **kw)
    plain.line_block_rows, blocked.line_block_rows = 0, BLOCK
    return plain, blocked


@pytest.mark.parametrize("prior", ["normal", "horseshoe"])
def test_line_eval_blocked_equals_unblocked(prior):
    plain, blocked = _pair(prior)
    rng = np.random.default_rng(1)
    theta = jnp.asarray(rng.normal(scale=0.3, size=(S, plain.dim)))
    q = plain.q
    ts = jnp.linspace(-1.0, 1.0, 5)
    dense = jnp.zeros((S, plain.dim)).at[:, :q].set(rng.normal(size=(S, q)))
    pad = lambda v: jnp.zeros(plain.dim).at[:q].set(v)  # noqa: E731
    deltas = [dense, DiagAffine(pad(rng.normal(size=q)), pad(rng.normal(size=q))),
              LowRank(jnp.asarray(rng.normal(size=(S, 2))),
                      jnp.zeros((2, plain.dim)).at[:, :q].set(rng.normal(size=(2, q))))]
    c_plain, c_blocked = plain.line_cache(theta), blocked.line_cache(theta)
    assert c_plain[2].shape == (S, N) and c_blocked[2] is None  # no (S, n) logits cached when blocked
    for delta in deltas:
        for i in (0, 5, N - 1):
            a, b = plain.line_eval(c_plain, theta, delta, ts, i), blocked.line_eval(c_blocked, theta, delta, ts, i)
            for u, v in zip(a, b):
                assert u.shape == (5, S)
                np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-12, atol=1e-10)
    for i in (None, 3):
        np.testing.assert_allclose(np.asarray(blocked.logp_line(theta, dense, ts, i)),
                                   np.asarray(plain.logp_line(theta, dense, ts, i)), rtol=1e-12, atol=1e-10)


def test_block_rows_follow_the_budget():
    assert line_block_rows(1000, 100, 11) == 0  # small problems: unblocked, as before
    rows = line_block_rows(2000, 10**5, 11)
    assert rows == LINE_BLOCK_BYTES // (8 * 2000 * 14) and 8 * 2000 * 14 * rows <= LINE_BLOCK_BYTES
    assert line_block_rows(2000, 10**5, 11, forced=0) == 0 and line_block_rows(10, 50, 3, forced=7) == 7
    with pytest.raises(ValueError, match="line_block_rows"):
        line_block_rows(10, 50, 3, forced=-1)
    # the batch estimate no longer grows with n once the lines are blocked
    assert line_bytes(2000, 10**6) == line_bytes(2000, 10**5) <= LINE_BLOCK_BYTES
    assert auto_batch_size("auto", 2000, 11, 10**6, 100) == auto_batch_size("auto", 2000, 11, 10**5, 100) == 8


def _tree(model, seed=2):
    """Posterior draws of the model (NUTS), as a DataTree with the log-likelihood."""
    return sample_nuts(model, num_chains=2, num_warmup=300, num_samples=300, random_seed=seed)


@pytest.fixture(scope="module")
def loo_pair():
    plain, blocked = _pair()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = _tree(plain)
        # the search alone: the blocked line evaluations must give the unblocked numbers (a second opinion's NUTS
        # run on either model would add its own Monte Carlo error)
        return (pl.loo(tree, plain, progressbar=False, search={"adapt": "flagged"},
                       second_opinions={"mixture": False, "smc": False}),
                pl.loo(tree, blocked, progressbar=False, search={"adapt": "flagged"},
                       second_opinions={"mixture": False, "smc": False}))


def test_loo_blocked_equals_unblocked(loo_pair):
    ref, got = loo_pair
    assert np.sum(ref.transform.values != "psis") >= 1  # the search ran and adapted something
    for key in ("elpd", "se", "p"):
        np.testing.assert_allclose(getattr(got, key), getattr(ref, key), rtol=0, atol=1e-10)
    for key in ("elpd_i", "p_loo_i", "pareto_k", "pareto_k_psis", "mcse_elpd_i", "n_eff_i", "hbar_used"):
        np.testing.assert_allclose(getattr(got, key).values, getattr(ref, key).values, rtol=0, atol=1e-10,
                                   err_msg=key)
    np.testing.assert_array_equal(got.transform.values, ref.transform.values)
    np.testing.assert_array_equal(got.doubtful.values, ref.doubtful.values)


def test_density_at_the_draws_in_batches(monkeypatch):
    """Above the budget the full-data density, its gradient and the log-likelihood at the draws are
    evaluated in batches of draws (``jax.lax.map``): the same numbers as all draws at once."""
    import ppl_loo.numerics.glm_lines as gl

    X, y = _data()
    ref = LogisticRegression(X, y)
    theta = jnp.asarray(np.random.default_rng(3).normal(scale=0.3, size=(S, ref.dim)))
    want = ref.log_density_and_grad(theta), ref.log_lik(theta)
    monkeypatch.setattr(gl, "LINE_BLOCK_BYTES", 8 * 8 * N * 37)  # 37 draws per batch, 400 = 10 * 37 + 30
    assert gl.draw_batch(S, N) == 37
    small = LogisticRegression(X, y)
    got = small.log_density_and_grad(theta), small.log_lik(theta)
    for u, v in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=1e-13, atol=1e-12)
