"""``StanPosterior``: a compiled Stan program as a :class:`~ppl_loo.adapters.jax.base.PosteriorModel`.

Exact leave-one-out by data deletion: the same compiled program, instantiated on the data without
observation ``i``, gives ``log p(theta | D without i)`` exactly (``propto=False``,
``jacobian=True``). So ``loo_logp(theta, i)`` is that model's log density, ``loglik_i(theta, i) =
logp(theta) - loo_logp(theta, i)`` and the model need not factorize (``factorizes = False``).

The densities enter JAX through ``jax.pure_callback(..., vmap_method="broadcast_all")``: under
``vmap`` / ``lax.map`` the host receives the whole batch and calls the bridge once per batch
(deleted models: once per distinct observation index in the batch). Each density is a
``jax.custom_jvp`` whose tangent is ``grad . t``; the gradient (Stan's reverse-mode autodiff) is
itself a ``custom_jvp`` whose tangent is a central finite difference of the gradient along the
tangent (a Hessian-vector product). Hence ``jax.grad``, ``jax.jacfwd(jax.grad(f))`` and
``jax.hessian(f)`` work; reverse mode over the gradient does not (a callback cannot be transposed).

Programs whose parameter dimension depends on the number of observations (one parameter per
group, as ``theta_tilde`` in eight schools, or an observation-level random effect) lose coordinates
when an observation is deleted, so the deleted program does not give the LOO density of the full
parameter vector. For them the LOO density is ``log p(theta | D) - log p(y_i | theta)`` in the full
parameter space, with ``log p(y_i | theta)`` the program's own ``log_lik[i]`` generated quantity,
differentiated by Stan's autodiff through a derived program (:mod:`ppl_loo.stan_bridge.derived`: the
generated quantities moved into the model block, ``target += log_lik[i]``), checked against the
generated quantity before use. This assumes, as PSIS-LOO with that ``log_lik`` does, that the
likelihood factorizes over observations with ``log_lik[i]`` as the factor of observation ``i``.
``loo_extra(theta, i)`` (a JAX function of one full unconstrained draw: the log conditional
density of the dropped coordinates given the others, usually their prior) overrides this and uses
the deleted program instead.

No Python loop over draws: every host call passes a whole batch to the bridge, which loops in C++.
Draws at which Stan throws ``std::domain_error`` (a transformed draw far in the tails, where a
scale underflows to 0) get log density ``-inf`` (importance weight 0), as Stan's samplers reject
them; any other exception inside Stan, and any error at the posterior draws themselves, raises
:class:`~ppl_loo.stan_bridge.StanEvaluationError` with Stan's message.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy.special import logsumexp

from ppl_loo.adapters.jax.base import PosteriorModel
from ppl_loo.adapters.stan.data import (
    constrain_draws,
    detect_n_obs,
    dim_names,
    flat_columns,
    observation_data,
    observation_keys,
    split_name,
    unconstrain_draws,
)
from ppl_loo.io import read_cmdstan_csv
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.nuts import BatchedTarget
from ppl_loo.stan_bridge.compile import SAMPLER_FLAG, StanCompileError, build_library
from ppl_loo.stan_bridge.derived import BELOW, OBS_INDEX, cdf_program, loglik_program, sampling_program
from ppl_loo.stan_bridge.model import StanDataError, StanModel, merge_loo_options
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

__all__ = ["StanPosterior", "compile_sampling_program", "detect_n_obs", "loo_adapter", "resolve_var_name"]

#: keywords of :class:`StanPosterior` besides the LOO options that only matter when it builds the StanModel
_BUILD_OPTIONS = ("random_seed", "n_threads")
#: ``deleted_model``'s ``keep`` for an observation whose LOO density is ``logp - log_lik[i]`` (derived program)
LOG_LIK = "log_lik program"


def _bridge_and_options(stan_file_or_code, data, options: dict) -> tuple[StanModel, dict]:
    """The :class:`~ppl_loo.stan_bridge.StanModel` and its LOO options, ``options`` overriding them."""
    if not isinstance(stan_file_or_code, StanModel):
        bridge = StanModel(stan_file_or_code, data, **options)
        return bridge, bridge.loo_options
    if data is not None:
        raise ValueError("data: the StanModel already holds its data; pass data=None")
    loo = {k: v for k, v in options.items() if k not in _BUILD_OPTIONS}
    return stan_file_or_code, merge_loo_options(stan_file_or_code.loo_options, **loo)


def _log_lik_shape(bridge: StanModel, log_lik: str | None):
    """Shape of the ``log_lik`` generated quantity (``None`` when there is none), checked to be a vector."""
    gq_dims = bridge.get_dims(include_tp=True, include_gq=True)
    ll_shape = gq_dims.get(log_lik) if log_lik is not None else None
    if log_lik is not None and ll_shape is not None and len(ll_shape) != 1:
        raise ValueError(f"generated quantity {log_lik!r} has shape {ll_shape}; the pointwise log-likelihood "
                         "must be a vector with one entry per observation")
    if log_lik is not None and ll_shape is None and log_lik != "log_lik":
        raise ValueError(f"log_likelihood={log_lik!r} is not a generated quantity (or transformed parameter) of "
                         f"the program; it has {list(gq_dims)}. Pass log_likelihood=None to get the log-likelihood by "
                         "data deletion.")
    return ll_shape


def _observations(data: dict, n_obs: str | None, obs_keys, n_log_lik: int | None) -> tuple[str, int, tuple]:
    """``(n_obs key, number of observations, obs_keys)``, detected where not given, checked against ``data``."""
    if n_obs is None:
        n_obs = detect_n_obs(data, n_log_lik)
    if n_obs not in data:
        raise StanDataError(f"n_obs={n_obs!r} is not a data entry (entries: {list(data)})")
    n = int(np.asarray(data[n_obs]))
    if n < 1:
        raise StanDataError(f"data[{n_obs!r}] = {n}: need at least one observation")
    if obs_keys is None:
        return n_obs, n, tuple(observation_keys(data, n_obs, n))
    for k in obs_keys:
        if k not in data:
            raise StanDataError(f"obs_keys: {k!r} is not a data entry (entries: {list(data)})")
        if np.ndim(data[k]) < 1 or np.shape(data[k])[0] != n:
            raise StanDataError(f"obs_keys: data[{k!r}] has shape {np.shape(data[k])}, "
                                f"not a leading dimension of {n_obs} = {n}")
    return n_obs, n, tuple(obs_keys)


def _log_lik_columns(bridge: StanModel, log_lik: str, n_entries: int, n_obs: str, n: int) -> np.ndarray:
    """Columns of ``param_constrain(include_tp, include_gq)`` holding ``log_lik[1..n]``."""
    if n_entries != n:
        raise StanDataError(f"generated quantity {log_lik!r} has {n_entries} entries but "
                            f"{n_obs} = {n}: they must match (one entry per observation)")
    cols = flat_columns(bridge, log_lik)
    return np.array([cols[f"{log_lik}.{k + 1}"] for k in range(n)])


#: most draws per bridge call in the host callbacks (tens of milliseconds each): the grain at which Ctrl-C
#: is seen; larger batches are split evenly, so each call still carries thousands of draws
HOST_CHUNK = 8192
#: results of the full model kept for the next host call at the same draws (:meth:`StanPosterior._full_density`)
FULL_CACHE_ENTRIES = 2
#: largest gradient array kept there (values; 2**22 is 32 MB)
FULL_CACHE_MAX_VALUES = 2**22


class CallbackCancelled(RuntimeError):
    """Raised in a host callback once Ctrl-C set ``cancel_requested``: aborts the compiled search, whose
    caller raises ``KeyboardInterrupt`` (never seen by users)."""


class _DropCancelled(logging.Filter):
    """JAX logs every exception raised in a host callback, with its traceback ("jax.pure_callback failed"),
    before it re-raises it; :class:`CallbackCancelled` is the planned way out after Ctrl-C, not a failure, and
    its dozens of tracebacks (one per callback in flight) must not reach the user's terminal."""

    def filter(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, CallbackCancelled)


logging.getLogger("jax._src.callback").addFilter(_DropCancelled())


class StanPosterior(PosteriorModel):
    """A Stan program plus data for ``pl.loo``, with exact LOO by data deletion.

    Users do not build it: ``pl.loo(data, model=pl.StanModel(...))`` does, through
    :func:`loo_adapter`.

    Parameters
    ----------
    stan_file_or_code
        A :class:`~ppl_loo.StanModel` (its data and LOO options are used, ``data`` must be None),
        the path of a ``.stan`` file, or the program text.
    data
        ``dict`` of the data block (or a JSON text / ``.json`` / R dump ``.R`` path).
    var_name
        Name of the log-likelihood variable in the DataTree (``log_likelihood`` group).
    fd_eps
        Relative step of the finite-difference Hessian-vector products.
    **options
        Keywords of :class:`~ppl_loo.stan_bridge.StanModel`. Its LOO options override those of a given
        StanModel (a value equal to the default keeps the StanModel's):

        - ``n_obs``: name of the data entry holding the number of observations (``"N"``; ``"J"``
          for eight schools), decremented in the deleted data. Default: :func:`detect_n_obs`.
        - ``obs_keys``: data entries indexed by observation along their first axis. Default:
          every array whose leading dimension equals ``data[n_obs]``.
        - ``log_likelihood``: generated quantity with the pointwise log-likelihood (used by
          :meth:`loglik` at the draws); when the program has none, ``loglik`` is
          ``logp - loo_logp`` for every observation.
        - ``loo_extra``: ``loo_extra(theta, i)``, log conditional density of the coordinates that
          the deleted program lacks (only for programs whose parameter dimension depends on
          ``n_obs``); without it such programs use ``logp - log_lik[i]`` (module docstring).
        - ``n_threads``, ``random_seed`` (and the build options): used when the program is built here.

    Notes
    -----
    :meth:`mixture_draws` samples the mixture of all LOO posteriors with Stan's NUTS on a derived
    program built from the ``log_lik`` generated quantity; a program without that generated
    quantity has ``mixture_draws = None`` (the workflow then uses NumPyro's NUTS on ``logp`` and
    ``loglik``).
    """

    is_jax = True
    factorizes = False
    #: the host callbacks stop at Ctrl-C (the protocol's ``Model.cancel``, :meth:`request_cancel`, sets
    #: ``cancel_requested``; each chunk of at most :data:`HOST_CHUNK` draws checks it)
    cancellable = True

    @uses_x64
    def __init__(self, stan_file_or_code, data=None, *, var_name: str | None = None, fd_eps: float = 1e-5,
                 **options):
        bridge, opts = _bridge_and_options(stan_file_or_code, data, options)
        log_lik = opts["log_likelihood"]
        self.bridge = bridge
        self.code = bridge.code
        self.data = bridge.data
        self.dim = bridge.dim
        ll_shape = _log_lik_shape(bridge, log_lik)
        self.n_obs_key, self.n_obs, self.obs_keys = _observations(
            self.data, opts["n_obs"], opts["obs_keys"], ll_shape[0] if ll_shape else None)
        self._seed = bridge.random_seed
        self.var_name = str(var_name or log_lik or "log_lik")
        self.obs_dims = (f"{self.var_name}_dim_0",)
        self.obs_shape = (self.n_obs,)
        self.loo_extra = opts["loo_extra"]
        self.fd_eps = float(fd_eps)
        self.n_rejected = 0  # draws rejected (log density -inf) in host calls so far
        self._full_cache = {}  # the full model's (lp, grad) at the draws of the last host calls
        self._full_lock = threading.Lock()
        self._deleted: list = [None] * self.n_obs  # (StanModel, keep index, None or LOG_LIK), built lazily
        self._loglik_base = None  # the derived log_lik program (StanModel), built on first need
        self._cdf = None  # the derived CDF program of pit_cdf (compiled on first use)
        self._sampling_model = None  # the derived sampling program (StanModel with the sampler), built on first need
        #: how the LOO density is obtained: "deletion", "loo_extra" or LOG_LIK (known after the first deletion)
        self.loo_method = None
        self._param_dims = bridge.get_dims(include_tp=False, include_gq=False)
        self.param_names = tuple(self._param_dims)
        self.param_dims = dim_names(self._param_dims)
        # the log_lik generated quantity, if any
        self._log_lik_name = log_lik
        self._ll_cols = (None if ll_shape is None
                         else _log_lik_columns(bridge, log_lik, ll_shape[0], self.n_obs_key, self.n_obs))
        self._jax_fns = self._build_jax()
        if self._ll_cols is None:  # no log_lik generated quantity to derive the mixture program from: the
            self.mixture_draws = None  # protocol's None, the workflow samples q_mix with NumPyro from logp, loglik

    def __reduce__(self):
        """Pickled (cloudpickle: dask workers) as its :class:`~ppl_loo.stan_bridge.StanModel` (which pickles as
        program, data and library key) and its LOO options; the deleted-data programs are rebuilt on use."""
        opts = {"var_name": self.var_name, "fd_eps": self.fd_eps, "n_obs": self.n_obs_key, "obs_keys": self.obs_keys,
                "log_likelihood": self._log_lik_name, "loo_extra": self.loo_extra}
        return _rebuild_posterior, (self.bridge, opts)

    # ------------------------------------------------------------------ deleted models
    def deleted_data(self, i: int) -> dict:
        """The data without observation ``i`` (0-based)."""
        keep = np.delete(np.arange(self.n_obs), int(i))
        return observation_data(self.data, self.n_obs_key, self.obs_keys, keep)

    def deleted_model(self, i: int):
        """``(StanModel, keep)`` giving the LOO density of observation ``i``.

        ``keep`` is None when the program on the data without ``i`` has the same parameters; an index
        array mapping its coordinates into ``theta`` when it lost some and ``loo_extra`` is given; and
        :data:`LOG_LIK` when it lost some and the model is the derived ``log_lik`` program on
        observation ``i`` (the LOO density is then ``logp - log_lik[i]``).
        """
        i = int(i)
        if not 0 <= i < self.n_obs:
            raise IndexError(f"observation {i} out of range (n_obs = {self.n_obs})")
        if self._deleted[i] is None:
            try:
                m = self.bridge.with_data(self.deleted_data(i))
            except StanDataError as err:
                raise StanDataError(
                    f"the program rejected the data without observation {i} ({self.n_obs_key} = {self.n_obs - 1}, "
                    f"obs_keys {list(self.obs_keys)} subset along their first axis): {err}. Check n_obs and "
                    "obs_keys: every data entry indexed by observation must be listed in obs_keys."
                ) from None
            if m.dim == self.dim:
                self._deleted[i], self.loo_method = (m, None), "deletion"
            elif self.loo_extra is not None:
                self._deleted[i], self.loo_method = (m, self._keep_index(m, i)), "loo_extra"
            else:
                self._deleted[i], self.loo_method = (self._loglik_model(i, m.dim), LOG_LIK), LOG_LIK
        return self._deleted[i]

    def _loglik_model(self, i: int, deleted_dim: int) -> StanModel:
        """The derived program whose log density (``jacobian=False``) is ``log_lik[i]``, checked."""
        why = (f"deleting observation {i} changes the number of parameters ({self.dim} -> {deleted_dim}): the "
               "program has parameters indexed by the observations, so the deleted program alone does not give "
               "the LOO density of the full parameter vector")
        fix = ("Pass loo_extra(theta, i), the log conditional density of the dropped coordinates given the "
               "others (usually their prior), to use the deleted program instead")
        if self._ll_cols is None:
            raise ValueError(f"{why}; ppl_loo uses log p(theta | D) - log_lik[i] for such programs, but the "
                             "program has no log_lik generated quantity (log_likelihood= names it). Add one with "
                             f"log p(y_i | theta) per observation, or: {fix}.")
        if self._loglik_base is None:
            try:
                code = loglik_program(self.code, self._log_lik_name)
                data = {**self.data, OBS_INDEX: 1}
                self._loglik_base = StanModel(code, data, random_seed=self._seed, n_threads=self.bridge.n_threads,
                                              log_likelihood=None)
            except (ValueError, StanCompileError, StanDataError) as err:
                raise ValueError(f"{why}. ppl_loo differentiates the {self._log_lik_name!r} generated quantity "
                                 "through a derived program (its statements moved into the model block) for such "
                                 f"programs, which failed here:\n{err}\n{fix}.") from None
        m = self._loglik_base.with_data({**self.data, OBS_INDEX: i + 1})
        self._check_loglik_model(m, i)
        return m

    def _check_loglik_model(self, m: StanModel, i: int) -> None:
        """The derived program's value equals the generated quantity ``log_lik[i]`` at test points."""
        rng = np.random.default_rng(i)
        x = np.vstack([np.zeros(self.dim), rng.normal(0.0, 0.5, (3, self.dim))])
        derived = m.log_density(x, jacobian=False, on_error="reject")
        gq = np.full(len(x), np.nan)
        for j, xj in enumerate(x):  # a test point the program rejects (a constraint of its own) is skipped
            try:
                gq[j] = self.bridge.param_constrain(xj[None], include_tp=True, include_gq=True,
                                                    random_seed=self._seed)[0, self._ll_cols[i]]
            except Exception:  # noqa: BLE001 - Stan's exception at that point; the other points decide
                continue
        bad = np.isfinite(gq) & ~np.isclose(derived, gq, rtol=1e-9, atol=1e-9)  # NaN/-inf where gq is finite too
        if np.any(bad):
            j = int(np.argmax(bad))
            raise ValueError(
                f"the derived log_lik program disagrees with the {self._log_lik_name!r} generated quantity for "
                f"observation {i} ({derived[j]!r} vs {gq[j]!r}): its value depends on something the derivation "
                "cannot keep (a random number?). Pass loo_extra(theta, i) to use the deleted program instead.")

    def _keep_index(self, m: StanModel, i: int) -> np.ndarray:
        """Coordinates of the full unconstrained vector that the deleted program keeps, in its order."""
        full_dims = self._param_dims
        del_dims = m.get_dims(include_tp=False, include_gq=False)
        axis_of = {}
        for name, shape in full_dims.items():
            dshape = del_dims.get(name)
            if dshape is None or len(dshape) != len(shape):
                raise ValueError(f"parameter {name!r}: shapes {shape} and {dshape} cannot be matched")
            diff = [a for a in range(len(shape)) if shape[a] != dshape[a]]
            if not diff:
                continue
            if len(diff) != 1 or shape[diff[0]] != self.n_obs or dshape[diff[0]] != self.n_obs - 1:
                raise ValueError(f"parameter {name!r}: shape {shape} -> {dshape} is not a deletion along one axis")
            axis_of[name] = diff[0]
        del_pos = {n: j for j, n in enumerate(m.unconstrained_param_names())}
        keep = np.full(m.dim, -1, dtype=np.int64)
        for j, uname in enumerate(self.bridge.unconstrained_param_names()):
            var, idx = split_name(uname)
            if var in axis_of:
                a = axis_of[var]
                if len(idx) != len(full_dims[var]):
                    raise ValueError(f"unconstrained coordinate {uname!r} cannot be mapped (constrained type?)")
                if idx[a] == i + 1:
                    continue
                if idx[a] > i + 1:
                    idx = idx[:a] + (idx[a] - 1,) + idx[a + 1:]
                uname = var + "".join(f".{k}" for k in idx)
            if uname not in del_pos:
                raise ValueError(f"unconstrained coordinate {uname!r} is not in the deleted program")
            keep[del_pos[uname]] = j
        if np.any(keep < 0):
            raise ValueError("the deleted program's coordinates could not all be mapped to the full program")
        return keep

    # ------------------------------------------------------------------ host evaluations
    def _safe_eval(self, model: StanModel, x: np.ndarray, grad: bool, jacobian: bool = True):
        """Batched bridge calls of at most :data:`HOST_CHUNK` draws each, split evenly (so that Ctrl-C, which sets
        ``cancel_requested``, is seen within a fraction of a second); draws where Stan throws
        ``std::domain_error`` get ``-inf``."""
        lps, gs = [], []
        n_chunks = max(1, -(-x.shape[0] // HOST_CHUNK))  # even chunks: each at least HOST_CHUNK / 2 draws
        for xs in np.array_split(x, n_chunks):
            self._check_cancel()
            xs = np.ascontiguousarray(xs)
            if grad:
                lp, g = model.log_density_gradient(xs, on_error="reject", jacobian=jacobian)
                gs.append(g)
            else:
                lp = model.log_density(xs, on_error="reject", jacobian=jacobian)
            lps.append(lp)
            self.n_rejected += model.last_n_rejected
        if len(lps) == 1:
            return lps[0], (gs[0] if grad else None)
        return np.concatenate(lps), (np.concatenate(gs) if grad else None)

    def _check_cancel(self):
        if self.cancel_requested:
            raise CallbackCancelled("the computation was interrupted (Ctrl-C)")

    def _minus_loglik(self, model: StanModel, x: np.ndarray, grad: bool, full):
        """``logp - log_lik[i]`` (and its gradient) with the derived program ``model``, given ``full``, the full
        model's ``(lp, grad)`` at ``x``; ``-inf`` where either is rejected or not finite."""
        lp, g = full
        ll, gl = self._safe_eval(model, x, grad, jacobian=False)
        good = np.isfinite(lp) & np.isfinite(ll)
        out = np.where(good, lp - np.where(good, ll, 0.0), -np.inf)
        if grad:
            g = np.where(good[:, None], g - gl, 0.0)
        return out, g

    def _full_density(self, x: np.ndarray, grad: bool):
        """The full model's ``(lp, grad)`` at every row of ``x``, kept for the next call at the same draws.

        The search asks for the full posterior's density and for the LOO posteriors' at the same transformed
        draws (the proposal and the target of each candidate), in separate callbacks; where a LOO density is
        ``logp - log_lik[i]`` (:data:`LOG_LIK`) both need the full model's ``logp`` there. The last
        :data:`FULL_CACHE_ENTRIES` results are kept under the exact bytes of the draws (gradients only up
        to :data:`FULL_CACHE_MAX_VALUES` values), so that it is evaluated once."""
        key = (x.shape, hashlib.blake2b(x.tobytes(), digest_size=16).digest())
        with self._full_lock:
            hit = self._full_cache.get(key)
        if hit is not None and (not grad or hit[1] is not None):
            return hit
        lp, g = self._safe_eval(self.bridge, x, grad)
        with self._full_lock:
            self._full_cache[key] = (lp, g if g is not None and g.size <= FULL_CACHE_MAX_VALUES else None)
            while len(self._full_cache) > FULL_CACHE_ENTRIES:
                self._full_cache.pop(next(iter(self._full_cache)))
        return lp, g

    def _host(self, theta, i, grad: bool):
        """``(lp, grad)`` at ``theta (..., d)`` for observation indices ``i`` (``< 0``: full model).

        Called by JAX through ``pure_callback``; an exception here reaches the caller of the
        compiled search as a ``JaxRuntimeError``, so it is also kept in ``last_callback_error``
        for :func:`ppl_loo.loo` to re-raise as itself.
        """
        try:
            return self._host_impl(theta, i, grad)
        except Exception as err:
            self.last_callback_error = err
            raise

    def _host_impl(self, theta, i, grad: bool):
        theta = np.asarray(theta, dtype=np.float64)
        batch = theta.shape[:-1]
        x = np.ascontiguousarray(theta.reshape(-1, self.dim))
        ii = np.broadcast_to(np.asarray(i), batch).reshape(-1).astype(np.int64)
        lp = np.empty(x.shape[0])
        g = np.zeros_like(x) if grad else None
        groups = [(u, ii == u, (self.bridge, None) if u < 0 else self.deleted_model(int(u))) for u in np.unique(ii)]
        # the full model's density once for all rows, where every row needs it (the full posterior, LOO by
        # subtracting log_lik[i]); rows of data-deletion programs do not
        full = (self._full_density(x, grad) if all(u < 0 or keep is LOG_LIK for u, _, (_, keep) in groups)
                else None)
        for u, sel, (model, keep) in groups:
            if u < 0 or keep is LOG_LIK:
                f = (full[0][sel], full[1][sel] if grad else None) if full is not None else self._safe_eval(
                    self.bridge, np.ascontiguousarray(x[sel]), grad)
                lp_u, g_u = f if u < 0 else self._minus_loglik(model, np.ascontiguousarray(x[sel]), grad, f)
                lp[sel] = lp_u
                if grad:
                    g[sel] = g_u
                continue
            xs = x[sel] if keep is None else x[sel][:, keep]  # data deletion: the same or fewer parameters
            lp_u, g_u = self._safe_eval(model, np.ascontiguousarray(xs), grad)
            lp[sel] = lp_u
            if grad and keep is None:
                g[sel] = g_u
            elif grad:
                gg = np.zeros((xs.shape[0], self.dim))
                gg[:, keep] = g_u
                g[sel] = gg
        lp = lp.reshape(batch)
        return (lp, g.reshape(theta.shape)) if grad else lp

    def _host_loglik(self, theta):
        try:
            return self._host_loglik_impl(theta)
        except Exception as err:
            self.last_callback_error = err
            raise

    def _host_loglik_impl(self, theta):
        theta = np.asarray(theta, dtype=np.float64)
        x = theta.reshape(-1, self.dim)
        self._check_cancel()
        out = self.bridge.param_constrain(x, include_tp=True, include_gq=True, random_seed=self._seed)
        return np.ascontiguousarray(out[:, self._ll_cols]).reshape(*theta.shape[:-1], self.n_obs)

    # ------------------------------------------------------------------ JAX functions
    def _build_jax(self):
        f64 = jnp.float64
        eps = self.fd_eps

        def vg_callback(theta, i):
            lp, g = self._host(theta, i, grad=True)
            return lp.astype(np.float64), g.astype(np.float64)

        @jax.custom_jvp
        def value_and_grad(theta, i):
            shapes = (jax.ShapeDtypeStruct(theta.shape[:-1], f64), jax.ShapeDtypeStruct(theta.shape, f64))
            return jax.pure_callback(vg_callback, shapes, theta, i, vmap_method="broadcast_all")

        @value_and_grad.defjvp
        def _vg_jvp(primals, tangents):
            theta, i = primals
            v = tangents[0]
            lp, g = value_and_grad(theta, i)
            vn = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
            vhat = v / jnp.where(vn > 0, vn, 1.0)
            h = eps * (1.0 + jnp.max(jnp.abs(theta), axis=-1, keepdims=True))
            pts = jnp.stack([theta + h * vhat, theta - h * vhat])  # one host call for both
            _, gpm = value_and_grad(pts, jnp.broadcast_to(i, pts.shape[:-1]))
            hv = (gpm[0] - gpm[1]) / (2.0 * h) * vn
            return (lp, g), (jnp.sum(g * v, axis=-1), hv)

        @jax.custom_jvp
        def density(theta, i):
            def cb(t, j):
                return self._host(t, j, grad=False).astype(np.float64)

            return jax.pure_callback(cb, jax.ShapeDtypeStruct(theta.shape[:-1], f64), theta, i,
                                     vmap_method="broadcast_all")

        @density.defjvp
        def _density_jvp(primals, tangents):
            theta, i = primals
            t = tangents[0]
            lp, g = value_and_grad(theta, i)
            return lp, jnp.sum(g * t, axis=-1)

        def loglik_gq(theta):
            return jax.pure_callback(self._host_loglik, jax.ShapeDtypeStruct((*theta.shape[:-1], self.n_obs), f64),
                                     theta, vmap_method="broadcast_all")

        return density, value_and_grad, loglik_gq

    def _idx(self, i):
        return jnp.asarray(i, dtype=jnp.int64)

    def logp(self, theta):
        """Log posterior density of the full data (``propto=False``, Jacobian included)."""
        return self._jax_fns[0](jnp.asarray(theta, jnp.float64), self._idx(-1))

    def loo_logp(self, theta, i):
        """Exact log posterior density without observation ``i``: the program on the deleted data."""
        lp = self._jax_fns[0](jnp.asarray(theta, jnp.float64), self._idx(i))
        if self.loo_extra is not None:
            lp = lp + self.loo_extra(theta, i)
        return lp

    def loglik_i(self, theta, i):
        return self.logp(theta) - self.loo_logp(theta, i)

    def loglik(self, theta):
        """Pointwise log-likelihood ``(n_obs,)``: the ``log_lik`` generated quantity, else by deletion."""
        theta = jnp.asarray(theta, jnp.float64)
        if self._ll_cols is not None:
            return self._jax_fns[2](theta)
        lp = self.logp(theta)
        return lp - jax.vmap(lambda j: self.loo_logp(theta, j))(jnp.arange(self.n_obs))

    def value_and_grad_host(self, theta, i=-1):
        """``(lp, grad)`` straight from the bridge (NumPy), ``i < 0`` for the full data."""
        return self._host(theta, i, grad=True)

    # ------------------------------------------------------------------ batched API at the draws
    # Called by ``pl.loo`` once at the posterior draws, outside jit: straight to the bridge, so an
    # error at a posterior draw raises with Stan's message instead of becoming -inf.
    def log_density(self, theta):
        """Log posterior density ``(S,)`` at unconstrained draws (one bridge call)."""
        return jnp.asarray(self.bridge.log_density(np.asarray(theta, dtype=np.float64)))

    def log_density_and_grad(self, theta):
        """Value ``(S,)`` and gradient ``(S, dim)`` of the log posterior (one bridge call)."""
        lp, g = self.bridge.log_density_gradient(np.asarray(theta, dtype=np.float64))
        return jnp.asarray(lp), jnp.asarray(g)

    def log_lik(self, theta, obs=None):
        """Pointwise log-likelihood ``(S, n_obs)`` (``(S, len(obs))`` with ``obs``)."""
        x = np.asarray(theta, dtype=np.float64)
        if self._ll_cols is not None:
            ll = self._host_loglik(x)
        else:
            lp = self.bridge.log_density(x)
            ll = np.stack([lp - self._host(x, i, grad=False) for i in range(self.n_obs)], axis=1)
        ll = jnp.asarray(ll)
        return ll if obs is None else ll[:, jnp.asarray(obs)]

    # ------------------------------------------------------------------ exact LOO by refitting
    def batched_refit_density(self):
        """What the batched refits of ``pl.loo(..., refit=...)`` sample, or None.

        None (the refits are Stan's own NUTS, :meth:`refit_draws`) where the program keeps its parameters without an
        observation, and where it loses some (parameters indexed by observation) but has a ``log_lik`` generated
        quantity: on a CPU, Stan's native sampler (on the data without the observation, or on the derived program
        of :func:`~ppl_loo.stan_bridge.derived.sampling_program`) is faster than NUTS on the bridge's callbacks
        (``docs/method.md``, section 7). Otherwise (``loo_extra`` and no ``log_lik``), the refits sample
        :meth:`loo_logp` in the full parameter space, all of them in one batched run
        (:func:`~ppl_loo.numerics.nuts.batched_nuts`, vectorized: every NUTS step of every lane in one call of the
        bridge's batched evaluations).
        """
        _, keep = self.deleted_model(0)
        if keep is None or self._ll_cols is not None:
            return None
        return BatchedTarget(self.loo_logp, vectorize=True)

    def refit_draws(self, i, *, chains, warmup, draws, random_seed, init, target_accept=0.8, max_tree_depth=10):
        """Draws without observation ``i``: Stan's own NUTS (in-process, :mod:`ppl_loo.stan_bridge.sampler`) with
        the original fit's settings, on the program with the data without ``i``; for a program whose parameters
        are indexed by observation (fewer parameters without ``i``, so draws that lack the coordinates
        ``log p(y_i | theta)`` needs), on the derived program whose density is ``logp - log_lik[i]`` in the full
        parameter space (:meth:`_sampling_program`; the density ``loo_extra`` gives too, where the user gave it).
        Such a program without a ``log_lik`` generated quantity, or whose derived program disagrees with it (a
        warning says so): NumPyro's NUTS on the LOO density of ``loo_extra``
        (:meth:`~ppl_loo.adapters.jax.base.PosteriorModel.refit_draws`, Stan's gradients).
        """
        i = int(i)
        m, keep = self.deleted_model(i)
        derived = self._loo_program(i) if keep is not None and self._ll_cols is not None else None
        if derived is not None:
            theta, div = self._stan_nuts(derived, chains, warmup, draws, random_seed, target_accept, max_tree_depth)
            return theta, {"sampler": "Stan NUTS on logp - log_lik[i] (derived program)", "divergences": div}
        if keep is not None:
            return super().refit_draws(i, chains=chains, warmup=warmup, draws=draws, random_seed=random_seed,
                                       init=init, target_accept=target_accept, max_tree_depth=max_tree_depth)
        sm = StanModel(self.code, self.deleted_data(i), random_seed=self._seed, sampler=True)
        theta, div = self._stan_nuts(sm, chains, warmup, draws, random_seed, target_accept, max_tree_depth)
        return theta, {"sampler": "Stan NUTS on the program without the observation", "divergences": div}

    def _loo_program(self, i: int) -> StanModel | None:
        """The derived program at ``ppl_loo_obs_index = i + 1`` (the posterior without observation ``i``), checked
        against ``logp - log_lik[i]``; None where it cannot be built or disagrees (the refit then samples the bridge's
        LOO density, as the search does)."""
        try:
            sm = self._sampling_program().with_data({**self.data, OBS_INDEX: i + 1})
            self._check_sampling_model(sm, obs=i)
        except ValueError as err:
            warnings.warn(f"refit of observation {i}: Stan's NUTS cannot sample the derived program of logp - "
                          f"{self._log_lik_name}[{i + 1}] ({err}); NumPyro's NUTS on the bridge's LOO density samples "
                          "it instead (slower).", stacklevel=3)
            return None
        return sm

    def _stan_nuts(self, sm: StanModel, chains, warmup, draws, random_seed, target_accept, max_tree_depth):
        """``(theta (chains, draws, dim), divergences)``: Stan's NUTS on ``sm`` (same parameters as this
        program), each chain's CSV read with :func:`~ppl_loo.io.read_cmdstan_csv` and its parameter columns (Stan's
        constrained order) unconstrained by the bridge."""
        seed = int(np.random.default_rng(random_seed).integers(2**31))
        names = self.bridge.constrained_param_names(include_tp=False, include_gq=False)
        with tempfile.TemporaryDirectory() as tmp:
            paths, _ = sample_cmdstan_csv(sm, tmp, chains=int(chains), random_seed=seed, num_warmup=int(warmup),
                                          num_samples=int(draws), adapt_delta=float(target_accept),
                                          max_depth=int(max_tree_depth))
            runs = [read_cmdstan_csv(p) for p in paths]
        values = np.concatenate([f.sampling[:, [f.header.index(n) for n in names]] for f in runs])
        theta = self.bridge.param_unconstrain(values).reshape(int(chains), int(draws), self.dim)
        div = int(sum(f.sampling[:, f.header.index("divergent__")].sum() for f in runs))
        return theta, div

    # ------------------------------------------------------------------ mixture importance sampling
    def mixture_draws(self, *, chains, warmup, draws, random_seed, init=None, target_accept=0.8, max_tree_depth=10):
        """Draws of the mixture of all LOO posteriors, ``q_mix(theta) ∝ p(theta | y) sum_j 1 / p(y_j | theta)``
        (Silva & Zanella 2023), by Stan's own NUTS (in-process, :mod:`ppl_loo.stan_bridge.sampler`) on the derived
        program of :func:`~ppl_loo.stan_bridge.derived.sampling_program` (``ppl_loo_obs_index = 0``).

        The derived program (the model block plus ``target += log_sum_exp(-log_lik)``, with ``log_lik``
        the program's generated quantity) is built once with the sampler and kept on this object; before
        its first use its log density is checked against ``logp + logsumexp(-log_lik)`` at test points
        (as many as the run has draws, at most :data:`HOST_CHUNK`: one batched call each, as every other
        bridge call).
        Ctrl-C stops the chain that runs and raises ``KeyboardInterrupt``, as in :meth:`refit_draws`.

        Parameters
        ----------
        chains, warmup, draws
            Number of chains, warmup iterations and kept draws per chain.
        random_seed
            Seed (or ``numpy.random.Generator``) from which Stan's seed is drawn.
        init
            Ignored: :func:`~ppl_loo.stan_bridge.sampler.sample_cmdstan_csv` has no initial values, so each chain
            starts at Stan's random inits, uniform in ``(-2, 2)`` on the unconstrained scale. Accepted so that
            the call matches the NumPyro fallback, which starts at ``init`` (``(chains, dim)``).
        target_accept, max_tree_depth
            Stan's ``adapt delta`` and NUTS ``max_depth``.

        Returns
        -------
        (theta, info)
            ``theta``: ``(chains, draws, dim)`` unconstrained draws of ``q_mix``; ``info``: a dict with
            ``sampler``, ``divergences`` (over all chains) and ``program`` (``"mixture"``).

        Raises
        ------
        ValueError
            The program has no ``log_lik`` generated quantity, the derivation fails to compile, or the
            derived program's log density disagrees with ``logp + logsumexp(-log_lik)``.
        """
        del init  # no initial values in ppl_loo.stan_bridge.sampler (docstring)
        sm = self._sampling_program(n_check=min(int(chains) * int(draws), HOST_CHUNK))
        theta, div = self._stan_nuts(sm, chains, warmup, draws, random_seed, target_accept, max_tree_depth)
        return theta, {"sampler": "Stan NUTS on the mixture program", "divergences": div, "program": "mixture"}

    def _sampling_program(self, n_check: int = 4) -> StanModel:
        """The derived program of :func:`~ppl_loo.stan_bridge.derived.sampling_program` on the data with
        ``ppl_loo_obs_index = 0`` (the mixture), built with the sampler, checked at ``n_check`` points, cached on
        this object; ``with_data`` gives the LOO posterior of an observation without compiling again."""
        if self._sampling_model is not None:
            return self._sampling_model
        if self._ll_cols is None:
            raise ValueError(f"mixture importance sampling needs the pointwise log-likelihood as a generated "
                             f"quantity of the program, and it has no {self._log_lik_name!r}: add one with "
                             "log p(y_i | theta) per observation (log_likelihood= names it)")
        try:
            code = sampling_program(self.code, self._log_lik_name)
            sm = StanModel(code, {**self.data, OBS_INDEX: 0}, random_seed=self._seed, n_threads=self.bridge.n_threads,
                           log_likelihood=None, sampler=True)
        except (ValueError, StanCompileError, StanDataError) as err:
            raise ValueError(f"ppl_loo samples the mixture of the LOO posteriors with a derived Stan program (the "
                             f"{self._log_lik_name!r} generated quantity moved into the model block, plus "
                             f"target += log_sum_exp(-{self._log_lik_name})), which failed here:\n{err}") from None
        self._check_sampling_model(sm, n_check)
        self._sampling_model = sm
        return sm

    def _check_sampling_model(self, sm: StanModel, n_points: int = 4, obs: int | None = None) -> None:
        """The derived program's log density equals ``logp + logsumexp(-log_lik)`` (the mixture) or, with ``obs``
        (``sm`` on the data with ``ppl_loo_obs_index = obs + 1``), ``logp - log_lik[obs]`` at test points.

        Both densities as the bridge gives them for the full model (``propto=False``, ``jacobian=True``);
        the test points are zero and ``n_points - 1`` uniform points in ``(-1, 1)^d`` (fixed seed), evaluated
        in one batch; a point at which the program or its ``log_lik`` throws is skipped.
        """
        rng = np.random.default_rng(0)
        x = np.vstack([np.zeros(self.dim), rng.uniform(-1.0, 1.0, (max(int(n_points), 4) - 1, self.dim))])
        derived = sm.log_density(x, jacobian=True, on_error="reject")
        lp = self.bridge.log_density(x, jacobian=True, on_error="reject")
        try:
            ll = self._host_loglik_impl(x)
        except Exception:  # noqa: BLE001 - Stan threw at some point: point by point, skipping those
            ll = np.full((len(x), self.n_obs), np.nan)
            for j in range(len(x)):  # only after a failed batch
                try:
                    ll[j] = self._host_loglik_impl(x[j:j + 1])[0]
                except Exception:  # noqa: BLE001 - Stan's exception at that point; the others decide
                    continue
        name = self._log_lik_name
        expected = lp + logsumexp(-ll, axis=1) if obs is None else lp - ll[:, obs]
        diff = np.abs(derived - expected)
        bad = np.isfinite(expected) & ~(diff <= 1e-8 * np.maximum(1.0, np.abs(expected)))  # NaN derived is bad
        if np.any(bad):
            j = int(np.argmax(bad))
            what, term, advice = (
                (f"mixture program (logp + log_sum_exp(-{name}))", f"plus logsumexp(-{name})",
                 ", or pass second_opinions={'mixture': False} to pl.loo to skip the mixture run") if obs is None else
                (f"program of the posterior without observation {obs} (logp - {name}[{obs + 1}])",
                 f"minus {name}[{obs + 1}]", ""))
            raise ValueError(
                f"the derived {what} disagrees with the program's log density {term} from its generated quantity "
                f"at test point {j}: {derived[j]!r} vs {expected[j]!r} (difference {diff[j]:.3g}). Its value depends "
                f"on something the derivation cannot keep (a random number in the generated quantities?): make "
                f"{name!r} a function of the data and parameters only{advice}.")

    # ------------------------------------------------------------------ constrained space
    def unconstrain(self, posterior) -> np.ndarray:
        """Posterior draws (Dataset/DataTree with Stan's names, dims ``chain, draw, ...``) -> ``(S, d)``.

        Every parameter of the program must be in the posterior with the shape the program
        declares for these data; draws outside the support raise with Stan's message
        (:func:`~ppl_loo.adapters.stan.data.unconstrain_draws`).
        """
        return unconstrain_draws(self.bridge, posterior)

    def constrain(self, theta) -> dict:
        """``{name: (S, *shape)}`` of the parameters and transformed parameters at unconstrained draws."""
        return constrain_draws(self.bridge, theta)

    # ------------------------------------------------------------------ observed data (messages)
    @property
    def discrete_data(self) -> tuple:
        """The data entries indexed by observation (``obs_keys``) that the program declares ``int``."""
        ints = _int_data_names(self.code) if isinstance(self.code, str) else set()
        return tuple(k for k in (self.obs_keys or ()) if k in ints)

    @property
    def observation_entries(self) -> dict:
        """``name -> values`` of the data entries indexed by observation (``obs_keys``)."""
        return {k: self.data[k] for k in (self.obs_keys or ()) if k in self.data}

    # ------------------------------------------------------------------ predictive CDF (pl.loo_pit)
    def pit_cdf(self, params):
        """``P(y_rep_i <= y_i | theta)`` ``(M, n)`` at the points ``params`` (constrained, as :meth:`constrain` gives
        them), and for a discrete outcome the tuple with ``P(y_rep_i < y_i | theta)``: Stan's own ``_lcdf`` of the
        distribution of each ``log_lik`` statement, in a derived program
        (:func:`~ppl_loo.stan_bridge.derived.cdf_program`). For :func:`ppl_loo.loo_pit`."""
        model, discrete = self._cdf_model()
        dataset = xr.Dataset({name: (("chain", "draw") + tuple(f"{name}_dim_{k}" for k in range(np.ndim(v) - 1)),
                                     np.asarray(v)[None]) for name, v in params.items()})
        values = model.param_constrain(self.unconstrain(dataset), include_tp=True, include_gq=True,
                                       random_seed=self._seed)
        cols = flat_columns(model, self._log_lik_name)
        if discrete:
            cols.update(flat_columns(model, BELOW))
        out = [np.exp(values[:, [cols[f"{name}.{k + 1}"] for k in range(self.n_obs)]])
               for name in (self._log_lik_name, BELOW)[:1 + discrete]]
        return tuple(out) if discrete else out[0]

    def _cdf_model(self):
        """The compiled CDF program and whether the outcome is discrete; compiled on first use (cached like every
        Stan program)."""
        if self._cdf is None:
            try:
                code, discrete = cdf_program(self.code, self._log_lik_name)
                model = StanModel(code, self.data, random_seed=self._seed, n_threads=self.bridge.n_threads,
                                  log_likelihood=None)
            except (ValueError, StanCompileError, StanDataError) as err:
                raise ValueError(f"no predictive CDF could be derived from the program's {self._log_lik_name!r} "
                                 f"statements ({str(err).splitlines()[0]}): pass pl.loo_pit "
                                 "cdf=callable(params) -> P(y_rep_i <= y_i | theta).") from err
            self._cdf = (model, discrete)
        return self._cdf

    def __repr__(self) -> str:
        return (f"StanPosterior({self.bridge.model_name}, dim={self.dim}, n_obs={self.n_obs}, "
                f"obs_keys={self.obs_keys})")




def _int_data_names(code: str) -> set:
    """The names the ``data`` block of the Stan program ``code`` declares ``int`` (comments removed)."""
    block = re.search(r"\bdata\s*\{(.*?)\}\s*(transformed\s+data|parameters|model)\b", re.sub(r"//[^\n]*", "", code),
                      re.S)
    if block is None:
        return set()
    ints = set()
    for decl in block.group(1).split(";"):
        m = re.search(r"\bint\b.*?(\w+)\s*(\[[^\]]*\])?\s*$", decl.strip(), re.S)
        if m:
            ints.add(m.group(1))
    return ints


def _rebuild_posterior(bridge: StanModel, opts: dict) -> StanPosterior:
    """The :class:`StanPosterior` of a pickled one (:meth:`StanPosterior.__reduce__`)."""
    return StanPosterior(bridge, **opts)


def compile_sampling_program(stan_model: StanModel, log_lik: str = "log_lik") -> bool:
    """Compile the derived program of :func:`~ppl_loo.stan_bridge.derived.sampling_program` for ``stan_model`` into
    the cache of compiled programs, loading nothing: ``pl.loo`` samples it for the mixture run where plain PSIS
    leaves an observation unsettled (:meth:`StanPosterior.mixture_draws`) and for the refits of a program with a
    parameter per observation, and a later process then finds it built (``ppl-loo sample`` runs this beside the
    sampler). Returns whether it is now cached: False where the program has no ``log_lik`` generated quantity or the
    derived program does not compile (``pl.loo`` says why when it needs it)."""
    try:
        build_library(sampling_program(stan_model.code, log_lik), extra_cxxflags=(SAMPLER_FLAG,))
    except (ValueError, StanCompileError):
        return False
    return True


def loo_adapter(stan_model: StanModel, var_name: str | None = None, data=None) -> StanPosterior:
    """The :class:`StanPosterior` that :func:`ppl_loo.loo` runs on for ``stan_model`` (cached per ``var_name``).

    Parameters
    ----------
    stan_model
        A :class:`~ppl_loo.StanModel` (its LOO options ``n_obs``, ``obs_keys``, ``log_lik``,
        ``loo_extra`` are used).
    var_name
        Name of the log-likelihood variable in the user's DataTree. Default: the ``log_lik``
        option when the DataTree's ``log_likelihood`` group has it, else that group's only
        variable, else the ``log_lik`` option.
    data
        The user's DataTree (only its ``log_likelihood`` group is looked at).
    """
    var_name = resolve_var_name(var_name, data, stan_model.loo_options["log_likelihood"])
    # kept on the StanModel (a ppl_loo object; the adapter references it, so a module-level map would
    # keep every program alive): the adapter and its compiled functions go with the StanModel
    per_model = vars(stan_model).setdefault("loo_adapters", {})
    if var_name not in per_model:
        per_model[var_name] = StanPosterior(stan_model, var_name=var_name)
    return per_model[var_name]


def resolve_var_name(var_name, data, log_lik) -> str:
    """The DataTree name of the log-likelihood variable (see :func:`loo_adapter`)."""
    if var_name is not None:
        return str(var_name)
    default = log_lik or "log_lik"
    children = getattr(data, "children", None)
    if children is not None and "log_likelihood" in children:
        names = list(data["log_likelihood"].to_dataset().data_vars)
        if default in names:
            return default
        if len(names) == 1:
            return str(names[0])
    return default
