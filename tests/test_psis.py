"""Tests for ppl_loo.numerics.psis against arviz_stats (same inputs, agreement to 1e-8)."""

import warnings
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from ppl_loo.numerics import psis
from ppl_loo.numerics.psis import gpdfit, khat_threshold, psis_loo_pointwise, psislw

arviz_base = pytest.importorskip("arviz_base")
arviz_stats = pytest.importorskip("arviz_stats")
from arviz_stats.base import array_stats  # noqa: E402

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays: the user's own JAX code (conftest.py)

ATOL = 1e-8


def _arviz_psislw(log_ratios, r_eff):
    """arviz_stats' array-level psislw takes the log-likelihood and negates it internally."""
    return array_stats.psislw(-np.asarray(log_ratios), r_eff=r_eff, axis=-1)


def _log_ratios(kind, shape, rng):
    """Light tails (normal log ratios) or log-Pareto ratios with tail index ``kind``.

    If ``w ~ Pareto(1/k)`` then ``log w ~ k * Exponential(1)``, so k-hat should be near ``k``.
    """
    if kind == "normal":
        return rng.normal(size=shape)
    return kind * rng.exponential(size=shape) + rng.normal(scale=0.1, size=shape)


# ----------------------------------------------------------------------------------------
# static helpers
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_draws", [25, 100, 226, 300, 1000, 4000, 10_000])
@pytest.mark.parametrize("r_eff", [1.0, 0.7, 0.3, 2.0])
def test_tail_length_matches_arviz(n_draws, r_eff):
    expected = array_stats._get_ps_tails(n_draws, r_eff, tail="right")
    assert psis.psis_tail_length(n_draws, r_eff) == int(expected)


def test_tail_length_values():
    assert psis.psis_tail_length(100, 1.0) == 20  # S * r_eff <= 225 -> floor(S / 5)
    assert psis.psis_tail_length(1000, 1.0) == 94  # floor(3 * sqrt(1000))
    assert psis.psis_tail_length(1000, 0.7) == 113  # floor(3 * sqrt(1000 / 0.7))
    assert psis.psis_tail_length(4000, 1.0) == 189


def test_khat_threshold():
    assert khat_threshold(100) == pytest.approx(0.5)
    assert khat_threshold(1000) == pytest.approx(1 - 1 / 3)
    assert khat_threshold(4000) == pytest.approx(0.7)
    assert khat_threshold(1) == 0.7
    assert khat_threshold(10) == pytest.approx(0.0)


def test_too_few_draws_raises():
    with pytest.raises(ValueError, match="at least 5"):
        psislw(np.zeros(20))


# ----------------------------------------------------------------------------------------
# (a) psislw vs arviz_stats array-level psislw
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_draws", [100, 1000, 4000])
@pytest.mark.parametrize("r_eff", [1.0, 0.7])
@pytest.mark.parametrize("kind", ["normal", 0.3, 0.7, 1.2])
def test_psislw_matches_arviz(n_draws, r_eff, kind):
    seed = zlib.crc32(repr((n_draws, r_eff, kind)).encode())  # deterministic across runs
    rng = np.random.default_rng(seed)
    log_ratios = _log_ratios(kind, (2, 3, n_draws), rng)

    lw, khat = psislw(log_ratios, r_eff=r_eff)
    lw_az, khat_az = _arviz_psislw(log_ratios, r_eff)

    assert lw.shape == (2, 3, n_draws)
    assert khat.shape == (2, 3)
    assert isinstance(lw, jax.Array) and isinstance(khat, jax.Array)
    assert np.all(np.isfinite(khat_az))
    np.testing.assert_allclose(np.asarray(khat), khat_az, rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.asarray(lw), lw_az, rtol=0, atol=ATOL)
    # normalized: logsumexp over draws is 0
    np.testing.assert_allclose(logsumexp(np.asarray(lw), axis=-1), 0.0, atol=1e-12)
    # smoothing actually changed the tail (not a trivial normalisation)
    raw = log_ratios - logsumexp(log_ratios, axis=-1, keepdims=True)
    assert np.max(np.abs(np.asarray(lw) - raw)) > 1e-6


def test_heavy_tails_give_large_khat():
    """The synthetic inputs do span the k-hat regimes (sanity of the test inputs)."""
    rng = np.random.default_rng(7)
    for k_true, lo, hi in [(0.3, 0.1, 0.5), (0.7, 0.5, 0.9), (1.2, 0.95, 1.5)]:
        _, khat = psislw(_log_ratios(k_true, (20, 4000), rng))
        assert lo < float(jnp.median(khat)) < hi


def test_tail_selection_equals_stable_argsort_with_ties():
    """``_top_ascending`` (lax.top_k on integer keys) == ``argsort(kind='stable')[-n:]``."""
    rng = np.random.default_rng(12)
    for scale in (2.0, 5.0, 50.0):
        x = np.round(rng.normal(size=(20, 1000)) * scale) / 4  # many ties
        x[:, ::13] = -0.0
        x[:, ::17] = 0.0
        x = x - x.max(axis=-1, keepdims=True)
        for n in (6, 95, 190):
            idx = jax.vmap(lambda a, n=n: psis._top_ascending(a, n))(jnp.asarray(x))
            expected = np.argsort(x, axis=-1, kind="stable")[:, -n:]
            np.testing.assert_array_equal(np.asarray(idx), expected)


def test_psislw_numpy_and_jax_input_agree():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 500))
    lw_np, k_np = psislw(x, 0.9)
    lw_j, k_j = psislw(jnp.asarray(x), 0.9)
    np.testing.assert_array_equal(np.asarray(lw_np), np.asarray(lw_j))
    np.testing.assert_array_equal(np.asarray(k_np), np.asarray(k_j))


def test_psislw_1d_input():
    rng = np.random.default_rng(4)
    x = 0.8 * rng.exponential(size=1000)
    lw, k = psislw(x)
    lw_az, k_az = _arviz_psislw(x, 1.0)
    assert lw.shape == (1000,) and k.shape == ()
    np.testing.assert_allclose(float(k), float(k_az), atol=ATOL)
    np.testing.assert_allclose(np.asarray(lw), lw_az, atol=ATOL)


# ----------------------------------------------------------------------------------------
# gpdfit / gpinv vs arviz
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [5, 20, 94, 189])
def test_gpdfit_matches_arviz(n):
    rng = np.random.default_rng(n)
    samples = []
    for k_true in (-0.3, 0.0, 0.4, 0.9, 1.5):
        samples.append(np.sort(stats.genpareto.rvs(k_true, scale=2.0, size=n, random_state=rng)))
    batch = np.stack(samples)
    k, sigma = gpdfit(batch)
    assert k.shape == (5,) and sigma.shape == (5,)
    for i, row in enumerate(batch):
        k_az, sigma_az = array_stats._gpdfit(row)
        np.testing.assert_allclose(float(k[i]), k_az, rtol=0, atol=ATOL)
        np.testing.assert_allclose(float(sigma[i]), sigma_az, rtol=1e-10, atol=0)
    # the estimates track the truth (with prior shrinkage) for the larger samples
    if n >= 94:
        assert float(k[0]) < float(k[2]) < float(k[3]) < float(k[4])


def test_gpdfit_first_quartile_at_minimum_is_nan_like_arviz():
    row = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.7, 1.2, 3.0, 8.0])
    k_az, s_az = array_stats._gpdfit(row)
    k, s = gpdfit(row)
    assert np.isnan(k_az) and np.isnan(s_az)
    assert np.isnan(float(k)) and np.isnan(float(s))


def test_gpinv_matches_arviz():
    p = (np.arange(50) + 0.5) / 50
    for kappa, sigma, mu in [(0.4, 1.3, 0.2), (0.0, 2.0, 1.0), (-0.3, 0.5, 0.0), (1.4, 0.1, 0.5)]:
        q = psis._gpinv(jnp.asarray(p), kappa, sigma, mu)
        np.testing.assert_allclose(
            np.asarray(q), array_stats._gpinv(p, kappa, sigma, mu), rtol=1e-13
        )
    for sigma in (0.0, -1.0):
        assert np.all(np.isnan(np.asarray(psis._gpinv(jnp.asarray(p), 0.5, sigma, 0.0))))
        assert np.all(np.isnan(array_stats._gpinv(p, 0.5, sigma, 0.0)))


# ----------------------------------------------------------------------------------------
# (b) psis_loo_pointwise vs arviz_stats.loo on a DataTree
# ----------------------------------------------------------------------------------------
def _outlier_loo_problem(seed=1):
    rng = np.random.default_rng(seed)
    n_obs, n_chains, n_draws = 20, 4, 250
    y = rng.normal(size=n_obs)
    y[[3, 11, 17]] = [7.0, -9.0, 12.0]  # outliers -> large k-hat
    ybar, s = y.mean(), y.std(ddof=1)
    sigma = s * np.sqrt((n_obs - 1) / rng.chisquare(n_obs - 1, size=(n_chains, n_draws)))
    mu = ybar + sigma / np.sqrt(n_obs) * rng.standard_normal((n_chains, n_draws))
    ll = stats.norm.logpdf(y[None, None, :], mu[..., None], sigma[..., None])
    dt = arviz_base.from_dict(
        {"posterior": {"mu": mu, "sigma": sigma}, "log_likelihood": {"y": ll}},
        dims={"y": ["obs"]},
    )
    return ll, dt


@pytest.mark.parametrize("r_eff", [1.0, 0.8])
def test_psis_loo_pointwise_matches_arviz_loo(r_eff):
    ll, dt = _outlier_loo_problem()
    n_chains, n_draws, n_obs = ll.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = arviz_stats.loo(dt, pointwise=True, reff=r_eff)

    # (chain, draw, obs) -> (obs, chain*draw), draws flattened in C order like arviz
    log_lik = ll.reshape(n_chains * n_draws, n_obs).T
    elpd_i, khat, lw = psis_loo_pointwise(log_lik, r_eff=r_eff)

    assert elpd_i.shape == (n_obs,) and khat.shape == (n_obs,) and lw.shape == log_lik.shape
    np.testing.assert_allclose(np.asarray(elpd_i), res.elpd_i.values, rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.asarray(khat), res.pareto_k.values, rtol=0, atol=ATOL)
    lw_az = res.log_weights.transpose("obs", "chain", "draw").values.reshape(n_obs, -1)
    np.testing.assert_allclose(np.asarray(lw), lw_az, rtol=0, atol=ATOL)
    np.testing.assert_allclose(float(jnp.sum(elpd_i)), res.elpd, rtol=0, atol=ATOL)
    # the outliers are the problematic observations
    assert float(khat[17]) > khat_threshold(n_chains * n_draws)
    assert float(jnp.max(jnp.delete(khat, jnp.array([3, 11, 17])))) < 0.3


# ----------------------------------------------------------------------------------------
# (c) jit and vmap
# ----------------------------------------------------------------------------------------
def test_jit_and_vmap_match_eager():
    rng = np.random.default_rng(11)
    x = np.concatenate(
        [_log_ratios(0.7, (3, 5, 1000), rng), _log_ratios("normal", (3, 2, 1000), rng)], axis=1
    )
    lw_e, k_e = psislw(x, r_eff=0.7)

    lw_j, k_j = jax.jit(psislw, static_argnames="r_eff")(x, r_eff=0.7)
    np.testing.assert_allclose(np.asarray(lw_j), np.asarray(lw_e), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(k_j), np.asarray(k_e), rtol=0, atol=1e-13)

    lw_v, k_v = jax.vmap(lambda a: psislw(a, 0.7))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(lw_v), np.asarray(lw_e), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(k_v), np.asarray(k_e), rtol=0, atol=1e-13)

    lw_jv, k_jv = jax.jit(jax.vmap(jax.vmap(lambda a: psislw(a, 0.7))))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(lw_jv), np.asarray(lw_e), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(k_jv), np.asarray(k_e), rtol=0, atol=1e-13)

    # and the jitted values agree with arviz
    lw_az, k_az = _arviz_psislw(x, 0.7)
    np.testing.assert_allclose(np.asarray(k_jv), k_az, rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.asarray(lw_jv), lw_az, rtol=0, atol=ATOL)


def test_jit_vmap_loo_pointwise():
    ll, _ = _outlier_loo_problem()
    log_lik = jnp.asarray(ll.reshape(1000, 20).T)
    batch = jnp.stack([log_lik, 0.5 * log_lik])
    e0, k0, w0 = psis_loo_pointwise(log_lik, r_eff=0.8)
    e1, k1, w1 = psis_loo_pointwise(0.5 * log_lik, r_eff=0.8)
    eb, kb, wb = jax.jit(jax.vmap(lambda a: psis_loo_pointwise(a, 0.8)))(batch)
    np.testing.assert_allclose(np.asarray(eb), np.stack([e0, e1]), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(kb), np.stack([k0, k1]), rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.asarray(wb), np.stack([w0, w1]), rtol=0, atol=1e-13)
    assert not np.allclose(np.asarray(e0), np.asarray(e1))


def test_traced_r_eff_is_rejected():
    x = jnp.zeros((2, 100))
    with pytest.raises(TypeError, match="static"):
        jax.jit(psislw)(x, 0.7)


# ----------------------------------------------------------------------------------------
# (d) degenerate cases
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_draws", [100, 1000])
def test_constant_log_ratios_give_uniform_weights(n_draws):
    x = np.full((3, n_draws), 2.5)
    lw, khat = psislw(x)
    assert not np.any(np.isnan(np.asarray(lw)))
    np.testing.assert_allclose(np.asarray(lw), -np.log(n_draws), rtol=0, atol=1e-13)
    assert np.all(np.asarray(khat) == -np.inf)
    # arviz refuses this input outright
    with pytest.raises(ValueError, match="All tail values are the same"):
        _arviz_psislw(x[0], 1.0)


def test_constant_log_lik_loo():
    """An observation whose likelihood does not depend on the parameters: elpd_i = ll."""
    rng = np.random.default_rng(5)
    log_lik = np.vstack([np.full(1000, -1.3), rng.normal(-2.0, 0.5, size=1000)])
    elpd_i, khat, lw = psis_loo_pointwise(log_lik)
    assert float(elpd_i[0]) == pytest.approx(-1.3, abs=1e-12)
    assert float(khat[0]) == -np.inf
    assert np.all(np.isfinite(np.asarray(lw)))
    lw_az, k_az = array_stats.psislw(log_lik[1], r_eff=1.0)
    np.testing.assert_allclose(float(khat[1]), k_az, atol=ATOL)


def test_equal_tail_gives_minus_inf_and_unsmoothed_weights():
    rng = np.random.default_rng(6)
    x = rng.normal(size=1000)
    top = np.argsort(x)[-150:]
    x[top] = 5.0  # the whole tail (M = 94) equals the maximum
    lw, khat = psislw(x)
    assert float(khat) == -np.inf
    np.testing.assert_allclose(np.asarray(lw), x - logsumexp(x), rtol=0, atol=1e-13)


def test_ties_at_cutoff_give_nan_khat_like_arviz():
    rng = np.random.default_rng(8)
    x = rng.normal(size=100)  # M = 20: tail = order stats 80..99, cutoff = 79
    s = np.sort(x)
    x[(x >= s[79]) & (x <= s[84])] = s[79]
    lw, khat = psislw(x)
    lw_az, khat_az = _arviz_psislw(x, 1.0)
    assert np.isnan(khat_az) and np.isnan(float(khat))
    assert np.all(np.isfinite(np.asarray(lw)))
    np.testing.assert_allclose(np.asarray(lw), lw_az, rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.asarray(lw), x - logsumexp(x), rtol=0, atol=1e-13)


def test_degenerate_row_does_not_contaminate_batch():
    rng = np.random.default_rng(9)
    x = _log_ratios(0.7, (4, 1000), rng)
    x[2] = 0.0
    lw, khat = psislw(x, 0.7)
    assert float(khat[2]) == -np.inf
    assert np.all(np.isfinite(np.asarray(lw)))
    for i in (0, 1, 3):
        lw_az, k_az = _arviz_psislw(x[i], 0.7)
        np.testing.assert_allclose(float(khat[i]), k_az, rtol=0, atol=ATOL)
        np.testing.assert_allclose(np.asarray(lw[i]), lw_az, rtol=0, atol=ATOL)
