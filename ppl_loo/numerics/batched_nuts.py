"""NUTS on many targets at once: every refit of one ``pl.loo(..., refit=...)`` call in one compiled run.

Target ``b`` is ``log_density(theta, obs[b])`` (the posterior without observation ``obs[b]``); each of its chains
is one lane of ``targets x chains``, and one compiled program runs them all: under ``jax.vmap`` on an accelerator
(many lanes cost little more than one), under ``jax.lax.map`` on a CPU (one lane after the other, so no lane waits
for another's longer NUTS trajectory). Each lane runs BlackJAX's window adaptation (step size by dual averaging, a
diagonal mass matrix from the warmup draws), warm-started: it starts at a draw of the full-data posterior, with
the full-data posterior's variances as the initial inverse mass matrix and a step size to match, since a LOO
posterior is close to the full one. Then BlackJAX's NUTS draws ``num_samples`` per lane.

Memory: the draws are ``targets x chains x num_samples x d`` float64 (the caller splits the targets into
batches that fit its budget, :func:`lanes_per_batch`); the warmup keeps no per-step history.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import prng_key

__all__ = ["batched_nuts", "lanes_per_batch", "BatchedTarget"]


class BatchedTarget(NamedTuple):
    """What the batched refits sample: ``log_density(u, i)`` in coordinates ``u`` of the sampler's choice, and the
    maps between them and the model's unconstrained ``theta`` (one draw ``(d,)`` each; None: ``u`` is ``theta``).
    A reparameterization (e.g. a non-centered horseshoe) must include its log-Jacobian in ``log_density``."""

    log_density: Callable
    to_model: Callable | None = None
    from_model: Callable | None = None


def lanes_per_batch(chains, num_samples, dim, budget_bytes=2 * 1024**3):
    """How many targets one batch may hold so that its draws (float64) stay within ``budget_bytes``."""
    per_target = max(int(chains) * int(num_samples) * int(dim) * 8, 1)
    return max(1, int(budget_bytes // per_target))


@uses_x64
def batched_nuts(log_density, init, obs, *, num_warmup, num_samples, random_seeds, target_accept=0.8,
                 max_tree_depth=10, inverse_mass_matrix=None, step_size=None, vectorize=None):
    """NUTS on ``B`` targets with ``C`` chains each, all lanes in one compiled run.

    Parameters
    ----------
    log_density : callable
        ``log_density(theta, i) -> scalar``: the unnormalized log density of target ``i`` at the unconstrained
        vector ``theta`` ``(d,)`` (JAX-differentiable in ``theta``; ``i`` is traced).
    init : array, shape (B, C, d)
        The starting point of every chain (draws of the full-data posterior).
    obs : array of int, shape (B,)
        The argument ``i`` of each target.
    num_warmup, num_samples : int
        Warmup iterations (window adaptation) and draws per chain.
    random_seeds : sequence of int, length B
        One seed per target (its result does not depend on the other targets of the batch).
    target_accept, max_tree_depth
        NUTS' target acceptance rate and the maximum number of doublings.
    inverse_mass_matrix : array (d,), optional
        The starting diagonal inverse mass matrix (default: ones), e.g. the full-data posterior's variances.
    step_size : float, optional
        The starting step size (default: ``d ** -0.25``).
    vectorize : bool, optional
        True: the lanes under ``jax.vmap`` (an accelerator runs them at once; every lane of a NUTS iteration waits
        for the longest trajectory among them); False: one after the other under ``jax.lax.map`` in the same
        compiled program (no waiting: on a CPU, whose cores XLA does not spread vmapped lanes over, this is
        faster when trajectory lengths differ between lanes). None (default): True on an accelerator, False on a
        CPU. The draws are the same either way, up to floating-point rounding.

    Returns
    -------
    (draws, diverging, step_sizes)
        ``(B, C, num_samples, d)`` float64 draws, ``(B, C, num_samples)`` divergence flags and the ``(B, C)``
        adapted step sizes.
    """
    import blackjax
    from blackjax.adaptation.base import get_filter_adapt_info_fn

    init = jnp.asarray(init, dtype=jnp.float64)
    B, C, d = init.shape
    imm = jnp.ones(d) if inverse_mass_matrix is None else jnp.asarray(inverse_mass_matrix, dtype=jnp.float64)
    eps0 = float(step_size) if step_size is not None else float(d ** -0.25)
    keys = jnp.stack([jax.random.split(prng_key(int(s)), C) for s in random_seeds])  # (B, C, 2)
    idx = jnp.broadcast_to(jnp.asarray(obs, dtype=jnp.int32)[:, None], (B, C))

    def lane(key, x0, i):
        def logdens(th):
            return log_density(th, i)

        k_warm, k_draw = jax.random.split(key)
        warm = blackjax.window_adaptation(blackjax.nuts, logdens, initial_inverse_mass_matrix=imm,
                                          initial_step_size=eps0, target_acceptance_rate=float(target_accept),
                                          adaptation_info_fn=get_filter_adapt_info_fn(),
                                          max_num_doublings=int(max_tree_depth))
        (state, params), _ = warm.run(k_warm, x0, num_steps=int(num_warmup))
        step = blackjax.nuts(logdens, **params).step  # params: step size, mass matrix, max_num_doublings

        def one(state, k):
            state, info = step(k, state)
            return state, (state.position, info.is_divergent)

        _, (pos, div) = jax.lax.scan(one, state, jax.random.split(k_draw, int(num_samples)))
        return pos, div, params["step_size"]

    if vectorize is None:
        vectorize = jax.default_backend() != "cpu"
    args = (keys.reshape(B * C, -1), init.reshape(B * C, d), idx.reshape(B * C))
    if vectorize:
        pos, div, eps = jax.jit(jax.vmap(lane))(*args)
    else:
        pos, div, eps = jax.jit(lambda a: jax.lax.map(lambda x: lane(*x), a))(args)
    return (np.asarray(pos, dtype=np.float64).reshape(B, C, int(num_samples), d),
            np.asarray(div, dtype=bool).reshape(B, C, int(num_samples)), np.asarray(eps).reshape(B, C))
