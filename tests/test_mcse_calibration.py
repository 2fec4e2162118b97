"""The Monte Carlo SE of plain PSIS-LOO: calibrated against the true error, raised where chains disagree, and its
total ``mcse_elpd_loo`` as R ``loo``'s ``mcse_loo``.

The calibration runs ``benchmarks/mcse_calibration.py --reduced``: 200 re-drawn posteriors of a normal mean with
known sigma and one outlier (exact LOO by closed form) as 4 AR(1) chains of 250 draws (autocorrelation 0.5). The
median over observations of (RMS of the reported MCSE) / (true SE) is 1.04 with a bootstrap SD over replications of
0.06 (the observations share the draws: their ratios move together); the range 0.85-1.15 is 1 +- 2.4 of those SDs.
The earlier rule (the larger of the delta-method SE and the spread over chains) gives 1.16 on the same draws; the
paired difference is far less noisy than either number.

R's ``mcse_loo`` on the cases of ``tests/data/r_loo/input.npz`` is committed in ``tests/data/r_loo/mcse.npz`` by
``benchmarks/r_loo/make_mcse_reference.py`` (R's side: ``reference_mcse.R``); the test needs no R.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from arviz_base import from_dict
from scipy.special import logsumexp

import ppl_loo as pl
from ppl_loo.numerics.psis import psislw
from ppl_loo.workflow.loo.plain import chain_se_psis, combine_chain_se, psis_mcse

pytestmark = pytest.mark.x64

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "r_loo"


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _reference_cases():
    """``{case: (ll (S, n), chains)}`` of ``input.npz`` as ``make_reference.py`` builds them."""
    ref = _module(ROOT / "benchmarks" / "r_loo" / "make_reference.py", "r_loo_make_reference")
    inp = np.load(DATA / "input.npz")
    cases = ref.cases(inp["mu"], inp["beta_leverage"], inp["beta_logistic"], inp["example_log_lik"])
    return {name: (c["ll"], c["chains"]) for name, c in cases.items()}


def _datatree(ll, chains):
    S, n = ll.shape
    return from_dict({"posterior": {"a": np.zeros((chains, S // chains))},
                      "log_likelihood": {"y": ll.reshape(chains, S // chains, n)}}, dims={"y": ["obs"]})


def test_reduced_calibration():
    """The reported MCSE is within 0.85-1.15 of the true SE (median over observations), and below the earlier
    rule's by more than 0.05 on the same draws."""
    bench = _module(ROOT / "benchmarks" / "mcse_calibration.py", "mcse_calibration")
    out = bench.reduced()
    med, sd = out["ppl_loo"]
    assert 0.85 <= med <= 1.15, out
    assert sd < 0.1, out
    assert out["max rule"][0] - med > 0.05, out


def test_shifted_chain_raises_mcse():
    """One chain shifted by 1 and by 3 posterior SDs, with ``reff=1`` (the delta-method SE does not see the shift; the
    posterior's own ESS would, as does a many-parameter model's mean ESS only in part): the reported MCSE grows with
    the shift, and wherever the spread over chains is beyond its chance level it is the spread (the larger of the
    two); with the chains mixed, most observations report the delta-method SE."""
    bench = _module(ROOT / "benchmarks" / "mcse_calibration.py", "mcse_calibration")
    mu = bench.chains(7, 0.0, 500)  # independent draws: reff=1 is right for the mixed chains
    _, v = bench.posterior(bench.Y)
    medians = []
    for shift in (0.0, 1.0, 3.0):
        m = mu.copy()
        m[0] += shift * np.sqrt(v)
        ll = bench.log_lik(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = pl.loo(bench.datatree(m), reff=1.0)
        r_eff = 1.0
        lw = np.asarray(psislw(-ll.T, r_eff, "arviz")[0])
        delta = psis_mcse(lw, ll.T, r_eff)
        spread = chain_se_psis(-ll.T, ll, 4)
        se = res.mcse_elpd_i.values
        np.testing.assert_allclose(se, combine_chain_se(delta, spread, 4), rtol=1e-10)
        beyond = spread > 1.9446 * delta  # sqrt(chi2.ppf(0.99, 3) / 3)
        np.testing.assert_allclose(se[beyond], np.maximum(delta, spread)[beyond], rtol=1e-12)
        np.testing.assert_allclose(se[~beyond], delta[~beyond], rtol=1e-12)
        if shift == 0.0:
            assert beyond.sum() <= 4
        else:
            assert beyond.sum() >= 5
        medians.append(float(np.median(se)))
    assert medians[0] < 2 * medians[0] < medians[1] < 2 * medians[1] < medians[2], medians


def test_combine_chain_se():
    """The delta-method SE up to the chance level of the spread (1.9446 for 4 chains, 2.5758 for 2), the spread beyond
    it; one chain: the delta-method SE; an infinite delta-method SE stays infinite."""
    delta = np.array([0.1, 0.1, 0.1, 0.1, np.inf])
    spread = np.array([0.0, 0.194, 0.195, 10.0, 0.2])
    np.testing.assert_array_equal(combine_chain_se(delta, spread, 4), [0.1, 0.1, 0.195, 10.0, np.inf])
    np.testing.assert_array_equal(combine_chain_se(delta, np.array([0.257, 0.258, 0, 0, 0]), 2), [0.1, 0.258, 0.1, 0.1,
                                                                                                   np.inf])
    np.testing.assert_array_equal(combine_chain_se(delta, spread, 1), delta)


@pytest.mark.parametrize("name", ["example", "normal_outlier", "few_draws", "leverage", "logistic"])
def test_mcse_elpd_loo_against_r(name):
    """R's ``mcse_loo`` (``sqrt(sum(mcse_elpd_loo_i^2))``; NA where a k-hat is above the threshold) on the same
    draws: R's formula on ppl_loo's weights under R's conventions gives R's total to 1e-8; ``res.mcse_elpd_loo``
    (ppl_loo's pointwise MCSEs: the delta method without R's log-normal form, and the spread over chains) is within
    10% of it and NaN where R's is NA; ``print(res)`` shows it as R's print does."""
    ll, chains = _reference_cases()[name]
    r = np.load(DATA / "mcse.npz")
    want = float(r[f"{name}/mcse_loo"])
    data = _datatree(ll, chains)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(data, compute={"conventions": "R"})
    r_eff = r[f"{name}/r_eff"]
    lw = np.asarray(psislw(-ll.T, r_eff, "R")[0])
    E = np.exp(logsumexp(lw + ll.T, axis=1))
    var = np.sum(np.exp(lw) ** 2 * (np.exp(ll.T) - E[:, None]) ** 2, axis=1) / r_eff
    se_r = np.sqrt(np.log1p(var / E**2))
    np.testing.assert_allclose(se_r, r[f"{name}/mcse_elpd_loo_i"], rtol=1e-8)
    if np.isnan(want):
        assert np.isnan(res.mcse_elpd_loo) and res.doubtful.values.any()
        assert "MCSE of elpd_loo is NA" in str(res)
        return
    assert float(np.sqrt(np.sum(se_r**2))) == pytest.approx(want, rel=1e-8)
    assert res.mcse_elpd_loo == pytest.approx(float(np.sqrt(np.sum(res.mcse_elpd_i.values**2))), rel=1e-12)
    assert res.mcse_elpd_loo == pytest.approx(want, rel=0.1)
    assert f"------\nMCSE of elpd_loo is {res.mcse_elpd_loo:.2f}.\n" in str(res)
    assert json.loads(str(r["versions"]))["loo_version"] == "2.10.1"
