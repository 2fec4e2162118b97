"""The weighted points behind every observation's ``elpd_i``, built once per result and reused by every after-LOO
function (``pl.loo_expectations``, ``loo_pit``, ``loo_score``, ``loo_r2``, ``loo_metrics``, ``loo_roc``).

A result stores the adapted proposals' weights, not their points: the points are rebuilt from the posterior draws with
the model (one candidate of the search per adapted observation), and the refits' and the mixture run's are the draws
the result kept (:mod:`ppl_loo.workflow.loo.kept`). That costs a pass over the adapted observations, so it is done once
per result and kept (with the values of the model's own pointwise functions there, and the simulated ``y_rep``)
beside the result, keyed on it: an entry is used only while the model, the posterior draws and the result's weights
are the ones it was built from (their digest), and it goes when the result is garbage collected. Nothing is stored
on the result itself, so it pickles and round-trips through netCDF as before.

The functions of the points are called on blocks of exactly ``S`` rows (the number of posterior draws, the last
block padded with copies of a point), the shape of their call at the posterior draws, so that a jit-compiled function
is compiled for one shape per model, not once per call or per observation.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.workflow.approx.stored_q import pvi_log_q, stored_gaussian
from ppl_loo.workflow.loo.engine import compiled_engine, config_from_plain, engine_data

__all__ = ["WeightedPoints", "result_points", "evaluated", "entry_cache", "posterior_draws", "blocks", "own_function",
           "BUILT"]

#: how many times the points of a result were built (not reused) in this process (tests count it)
BUILT = {"points": 0}


class WeightedPoints(NamedTuple):
    """The posterior draws and the other-than-PSIS points of a result.

    Attributes
    ----------
    theta : ndarray (S, d)
        The unconstrained posterior draws, chain-major.
    ll : ndarray (S, n)
        The log-likelihood there.
    obs : ndarray (a,)
        The flat index of each observation whose ``elpd_i`` has other weights than plain PSIS.
    origin : ndarray (a,)
        Where each observation's points come from: ``"adapted"``, ``"refit"`` or ``"mixture"``.
    bounds : ndarray (a + 1,)
        Observation ``obs[j]``'s points are ``rows[bounds[j]:bounds[j + 1]]``.
    rows : ndarray (R, d)
        Their unconstrained points (those of weight 0 dropped).
    log_weights : ndarray (R,)
        Their log weights (normalized per observation or not).
    row_obs : ndarray (R,)
        The observation of each row.
    """

    theta: np.ndarray
    ll: np.ndarray
    obs: np.ndarray
    origin: np.ndarray
    bounds: np.ndarray
    rows: np.ndarray
    log_weights: np.ndarray
    row_obs: np.ndarray

    def sets(self):
        """``(j, i, rows slice, origin)`` of every observation with other weights than plain PSIS."""
        for j, i in enumerate(self.obs):
            yield j, int(i), slice(int(self.bounds[j]), int(self.bounds[j + 1])), str(self.origin[j])


class _Entry:
    """What is kept for one result: the key it was built for, the points, and what was computed at them."""

    __slots__ = ("result", "programs", "key", "points", "values", "simulated")

    def __init__(self, res, model, key, points):
        self.result = weakref.ref(res)
        # the model, by its compiled programs (shared by the Models of one adapter, which they outlive)
        self.programs = weakref.ref(model.compiled) if _weakrefable(model.compiled) else (lambda m=model.compiled: m)
        self.key = key
        self.points = points
        self.values = {}  # a model's own pointwise function -> its values at the points
        self.simulated = {}  # (seed, simulator) -> y_rep at the points


#: ``id(result) -> _Entry``, removed when the result is garbage collected
_ENTRIES: dict[int, _Entry] = {}


def _weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def posterior_draws(data, res, model):
    """The unconstrained posterior draws ``(S, d)`` of ``data``, checked against the result."""
    if "posterior" not in getattr(data, "children", {}):
        raise ValueError("`data` has no posterior group: pass the DataTree the result was computed from.")
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()), dtype=np.float64)
    if theta.shape[0] != res.n_samples:
        raise ValueError(f"`data` has {theta.shape[0]} posterior draws but the result was computed from "
                         f"{res.n_samples}: pass the data the result was computed from.")
    return theta


def _digest(theta, res, data):
    """A digest of what the points depend on besides the model: the draws, the result's weights and proposals, and
    the stored approximation of draws of ``pl.laplace`` / ``pl.qnvb`` / ``pl.pvi``."""
    h = hashlib.blake2b(digest_size=20)

    def add(x):
        if x is None:
            h.update(b"none")
            return
        if hasattr(x, "values") and not callable(x.values):
            for name in getattr(x, "coords", {}):
                h.update(str(name).encode())
                h.update(np.ascontiguousarray(np.asarray(x.coords[name].values).astype(str)).tobytes())
            x = x.values
        a = np.ascontiguousarray(np.asarray(x))
        h.update(repr((a.shape, str(a.dtype))).encode())
        h.update(a.tobytes())

    add(theta)
    for name in ("adapted_log_weights", "kept_draws", "kept_log_weights", "log_q"):
        add(getattr(res, name, None))
    h.update(repr(sorted((getattr(res, "engine_config", None) or {}).items())).encode())
    h.update(repr(sorted(getattr(data, "children", {}))).encode())
    return h.hexdigest()


def entry_cache(data, res, model):
    """The kept :class:`_Entry` of ``res`` (its points built now where there is none for this model, draws and
    weights): ``entry.points``, and the dicts ``entry.values`` and ``entry.simulated`` for what is computed there."""
    theta = posterior_draws(data, res, model)
    key = _digest(theta, res, data)
    entry = _ENTRIES.get(id(res))
    if entry is not None and entry.result() is res:
        if entry.programs() is model.compiled and entry.key == key:
            return entry
    else:
        weakref.finalize(res, _ENTRIES.pop, id(res), None)
    entry = _Entry(res, model, key, _build(data, res, model, theta))
    _ENTRIES[id(res)] = entry
    return entry


def result_points(data, res, model) -> WeightedPoints:
    """The :class:`WeightedPoints` of ``res`` (built once per result, model, draws and weights)."""
    return entry_cache(data, res, model).points


def _build(data, res, model, theta) -> WeightedPoints:
    BUILT["points"] += 1
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    if ll.shape[1] != res.n_data_points:
        raise ValueError(f"model= has {ll.shape[1]} observations but the result {res.n_data_points}: pass the "
                         "model the result was computed with.")
    sets = list(_adapted_rows(data, res, model, theta, ll)) + list(_kept_rows(res, model))
    d = theta.shape[1]
    if not sets:
        empty = np.zeros(0, dtype=np.int64)
        return WeightedPoints(theta, ll, empty, np.zeros(0, dtype=str), np.zeros(1, dtype=np.int64),
                              np.zeros((0, d)), np.zeros(0), empty)
    sizes = np.array([len(lw) for _, _, lw, _ in sets], dtype=np.int64)
    obs = np.array([i for i, _, _, _ in sets], dtype=np.int64)
    return WeightedPoints(theta, ll, obs, np.array([s for _, _, _, s in sets], dtype=str),
                          np.r_[0, np.cumsum(sizes)].astype(np.int64),
                          np.concatenate([pts for _, pts, _, _ in sets]).reshape(-1, d),
                          np.concatenate([lw for _, _, lw, _ in sets]), np.repeat(obs, sizes))


def _adapted_rows(data, res, model, theta, ll):
    """``(i, unconstrained points, log weights, "adapted")`` of every adapted observation (its chosen candidate's
    points, rebuilt with the model as the search made them; points of weight 0 dropped)."""
    adapted = res.adapted_log_weights
    if not adapted.sizes["adapted"]:
        return
    stored = stored_gaussian(data)
    log_q_fn = pvi_log_q(data, theta)
    cfg, posterior_draws = config_from_plain(res.engine_config)
    _, points, _, _ = compiled_engine(model, cfg, posterior_draws, 1, log_q_fn)
    edata = engine_data(model, theta, res.engine_config,
                        None if res.log_q is None else res.log_q.transpose("chain", "draw").values,
                        None if stored is None else stored[1])
    jitted = _jitted_points(model, (cfg, posterior_draws, log_q_fn), points)
    for j, i in enumerate(np.asarray(adapted["adapted"].values)):
        pts = jitted(edata, int(i), jnp.asarray(ll[:, i]), str(adapted["adapted_transform"].values[j]),
                     float(adapted["adapted_hbar"].values[j]))
        lw = np.asarray(adapted.values[j], dtype=np.float64)
        keep = np.isfinite(lw)
        yield int(i), np.asarray(pts, dtype=np.float64)[keep], lw[keep], "adapted"


def _jitted_points(model, key, points):
    """``points(data, i, ll0, name, step)`` of the search (one candidate's pooled points), jit-compiled once per
    model, engine and candidate name (and step, for ``mm_iter``, whose step is its number of iterations), kept among
    the model's compiled programs with its compiled engine. Called eagerly it would run op by op, and compile its
    ``lax.scan`` (``mm_iter``) again at every call."""

    def at(data, i, ll0, name, step):
        static = name == "mm_iter"

        def build():
            if static:
                return jax.jit(lambda d, i_, l_, n=name, s=int(step): points(d, i_, l_, n, s))
            return jax.jit(lambda d, i_, l_, s, n=name: points(d, i_, l_, n, s))

        fn = model.compiled("candidate_points", (key, name, int(step) if static else None), build)
        i = jnp.asarray(i)
        return fn(data, i, ll0) if static else fn(data, i, ll0, jnp.asarray(step, dtype=ll0.dtype))

    return at


def _kept_rows(res, model):
    """``(i, unconstrained points, log weights, origin)`` of the observations whose refit or mixture draws ``res``
    kept."""
    lws = getattr(res, "kept_log_weights", None)
    if lws is None or not lws.sizes["kept"]:
        return
    sets = np.asarray(res.kept_draws.values, dtype=np.float64)
    if sets.shape[-1] != model.dim:
        raise ValueError(f"the result kept draws of {sets.shape[-1]} parameters, the model has {model.dim}: pass the "
                         "model the result was computed with.")
    for j, i in enumerate(np.asarray(lws["kept"].values)):
        lw = np.asarray(lws.values[j], dtype=np.float64)
        keep = np.isfinite(lw)
        yield int(i), sets[int(lws["kept_set"].values[j])][keep], lw[keep], str(lws["kept_source"].values[j])


def blocks(rows, size):
    """``(start, stop, block)``: ``rows`` ``(R, d)`` in blocks of exactly ``size`` rows, the last padded with copies
    of its first row (``stop - start`` of them are real)."""
    for start in range(0, rows.shape[0], size):
        block = rows[start:start + size]
        stop = start + block.shape[0]
        if block.shape[0] < size:
            block = np.concatenate([block, np.repeat(block[:1], size - block.shape[0], axis=0)])
        yield start, stop, block


def evaluated(entry, fn, model, own, name="`values`"):
    """``fn(params)`` at the posterior draws and at every other-than-PSIS point, as a list (one item per array ``fn``
    returns: one, or the items of a tuple) of ``(at the draws (S, n), at each row for its own observation (R,))``,
    and whether ``fn`` returned a tuple. ``own``: ``fn`` is a model's own pure function, whose values are kept in
    ``entry`` for the next call. ``fn`` is called on blocks of ``S`` points (:func:`blocks`), each distinct point
    once (the mixture run's draws are the points of every observation it vouches for)."""
    if own and fn in entry.values:
        return entry.values[fn]
    pts = entry.points
    S, n = pts.ll.shape

    def call(theta):
        out = fn(model.constrain(theta))
        items = list(out) if isinstance(out, tuple) else [out]
        return [np.asarray(v, dtype=np.float64).reshape(theta.shape[0], -1) for v in items], isinstance(out, tuple)

    at_draws, is_tuple = call(pts.theta)
    for v in at_draws:
        if v.shape[1] != n:
            raise ValueError(f"{name} returned {v.shape[1]} values per draw; the model has {n} observations.")
    at_rows = [np.empty(pts.rows.shape[0]) for _ in at_draws]
    # the mixture run's draws serve every observation it vouches for: each distinct point is evaluated once
    unique, inverse = np.unique(pts.rows, axis=0, return_inverse=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    first = np.searchsorted(inverse.ravel()[order], np.arange(0, unique.shape[0] + S, S))
    for b, (start, stop, block) in enumerate(blocks(unique, S)):
        vals, block_tuple = call(block)
        if block_tuple != is_tuple or len(vals) != len(at_draws):
            raise ValueError(f"{name} must return the same kind of output (one array, or a tuple of as many) "
                             "at every call.")
        rows = order[first[b]:first[b + 1]]
        for out, v in zip(at_rows, vals):
            out[rows] = v[inverse.ravel()[rows] - start, pts.row_obs[rows]]
    result = ([(a, b) for a, b in zip(at_draws, at_rows)], is_tuple)
    if own:
        entry.values[fn] = result
    return result


def own_function(fn, model) -> bool:
    """Whether ``fn`` is one of the model's own pointwise functions (``predictive_mean``, ``predicted_probability``,
    ``pit_cdf``: pure, so their values at a result's points can be kept)."""
    return callable(fn) and any(fn is not None and fn == own
                                for own in (model.predictive_mean, model.predicted_probability, model.pit_cdf))
