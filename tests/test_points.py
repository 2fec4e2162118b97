"""``ppl_loo.workflow.downstream.points``: a result's weighted points built once and reused by the after-LOO functions.

Known answers: the second call of ``pl.loo_pit``, ``pl.loo_score``, ``pl.loo_expectations``, ``pl.loo_r2`` and
``pl.loo_metrics`` on the same result gives bitwise the numbers of the first, builds no points (the counter
``points.BUILT``: 1 build for the six calls) and compiles nothing (JAX's compilation events: 0); a pickled result
(a new object) and one read back from its DataTree give the same numbers (to 1e-12) from points built once more; other
posterior draws for the same result build them again (nothing stale); the LOO mean of the normal mean's adapted outlier
agrees with the closed form.
"""

from __future__ import annotations

import pickle
import warnings

import jax
import numpy as np
import pytest
import xarray as xr

import ppl_loo as pl
from ppl_loo.workflow.downstream import points

Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5, 10.0])


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


@pytest.fixture(scope="module")
def normal_mean():
    """A conjugate normal mean in PyMC (sigma 1, prior N(0, 10^2)), exact posterior draws (4 x 1000), one outlier
    (adapted by ``pl.loo``)."""
    pm = pytest.importorskip("pymc")
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=Y)
    prec = 1 / 100 + Y.size
    draws = Y.sum() / prec + np.random.default_rng(2).standard_normal((4, 1000)) / np.sqrt(prec)
    idata = xr.DataTree.from_dict({"posterior": xr.Dataset({"mu": (("chain", "draw"), draws)})})
    idata = _quiet(pm.compute_log_likelihood, idata, model=m, progressbar=False, extend_inferencedata=True)
    idata = _quiet(pm.sample_posterior_predictive, idata, model=m, random_seed=2, progressbar=False,
                   extend_inferencedata=True)
    res = _quiet(pl.loo, idata, m, progressbar=False, random_seed=1, search={"adapt": "flagged"},
                 second_opinions={"mixture": False, "smc": False})
    return m, idata, res


class _Compilations:
    """Counts JAX's compilation events (tracing, lowering, backend compilation) while active."""

    def __init__(self):
        self.count = 0
        self.active = False
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kwargs):
        if self.active and event.startswith("/jax/core/compile"):
            self.count += 1


_COMPILATIONS = _Compilations()


def _calls(idata, res, m):
    return {
        "pit": lambda: pl.loo_pit(idata, res, model=m).values,
        "crps": lambda: pl.loo_score(idata, res, model=m, kind="crps", random_seed=4, pointwise=True).pointwise.values,
        "scrps": lambda: pl.loo_score(idata, res, model=m, kind="scrps", random_seed=4,
                                      pointwise=True).pointwise.values,
        "mean": lambda: pl.loo_expectations(idata, res, lambda p: np.repeat(p["mu"][:, None], Y.size, 1),
                                           model=m).values,
        "r2": lambda: pl.loo_r2(idata, res, model=m).values,
        "rmse": lambda: np.array(pl.loo_metrics(idata, res, model=m, kind="rmse")),
    }


def test_second_call_reuses_the_points_bitwise_and_compiles_nothing(normal_mean):
    m, idata, res = normal_mean
    i = Y.size - 1
    assert str(res.transform.values[i]) != "psis"  # the outlier is adapted
    before = points.BUILT["points"]
    first = {name: _quiet(call) for name, call in _calls(idata, res, m).items()}
    assert points.BUILT["points"] - before == 1  # built by the first call, reused by the five others
    _COMPILATIONS.active, _COMPILATIONS.count = True, 0
    try:
        second = {name: _quiet(call) for name, call in _calls(idata, res, m).items()}
    finally:
        _COMPILATIONS.active = False
    assert _COMPILATIONS.count == 0
    assert points.BUILT["points"] - before == 1
    for name in first:
        assert np.array_equal(first[name], second[name]), name
    # the adapted outlier's LOO mean of mu is the closed form's (exact LOO posterior of the normal mean)
    rest = np.delete(Y, i)
    exact = rest.sum() / (1 / 100 + rest.size)
    assert first["mean"][i] == pytest.approx(exact, abs=4 / np.sqrt(1 / 100 + rest.size) / np.sqrt(100))


def test_a_pickled_result_gives_the_same_numbers_and_other_draws_rebuild(normal_mean):
    m, idata, res = normal_mean
    crps = _quiet(pl.loo_score, idata, res, model=m, kind="crps", random_seed=4, pointwise=True).pointwise.values
    copy = pickle.loads(pickle.dumps(res))
    before = points.BUILT["points"]
    again = _quiet(pl.loo_score, idata, copy, model=m, kind="crps", random_seed=4, pointwise=True).pointwise.values
    assert points.BUILT["points"] - before == 1  # a new object: its own points, the same numbers (to rounding)
    np.testing.assert_allclose(again, crps, rtol=1e-12, atol=0)
    back = pl.LooResult.from_datatree(pl.add_loo(idata, res))
    np.testing.assert_allclose(_quiet(pl.loo_score, idata, back, model=m, kind="crps", random_seed=4,
                                      pointwise=True).pointwise.values, crps, rtol=1e-12, atol=0)
    # the same result with other posterior draws (reversed in each chain): not the kept points, built again
    other = idata.copy()
    other["posterior"] = xr.Dataset({"mu": (("chain", "draw"), idata["posterior"]["mu"].values[:, ::-1])})
    before = points.BUILT["points"]
    _quiet(pl.loo_pit, other, res, model=m)
    assert points.BUILT["points"] - before == 1
