"""The cheaper of batched refits and tempered SMC for the observations that ask for independent evidence
(``ppl_loo/workflow/loo/vouch/opinions.py``: ``refit_route``), against the gradient counts it compares and against
the closed form of a conjugate linear regression with two high-leverage outliers (``tests/gaussian_models.py``),
fit with PyMC's own NUTS."""

import warnings

import numpy as np
import pytest
import xarray as xr

import ppl_loo as pl
from ppl_loo.adapters.as_model import as_model
from ppl_loo.workflow.loo.draws import loo_draws
from ppl_loo.workflow.loo.vouch.opinions import ROUTE_DRAWS, SMC_AUTO_MAX_DIM, refit_route
from ppl_loo.workflow.loo.vouch.smc import LEAPFROG, MAX_PARTICLES, MOVES, smc_gradients
from tests.gaussian_models import leverage_problem
from tests.linear_models import pymc_model

pm = pytest.importorskip("pymc")


@pytest.fixture(scope="module")
def fit():
    """``(problem, PyMC model, DataTree of pm.sample, exact elpd_i)``."""
    m = leverage_problem()
    model = pymc_model(m)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=1000, tune=1000, chains=4, cores=1, random_seed=3, progressbar=False,
                          idata_kwargs={"log_likelihood": True})
    return m, model, idata, m.exact_elpd_i()


def _with_steps(data, steps):
    """``data`` with its ``sample_stats.n_steps`` set to ``steps`` everywhere (None: removed)."""
    stats = data["sample_stats"].to_dataset()
    stats = stats.drop_vars("n_steps") if steps is None else stats.assign(n_steps=stats["n_steps"] * 0 + steps)
    out = data.copy()
    out["sample_stats"] = xr.DataTree(stats)
    return out


def test_smc_gradients_count_one_tempering_step():
    assert smc_gradients(4000) == 4000 * MOVES * LEAPFROG == 200_000
    assert smc_gradients(2000) == 2000 * MOVES * LEAPFROG
    assert smc_gradients(10_000) == 3334 * MOVES * LEAPFROG  # thinned by 3 to at most MAX_PARTICLES
    assert len(range(0, 10_000, 3)) == 3334 <= MAX_PARTICLES


def test_route_compares_gradient_counts(fit):
    """A refit: chains x (warm-started warmup + at most ROUTE_DRAWS draws) x the fit's mean leapfrog steps; SMC's
    cheapest run: particles x moves x leapfrog steps. The route is taken exactly where the first is smaller."""
    m, model, idata, _ = fit
    mdl = as_model(model, data=idata)
    draws = loo_draws(idata, mdl, None, None)
    refit_cost = 4 * (150 + ROUTE_DRAWS)
    for steps, routed in ((3.0, True), (76.0, True), (77.0, False), (1023.0, False)):
        ok, cost = refit_route(_with_steps(idata, steps), mdl, draws, "auto", None, None)
        assert cost == {"refit": refit_cost * steps, "smc": 200_000.0, "leapfrog_per_draw": steps}
        assert ok is routed == (refit_cost * steps < 200_000)
    # no recorded leapfrog steps: the most a draw can take at the fit's tree depth 10
    ok, cost = refit_route(_with_steps(idata, None), mdl, draws, "auto", None, None)
    assert not ok and cost["refit"] == refit_cost * 1023 and cost["leapfrog_per_draw"] == 1023
    # the user's draws win over ROUTE_DRAWS
    ok, cost = refit_route(_with_steps(idata, 3.0), mdl, draws, "auto", None, {"draws": 1000})
    assert cost["refit"] == 4 * (150 + 1000) * 3.0
    # never with smc forced or off, where the user chose the refits, or above SMC's dimension limit
    assert refit_route(_with_steps(idata, 3.0), mdl, draws, "auto", "doubtful", None)[0]
    for smc, refit in ((True, None), (False, None), ("auto", 30.0), ("auto", [0, 1]), ("auto", "flagged")):
        assert refit_route(_with_steps(idata, 3.0), mdl, draws, smc, refit, None) == (False, None)
    wide = draws._replace(theta=np.zeros((draws.theta.shape[0], SMC_AUTO_MAX_DIM + 1)))
    assert refit_route(_with_steps(idata, 3.0), mdl, wide, "auto", None, None) == (False, None)


def test_refits_take_smc_place_and_match_the_closed_form(fit):
    """With the defaults, the observations that only independent evidence can settle are refit (the fit's NUTS takes
    a few leapfrog steps per draw: a refit costs a tenth of SMC's cheapest run), not searched and not given to SMC;
    every estimate lands within 4 SEs (+0.02) of the closed form, nothing is doubtful."""
    m, model, idata, exact = fit
    steps = float(idata["sample_stats"]["n_steps"].mean())
    assert 4 * (150 + ROUTE_DRAWS) * steps < smc_gradients(4000)
    res = pl.loo(idata, model, progressbar=False, random_seed=5)
    info = res.smc_info
    routed = np.asarray(info["refits_instead"], dtype=int)
    assert routed.size >= 1 and info["particles"] == 0  # SMC did not run
    ev = res.evidence.values
    assert (ev[routed] == "refit").all() and res.refit.values[routed].all()
    assert set(res.refit_info) == set(routed.tolist())
    assert all(res.refit_info[i]["draws"] == ROUTE_DRAWS for i in routed)
    assert not res.doubtful.values.any(), res.reason.values[res.doubtful.values]
    err = np.abs(res.elpd_i.values - exact)
    assert np.all(err < 4 * res.mcse_elpd_i.values + 0.02), (np.max(err), ev)
    assert np.all(err[routed] < 0.1)
    # refits of 10 draws per chain do not converge: they are left out, and the search and SMC take those observations
    short = pl.loo(idata, model, progressbar=False, random_seed=5, second_opinions={"refit_options": {"draws": 10}})
    unused = short.smc_info["refits_not_used"]
    assert set(unused) <= set(short.smc_info["refits_instead"]) and len(unused) >= 1
    assert all(u["rhat_loglik"] > 1.01 or u["rhat_max"] > 1.1 or u["mcse"] > 0.25 for u in unused.values())
    assert not short.refit.values[list(unused)].any() and short.searched.values[list(unused)].all()
    assert set(short.smc_info["observations"]) <= set(unused) and short.smc_info["particles"] > 0
    vouched = ~short.doubtful.values
    err = np.abs(short.elpd_i.values - exact)[vouched]
    assert np.all(err < 4 * short.mcse_elpd_i.values[vouched] + 0.02), np.max(err)


def test_smc_true_forces_smc(fit):
    """``smc=True``: SMC on every searched observation, no refit in its place."""
    _, model, idata, exact = fit
    forced = pl.loo(idata, model, progressbar=False, random_seed=5, second_opinions={"smc": True})
    assert not forced.refit.values.any() and "refits_instead" not in forced.smc_info
    assert forced.smc_info["observations"] == np.flatnonzero(forced.searched.values).tolist()
    ok = np.asarray(forced.smc_info["observations"])[np.asarray(forced.smc_info["reached"], bool)]
    assert ok.size >= 1
    smc = np.asarray(forced.smc_info["elpd_i"])[np.asarray(forced.smc_info["reached"], bool)]
    assert np.all(np.abs(smc - exact[ok]) < 0.5), (smc, exact[ok])


def test_no_route_where_the_fit_diverged(fit):
    """A fit with more than 1% divergent transitions (a geometry its sampler struggles with, as refits with its
    settings would): SMC, not refits."""
    _, model, idata, _ = fit
    mdl = as_model(model, data=idata)
    draws = loo_draws(idata, mdl, None, None)
    stats = idata["sample_stats"].to_dataset()
    div = np.zeros(stats["diverging"].shape, bool)
    for share, routed in ((0.01, True), (0.011, False)):
        div.ravel()[: int(round(share * div.size))] = True
        bad = idata.copy()
        bad["sample_stats"] = xr.DataTree(stats.assign(diverging=(stats["diverging"].dims, div.copy())))
        assert refit_route(_with_steps(bad, 3.0), mdl, draws, "auto", None, None)[0] is routed


def test_refits_before_the_mixture_run_when_they_cost_less(fit):
    """A few hard observations are refit at once where their refits cost fewer gradient evaluations than the mixture
    run alone (4 chains x (1,000 + 1,000) x the leapfrog steps, against 4 x (150 + 500) per refit): 3 of them, not 4;
    never without the route."""
    _, model, idata, _ = fit
    from ppl_loo.workflow.loo.vouch.opinions import refits_before_mixture

    mdl = as_model(model, data=idata)
    draws = loo_draws(idata, mdl, None, None)
    route = refit_route(_with_steps(idata, 3.0), mdl, draws, "auto", None, None)
    assert route[1]["leapfrog_per_draw"] == 3.0
    assert [refits_before_mixture(route, idata, None, m) for m in (0, 1, 3, 4)] == [False, True, True, False]
    assert 3 * 4 * (150 + 500) < 4 * 2000 < 4 * 4 * (150 + 500)
    assert not refits_before_mixture((False, None), idata, None, 1)
