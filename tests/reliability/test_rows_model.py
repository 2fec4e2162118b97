"""Reliability rows of ``pl.loo(data, model)`` with a real PyMC model.

The model: row means ``mu_a ~ N(0, tau)``, ``y[a, b] ~ N(mu_a, sigma)`` with known ``tau``, ``sigma`` over the
observation dims ``("a", "b")`` (4 x 5): each observation's exact LOO predictive density is a closed form (the
conjugate posterior of ``mu_a`` from the other 4 observations of its row).
"""

from __future__ import annotations

import functools

import numpy as np
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
import pytest
import xarray as xr
from rows import Row, check_row, params
from scipy import stats

import ppl_loo as pl

E = "pl.loo (model)"
TAU, SIGMA = 2.0, 1.0
A_COORDS, B_COORDS = ["a0", "a1", "a2", "a3"], [10, 11, 12, 13, 14]


def observed():
    rng = np.random.default_rng(16)
    mu = rng.normal(scale=TAU, size=4)
    return mu[:, None] + rng.normal(scale=SIGMA, size=(4, 5))


@functools.cache
def fit():
    y = observed()
    with pm.Model(coords={"a": A_COORDS, "b": B_COORDS}) as model:
        mu = pm.Normal("mu", 0.0, TAU, dims="a")
        pm.Normal("y", mu[:, None], SIGMA, observed=y, dims=("a", "b"))
        idata = pm.sample(draws=500, tune=500, chains=2, cores=1, progressbar=False, random_seed=16,
                          compute_convergence_checks=False, nuts_sampler="pymc",
                          idata_kwargs={"log_likelihood": True})
    return model, idata


def exact_elpd():
    """``log p(y_ab | y_-ab)``: the posterior of ``mu_a`` from the other 4 observations of row ``a``."""
    y = observed()
    out = np.empty_like(y)
    for a in range(4):
        for b in range(5):
            rest = np.delete(y[a], b)
            prec = 1 / TAU**2 + rest.size / SIGMA**2
            mean = rest.sum() / SIGMA**2 / prec
            out[a, b] = stats.norm.logpdf(y[a, b], mean, np.sqrt(1 / prec + SIGMA**2))
    return out


@functools.cache
def loo_as_stored():
    model, idata = fit()
    return pl.loo(idata, model, progressbar=False)


def with_log_lik(transform):
    model, idata = fit()
    data = idata.copy()
    data["log_likelihood"] = xr.DataTree(transform(idata["log_likelihood"].to_dataset()))
    return data


def transposed():
    model, _ = fit()
    return pl.loo(with_log_lik(lambda ds: ds.transpose("chain", "draw", "b", "a")), model, progressbar=False)


def check_exact(res):
    exact = exact_elpd()
    assert res.elpd_i.dims == ("a", "b")
    assert list(res.elpd_i.coords["a"].values) == A_COORDS and list(res.elpd_i.coords["b"].values) == B_COORDS
    got = res.elpd_i.transpose("a", "b").values
    mcse = res.mcse_elpd_i.transpose("a", "b").values
    assert np.all(np.abs(got - exact) <= 4 * mcse + 0.02), np.max(np.abs(got - exact))
    ref = loo_as_stored()
    np.testing.assert_allclose(got, ref.elpd_i.transpose("a", "b").values, atol=1e-10)
    assert res.reason is not None and res.reason.dims == res.elpd_i.dims
    d = np.asarray(res.doubtful.values)
    r = np.asarray(res.reason.values)
    assert np.all((r != "") == d)


def renamed():
    model, _ = fit()
    return pl.loo(with_log_lik(lambda ds: ds.rename({"a": "row", "b": "col"})), model, progressbar=False)


def with_posterior(change):
    model, idata = fit()
    data = idata.copy()
    data["posterior"] = xr.DataTree(change(idata["posterior"].to_dataset()))
    return data


def nan_mu(ds):
    mu = ds["mu"].values.copy()
    mu[1, :3, 2] = np.nan
    return ds.assign(mu=(ds["mu"].dims, mu))


def dup_data():
    _, idata = fit()
    return xr.DataTree.from_dict({"posterior": duplicated_chain(idata["posterior"].to_dataset()),
                                  "log_likelihood": duplicated_chain(idata["log_likelihood"].to_dataset())})


def call(data=None, **kw):
    model, idata = fit()
    return pl.loo(idata if data is None else data, model, progressbar=False, **kw)


@functools.cache
def edge_fit():
    """``y_j ~ N(mu, 1)`` (6), ``z``: a normal likelihood capped at a ceiling that 95% of the draws reach (a
    saturated observation: log p(z | mu) ties at the cap), ``c ~ N(0, 1)``: a term free of the parameters."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=6)
    sd = 1 / np.sqrt(6 + 1 / 9)
    cap = -0.5 * np.log(2 * np.pi) - 0.5 * (1.96 * sd) ** 2
    z = float(y.sum() / (6 + 1 / 9))

    def capped_logp(value, mu):
        return pt.minimum(pm.logp(pm.Normal.dist(mu, 1.0), value), cap)

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 3.0)
        pm.Normal("y", mu, 1.0, observed=y)
        pm.CustomDist("z", mu, logp=capped_logp, observed=np.array([z]))
        pm.Normal("c", 0.0, 1.0, observed=np.array([0.5]))
        idata = pm.sample(draws=500, tune=500, chains=2, cores=1, progressbar=False, random_seed=1,
                          compute_convergence_checks=False, nuts_sampler="pymc", idata_kwargs={"log_likelihood": True})
    return model, idata


def edge(var):
    """``pl.loo`` of the term ``var`` by the search alone (the second opinions, independent of the tied draws,
    may settle what the tie leaves doubtful)."""
    model, idata = edge_fit()
    return pl.loo(idata, model, var_name=var, progressbar=False, second_opinions={"mixture": False, "smc": False})


def check_capped(res):
    ll = edge_fit()[1]["log_likelihood"]["z"].values.ravel()
    assert np.unique(ll, return_counts=True)[1].max() / ll.size > 0.9  # the input: mostly tied
    assert np.isnan(res.pareto_k_psis.values[0])
    assert bool(res.doubtful.values[0]) and res.warning
    assert "tie" in str(res.reason.values[0])


def check_constant(res):
    assert res.elpd_i.values[0] == pytest.approx(stats.norm.logpdf(0.5), abs=1e-12)
    assert res.pareto_k.values[0] == -np.inf and res.p_loo_i.values[0] == pytest.approx(0.0, abs=1e-12)
    assert not bool(res.doubtful.values[0]) and not res.warning and str(res.reason.values[0]) == ""


def duplicated_chain(ds):
    return xr.concat([ds, ds.isel(chain=[0]).assign_coords(chain=[2])], dim="chain")


def check_dup(res):
    got, mcse = res.elpd_i.transpose("a", "b").values, res.mcse_elpd_i.transpose("a", "b").values
    assert np.all(np.abs(got - exact_elpd()) <= 4 * mcse + 0.05)


ROWS = [
    Row(E, "ties and constants", "95% of the draws tie at a capped likelihood", lambda: edge("z"), check=check_capped,
        warns=UserWarning, says=("doubtful", "z[z_dim_0=0]", "tie"), regression=True),
    Row(E, "ties and constants", "term free of the parameters: exact LOO density", lambda: edge("c"),
        check=check_constant, warns=None),
    Row(E, "duplicates", "the same chain twice", lambda: call(dup_data()), check=check_dup, warns=UserWarning,
        says=("chains 0 and 2", "identical")),
    Row(E, "dimensions", "log_likelihood dims ('b', 'a'), model's ('a', 'b')", transposed, check=check_exact,
        warns=None, regression=True),
    Row(E, "dimensions", "stored log-likelihood as the model's: exact elpd_i", loo_as_stored, check=check_exact,
        warns=None),
    Row(E, "dimensions", "log_likelihood dims renamed ('row', 'col')", renamed, error=ValueError,
        says=("('row', 'col')", "('a', 'b')", "rename")),
    Row(E, "NaN and inf", "NaN in posterior draws", lambda: call(with_posterior(nan_mu)), error=ValueError,
        says=("posterior variable 'mu'", "3 NaN", "drop the chains"), regression=True),
    Row(E, "shapes and types", "2 chains x 1 draw", lambda: call(with_posterior(lambda ds: ds.isel(draw=[0]))),
        error=ValueError, says=("2 draws", "at least 25", "sample more"), regression=True),
    Row(E, "options", "k_threshold='x'", lambda: call(k_threshold="x"), error=ValueError,
        says=("k_threshold='x'", "at most 1"), regression=True),
    Row(E, "options", "k_threshold=2", lambda: call(k_threshold=2), error=ValueError,
        says=("k_threshold=2", "at most 1")),
    Row(E, "options", "hbar='x'", lambda: call(search={"hbar": "x"}), error=ValueError,
        says=("hbar='x'", "non-negative numbers")),
    Row(E, "options", "hbar=[]", lambda: call(search={"hbar": []}), error=ValueError, says=("hbar", "non-negative")),
    Row(E, "options", "transforms=3", lambda: call(search={"transforms": 3}), error=ValueError,
        says=("transforms=3", "'all'")),
    Row(E, "options", "transforms=['nope']", lambda: call(search={"transforms": ["nope"]}), error=ValueError,
        says=("nope", "'all'")),
    Row(E, "options", "adapt='some'", lambda: call(search={"adapt": "some"}), error=ValueError,
        says=("adapt='some'", "'auto'")),
    Row(E, "options", "reff='a'", lambda: call(reff="a"), error=ValueError, says=("reff='a'", "positive")),
    Row(E, "names", "var_name=1", lambda: call(var_name=1), error=TypeError, says=("var_name=1", "string")),
]


@params(ROWS)
def test_row(row):
    check_row(row)
