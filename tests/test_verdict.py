"""The verdict of ``pl.loo`` (:mod:`ppl_loo.workflow.loo.verdict`): a pure function from constructed evidence to the
answer per observation, rule by rule; convergence judged per observation; and, end to end, exact posterior draws
of a conjugate normal model made autocorrelated, whose parameter R-hat exceeds 1.01 by chance."""

import numpy as np
import pytest
import xarray as xr
from gaussian_models import normal_mean_model
from scipy import stats

import ppl_loo as pl
from ppl_loo.workflow.loo.inputs import rank_rhat
from ppl_loo.workflow.loo.plain import Plain
from ppl_loo.workflow.loo.verdict import MIN_LL_ESS, VOUCH_MAX_SE, Convergence, Evidence, Rules, convergence, verdict
from ppl_loo.workflow.loo.vouch.rule import Opinion

S = 100
LABELS = (("pmm1", 0.25), ("newton", 1.0))
RULES = Rules(k_threshold=0.7, min_ess=10.0, r_eff=1.0, approx=False)


def _plain(elpd, k, mcse):
    n = len(elpd)
    elpd, k, mcse = (np.asarray(a, float) for a in (elpd, k, mcse))
    return Plain(np.zeros((n, S)), elpd, k, np.full((n, S), -np.log(S)), mcse, np.full(n, 500.0), np.full(n, 0.1))


def _conv(ok):
    ok = np.asarray(ok, bool)
    return Convergence(np.where(ok, 1.0, 1.05), np.full(ok.shape, 1000.0), ok, 1.02, "mu")


def _search(elpd, se, trusted, k=0.3):
    """One observation's search result: two candidates with the same estimate, ``trusted`` (two transformations
    agree) or not."""
    two = np.ones(2)
    return {"identity_ok": np.ones(2, bool), "best": 0, "usable": np.ones(2, bool), "checks_ok": np.ones(2, bool),
            "k": k * two, "corroborated": trusted, "elpd": elpd * two, "se": se * two, "se_best": se, "ess": 400 * two,
            "tv": 0.5 * two}


def _mixture(elpd, mcse, ok, alone=True):
    return Opinion("mixture", np.asarray(elpd, float), np.asarray(mcse, float), np.asarray(ok, bool), alone)


def test_verdict_rules_on_a_table():
    """Eight observations, one rule each; every field of the answer is what the rule says."""
    #         psis   mix    mix+ps disagr unconv imprec jensen refit
    elpd = [-1.00, -3.00, -2.00, -2.00, -1.50, -3.00, -2.00, -4.00]
    k = [0.10, 0.90, 0.60, 0.60, 0.10, 0.90, 0.90, 0.90]
    mcse = [0.02, 0.30, 0.05, 0.05, 0.02, 0.30, 0.05, 0.30]
    plain = _plain(elpd, k, mcse)
    examine = np.array([False, True, True, True, False, True, True, True])
    conv = _conv([True, True, True, True, False, True, True, True])
    mix = _mixture([-1.0, -3.50, -2.02, -3.00, -1.51, -3.6, -1.50, np.nan],
                   [0.02, 0.05, 0.04, 0.04, 0.03, 0.40, 0.05, np.nan],
                   [True, True, True, True, True, True, True, False])
    refit = {7: {"elpd_i": -4.4, "mcse": 0.03, "rhat_loglik": 1.001, "rhat_max": 1.02}}
    ev = Evidence(plain, conv, examine).with_opinion(mix).with_refits(refit)
    before = {name: np.copy(getattr(plain, name)) for name in ("elpd", "k", "mcse")}
    v = verdict(ev, RULES)
    assert v.evidence.tolist() == ["psis", "mixture", "psis+mixture", "", "psis+mixture", "", "", "refit"]
    assert v.doubtful.tolist() == [False, False, False, True, False, True, True, False]
    assert v.elpd[1] == -3.5 and v.mcse[1] == 0.05 and v.transform[1] == "mixture"
    assert v.elpd[7] == -4.4 and v.refit[7] and v.transform[7] == "refit"
    # pooled: the precision-weighted mean, the SE the larger with the difference in quadrature
    w0, w1 = 1 / 0.05**2, 1 / 0.04**2
    assert v.elpd[2] == pytest.approx((w0 * -2.0 + w1 * -2.02) / (w0 + w1), abs=1e-12)
    assert v.mcse[2] == pytest.approx(np.hypot(0.05, 0.02), abs=1e-12)
    assert "0.25 nats" in v.reason[5] and "above" in v.reason[5]
    assert "above plain PSIS" in v.reason[6]
    assert "no two independent estimates agree" in v.reason[3]
    for name, a in before.items():  # the evidence is read only
        np.testing.assert_array_equal(getattr(plain, name), a)
    # without the mixture: the unconverged and examined observations wait; the refit still settles its own
    v0 = verdict(Evidence(plain, conv, examine).with_refits(refit), RULES)
    assert v0.doubtful.tolist() == [False, True, True, True, True, True, True, False]
    assert "log-likelihood draws have not converged (R-hat 1.050" in v0.reason[4]
    assert "the search did not run" in v0.reason[2]
    assert v0.unsettled.tolist() == [False, True, True, True, True, True, True, False]


def test_verdict_search_and_refits():
    """The search's two agreeing transformations vouch alone where plain k is at most 0.5; one transformation,
    or plain k above 0.5 with nothing independent, does not; a refit that did not converge is doubtful."""
    plain = _plain([-1.0, -2.0, -3.0, -1.0], [0.45, 0.45, 0.9, 0.2], [0.05, 0.05, 0.3, 0.02])
    examine = np.array([True, True, True, True])
    search = {0: _search(-1.1, 0.04, True), 1: _search(-2.5, 0.04, False), 2: _search(-3.3, 0.05, True)}
    ev = Evidence(plain, _conv([True] * 4), examine).with_search(search, LABELS)
    v = verdict(ev, RULES)
    assert v.evidence[0] == "adapted" and v.transform[0] == "pmm1" and v.hbar[0] == 0.25 and v.elpd[0] == -1.1
    assert v.doubtful[1]  # one unconfirmed transformation, contradicting plain PSIS
    assert v.evidence[2] == "adapted"  # two agree; plain k above 0.5: SMC's target (not here)
    assert v.doubtful[3] and "search did not run" in v.reason[3]
    bad = {3: {"elpd_i": -1.0, "mcse": 0.01, "rhat_loglik": 1.2, "rhat_max": 1.3}}
    v2 = verdict(ev.with_refits(bad), RULES)
    assert v2.doubtful[3] and v2.refit[3] and "did not converge" in v2.reason[3]
    assert not v2.unsettled[3]  # a refit ran: nothing later runs on it


def test_convergence_per_observation():
    """R-hat and bulk ESS of each observation's log-likelihood draws decide; a constant term always passes; a
    parameter R-hat above 1.1 (chains that have not mixed) fails every non-constant term."""
    rng = np.random.default_rng(0)
    good = rng.normal(size=(4, 500))
    shifted = good + np.array([0.0, 0.0, 0.0, 1.0])[:, None]  # one chain elsewhere
    sticky = np.repeat(rng.normal(size=(4, 5)), 100, axis=1)  # 5 distinct values a chain: ESS far below 100
    const = np.zeros((4, 500))
    ll = np.stack([good, shifted, sticky, const], axis=-1).reshape(2000, 4)
    c = convergence(ll, 4, max_rhat=1.02, max_rhat_var="mu")
    np.testing.assert_allclose(c.rhat[:2], rank_rhat(ll.reshape(4, 500, 4))[:2])
    assert c.ok.tolist() == [True, False, False, True]
    assert c.ess[2] < MIN_LL_ESS < c.ess[0]
    assert convergence(ll, 4, max_rhat=1.2).ok.tolist() == [False, False, False, True]
    assert convergence(ll, 4, approx=True).ok.all()


def _autocorrelated_exact_draws(model, rho, seed, chains=4, draws=500):
    """Exact posterior draws of the one-parameter normal-mean model, AR(1) within each chain (stationary: every draw
    is exactly N(m, C); r_eff about (1 - rho) / (1 + rho))."""
    m, C = model.posterior()
    e = np.random.default_rng(seed).normal(size=(chains, draws))
    z = np.empty_like(e)
    z[:, 0] = e[:, 0]
    for t in range(1, draws):
        z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
    b = (m[0] + np.sqrt(C[0, 0]) * z)[:, :, None]
    ll = stats.norm.logpdf(model.y, b @ model.X.T, model.sigma)
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset({"beta": (("chain", "draw", "coef"), b)}),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)}),
        "observed_data": xr.Dataset({"y": (("obs",), model.y)}),
    })


def test_exact_autocorrelated_draws_with_rhat_above_threshold_by_chance():
    """32 observations, two outliers; exact posterior draws, autocorrelated (r_eff about 0.25), whose one parameter's
    R-hat is 1.011 by chance. Judged per observation, nothing is doubtful with the model, at most the two outliers
    without it, and every elpd_i is within 3 SEs of the closed form."""
    y = np.r_[np.random.default_rng(3).normal(0.0, 1.0, size=30), 5.0, 6.0]
    model = normal_mean_model(y, sigma=1.0, tau=10.0)
    data = _autocorrelated_exact_draws(model, rho=0.6, seed=10)
    assert 1.01 < rank_rhat(data["posterior"]["beta"].values)[0] < 1.02  # the premise: above 1.01 by chance
    exact = model.exact_elpd_i()
    plain = pl.loo(data)
    assert int(plain.doubtful.values.sum()) <= 2
    res = pl.loo(data, model, progressbar=False, random_seed=1)
    assert 1.01 < res.max_rhat < 1.02
    assert int(res.doubtful.values.sum()) == 0
    z = (res.elpd_i.values - exact) / res.mcse_elpd_i.values
    assert np.max(np.abs(z)) < 3.0
    assert np.all(res.mcse_elpd_i.values <= VOUCH_MAX_SE)


def test_fit_seconds_reads_pymc_and_stan_timings():
    """The fit's recorded wall time: ``pm.sample``'s ``sampling_time``, else a Stan fit's per-chain elapsed times
    summed; None where neither is there (the refit-cost rule of the schedule then does not apply)."""
    import xarray as xr

    from ppl_loo.workflow.loo.inputs import fit_seconds
    from ppl_loo.workflow.loo.loo import _refit_budget, _refit_seconds

    post = xr.Dataset({"mu": (("chain", "draw"), np.zeros((2, 5)))})
    pymc_like = xr.DataTree.from_dict({"posterior": post.assign_attrs(sampling_time=12.5)})
    stats = xr.Dataset({"lp": (("chain", "draw"), np.zeros((2, 5)))}).assign_attrs(
        elapsed_time_warmup=np.array([1.0, 2.0]), elapsed_time_sampling=np.array([0.5, 0.25]))
    stan_like = xr.DataTree.from_dict({"posterior": post, "sample_stats": stats})
    bare = xr.DataTree.from_dict({"posterior": post})
    assert fit_seconds(pymc_like) == 12.5
    assert fit_seconds(stan_like) == 3.75
    assert fit_seconds(bare) is None
    assert _refit_seconds(pymc_like, "doubtful") == 12.5 and _refit_seconds(pymc_like, 60.0) == 12.5
    assert _refit_seconds(pymc_like, None) is None and _refit_seconds(pymc_like, "flagged") is None
    assert _refit_budget(np.float64(30.0)) == 30.0
    assert _refit_budget("doubtful") == np.inf and _refit_budget(True) == np.inf


def test_negligible_disagreements_near_zero_are_not_doubtful():
    """Estimates both within NEGLIGIBLE_NATS (0.01) of 0 never contradict each other (nearly separable data: many
    elpd_i about 1e-8, SEs smaller still); beyond it the SEs judge as before; messages print small values with
    significant digits, never as 0.00."""
    from ppl_loo.workflow.loo.messages import nats
    from ppl_loo.workflow.loo.vouch.rule import NEGLIGIBLE_NATS

    assert NEGLIGIBLE_NATS == 0.01
    #        mix alone above plain   psis vs mix   far apart   one near 0
    elpd = [-3.4e-8, -0.002, -0.50, -0.004]
    k = [0.90, 0.30, 0.30, 0.30]
    mcse = [1e-9, 1e-5, 0.001, 0.0001]
    plain = _plain(elpd, k, mcse)
    examine = np.array([True, False, False, False])
    mix = _mixture([-1.2e-8, -0.005, -0.55, -0.02], [1e-9, 1e-5, 0.001, 0.0001], [True] * 4)
    v = verdict(Evidence(plain, _conv([True] * 4), examine).with_opinion(mix), RULES)
    # 22 SEs above plain PSIS, 300 SEs apart: both within 0.01 of 0, so vouched for
    assert v.evidence.tolist() == ["mixture", "psis", "", ""]
    assert v.doubtful.tolist() == [False, False, True, True]
    assert v.elpd[0] == -1.2e-8 and v.elpd[1] == -0.002
    assert v.reason[2].endswith("no two independent estimates agree (mixture -0.55 ± 0.001; psis -0.50 ± 0.001)")
    assert v.reason[3].endswith("no two independent estimates agree (mixture -0.02 ± 0.0001; psis -0.004 ± 0.0001)")
    assert [nats(x) for x in (-1.234e-8, 3.4e-9, 0.0, -0.00412, 0.01, -2.345, np.nan)] == [
        "-1.23e-08", "3.4e-09", "0.00", "-0.00412", "0.01", "-2.35", "nan"]
