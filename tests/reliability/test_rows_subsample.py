"""Reliability rows of ``pl.loo_subsample`` without a model (the log_likelihood group): bad or unusual inputs and
what ppl_loo does with them (see ``tests/reliability/rows.py``)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from plain_inputs import ordinary, tree
from rows import Row, check_row, params

import ppl_loo as pl

E = "pl.loo_subsample (plain)"
N = 40


@functools.cache
def base():
    return ordinary(n=N, seed=2)


def with_column(values, i=0):
    ll, mu = base()
    ll = ll.copy()
    ll[..., i] = values
    return tree(ll, mu)


def saturated():
    rng = np.random.default_rng(3)
    return np.where(rng.random((4, 250)) < 0.95, 0.0, np.log(0.05))


def full_loo(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pl.loo(data)


def same_as_full_loo_at(data, res):
    """The subsample's elpd_i are those of pl.loo(data), NaN elsewhere."""
    idx = res.loo_subsample_observations
    full = np.asarray(full_loo(data).elpd_i.values).ravel()
    ours = np.asarray(res.elpd_i.values).ravel()
    np.testing.assert_allclose(ours[idx], full[idx], rtol=1e-12)
    assert np.isnan(np.delete(ours, idx)).all()


def check_constant(res):
    assert np.asarray(res.pareto_k.values)[0] == -np.inf
    assert np.asarray(res.elpd_i.values)[0] == pytest.approx(-1.25, abs=1e-12)
    assert not np.asarray(res.doubtful.values).any() and not res.warning


def check_ties(res):
    assert bool(np.asarray(res.doubtful.values)[0]) and res.warning
    assert "tie" in str(np.asarray(res.reason.values)[0])
    assert np.isfinite(res.elpd) and np.isfinite(res.se)


def two_dims():
    ll, mu = base()
    return tree(ll.reshape(4, 250, 5, 8), mu, dims=("a", "b"), coords={"a": list("vwxyz"), "b": np.arange(8) * 10})


def check_two_dims(res):
    data = two_dims()
    assert res.elpd_i.dims == ("a", "b") and list(res.elpd_i.coords["a"].values) == list("vwxyz")
    same_as_full_loo_at(data, res)


OBS = np.array([0, 3, 7, 12, 20, 33])

ROWS = [
    Row(E, "ties and constants", "all-constant column in the subsample: exact LOO density",
        lambda: pl.loo_subsample(with_column(-1.25), observations=OBS), check=check_constant, warns=None),
    Row(E, "ties and constants", "saturated column (95% of draws tie) in the subsample",
        lambda: pl.loo_subsample(with_column(saturated()), observations=OBS), check=check_ties, warns=UserWarning,
        says=("y[y_dim_0=0]", "tie", "pl.loo(data, model)")),
    Row(E, "dimensions", "obs dims ('a', 'b') with coords: flat C-order indices",
        lambda: pl.loo_subsample(two_dims(), observations=OBS), check=check_two_dims, warns=None),
    Row(E, "NaN and inf", "NaN in one column of the log-likelihood",
        lambda: pl.loo_subsample(with_column(np.nan, 5), observations=OBS), error=ValueError,
        says=("log_likelihood['y']", "non-finite", "recompute")),
    Row(E, "shapes and types", "4 chains x 5 draws (fewer than PSIS needs)",
        lambda: pl.loo_subsample(tree(base()[0][:, :5], base()[1][:, :5]), observations=OBS), error=ValueError,
        says=("20 draws", "at least 25")),
    Row(E, "options", "observations larger than n", lambda: pl.loo_subsample(with_column(-1.0), observations=N + 1),
        error=ValueError, says=("observations=41", "between 1 and 40")),
    Row(E, "options", "observation index out of range",
        lambda: pl.loo_subsample(with_column(-1.0), observations=np.array([1, 40])), error=ValueError,
        says=("[40]", "outside 0..39")),
    Row(E, "duplicates", "repeated observation index (diff_srs)",
        lambda: pl.loo_subsample(with_column(-1.0), observations=np.array([1, 2, 2])), error=ValueError,
        says=("repeats", "[2]", "hh_pps")),
    Row(E, "shapes and types", "observations as floats",
        lambda: pl.loo_subsample(with_column(-1.0), observations=np.array([1.0, 2.0])), error=TypeError,
        says=("observations", "integer")),
    Row(E, "shapes and types", "observations=True", lambda: pl.loo_subsample(with_column(-1.0), observations=True),
        error=TypeError, says=("observations=True",)),
    Row(E, "options", "hh_pps with one draw", lambda: pl.loo_subsample(with_column(-1.0), observations=1,
                                                                        estimator="hh_pps"),
        error=ValueError, says=("at least 2",)),
    Row(E, "options", "unknown estimator", lambda: pl.loo_subsample(with_column(-1.0), observations=5,
                                                                     estimator="pps"),
        error=ValueError, says=("estimator='pps'", "'diff_srs'")),
    Row(E, "options", "unknown approximation",
        lambda: pl.loo_subsample(with_column(-1.0), observations=5, approximation="mid"),
        error=ValueError, says=("approximation='mid'", "'lpd'")),
    Row(E, "options", "random_seed is a string",
        lambda: pl.loo_subsample(with_column(-1.0), observations=5, random_seed="a"),
        error=TypeError, says=("random_seed='a'",)),
    Row(E, "shapes and types", "observations given positionally (arviz_stats' order)",
        lambda: pl.loo_subsample(with_column(-1.0), 5), error=TypeError, says=("model=5", "observations=5")),
    Row(E, "shapes and types", "observations missing", lambda: pl.loo_subsample(with_column(-1.0)), error=TypeError,
        says=("observations is required", "observations=1000")),
    Row(E, "options", "every observation: equals pl.loo",
        lambda: (pl.loo_subsample(with_column(-1.0), observations=N)), warns=None,
        check=lambda r: (same_as_full_loo_at(with_column(-1.0), r),
                         np.testing.assert_allclose(r.elpd, full_loo(with_column(-1.0)).elpd, rtol=1e-12))),
]


@params(ROWS)
def test_row(row):
    check_row(row)
