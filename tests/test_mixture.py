"""Mixture importance sampling (``pl.loo_mixture``, ``pl.loo(..., second_opinions={"mixture": ...})``) and the
vouching rule, against closed forms: a conjugate linear regression with known noise whose exact LOO is closed form
(``tests/gaussian_models.py``), with high-leverage outliers where plain PSIS and the search alone fail."""

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st
import xarray as xr

import ppl_loo as pl
import ppl_loo.workflow.loo.vouch.loo_mixture as loo_mixture_module
from ppl_loo.numerics.mixture import mixture_loo
from ppl_loo.workflow.loo.inputs import rank_rhat
from ppl_loo.workflow.loo.verdict import Pointwise
from ppl_loo.workflow.loo.vouch.rule import JENSEN_Z, Opinion, _pooled, agree, mixture_alone_ok, settle
from tests.gaussian_models import LinearRegressionKnownNoise, leverage_problem
from tests.linear_models import jax_model, problem, pymc_model


def test_estimator_equals_arviz_stats_mixture():
    """The same numbers as ``arviz_stats.loo(mixture=True)`` on the same log-likelihood draws (an identity)."""
    import warnings

    import arviz_stats as azs

    rng = np.random.default_rng(0)
    ll = rng.normal(-1.0, 0.7, size=(4, 300, 12)) - rng.gamma(1.0, 0.5, size=(1, 1, 12))
    tree = xr.DataTree.from_dict({"posterior": xr.Dataset({"mu": (("chain", "draw"), rng.normal(size=(4, 300)))}),
                                  "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = azs.loo(tree, mixture=True, pointwise=True)
    est = mixture_loo(ll.reshape(1200, 12), n_chains=4)
    np.testing.assert_allclose(est.elpd, ref.elpd_i.values, rtol=0, atol=1e-10)
    assert np.all(est.mcse > 0) and np.all(est.ess > 100)


def test_agree_and_opinion_rule():
    assert agree(0.0, 0.1, 0.25, 0.1) and not agree(0.0, 0.1, 0.45, 0.1)
    assert not agree(np.nan, 0.1, 0.0, 0.1)
    op = Opinion("mixture", np.zeros(2), np.ones(2), np.array([True, False]))
    assert op.ok.sum() == 1


def test_mixture_alone_guard_and_its_premise():
    """A mixture estimate vouches alone only if it is not above plain PSIS's by more than ``JENSEN_Z`` SEs; the
    premise, checked against a closed form: importance sampling from the posterior overestimates elpd_i.

    theta ~ N(0, 1) (the posterior), p(y | theta) = N(y; theta, sigma = 1.2) at y = 3: ``E[1 / p] = sigma sqrt(2 pi)
    (1 - 2a)^(-1/2) exp(a y^2 / (1 - 2a))`` with ``a = 1 / (2 sigma^2)``; the raw weights ``1 / p`` have a Pareto
    tail of shape ``2a``, about 0.7 (k-hat above 1 in most replications of 1,000 draws: exact -11.92, raw IS
    -8.45 and PSIS -8.24 in the median).
    """
    assert not mixture_alone_ok(-0.0822, 0.0088, -0.1055)  # the truth suite's miss: 2.6 SEs above plain PSIS
    assert mixture_alone_ok(-0.0550, 0.0550, -0.1050)  # 0.9 SEs above
    assert mixture_alone_ok(-0.2000, 0.0100, -0.1000) and mixture_alone_ok(-0.1, 0.01, np.nan)
    assert mixture_alone_ok(-0.1 + JENSEN_Z * 0.01 - 1e-9, 0.01, -0.1)
    sigma, y = 1.2, 3.0
    a = 1.0 / (2.0 * sigma**2)
    exact = -np.log(sigma * np.sqrt(2.0 * np.pi) / np.sqrt(1.0 - 2.0 * a) * np.exp(a * y**2 / (1.0 - 2.0 * a)))
    rng = np.random.default_rng(5)
    theta = rng.normal(size=(400, 1000))
    log_ratio = -st.norm.logpdf(y, theta, sigma)  # log (1 / p(y | theta))
    raw = -(np.logaddexp.reduce(log_ratio, axis=1) - np.log(1000))
    from arviz_stats.base import array_stats

    lw, k = array_stats.psislw(-log_ratio, r_eff=1.0, axis=-1)  # takes the log-likelihood (PSIS-LOO's weights)
    smoothed = np.asarray(np.logaddexp.reduce(np.asarray(lw) - log_ratio, axis=1))  # log sum_s w_s p_s
    assert np.median(k) > 0.7  # a hard observation for plain PSIS
    for est in (raw, smoothed):
        assert np.mean(est) > exact and np.median(est) > exact  # biased upward, most replications above the truth
        assert np.mean(est > exact) > 0.6


def _settled(converged, alone=True):
    """The rule on four observations plain PSIS cannot vouch for (k 1.0), with a mixture opinion: 0, below plain
    PSIS; 1, 3 of its SEs above it; 2, failing its checks; 3, contradicting the search's candidate; ``alone``:
    the mixture run's parameters converged too."""
    from types import SimpleNamespace

    plain = SimpleNamespace(elpd=np.array([-1.0, -1.0, -1.0, -1.2]), k=np.full(4, 1.0), mcse=np.full(4, 0.01),
                            n_eff=np.full(4, 50.0))
    pw = Pointwise.from_plain(plain)
    pw.doubtful[:] = True
    pw.cand_elpd[3], pw.cand_se[3], pw.cand_k[3], pw.cand_label[3] = -1.0, 0.01, 0.4, ("pmm1", 0.25)
    mix = Opinion("mixture", np.array([-1.3, -0.7, -1.2, -1.5]), np.full(4, 0.1), np.array([True, True, False, True]),
                  alone)
    evidence, notes = settle(pw, plain, 0.7, [mix], converged=converged)
    return pw, evidence, notes


def test_rule_mixture_alone():
    """The mixture vouches alone where nothing else has an estimate and it is not above plain PSIS; where the
    search's candidate contradicts it, only unconverged draws (which vouch for nothing on their own) lose."""
    pw, evidence, notes = _settled(converged=True)
    assert list(evidence) == ["mixture", "", "", ""]
    assert pw.elpd[0] == -1.3 and pw.mcse[0] == 0.1 and pw.transform[0] == "mixture" and np.isnan(pw.k[0])
    assert pw.elpd[1] == -0.7 and "above plain PSIS's -1.00 by more than 2 SEs" in notes[1]  # reported, doubtful
    assert pw.elpd[2] == -1.0 and notes[2] == ""  # the mixture failed its checks: plain PSIS kept
    assert "no two independent estimates agree (mixture -1.50 ± 0.10; adapted -1.00 ± 0.01)" in notes[3]
    assert list(pw.doubtful) == [False, True, True, True]
    pw, evidence, notes = _settled(converged=False)
    assert list(evidence) == ["mixture", "", "", "mixture"] and pw.elpd[3] == -1.5
    # a mixture run whose parameters have not converged vouches only with a second estimate
    pw, evidence, notes = _settled(converged=False, alone=False)
    assert list(evidence) == ["", "", "", ""] and pw.elpd[0] == -1.3 and "parameters have not all converged" in notes[0]


def test_pooled_se_covers_what_agreement_cannot_resolve():
    """Two agreeing estimates: the precision-weighted mean, with the larger SE and the difference in quadrature
    (not the textbook SE, which a narrow biased estimate would make 3x too small)."""
    value, se = _pooled(-0.114, 0.015, -0.208, 0.048)
    w = np.array([1 / 0.015**2, 1 / 0.048**2])
    assert value == pytest.approx((w[0] * -0.114 + w[1] * -0.208) / w.sum(), abs=1e-12)
    assert se == pytest.approx(np.sqrt(0.048**2 + 0.094**2), abs=1e-12)
    assert se > 3 * 1 / np.sqrt(w.sum())
    assert _pooled(1.0, 0.1, 1.0, 0.1) == pytest.approx((1.0, 0.1))  # equal estimates: the SE of either


def test_loo_mixture_matches_closed_form():
    """``pl.loo_mixture`` on the outlier regression: every elpd_i within 4 SEs and 0.25 nats of the exact value."""
    m = problem()
    data = m.exact_draws(n_chains=4, n_draws=1000, seed=1)
    res = pl.loo_mixture(data, jax_model(m), random_seed=3, mixture_options={"warmup": 500})
    exact = m.exact_elpd_i()
    err = res.elpd_i.values - exact
    se = res.mcse_elpd_i.values
    assert np.max(np.abs(err)) < 0.25, np.abs(err).max()
    assert np.all(np.abs(err) < 4 * se), np.max(np.abs(err) / se)
    assert res.mixture_info["divergences"] == 0 and res.mixture_info["max_rhat"] < 1.05
    # the outlier's LOO posterior dominates the mixture: a few observations' LOO weights keep an importance-sampling
    # ESS below 100 there, and the run does not vouch for those (their estimates are still within 4 SEs)
    ok = ~res.doubtful.values
    assert ok.sum() >= 18 and set(res.evidence.values[ok]) == {"mixture"}
    assert res.mixture_info["ess_posterior_weights"] >= 100
    # pareto_k: the k-hat of the weights each estimate uses (bounded, not Pareto-smoothed); the vouched within the
    # engine's threshold
    k = res.pareto_k.values
    assert res.mixture_info["k_threshold"] == 0.7
    assert np.all(np.isfinite(k)) and np.all(k[ok] <= 0.7)
    print(res)  # prints like arviz_stats.loo
    assert abs(res.elpd - exact.sum()) < 4 * np.sqrt(np.sum(se ** 2)) + 0.1


def test_loo_mixture_long_tailed_weights_are_not_vouched():
    """A normal mean with a gross outlier (``y_i ~ N(mu, 1)``, ``mu ~ N(0, 3^2)``, 16 observations, one at 12; the
    data and PyMC model of ``tests/test_pymc_data.py``): the outlier's ``1 / p(y_5 | mu)`` dominates the mixture, so
    the mixture draws sit near the posterior without it and the weights that map them back (the posterior's and
    every LOO posterior's) are long-tailed. Runs of 4 x 4,000 draws pass every other check (no divergences, R-hat
    1.001, the posterior weights' ESS 150 to 240), and their delta-method SEs were 5 to 12 times too small; the
    Pareto k-hat of each estimate's weights flags them (seeds None, 2, 3: the posterior's weights alone have k-hat
    0.72 to 0.82, above the engine's 0.7), and every estimate that is still vouched, and every SE, is honest against
    the closed form (``tests/gaussian_models.py``)."""
    pm = pytest.importorskip("pymc")
    y = np.random.default_rng(12).normal(1.0, 1.0, size=16)
    y[5] = 12.0
    exact = LinearRegressionKnownNoise(np.ones((16, 1)), y, sigma=1.0, tau=3.0).exact_elpd_i()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3)
        pm.Normal("y", mu, 1.0, observed=y)
        idata = pm.sample(draws=500, tune=500, chains=2, cores=1, progressbar=False, compute_convergence_checks=False,
                          nuts_sampler="pymc", random_seed=3)
    for seed in (None, 1, 2, 3):
        res = pl.loo_mixture(idata, model, random_seed=seed, mixture_options={"draws": 4000})
        info = res.mixture_info
        assert info["divergences"] == 0 and info["max_rhat"] < 1.01 and info["ess_posterior_weights"] >= 100
        err, se, k = res.elpd_i.values - exact, res.mcse_elpd_i.values, res.pareto_k.values
        ok = ~res.doubtful.values
        assert info["k_threshold"] == 0.7 and np.all(k >= info["khat_posterior_weights"])
        assert not np.any(ok & (k > 0.7)), (seed, k)  # a long tail is not vouched
        assert np.all(np.abs(err[ok]) <= 3 * se[ok]), (seed, err / se)  # what is vouched is within 3 SEs
        assert np.all(np.abs(err) <= 4 * se), (seed, err / se)  # the SEs are honest
        if seed != 1:  # the posterior's weights are long-tailed: nothing is vouched
            assert info["khat_posterior_weights"] > 0.7 and not ok.any(), (seed, info["khat_posterior_weights"])
        assert all("the Pareto k-hat of its weights above 0.70" in str(r) for r in res.reason.values[~ok])


@pytest.fixture(scope="module")
def leverage():
    m = leverage_problem()
    return m, m.exact_draws(n_chains=4, n_draws=1000, seed=1), m.exact_elpd_i()


def _check_vouched(res, exact, tol=0.4):
    err = res.elpd_i.values - exact
    assert not res.doubtful.values.any(), res.reason.values[res.doubtful.values]
    assert np.max(np.abs(err)) < tol, (np.abs(err).max(), res.evidence.values)
    se = res.mcse_elpd_i.values
    assert np.all(np.abs(err) < 4 * se + 0.02), np.max(np.abs(err) / se)


def test_leverage_regression_jax_vouched(leverage):
    """The leverage points (plain k above 0.7, plain PSIS off by nats) are vouched for by independent evidence and
    land within 0.25 nats of the closed form; nothing is doubtful."""
    m, data, exact = leverage
    plain = pl.loo(data)
    assert np.max(np.abs(plain.elpd_i.values - exact)) > 1.0  # plain PSIS alone misses
    res = pl.loo(data, jax_model(m), progressbar=False, random_seed=11,
                 second_opinions={"mixture": "auto", "smc": "auto"})
    _check_vouched(res, exact)
    ev = res.evidence.values
    assert any("mixture" in e or "smc" in e for e in ev[:2]), ev[:2]
    assert res.mixture_info is not None and res.mixture_info["divergences"] == 0
    back = pl.LooResult.from_datatree(pl.add_loo(data, res))  # plain data: evidence and the run's diagnostics too
    np.testing.assert_array_equal(back.evidence.values, res.evidence.values)
    assert back.mixture_info["elpd_i"] == res.mixture_info["elpd_i"]
    assert any(line.startswith("Vouched for: 40 of 40") for line in res.trust_lines())


def test_leverage_regression_pymc_vouched(leverage):
    """The same with the model written in PyMC (its own gradients, through PyTensor's JAX backend)."""
    m, data, exact = leverage
    res = pl.loo(data, pymc_model(m), progressbar=False, random_seed=12,
                 second_opinions={"mixture": "auto", "smc": "auto"})
    _check_vouched(res, exact)


def test_unconverged_main_fit_settled_by_mixture(leverage):
    """Convergence judged per estimate: chains that disagree (R-hat above 1.01) make every estimate from them
    doubtful on their own; the mixture run, with its own diagnostics passing, settles them where they agree, and
    vouches alone where nothing from those draws is usable."""
    m, data, exact = leverage
    beta = data["posterior"]["beta"].values.copy()
    sd = beta.std(axis=(0, 1))
    beta[0] += 0.3 * sd  # one chain off: R-hat about 1.02
    post = data["posterior"].to_dataset().assign(beta=(("chain", "draw", "coef"), beta))
    ll = st.norm.logpdf(m.y, beta @ m.X.T, m.sigma)
    bad = xr.DataTree.from_dict({"posterior": post, "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs"), ll)}),
                                 "observed_data": data["observed_data"].to_dataset()})
    off = pl.loo(bad, jax_model(m), progressbar=False, second_opinions={"mixture": False, "smc": False})
    assert off.max_rhat > 1.01
    # judged per observation: doubtful wherever the observation's log-likelihood draws have not mixed; where they
    # have, the estimate from these draws is right within its SE
    rhat_ll = rank_rhat(ll.reshape(ll.shape[0], ll.shape[1], -1))
    assert off.doubtful.values[rhat_ll > 1.01].all() and (rhat_ll > 1.01).sum() >= 10
    kept = ~off.doubtful.values
    assert kept.sum() >= 1
    np.testing.assert_array_less(np.abs(off.elpd_i.values - exact)[kept], 3 * off.mcse_elpd_i.values[kept] + 0.02)
    res = pl.loo(bad, jax_model(m), progressbar=False, random_seed=13,
                 second_opinions={"mixture": "auto", "smc": False})
    assert res.doubtful.values.mean() <= 0.1, res.reason.values[res.doubtful.values]
    vouched = ~res.doubtful.values
    ev = res.evidence.values
    assert all("mixture" in e for e in ev[vouched & (rhat_ll > 1.01)])  # the unmixed draws vouch for nothing alone
    err = np.abs(res.elpd_i.values - exact)[vouched]
    se = res.mcse_elpd_i.values[vouched]
    assert np.all(err < 3 * se + 0.02), np.max(err / se)
    # agreeing pairs are precise; the mixture alone (where the search from these draws has nothing usable, and SMC
    # does not run from unconverged draws) vouches with its own, wider SE (leverage point 1: -2.34 +- 0.19, exact -2.05)
    assert err[ev[vouched] != "mixture"].max() < 0.25
    assert np.all(se[ev[vouched] == "mixture"] > 0.05)


def test_bad_arguments():
    m = problem()
    data = m.exact_draws(n_chains=2, n_draws=100, seed=1)
    with pytest.raises(ValueError, match="mixture='yes'"):
        pl.loo(data, jax_model(m), second_opinions={"mixture": "yes"})
    with pytest.raises(ValueError, match="mixture_options: unknown setting 'nchains'"):
        pl.loo(data, jax_model(m), second_opinions={"mixture_options": {"nchains": 2}})
    with pytest.raises(ValueError, match="smc=1"):
        pl.loo(data, jax_model(m), second_opinions={"smc": 1})


# ----------------------------------------------------------------------------- pl.loo_mixture's bad inputs
# Each fails with an error naming the input and the fix, before the mixture run starts (``run_mixture`` is replaced
# by a function that fails the test), so these take seconds.


@pytest.fixture(scope="module")
def small():
    """The outlier regression (``test_bad_arguments``'): its closed forms, 2 x 100 exact draws, the JAX model."""
    m = problem()
    return m, m.exact_draws(n_chains=2, n_draws=100, seed=1), jax_model(m)


@pytest.fixture
def no_run(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("the mixture run started before the bad input was caught")

    monkeypatch.setattr(loo_mixture_module, "run_mixture", started)


class _NanLogLik(LinearRegressionKnownNoise):
    """The regression with a NaN log-likelihood for observation 2 (its log density stays finite)."""

    def loglik(self, theta):
        return super().loglik(theta).at[2].set(jnp.nan)

    def logp(self, theta):
        return jnp.sum(LinearRegressionKnownNoise.loglik(self, theta)) - 0.5 * jnp.sum((theta / self.tau) ** 2)


def _with(data, group, ds):
    out = data.copy()
    out[group] = ds
    return out


@pytest.mark.parametrize("bad", [[1.0, 2.0, 3.0], None, "draws.nc"])
def test_loo_mixture_rejects_data_of_a_wrong_type(small, no_run, bad):
    _, _, model = small
    with pytest.raises(TypeError, match=r"`data` must be an xarray.DataTree .* got (list|NoneType|str)\. Convert it "
                                        r"with arviz_base.convert_to_datatree"):
        pl.loo_mixture(bad, model)


def test_loo_mixture_rejects_data_without_posterior(small, no_run):
    _, data, model = small
    no_post = xr.DataTree.from_dict({"log_likelihood": data["log_likelihood"].to_dataset()})
    with pytest.raises(ValueError, match="`data` has no 'posterior' group: .* Pass the DataTree returned by pm.sample"):
        pl.loo_mixture(no_post, model)


def test_loo_mixture_rejects_nan(small, no_run):
    """A NaN in the model's pointwise log-likelihood at the draws, or in the draws themselves."""
    m, data, model = small
    with pytest.raises(ValueError, match=r"the pointwise log-likelihood 'y' at the posterior draws has 200 "
                                         r"non-finite value\(s\) \(NaN or inf\)\. The draws may be outside"):
        pl.loo_mixture(data, _NanLogLik(m.X, m.y, m.sigma, m.tau))
    beta = data["posterior"]["beta"].values.copy()
    beta[0, 3, 0] = np.nan
    bad = _with(data, "posterior", xr.Dataset({"beta": (("chain", "draw", "coef"), beta)}))
    with pytest.raises(ValueError, match=r"posterior variable 'beta' has non-finite draws: 1 NaN .* Drop the chains"):
        pl.loo_mixture(bad, model)


@pytest.mark.parametrize("case, match", [
    ("no draws", r"the posterior has 0 draws \(2 chain\(s\) x 0 draw\(s\)\): .* Sample more draws"),
    ("few draws", r"the posterior has 10 draws .* needs at least 25 draws"),
    ("draw shape", r"posterior variable 'beta' has per-draw shape \(2,\) .* declares shape \(3,\); build the model"),
    ("log_lik shape", r"log_likelihood\['y'\] has 24 observations x 200 draws but the model gives 25 x 200"),
])
def test_loo_mixture_rejects_wrong_shapes_and_empty_draws(small, no_run, case, match):
    _, data, model = small
    ll = data["log_likelihood"]["y"].values
    bad = {"no draws": lambda: data.isel(draw=slice(0, 0)), "few draws": lambda: data.isel(draw=slice(0, 5)),
           "draw shape": lambda: _with(data, "posterior", xr.Dataset({"beta": (("chain", "draw", "coef"),
                                                                               np.zeros((2, 100, 2)))})),
           "log_lik shape": lambda: _with(data, "log_likelihood", xr.Dataset({"y": (("chain", "draw", "obs"),
                                                                                    ll[..., :-1])}))}[case]()
    with pytest.raises(ValueError, match=match):
        pl.loo_mixture(bad, model)


def test_loo_mixture_rejects_an_unknown_var_name(small, no_run):
    _, data, model = small
    with pytest.raises(ValueError, match=r"var_name='z', the model's log-likelihood variable, is not in the data's "
                                         r"log_likelihood group, which has \['y'\]: pass the name the draws use"):
        pl.loo_mixture(data, model, var_name="z")


@pytest.mark.parametrize("kwargs, match", [
    ({"nchains": 2}, r"mixture_options: unknown setting 'nchains'; allowed: \['chains', 'draws'"),
    ([("chains", 2)], r"mixture_options=\[\('chains', 2\)\]: give a dict of settings"),
    ({"draws": "many"}, r"mixture_options: draws='many' must be a whole number of at least 1, e.g. \{'draws': 1000\}"),
    ({"chains": None}, r"mixture_options: chains=None must be a whole number"),
    ({"warmup": 10.5}, r"mixture_options: warmup=10.5 must be a whole number of at least 0"),
    ({"max_tree_depth": 0}, r"mixture_options: max_tree_depth=0 must be a whole number of at least 1"),
    ({"target_accept": 1.5}, r"mixture_options: target_accept=1.5 must be a probability strictly between 0 and 1"),
    ({"chains": 1}, r"the mixture run needs at least 2 chains of 50 draws; .* \(mixture_options overrides them\)"),
])
def test_loo_mixture_rejects_bad_mixture_options(small, no_run, kwargs, match):
    _, data, model = small
    with pytest.raises(ValueError, match=match):
        pl.loo_mixture(data, model, mixture_options=kwargs)


def test_corroboration_of_the_mixture_alone_where_it_is_imprecise(leverage):
    """The search corroborates an estimate the mixture settles alone only where its SE is above CORROBORATE_SE:
    with the threshold at 0 it examines them all (one batch at most on this model without structure, which holds
    them), with it at infinity none of them; every vouched estimate is within 4 SEs of the closed form either way."""
    import ppl_loo.workflow.loo.loo as loo_module

    m, data, exact = leverage
    opinions = {"mixture": "auto", "smc": False}
    runs = {}
    for limit in (0.0, np.inf):
        saved, loo_module.CORROBORATE_SE = loo_module.CORROBORATE_SE, limit
        try:
            runs[limit] = pl.loo(data, jax_model(m), progressbar=False, random_seed=11, second_opinions=opinions)
        finally:
            loo_module.CORROBORATE_SE = saved
        _check_vouched(runs[limit], exact)
    never, always = runs[np.inf], runs[0.0]
    alone = never.evidence.values == "mixture"
    assert alone.sum() >= 2 and not never.searched.values[alone].any()
    assert (never.searched.values == (never.evidence.values != "mixture") & always.searched.values).all()
    assert always.searched.values[alone].all() and (always.evidence.values != "mixture").all()


def test_quick_transformations_first_on_a_model_without_structure(leverage):
    """On a model without a declared structure the quick transformations (moment matching and the Newton step, two
    independent groups) run first, and the gradient flows only where the verdict leaves an observation unsettled:
    an observation they settle has no gradient-flow candidate built, and its estimate is within 4 SEs of the closed
    form, as is every vouched estimate."""
    from ppl_loo.workflow.loo.adapt import QUICK_TRANSFORMS

    m, data, exact = leverage
    res = pl.loo(data, jax_model(m), progressbar=False, random_seed=11,
                 second_opinions={"mixture": False, "smc": False})
    cands = res.candidates
    labels = [t for t, _ in cands["labels"]]
    flows = np.isin(labels, ["kl", "var", "ll"])
    searched = np.flatnonzero(res.searched.values)
    quick = [i for i in searched if np.isnan(cands["elpd"][i][flows]).all()]
    full = [i for i in searched if np.isfinite(cands["elpd"][i][flows]).any()]
    assert len(quick) >= 2 and len(quick) + len(full) == len(searched)
    assert all(res.transform.values[i] in (*QUICK_TRANSFORMS, "psis") for i in quick)
    assert not res.doubtful.values[quick].any()
    vouched = ~res.doubtful.values
    err = np.abs(res.elpd_i.values - exact)[vouched]
    assert np.all(err < 4 * res.mcse_elpd_i.values[vouched] + 0.02), np.max(err)
