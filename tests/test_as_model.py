"""``ppl_loo.adapters.as_model``: a PyMC model's adapter built once and reused while the model is unchanged.

Known answers: ``as_model`` of the same ``pymc.Model`` twice shares one adapter's compiled programs
(``Model.compiled``); after ``pm.set_data`` a new adapter, whose log-likelihood is the closed-form normal log
density of the new data (the old one's of the old data); at most ``PYMC_ADAPTERS_KEPT`` adapters are kept.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ppl_loo.adapters import as_model as dispatch
from ppl_loo.adapters.as_model import as_model

pm = pytest.importorskip("pymc")


def _model(x):
    with pm.Model() as m:
        data = pm.Data("x", x)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=data)
    return m


def test_same_model_same_adapter_until_its_data_change():
    x = np.array([0.5, -1.0, 2.0])
    m = _model(x)
    first = as_model(m)
    assert as_model(m).compiled is first.compiled and as_model(m).log_lik == first.log_lik
    theta = np.array([[0.3]])
    np.testing.assert_allclose(np.asarray(first.log_lik(theta))[0], stats.norm.logpdf(x, 0.3, 1.0), rtol=1e-12)
    new = np.array([1.5, 0.0, -0.7])
    with m:
        pm.set_data({"x": new})
    second = as_model(m)
    assert second.compiled is not first.compiled
    np.testing.assert_allclose(np.asarray(second.log_lik(theta))[0], stats.norm.logpdf(new, 0.3, 1.0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(first.log_lik(theta))[0], stats.norm.logpdf(x, 0.3, 1.0), rtol=1e-12)
    assert as_model(m).compiled is second.compiled


def test_at_most_the_kept_number_of_adapters():
    models = [_model(np.array([0.1 * k, 1.0])) for k in range(dispatch.PYMC_ADAPTERS_KEPT + 3)]
    for m in models:
        as_model(m)
    assert len(dispatch._PYMC_ADAPTERS) == dispatch.PYMC_ADAPTERS_KEPT
    kept = {id(m) for m, _, _ in dispatch._PYMC_ADAPTERS.values()}
    assert kept == {id(m) for m in models[-dispatch.PYMC_ADAPTERS_KEPT:]}
