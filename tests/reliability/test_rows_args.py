"""Reliability rows of the JAX model and ``pl.pvi`` arguments: wrong names, missing inputs, wrong types.

The conjugate normal-mean model (known sigma) gives exact posterior draws and a closed-form LOO.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
from arviz_base import from_dict
from rows import Row, check_row, params
from scipy.stats import norm

import ppl_loo as pl

pytestmark = pytest.mark.x64

Y = np.array([0.3, -1.2, 0.8, 0.1, 0.5, -0.4, 1.9, 0.0])
TAU, SIGMA = 2.0, 1.0


def model(**kw):
    yj = jnp.asarray(Y)
    return pl.JaxModel({"theta": ((), None)}, lambda v: jst.norm.logpdf(v["theta"], 0.0, TAU),
                       lambda v: jst.norm.logpdf(yj, v["theta"], SIGMA), **kw)


def sim(values, key):
    return values["theta"] + SIGMA * jax.random.normal(key, Y.shape)


def posterior(y):
    prec = 1 / TAU**2 + len(y) / SIGMA**2
    return np.sum(y) / SIGMA**2 / prec, 1 / prec


@functools.cache
def tree(ll_name="obs"):
    """Exact posterior draws (4 chains x 1000) with the log-likelihood stored as ``ll_name``."""
    m, v = posterior(Y)
    theta = np.random.default_rng(1).normal(m, np.sqrt(v), size=(4, 1000))
    ll = norm.logpdf(Y[None, None, :], theta[..., None], SIGMA)
    return from_dict({"posterior": {"theta": theta}, "log_likelihood": {ll_name: ll}})


def exact_elpd():
    out = 0.0
    for i in range(len(Y)):
        m, v = posterior(np.delete(Y, i))
        out += norm.logpdf(Y[i], m, np.sqrt(v + SIGMA**2))
    return out


def check_elpd(res):
    assert abs(res.elpd - exact_elpd()) < 0.05


def pvi(optimizer=None, output=None, **kw):
    args = dict(random_seed=0, draws=20, optimizer={"steps": 5, **(optimizer or {})},
                output={"compare_vi": False, **(output or {})})
    args.update(kw)
    return pl.pvi(None, model(), **args)


J, P = "pl.JaxModel", "pl.pvi"
ROWS = [
    Row(J, "names", "var_name not in the data's log_likelihood group",
        lambda: pl.loo(tree("obs"), model(var_name="y"), progressbar=False), error=ValueError,
        says=("var_name='y'", "['obs']", "var_name=..."), regression=True),
    Row(J, "names", "var_name matching the data's log_likelihood group",
        lambda: pl.loo(tree("obs"), model(var_name="obs"), progressbar=False), check=check_elpd, warns=None),
    Row(J, "names", "pl.loo(var_name=) overriding the model's", lambda: pl.loo(tree("obs"), model(), var_name="obs",
        progressbar=False), check=check_elpd, warns=None),
    Row(J, "shapes and types", "var_name not a string", lambda: model(var_name=None), error=TypeError,
        says=("var_name=None", "non-empty string")),
    Row(J, "shapes and types", "var_name empty", lambda: model(var_name=""), error=TypeError,
        says=("var_name=''", "log-likelihood variable")),
    Row(J, "shapes and types", "observed of another shape", lambda: model(observed=np.zeros(3)), error=ValueError,
        says=("observed has shape (3,)", "(8,)")),
    Row(J, "shapes and types", "obs_dims of the wrong length", lambda: model(obs_dims=("a", "b")), error=ValueError,
        says=("obs_dims", "shape (8,)")),
    Row(J, "shapes and types", "a shape that is not ints", lambda: pl.JaxModel({"theta": ("x", None)}, lambda v: 0.0,
        lambda v: jnp.zeros(3)), error=ValueError, says=("params['theta']", "tuple of ints", "'x'")),
    Row(J, "shapes and types", "a bijector given by name", lambda: pl.JaxModel({"theta": ((), "exp")}, lambda v: 0.0,
        lambda v: jnp.zeros(3)), error=ValueError, says=("params['theta']", "'exp'", "Bijector")),
    Row(J, "shapes and types", "log_prior not a function", lambda: pl.JaxModel({"theta": ((), None)}, 3.0,
        lambda v: jnp.zeros(3)), error=TypeError, says=("log_prior must be a function", "['theta']", "float")),
    Row(J, "shapes and types", "log_prior returning one value per parameter entry", lambda: pl.JaxModel(
        {"beta": ((3,), None)}, lambda v: jst.norm.logpdf(v["beta"]), lambda v: jnp.zeros(3)), error=ValueError,
        says=("log_prior must return one number", "shape (3,)", "jnp.sum")),
    Row(J, "names", "log_lik asks for an undeclared parameter", lambda: pl.JaxModel({"theta": ((), None)},
        lambda v: 0.0, lambda v: jst.norm.logpdf(jnp.asarray(Y), v["mu"], 1.0)), error=ValueError,
        says=("log_lik", "'mu'", "not declared in params")),
    Row(J, "names", "log_prior asks for an undeclared parameter", lambda: pl.JaxModel({"theta": ((), None)},
        lambda v: jst.norm.logpdf(v["mu"]), lambda v: jnp.zeros(3)), error=ValueError,
        says=("log_prior", "'mu'", "not declared in params")),
    Row(P, "options", "CRPS score without observed=", lambda: pvi(score="crps", score_options={"simulator": sim}),
        error=ValueError,
        says=("score='crps'", "observed=", "shape (8,)"), regression=True),
    Row(P, "options", "quadratic score without observed=", lambda: pvi(score="quadratic",
        score_options={"probs": lambda v: jnp.stack([jnp.full(Y.shape, 0.5), jnp.full(Y.shape, 0.5)], -1)}),
        error=ValueError,
        says=("quadratic", "observed=")),
    Row(P, "options", "score name in capitals", lambda: pvi(score="CRPS"), error=ValueError,
        says=("score='CRPS'", "'crps'")),
    Row(P, "options", "unknown family", lambda: pvi(family="gauss"), error=ValueError,
        says=("family='gauss'", "meanfield")),
    Row(P, "options", "unknown optimizer", lambda: pvi(optimizer={"method": "sgdx"}), error=ValueError,
        says=("method='sgdx'", "adam")),
    Row(P, "options", "unknown option in a group", lambda: pvi(optimizer={"stepz": 5}), error=ValueError,
        says=("'stepz'", "OptimizerOptions", "steps")),
    Row(P, "shapes and types", "steps a string", lambda: pvi(optimizer={"steps": "x"}), error=ValueError,
        says=("steps='x'", "integer")),
    Row(P, "shapes and types", "steps not whole", lambda: pvi(optimizer={"steps": 2.5}), error=ValueError,
        says=("steps=2.5", "integer")),
    Row(P, "shapes and types", "draws a string", lambda: pvi(draws="many"), error=ValueError,
        says=("draws='many'", "integer")),
    Row(P, "shapes and types", "learning_rate a string", lambda: pvi(optimizer={"learning_rate": "fast"}),
        error=ValueError,
        says=("learning_rate='fast'", "positive number")),
    Row(P, "shapes and types", "random_seed a string", lambda: pvi(random_seed="abc"), error=TypeError,
        says=("random_seed", "int")),
    Row(P, "shapes and types", "init of the wrong size", lambda: pvi(optimizer={"init": np.zeros(3)}),
        error=ValueError,
        says=("init", "dim=1")),
    Row(P, "shapes and types", "data not a DataTree", lambda: pl.pvi({"a": 1}, model(), random_seed=0), error=TypeError,
        says=("data must be an xarray.DataTree",)),
    Row(P, "mismatched data and results", "observed of another shape", lambda: pvi(score="crps",
        score_options={"simulator": sim, "observed": np.zeros(3)}), error=ValueError,
        says=("observed has shape (3,)", "(8,)")),
]


@params(ROWS)
def test_row(row):
    check_row(row)
