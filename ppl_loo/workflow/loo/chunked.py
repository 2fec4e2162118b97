"""Out-of-core PSIS-LOO: a dask-backed log-likelihood (``xr.open_datatree(path, engine="zarr", chunks={})``)
read in chunks of observations, never whole.

Each chunk ``(S, m)`` is loaded into NumPy, the in-memory per-observation code
(:func:`~ppl_loo.workflow.loo.plain.psis_columns`) runs on it, and only the per-observation outputs are kept:
the numbers are those of the in-memory path on the same values, and the memory held at once is that of a
chunk. The smoothed log weights stay lazy (a dask array computed chunk by chunk when read). With a model,
the model is evaluated only on the observations plain PSIS flags (:func:`flagged_log_lik`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import xarray as xr
from xarray.namedarray.utils import is_duck_dask_array

from ppl_loo.jax_settings import x64
from ppl_loo.numerics.loo import psis_identity
from ppl_loo.workflow.loo.adapt import Candidates
from ppl_loo.workflow.loo.draws import OFF_MODEL, check_stored_log_lik
from ppl_loo.workflow.loo.inputs import (
    SAMPLE_DIMS,
    align_obs_dims,
    check_finite,
    get_log_likelihood,
    non_finite_error,
    stack_draws,
    stan_labelled,
)
from ppl_loo.workflow.loo.plain import (
    NON_FINITE_FIX,
    Plain,
    logmeanexp,
    plain_log_likelihood,
    plain_loo_checks,
    plain_loo_result,
    plain_psis_loo,
    posterior_chains,
    psis_columns,
)

__all__ = ["CHUNK_BYTES", "is_lazy", "check_chunk_size", "psis_width", "obs_blocks", "PlainPass", "plain_pass",
           "psis_loo", "stored_for_chunks", "chunked_plain", "flagged_log_lik", "FlaggedColumns", "LogRatioRows",
           "lazy_log_weights", "read_columns", "SearchedCandidates"]

#: working memory of one chunk (bytes) when ``chunk_size`` is None
CHUNK_BYTES = 512 * 2**20
#: ``(S, m)`` float64 arrays alive at once while a chunk is processed (the values, the log ratios, the
#: smoothed weights, their JAX copies and NumPy temporaries), generous
COPIES = 12


def is_lazy(da):
    """Whether the values of ``da`` are a dask array (not loaded)."""
    return is_duck_dask_array(da.data)


def check_chunk_size(chunk_size):
    """``chunk_size`` as a positive int or None, or a ValueError naming it."""
    if chunk_size is None:
        return None
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"compute: chunk_size={chunk_size!r}: give the number of observations processed at once as a "
                         "positive integer, or None to size the chunks from a memory budget of about 512 MB.")
    return int(chunk_size)


def _obs_dims(da):
    return [d for d in da.dims if d not in SAMPLE_DIMS]


def psis_width(S, chunk_size=None):
    """Observations processed by one PSIS call: ``chunk_size``, or as many as fit in :data:`CHUNK_BYTES`."""
    return chunk_size if chunk_size is not None else max(1, CHUNK_BYTES // (8 * S * COPIES))


def obs_blocks(da, chunk_size=None):
    """``[(start, stop), ...]``: ranges of the first observation dim of ``da`` ``(chain, draw, *obs)``, each
    read at once (with the whole rows of the later obs dims).

    A dask array is read in whole stored chunks of that dim, grouped while they hold at most
    :func:`psis_width` observations; a stored chunk larger than that is read once, whole (its values are
    then processed in pieces of that width: decoding a zarr chunk needs all of it anyway). An in-memory
    array is read in ranges of that width.
    """
    obs = _obs_dims(da)
    if not obs:
        return [(0, 1)]
    rows = int(da.sizes[obs[0]])
    rest = int(np.prod([da.sizes[d] for d in obs[1:]], dtype=np.int64)) if len(obs) > 1 else 1
    per_rows = max(1, psis_width(int(da.sizes["chain"]) * int(da.sizes["draw"]), chunk_size) // max(rest, 1))
    if not is_lazy(da):
        return [(a, min(a + per_rows, rows)) for a in range(0, rows, per_rows)]
    blocks, start, stop = [], 0, 0
    for size in da.chunksizes[obs[0]]:
        if stop > start and stop + size - start > per_rows:  # close the block before this stored chunk
            blocks.append((start, stop))
            start = stop
        stop += size
    if stop > start:
        blocks.append((start, stop))
    return blocks


def _block(da, block):
    obs = _obs_dims(da)
    return da if not obs else da.isel({obs[0]: slice(*block)})


class PlainPass(NamedTuple):
    """Plain PSIS per observation from one pass over the chunks (``n`` entries each)."""

    elpd: np.ndarray
    k: np.ndarray
    mcse: np.ndarray
    n_eff: np.ndarray
    influence: np.ndarray  # posterior variance of log p(y_i | theta)
    lpd: np.ndarray  # log mean_s p(y_i | theta_s)
    max_abs: float  # largest |log p(y_i | theta_s)|
    n_bad: int  # non-finite values


def plain_pass(da, r_eff, n_chains, offset=None, chunk_size=None, compute=True, conventions="arviz"):
    """:class:`PlainPass` of ``da`` ``(chain, draw, *obs)``, one chunk of observations in memory at a time.

    ``offset`` ``(S,)``: ``log p(theta_s) - log q(theta_s)`` of draws from an approximation (Eq. 13), added
    to the log ratios ``-ll`` as :func:`~ppl_loo.workflow.loo.plain.plain_psis` does; None: plain
    ``pl.loo(data)``. ``compute=False`` (or a first non-finite value) only counts the non-finite values.
    ``r_eff``: one number, one per observation, or None (each observation's own, R's ``relative_eff``);
    ``conventions``: the tail length's rounding (:func:`~ppl_loo.numerics.psis.psislw`).
    """
    n = int(np.prod([da.sizes[d] for d in _obs_dims(da)], dtype=np.int64))
    out = {key: np.full(n, np.nan) for key in ("elpd", "k", "mcse", "n_eff", "influence", "lpd")}
    n_bad, max_abs, pos = 0, 0.0, 0
    width = psis_width(int(da.sizes["chain"]) * int(da.sizes["draw"]), chunk_size)
    for block in obs_blocks(da, chunk_size):
        values = stack_draws(_block(da, block))  # (S, m): the only values loaded
        n_bad += int(np.sum(~np.isfinite(values)))
        if n_bad or not compute:
            continue
        max_abs = max(max_abs, float(np.max(np.abs(values))) if values.size else 0.0)
        for a in range(0, values.shape[1], width):
            ll = np.ascontiguousarray(values[:, a:a + width])
            sl = slice(pos + a, pos + a + ll.shape[1])
            _psis_into(out, sl, ll, r_eff[sl] if np.ndim(r_eff) else r_eff, n_chains, offset, conventions)
        pos += values.shape[1]
    return PlainPass(**out, max_abs=max_abs, n_bad=n_bad)


def _psis_into(out, sl, ll, r_eff, n_chains, offset, conventions="arviz"):
    """Plain PSIS of the columns ``ll`` ``(S, m)`` into the slice ``sl`` of the arrays of ``out``."""
    log_ratios = -ll.T if offset is None else (-ll + offset[:, None]).T
    elpd, k, _, mcse, n_eff = psis_columns(ll, log_ratios, r_eff, n_chains, conventions)
    for key, value in (("elpd", elpd), ("k", k), ("mcse", mcse), ("n_eff", n_eff),
                       ("influence", np.var(ll, axis=0, ddof=1)), ("lpd", logmeanexp(ll))):
        out[key][sl] = value


def read_columns(da, idx):
    """The values ``(S, len(idx))`` of the flat observation indices ``idx`` of ``da`` (only those are read)."""
    obs = _obs_dims(da)
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    if not obs:
        return stack_draws(da)[:, idx]
    pos = np.unravel_index(idx, tuple(int(da.sizes[d]) for d in obs))
    sub = da.isel({d: xr.DataArray(p, dims="__obs") for d, p in zip(obs, pos)})
    return stack_draws(sub.transpose(*SAMPLE_DIMS, "__obs"))


class LogRatioRows:
    """``rows[i]``: the ``(S,)`` plain log ratios of observation ``i``, read when asked (to explain a NaN or
    infinite k-hat); stands for the ``(n, S)`` array of the in-memory path. The block of observations
    holding ``i`` is read once and kept until a row of another block is asked for (rows are asked for in
    increasing order)."""

    def __init__(self, da, offset=None, chunk_size=None):
        self.da, self.offset = da, offset
        self.blocks = obs_blocks(da, chunk_size)
        obs = _obs_dims(da)
        rest = int(np.prod([da.sizes[d] for d in obs[1:]], dtype=np.int64)) if len(obs) > 1 else 1
        self.starts = np.asarray([a * rest for a, _ in self.blocks], dtype=np.int64)
        self.cached = (None, None)

    def __getitem__(self, i):
        b = int(np.searchsorted(self.starts, int(i), side="right")) - 1
        if self.cached[0] != b:
            self.cached = (b, stack_draws(_block(self.da, self.blocks[b])))
        ll = self.cached[1][:, int(i) - self.starts[b]]
        return -ll if self.offset is None else -ll + self.offset


class FlaggedColumns:
    """An ``(S, n)`` log-likelihood of which only the columns ``obs_idx`` are held (the model's values):
    ``ll[:, idx]`` for held ``idx`` as a NumPy array; anything that would need every column raises."""

    ndim = 2

    def __init__(self, values, obs_idx, n):
        self.values = np.asarray(values, dtype=np.float64)
        self.shape = (self.values.shape[0], int(n))
        self.pos = {int(i): j for j, i in enumerate(np.asarray(obs_idx).reshape(-1))}

    def __getitem__(self, key):
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        if np.ndim(cols) == 0 and not isinstance(cols, slice):
            return self.values[rows, self._where([cols])[0]]
        if isinstance(cols, slice):
            cols = np.arange(self.shape[1])[cols]
        return self.values[rows][:, self._where(cols)]

    def _where(self, cols):
        try:
            return [self.pos[int(i)] for i in np.asarray(cols).reshape(-1)]
        except KeyError as err:
            raise IndexError(f"observation {err.args[0]} of the log-likelihood was not evaluated: the out-of-core "
                             "path holds the flagged observations only") from None

    def __array__(self, *args, **kwargs):
        raise TypeError("the out-of-core log-likelihood holds the flagged observations only, not the whole (S, n) "
                        "array; index it with ll[:, idx] for observations that were searched")


def psis_loo(data, var_name, k_threshold, reff=None, chunk_size=None, conventions="arviz"):
    """``pl.loo(data)``: plain PSIS-LOO, in chunks of observations where the log-likelihood is dask-backed
    or ``chunk_size`` is given (:func:`~ppl_loo.workflow.loo.plain.plain_psis_loo` otherwise).

    The same checks, errors and numbers as the in-memory path: non-finite values are counted over every
    chunk before the error is raised, and the errors about the draws keep their order.
    """
    chunk_size = check_chunk_size(chunk_size)
    da = plain_log_likelihood(data, var_name)
    if chunk_size is None and not is_lazy(da):
        return plain_psis_loo(data, var_name, k_threshold, reff, conventions)
    try:
        r_eff, deferred = plain_loo_checks(data, da, reff, conventions), None
    except ValueError as err:  # raised after the count of non-finite values, as in memory
        r_eff, deferred = None, err
    p = plain_pass(da, r_eff, posterior_chains(data), None, chunk_size, compute=deferred is None,
                   conventions=conventions)
    if p.n_bad:
        raise non_finite_error(p.n_bad, f"log_likelihood[{da.name!r}]", NON_FINITE_FIX)
    if deferred is not None:
        raise deferred
    S = int(da.sizes["chain"]) * int(da.sizes["draw"])
    return plain_loo_result(da, k_threshold, S, p.elpd, p.k, p.mcse, p.lpd, LogRatioRows(da, None, chunk_size),
                            lambda: p.max_abs, stan=stan_labelled(data), n_eff=p.n_eff,
                            conventions=conventions)


def stored_for_chunks(data, var_name, model, chunk_size=None, refit=None):
    """The stored log-likelihood ``pl.loo(data, model)`` reads in chunks (in the model's obs dims order), or
    None for the in-memory path: the stored values are dask-backed or ``chunk_size`` is given, the model's
    likelihood factorizes and the stored variable has one value per observation of the model. ``refit=``
    (which needs every column) is refused on the chunked path."""
    chunk_size = check_chunk_size(chunk_size)
    try:
        da = get_log_likelihood(data, var_name or model.var_name)
    except ValueError:
        return None
    if da is None or not (is_lazy(da) or chunk_size is not None) or not model.factorizes:
        return None
    da = align_obs_dims(da, model.obs_dims, f"log_likelihood[{da.name!r}]")
    n = int(np.prod([da.sizes[d] for d in _obs_dims(da)], dtype=np.int64))
    if n != int(np.prod(model.obs_shape or (1,), dtype=np.int64)):
        return None
    if refit is not None:
        raise ValueError("refit= needs the whole log-likelihood in memory, and the stored log_likelihood is "
                         "dask-backed (or chunk_size was given): load it first (data['log_likelihood'] = "
                         "data['log_likelihood'].load()) or leave refit=None.")
    return da


def chunked_plain(stored, draws, chunk_size=None):
    """``(Plain, lpd)`` of the stored log-likelihood, in chunks: a :class:`~ppl_loo.workflow.loo.plain.Plain`
    whose ``log_ratios`` are read per row when asked and whose ``lw`` is a lazy DataArray."""
    offset = np.asarray(draws.logp0, dtype=np.float64) - np.asarray(draws.log_q0, dtype=np.float64)
    p = plain_pass(stored, draws.r_eff, draws.n_chains, offset, chunk_size)
    if p.n_bad:
        raise non_finite_error(p.n_bad, f"the stored log_likelihood[{stored.name!r}]",
                               "Recompute it (pm.compute_log_likelihood) or drop the group to let ppl_loo "
                               "evaluate the model; NaN/inf are not allowed.")
    lw = lazy_log_weights(stored, draws.r_eff, offset)
    return Plain(LogRatioRows(stored, offset, chunk_size), p.elpd, p.k, lw, p.mcse, p.n_eff, p.influence), p.lpd


def flagged_log_lik(data, model, draws, stored, obs_idx, check_log_lik=True):
    """:class:`FlaggedColumns` of the model's log-likelihood at the observations ``obs_idx`` only, checked
    for non-finite values and compared with the stored values of the same columns (``check_log_lik``: a
    difference beyond their precision raises, False: warns;
    :func:`~ppl_loo.workflow.loo.draws.check_stored_log_lik`)."""
    S, n = draws.theta.shape[0], int(np.prod(model.obs_shape or (1,), dtype=np.int64))
    obs_idx = np.asarray(obs_idx, dtype=np.int64)
    ll = np.zeros((S, 0))
    if obs_idx.size:
        ll = np.asarray(model.log_lik(jnp.asarray(draws.theta), obs=obs_idx), dtype=np.float64)
        check_finite(ll, f"the pointwise log-likelihood {draws.var_name!r} at the posterior draws", OFF_MODEL)
        check_stored_log_lik(data, draws.var_name, read_columns(stored, obs_idx), ll, check=check_log_lik,
                             model=model, stored_da=stored, obs_idx=obs_idx, stacklevel=4)
    return FlaggedColumns(ll, obs_idx, n)


def lazy_log_weights(stored, r_eff, offset=None):
    """The plain-PSIS smoothed log weights over ``(chain, draw, *obs)`` as a lazy DataArray (dask, one block
    per stored chunk of observations; all draws of an observation in one block), computed when read."""

    def smooth(x):  # (..., chain, draw) -> same shape
        shape = x.shape
        ll = np.asarray(x, dtype=np.float64).reshape(-1, shape[-2] * shape[-1])
        log_ratios = -ll if offset is None else -ll + offset[None, :]
        with x64():
            lw = np.asarray(psis_identity(jnp.asarray(log_ratios), jnp.asarray(ll), r_eff)[2])
        return lw.reshape(shape)

    da = stored.chunk({d: -1 for d in SAMPLE_DIMS}) if is_lazy(stored) else stored.chunk()
    out = xr.apply_ufunc(smooth, da, input_core_dims=[list(SAMPLE_DIMS)], output_core_dims=[list(SAMPLE_DIMS)],
                         dask="parallelized", output_dtypes=[np.float64])
    return out.transpose(*SAMPLE_DIMS, ...).rename("log_weights")


class SearchedCandidates(Candidates):
    """``res.candidates`` with one row per searched observation (their flat indices under ``"index"``) instead
    of one per observation: the in-memory table is ``n x candidates`` for each of a dozen fields, gigabytes
    for a million observations, and its rows of unsearched observations are all NaN."""

    @classmethod
    def empty(cls, labels, n, n_chains, n_searched, S):
        out = super().empty(labels, n_searched, n_chains, n_searched, S)
        out.obs = np.full(n_searched, -1, dtype=np.int64)
        return out

    def record(self, i, j, r, approx):
        self.obs[j] = int(i)
        super().record(j, j, r, approx)

    def as_dict(self):
        return {**super().as_dict(), "index": self.obs}
