"""The public surface: option groups refuse unknown keys by name, the fits take few flat parameters, one seed name.

Known answers: ``pl.pvi`` has at most 12 parameters; no public function has a parameter named ``seed``; every option
group's unknown key raises an error naming it and listing the group's fields; ``seed_from`` returns the given seed
itself and, for None, the same int for the same bytes and another for other bytes.
"""

import dataclasses
import inspect

import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest

import ppl_loo as pl
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.options import resolve_options

Y = np.array([-1.0, 0.5, 0.0, 2.0, 1.0])


def _model():
    yj = jnp.asarray(Y)
    return pl.JaxModel({"theta": ((), None)}, lambda v: jst.norm.logpdf(v["theta"], 0.0, 10.0),
                       lambda v: jst.norm.logpdf(yj, v["theta"], 1.0), observed=Y)


GROUPS = [pl.OptimizerOptions, pl.ScoreOptions, pl.OutputOptions, pl.FlowOptions, pl.QNVBOptions, pl.LaplaceOptions]


@pytest.mark.parametrize("cls", GROUPS, ids=lambda c: c.__name__)
def test_option_group_refuses_an_unknown_key_by_name(cls):
    fields = [f.name for f in dataclasses.fields(cls)]
    with pytest.raises(ValueError, match=rf"unknown option 'bogus'.*pl\.{cls.__name__} are {', '.join(fields)}"):
        resolve_options(cls, {fields[0]: getattr(cls(), fields[0]), "bogus": 1}, "opts", "f")
    with pytest.raises(TypeError, match="bogus"):
        cls(bogus=1)
    assert resolve_options(cls, None, "opts", "f") == cls()
    one = {fields[-1]: 3}
    assert getattr(resolve_options(cls, one, "opts", "f"), fields[-1]) == 3
    inst = cls()
    assert resolve_options(cls, inst, "opts", "f") is inst
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(inst, fields[0], 1)
    with pytest.raises(TypeError, match=rf"must be a pl\.{cls.__name__}, a dict of its options or None"):
        resolve_options(cls, 3, "opts", "f")


def test_fits_refuse_an_unknown_key_before_any_work():
    model = _model()
    for kw, name, cls in [(dict(optimizer={"stepz": 5}), "stepz", "OptimizerOptions"),
                          (dict(score_options={"simulate": 1}), "simulate", "ScoreOptions"),
                          (dict(output={"draws": 5}), "draws", "OutputOptions")]:
        with pytest.raises(ValueError, match=rf"pl\.pvi\(.*unknown option '{name}'.*pl\.{cls}"):
            pl.pvi(None, model, **kw)
    with pytest.raises(ValueError, match=r"unknown option 'n_pair'.*QNVBOptions"):
        pl.qnvb(None, model, optimizer={"n_pair": 2})
    with pytest.raises(ValueError, match=r"unknown option 'max_steps'.*LaplaceOptions.*steps"):
        pl.laplace(None, model, optimizer={"max_steps": 2})
    with pytest.raises(ValueError, match=r"unknown option 'var'.*ScoreOptions.*var_name"):
        pl.predictive_scores(None, model, score_options={"var": "y"})
    with pytest.raises(TypeError, match=r"family=pl\.FlowOptions"):
        pl.pvi(None, model, family={"n_layers": 2})


def test_few_flat_parameters_and_data_first():
    assert len(inspect.signature(pl.pvi).parameters) <= 12
    assert len(inspect.signature(pl.qnvb).parameters) <= 12
    assert len(inspect.signature(pl.laplace).parameters) <= 12
    for fn in (pl.pvi, pl.laplace, pl.qnvb, pl.laplace_predictive, pl.predictive_scores, pl.loo):
        assert list(inspect.signature(fn).parameters)[:2] == ["data", "model"], fn.__name__
    for fn in (pl.loo_pit, pl.plot_loo_pit, pl.loo_score, pl.loo_r2, pl.loo_metrics, pl.loo_roc,
               pl.loo_expectations):
        assert list(inspect.signature(fn).parameters)[:2] == ["data", "res"], fn.__name__


def test_one_seed_name_and_none_by_default():
    with_seed, nondefault = [], []
    for name in pl.__all__:
        obj = getattr(pl, name)
        if not callable(obj):
            continue
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        if "seed" in params:
            with_seed.append(name)
        p = params.get("random_seed")
        if p is not None and p.default is not None and p.default is not inspect.Parameter.empty:
            nondefault.append(name)
    assert with_seed == []
    assert nondefault == []


def test_seed_from():
    assert seed_from(7, np.arange(3)) == 7
    rng = np.random.default_rng(0)
    assert seed_from(rng, np.arange(3)) is rng
    a = seed_from(None, np.arange(3.0), Y)
    assert a == seed_from(None, np.arange(3.0), Y.copy())
    assert a != seed_from(None, np.arange(3.0), Y + 1)
    assert isinstance(a, int) and 0 <= a < 2**63


def test_pvi_random_seed_none_reproduces():
    """``random_seed=None`` is a seed derived from the observed data: the same input gives the same fit."""
    kw = dict(draws=20, progressbar=False, optimizer={"steps": 20, "draws_per_step": 10},
              output={"compare_vi": False})
    a = pl.pvi(None, _model(), **kw)
    b = pl.pvi(None, _model(), **kw)
    np.testing.assert_array_equal(a["pvi"]["phi"].values, b["pvi"]["phi"].values)
    np.testing.assert_array_equal(a["posterior"]["theta"].values, b["posterior"]["theta"].values)
