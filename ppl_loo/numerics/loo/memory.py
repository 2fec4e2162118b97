"""The memory of one observation's search: per-draw work in blocks of draws, sized from shapes.

A model evaluated through its full log density (no declared structure) makes the search hold, for
every draw at once, what one draw's computation holds: the ``(d, d)`` Jacobian of a gradient flow
and the forward-mode tangents of the log density's graph (``d`` of them per draw) for its
determinant, or the graph's intermediates at every step of a line. The Jacobians alone are
``S d^2 * 8`` bytes: 12.6 GB at ``S = 4,000`` draws and ``d = 627`` parameters (a regularized-horseshoe
logistic regression), and the other flows need more.

Each such computation is a function of one draw. Its bytes are read off the shapes of its jaxpr
(:func:`draw_bytes`: the largest set of intermediates alive at once, in program order, times
:data:`SAFETY`, a margin for XLA's own temporaries) and the draws are mapped in blocks
of :func:`draw_block` draws (``jax.lax.map``) so that a block's temporaries stay within
``EngineConfig.block_bytes`` (default :data:`BLOCK_BYTES`). Where all draws fit, the computation is
one unblocked ``jax.vmap``. Work that does not fit even one draw at a time
(:func:`fits_one_draw`), or whose ``(d, d)`` matrices of one observation do not fit
(:func:`fits_dense`), is left out of the search (the transformation is not applicable), and
``pl.loo`` says so before it starts.
"""

from __future__ import annotations

import os

import jax
import jax.extend.core as jcore
import numpy as np

__all__ = ["BLOCK_BYTES", "ONE_DRAW_FACTOR", "SAFETY", "aval_bytes", "jaxpr_peak_bytes", "draw_bytes", "draw_block",
           "fits_one_draw", "fits_dense", "map_draws", "block_bytes_of", "machine_bytes", "device_free_bytes"]

#: bytes of temporaries one blocked per-draw computation of one observation's search may hold
BLOCK_BYTES = 2**28
#: one draw's computation may take up to this many block budgets (it then runs one draw at a time);
#: beyond, it is left out. The ``(d, d)`` work of one observation has the same limit.
ONE_DRAW_FACTOR = 4
#: a margin on the jaxpr's live-set estimate for XLA's own temporaries, which can exceed it
SAFETY = 2.0


def machine_bytes():
    """Physical memory of this machine in bytes (2^33 where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 2**33


def device_free_bytes():
    """Free memory of JAX's default device in bytes (its ``memory_stats()``: ``bytes_limit - bytes_in_use``), or
    None on a CPU (whose memory is the machine's, :func:`machine_bytes`) and on a device that does not report it."""
    device = jax.devices()[0]
    if device.platform == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
    if "bytes_limit" not in stats:
        return None
    return max(0, int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))


def block_bytes_of(cfg):
    """The block budget of a configuration (``cfg.block_bytes``, else :data:`BLOCK_BYTES`)."""
    value = getattr(cfg, "block_bytes", None)
    return BLOCK_BYTES if value is None else int(value)


def aval_bytes(aval):
    """Bytes of an abstract value (0 for tokens and other non-arrays)."""
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _is_var(v):
    return isinstance(v, jcore.Var)


def jaxpr_peak_bytes(jaxpr):
    """The largest total size of the values alive at once when ``jaxpr`` runs in program order.

    Inputs count, closed-over constants do not (they are shared, not per draw); a sub-jaxpr (a
    ``pjit``, ``custom_jvp_call``, loop body, ...) adds its own peak while its equation runs.
    """
    last = {}
    for idx, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if _is_var(v):
                last[v] = idx
    for v in jaxpr.outvars:
        if _is_var(v):
            last[v] = len(jaxpr.eqns)
    live = sum(aval_bytes(v.aval) for v in jaxpr.invars)
    peak = live
    for idx, eqn in enumerate(jaxpr.eqns):
        inner = max([jaxpr_peak_bytes(getattr(s, "jaxpr", s)) for s in jcore.jaxprs_in_params(eqn.params)] or [0])
        out = sum(aval_bytes(v.aval) for v in eqn.outvars)
        peak = max(peak, live + inner, live + out)
        live += out
        live -= sum(aval_bytes(v.aval) for v in {v for v in eqn.invars if _is_var(v)} if last.get(v) == idx)
        live -= sum(aval_bytes(v.aval) for v in eqn.outvars if v not in last)
    return peak


def draw_bytes(fn, *args):
    """Estimated bytes of temporaries of ``fn`` at one draw; ``args`` are arrays or
    ``jax.ShapeDtypeStruct`` of one draw's shapes (nothing is evaluated)."""
    closed = jax.make_jaxpr(fn)(*args)
    return int(SAFETY * jaxpr_peak_bytes(closed.jaxpr))


def draw_block(S, per_draw, budget=BLOCK_BYTES):
    """Draws per block for ``S`` draws of ``per_draw`` bytes each: 0 (all at once, unblocked) when
    ``S * per_draw`` fits ``budget``, else the number that does (at least 1)."""
    if S * per_draw <= budget:
        return 0
    return int(max(1, min(S - 1, budget // max(per_draw, 1))))


def fits_one_draw(per_draw, budget=BLOCK_BYTES):
    """Whether one draw's computation fits :data:`ONE_DRAW_FACTOR` budgets (else it is left out)."""
    return per_draw <= ONE_DRAW_FACTOR * budget


def fits_dense(d, n_matrices, budget=BLOCK_BYTES):
    """Whether ``n_matrices`` float64 ``(d, d)`` matrices of one observation fit :data:`ONE_DRAW_FACTOR`
    budgets (the Newton step's Hessian and eigendecompositions, MM3's covariances)."""
    return 8 * n_matrices * d * d <= ONE_DRAW_FACTOR * budget


def map_draws(fn, xs, block):
    """``fn`` of one draw over the leading axis of every array of ``xs``: ``jax.vmap`` when ``block``
    is 0, else ``jax.lax.map`` in blocks of ``block`` draws (the same values, less memory)."""
    if block == 0:
        return jax.vmap(fn)(*xs)
    return jax.lax.map(lambda a: fn(*a), tuple(xs), batch_size=int(block))
