"""NUTS on many targets at once: every refit of one ``pl.loo(..., refit=...)`` call in one compiled program.

Target ``b`` is ``log_density(theta, obs[b])`` (the posterior without observation ``obs[b]``); each of its chains
is one lane of ``targets x chains``, and one compiled program runs them: under ``jax.vmap`` on an accelerator
(many lanes cost little more than one), and on a CPU one lane per call, as many calls at once as there are cores
(threads; no lane waits for another's longer NUTS trajectory). Each lane is warm-started at a draw of the full-data
posterior with the full-data posterior's variances as the inverse mass matrix and, where known, the full-data
fit's step size, since a LOO posterior is close to the full one; its warmup is either BlackJAX's window
adaptation (step size and mass matrix) or, for such warm starts, dual averaging of the step size alone. Then
BlackJAX's NUTS draws ``num_samples`` per lane.

Memory: the draws are ``targets x chains x num_samples x d`` float64 (the caller splits the targets into
batches that fit its budget, :func:`lanes_per_batch`); the warmup keeps no per-step history.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import prng_key

__all__ = ["batched_nuts", "lanes_per_batch", "BatchedTarget", "cpu_workers"]


class BatchedTarget(NamedTuple):
    """What the batched refits sample: ``log_density(u, i)`` in coordinates ``u`` of the sampler's choice, and the
    maps between them and the model's unconstrained ``theta`` (one draw ``(d,)`` each; None: ``u`` is ``theta``).
    A reparameterization (e.g. a non-centered horseshoe) must include its log-Jacobian in ``log_density``."""

    log_density: Callable
    to_model: Callable | None = None
    from_model: Callable | None = None
    #: how :func:`batched_nuts` runs the lanes (its ``vectorize``); True for densities evaluated on the host through
    #: callbacks (a Stan program: one host call per NUTS step for every lane, no host state shared across threads)
    vectorize: bool | None = None


def lanes_per_batch(chains, num_samples, dim, budget_bytes=2 * 1024**3):
    """How many targets one batch may hold so that its draws (float64) stay within ``budget_bytes``."""
    per_target = max(int(chains) * int(num_samples) * int(dim) * 8, 1)
    return max(1, int(budget_bytes // per_target))


def cpu_workers():
    """The CPU cores this process may use (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@uses_x64
def batched_nuts(log_density, init, obs, *, num_warmup, num_samples, random_seeds, target_accept=0.8,
                 max_tree_depth=10, inverse_mass_matrix=None, step_size=None, adaptation="window", vectorize=None,
                 workers=None, should_stop=None, programs=None):
    """NUTS on ``B`` targets with ``C`` chains each, all lanes in one compiled program.

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
        Warmup iterations and draws per chain.
    random_seeds : sequence of int, length B
        One seed per target (its result does not depend on the other targets of the batch).
    target_accept, max_tree_depth
        NUTS' target acceptance rate and the maximum number of doublings.
    inverse_mass_matrix : array (d,), optional
        The starting diagonal inverse mass matrix (default: ones), e.g. the full-data posterior's variances.
    step_size : float, optional
        The starting step size (default: ``d ** -0.25``), e.g. the full-data fit's adapted step size.
    adaptation : {"window", "step_size"}
        ``"window"``: BlackJAX's window adaptation (Stan's: step size by dual averaging, the diagonal mass matrix
        re-estimated from the warmup draws in doubling windows), for chains that start away from the target.
        ``"step_size"``: only the step size, by dual averaging (Stan's constants) towards ``target_accept``, with the
        mass matrix fixed at ``inverse_mass_matrix``: for chains warm-started at draws of a nearby posterior
        whose variances are that matrix (a LOO posterior and the full-data one), where re-estimating the mass
        matrix from a few hundred warmup draws would add noise and cost iterations.
    vectorize : bool, optional
        True: the lanes under ``jax.vmap`` (an accelerator runs them at once; every lane of a NUTS iteration waits
        for the longest trajectory among them). False: each lane its own call of one compiled program, ``workers``
        of them at a time in threads (no waiting for other lanes' trajectories, and every CPU core busy: XLA runs
        the small operations of one lane on one core). None (default): True on an accelerator, False on a CPU.
        The draws are the same either way, up to floating-point rounding.
    workers : int, optional
        Threads for ``vectorize=False`` (default: the CPU cores this process may use, :func:`cpu_workers`).
    should_stop : callable, optional
        Checked before each lane starts (``vectorize=False``): True skips the lanes not started yet and raises
        ``RuntimeError`` (Ctrl-C, :mod:`ppl_loo.workflow.loo.interrupt`).
    programs : dict, optional
        Keeps the compiled program between calls with the same ``log_density`` and settings (the batches of one
        ``pl.loo(..., refit=...)`` or ``pl.loo_kfold`` call pass the same dict): compiled once, not once per batch
        (about 2 s each for the ovarian horseshoe's refits).

    Returns
    -------
    (draws, diverging, step_sizes)
        ``(B, C, num_samples, d)`` float64 draws, ``(B, C, num_samples)`` divergence flags and the ``(B, C)``
        adapted step sizes.
    """
    if adaptation not in ("window", "step_size"):
        raise ValueError(f"adaptation={adaptation!r}: use 'window' or 'step_size'.")
    init = jnp.asarray(init, dtype=jnp.float64)
    B, C, d = init.shape
    imm = jnp.ones(d) if inverse_mass_matrix is None else jnp.asarray(inverse_mass_matrix, dtype=jnp.float64)
    eps0 = float(step_size) if step_size is not None else float(d ** -0.25)
    keys = jnp.stack([jax.random.split(prng_key(int(s)), C) for s in random_seeds])  # (B, C, 2)
    idx = jnp.broadcast_to(jnp.asarray(obs, dtype=jnp.int32)[:, None], (B, C))
    if vectorize is None:
        vectorize = jax.default_backend() != "cpu"
    args = (keys.reshape(B * C, -1), init.reshape(B * C, d), idx.reshape(B * C))
    config = (log_density, np.asarray(imm).tobytes(), eps0, float(target_accept), int(max_tree_depth),
              int(num_warmup), int(num_samples), adaptation, bool(vectorize), d)
    programs = {} if programs is None else programs
    if config not in programs:
        lane = _lane(log_density, imm, eps0, float(target_accept), int(max_tree_depth), int(num_warmup),
                     int(num_samples), adaptation)
        # one lane compiled ahead of time on a CPU (so that the threads do not each compile it); jit (which keeps
        # a program per number of lanes) under vmap
        programs[config] = (jax.jit(jax.vmap(lane)) if vectorize
                            else jax.jit(lane).lower(args[0][0], args[1][0], args[2][0]).compile())
    if vectorize:
        pos, div, eps = programs[config](*args)
    else:
        pos, div, eps = _lanes_in_threads(programs[config], args, workers or cpu_workers(), should_stop)
    return (np.asarray(pos, dtype=np.float64).reshape(B, C, int(num_samples), d),
            np.asarray(div, dtype=bool).reshape(B, C, int(num_samples)), np.asarray(eps).reshape(B, C))


def _lane(log_density, imm, eps0, target_accept, max_tree_depth, num_warmup, num_samples, adaptation):
    """One chain of one target: ``lane(key, x0, i) -> (draws, diverging, step_size)``."""
    import blackjax

    def lane(key, x0, i):
        def logdens(th):
            return log_density(th, i)

        k_warm, k_draw = jax.random.split(key)
        if adaptation == "window":
            state, params = _window_warmup(logdens, k_warm, x0, imm, eps0, target_accept, max_tree_depth, num_warmup)
        else:
            state, params = _step_size_warmup(logdens, k_warm, x0, imm, eps0, target_accept, max_tree_depth,
                                              num_warmup)
        step = blackjax.nuts(logdens, **params).step  # params: step size, mass matrix, max_num_doublings

        def one(state, k):
            state, info = step(k, state)
            return state, (state.position, info.is_divergent)

        _, (pos, div) = jax.lax.scan(one, state, jax.random.split(k_draw, num_samples))
        return pos, div, params["step_size"]

    return lane


def _window_warmup(logdens, key, x0, imm, eps0, target_accept, max_tree_depth, num_warmup):
    """BlackJAX's window adaptation from ``x0``: ``(state, params)``."""
    import blackjax
    from blackjax.adaptation.base import get_filter_adapt_info_fn

    warm = blackjax.window_adaptation(blackjax.nuts, logdens, initial_inverse_mass_matrix=imm,
                                      initial_step_size=eps0, target_acceptance_rate=target_accept,
                                      adaptation_info_fn=get_filter_adapt_info_fn(),
                                      max_num_doublings=max_tree_depth)
    (state, params), _ = warm.run(key, x0, num_steps=num_warmup)
    return state, params


def _step_size_warmup(logdens, key, x0, imm, eps0, target_accept, max_tree_depth, num_warmup):
    """``num_warmup`` NUTS iterations from ``x0`` with the mass matrix fixed at ``imm`` and the step size tuned by
    dual averaging from ``eps0`` (BlackJAX's, Stan's constants; its averaged iterate is the final step size, ``eps0``
    when ``num_warmup`` is 0): ``(state, params)``."""
    import blackjax
    from blackjax.adaptation.step_size import dual_averaging_adaptation

    da_init, da_update, da_final = dual_averaging_adaptation(target_accept)
    kernel = blackjax.nuts.build_kernel()

    def one(carry, k):
        state, da = carry
        state, info = kernel(k, state, logdens, jnp.exp(da.log_step_size), imm, max_num_doublings=max_tree_depth)
        return (state, da_update(da, info.acceptance_rate)), None

    state = blackjax.nuts.init(x0, logdens)
    eps = jnp.asarray(eps0, dtype=jnp.float64)
    if num_warmup > 0:
        (state, da), _ = jax.lax.scan(one, (state, da_init(eps0)), jax.random.split(key, num_warmup))
        eps = da_final(da)
    return state, {"step_size": eps, "inverse_mass_matrix": imm, "max_num_doublings": max_tree_depth}


def _lanes_in_threads(compiled, args, workers, should_stop):
    """Every lane its own call of the ``compiled`` lane, ``workers`` at a time: ``(pos, div, eps)`` stacked over
    the lanes."""
    keys, x0, idx = args

    def run(j):
        if should_stop is not None and should_stop():
            raise RuntimeError("batched NUTS stopped before all lanes ran (interrupted)")
        with jax.enable_x64(True):  # this thread's own setting: float64 even after the caller's x64 block ended
            return jax.device_get(compiled(keys[j], x0[j], idx[j]))

    pool = ThreadPoolExecutor(max_workers=max(1, min(int(workers), keys.shape[0])), thread_name_prefix="ppl_loo-nuts")
    try:
        out = list(pool.map(run, range(keys.shape[0])))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return tuple(np.stack([o[k] for o in out]) for k in range(3))
