"""``ppl_loo.workflow.downstream.loo_score``: the CRPS and SCRPS of weighted draws, binary and other discrete outcomes.

Known answers: binary draws with weight ``p`` on 1 have ``E|Y - y| = 1 - p`` (``y = 1``) and ``E|Y - Y'| = 2 p (1 -
p)``, so ``SCRPS = -A / G - log(G) / 2`` and ``CRPS = -(A - G / 2)`` in closed form, also for ``p = 1e-20``, where
``arviz_stats``' ``2 F^- + w - 1`` cancels; a discrete outcome's ``G`` equals the brute-force double sum
``sum_s sum_t w_s w_t |y_s - y_t|``; on draws that are not all equal, ``arviz_stats``' array function to 1e-10.

A Bernoulli model (PyMC logistic regression, ``model=`` given): the scores are the closed form at the LOO probability
``p_i = sum_s w_s p(y_i = 1 | theta_s)`` (here from the PSIS weights and the posterior draws of the coefficients), to
1e-8; ``arviz_stats.loo_score``' scores of the 0/1 draws are the same closed form at ``sum_s w_s y_rep_s`` to 1e-10,
which is ``p_i`` to its Monte Carlo error (4.5 SDs ``sqrt(sum_s w_s^2 p_s (1 - p_s))``), so the means agree to 4 SEs;
without the model, ``arviz_stats``' numbers to 1e-10. Strongly separated classes, where many observations' 0/1 draws
are all equal (refused without the model, as ``arviz_stats`` has no number there), get the closed form. A Poisson
model's constant draws (no closed form) are refused before anything is simulated; their CRPS is ``-|0 - y|``.
"""

from __future__ import annotations

import warnings

import arviz_stats as azs
import numpy as np
import pytest
from arviz_stats.base import array_stats

import ppl_loo as pl
from ppl_loo.workflow.downstream import points
from ppl_loo.workflow.downstream.loo_score import bernoulli_scores, weighted_scores


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _arviz(y_rep, y_obs, lw, kind):
    return np.asarray(array_stats.loo_score(y_rep, y_obs, lw, kind=kind, chain_axis=None, draw_axis=-1)).ravel()


@pytest.mark.parametrize("p", [0.5, 0.13, 1e-20])
def test_binary_draws_closed_form(p):
    # 0/1 draws, the weight p on the ones, observed y = 1 and y = 0
    y_rep = np.array([[0.0, 1.0, 0.0, 1.0, 0.0]] * 2)
    w = np.array([(1 - p) / 3, p / 2, (1 - p) / 3, p / 2, (1 - p) / 3])
    lw = np.log(np.vstack([w, w]))
    y_obs = np.array([1.0, 0.0])
    g = 2 * p * (1 - p)
    a = np.array([1 - p, p])
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "crps"), -(a - g / 2), rtol=1e-12, atol=0)
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "scrps"), -a / g - 0.5 * np.log(g), rtol=1e-12)


def test_discrete_draws_equal_the_double_sum_and_arviz_stats():
    rng = np.random.default_rng(0)
    y_rep = rng.poisson(2.0, size=(20, 300)).astype(float)  # ties everywhere
    lw = rng.normal(size=(20, 300))
    y_obs = rng.poisson(2.0, size=20).astype(float)
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    a = np.sum(w * np.abs(y_rep - y_obs[:, None]), axis=1)
    g = np.einsum("ns,nt,nst->n", w, w, np.abs(y_rep[:, :, None] - y_rep[:, None, :]))
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "scrps"), -a / g - 0.5 * np.log(g), rtol=1e-12)
    np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, "crps"), -(a - g / 2), rtol=1e-12)
    for kind in ("crps", "scrps"):
        np.testing.assert_allclose(weighted_scores(y_rep, y_obs, lw, kind), _arviz(y_rep, y_obs, lw, kind),
                                   rtol=0, atol=1e-10)
    # continuous draws, and draws of zero weight (padding) change nothing
    y_rep = rng.normal(size=(20, 300))
    for kind in ("crps", "scrps"):
        got = weighted_scores(y_rep, y_obs, lw, kind)
        np.testing.assert_allclose(got, _arviz(y_rep, y_obs, lw, kind), rtol=0, atol=1e-10)
        padded = weighted_scores(np.c_[y_rep, np.full((20, 7), 5.0)], y_obs, np.c_[lw, np.full((20, 7), -np.inf)],
                                 kind)
        np.testing.assert_allclose(padded, got, rtol=0, atol=1e-12)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _logistic_fit(X, y, scale, seed):
    """A PyMC logistic regression ``y ~ Bernoulli(sigmoid(X b))``, ``b ~ N(0, scale^2)`` (2 x 500 draws), with its
    log-likelihood and posterior predictive groups, and ``pl.loo`` adapting only the flagged observations."""
    pm = pytest.importorskip("pymc")
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, scale, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    idata = _quiet(pm.sample, draws=500, tune=500, chains=2, cores=1, random_seed=seed, progressbar=False, model=m,
                   idata_kwargs={"log_likelihood": True})
    idata = _quiet(pm.sample_posterior_predictive, idata, model=m, random_seed=seed + 1, progressbar=False,
                   extend_inferencedata=True)
    res = _quiet(pl.loo, idata, m, progressbar=False, random_seed=1, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    return m, idata, res


def _bernoulli_score(p, y, kind):
    """The score of the Bernoulli predictive ``P(Y = 1) = p`` at ``y``, from ``A = |y - p|``, ``G = 2 p (1 - p)``."""
    a, g = np.abs(y - p), 2 * p * (1 - p)
    return -(a - g / 2) if kind == "crps" else -a / g - 0.5 * np.log(g)


def _psis_probability(idata, res, X):
    """Per observation: the normalized PSIS weights ``w (S, n)`` of ``res`` and the per-draw probabilities ``p_s
    (S, n)`` of the logistic regression at the posterior draws, computed here from ``X`` and the draws of ``b``."""
    n = X.shape[0]
    lw = res.log_weights.transpose("chain", "draw", ...).values.reshape(-1, n)
    w = np.exp(lw - lw.max(axis=0))
    w /= w.sum(axis=0)
    b = idata["posterior"]["b"].transpose("chain", "draw", ...).values.reshape(-1, X.shape[1])
    return w, _sigmoid(b @ X.T)


@pytest.fixture(scope="module")
def logistic():
    """A PyMC logistic regression (60 observations, 2 features) with its plain-PSIS ``pl.loo`` result."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    y = (rng.uniform(size=60) < _sigmoid(X @ np.array([0.8, -0.5]))).astype(int)
    return (*_logistic_fit(X, y, 1.0, 1), X, y)


def test_binary_model_agrees_with_arviz_stats_where_weights_are_psis(logistic):
    m, idata, res, X, y = logistic
    pp = idata["posterior_predictive"]["y"].values.reshape(-1, 60)
    assert np.all(pp.min(axis=0) < pp.max(axis=0))  # no constant draws: arviz_stats' SCRPS is defined everywhere
    w, p_s = _psis_probability(idata, res, X)
    p_loo = np.sum(w * p_s, axis=0)  # the LOO predictive probability: the weighted mean of p(y_i = 1 | theta_s)
    p_hat = np.sum(w * pp, axis=0)  # the same from the weighted 0/1 draws y_rep (arviz_stats' input)
    sd = np.sqrt(np.sum(w**2 * p_s * (1 - p_s), axis=0))  # its Monte Carlo SD given the weights
    for kind in ("crps", "scrps"):
        got = _quiet(pl.loo_score, idata, res, model=m, kind=kind, random_seed=0, pointwise=True)
        ref = _quiet(azs.loo_score, idata, kind=kind, pointwise=True, log_weights=res.log_weights,
                     pareto_k=res.pareto_k_psis)
        psis = got.pointwise.weights.values == "psis"
        assert psis.sum() >= 55
        # with the model: the closed form of the Bernoulli predictive with P(Y = 1) = p_loo (nothing simulated)
        exact = _bernoulli_score(p_loo, y, kind)
        np.testing.assert_allclose(got.pointwise.values[psis], exact[psis], rtol=1e-8, atol=1e-12)
        # arviz_stats' score of the 0/1 draws is the same closed form at p_hat (exactly), and p_hat is p_loo to its
        # Monte Carlo error
        np.testing.assert_allclose(ref.pointwise.values, _bernoulli_score(p_hat, y, kind), rtol=0, atol=1e-10)
        assert np.all(np.abs(p_hat - p_loo) < 4.5 * sd)
        # ... so the means agree to the Monte Carlo error of arviz_stats' draws (delta method)
        eps = 1e-6
        slope = (_bernoulli_score(p_loo + eps, y, kind) - _bernoulli_score(p_loo - eps, y, kind)) / (2 * eps)
        se_mean = np.sqrt(np.sum((slope * sd) ** 2)) / 60
        assert abs(got.mean - ref.mean) < 4 * se_mean, (kind, got.mean, ref.mean, se_mean)
        assert np.all(np.isfinite(got.pointwise.values))
        # the scores of the draws with the same weights (what pl.loo_score computes without a closed form):
        # arviz_stats' numbers, also through pl.loo_score without the model where nothing adapted needs it
        lw = res.log_weights.transpose("chain", "draw", ...).values.reshape(-1, 60)
        np.testing.assert_allclose(weighted_scores(pp.T, y, lw.T, kind), ref.pointwise.values, rtol=0, atol=1e-10)
        if np.all(psis):
            draws = _quiet(pl.loo_score, idata, res, kind=kind, pointwise=True)
            np.testing.assert_allclose(draws.pointwise.values, ref.pointwise.values, rtol=0, atol=1e-10)
    # plain PSIS-LOO (no model): arviz_stats' own numbers
    plain = _quiet(pl.loo, idata, None, progressbar=False)
    got, ref = _quiet(pl.loo_score, idata, plain, kind="scrps"), _quiet(azs.loo_score, idata, kind="scrps")
    assert got.mean == pytest.approx(ref.mean, abs=1e-10)


def test_separated_logistic_regression_closed_form():
    """Strongly separated classes: many observations have all their 0/1 draws equal (arviz_stats: NaN or a value
    of its rounding error there; ``pl.loo_score`` refused them before), and the SCRPS is the closed form at the LOO
    probability."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 2))
    y = (rng.uniform(size=80) < _sigmoid(X @ np.array([5.0, -4.0]))).astype(int)
    m, idata, res = _logistic_fit(X, y, 3.0, 4)
    pp = idata["posterior_predictive"]["y"].values.reshape(-1, 80)
    constant = pp.min(axis=0) == pp.max(axis=0)
    assert constant.sum() >= 5
    with pytest.raises(ValueError, match=r"the scrps of \d+ observation\(s\) .* is not defined by their draws"):
        _quiet(pl.loo_score, idata, res, kind="scrps")  # no model: the draws alone, as arviz_stats
    w, p_s = _psis_probability(idata, res, X)
    p_loo = np.sum(w * p_s, axis=0)
    got = _quiet(pl.loo_score, idata, res, model=m, kind="scrps", pointwise=True)
    psis = got.pointwise.weights.values == "psis"
    assert np.all(psis[constant])
    p_y = np.where(y == 1, p_loo, 1 - p_loo)
    exact = -1 / (2 * p_y) - 0.5 * np.log(2 * p_loo * (1 - p_loo))
    np.testing.assert_allclose(got.pointwise.values[psis], exact[psis], rtol=1e-8)
    assert np.all(np.isfinite(got.pointwise.values)) and got.mean == pytest.approx(np.mean(got.pointwise.values))
    crps = _quiet(pl.loo_score, idata, res, model=m, kind="crps", pointwise=True)
    np.testing.assert_allclose(crps.pointwise.values[psis], -((y - p_loo) ** 2)[psis], rtol=1e-8, atol=1e-15)
    # the adapted observations' probabilities are the LOO expectations under their own weights
    p_adapted = _quiet(pl.loo_expectations, idata, res, lambda params: _sigmoid(params["b"] @ X.T), model=m).values
    p_y = np.where(y == 1, p_adapted, 1 - p_adapted)
    np.testing.assert_allclose(got.pointwise.values, -1 / (2 * p_y) - 0.5 * np.log(2 * p_adapted * (1 - p_adapted)),
                               rtol=1e-8)


@pytest.mark.parametrize("p_s", [[0.1, 0.9], [1e-3, 3e-3], [1e-12, 0.5]])
def test_bernoulli_scores_closed_form(p_s):
    # two draws of equal weight with P(Y = 1 | theta_s) = p_s: their mixture is Bernoulli(mean p_s), exactly the 0/1
    # draws below with the weights (1 - p, p); its E|Y - Y'| is 2 p (1 - p), not the mean of 2 p_s (1 - p_s)
    p = float(np.mean(p_s))
    y_rep, lw = np.array([[0.0, 1.0]] * 2), np.log([[1 - p, p]] * 2)
    y_obs = np.array([0.0, 1.0])
    for kind in ("crps", "scrps"):
        np.testing.assert_allclose(bernoulli_scores(np.array([p, p]), y_obs, kind),
                                   weighted_scores(y_rep, y_obs, lw, kind), rtol=1e-9)
    if p_s == [0.1, 0.9]:  # G = 0.5, where the mean of the per-draw 2 p_s (1 - p_s) is 0.18
        np.testing.assert_allclose(bernoulli_scores(np.array([p, p]), y_obs, "scrps"), -0.5 / 0.5 - 0.5 * np.log(0.5))
    assert not np.any(np.isfinite(bernoulli_scores(np.array([0.0, 1.0]), np.array([1.0, 1.0]), "scrps")))


@pytest.fixture(scope="module")
def poisson():
    """A PyMC Poisson regression whose rates at the left end are so small that all the draws of ``y_rep`` there are
    0 (no closed form of the predictive: the SCRPS uses the draws)."""
    pm = pytest.importorskip("pymc")
    x = np.linspace(-6.0, 3.0, 30)
    y = np.random.default_rng(7).poisson(np.exp(0.5 + 1.5 * x))
    with pm.Model() as m:
        a = pm.Normal("a", 0.0, 3.0)
        b = pm.Normal("b", 0.0, 3.0)
        pm.Poisson("y", pm.math.exp(a + b * x), observed=y)
    idata = _quiet(pm.sample, draws=500, tune=500, chains=2, cores=1, random_seed=1, progressbar=False, model=m,
                   idata_kwargs={"log_likelihood": True})
    idata = _quiet(pm.sample_posterior_predictive, idata, model=m, random_seed=2, progressbar=False,
                   extend_inferencedata=True)
    res = _quiet(pl.loo, idata, m, progressbar=False, random_seed=1, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    return m, idata, res, y


def test_constant_draws_refused_before_simulating(poisson):
    m, idata, res, y = poisson
    pp = idata["posterior_predictive"]["y"].values.reshape(-1, y.size)
    constant = np.flatnonzero((pp.min(axis=0) == pp.max(axis=0)) & (np.asarray(res.transform.values) == "psis"))
    assert constant.size >= 1 and np.all(pp[:, constant] == 0)
    calls, before = [], points.BUILT["points"]

    def simulate(params, rng):
        calls.append(1)
        return np.zeros((len(params["a"]), y.size))

    j = int(constant[0])
    with pytest.raises(ValueError, match=rf"scrps of {constant.size} observation\(s\) \(y\[y_dim_0={j}\]"):
        _quiet(pl.loo_score, idata, res, model=m, kind="scrps", random_seed=0, simulate=simulate)
    assert calls == [] and points.BUILT["points"] == before  # refused before any point was built or simulated
    # arviz_stats gives NaN there (0 / 0)
    ref = _quiet(azs.loo_score, idata, kind="scrps", pointwise=True, log_weights=res.log_weights,
                 pareto_k=res.pareto_k_psis)
    assert np.isnan(ref.pointwise.values[j])
    # the CRPS of a constant predictive is defined: -|0 - y_j|, as arviz_stats
    crps = _quiet(pl.loo_score, idata, res, model=m, kind="crps", random_seed=0, pointwise=True)
    assert crps.pointwise.values[constant] == pytest.approx(-np.abs(y[constant]), abs=1e-12)
