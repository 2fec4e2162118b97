"""The public surface of ``pl.loo``, ``pl.loo_subsample``, ``pl.loo_mixture`` and ``pl.loo_kfold``: the grouped options
(``pl.SearchOptions``, ``pl.SecondOpinions``, ``pl.ComputeOptions``), their checks, and the one meaning of
``random_seed=None`` (a seed derived from the posterior draws: a rerun on the same draws gives the same numbers).

The model is the conjugate normal mean with known sigma and a gross outlier (``tests/test_refit.py``): its exact LOO
predictive densities are known in closed form.
"""

from __future__ import annotations

import inspect
import warnings

import jax.scipy.stats as st
import numpy as np
import pytest
from gaussian_models import normal_mean_model

import ppl_loo as pl
from ppl_loo.numerics.random import seed_from
from ppl_loo.sampling import sample_nuts
from ppl_loo.workflow.loo.inputs import posterior_seed

Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
OUTLIER = 10
SIGMA, TAU = 1.0, 10.0


def closed_form_loo():
    """The exact LOO predictive densities of the conjugate normal mean (``tests/gaussian_models.py``)."""
    return normal_mean_model(Y, sigma=SIGMA, tau=TAU).exact_elpd_i()


@pytest.fixture(scope="module")
def fit():
    yj = np.asarray(Y)
    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, TAU),
                        lambda v: st.norm.logpdf(yj, v["mu"], SIGMA), obs_dims=("obs",), observed=Y)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    return model, data


def _loo(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pl.loo(*args, progressbar=False, **kw)


def test_signatures_are_short_and_grouped():
    params = inspect.signature(pl.loo).parameters
    assert len(params) <= 12
    assert list(params) == ["data", "model", "var_name", "k_threshold", "reff", "log_q", "refit", "random_seed",
                            "progressbar", "search", "second_opinions", "compute"]
    assert len(inspect.signature(pl.loo_subsample).parameters) <= 12
    assert list(inspect.signature(pl.loo_mixture).parameters) == ["data", "model", "var_name", "random_seed",
                                                                  "mixture_options"]
    assert list(inspect.signature(pl.loo_kfold).parameters) == ["data", "model", "k", "folds", "stratify_by",
                                                                "group_by", "random_seed", "refit_options",
                                                                "progressbar", "var_name"]
    for fn in (pl.loo, pl.loo_subsample, pl.loo_mixture, pl.loo_kfold):
        assert inspect.signature(fn).parameters["random_seed"].default is None
    assert not hasattr(pl, "kfold")
    for cls, fields in ((pl.SearchOptions, ("transforms", "hbar", "adapt", "influence_threshold", "jacobian",
                                             "min_ess", "batch_size")),
                        (pl.SecondOpinions, ("mixture", "mixture_options", "smc", "refit_options")),
                        (pl.ComputeOptions, ("chunk_size", "client", "check_log_lik", "conventions"))):
        assert tuple(inspect.signature(cls).parameters) == fields
        assert all(f"    {name} :" in cls.__doc__ for name in fields)  # every field documented
        assert cls.__name__ in pl.__all__
    assert pl.SearchOptions().transforms == "all" and pl.SearchOptions().adapt == "auto"
    assert pl.SecondOpinions().mixture == "auto" and pl.SecondOpinions().smc == "auto"
    assert pl.ComputeOptions().check_log_lik is True and pl.ComputeOptions().conventions == "arviz"
    with pytest.raises(AttributeError):  # frozen
        pl.SearchOptions().adapt = "all"


def test_a_removed_keyword_is_refused(fit):
    model, data = fit
    with pytest.raises(TypeError, match="transforms"):
        pl.loo(data, model, transforms=["pmm1"])
    with pytest.raises(TypeError, match="seed"):
        pl.loo_subsample(data, observations=3, seed=1)
    with pytest.raises(TypeError, match="K"):
        pl.loo_kfold(data, model, K=3)


@pytest.mark.parametrize("kw, match", [
    ({"search": {"transfroms": ["pmm1"]}},
     r"'transfroms' is not an option of search=; the keys of search= are transforms, hbar, adapt, influence_threshold, "
     r"jacobian, min_ess, batch_size"),
    ({"search": {"mixture": False}}, r"'mixture' belongs to second_opinions= \(pl.SecondOpinions\), not search="),
    ({"search": {"chunk_size": 10}}, r"'chunk_size' belongs to compute= \(pl.ComputeOptions\), not search="),
    ({"second_opinions": {"transforms": "all"}}, r"'transforms' belongs to search= \(pl.SearchOptions\)"),
    ({"second_opinions": {"mixture_kwargs": {}}}, r"'mixture_kwargs' is now 'mixture_options'"),
    ({"compute": {"refit_kwargs": {}}}, r"'refit_kwargs' is now 'refit_options' of second_opinions="),
    ({"search": {"random_seed": 1}}, r"'random_seed' is an argument of pl.loo itself"),
])
def test_an_unknown_key_is_named_with_its_group(fit, kw, match):
    model, data = fit
    with pytest.raises(ValueError, match=match):
        pl.loo(data, model, **kw)


def test_a_wrong_type_of_group_is_refused(fit):
    model, data = fit
    with pytest.raises(TypeError, match=r"a SearchOptions goes to search=, not compute="):
        pl.loo(data, model, compute=pl.SearchOptions())
    with pytest.raises(TypeError, match=r"search=\['pmm1'\]: give a pl.SearchOptions, a dict"):
        pl.loo(data, model, search=["pmm1"])
    with pytest.raises(ValueError, match=r"is an option of pl.loo's second_opinions=, which pl.loo_subsample does "
                                         r"not take"):
        pl.loo_subsample(data, model, observations=3, search={"smc": False})
    with pytest.raises(ValueError, match=r"chunk_size does not apply to loo_subsample"):
        pl.loo_subsample(data, model, observations=3, compute={"chunk_size": 10})
    with pytest.raises(ValueError, match=r"search: adapt='some'"):
        pl.loo(data, model, search={"adapt": "some"})
    with pytest.raises(ValueError, match=r"second_opinions: smc=1"):
        pl.loo(data, model, second_opinions={"smc": 1})


def test_an_instance_and_a_dict_give_the_same_numbers(fit):
    model, data = fit
    opinions = {"mixture": False, "smc": False}
    a = _loo(data, model, search=pl.SearchOptions(transforms=["pmm1"]), second_opinions=pl.SecondOpinions(**opinions))
    b = _loo(data, model, search={"transforms": ["pmm1"]}, second_opinions=opinions)
    np.testing.assert_array_equal(a.elpd_i.values, b.elpd_i.values)
    np.testing.assert_array_equal(a.pareto_k.values, b.pareto_k.values)
    assert a.elpd == b.elpd and a.se == b.se
    assert set(np.unique(a.transform.values)) <= {"psis", "pmm1", "failed"}
    assert a.searched.values[OUTLIER] and a.searched.values.sum() == 1  # the outlier (k-hat 0.77), searched alone
    exact = closed_form_loo()
    settled = ~a.doubtful.values
    assert settled.sum() >= len(Y) - 1
    np.testing.assert_array_less(np.abs(a.elpd_i.values - exact)[settled], 4 * a.mcse_elpd_i.values[settled] + 0.02)


def test_seed_from():
    x, y = np.arange(6.0).reshape(2, 3), np.ones(4)
    s = seed_from(None, x, y)
    assert isinstance(s, int) and 0 <= s < 2**63
    assert s == seed_from(None, x.copy(), y.copy()) == seed_from(None, np.asfortranarray(x), y)
    assert s != seed_from(None, x + 1e-12, y) and s != seed_from(None, y, x)
    rng = np.random.default_rng(1)
    assert seed_from(7, x) == 7 and seed_from(rng, x) is rng


def test_random_seed_none_reproduces_on_the_same_draws(fit):
    """The mixture run is random: with ``random_seed=None`` it takes the seed derived from the posterior draws, the
    same on a rerun (identical numbers), another for other draws; an explicit seed is used as given."""
    model, data = fit
    kw = {"search": {"transforms": ["pmm1"]}, "second_opinions": {"mixture": True, "smc": False}}
    a = _loo(data, model, **kw)
    b = _loo(data, model, **kw)
    np.testing.assert_array_equal(a.elpd_i.values, b.elpd_i.values)
    np.testing.assert_array_equal(a.mcse_elpd_i.values, b.mcse_elpd_i.values)
    seed = posterior_seed(None, data)
    assert seed == seed_from(None, data["posterior"]["mu"].values)
    assert a.mixture_info["seed"] == b.mixture_info["seed"] == int(np.random.default_rng(seed).integers(2**31))
    c = _loo(data, model, random_seed=seed, **kw)  # None means exactly that seed
    np.testing.assert_array_equal(a.elpd_i.values, c.elpd_i.values)
    other = data.copy()
    other["posterior"] = data["posterior"].to_dataset().isel(draw=slice(None, None, -1))
    assert posterior_seed(None, other) != seed
    # the mixture estimate of the outlier: right within its Monte Carlo error
    exact = closed_form_loo()[OUTLIER]
    assert abs(a.mixture_info["elpd_i"][OUTLIER] - exact) <= 4 * a.mixture_info["mcse_i"][OUTLIER] + 0.02
