"""Optimal-subspace Laplace numerics (Faller & Martin 2025, arXiv:2502.02345; notes
``laplace-optimal-subspace.md``): the posterior precision as an operator (:mod:`.precision`), the
subspace bases and precision (:mod:`.subspace`), the comparison metrics (:mod:`.metrics`), KFAC and
exact Fisher-factor products for dense networks (:mod:`.kfac`), diagonal SWAG (:mod:`.swag`) and the
linearized predictive (:mod:`.predictive`). Pure JAX/NumPy array functions."""

from ppl_loo.numerics.laplace.kfac import (
    KFAC,
    DenseLayer,
    Taps,
    dense_apply,
    dense_forward,
    factor_diag,
    factor_gram,
    factor_mat,
    factor_operator,
    factor_rmat,
    factor_rows,
    kfac,
    layer_taps,
    mlp_init,
    mlp_layers,
    relu_net_layers,
)
from ppl_loo.numerics.laplace.metrics import (
    TraceCriterion,
    dead_fraction,
    dead_parameters,
    jacobian_rank,
    optimal_error_curve,
    relative_error,
    sigma_PX,
    sigma_X,
    trace_criterion,
)
from ppl_loo.numerics.laplace.precision import (
    LIKELIHOODS,
    FactorOperator,
    Precision,
    Woodbury,
    fisher_factor,
    ggn_precision,
    hessian_precision,
    hessian_sqrt,
    lik_hessian,
    lik_hessian_sqrt,
    output_jacobian,
    solve,
    to_dense,
    woodbury_covariance,
)
from ppl_loo.numerics.laplace.predictive import (
    Predictive,
    linearized_predictive,
    predictive_log_density,
    predictive_variance,
)
from ppl_loo.numerics.laplace.subspace import (
    METHODS,
    SubspaceInfo,
    subset_scores,
    subspace_basis,
    subspace_mode_shift,
    subspace_precision,
)
from ppl_loo.numerics.laplace.swag import swag_diagonal

__all__ = [
    "KFAC", "LIKELIHOODS", "METHODS", "DenseLayer", "FactorOperator", "Precision", "Predictive", "SubspaceInfo",
    "Taps", "TraceCriterion", "Woodbury", "dead_fraction", "dead_parameters", "dense_apply", "dense_forward",
    "factor_diag", "factor_gram", "factor_mat", "factor_operator", "factor_rmat", "factor_rows", "fisher_factor",
    "ggn_precision", "hessian_precision", "hessian_sqrt", "jacobian_rank", "kfac", "layer_taps",
    "lik_hessian", "lik_hessian_sqrt", "linearized_predictive", "mlp_init", "mlp_layers", "optimal_error_curve",
    "output_jacobian", "predictive_log_density", "predictive_variance", "relative_error", "relu_net_layers",
    "sigma_PX", "sigma_X", "solve", "subset_scores", "subspace_basis", "subspace_mode_shift",
    "subspace_precision", "swag_diagonal", "to_dense", "trace_criterion", "woodbury_covariance",
]
