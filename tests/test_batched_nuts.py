"""The batched NUTS of the refits (``ppl_loo/numerics/nuts/batched.py``) and its warm start, against known answers.

- Step-size-only adaptation (``adaptation="step_size"``, the warm-started refits' default) samples Gaussian targets
  with known means and variances within Monte Carlo error, as the window adaptation does.
- The CPU path (each lane its own call, in threads) gives bitwise the same draws whatever the number of threads.
- The fast softplus' derivative is the logistic sigmoid everywhere, and the horseshoe's batched refit density is
  the LOO density in non-centered coordinates with its log-Jacobian, to rounding.
- The refits' chains start at full-data draws resampled with the LOO importance weights; the refit settings read
  the fit's step size and shorten the warmup of warm-started refits.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz_stats.base import array_stats

import ppl_loo as pl
from ppl_loo.jax_settings import x64
from ppl_loo.numerics.nuts import batched_nuts
from ppl_loo.numerics.special import softplus
from ppl_loo.sampling import sample_nuts
from ppl_loo.workflow.exact.refit import WARM_WARMUP, fit_step_size, refit_settings, start_draws

MEANS = np.array([[0.0, 1.0, -2.0], [3.0, -1.0, 0.5]])  # one row per target
SDS = np.array([1.0, 0.1, 5.0])


def _gauss(theta, i):
    return -0.5 * jnp.sum(jnp.square((theta - jnp.asarray(MEANS)[i]) / jnp.asarray(SDS)))


def _run(adaptation, workers=None, warmup=150, seeds=(1, 2)):
    rng = np.random.default_rng(0)
    init = MEANS[:, None, :] + SDS * rng.normal(size=(2, 4, 3))  # draws of each target ("warm")
    return batched_nuts(_gauss, init, np.array([0, 1]), num_warmup=warmup, num_samples=600, random_seeds=list(seeds),
                        target_accept=0.8, inverse_mass_matrix=SDS**2, step_size=0.5, adaptation=adaptation,
                        vectorize=False, workers=workers)


@pytest.mark.parametrize("adaptation", ["step_size", "window"])
def test_adaptations_sample_gaussians_with_known_moments(adaptation):
    draws, div, eps = _run(adaptation, warmup=150 if adaptation == "step_size" else 300)
    assert draws.shape == (2, 4, 600, 3) and div.shape == (2, 4, 600) and eps.shape == (2, 4)
    assert not div.any() and np.all(eps > 0)
    for b in range(2):
        x = draws[b]  # (chains, draws, 3)
        ess = np.asarray(array_stats.ess(x, chain_axis=0, draw_axis=1, method="mean"))
        z = (x.mean(axis=(0, 1)) - MEANS[b]) / (SDS / np.sqrt(ess))
        assert np.all(np.abs(z) < 4.5), (adaptation, b, z)
        ratio = x.reshape(-1, 3).var(axis=0) / SDS**2
        assert np.all(np.abs(ratio - 1) < 0.25), (adaptation, b, ratio)  # 2,400 draws of ESS about 1,000
        assert np.max(np.asarray(array_stats.rhat(x, chain_axis=0, draw_axis=1))) < 1.02


def test_lanes_in_threads_give_the_same_draws():
    one = _run("step_size", workers=1)
    two = _run("step_size", workers=2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    # a target's draws depend on its own seed only
    other = _run("step_size", workers=2, seeds=(1, 9))
    np.testing.assert_array_equal(other[0][0], one[0][0])
    assert not np.array_equal(other[0][1], one[0][1])


def test_compiled_program_is_kept_between_batches():
    """The batches of one refit call share ``programs``: one compiled program, and the same draws as fresh calls."""
    rng = np.random.default_rng(0)
    init = MEANS[:, None, :] + SDS * rng.normal(size=(2, 4, 3))
    programs = {}
    kw = dict(num_warmup=50, num_samples=100, target_accept=0.8, inverse_mass_matrix=SDS**2, step_size=0.5,
              adaptation="step_size", vectorize=False)
    first = batched_nuts(_gauss, init, np.array([0, 1]), random_seeds=[1, 2], programs=programs, **kw)
    second = batched_nuts(_gauss, init[:1], np.array([1]), random_seeds=[3], programs=programs, **kw)
    assert len(programs) == 1  # one lane compiled; the second batch (one target) reused it
    fresh = batched_nuts(_gauss, init[:1], np.array([1]), random_seeds=[3], **kw)
    for a, b in zip(second, fresh):
        np.testing.assert_array_equal(a, b)
    assert np.abs(first[0][1].mean(axis=(0, 1)) - MEANS[1]).max() < 1.0  # target 1's draws are about its mean
    batched_nuts(_gauss, init, np.array([0, 1]), random_seeds=[1, 2], programs=programs, **{**kw, "num_samples": 80})
    assert len(programs) == 2  # other settings: another program


def test_no_warmup_keeps_the_given_step_size():
    _, _, eps = _run("step_size", warmup=0)
    np.testing.assert_array_equal(eps, 0.5)
    with pytest.raises(ValueError, match="adaptation='stan': use 'window' or 'step_size'"):
        _run("stan")


def test_softplus_derivatives_are_exact():
    x = jnp.array([-800.0, -40.0, -3.0, -1e-9, 0.0, 1e-9, 2.0, 40.0, 800.0])
    with x64():
        x = x.astype(jnp.float64)
        g = jax.vmap(jax.grad(softplus))(x)
        np.testing.assert_allclose(np.asarray(g), np.asarray(jax.nn.sigmoid(x)), rtol=1e-15, atol=0)
        np.testing.assert_allclose(np.asarray(softplus(x)), np.logaddexp(np.asarray(x), 0.0), rtol=1e-15, atol=0)
        # second derivatives, forward and reverse over forward, s (1 - s), at 0 too
        s1s = np.asarray(jax.nn.sigmoid(x) * jax.nn.sigmoid(-x))  # s (1 - s) without cancellation
        for h in (jax.jacfwd(jax.jacfwd(softplus)), jax.hessian(softplus), jax.grad(jax.grad(softplus))):
            np.testing.assert_allclose(np.asarray(jax.vmap(h)(x)), s1s, rtol=1e-14, atol=1e-300)
        assert float(jax.grad(jax.grad(softplus))(0.0)) == 0.25


def test_horseshoe_batched_density_is_the_non_centered_loo_density():
    """``batched_refit_density().log_density(u, i) == loo_logp(to_model(u), i) + sum(log sd)`` (the log-Jacobian of
    ``beta = z * sd``), at random points and for every i."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(20, 6))
    y = (X[:, 0] + rng.normal(size=20) > 0).astype(int)
    with x64():
        model = pl.models.LogisticRegression(X, y, prior="horseshoe", p0=2)
        target = model.batched_refit_density()
        u = jnp.asarray(rng.normal(size=(7, model.dim)))
        for i in (0, 7, 19):
            got = jax.vmap(target.log_density, in_axes=(0, None))(u, i)
            ref = jax.vmap(lambda v: model.loo_logp(target.to_model(v), i) + jnp.sum(model._log_sd(v)[1:]))(u)
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-12, atol=1e-10)


def test_start_draws_follow_the_loo_weights():
    rng = np.random.default_rng(3)
    ll = np.log(np.array([1.0, 1.0, 0.5, 0.25]))  # weights 1 / p(y_i | theta): 1, 1, 2, 4 -> 4 first with p = 1/2
    first = np.array([start_draws(rng, 4, 2, ll)[0] for _ in range(4000)])
    freq = np.bincount(first, minlength=4) / first.size
    np.testing.assert_allclose(freq, [0.125, 0.125, 0.25, 0.5], atol=5 * np.sqrt(0.25 / 4000))
    picks = start_draws(rng, 4, 4, ll)
    assert sorted(picks.tolist()) == [0, 1, 2, 3]  # distinct draws
    heavy = np.array([0.0, 0.0, -800.0, 0.0])  # one weight dominates: still C distinct draws
    for _ in range(20):
        picks = start_draws(rng, 4, 3, heavy)
        assert picks[0] == 2 and len(set(picks.tolist())) == 3


def test_refit_settings_warm_start():
    model = pl.JaxModel({"mu": ((), None)}, lambda v: -0.5 * v["mu"] ** 2,
                        lambda v: -0.5 * (jnp.array([1.0, 0.5, 2.0]) - v["mu"]) ** 2, obs_dims=("obs",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = sample_nuts(model, num_chains=2, num_warmup=400, num_samples=200, random_seed=1)
    eps = float(np.median(data["sample_stats"]["step_size"].values[:, -1]))
    assert fit_step_size(data) == eps > 0
    s = refit_settings(data)
    assert s["adapt"] == "warm" and s["warmup_warm"] == min(400, WARM_WARMUP) == 150 and s["step_size"] == eps
    assert s["warmup"] == 400  # the model's own samplers (batched=False, Stan) start cold: the fit's warmup
    assert refit_settings(data, {"warmup": 80})["warmup_warm"] == 80
    w = refit_settings(data, {"adapt": "window"})
    assert w["adapt"] == "window" and w["warmup"] == 400
    assert refit_settings(data, warm=False)["adapt"] == "window"
    with pytest.raises(ValueError, match="adapt='fast' must be 'warm'"):
        refit_settings(data, {"adapt": "fast"})
    for key in ("step_size", "warmup_warm"):
        with pytest.raises(ValueError, match=f"unknown setting '{key}'"):
            refit_settings(data, {key: 0.1})
    data["posterior"].attrs["method"] = "laplace"
    approx = refit_settings(data)
    assert approx["adapt"] == "window" and approx["step_size"] is None and approx["warmup"] == 1000
