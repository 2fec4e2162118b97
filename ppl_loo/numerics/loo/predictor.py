"""The declared linear predictor of a sigmoidal model: ``mu_i`` and its gradient per draw.

A model's ``structure`` is ``None``, a GLM (``X, y, beta_index, family, offset``: ``mu_i = X[i] .
beta + offset_i``) or a one-hidden-layer ReLU net (``X, y, hidden, w1_index, w2_index, b2_index,
family``). With ``family == "bernoulli_logit"`` the gradient flows have closed-form Jacobians
(Chang et al. v3 Eq. 28 for the GLM, Eq. 29-32 for the ReLU net; :mod:`ppl_loo.numerics.structured`).
"""


import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics import structured
from ppl_loo.numerics.loo.context import SearchContext

__all__ = ["is_glm", "has_closed_form", "glm_offset", "relu_blocks", "linear_predictor"]


def is_glm(struct):
    """True for a GLM structure (it has ``beta_index``; duck-typed)."""
    return struct is not None and hasattr(struct, "beta_index")


def has_closed_form(struct):
    """True when the gradient flows have closed-form Jacobians (a Bernoulli-logit structure)."""
    return struct is not None and getattr(struct, "family", None) == "bernoulli_logit"


def glm_offset(struct, i, dtype):
    """The data offset of a GLM's linear predictor (``offset``), or 0."""
    off = getattr(struct, "offset", None)
    return 0.0 if off is None else jnp.asarray(off, dtype=dtype)[i]


def relu_blocks(theta, struct):
    """``(W1, W2, b2)`` of every draw, shapes ``(S, H, p)``, ``(S, H)``, ``(S,)``."""
    S = theta.shape[0]
    p = struct.X.shape[1]
    W1 = theta[:, np.asarray(struct.w1_index)].reshape(S, struct.hidden, p)
    W2 = theta[:, np.asarray(struct.w2_index)]
    b2 = theta[:, int(struct.b2_index)]
    return W1, W2, b2


def linear_predictor(sc: SearchContext, i):
    """Linear predictor of observation i and its gradient on the block, per draw."""
    struct = sc.model.structure
    theta_b = sc.stats.theta_b
    if is_glm(struct):
        x = jnp.asarray(struct.X)[i]
        return theta_b @ x + glm_offset(struct, i, sc.theta.dtype), jnp.broadcast_to(x, theta_b.shape)
    W1, W2, b2 = relu_blocks(sc.theta, struct)
    x = jnp.asarray(struct.X)[i]
    return structured.relu_mu(W1, W2, b2, x), structured.relu_grad_mu(W1, W2, b2, x)
