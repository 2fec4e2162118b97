"""The memory plan of a search, from shapes alone, before anything is compiled or run.

:func:`search_plan` reads the same per-draw byte estimates and rules that the search applies at
trace time (:mod:`ppl_loo.numerics.loo.memory`): how many draws each per-draw computation takes at
once, the transformations the search will leave out and why, and the bytes one observation's search
holds. ``pl.loo`` sizes its batch of observations by it and warns, before the search starts, about
what it leaves out.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics.loo.config import candidate_labels, split_name, steps_of
from ppl_loo.numerics.loo.context import SearchContext, block_index, line_bytes_per_draw
from ppl_loo.numerics.loo.flows import flow_by_cost, jacobian_bytes, uses_exact
from ppl_loo.numerics.loo.memory import ONE_DRAW_FACTOR, block_bytes_of, draw_block, fits_dense, fits_one_draw
from ppl_loo.numerics.loo.predictor import has_closed_form, is_glm
from ppl_loo.numerics.loo.proposals import MM3_MATRICES, NEWTON_MATRICES, newton_fits

__all__ = ["SearchPlan", "search_plan", "plan_context", "left_out_message", "gb"]

#: ``(S, d)`` float64 arrays one observation's search holds besides its blocked work (displacements,
#: gradients, the Newton map's coefficients), and ``(C, 2S)`` arrays per candidate (weights, scores)
DRAW_ARRAYS = 8
CANDIDATE_ARRAYS = 12


class SearchPlan(NamedTuple):
    """What one observation's search holds and leaves out (:func:`search_plan`)."""

    per_obs_bytes: int  # planned temporaries of one observation's search
    left_out: dict  # transformation name -> why it is not computed
    blocks: dict  # computation -> (bytes of one draw, draws per block; 0: all at once)


def gb(nbytes):
    """Bytes as a short ``"1.2 GB"`` string."""
    return f"{nbytes / 1e9:.3g} GB"


def plan_context(model, cfg, S, posterior_draws=True):
    """A :class:`~ppl_loo.numerics.loo.context.SearchContext` with abstract draws of shape ``(S, d)``,
    enough for the per-draw byte estimates (nothing is evaluated)."""
    d = int(model.dim)
    theta = jax.ShapeDtypeStruct((S, d), jnp.float64)
    block = np.arange(d) if model.adapt_index is None else np.asarray(model.adapt_index)
    return SearchContext(model, cfg, posterior_draws, None, theta, None, None, None, None, None, block,
                         block_index(model.adapt_index, d))


def _flow_plan(sc, blocks, left_out, names):
    """The autodiff flows' Jacobian blocks, or why they are left out."""
    budget = block_bytes_of(sc.cfg)
    d_b = sc.block.shape[0]
    for kind in [k for k in ("kl", "var", "ll") if k in names]:
        if not flow_by_cost(sc):
            left_out[kind] = (f"its Jacobian needs {d_b} forward-mode passes through the model per draw (more than "
                              f"flow_max_dim = {sc.cfg.flow_max_dim}); search={{'jacobian': 'first_order'}} computes "
                              "it anyway")
            continue
        steps = jnp.asarray(steps_of(kind, sc.cfg.hbar))
        one = jacobian_bytes(sc, kind, steps, uses_exact(sc))
        if not fits_one_draw(one, budget):
            left_out[kind] = (f"one draw's {d_b} x {d_b} Jacobian and its tangents need {gb(one)}, over "
                              f"{ONE_DRAW_FACTOR} x the block budget of {gb(budget)}")
            continue
        blocks[f"jacobian {kind}"] = (one, draw_block(sc.theta.shape[0], one, budget))


def _dense_plan(sc, left_out, names):
    """The ``(d_b, d_b)`` work of the Newton step and MM3, or why it is left out; its bytes."""
    d_b, budget = sc.block.shape[0], block_bytes_of(sc.cfg)
    dense = 0
    for full in names:
        base, _ = split_name(full)
        if base in ("newton", "cavity") and not (is_glm(sc.model.structure) and has_closed_form(sc.model.structure)):
            if newton_fits(sc):
                dense = max(dense, 8 * NEWTON_MATRICES * d_b * d_b)
            else:
                left_out[full] = (f"its {d_b} x {d_b} Hessian and eigendecompositions need "
                                  f"{gb(8 * NEWTON_MATRICES * d_b * d_b)} per observation")
        elif base == "mm3":
            if fits_dense(d_b, MM3_MATRICES, budget):
                dense = max(dense, 8 * MM3_MATRICES * d_b * d_b)
            else:
                left_out[full] = f"its {d_b} x {d_b} covariances need {gb(8 * MM3_MATRICES * d_b * d_b)}"
    return dense


def search_plan(model, cfg, S, posterior_draws=True, line_cache=None):
    """The :class:`SearchPlan` of ``model`` (a protocol :class:`~ppl_loo.model.Model`) with ``S`` draws.

    ``line_cache``: whether the model evaluates lines through a cache of its own (a declared
    structure; default ``model.structure is not None``), which the search never blocks by draws.
    """
    sc = plan_context(model, cfg, S, posterior_draws)
    S, d = sc.theta.shape
    names = list(cfg.transforms)
    blocks, left_out = {}, {}
    budget = block_bytes_of(cfg)
    if not has_closed_form(model.structure):
        _flow_plan(sc, blocks, left_out, names)
    dense = _dense_plan(sc, left_out, names)
    if not (model.structure is not None if line_cache is None else line_cache):
        T = max(len(steps_of(n, cfg.hbar)) for n in names)
        delta = jax.ShapeDtypeStruct((S, d), jnp.float64)
        one = line_bytes_per_draw(sc, delta, jnp.zeros((T,)))
        blocks["line"] = (one, draw_block(S, one, budget))
    held = max([one * (k or S) for one, k in blocks.values()] or [0])
    C = len(candidate_labels(cfg))
    per_obs = 8 * S * (DRAW_ARRAYS * d + 4) + held + dense + 8 * 2 * S * C * CANDIDATE_ARRAYS
    return SearchPlan(int(per_obs), left_out, blocks)


def left_out_message(plan: SearchPlan, d, S):
    """What the search leaves out and why, in words (for a warning before it starts); None if nothing."""
    if not plan.left_out:
        return None
    why = "; ".join(f"{name}: {reason}" for name, reason in plan.left_out.items())
    return (f"the adaptive search leaves out {', '.join(plan.left_out)} for this model (d = {d} parameters, "
            f"S = {S} draws, no closed-form structure): {why}. The other transformations are searched; "
            f"pass search={{'transforms': [...]}} to choose them.")
