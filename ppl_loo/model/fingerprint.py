"""A model's fingerprint: a digest of the programs of its JAX functions, stable across Python processes.

The adaptive search of a model calls it only through ``logp``, ``loglik_i`` (``loo_logp`` where the
likelihood does not factorize), ``line_eval``, ``adapt_index``, ``factorizes`` and ``dim``
(:func:`ppl_loo.numerics.loo.build_engine`). For a model without structure, output or
variance-descent target, whose ``line_eval`` is the generic one (:attr:`GENERIC`: it evaluates
``logp`` and ``loglik_i``), the jaxprs of those functions, their constants and the rest determine
the search's program; :func:`model_fingerprint` hashes them, and :mod:`ppl_loo.program_cache`
keeps the traced program under it. Any other model has no fingerprint (None) and is traced anew in
every process.
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["model_fingerprint", "GENERIC"]

#: the attribute that marks a ``line_eval`` as the generic one (a function of ``logp`` and ``loglik_i`` only,
#: for a model without structure)
GENERIC = "generic_line_eval"


def _jaxpr_digest(h, fn, *specs):
    """Hash the program of ``fn`` and of its gradient in its first argument at ``specs``: the printed jaxprs and the
    values of every constant, those of the jaxprs nested in its equations (a jitted function's closed-over arrays are
    constants of its own jaxpr, which printing names but does not show) included."""
    for f in (fn, jax.grad(fn)):
        closed = jax.make_jaxpr(f)(*specs)
        h.update(str(closed.jaxpr).encode())
        _consts_digest(h, closed)


def _consts_digest(h, closed):
    for c in closed.consts:
        a = np.asarray(c)
        h.update(repr((a.shape, str(a.dtype))).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    for eqn in closed.jaxpr.eqns:
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(sub, "consts") and hasattr(sub, "jaxpr"):  # a ClosedJaxpr
                    _consts_digest(h, sub)
                elif hasattr(sub, "eqns"):  # a Jaxpr: its constants are inputs, bound where it is used
                    _consts_digest(h, _Closed(sub))


class _Closed:
    """A Jaxpr without constants, shaped as a ClosedJaxpr for :func:`_consts_digest`."""

    def __init__(self, jaxpr):
        self.jaxpr, self.consts = jaxpr, ()


def model_fingerprint(model) -> str | None:
    """SHA-256 of what the search's program depends on in ``model`` (a :class:`~ppl_loo.model.protocol.Model`),
    or None where the model is not one whose program this digest determines (see the module's docstring), or
    its functions cannot be traced alone. Computed once per model (kept among its ``compiled`` programs)."""
    if model.compiled is None:
        return _fingerprint(model)
    return model.compiled("fingerprint", None, lambda: _fingerprint(model))


def _fingerprint(model):
    if not model.is_jax or model.structure is not None or model.output is not None or model.has_var_target:
        return None
    if not getattr(model.line_eval, GENERIC, False):
        return None
    d = int(model.layout.dim)
    theta = jax.ShapeDtypeStruct((d,), jnp.float64)
    i = jax.ShapeDtypeStruct((), jnp.int64)
    h = hashlib.sha256()
    adapt = None if model.adapt_index is None else np.asarray(model.adapt_index).tolist()
    h.update(repr((d, bool(model.factorizes), adapt, model.kind)).encode())
    try:
        with jax.enable_x64(True):
            _jaxpr_digest(h, model.logp, theta)
            _jaxpr_digest(h, model.loglik_i if model.factorizes else model.loo_logp, theta, i)
    except Exception:  # a function that traces only inside the search's own program
        return None
    return h.hexdigest()
