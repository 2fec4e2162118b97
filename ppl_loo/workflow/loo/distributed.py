"""The adaptive search on a ``dask.distributed`` cluster: batches of observations spread over the workers.

:func:`ppl_loo.loo` hands the search here when a client is passed (``client=``) or one is active in the
session (``distributed.default_client()``). The model reaches the workers once, as its cloudpickled
search functions (bound to its adapter: :class:`~ppl_loo.models.PyMCModel` pickles as its ``pymc.Model``,
a :class:`~ppl_loo.StanModel` as program, data and the key of its compiled library in the cache, a JAX
model as itself), and the draws once (``client.scatter(..., broadcast=True)``). Each task is one batch
of observations with its log-likelihood columns; each worker process rebuilds the model, compiles the
search and prepares the draws once (cached by a hash of the pickled model and the search's settings,
:func:`worker_cache_keys`), then runs the same compiled, deterministic search on the same arrays as
the single-process run, so the results are identical; they are gathered in observation order.

Ctrl-C while the results come in cancels every task not yet finished; a task already running on a
worker finishes its batch (a few seconds at most) and its result is dropped. An exception raised on
a worker (a Stan program's error at some draw) is re-raised in the caller as itself.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections import OrderedDict

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ppl_loo.jax_settings import x64
from ppl_loo.model.build import Compiled
from ppl_loo.numerics.loo import EngineData
from ppl_loo.workflow.loo.engine import compiled_engine

__all__ = ["resolve_client", "run_search_distributed", "worker_cache_keys", "search_batch"]

#: on each worker process: model key -> (protocol model, log_q_fn, {draws key: prepared EngineData}), newest last
_WORKER_MODELS: OrderedDict = OrderedDict()
#: models kept per worker process (the oldest is dropped first)
MAX_WORKER_MODELS = 4


def resolve_client(client):
    """The ``dask.distributed`` client the search runs on, or None for this process.

    Parameters
    ----------
    client : distributed.Client, None or False
        A client; None: the session's active client if there is one (``distributed.default_client()``,
        looked up only when ``distributed`` is already imported, and never from inside a dask task);
        False: this process.
    """
    if client is False:
        return None
    if client is None:
        if "distributed" not in sys.modules:
            return None
        import distributed

        try:
            distributed.get_worker()
            return None  # inside a dask task: submitting from it would wait on the worker's own slots
        except ValueError:
            pass
        try:
            return distributed.default_client()
        except ValueError:
            return None
    if not all(hasattr(client, name) for name in ("submit", "scatter", "cancel")):
        raise TypeError(f"compute: client={client!r} is not a dask.distributed Client: pass a distributed.Client, "
                        "None (the active client, if any), or False (compute={'client': False}) to run the search in "
                        "this process.")
    return client


#: the fields of a :class:`~ppl_loo.model.Model` the search on a worker does not use: not sent
_NOT_SENT = ("terms", "eval_loglik", "eval_probs", "eval_predict", "refit_draws", "mixture_draws", "predictive_mean",
             "predicted_probability", "pit_cdf", "simulate", "batched_refit_density", "cancel", "compiled")


def _payload(model, log_q_fn) -> bytes:
    """The model's search functions and ``log_q_fn``, cloudpickled for the workers (its compiled programs stay
    here: each worker compiles its own)."""
    obj = model._replace(**dict.fromkeys(_NOT_SENT))
    try:
        return cloudpickle.dumps((obj, log_q_fn))
    except Exception as exc:  # noqa: BLE001 - any pickling failure gets the same advice
        raise TypeError(f"model: the {model.kind} model cannot be sent to the dask workers ({type(exc).__name__}: "
                        f"{exc}); pass compute={{'client': False}} to run the adaptive search in this "
                        "process.") from exc


def run_search_distributed(model, draws, cfg, obs_idx, batch_size, progressbar, client):
    """The search of :func:`ppl_loo.workflow.loo.adapt.run_search` on observations ``obs_idx``, one task per batch
    of ``batch_size`` observations on ``client``'s workers: one dict of ObsResult arrays per observation, in
    the order of ``obs_idx``, identical to the single-process run."""
    obs_idx = np.asarray(obs_idx)
    posterior_draws = not draws.approx
    payload = _payload(model, draws.log_q_fn)
    model_key = hashlib.sha256(payload + cloudpickle.dumps((cfg, posterior_draws, int(batch_size)))).hexdigest()
    arrays = {"theta": np.asarray(draws.theta), "logp0": np.asarray(draws.logp0),
              "log_q0": np.asarray(draws.log_q0), "grad_logp0": np.asarray(draws.grad_logp0),
              "gauss": draws.gauss}
    payload_f = client.scatter([payload], broadcast=True)[0]
    data_f = client.scatter([arrays], broadcast=True)[0]
    chunk = max(int(batch_size), 1)
    starts = range(0, len(obs_idx), chunk)
    run_id = uuid.uuid4().hex[:8]
    futures = {}
    for j, start in enumerate(starts):
        idx = obs_idx[start:start + chunk]
        futures[client.submit(search_batch, model_key, payload_f, data_f.key, data_f, cfg, posterior_draws, chunk,
                              idx, np.ascontiguousarray(draws.ll[:, idx]), key=f"ppl_loo-search-{run_id}-{j}",
                              pure=False)] = j
    return _gather(client, futures, len(obs_idx), progressbar)


def _gather(client, futures, n, progressbar):
    """The tasks' results in submission order, with a progress bar; Ctrl-C or an error cancels the rest."""
    from distributed import as_completed

    parts = [None] * len(futures)
    bar = tqdm(total=n, desc="adaptive LOO (dask)", disable=not progressbar, unit="obs")
    try:
        for fut in as_completed(list(futures)):
            res = fut.result()  # a worker's exception is raised here as itself
            parts[futures[fut]] = res
            bar.update(len(res))
    except BaseException:  # Ctrl-C included: nothing left running for a result nobody will read
        client.cancel(list(futures))  # the finished ones too: their results are released on the workers
        raise
    finally:
        bar.close()
    return [r for part in parts for r in part]


def search_batch(model_key, payload, draws_key, arrays, cfg, posterior_draws, chunk, idx, ll_cols):
    """One task on a worker: the compiled search on observations ``idx`` (at most ``chunk``, padded to it as
    the single-process run pads its last batch) with their log-likelihood columns ``ll_cols`` ``(S, len(idx))``.

    The model, its compiled search and the prepared draws are built once per worker process and cached
    (:func:`worker_cache_keys`). An exception of the model's host code (the Stan bridge) is raised as itself.
    """
    with x64():
        model, prepared = _worker_state(model_key, payload, draws_key, arrays, cfg, posterior_draws, chunk)
        mapped = prepared["mapped"]
        edata = prepared["edata"]
        n = len(idx)
        idx = np.asarray(idx)
        if n < chunk:
            pad = np.repeat(np.arange(n)[-1:], chunk - n)
            idx, ll_cols = np.concatenate([idx, idx[pad]]), np.concatenate([ll_cols, ll_cols[:, pad]], axis=1)
        host_error = model.take_callback_error
        if host_error is not None:
            host_error()  # an error of an earlier task is not this one's
        try:
            res = jax.tree_util.tree_map(np.asarray, mapped(edata, jnp.asarray(idx), jnp.asarray(ll_cols.T)))
        except Exception:
            stored = None if host_error is None else host_error()
            if stored is not None:
                raise stored from None
            raise
    return [{k: getattr(res, k)[j] for k in res._fields} for j in range(n)]


def _worker_state(model_key, payload, draws_key, arrays, cfg, posterior_draws, chunk):
    """``(model, {"mapped", "edata"})`` of this worker process, built on its first task of a run."""
    if model_key not in _WORKER_MODELS:
        sent, log_q_fn = cloudpickle.loads(payload)
        _WORKER_MODELS[model_key] = (sent._replace(compiled=Compiled()), log_q_fn, {})
        while len(_WORKER_MODELS) > MAX_WORKER_MODELS:
            _WORKER_MODELS.popitem(last=False)
    _WORKER_MODELS.move_to_end(model_key)
    model, log_q_fn, per_draws = _WORKER_MODELS[model_key]
    _, _, mapped, prepare = compiled_engine(model, cfg, posterior_draws, chunk, log_q_fn)
    if draws_key not in per_draws:
        per_draws.clear()  # one set of draws per model at a time
        theta = jnp.asarray(arrays["theta"])
        gauss = arrays["gauss"]
        edata = prepare(EngineData(theta, arrays["logp0"], arrays["log_q0"], arrays["grad_logp0"],
                                   model.line_cache(theta), gauss=gauss))
        per_draws[draws_key] = {"mapped": mapped, "edata": edata}
    return model, per_draws[draws_key]


def worker_cache_keys():
    """The model keys cached in this process (run on the workers with ``client.run(worker_cache_keys)``)."""
    return list(_WORKER_MODELS)
