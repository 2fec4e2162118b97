"""The adaptive importance-sampling search (Chang et al. v3 section 3.6, "AdaptiveIS(i)").

For one observation ``i``: build every requested transformation, evaluate every step size of the
grid on all draws at once, compute the transformed weights (Eq. 10, or Eq. 13 for draws from an
approximation), Pareto-smooth them, and keep the candidate with the lowest k-hat among those whose
map is invertible at every draw. The per-observation function is jit-compiled once and mapped over
the flagged observations in vectorized chunks (``jax.lax.map(..., batch_size=...)``).

The search is a set of top-level functions over arrays and the model's functions, one idea per
module: :mod:`.config` (transformations, step grids, labels), :mod:`.context` (the draws and the
state one search reads), :mod:`.predictor` and :mod:`.flows` (gradient flows with closed-form or
autodiff Jacobians), :mod:`.proposals` (every transformation's proposal), :mod:`.weights` and
:mod:`.mm_iter` (raw weights, the deterministic mixture, PSIS scoring), :mod:`.candidates` (the
candidate table of one observation), :mod:`.checks` and :mod:`.selection` (known-answer checks,
Monte Carlo errors, the candidate reported) and :mod:`.search` (``build_engine``,
``mapped_search``). It sees a model only through the protocol :class:`ppl_loo.model.Model`
(per-draw JAX functions and the batched line evaluation), so it sits below the adapters in the
layering.
"""


from ppl_loo.numerics.loo.checks import LOG_MARKOV_ALPHA, NORMALIZER_TOL, NORMALIZER_Z, candidate_checks
from ppl_loo.numerics.loo.config import (
    MM_ITERATIONS,
    NEWTON_STEPS,
    TRANSFORM_GROUP,
    TRANSFORMS,
    EngineConfig,
    candidate_labels,
    groups_of,
    transform_group,
)
from ppl_loo.numerics.loo.context import BlockStats, EngineData, block_stats
from ppl_loo.numerics.loo.search import ObsResult, build_engine, mapped_search
from ppl_loo.numerics.loo.selection import AGREE_Z, PLAIN_LIKE_TV, PLAIN_VOUCH_K, select_candidate
from ppl_loo.numerics.loo.weights import psis_identity

__all__ = ["TRANSFORMS", "TRANSFORM_GROUP", "NEWTON_STEPS", "MM_ITERATIONS", "EngineConfig", "EngineData",
           "BlockStats", "ObsResult", "build_engine", "mapped_search", "block_stats", "candidate_labels", "groups_of",
           "transform_group", "psis_identity", "candidate_checks", "select_candidate", "AGREE_Z", "PLAIN_LIKE_TV",
           "PLAIN_VOUCH_K", "LOG_MARKOV_ALPHA", "NORMALIZER_Z", "NORMALIZER_TOL"]
