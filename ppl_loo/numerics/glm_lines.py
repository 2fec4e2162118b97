"""Line evaluations of a Bernoulli-logit linear predictor in blocks of observations (bounded memory at large n).

Along ``theta + t delta`` the logit of observation ``i`` is ``(b + t db) . x_i`` (``b``, ``db`` the
coefficient block of the draw and of the displacement), so the full-data log-likelihood of every step
``t`` is ``-sum_i softplus(-s_i mu_i(t))`` with ``s_i = 2 y_i - 1``. Held at once this needs the
``(S, n)`` logits at the draws, the ``(S, n)`` logit direction and the ``(T, S, n)`` reduction: at
``n = 10^4`` observations and ``S = 2,000`` draws the search of one observation passed 9 GB. Above
:data:`LINE_BLOCK_BYTES` the sum runs over blocks of rows of ``X`` (``jax.lax.scan``), recomputing
the logits of each block from ``b`` instead of caching them, so the temporaries of one line
evaluation stay within the budget whatever ``n``; the cost is one extra ``O(S n q)`` product per
line, small next to the ``T S n`` softplus evaluations.

Budget: ``2^26`` bytes (64 MB) of ``(T + 3, S, rows)`` float64 temporaries per line. Every
observation's search evaluates lines one after the other; a batch of ``B`` observations (the
vectorized search) holds ``B`` of them. At ``S = 2,000`` and ``T = 11`` a block is 299 rows, and
each block's softplus work (``T S rows``, about 6.6 million evaluations) is large enough that the
loop's per-iteration overhead is negligible. Problems with ``(T_max + 3) S n`` within the budget
(every test model, ``n`` in the hundreds) keep the unblocked evaluation unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ppl_loo.numerics.special import softplus

__all__ = ["LINE_BLOCK_BYTES", "T_MAX", "draw_batch", "cache_logits", "line_block_rows", "line_bytes",
           "blocked_softplus_sum"]

#: bytes of float64 temporaries one line evaluation may hold before it works in blocks of observations
LINE_BLOCK_BYTES = 2**26
#: the number of steps per line assumed when deciding, per run, whether to cache the ``(S, n)`` logits
T_MAX = 16


def cache_logits(S, n, forced=None):
    """Whether the ``(S, n)`` logits at the draws are cached (the unblocked path) for this run.

    ``forced``: a model's ``line_block_rows`` attribute: ``None`` decides by the budget, ``0`` never
    blocks, a positive number of rows always blocks (unless it covers every observation).
    """
    return line_block_rows(S, n, T_MAX, forced) == 0


def line_block_rows(S, n, T, forced=None):
    """Rows of ``X`` per block for a line of ``T`` steps over ``S`` draws; 0 means one block, unblocked.

    Parameters
    ----------
    S, n, T : int
        Draws, observations and steps of the line.
    forced : int or None
        ``None``: blocks of ``LINE_BLOCK_BYTES // (8 S (T + 3))`` rows when the ``(T + 3, S, n)``
        temporaries exceed :data:`LINE_BLOCK_BYTES`. An int forces that many rows (0: unblocked).
    """
    if forced is not None:
        forced = int(forced)
        if forced < 0:
            raise ValueError(f"line_block_rows must be None (by memory) or a number of rows >= 0; got {forced}.")
        return 0 if forced == 0 or forced >= n else forced
    per_row = 8 * S * (T + 3)
    if per_row * n <= LINE_BLOCK_BYTES:
        return 0
    return int(max(1, min(n - 1, LINE_BLOCK_BYTES // per_row)))


def line_bytes(S, n, T=T_MAX):
    """Bytes one structured line evaluation holds at once: the ``(T + 3, S, rows)`` temporaries, with
    ``rows`` the block size, plus the cached ``(S, n)`` logits where they are cached."""
    rows = line_block_rows(S, n, T)
    if rows == 0:
        return 8 * S * n * (T + 4)
    return 8 * S * rows * (T + 3)


def blocked_softplus_sum(b, db, ts, Xt, sign, rows, offset=None):
    """``sum_i softplus(-s_i ((b + t db) . x_i + o_i))`` for every step and draw, shape ``(T, S)``.

    Parameters
    ----------
    b, db : array, shape (S, q)
        Coefficient block of the draws and of the displacement.
    ts : array, shape (T,)
    Xt : array, shape (n, q)
        Design matrix (with its intercept column).
    sign : array, shape (n,)
        ``2 y - 1``.
    rows : int
        Rows per block (static); the last block is padded with rows of weight 0.
    offset : array, shape (n,), optional
        A fixed term of the logit.
    """
    n, q = Xt.shape
    nb = -(-n // rows)
    pad = nb * rows - n
    dt = b.dtype
    Xp = jnp.concatenate([Xt.astype(dt), jnp.zeros((pad, q), dt)]).reshape(nb, rows, q)
    sp = jnp.concatenate([sign.astype(dt), jnp.zeros((pad,), dt)]).reshape(nb, rows)
    wp = jnp.concatenate([jnp.ones((n,), dt), jnp.zeros((pad,), dt)]).reshape(nb, rows)
    off = jnp.zeros((n,), dt) if offset is None else offset.astype(dt)
    op = jnp.concatenate([off, jnp.zeros((pad,), dt)]).reshape(nb, rows)
    t = ts[:, None, None]

    def body(acc, blk):
        X_, s_, w_, o_ = blk
        mu = (b @ X_.T + o_)[None] + t * (db @ X_.T)[None]  # (T, S, rows)
        return acc + jnp.sum(w_ * softplus(-s_ * mu), axis=-1), None

    acc0 = jnp.zeros((ts.shape[0], b.shape[0]), dt)
    return jax.lax.scan(body, acc0, (Xp, sp, wp, op))[0]


def draw_batch(S, n):
    """Draws per batch when a model's full-data density (and gradient) is evaluated at ``S`` draws:
    0 (all at once, ``jax.vmap``) while ``8`` float64 ``(S, n)`` intermediates fit
    :data:`LINE_BLOCK_BYTES`, else the number of draws whose intermediates do (``jax.lax.map``)."""
    per_draw = 8 * 8 * max(int(n), 1)
    if per_draw * S <= LINE_BLOCK_BYTES:
        return 0
    return int(max(1, min(S - 1, LINE_BLOCK_BYTES // per_draw)))
