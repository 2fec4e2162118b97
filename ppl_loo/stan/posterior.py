"""``StanPosterior``: a compiled Stan program as a :class:`~ppl_loo.models.base.PosteriorModel`.

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
group, as ``theta_tilde`` in eight schools) lose coordinates when an observation is deleted. The
deleted program then gives the LOO density of the remaining coordinates only; the missing factor
(the conditional density of the dropped coordinates given the others, usually their prior) must be
supplied as ``loo_extra(theta, i)`` (a JAX function of one full unconstrained draw).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo import _config  # noqa: F401  (float64)
from ppl_loo.models.base import PosteriorModel

from .model import StanEvaluationError, StanModel, _read_program

__all__ = ["StanPosterior"]

_NAME_RE = re.compile(r"^([^.]+)((?:\.\d+)*)$")


def _split_name(name: str) -> tuple[str, tuple[int, ...]]:
    """``"theta.2.3"`` -> ``("theta", (2, 3))`` (1-based indices)."""
    m = _NAME_RE.match(name)
    if not m:
        return name, ()
    idx = tuple(int(k) for k in m.group(2).split(".")[1:]) if m.group(2) else ()
    return m.group(1), idx


def _as_data_dict(data) -> dict:
    if data is None:
        return {}
    if isinstance(data, dict):
        return dict(data)
    if isinstance(data, (str, os.PathLike)):
        text = str(data).strip()
        if not text.startswith("{"):
            p = Path(text)
            if p.suffix == ".R" or p.suffix == ".r":
                from .cmdstan_csv import read_rdump

                return read_rdump(p)
            text = p.read_text()
        return json.loads(text)
    return dict(data)


class StanPosterior(PosteriorModel):
    """A Stan program plus data for ``pl.loo``, with exact LOO by data deletion.

    Parameters
    ----------
    stan_file_or_code
        Path of a ``.stan`` file or the program text.
    data
        ``dict`` of the data block (or a JSON text / ``.json`` / R dump ``.R`` path).
    n_obs
        Name of the data entry holding the number of observations (``"N"``; ``"J"`` for eight
        schools). It is decremented in the deleted data.
    obs_keys
        Data entries indexed by observation along their first axis. Default: every array whose
        leading dimension equals ``data[n_obs]``.
    log_lik
        Generated quantity with the pointwise log-likelihood (used by :meth:`loglik` at the draws);
        when the program has none, ``loglik`` is ``logp - loo_logp`` for every observation.
    var_name
        Name of the log-likelihood variable in the DataTree (``log_likelihood`` group).
    loo_extra
        ``loo_extra(theta, i)``: log conditional density of the coordinates that the deleted
        program lacks (only for programs whose parameter dimension depends on ``n_obs``).
    fd_eps
        Relative step of the finite-difference Hessian-vector products.
    n_threads, seed
        Passed to :class:`~ppl_loo.stan.StanModel`.
    """

    is_jax = True
    factorizes = False

    def __init__(
        self,
        stan_file_or_code,
        data,
        *,
        n_obs: str = "N",
        obs_keys=None,
        log_lik: str | None = "log_lik",
        var_name: str = "log_lik",
        loo_extra=None,
        fd_eps: float = 1e-5,
        n_threads: int = 1,
        seed: int = 1234,
    ):
        self.code, _ = _read_program(stan_file_or_code)
        self.data = _as_data_dict(data)
        if n_obs not in self.data:
            raise KeyError(f"n_obs={n_obs!r} is not a data entry (entries: {list(self.data)})")
        self.n_obs_key = n_obs
        self.n_obs = int(np.asarray(self.data[n_obs]))
        if self.n_obs < 1:
            raise ValueError(f"data[{n_obs!r}] = {self.n_obs}: need at least one observation")
        if obs_keys is None:
            obs_keys = [
                k for k, v in self.data.items()
                if k != n_obs and np.ndim(v) >= 1 and np.shape(v)[0] == self.n_obs
            ]
        else:
            obs_keys = list(obs_keys)
            for k in obs_keys:
                if k not in self.data:
                    raise KeyError(f"obs_keys: {k!r} is not a data entry")
                if np.ndim(self.data[k]) < 1 or np.shape(self.data[k])[0] != self.n_obs:
                    raise ValueError(f"obs_keys: data[{k!r}] has shape {np.shape(self.data[k])}, "
                                     f"not a leading dimension of {self.n_obs}")
        self.obs_keys = tuple(obs_keys)
        self._seed = int(seed)
        self._n_threads = int(n_threads)
        self.bridge = StanModel(self.code, self.data, seed=seed, n_threads=n_threads)
        self.dim = self.bridge.dim
        self.var_name = var_name
        self.obs_dims = (f"{var_name}_dim_0",)
        self.obs_shape = (self.n_obs,)
        self.loo_extra = loo_extra
        self.fd_eps = float(fd_eps)
        self._deleted: list = [None] * self.n_obs  # (StanModel, keep index or None), built lazily
        self._param_dims = self.bridge.get_dims(include_tp=False, include_gq=False)
        self.param_names = tuple(self._param_dims)
        self.param_dims = {k: tuple(f"{k}_dim_{j}" for j in range(len(s))) for k, s in self._param_dims.items()}
        # the log_lik generated quantity, if any
        self._ll_cols = None
        if log_lik is not None:
            names = self.bridge.constrained_param_names(include_tp=True, include_gq=True)
            cols = {n: j for j, n in enumerate(names) if _split_name(n)[0] == log_lik}
            if cols:
                want = [f"{log_lik}.{k + 1}" for k in range(self.n_obs)]
                missing = [w for w in want if w not in cols]
                if missing or len(cols) != self.n_obs:
                    raise ValueError(f"generated quantity {log_lik!r} has {len(cols)} entries, expected a vector "
                                     f"of {self.n_obs} (one per observation)")
                self._ll_cols = np.array([cols[w] for w in want])
        self._jax_fns = self._build_jax()

    # ------------------------------------------------------------------ deleted models
    def deleted_data(self, i: int) -> dict:
        """The data without observation ``i`` (0-based)."""
        out = dict(self.data)
        for k in self.obs_keys:
            out[k] = np.delete(np.asarray(self.data[k]), int(i), axis=0)
        out[self.n_obs_key] = self.n_obs - 1
        return out

    def deleted_model(self, i: int):
        """``(StanModel on the data without i, keep)``; ``keep`` maps its coordinates into ``theta``."""
        i = int(i)
        if not 0 <= i < self.n_obs:
            raise IndexError(f"observation {i} out of range (n_obs = {self.n_obs})")
        if self._deleted[i] is None:
            m = StanModel(self.code, self.deleted_data(i), seed=self._seed, n_threads=self._n_threads)
            keep = None if m.dim == self.dim else self._keep_index(m, i)
            self._deleted[i] = (m, keep)
        return self._deleted[i]

    def _keep_index(self, m: StanModel, i: int) -> np.ndarray:
        """Coordinates of the full unconstrained vector that the deleted program keeps, in its order."""
        if self.loo_extra is None:
            raise ValueError(
                f"deleting observation {i} changes the number of parameters ({self.dim} -> {m.dim}): the "
                "program has parameters indexed by the observations, so the deleted program alone does not "
                "give the LOO density of the full parameter vector. Pass loo_extra(theta, i), the log "
                "conditional density of the dropped coordinates given the others (usually their prior)."
            )
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
            var, idx = _split_name(uname)
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
    @staticmethod
    def _safe_eval(model: StanModel, x: np.ndarray, grad: bool):
        """Batched bridge call; draws where Stan throws get ``-inf`` (and NaN gradients)."""
        try:
            if grad:
                return model.log_density_gradient(x)
            return model.log_density(x), None
        except StanEvaluationError:
            lp = np.full(x.shape[0], -np.inf)
            g = np.full(x.shape, np.nan) if grad else None
            for s in range(x.shape[0]):  # error path only
                try:
                    if grad:
                        lp[s], g[s] = model.log_density_gradient(x[s])
                    else:
                        lp[s] = model.log_density(x[s])
                except StanEvaluationError:
                    pass
            return lp, g

    def _host(self, theta, i, grad: bool):
        """``(lp, grad)`` at ``theta (..., d)`` for observation indices ``i`` (``< 0``: full model)."""
        theta = np.asarray(theta, dtype=np.float64)
        batch = theta.shape[:-1]
        x = theta.reshape(-1, self.dim)
        ii = np.broadcast_to(np.asarray(i), batch).reshape(-1).astype(np.int64)
        lp = np.empty(x.shape[0])
        g = np.zeros_like(x) if grad else None
        for u in np.unique(ii):
            sel = ii == u
            if u < 0:
                model, keep = self.bridge, None
            else:
                model, keep = self.deleted_model(int(u))
            xs = x[sel] if keep is None else x[sel][:, keep]
            lp_u, g_u = self._safe_eval(model, np.ascontiguousarray(xs), grad)
            lp[sel] = lp_u
            if grad:
                if keep is None:
                    g[sel] = g_u
                else:
                    gg = np.zeros((xs.shape[0], self.dim))
                    gg[:, keep] = g_u
                    g[sel] = gg
        lp = lp.reshape(batch)
        return (lp, g.reshape(theta.shape)) if grad else lp

    def _host_loglik(self, theta):
        theta = np.asarray(theta, dtype=np.float64)
        x = theta.reshape(-1, self.dim)
        out = self.bridge.param_constrain(x, include_tp=True, include_gq=True, seed=self._seed)
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

    # ------------------------------------------------------------------ constrained space
    def unconstrain(self, posterior) -> np.ndarray:
        """Posterior draws (Dataset/DataTree with Stan's names, dims ``chain, draw, ...``) -> ``(S, d)``."""
        if hasattr(posterior, "children") and "posterior" in getattr(posterior, "children", {}):
            posterior = posterior["posterior"]
        if hasattr(posterior, "to_dataset"):
            posterior = posterior.to_dataset()
        cols = []
        for name in self.bridge.constrained_param_names(include_tp=False, include_gq=False):
            var, idx = _split_name(name)
            if var not in posterior:
                raise KeyError(f"parameter {var!r} is not in the posterior (variables: {list(posterior.data_vars)})")
            da = posterior[var].transpose("chain", "draw", ...)
            a = np.asarray(da.values, dtype=np.float64)
            a = a[(slice(None), slice(None), *(k - 1 for k in idx))]
            cols.append(a.reshape(-1))
        x = np.stack(cols, axis=-1) if cols else np.zeros((0, 0))
        return self.bridge.param_unconstrain(x)

    def constrain(self, theta) -> dict:
        vals = self.bridge.param_constrain(np.asarray(theta, dtype=np.float64), include_tp=True)
        return self.bridge.split_constrained(vals, include_tp=True)

    def __repr__(self) -> str:
        return (f"StanPosterior({self.bridge.model_name}, dim={self.dim}, n_obs={self.n_obs}, "
                f"obs_keys={self.obs_keys})")
