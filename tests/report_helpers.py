"""Shared by the report tests: small real fits (PyMC, arviz_base's eight schools) and an HTML reader."""

from __future__ import annotations

import base64
import io
import warnings
from html.parser import HTMLParser

import numpy as np
import pandas as pd

import ppl_loo as pl

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def logistic_fits(n=40, seed=0, with_pvi=True):
    """A PyMC Bernoulli-logit model on ``n`` points: MCMC draws (with posterior_predictive) and a PVI fit.

    Returns ``(model, mcmc_tree, res_adaptive, res_plain, pvi_tree, res_pvi)``: the adaptive
    result with the model, plain PSIS of the same draws (no model), and the adaptive result on the
    PVI draws (both None unless ``with_pvi``; the search alone, ``mixture=False``). ``mcmc_tree`` and ``pvi_tree`` hold their result as
    group ``loo``.
    """
    import pymc as pm

    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = (x + rng.normal(size=n) > 0).astype(int)
    with pm.Model(coords={"obs_id": np.arange(n)}) as model:
        b0 = pm.Normal("b0", 0, 2.5)
        b = pm.Normal("b", 0, 2.5)
        pm.Bernoulli("y", logit_p=b0 + b * x, observed=y, dims="obs_id")
        tree = pm.sample(draws=300, tune=300, chains=2, cores=1, progressbar=False, compute_convergence_checks=False,
                         nuts_sampler="pymc", random_seed=1)
        pm.compute_log_likelihood(tree, progressbar=False)
        pm.sample_posterior_predictive(tree, extend_inferencedata=True, random_seed=2, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(tree, model, progressbar=False)
        plain = pl.loo(tree)
        if not with_pvi:
            return model, pl.add_loo(tree, res), res, plain, None, None
        pvi_tree = pl.pvi(model, score="log", steps=300, draws_per_step=50, random_seed=3, num_draws=500)
        # the search alone (no second opinions): every observation doubtful, the case of the compare table's
        # flagged columns where the best model is all doubtful; tests/test_report.py checks the defaults too
        res_pvi = pl.loo(pvi_tree, model, progressbar=False, mixture=False, smc=False)
    return model, pl.add_loo(tree, res), res, plain, pl.add_loo(pvi_tree, res_pvi), res_pvi


class ReportReader(HTMLParser):
    """Reads back what the tests check: headings, the tables' ``data-value`` cells, images, and the
    ``data-*`` attributes of every element."""

    def __init__(self, text):
        super().__init__()
        self.h2, self.h3, self.images, self.tables, self.elements = [], [], [], {}, []
        self._heading, self._table, self._row, self._model = None, None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag in ("h2", "h3"):
            self._heading = [tag, ""]
        elif tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = {}
        elif tag == "tr":
            self._row = None
        elif tag == "th" and "data-model" in attrs:
            self._row = attrs["data-model"]
            self.tables[self._table][self._row] = {}
        elif tag == "td" and self._row is not None and "data-col" in attrs:
            self.tables[self._table][self._row][attrs["data-col"]] = attrs["data-value"]
        elif tag == "img":
            self.images.append(attrs)

    def handle_endtag(self, tag):
        if tag in ("h2", "h3") and self._heading:
            getattr(self, self._heading[0]).append(self._heading[1])
            self._heading = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._heading:
            self._heading[1] += data


def png_bytes(src):
    """The PNG bytes of a ``data:image/png;base64`` URI (asserting that it is one)."""
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix), src[:40]
    raw = base64.b64decode(src[len(prefix):], validate=True)
    assert raw[:8] == PNG_SIGNATURE
    return raw


def png_shape(src):
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(png_bytes(src)), format="png").shape


def same_value(text, value):
    """A cell's ``data-value`` equals the DataFrame's value (NaN equal to NaN, strings as strings)."""
    if value is None or value is pd.NA:
        return text == ""
    if isinstance(value, str):
        return text == value
    v = float(value)
    return (np.isnan(v) and np.isnan(float(text))) or float(text) == v
