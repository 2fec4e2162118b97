"""The problem observations named as the user names them (as R's ``pareto_k_ids``): 1-based
``log_lik[8]`` for Stan draws (the CmdStan CSV column ``log_lik.8``), the coordinate values for other DataTrees;
which observations had plain PSIS's k-hat above the threshold, and what became of each. Real CmdStan CSV files
(``tests/data/cmdstan-eight-schools``) and ``arviz_stats.loo`` on the same draws as the reference."""

from __future__ import annotations

import glob
import warnings

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr
from arviz_base import from_dict
from data_paths import EIGHT_SCHOOLS as ES

import ppl_loo as pl


@pytest.fixture(scope="module")
def eight():
    tree = pl.from_cmdstan(sorted(glob.glob(str(ES / "output_*.csv"))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = pl.loo(tree)
    return tree, res, [str(w.message) for w in caught]


def test_stan_draws_are_labelled_from_one(eight):
    tree, res, said = eight
    assert res.stan_labels is True
    assert res.obs_labels([0, 7]) == ["log_lik[1]", "log_lik[8]"]
    ref = azs.loo(tree, pointwise=True)
    k = np.asarray(ref.pareto_k.values, dtype=float)
    np.testing.assert_array_equal(res.pareto_k_ids(), np.flatnonzero(k > res.good_k))  # arviz_stats' k-hat
    np.testing.assert_array_equal(res.pareto_k_ids(0.3), np.flatnonzero(k > 0.3))
    ids = res.pareto_k_ids()
    assert ids.size >= 1
    i = int(ids[0])
    line = "\n".join(res.problem_lines(limit=res.n_data_points))
    assert line.startswith(f"{int(res.flagged().sum())} observation(s) not settled by plain PSIS alone")
    assert f"log_lik[{i + 1}] (k {k[i]:.2f} -> " in line
    assert any(f"(log_lik[{i + 1}])" in s for s in said)  # the warning names it the same way
    again = pl.LooResult.from_datatree(res.to_datatree())
    assert again.stan_labels is True and again.obs_labels([i]) == [f"log_lik[{i + 1}]"]


def test_other_draws_are_labelled_by_their_coordinates():
    rng = np.random.default_rng(0)
    ll = rng.normal(-1.0, 0.1, size=(2, 50, 4))
    ll[..., 2] += rng.standard_t(1.2, size=(2, 50)) * 3  # a heavy-tailed column: k-hat above the threshold
    tree = from_dict({"posterior": {"mu": rng.normal(size=(2, 50))}, "log_likelihood": {"y": ll}},
                     dims={"y": ["school"]}, coords={"school": ["a", "b", "c", "d"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(tree)
    assert res.stan_labels is False
    assert res.obs_labels([2]) == ["y[school='c']"]
    assert 2 in res.pareto_k_ids()
    assert "y[school='c'] (k " in res.problem_lines()[0]
    plain = xr.DataTree.from_dict({"posterior": tree["posterior"].to_dataset(),
                                   "log_likelihood": xr.Dataset({"y": (("chain", "draw", "y_dim_0"), ll)})})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res0 = pl.loo(plain)
    assert res0.obs_labels([2]) == ["y[y_dim_0=2]"]  # default dims, not from Stan: the 0-based coordinate
