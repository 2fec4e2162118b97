"""Quasi-Newton variational Bayes with Hadamard quadrature (Duersch, "Projective Integral Updates for
High-Dimensional Variational Inference"): the quadrature sequences (:mod:`.quadrature`), the
quadratic projection of a loss (:mod:`.approx`, Algorithm 2), the QNVB optimizer (:mod:`.algorithm`,
Algorithm 3) and the undamped / leave-one-out / spike-and-slab projective updates
(:mod:`.projective`). Pure JAX array functions; notes: ``notes/qnvb.md``."""

from ppl_loo.numerics.qnvb.algorithm import (
    QUADRATURES,
    QNVBConfig,
    QNVBState,
    StepInfo,
    check_config,
    gaussian_entropy,
    init,
    loss_from_logdensity,
    run,
    run_from,
    step,
)
from ppl_loo.numerics.qnvb.approx import QuadApprox, quadratic_approx, stein_approx
from ppl_loo.numerics.qnvb.projective import (
    FixedPoint,
    LooProposal,
    SpikeSlab,
    projective_fixed_point,
    projective_loo,
    spike_slab_update,
)
from ppl_loo.numerics.qnvb.quadrature import (
    antithetic_nodes,
    blocked_stochastic_nodes,
    gauss_hermite_nodes,
    hadamard_period,
    hadamard_signs,
    qmc_nodes,
    qmc_standard,
    simplex_sigma_points,
)

__all__ = [
    "QUADRATURES",
    "FixedPoint",
    "LooProposal",
    "QNVBConfig",
    "QNVBState",
    "QuadApprox",
    "SpikeSlab",
    "StepInfo",
    "antithetic_nodes",
    "blocked_stochastic_nodes",
    "check_config",
    "gauss_hermite_nodes",
    "gaussian_entropy",
    "hadamard_period",
    "hadamard_signs",
    "init",
    "loss_from_logdensity",
    "projective_fixed_point",
    "projective_loo",
    "qmc_nodes",
    "qmc_standard",
    "quadratic_approx",
    "run",
    "run_from",
    "simplex_sigma_points",
    "spike_slab_update",
    "stein_approx",
    "step",
]
