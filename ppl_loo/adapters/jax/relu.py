"""One-hidden-layer ReLU network classifier (Chang et al. 2024, Ex. 4.1; notes, section 4).

``mu = W2 . relu(W1 [x, 1]) + b2`` with the first-layer bias as the last column of ``W1``
(notes 8.8), declared as a :class:`~ppl_loo.adapters.jax.base.ReluStructure` so that the engine can use
the exact eigen-decomposition Jacobians (Eq. 29-32 of Chang et al., arXiv:2402.08151v3).
"""

from __future__ import annotations

from math import log, pi

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.adapters.jax.base import PosteriorModel
from ppl_loo.adapters.jax.jax_model import LayoutMixin, ParameterLayout
from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.protocol import ReluStructure
from ppl_loo.numerics.data import check_binary_data
from ppl_loo.numerics.special import softplus

__all__ = ["ReluNet"]


class ReluNet(LayoutMixin, PosteriorModel):
    """Bernoulli-logit one-hidden-layer ReLU net with iid normal weights.

    Parameters
    ----------
    X : array, shape (n, p)
        Inputs (standardized); a constant-1 column is appended internally.
    y : array, shape (n,)
        Labels in {0, 1}.
    hidden : int, default 3
        Number of hidden units (the paper's ovarian net has 3).
    prior_scale : float, default 1.0
        Every weight is ``N(0, prior_scale^2)`` (the authors' Stan model uses 1).
    var_name : str, default "y"
    obs_dim : str, default "obs_id"

    Notes
    -----
    ``theta = [vec(W1) row-major (unit 0's p+1 weights first), W2 (hidden), b2]``, dimension
    ``hidden (p + 1) + hidden + 1``. Posterior variables ``W1`` (dims ``hidden``,
    ``feature_aug``; the last column is the first-layer bias), ``W2`` (``hidden``), ``b2``.
    The posterior is invariant under permutations of the hidden units and the likelihood
    under positive rescalings ``(W1_k, W2_k) -> (c W1_k, W2_k / c)``, so chains can land in
    different (equivalent) modes; that is a property of the model, not of the sampler.
    """

    @uses_x64
    def __init__(
        self,
        X,
        y,
        hidden: int = 3,
        prior_scale: float = 1.0,
        *,
        var_name: str = "y",
        obs_dim: str = "obs_id",
    ):
        X, yf = check_binary_data(X, y, "ReluNet")
        hidden = int(hidden)
        if hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {hidden}.")
        if not prior_scale > 0:
            raise ValueError(f"prior_scale must be > 0, got {prior_scale}.")
        n, p = X.shape
        self.n, self.p, self.hidden = n, p, hidden
        self.prior_scale = float(prior_scale)
        self.X = X
        self.y = yf
        Xa = np.concatenate([X, np.ones((n, 1))], axis=1)
        self.Xa = Xa
        self._Xa = jnp.asarray(Xa)
        self._sign = jnp.asarray(2.0 * yf - 1.0)
        self.layout = ParameterLayout(
            {"W1": ((hidden, p + 1), None), "W2": ((hidden,), None), "b2": ((), None)},
            {"W1": ("hidden", "feature_aug"), "W2": ("hidden",)},
        )
        self.n_obs = n
        self.var_name = str(var_name)
        self.obs_dims = (str(obs_dim),)
        self.obs_shape = (n,)
        self.observed = yf.astype(np.int64)
        self.coords = {"hidden": np.arange(hidden), "feature_aug": np.arange(p + 1)}
        nw1 = hidden * (p + 1)
        self.structure = ReluStructure(
            X=Xa,
            y=yf,
            hidden=hidden,
            w1_index=np.arange(nw1),
            w2_index=np.arange(nw1, nw1 + hidden),
            b2_index=nw1 + hidden,
        )
        self.adapt_index = None

    # ------------------------------------------------------------------ per-draw
    def _unpack(self, theta):
        h, pa = self.hidden, self.p + 1
        nw1 = h * pa
        return theta[:nw1].reshape(h, pa), theta[nw1 : nw1 + h], theta[nw1 + h]

    def linear_predictor(self, theta, Xa=None):
        """Logits ``W2 . relu(W1 [x, 1]) + b2`` of one draw, shape ``(n,)``."""
        W1, W2, b2 = self._unpack(theta)
        Xa = self._Xa if Xa is None else Xa
        return jax.nn.relu(Xa @ W1.T) @ W2 + b2

    def log_prior(self, theta):
        """Log prior: iid ``N(0, prior_scale^2)`` on every entry of ``theta``."""
        s = self.prior_scale
        return -0.5 * jnp.sum(jnp.square(theta / s)) - self.dim * (log(s) + 0.5 * log(2 * pi))

    def loglik(self, theta):
        return -softplus(-self._sign * self.linear_predictor(theta))

    def loglik_i(self, theta, i):
        mu_i = self.linear_predictor(theta, self._Xa[i][None])[0]
        return -softplus(-self._sign[i] * mu_i)

    def logp(self, theta):
        return self.log_prior(theta) + jnp.sum(self.loglik(theta))

    def log_var_target(self, theta, i):
        """Log of the complement probability ``f_i = p_i^{1-y_i} (1-p_i)^{y_i}`` (paper S.9)."""
        mu_i = self.linear_predictor(theta, self._Xa[i][None])[0]
        return -softplus(self._sign[i] * mu_i)

    # ------------------------------------------------------------------ fast line evaluation
    def line_cache(self, theta):
        """Per-run quantities for :meth:`line_eval`: the prior, ``theta^2`` and the hidden units'
        pre-activations ``W1 [x, 1]`` at every draw (shape ``(S, hidden, n)``)."""
        theta = jnp.asarray(theta)
        W1, _, _ = self._blocks(theta)
        z0 = jnp.einsum("shp,np->shn", W1, self._Xa)
        return jax.vmap(self.log_prior)(theta), jnp.square(theta), z0

    def _blocks(self, theta):
        """``(W1 (S, h, p+1), W2 (S, h), b2 (S,))`` of a batch of draws or displacements."""
        h, pa = self.hidden, self.p + 1
        nw1 = h * pa
        S = theta.shape[0]
        return theta[:, :nw1].reshape(S, h, pa), theta[:, nw1: nw1 + h], theta[:, nw1 + h]

    def line_eval(self, cache, theta, delta, ts, i):
        """Fast path of :meth:`PosteriorModel.line_eval`: one ``O(S h p n)`` product per line.

        Along ``theta + t delta`` the pre-activations are ``z0 + t dz`` with ``dz = dW1 [x, 1]``,
        computed once for every ``t``; the Gaussian prior is a quadratic in ``t``. ``delta`` may be
        dense, :class:`~ppl_loo.numerics.transforms.LowRank` or
        :class:`~ppl_loo.numerics.transforms.DiagAffine` (never formed).
        """
        a0, theta_sq, z0 = cache
        inv_var = 1.0 / self.prior_scale**2
        W1, W2, b2 = self._blocks(theta)
        h, pa = self.hidden, self.p + 1
        nw1 = h * pa
        if hasattr(delta, "slope"):  # DiagAffine: delta = shift + slope * theta
            shift, slope = delta.shift, delta.slope
            dz = (jnp.einsum("hp,np->hn", shift[:nw1].reshape(h, pa), self._Xa)[None]
                  + jnp.einsum("shp,hp,np->shn", W1, slope[:nw1].reshape(h, pa), self._Xa))
            dW2 = shift[nw1: nw1 + h][None] + slope[nw1: nw1 + h][None] * W2
            db2 = shift[nw1 + h] + slope[nw1 + h] * b2
            b1 = -inv_var * (theta @ shift + theta_sq @ slope)
            c2 = -0.5 * inv_var * (jnp.sum(shift * shift) + 2.0 * theta @ (shift * slope) + theta_sq @ (slope * slope))
        elif hasattr(delta, "coef"):  # LowRank: delta = coef @ basis
            coef, basis = delta.coef, delta.basis
            bz = jnp.einsum("rhp,np->rhn", basis[:, :nw1].reshape(-1, h, pa), self._Xa)
            dz = jnp.einsum("sr,rhn->shn", coef, bz)
            dW2 = coef @ basis[:, nw1: nw1 + h]
            db2 = coef @ basis[:, nw1 + h]
            b1 = -inv_var * jnp.sum(coef * (theta @ basis.T), axis=1)
            c2 = -0.5 * inv_var * jnp.einsum("sr,ru,su->s", coef, basis @ basis.T, coef)
        else:
            dW1, dW2, db2 = self._blocks(delta)
            dz = jnp.einsum("shp,np->shn", dW1, self._Xa)
            b1 = -inv_var * jnp.sum(theta * delta, axis=1)
            c2 = -0.5 * inv_var * jnp.sum(delta * delta, axis=1)
        t = jnp.asarray(ts)[:, None]  # (T, 1)
        t3 = t[..., None]  # (T, 1, 1)

        def logits(z0_, dz_):  # (S, h, m) pre-activations -> (T, S, m) logits
            a = jax.nn.relu(z0_[None] + t[..., None, None] * dz_[None])
            w = W2[None] + t3 * dW2[None]  # (T, S, h)
            return jnp.einsum("tshm,tsh->tsm", a, w) + (b2[None] + t * db2[None])[..., None]

        mu = logits(z0, dz)  # (T, S, n), reduced without being stored
        logp = a0[None] + b1[None] * t + c2[None] * t * t - jnp.sum(softplus(-self._sign * mu), axis=-1)
        mu_i = logits(z0[:, :, i][..., None], dz[:, :, i][..., None])[..., 0]
        return logp, -softplus(-self._sign[i] * mu_i)
