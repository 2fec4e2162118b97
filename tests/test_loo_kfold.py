"""``pl.loo_kfold``: K-fold CV on batched fold fits, against the closed form of a conjugate regression.

Linear regression with known noise and a Gaussian prior: the posterior without fold ``k`` is Gaussian,
``N(m_-k, V_-k)``, so the exact K-fold ``elpd_i`` of ``i`` in fold ``k`` is ``log N(y_i | x_i m_-k, sigma^2 +
x_i V_-k x_i)``. The batched fold fits (BlackJAX NUTS, all folds x chains in one run) must match it within 4 of
their own Monte Carlo SEs, pointwise and in total, for a JAX model and a PyMC model. The folds (random,
stratified, grouped, explicit) are checked against R ``loo``'s rules, the result against ``pl.compare`` and
``arviz_stats.compare``, and the models K-fold cannot refit against their error.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import arviz_stats as azs
import jax
import jax.numpy as jnp
import jax.scipy.stats as st
import numpy as np
import pandas as pd
import pytest
from arviz_stats.utils import ELPDData
from gaussian_models import LinearRegressionKnownNoise
from scipy import stats
from scipy.special import logsumexp

import ppl_loo as pl
from ppl_loo.jax_settings import x64
from ppl_loo.workflow.exact.loo_kfold import check_kfold_model, fold_density, kfold_split

ROOT = Path(__file__).resolve().parents[1]
N, SIGMA, TAU = 30, 1.0, 3.0
SETTINGS = {"warmup": 300, "draws": 500}  # per fold fit, 4 chains (the fit's)


def _regression():
    rng = np.random.default_rng(4)
    X = np.column_stack([np.ones(N), rng.normal(size=N)])
    y = X @ np.array([0.5, 1.0]) + rng.normal(size=N)
    y[3] += 4.0  # an outlier: its fold's predictive density is far from the in-sample one
    return LinearRegressionKnownNoise(X, y, sigma=SIGMA, tau=TAU)


MODEL = _regression()
DATA = MODEL.exact_draws(n_chains=4, n_draws=500, seed=2)  # exact posterior draws, a log_likelihood group


def exact_kfold(model, folds):
    """The exact K-fold elpd_i: the Gaussian posterior predictive of each observation without its fold."""
    out = np.empty(model.n_obs)
    for k in np.unique(folds):
        test = np.flatnonzero(folds == k)
        m, V = model.posterior(drop=test)
        x = model.X[test]
        out[test] = stats.norm.logpdf(model.y[test], x @ m, np.sqrt(model.sigma**2 + np.einsum("ij,jk,ik->i", x, V, x)))
    return out


def _kfold(data, model, settings=SETTINGS, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fold fit's R-hat of 1.011 from 2,000 draws warns (fold_info checked below)
        return pl.loo_kfold(data, model, progressbar=False, refit_options=settings, **kw)


@pytest.fixture(scope="module")
def jax_kfold():
    return _kfold(DATA, MODEL, k=5, random_seed=7)


def _check_closed_form(res, model, K, adapt="warm"):
    folds = res.folds.values.ravel()
    exact = exact_kfold(model, folds)
    est, mcse = res.elpd_i.values.ravel(), res.mcse_elpd_i.values.ravel()
    # the bound below is not vacuous: the MCSEs are small (largest at the outlier, whose p(y_i | theta) has a tail)
    assert np.all(mcse > 0) and np.all(mcse < 0.15) and np.median(mcse) < 0.02
    z = (est - exact) / mcse
    assert np.max(np.abs(z)) <= 4.0, (np.abs(z).max(), est[np.argmax(np.abs(z))], exact[np.argmax(np.abs(z))])
    assert abs(res.elpd - exact.sum()) <= 4.0 * res.mcse_elpd, (res.elpd, exact.sum(), res.mcse_elpd)
    # the fold's errors share its draws: the total's MCSE is not the quadrature sum of the pointwise ones
    assert res.mcse_elpd > np.sqrt(np.sum(mcse**2))
    # R kfold's summaries
    n = folds.size
    assert res.elpd == pytest.approx(np.sum(est), rel=1e-12)
    assert res.se == pytest.approx(np.sqrt(n * np.var(est, ddof=1)), rel=1e-10)  # R: sqrt(N) sd(elpd_i)
    ll = DATA["log_likelihood"]["y"].values.reshape(-1, n)
    lpd = logsumexp(ll, axis=0) - np.log(ll.shape[0])
    assert res.p == pytest.approx(np.sum(lpd - est), rel=1e-10)
    np.testing.assert_allclose(res.p_kfold_i.values.ravel(), lpd - est, rtol=1e-10)
    # the folds' fits: converged, no divergence, the settings asked for
    assert res.kind == "loo_kfold" and isinstance(res, ELPDData) and res.n_folds == K and res.n_data_points == N
    assert res.n_samples == 4 * SETTINGS["draws"]
    assert sorted(res.fold_info) == list(range(1, K + 1))
    for k, rec in res.fold_info.items():
        assert rec["n_test"] == int(np.sum(folds == k))
        assert rec["rhat_max"] <= 1.02 and rec["rhat_loglik"] <= 1.02 and rec["divergences"] == 0
        assert rec["chains"] == 4 and rec["draws"] == SETTINGS["draws"] and rec["warmup"] == SETTINGS["warmup"]
        assert rec["adapt"] == adapt
        assert rec["sampler"] == f"BlackJAX NUTS, one batched run of {K} fold fits"
    assert res.seconds > 0
    return exact


def test_jax_kfold_matches_the_closed_form(jax_kfold):
    res = jax_kfold
    exact = _check_closed_form(res, MODEL, 5)
    sizes = np.bincount(res.folds.values.ravel())[1:]
    assert sizes.tolist() == [6] * 5
    assert res.elpd_i.dims == ("obs",) and res.folds.dims == ("obs",)
    # K-fold predicts the outlier from fits without it: far below its in-sample lpd_i
    assert res.p_kfold_i.values[3] > 1.0 and exact[3] < -5.0
    assert "5-fold cross validation" in str(res)


def test_kfold_with_the_windowed_adaptation_matches_the_closed_form():
    """``refit_options={"adapt": "window"}``: the fold fits start at uniformly chosen full-data draws and adapt step
    size and mass matrix over the warmup (the default warm start resamples the draws with the fold's weights and
    adapts the step size alone)."""
    res = _kfold(DATA, MODEL, settings={**SETTINGS, "adapt": "window"}, k=5, random_seed=7)
    _check_closed_form(res, MODEL, 5, adapt="window")


def test_pymc_kfold_matches_the_closed_form():
    """The same regression as a PyMC model (its log density through PyTensor's JAX backend), 4 folds."""
    pm = pytest.importorskip("pymc")
    with pm.Model(coords={"coef": [0, 1], "obs": np.arange(N)}) as m:
        beta = pm.Normal("beta", 0.0, TAU, dims="coef")
        pm.Normal("y", pm.math.dot(MODEL.X, beta), SIGMA, observed=MODEL.y, dims="obs")
    res = _kfold(DATA, m, k=4, random_seed=3)
    _check_closed_form(res, MODEL, 4)
    assert sorted(np.bincount(res.folds.values)[1:].tolist()) == [7, 7, 8, 8]


def test_explicit_folds_are_used_as_given_and_compare_accepts_the_result(jax_kfold):
    folds = np.repeat([1, 2, 3], 10)  # contiguous blocks, R's and arviz_stats' numbering
    res = _kfold(DATA, MODEL, folds=folds, random_seed=1)
    assert res.n_folds == 3 and res.folds.values.tolist() == folds.tolist()
    assert np.max(np.abs(res.elpd_i.values - exact_kfold(MODEL, folds)) / res.mcse_elpd_i.values) <= 4.0
    loo = pl.loo(DATA, MODEL, progressbar=False, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    with pytest.warns(UserWarning, match="Comparing LOO-CV to K-fold-CV"):  # arviz_stats' own note
        table = pl.compare({"kfold": jax_kfold, "kfold3": res, "loo": loo})
    for name, r in (("kfold", jax_kfold), ("kfold3", res), ("loo", loo)):
        assert table.loc[name, "elpd"] == r.elpd and table.loc[name, "se"] == r.se and table.loc[name, "p"] == r.p
    assert table.loc["kfold", "n_refit"] is pd.NA and np.isnan(table.loc["kfold", "diff_flagged"])
    with pytest.warns(UserWarning, match="Comparing LOO-CV to K-fold-CV"):
        plain = azs.compare({"kfold": jax_kfold, "loo": loo}, round_to="none")
    assert plain.loc["kfold", "elpd"] == jax_kfold.elpd
    two = pl.compare({"kfold": jax_kfold, "kfold3": res})  # kfold against kfold: no warning, the diff's SE
    d = jax_kfold.elpd_i.values - res.elpd_i.values
    assert abs(two.loc[two.index[1], "elpd_diff"]) == pytest.approx(abs(d.sum()), rel=1e-10)
    assert two.loc[two.index[1], "dse"] == pytest.approx(np.sqrt(N * np.var(d, ddof=1)), rel=1e-10)  # R: se_diff


def test_random_folds_are_balanced_and_reproducible():
    for n, K in ((30, 5), (31, 4), (10, 10), (7, 2)):
        f = kfold_split(n, K, random_seed=5)
        sizes = np.bincount(f, minlength=K + 1)[1:]
        assert f.shape == (n,) and f.min() == 1 and f.max() == K and sizes.max() - sizes.min() <= 1
        assert np.array_equal(f, kfold_split(n, K, random_seed=5))
    assert not np.array_equal(kfold_split(30, 5, random_seed=5), kfold_split(30, 5, random_seed=6))


def test_stratified_folds_spread_every_label_evenly():
    rng = np.random.default_rng(0)
    labels = rng.choice(np.array(["a", "b", "c"]), size=47, p=[0.6, 0.3, 0.1])
    f = kfold_split(47, 5, stratify_by=labels, random_seed=2)
    for lab in np.unique(labels):
        counts = np.bincount(f[labels == lab], minlength=6)[1:]
        assert counts.max() - counts.min() <= 1, (lab, counts)
    sizes = np.bincount(f)[1:]
    assert sizes.max() - sizes.min() <= 1
    assert np.array_equal(f, kfold_split(47, 5, stratify_by=labels, random_seed=2))


def test_grouped_folds_keep_groups_whole():
    rng = np.random.default_rng(1)
    groups = rng.integers(0, 13, size=60)
    f = kfold_split(60, 4, group_by=groups, random_seed=3)
    for g in np.unique(groups):
        assert np.unique(f[groups == g]).size == 1  # no group split over folds
    per_fold = [np.unique(groups[f == k]).size for k in range(1, 5)]
    assert sum(per_fold) == 13 and max(per_fold) - min(per_fold) <= 1
    g4 = np.array([3, 3, 1, 2, 2, 4, 1])  # exactly K groups: the j-th in sorted order is fold j (R)
    assert kfold_split(7, 4, group_by=g4, random_seed=0).tolist() == [3, 3, 1, 2, 2, 4, 1]
    with pytest.raises(ValueError, match=r"group_by: 3 groups cannot fill k=4 folds"):
        kfold_split(6, 4, group_by=[1, 1, 2, 2, 3, 3])


@pytest.mark.parametrize("folds, match", [
    (np.repeat([1, 2, 3], 9), r"folds has 27 entries .* one fold id per observation: 30"),
    (np.repeat([1, 2, 4], 10), r"folds: fold\(s\) \[3\] of 1 to 4 have no observations"),
    (np.repeat([1.0, 2.5, 3.0], 10), r"folds must hold whole numbers 1 to K .* \[2\.5"),
    (np.repeat([0, 1, 2], 10), r"folds are numbered 1 to K, as in R loo .* got 0 \(0-based ids: add 1\)"),
    (np.repeat(["a", "b", "c"], 10), r"folds must hold whole numbers 1 to K \(fold ids\); got dtype"),
    (np.repeat([True, False], 15), r"folds must hold whole numbers"),
    (np.ones(30, int), r"folds: every observation is in fold 1"),
])
def test_explicit_folds_are_validated(folds, match):
    with pytest.raises(ValueError, match=match):
        pl.loo_kfold(DATA, MODEL, folds=folds, random_seed=1, progressbar=False)


def test_bad_arguments_name_themselves():
    folds = np.repeat([1, 2, 3], 10)
    cases = [
        (dict(folds=folds, k=4), r"k=4 contradicts folds, which has 3 folds"),
        (dict(folds=folds, stratify_by=folds), r"folds= cannot be combined with stratify_by= or group_by="),
        (dict(stratify_by=folds, group_by=folds), r"stratify_by= and group_by= cannot be used together"),
        (dict(stratify_by=folds[:5]), r"stratify_by has 5 entries .* one label per observation: 30"),
        (dict(k=1), r"k=1: the number of folds must be at least 2"),
        (dict(k=31), r"at most the number of observations \(30\)"),
        (dict(k=2.5), r"k=2.5: give the number of folds as a whole number"),
        (dict(refit_options={"checkpoint": "x.json"}),
         r"refit_options: \['checkpoint'\] do not apply to pl.loo_kfold"),
        (dict(refit_options={"chains": 1}), r"at least 2 chains"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            pl.loo_kfold(DATA, MODEL, random_seed=1, progressbar=False, **kw)
    with pytest.raises(TypeError, match=r"random_seed='seven'"):
        pl.loo_kfold(DATA, MODEL, random_seed="seven")
    with pytest.raises(ValueError, match=r"pl.loo_kfold needs the model"):
        pl.loo_kfold(DATA, None, random_seed=1)


def test_non_factorizing_model_is_refused():
    """A JAX model with its own leave-one-out density (a likelihood that does not factorize): the posterior without
    a fold is not known to pl.loo_kfold, which says so and what to use instead."""
    y = MODEL.y

    def log_lik(v):
        return st.norm.logpdf(y, v["mu"], SIGMA)

    def loo_log_density(v, i):
        return st.norm.logpdf(v["mu"], 0.0, TAU) + jnp.sum(log_lik(v)) - log_lik(v)[i]

    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, TAU), log_lik,
                        loo_log_density=loo_log_density, obs_dims=("obs",), observed=y)
    with pytest.raises(NotImplementedError, match=r"pl.loo_kfold needs a likelihood that factorizes over observations.*"
                                                  r"Use pl.loo\(data, model\).*arviz_stats.loo_kfold"):
        pl.loo_kfold(DATA, model, k=5, random_seed=1)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler for the Stan bridge")
def test_stan_program_is_refused():
    data = {"N": N, "y": MODEL.y, "sigma": SIGMA, "mu0": 0.0, "tau0": TAU}
    sm = pl.StanModel(ROOT / "stan_models" / "normal_known_sigma.stan", data)
    with pytest.raises(NotImplementedError, match=r"pl.loo_kfold does not support Stan models: .* not without a fold.*"
                                                  r"pl.loo\(data, model, refit=...\).*arviz_stats.loo_kfold"):
        pl.loo_kfold(DATA, sm, k=5, random_seed=1)


def _fold_identity(model, theta, pairs):
    """The fold density with one observation per fold is the batched refit density; a fold of two drops both."""
    target = check_kfold_model(pl.as_model(model))
    n = pl.as_model(model).n_obs
    one_hot = np.eye(n)
    dens = fold_density(pl.as_model(model), target, one_hot)
    u = jax.vmap(target.from_model)(theta) if target.from_model is not None else theta
    for j in (0, 1, n - 1):
        a = jax.vmap(lambda x: dens.log_density(x, j))(u)
        b = jax.vmap(lambda x: target.log_density(x, j))(u)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-9)
    a_, b_ = pairs
    mask = np.zeros((1, n))
    mask[0, [a_, b_]] = 1.0
    two = fold_density(pl.as_model(model), target, mask)
    to_model = target.to_model or (lambda x: x)
    got = jax.vmap(lambda x: two.log_density(x, 0))(u)
    want = jax.vmap(lambda x: target.log_density(x, a_) - model.loglik(to_model(x))[b_])(u)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-9)


def test_fold_density_is_the_refit_density_without_the_fold():
    """Known answers without MCMC: the conjugate regression (no reparameterization) and the horseshoe logistic
    regression, whose batched refits sample a non-centered form with its log-Jacobian."""
    with x64():
        theta = jnp.asarray(np.random.default_rng(0).normal(size=(6, MODEL.dim)))
        _fold_identity(MODEL, theta, (2, 7))
        rng = np.random.default_rng(4)
        X = rng.normal(size=(20, 5))
        y = (X[:, 0] + rng.normal(size=20) > 0).astype(int)
        hs = pl.models.LogisticRegression(X, y, prior="horseshoe", p0=2)
        assert pl.as_model(hs).batched_refit_density().to_model is not None
        theta = jnp.asarray(0.3 * np.random.default_rng(1).normal(size=(6, hs.dim)))
        _fold_identity(hs, theta, (0, 11))


def test_fold_fits_do_not_depend_on_the_batching(jax_kfold, monkeypatch):
    """Folds split over several batched runs (a memory budget of 2 folds per run: 3 runs, the last padded with a
    copy) give the same draws as one run of all 5: each fold has its own seed and starting draws."""
    import ppl_loo.workflow.exact.loo_kfold as kfold_module

    monkeypatch.setattr(kfold_module, "lanes_per_batch", lambda *a, **k: 2)
    res = _kfold(DATA, MODEL, k=5, random_seed=7)
    assert res.folds.values.tolist() == jax_kfold.folds.values.tolist()
    np.testing.assert_allclose(res.elpd_i.values, jax_kfold.elpd_i.values, rtol=1e-8, atol=1e-10)
    assert [rec["sampler"] for rec in res.fold_info.values()] == ["BlackJAX NUTS, one batched run of 2 fold fits"] * 4 \
        + ["BlackJAX NUTS, one batched run of 1 fold fit"]
