"""The breast-cancer data and the reduced mode of ``benchmarks/breast_cancer.py``: ``pl.loo`` on a PyMC logistic
regression with a Normal(0, 1) prior (4 x 1,000 draws), scored against the ground-truth suite's committed refits
(``benchmarks/results/truth/breast_cancer_normal.json``: ``pm.sample`` without each of 24 observations of plain
k-hat above 0.7, bridge sampling)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ppl_loo.datasets import load_breast_cancer

ROOT = Path(__file__).resolve().parents[1]


def test_breast_cancer_data_is_the_uci_table():
    x, y = load_breast_cancer(standardized=False)
    assert x.shape == (569, 30) and y.shape == (569,)
    assert int(y.sum()) == 357  # benign
    # the first tumour of the UCI table (malignant): radius, texture, perimeter, area
    np.testing.assert_array_equal(x[0, :4], [17.99, 10.38, 122.8, 1001.0])
    assert y[0] == 0
    z, _ = load_breast_cancer()
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.std(0, ddof=1), 1.0, rtol=1e-12)


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("breast_cancer_benchmark", ROOT / "benchmarks" / "breast_cancer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(["--reduced", "--out", str(tmp_path_factory.mktemp("bc") / "reduced.json")])[0]


def test_reduced_benchmark_agrees_with_the_refits(reduced):
    vs = reduced["vs_refits"]["pl_loo"]
    assert vs["n"] == 24
    assert vs["silent_failures"] == 0, vs
    assert vs["max_abs_error"] < 0.1, vs
    assert reduced["vouched_share"] >= 0.99, reduced
