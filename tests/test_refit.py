"""``pl.loo(..., refit=...)``: exact LOO by refitting with the model's own sampler, against the closed form.

The conjugate normal-mean model with known sigma and a gross outlier has an exact LOO predictive
density for every observation. Each backend refits the outlier (and the observations asked for)
with its own sampler (NumPyro for a JAX model, ``pm.sample`` for PyMC, Stan's NUTS on the data
without the observation for Stan); the bridge-sampling elpd_i must be within 4 of its Monte Carlo
SEs of the truth.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import jax.scipy.stats as st
import numpy as np
import pytest
import xarray as xr

import ppl_loo as pl
from ppl_loo.sampling import sample_nuts

ROOT = Path(__file__).resolve().parents[1]
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
OUTLIER = 10
SIGMA, TAU = 1.0, 10.0
WARM = "BlackJAX NUTS, warm-started, step size adapted"  # the batched refits' sampler (refit_info)


def closed_form_loo(y=Y, s=SIGMA, t0=TAU):
    out = []
    for i in range(len(y)):
        yi = np.delete(y, i)
        prec = 1 / t0**2 + len(yi) / s**2
        m = (yi.sum() / s**2) / prec
        var = s**2 + 1 / prec
        out.append(-0.5 * np.log(2 * np.pi * var) - 0.5 * (y[i] - m) ** 2 / var)
    return np.array(out)


def jax_model():
    yj = np.asarray(Y)  # NumPy data: float64 inside ppl_loo's calls whatever the user's JAX setting
    return pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, TAU),
                       lambda v: st.norm.logpdf(yj, v["mu"], SIGMA), obs_dims=("obs",), observed=Y)


@pytest.fixture(scope="module")
def jax_fit():
    model = jax_model()
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    return model, data


def _loo(data, model, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pl.loo(data, model, progressbar=False, **kw)


def _check_refits(res, targets):
    exact = closed_form_loo()
    for i in targets:
        assert bool(res.refit.values[i]) and res.transform.values[i] == "refit"
        assert not bool(res.doubtful.values[i])
        assert str(res.evidence.values[i]) == "refit"  # whole, not cut to the width of the other labels ("psis")
        err = abs(res.elpd_i.values[i] - exact[i])
        assert err <= 4 * res.mcse_elpd_i.values[i] + 0.01, (i, res.elpd_i.values[i], exact[i],
                                                             res.mcse_elpd_i.values[i])
        assert res.refit_info[i]["rhat_loglik"] <= 1.01 and res.refit_info[i]["rhat_max"] <= 1.01  # vouched for
    assert int(res.refit.values.sum()) == len(targets)
    # the rest is unchanged by the refits
    assert np.all(res.transform.values[~res.refit.values] != "refit")


def test_jax_refit_indices_match_closed_form(jax_fit):
    model, data = jax_fit
    res = _loo(data, model, refit=[OUTLIER, 0], random_seed=5)
    _check_refits(res, [OUTLIER, 0])


def test_refit_evidence_label_is_whole_where_no_other_is_vouched():
    """Chains that disagree (one shifted by 3 posterior sds: R-hat far above 1.01) leave every observation
    doubtful (evidence ""), except the one refit with the model's own sampler: its evidence reads "refit",
    not "r" (the width of the other labels), and its elpd_i is the closed form's."""
    model = jax_model()
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    mu = data.posterior["mu"]
    data.posterior["mu"] = mu + xr.where(mu.chain == 0, 3.0 * float(mu.std()), 0.0)
    del data["log_likelihood"]  # the draws' log-likelihood, from the model
    res = _loo(data, model, refit=[0], random_seed=5, second_opinions={"mixture": False, "smc": False})
    assert res.max_rhat > 1.01
    assert list(res.evidence.values.astype(str)) == ["refit"] + [""] * (Y.size - 1)
    assert list(res.doubtful.values) == [False] + [True] * (Y.size - 1)
    exact = closed_form_loo()[0]
    assert abs(res.elpd_i.values[0] - exact) <= 4 * res.mcse_elpd_i.values[0] + 0.01


def test_refit_time_budget_refits_worst_first(jax_fit):
    """A budget too small for more than one refit: the first doubtful/worst one is refit, a warning names
    the rest (here everything is forced doubtful by an impossible k threshold)."""
    model, data = jax_fit
    with pytest.warns(UserWarning, match="time budget"):
        res = pl.loo(data, model, progressbar=False, refit=1e-9, random_seed=1, k_threshold=-1.0,
                     search={"transforms": ["pmm1"]})
    assert int(res.refit.values.sum()) == 1


def test_refit_bad_inputs(jax_fit):
    model, data = jax_fit
    with pytest.raises(TypeError, match="random_seed=1.5"):  # None is fine: a seed derived from the draws
        _loo(data, model, refit=[0], random_seed=1.5)
    with pytest.raises(ValueError, match="refit='bogus'"):
        _loo(data, model, refit="bogus", random_seed=1)
    with pytest.raises(ValueError, match="out of range"):
        _loo(data, model, refit=[12], random_seed=1)
    with pytest.raises(ValueError, match="ambiguous"):
        _loo(data, model, refit=True, random_seed=1)
    with pytest.raises(ValueError, match="integer observation"):
        _loo(data, model, refit=[0.5], random_seed=1)
    with pytest.raises(ValueError, match="positive number of seconds"):
        _loo(data, model, refit=-3.0, random_seed=1)
    with pytest.raises(ValueError, match="unknown setting 'thin'"):
        _loo(data, model, refit=[0], random_seed=1, second_opinions={"refit_options": {"thin": 2}})
    with pytest.raises(ValueError, match=r"batched='yes' must be True .* or False"):
        _loo(data, model, refit=[0], random_seed=1, second_opinions={"refit_options": {"batched": "yes"}})
    with pytest.raises(ValueError, match="needs the model"):
        pl.loo(data, None, refit="doubtful")


def test_pymc_refit_matches_closed_form():
    pm = pytest.importorskip("pymc")
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, TAU)
        pm.Normal("y", mu, SIGMA, observed=Y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(draws=500, tune=300, chains=4, cores=1, random_seed=2, progressbar=False)
    res = _loo(idata, m, refit=[OUTLIER], random_seed=7)  # batched (the default): BlackJAX on PyMC's JAX logp
    _check_refits(res, [OUTLIER])
    assert res.refit_info[OUTLIER]["sampler"] == f"{WARM}, one batched run of 1 refit"
    res = _loo(idata, m, refit=[OUTLIER], random_seed=7, second_opinions={"refit_options": {"batched": False}})
    _check_refits(res, [OUTLIER])
    assert res.refit_info[OUTLIER]["sampler"] == "pm.sample without the observation"


def test_batched_refits_match_closed_form_and_the_sequential_ones():
    """Ten refits of the leverage regression (p = 15, two high-leverage outliers, exact LOO in closed form) in
    batched runs of 8 targets (two batches, the second padded): each within 4 MCSEs of the exact elpd_i, and
    within 4 combined MCSEs of the same refit run one after the other with NumPyro's NUTS."""
    from gaussian_models import leverage_problem

    m = leverage_problem()
    data = m.exact_draws(n_chains=4, n_draws=500, seed=3)
    targets = list(range(10))
    kw = {"warmup": 300, "draws": 500}
    res = _loo(data, m, refit=targets, random_seed=11,
               second_opinions={"refit_options": kw, "mixture": False, "smc": False})
    seq = _loo(data, m, refit=targets, random_seed=11,
               second_opinions={"refit_options": {**kw, "batched": False}, "mixture": False, "smc": False})
    exact = m.exact_elpd_i()
    for i in targets:
        info = res.refit_info[i]
        assert info["sampler"] == f"{WARM}, one batched run of {8 if i < 8 else 2} refits"
        assert seq.refit_info[i]["sampler"].startswith("NumPyro NUTS")
        e, s = float(res.elpd_i.values[i]), float(res.mcse_elpd_i.values[i])
        assert abs(e - exact[i]) <= 4 * s + 0.01, (i, e, s, exact[i])
        e2, s2 = float(seq.elpd_i.values[i]), float(seq.mcse_elpd_i.values[i])
        assert abs(e - e2) <= 4 * np.hypot(s, s2) + 0.01, (i, e, e2)
        assert info["rhat_loglik"] <= 1.01 and info["rhat_max"] <= 1.01
    # the outliers are where plain PSIS is off by more than a nat: the refits are not the plain values
    plain = pl.loo(data)
    assert max(abs(plain.elpd_i.values[i] - exact[i]) for i in (0, 1)) > 1.0


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler for the Stan bridge")
def test_stan_refit_matches_closed_form(tmp_path):
    pytest.importorskip("httpstan")
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    data = {"N": len(Y), "y": Y, "sigma": SIGMA, "mu0": 0.0, "tau0": TAU}
    program = ROOT / "stan_models" / "normal_known_sigma.stan"
    sm = pl.StanModel(program, data, sampler=True)
    paths, _ = sample_cmdstan_csv(sm, tmp_path, chains=4, random_seed=11, num_warmup=300, num_samples=500)
    tree = pl.from_cmdstan([str(p) for p in paths])
    assert tree["posterior"].attrs["adapt_delta"] == 0.8 and tree["posterior"].attrs["max_depth"] == 10
    res = _loo(tree, pl.StanModel(program, data), refit=[OUTLIER], random_seed=3)
    _check_refits(res, [OUTLIER])
    assert res.refit_info[OUTLIER]["sampler"] == "Stan NUTS on the program without the observation"


def test_batched_horseshoe_refits_sample_the_non_centered_form():
    """The horseshoe logistic regression refits in its non-centered parameterization, batched: each refit agrees
    within 4 combined MCSEs with the sequential refit (NumPyro's NUTS on the non-centered NumPyro model), and the
    map between the two coordinates is the identity there and back."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 8))
    y = (X[:, 0] - X[:, 1] + rng.normal(size=30) > 0).astype(int)
    model = pl.models.LogisticRegression(X, y, prior="horseshoe", p0=2)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=300, random_seed=2,
                       numpyro_model=model.numpyro_model())
    target = model.batched_refit_density()
    theta = jnp.asarray(model.unconstrain(data["posterior"])[:5])
    back = jax.vmap(target.to_model)(jax.vmap(target.from_model)(theta))
    np.testing.assert_allclose(np.asarray(back), np.asarray(theta), rtol=1e-5, atol=1e-6)  # float32 outside pl calls
    kw = {"warmup": 300, "draws": 300}
    targets = [0, 1, 2]
    res = _loo(data, model, refit=targets, random_seed=3,
               second_opinions={"refit_options": kw, "mixture": False, "smc": False})
    seq = _loo(data, model, refit=targets, random_seed=3,
               second_opinions={"refit_options": {**kw, "batched": False}, "mixture": False, "smc": False})
    for i in targets:
        assert res.refit_info[i]["sampler"] == f"{WARM}, one batched run of 3 refits"
        assert seq.refit_info[i]["sampler"].startswith("NumPyro NUTS, non-centered horseshoe")
        e, s = float(res.elpd_i.values[i]), float(res.mcse_elpd_i.values[i])
        e2, s2 = float(seq.elpd_i.values[i]), float(seq.mcse_elpd_i.values[i])
        assert abs(e - e2) <= 4 * np.hypot(s, s2) + 0.01, (i, e, s, e2, s2)
