"""What the search of one observation reads: the draws, per-run block statistics, the model's functions.

The draws enter the jit-compiled search as an :class:`EngineData` argument (never as closure
constants, which XLA would try to constant-fold). Inside the trace they are bundled with the static
pieces (configuration, adapted block, the model) into a :class:`SearchContext` that every function
of the search receives explicitly.

The model is used only through ``adapt_index``, ``structure``, ``factorizes``, ``logp``,
``loglik_i``, ``loo_logp``, ``has_var_target``, ``log_var_target`` and ``line_eval``.
"""


from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics.gaussian import log_q as gaussian_log_q
from ppl_loo.numerics.loo.config import EngineConfig
from ppl_loo.numerics.loo.memory import block_bytes_of, draw_block, draw_bytes, map_draws
from ppl_loo.numerics.moments import normalize_log_weights
from ppl_loo.numerics.transforms import DiagAffine, LowRank, ObsContext

__all__ = ["EngineData", "BlockStats", "SearchContext", "block_index", "block_stats", "search_context", "loglik_i",
           "embed", "line", "line_block", "line_bytes_per_draw", "obs_context"]


class EngineData(NamedTuple):
    """The draws and their log densities: passed to the jit-compiled search as arguments."""

    theta: jnp.ndarray  # (S, d) unconstrained draws
    logp0: jnp.ndarray  # (S,) log p~(theta_k), the unnormalized log posterior
    log_q0: jnp.ndarray  # (S,) log density of the draws' distribution (logp0 for MCMC; Eq. 13 otherwise)
    grad_logp0: jnp.ndarray  # (S, d) gradient of logp at the draws
    cache: object = None  # model.line_cache(theta)
    stats: object = None  # BlockStats, filled once per run by ``search.prepare`` (shared by all observations)
    gauss: object = None  # the Gaussian q the draws come from (numerics.gaussian), for the cavity proposals


class BlockStats(NamedTuple):
    """Per-run quantities on the adapted block, computed once and shared by every observation."""

    theta_b: jnp.ndarray  # (S, d_b) adapted block of the draws
    grad_logp0_b: jnp.ndarray  # (S, d_b)
    mean_b: jnp.ndarray  # (d_b,)
    sd_b: jnp.ndarray  # (d_b,) posterior sd (ddof=1)
    centred: jnp.ndarray  # (S, d_b) theta_b - mean_b
    centred_sq: jnp.ndarray  # (S, d_b) its square


class SearchContext(NamedTuple):
    """The state one observation's search reads (traced arrays and static pieces side by side)."""

    model: object  # the model's functions (see the module docstring)
    cfg: EngineConfig  # static
    posterior_draws: bool  # static: draws from the posterior itself (else from an approximation q)
    log_q_fn: object  # log q(theta) of one draw, or None
    theta: jnp.ndarray  # (S, d)
    logp0: jnp.ndarray  # (S,)
    log_q0: jnp.ndarray  # (S,)
    grad_logp0: jnp.ndarray  # (S, d)
    cache: object  # model.line_cache(theta)
    stats: BlockStats
    block: np.ndarray  # static: indices of the adapted block
    bidx: object  # static: the same block as a slice where contiguous (no gather), else ``block``
    gauss: object = None  # SubspaceGaussian / MeanField the draws come from, or None


def block_index(adapt_index, d):
    """The adapted block as a static slice when contiguous (no gather), else an index array."""
    if adapt_index is None:
        return slice(0, d)
    block = np.asarray(adapt_index)
    if block.size and np.array_equal(block, np.arange(block[0], block[0] + block.size)):
        return slice(int(block[0]), int(block[0]) + block.size)
    return block


def block_stats(model, data: EngineData) -> BlockStats:
    """:class:`BlockStats` of ``data`` for ``model`` (one pass over the draws)."""
    theta, grad_logp0 = data.theta, data.grad_logp0
    block = block_index(model.adapt_index, theta.shape[1])
    theta_b = theta[:, block]
    mean_b = jnp.mean(theta_b, axis=0)
    centred = theta_b - mean_b
    centred_sq = jnp.square(centred)
    sd_b = jnp.sqrt(jnp.sum(centred_sq, axis=0) / (theta.shape[0] - 1))
    return BlockStats(theta_b, grad_logp0[:, block], mean_b, sd_b, centred, centred_sq)


def search_context(model, cfg, posterior_draws, log_q_fn, data: EngineData) -> SearchContext:
    """Bundle ``data`` (with its :class:`BlockStats` filled) and the static pieces of the search."""
    d = data.theta.shape[1]
    if log_q_fn is None and data.gauss is not None:  # q of a stored Gaussian approximation, traced
        log_q_fn = partial(gaussian_log_q, data.gauss)
    block = np.arange(d) if model.adapt_index is None else np.asarray(model.adapt_index)
    return SearchContext(model, cfg, posterior_draws, log_q_fn, data.theta, data.logp0, data.log_q0,
                         data.grad_logp0, data.cache, data.stats, block, block_index(model.adapt_index, d),
                         data.gauss)


def loglik_i(sc: SearchContext, th, i):
    """``log l_i(theta)`` of one draw: the model's own, or ``logp - loo_logp`` where it does not factorize."""
    if sc.model.factorizes:
        return sc.model.loglik_i(th, i)
    return sc.model.logp(th) - sc.model.loo_logp(th, i)


def embed(sc: SearchContext, delta_b):
    """Scatter a block displacement (dense, LowRank or DiagAffine) into the full parameter vector."""
    S, d = sc.theta.shape
    block = sc.block
    if block.shape[0] == d:
        return delta_b
    if isinstance(delta_b, DiagAffine):  # zero slope and shift off the block: those coordinates stay
        pad = lambda v: jnp.zeros((d,), v.dtype).at[block].set(v)  # noqa: E731
        return DiagAffine(pad(delta_b.shift), pad(delta_b.slope))
    if isinstance(delta_b, LowRank):
        basis = jnp.zeros((delta_b.basis.shape[0], d), delta_b.basis.dtype).at[:, block].set(delta_b.basis)
        return LowRank(delta_b.coef, basis)
    return jnp.zeros((S, d), delta_b.dtype).at[:, block].set(delta_b)


def line(sc: SearchContext, delta_b, steps, i):
    """``(log p~, log l_i)`` at ``theta + t delta`` for every step ``t``, shape ``(T, S)`` each.

    A model without a line cache evaluates its full log density at every step of every draw: where
    those ``(T, S, graph)`` temporaries exceed ``cfg.block_bytes`` the draws go in blocks
    (:func:`line_block`)."""
    delta = embed(sc, delta_b)
    block = line_block(sc, delta, steps)
    if block == 0:
        return sc.model.line_eval(sc.cache, sc.theta, delta, steps, i)
    rows, one = _line_of_one_draw(sc, delta, steps)
    lp, ll = map_draws(lambda th, *r: one(th, i, *r), (sc.theta, *rows), block)
    return lp.T, ll.T


def _line_of_one_draw(sc: SearchContext, delta, steps):
    """``(rows, one)``: the per-draw arrays of ``delta`` and ``one(theta_s, i, *rows_s) -> ((T,), (T,))``,
    the line of one draw through the model's own ``line_eval``."""
    if isinstance(delta, DiagAffine):  # the same field at every draw
        rows, rebuild = (), lambda: delta
    elif isinstance(delta, LowRank):
        rows, rebuild = (delta.coef,), lambda c: LowRank(c[None], delta.basis)
    else:
        rows, rebuild = (delta,), lambda r: r[None]

    def one(th, i, *r):
        lp, ll = sc.model.line_eval(None, th[None], rebuild(*r), steps, i)
        return lp[:, 0], ll[:, 0]

    return rows, one


def line_bytes_per_draw(sc: SearchContext, delta, steps):
    """Estimated bytes of the line of one draw (:func:`_line_of_one_draw`)."""
    rows, one = _line_of_one_draw(sc, delta, steps)
    avals = [jax.ShapeDtypeStruct(a.shape[1:], a.dtype) for a in (sc.theta, *rows)]
    return draw_bytes(lambda th, i, *r: one(th, i, *r), avals[0], jax.ShapeDtypeStruct((), np.int32), *avals[1:])


def line_block(sc: SearchContext, delta, steps):
    """Draws per block of a line evaluation: 0 (all at once) for a model with a line cache (its own
    evaluation, blocked by observations where needed: :mod:`ppl_loo.numerics.glm_lines`) or when
    all draws fit ``cfg.block_bytes``."""
    if sc.cache is not None:
        return 0
    return draw_block(sc.theta.shape[0], line_bytes_per_draw(sc, delta, steps), block_bytes_of(sc.cfg))


def obs_context(sc: SearchContext, ll0) -> ObsContext:
    """The moment-matching inputs of one observation: plain IS weights (Eq. 6 / Eq. 13) and block moments."""
    st = sc.stats
    lw_raw = normalize_log_weights(sc.logp0 - ll0 - sc.log_q0)
    return ObsContext(st.theta_b, lw_raw, st.mean_b, st.sd_b, st.centred, st.centred_sq)
