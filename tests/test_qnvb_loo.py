"""``pl.qnvb`` on PyMC, Stan and JAX models, and ``pl.loo`` of its draws (the projective LOO proposal).

Known answers: on a conjugate linear-Gaussian regression QNVB's fixed point is the mean-field KL
optimum (mean = the posterior mean, ``sigma_i = 1 / sqrt(Lambda_ii)``; notes T6: exact with a full
Hadamard period, a few per cent small with 2 pairs and a dense precision), and LOO from its draws
with the Eq. 13 weights and the adaptive proposals equals the closed-form LOO to Monte Carlo error.
"""

import shutil

import numpy as np
import pytest
from scipy import stats

import ppl_loo as pl
from tests.linear_models import jax_model, mean_field_sd, problem, pymc_model, stan_model


@pytest.fixture(scope="module")
def lin():
    return problem()


@pytest.fixture(scope="module")
def fits(lin):
    """QNVB of the same regression in JAX, PyMC and Stan (Stan compiled once, then cached)."""
    out = {}
    for name, build in (("jax", jax_model), ("pymc", pymc_model)):
        model = build(lin)  # one model object for the fit and the LOO (PyMC's graph converted once)
        out[name] = (model, pl.qnvb(None, model, random_seed=1, draws=2000))
    if shutil.which("g++") is not None:
        sm = stan_model(lin)
        out["stan"] = (sm, pl.qnvb(None, sm, random_seed=1, draws=2000))
    return out


@pytest.mark.parametrize("backend", ["jax", "pymc", "stan"])
def test_qnvb_reaches_the_mean_field_optimum(lin, fits, backend):
    if backend not in fits:
        pytest.skip("no C++ compiler for Stan")
    _, tree = fits[backend]
    g = tree["qnvb"]
    mean, _ = lin.posterior()
    np.testing.assert_allclose(g["mu"].values, mean, atol=1e-6)
    ratio = g["sigma"].values / mean_field_sd(lin)
    assert np.all(ratio <= 1.0 + 1e-6) and np.all(ratio > 0.9), ratio  # RMS-averaged h: at most a few % small
    assert g.attrs["gradient_evaluations"] == 4 * g.attrs["steps"]
    draws = tree["posterior"]["beta"].values.reshape(-1, lin.dim)
    lq = stats.norm.logpdf(draws, g["mu"].values, g["sigma"].values).sum(axis=1)
    np.testing.assert_allclose(g["log_q"].values.ravel(), lq, rtol=1e-10)


def test_full_hadamard_period_is_exact(lin):
    """Notes T6: with every pair of the period (d = 3 -> 4 pairs) the Hessian diagonal is exact."""
    tree = pl.qnvb(None, jax_model(lin), random_seed=2, draws=100, optimizer={"n_pairs": 4})
    np.testing.assert_allclose(tree["qnvb"]["sigma"].values, mean_field_sd(lin), rtol=1e-6)


@pytest.mark.parametrize("backend", ["jax", "pymc", "stan"])
def test_loo_of_qnvb_equals_closed_form(lin, fits, backend):
    if backend not in fits:
        pytest.skip("no C++ compiler for Stan")
    model, tree = fits[backend]
    res = pl.loo(tree, model)
    exact = lin.exact_elpd_i()
    err = res.elpd_i.values - exact
    se = np.maximum(res.mcse_elpd_i.values, 1e-3)
    assert np.all(np.abs(err) < 4 * se + 2e-3), (err, se)
    assert res.approximation == "qnvb" and 0.0 <= res.pareto_k_q < 0.7
    assert "projective" in res.engine_config["transforms"] and "cavity" in res.engine_config["transforms"]
    assert res.approx_ok.shape == res.elpd_i.shape
    np.testing.assert_array_equal(res.approx_ok.values, res.pareto_k_psis.values <= res.good_k)


def test_projective_proposal_is_used_and_close(lin, fits):
    """The projective update of q for the outlier is a good proposal: its candidate's elpd is within
    Monte Carlo error of the exact LOO (it moves q to the mean-field LOO fixed point)."""
    model, tree = fits["jax"]
    res = pl.loo(tree, model, search={"transforms": ["projective"], "adapt": "all"})
    c = res.candidates
    labels = [t for t, _ in c["labels"]]
    j = labels.index("projective")
    assert abs(c["elpd"][3, j] - lin.exact_elpd_i()[3]) < 4 * max(c["se"][3, j], 1e-3)


def test_minibatch_qnvb(lin):
    """Minibatch QNVB: unbiased loss estimates, the mean lands within the posterior's spread."""
    tree = pl.qnvb(None, jax_model(lin), random_seed=3, draws=100, optimizer={"minibatch": 5, "steps": 3000})
    mean, cov = lin.posterior()
    assert np.all(np.abs(tree["qnvb"]["mu"].values - mean) < 3 * np.sqrt(np.diag(cov)))
    assert tree["qnvb"].attrs["minibatch"] == 5


def test_bad_arguments_name_the_fix(lin):
    with pytest.raises(ValueError, match="power of 2"):
        pl.qnvb(None, jax_model(lin), random_seed=0, optimizer={"n_pairs": 3})
    with pytest.raises(TypeError, match="random_seed"):
        pl.qnvb(None, jax_model(lin), random_seed="abc", optimizer={"steps": 5})
    with pytest.raises(ValueError, match=r"unknown option 'n_pair'.*QNVBOptions.*n_pairs"):
        pl.qnvb(None, jax_model(lin), optimizer={"n_pair": 4})
    with pytest.raises(ValueError, match="quadrature"):
        pl.qnvb(None, jax_model(lin), random_seed=0, optimizer={"quadrature": "simpson"})


def test_refit_fallback_from_an_approximation(lin, fits):
    """refit= on draws of q: NUTS without the observation (4 chains of 1,000 by default: q carries no
    sampler settings), elpd_i = log mean p(y_i | theta) over the refit draws (no full-data posterior
    draws to bridge with); it equals the closed form to Monte Carlo error."""
    model, tree = fits["jax"]
    res = pl.loo(tree, model, refit=[3, 10], random_seed=5,
                 progressbar=False, second_opinions={"refit_options": {"draws": 500, "warmup": 300}})
    exact = lin.exact_elpd_i()
    for i in (3, 10):
        assert bool(res.refit.values[i]) and res.transform.values[i] == "refit"
        assert abs(res.elpd_i.values[i] - exact[i]) < 4 * res.mcse_elpd_i.values[i] + 1e-3
    assert res.refit_info[3]["sampler"] and res.mcse_elpd_i.values[3] > 0


def test_data_with_a_posterior_is_refused_before_fitting(lin, fits):
    _, tree = fits["jax"]
    for fit in (pl.qnvb, pl.laplace):
        with pytest.raises(ValueError, match="already has a posterior"):
            fit(tree, jax_model(lin), random_seed=0)
        with pytest.raises(TypeError, match="DataTree"):
            fit({"posterior": 1}, jax_model(lin), random_seed=0)


@pytest.mark.parametrize("fit", ["laplace", "qnvb"])
def test_bad_numbers_name_the_input(lin, fit):
    """Rows of bad input of both entry points: each error names the argument and what it must be."""
    fn, model = getattr(pl, fit), jax_model(lin)
    with pytest.raises(ValueError, match="init must be 3 finite values"):
        fn(None, model, optimizer={"init": [0.0, np.nan, 0.0]}, random_seed=0)
    with pytest.raises(ValueError, match="init must be 3 finite values.*shape \\(2,\\)"):
        fn(None, model, optimizer={"init": [0.0, 0.0]}, random_seed=0)
    with pytest.raises(ValueError, match="draws=5 must be >= 10"):
        fn(None, model, draws=5, random_seed=0)


def test_bad_settings_name_the_input(lin):
    model = jax_model(lin)
    with pytest.raises(ValueError, match="minibatch=0"):
        pl.qnvb(None, model, random_seed=0, optimizer={"minibatch": 0})
    with pytest.raises(ValueError, match="sigma_min <= sigma_max"):
        pl.qnvb(None, model, random_seed=0, optimizer={"sigma_min": 1.0, "sigma_max": 0.1})
    with pytest.raises(ValueError, match="prior_precision must be positive and finite"):
        pl.laplace(None, model, curvature="hessian", prior_precision=np.nan, random_seed=0)
    with pytest.raises(ValueError, match="subspace='diagonal'"):
        pl.laplace(None, model, subspace="diagonal", rank=2, random_seed=0)


def test_random_seed_none_reproduces(lin):
    """``random_seed=None`` is a seed derived from the observed data: the same input gives the same fit."""
    a = pl.qnvb(None, jax_model(lin), draws=20, optimizer={"steps": 50})
    b = pl.qnvb(None, jax_model(lin), draws=20, optimizer={"steps": 50})
    np.testing.assert_array_equal(a["qnvb"]["mu"].values, b["qnvb"]["mu"].values)
    np.testing.assert_array_equal(a["qnvb"]["log_q"].values, b["qnvb"]["log_q"].values)
