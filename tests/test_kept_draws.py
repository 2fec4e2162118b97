"""The after-LOO functions weight the draws ``elpd_i`` came from where it came from a refit or from mixture importance
sampling: the result keeps those draws (:mod:`ppl_loo.workflow.loo.kept`).

Known answers: the closed-form LOO posterior of the linear predictor ``x_i' beta`` of a Gaussian regression with
high-leverage outliers (normal, mean ``x_i' m_-i``, variance ``x_i' C_-i x_i``) and its LOO-PIT
``Phi((y_i - x_i' m_-i) / sqrt(sigma^2 + x_i' C_-i x_i))``, where plain PSIS (what these functions used before) is
off by more than a posterior sd; the mixture weights' identity ``log w_si = -ll_si - logsumexp_j(-ll_sj)``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gaussian_models import leverage_problem, leverage_regression
from linear_models import jax_model
from scipy import stats
from scipy.special import logsumexp

import ppl_loo as pl
from ppl_loo.numerics.weighted import weighted_summary
from ppl_loo.workflow.loo import kept as kept_module
from ppl_loo.workflow.loo.kept import KeptDraws


def _exact(m, i):
    """Mean and sd of x_i' beta under the LOO posterior, and the LOO-PIT of y_i."""
    mean, cov = m.posterior(drop=i)
    loc, var = m.X[i] @ mean, m.X[i] @ cov @ m.X[i]
    return loc, np.sqrt(var), stats.norm.cdf((m.y[i] - loc) / np.sqrt(m.sigma**2 + var))


def _lin(m):
    return lambda p: np.asarray(p["beta"]) @ m.X.T


def _cdf(m):
    return lambda p: stats.norm.cdf(m.y, np.asarray(p["beta"]) @ m.X.T, m.sigma)


def _plain_psis_mean(m, data, res, i):
    lw = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(-1, m.n_obs)
    beta = np.asarray(data["posterior"]["beta"].values).reshape(-1, m.dim)
    return float(weighted_summary(beta @ m.X[i], lw[:, i], "mean"))


@pytest.fixture(scope="module")
def refit_fit(tmp_path_factory):
    """The two-outlier regression (plain PSIS k-hat 1.4 at both), observation 0 refit, with a checkpoint."""
    m = leverage_regression(seed=1, n=40)
    data = m.exact_draws(n_chains=4, n_draws=1000, seed=11)
    checkpoint = tmp_path_factory.mktemp("kept") / "refits.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, m, progressbar=False, refit=[0], random_seed=1,
                     search={"transforms": ("pmm1",), "hbar": [1e-3]},
                     second_opinions={"mixture": False, "smc": False, "refit_options": {"checkpoint": str(checkpoint)}})
    return m, data, res, checkpoint


def test_refit_draws_give_the_loo_posterior_and_pit(refit_fit):
    m, data, res, _ = refit_fit
    assert res.transform.values[0] == "refit" and list(res.kept_log_weights["kept"].values) == [0]
    loc, sd, pit = _exact(m, 0)
    mean = pl.loo_expectations(data, res, _lin(m), model=m)
    got_sd = pl.loo_expectations(data, res, _lin(m), model=m, kind="sd")
    assert mean.weights.values[0] == "refit" and np.isnan(mean.pareto_k.values[0])  # no importance sampling
    assert abs(mean.values[0] - loc) < 0.1 * sd, (mean.values[0], loc, sd)  # 4,000 refit draws: 0.016 sd
    assert abs(got_sd.values[0] / sd - 1) < 0.1, (got_sd.values[0], sd)
    assert abs(_plain_psis_mean(m, data, res, 0) - loc) > 1.0 * sd  # what the fallback gave: measurably off
    got_pit = pl.loo_pit(data, res, model=m, cdf=_cdf(m))
    assert got_pit.weights.values[0] == "refit"
    assert abs(got_pit.values[0] - pit) < 0.02, (got_pit.values[0], pit)
    table = pl.compare({"refit": res})
    assert table.loc["refit", "n_weights_fallback"] == 0
    # the kept draws are plain data: written with the result and read back, the same numbers
    back = pl.LooResult.from_datatree(pl.add_loo(data, res))
    again = pl.loo_expectations(data, back, _lin(m), model=m)
    np.testing.assert_array_equal(again.values, mean.values)


def test_a_refit_read_from_a_checkpoint_falls_back_with_a_warning(refit_fit):
    """A checkpoint keeps the records, not the draws: the rerun's refit gives the same elpd_i, and its after-LOO
    weights fall back to plain PSIS, counted and named."""
    m, data, res, checkpoint = refit_fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rerun = pl.loo(data, m, progressbar=False, refit=[0], random_seed=1,
                       search={"transforms": ("pmm1",), "hbar": [1e-3]},
                       second_opinions={"mixture": False, "smc": False,
                                        "refit_options": {"checkpoint": str(checkpoint)}})
    assert rerun.elpd_i.values[0] == res.elpd_i.values[0] and rerun.kept_log_weights is None
    with pytest.warns(UserWarning, match=r"refit, mixture importance sampling or SMC.*plain PSIS weights"):
        got = pl.loo_expectations(data, rerun, _lin(m), model=m)
    assert got.weights.values[0] == "psis"
    assert pl.compare({"rerun": rerun}).loc["rerun", "n_weights_fallback"] == 1


def test_mixture_draws_give_the_loo_posterior():
    """A search that cannot fix the outliers (one small step of one transformation), SMC off: the mixture run's
    estimate is what elpd_i reports there, and its draws and weights are what the after-LOO functions use."""
    m = leverage_problem()
    data = m.exact_draws(n_chains=4, n_draws=1000, seed=1)
    model = jax_model(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, model, progressbar=False, random_seed=11, search={"transforms": ("pmm1",), "hbar": [1e-3]},
                     second_opinions={"mixture": True, "smc": False})
    assert res.transform.values[0] == "mixture", res.transform.values[:2]
    loc, sd, pit = _exact(m, 0)
    mean = pl.loo_expectations(data, res, _lin(m), model=model)
    got_sd = pl.loo_expectations(data, res, _lin(m), model=model, kind="sd")
    assert mean.weights.values[0] == "mixture" and np.isfinite(mean.pareto_k.values[0])
    assert abs(mean.values[0] - loc) < 0.15 * sd, (mean.values[0], loc, sd)
    assert abs(got_sd.values[0] / sd - 1) < 0.1, (got_sd.values[0], sd)
    assert abs(_plain_psis_mean(m, data, res, 0) - loc) > 1.0 * sd
    got_pit = pl.loo_pit(data, res, model=model, cdf=_cdf(m))
    assert got_pit.weights.values[0] == "mixture" and abs(got_pit.values[0] - pit) < 0.03, (got_pit.values[0], pit)
    # one set of draws for every mixture observation, each with its own weights
    kept = res.kept_log_weights
    assert set(kept["kept_source"].values) == {"mixture"} and set(kept["kept_set"].values) == {0}


def test_mixture_weights_identity_and_the_budget(monkeypatch):
    rng = np.random.default_rng(0)
    draws, ll = rng.normal(size=(2, 50, 3)), rng.normal(size=(100, 4))
    kept = KeptDraws()
    kept.add_mixture(draws, ll)
    kept.add_refit(2, rng.normal(size=(2, 30, 3)))
    out = kept.arrays(np.array(["mixture", "psis", "refit", "mixture"]))
    lw = out["kept_log_weights"]
    assert list(lw["kept"].values) == [0, 3, 2] and list(lw["kept_source"].values) == ["mixture", "mixture", "refit"]
    np.testing.assert_allclose(lw.values[1], -ll[:, 3] - logsumexp(-ll, axis=1), rtol=1e-14)
    assert np.all(lw.values[2, :60] == 0) and np.all(np.isneginf(lw.values[2, 60:]))  # padded to the mixture's 100
    np.testing.assert_array_equal(out["kept_draws"].values[0], draws.reshape(-1, 3))
    np.testing.assert_array_equal(out["kept_draws"].values[1, :60], kept.refits[2])
    assert kept.arrays(np.array(["psis", "psis", "psis", "psis"])) == {}
    monkeypatch.setattr(kept_module, "KEEP_MAX_VALUES", 250)  # the mixture's 300 numbers do not fit, the refit's do
    out = kept.arrays(np.array(["mixture", "psis", "refit", "mixture"]))
    assert list(out["kept_log_weights"]["kept"].values) == [2]
