"""Shared by the report tests: small real fits (PyMC; a JAX normal and Student-t model sampled by NumPyro, with an
adapted, a doubtful and a refit observation; arviz_base's eight schools) and an HTML reader."""

from __future__ import annotations

import base64
import functools
import io
import warnings
from html.parser import HTMLParser

import numpy as np
import pandas as pd

import ppl_loo as pl

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: 16 observations, two of them outliers (index 10: 9.0, index 14: 6.5)
Y_OUTLIERS = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7, -0.6, 0.4, 6.5, -0.1])
DOUBTFUL, REFIT = 10, 14  # the doubtful observation of the search alone, and the one it refits


def logistic_fits(n=40, seed=0, with_pvi=True):
    """A PyMC Bernoulli-logit model on ``n`` points: MCMC draws (with posterior_predictive) and a PVI fit.

    Returns ``(model, mcmc_tree, res_adaptive, res_plain, pvi_tree, res_pvi)``: the adaptive
    result with the model, plain PSIS of the same draws (no model), and the adaptive result on the
    PVI draws (both None unless ``with_pvi``; the search alone, no second opinions). ``mcmc_tree`` and ``pvi_tree`` hold
    their result as group ``loo``.
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
        pvi_tree = pl.pvi(None, model, score="log", random_seed=3, draws=500,
                          optimizer={"steps": 300, "draws_per_step": 50})
        # the search alone (no second opinions): every observation doubtful, the case of the compare table's
        # flagged columns where the best model is all doubtful; tests/test_report.py checks the defaults too
        res_pvi = pl.loo(pvi_tree, model, progressbar=False, second_opinions={"mixture": False, "smc": False})
    return model, pl.add_loo(tree, res), res, plain, pl.add_loo(pvi_tree, res_pvi), res_pvi


def _location_scale_model(student):
    """``y ~ Normal(mu, s)`` or ``Student-t(3, mu, s)``, ``mu ~ N(0, 10)``, ``log s ~ N(0, 1)``: a ``pl.JaxModel``."""
    import jax.numpy as jnp
    import jax.scipy.stats as st

    y = Y_OUTLIERS

    def log_lik(v):
        s = jnp.exp(v["log_s"])
        return st.t.logpdf(y, 3.0, v["mu"], s) if student else st.norm.logpdf(y, v["mu"], s)

    return pl.JaxModel({"mu": ((), None), "log_s": ((), None)},
                       lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0) + st.norm.logpdf(v["log_s"], 0.0, 1.0),
                       log_lik, obs_dims=("obs",), observed=y)


def _with_predictive(tree, student, seed):
    """The tree with ``posterior_predictive`` (replicates drawn from each posterior draw) and ``observed_data``."""
    import xarray as xr

    rng = np.random.default_rng(seed)
    post = tree["posterior"]
    mu, s = post["mu"].values[..., None], np.exp(post["log_s"].values)[..., None]
    noise = rng.standard_t(3.0, size=mu.shape[:2] + Y_OUTLIERS.shape) if student else rng.normal(
        size=mu.shape[:2] + Y_OUTLIERS.shape)
    out = tree.copy()
    out["posterior_predictive"] = xr.DataTree(xr.Dataset({"y": (("chain", "draw", "obs"), mu + s * noise)}))
    out["observed_data"] = xr.DataTree(xr.Dataset({"y": (("obs",), Y_OUTLIERS)}))
    return out


@functools.cache
def outlier_fits():
    """Normal and Student-t models of ``Y_OUTLIERS`` (NumPyro NUTS, 4 x 1000 draws, converged), as
    ``{name: DataTree with a loo group}`` (posterior_predictive and observed_data included):

    - ``"normal"``: the search alone with three proposals (``transforms=["ll", "newton", "var"]``, no mixture, no
      SMC, every observation examined: ``adapt="all"``) and a refit of observation ``REFIT``: some observations
      adapted, observation ``DOUBTFUL`` (9.0) doubtful, ``REFIT`` refit (exact LOO, no k-hat after);
    - ``"normal_default"``: the same draws with ``pl.loo``'s defaults (``DOUBTFUL`` is refit: its refit costs less
      than SMC and, with the few other hard observations, than the mixture run);
    - ``"student_t"``: the Student-t model with ``pl.loo``'s defaults.

    Cached: the report tests of every module share one computation.
    """
    from ppl_loo.sampling import sample_nuts

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for student in (False, True):
            model = _location_scale_model(student)
            tree = sample_nuts(model, num_chains=4, num_warmup=500, num_samples=1000, random_seed=3)
            tree = _with_predictive(tree, student, seed=4)
            if student:
                out["student_t"] = pl.add_loo(tree, pl.loo(tree, model, progressbar=False, random_seed=1))
                continue
            search = pl.loo(tree, model, progressbar=False, random_seed=1, refit=[REFIT],
                            search={"transforms": ["ll", "newton", "var"], "adapt": "all"},
                            second_opinions={"mixture": False, "smc": False})
            out["normal"] = pl.add_loo(tree, search)
            out["normal_default"] = pl.add_loo(tree, pl.loo(tree, model, progressbar=False, random_seed=1))
    return out


@functools.cache
def narrow_fit():
    """``Y_OUTLIERS`` under a normal model with a known sigma far too small (0.3): NumPyro draws, replicates and
    plain PSIS-LOO (group ``loo``). Its LOO predictive distributions are much too narrow: the LOO-PIT values pile
    up at 0 and 1."""
    import jax.scipy.stats as st
    import xarray as xr

    from ppl_loo.sampling import sample_nuts

    y, sigma = Y_OUTLIERS, 0.3
    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: st.norm.logpdf(y, v["mu"], sigma), obs_dims=("obs",), observed=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = sample_nuts(model, num_chains=2, num_warmup=300, num_samples=500, random_seed=5)
        mu = tree["posterior"]["mu"].values[..., None]
        rep = mu + sigma * np.random.default_rng(6).normal(size=mu.shape[:2] + y.shape)
        tree["posterior_predictive"] = xr.DataTree(xr.Dataset({"y": (("chain", "draw", "obs"), rep)}))
        tree["observed_data"] = xr.DataTree(xr.Dataset({"y": (("obs",), y)}))
        return pl.add_loo(tree, pl.loo(tree))


class ReportReader(HTMLParser):
    """Reads back what the tests check: headings, section ids, the tables' ``data-value`` cells (rows headed by a
    model) and the ``data-category`` of their rows, images, the text of paragraphs and list items with their
    attributes, and the ``data-*`` attributes of every element."""

    def __init__(self, text):
        super().__init__()
        self.h2, self.h3, self.images, self.tables, self.elements = [], [], [], {}, []
        self.sections, self.row_categories, self.paragraphs = [], {}, []
        self._heading, self._table, self._row, self._para = None, None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag in ("h2", "h3"):
            self._heading = [tag, ""]
        elif tag in ("p", "li"):
            self._para = [tag, attrs, ""]
        elif tag == "section":
            self.sections.append(attrs.get("id"))
        elif tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = {}
        elif tag == "tr":
            self._row = None
            if "data-category" in attrs:
                self.row_categories.setdefault(self._table, []).append(attrs["data-category"])
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
        elif tag in ("p", "li") and self._para and self._para[0] == tag:
            self.paragraphs.append(tuple(self._para))
            self._para = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._heading:
            self._heading[1] += data
        if self._para:
            self._para[2] += data

    def text_of(self, tag, cls):
        """The texts of the ``tag`` elements of class ``cls``."""
        return [text for t, attrs, text in self.paragraphs if t == tag and attrs.get("class") == cls]


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


def hand_categories(res):
    """Each observation's category by an explicit loop over the result's fields (the rule of
    ``ppl_loo.workflow.loo.categories.observation_categories``, written out once more)."""
    n = res.elpd_i.size
    tr = [str(t) for t in np.asarray(res.transform.values).ravel()]
    ev = [str(t) for t in np.asarray(res.evidence.values).ravel()] if res.evidence is not None else [""] * n
    dbt = [bool(v) for v in np.asarray(res.doubtful.values).ravel()]
    rft = [bool(v) for v in np.asarray(res.refit.values).ravel()] if res.refit is not None else [False] * n
    out = []
    for i in range(n):
        if dbt[i]:
            out.append("doubtful")
        elif rft[i] or tr[i] == "refit":
            out.append("refit")
        elif tr[i] not in ("psis", "failed", "mixture", "smc"):  # elpd_i from an adapted proposal
            out.append("adapted")
        elif "mixture" in ev[i] or "smc" in ev[i] or tr[i] in ("mixture", "smc"):
            out.append("second_opinion")
        else:
            out.append("psis")
    return out
