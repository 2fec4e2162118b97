"""Bijectors from the unconstrained space to the support of constrained parameters.

Each bijector maps an unconstrained array ``u`` to a constrained array ``x = forward(u)``,
elementwise over arbitrary leading shapes (pure ``jax.numpy``; they are traced inside
``JaxModel.logp`` and applied to whole ``(S, ...)`` draw arrays in ``unconstrain``).

``log_det_jacobian(u)`` is ``log |d forward / d u|``: elementwise (same shape as ``u``) for the
elementwise bijectors, one value per simplex (shape ``u.shape[:-1]``) for
:class:`SimplexStickBreaking`. :class:`ppl_loo.models.JaxModel` sums it over all entries.

``in_support(x)`` returns a boolean array marking constrained values whose ``inverse`` is finite;
it is what ``unconstrain`` uses to reject draws outside the support with a clear message.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ppl_loo.numerics.special import log_sigmoid

__all__ = [
    "Bijector",
    "Identity",
    "Exp",
    "LowerBound",
    "UpperBound",
    "Interval",
    "Sigmoid",
    "SimplexStickBreaking",
]


class Bijector:
    """Base class: an elementwise bijection ``R -> support``.

    Subclasses implement ``forward``, ``inverse``, ``log_det_jacobian`` and ``in_support``.
    ``unconstrained_shape(shape)`` maps the constrained shape of a parameter to the shape of its
    unconstrained block (the identity for elementwise bijectors).
    """

    support: str = "real"

    def forward(self, u):  # pragma: no cover - abstract
        raise NotImplementedError

    def inverse(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def log_det_jacobian(self, u):  # pragma: no cover - abstract
        raise NotImplementedError

    def in_support(self, x):
        """Boolean array: ``True`` where ``x`` lies strictly inside the support."""
        return jnp.isfinite(x)

    def unconstrained_shape(self, shape: tuple) -> tuple:
        """Shape of the unconstrained block of a parameter with constrained ``shape``."""
        return tuple(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(Bijector):
    """``x = u`` on the real line (log-Jacobian 0)."""

    def forward(self, u):
        return jnp.asarray(u)

    def inverse(self, x):
        return jnp.asarray(x)

    def log_det_jacobian(self, u):
        return jnp.zeros_like(jnp.asarray(u, dtype=float))


class Exp(Bijector):
    """Positive reals: ``x = exp(u)``, ``log |dx/du| = u``."""

    support = "positive"

    def forward(self, u):
        return jnp.exp(u)

    def inverse(self, x):
        return jnp.log(x)

    def log_det_jacobian(self, u):
        return jnp.asarray(u, dtype=float)

    def in_support(self, x):
        return jnp.isfinite(x) & (x > 0)


class LowerBound(Bijector):
    """``(lower, inf)``: ``x = lower + exp(u)``, ``log |dx/du| = u``."""

    support = "lower_bounded"

    def __init__(self, lower: float):
        self.lower = float(lower)

    def forward(self, u):
        return self.lower + jnp.exp(u)

    def inverse(self, x):
        return jnp.log(x - self.lower)

    def log_det_jacobian(self, u):
        return jnp.asarray(u, dtype=float)

    def in_support(self, x):
        return jnp.isfinite(x) & (x > self.lower)

    def __repr__(self) -> str:
        return f"LowerBound({self.lower!r})"


class UpperBound(Bijector):
    """``(-inf, upper)``: ``x = upper - exp(u)``, ``log |dx/du| = u``."""

    support = "upper_bounded"

    def __init__(self, upper: float):
        self.upper = float(upper)

    def forward(self, u):
        return self.upper - jnp.exp(u)

    def inverse(self, x):
        return jnp.log(self.upper - x)

    def log_det_jacobian(self, u):
        return jnp.asarray(u, dtype=float)

    def in_support(self, x):
        return jnp.isfinite(x) & (x < self.upper)

    def __repr__(self) -> str:
        return f"UpperBound({self.upper!r})"


class Interval(Bijector):
    """``(lower, upper)``: ``x = lower + (upper - lower) * sigmoid(u)``.

    ``log |dx/du| = log(upper - lower) + log sigmoid(u) + log sigmoid(-u)``, computed with
    ``log_sigmoid`` so that it stays finite for large ``|u|``.
    """

    support = "interval"

    def __init__(self, lower: float = 0.0, upper: float = 1.0):
        lower, upper = float(lower), float(upper)
        if not upper > lower:
            raise ValueError(f"Interval needs lower < upper, got lower={lower}, upper={upper}.")
        self.lower, self.upper = lower, upper

    def forward(self, u):
        return self.lower + (self.upper - self.lower) * jax.nn.sigmoid(u)

    def inverse(self, x):
        p = (x - self.lower) / (self.upper - self.lower)
        return jnp.log(p) - jnp.log1p(-p)

    def log_det_jacobian(self, u):
        return (
            jnp.log(self.upper - self.lower) + log_sigmoid(u) + log_sigmoid(-u)
        )

    def in_support(self, x):
        return jnp.isfinite(x) & (x > self.lower) & (x < self.upper)

    def __repr__(self) -> str:
        return f"Interval({self.lower!r}, {self.upper!r})"


class Sigmoid(Interval):
    """The unit interval ``(0, 1)``: ``x = sigmoid(u)``."""

    def __init__(self):
        super().__init__(0.0, 1.0)

    def __repr__(self) -> str:
        return "Sigmoid()"


class SimplexStickBreaking(Bijector):
    """Simplex of ``K`` entries from ``K - 1`` unconstrained values (Stan's stick breaking).

    ``z_k = sigmoid(u_k - log(K - k))`` (``k = 1..K-1``), ``x_k = z_k (1 - sum_{j<k} x_j)``,
    ``x_K = 1 - sum_{j<K} x_j``. The offset makes ``u = 0`` the uniform simplex. Acts on the
    last axis; ``log_det_jacobian`` has shape ``u.shape[:-1]``.
    """

    support = "simplex"

    def __init__(self, atol: float = 1e-8):
        self.atol = float(atol)

    @staticmethod
    def _offset(km1):
        return jnp.log(km1 - jnp.arange(km1, dtype=float))

    def forward(self, u):
        u = jnp.asarray(u, dtype=float)
        km1 = u.shape[-1]
        z = jax.nn.sigmoid(u - self._offset(km1))
        # remaining stick before each break: prod_{j<k} (1 - z_j)
        log_rest = jnp.cumsum(jnp.log1p(-z), axis=-1)
        rest_before = jnp.exp(jnp.concatenate([jnp.zeros_like(u[..., :1]), log_rest[..., :-1]], -1))
        x = z * rest_before
        last = jnp.exp(log_rest[..., -1:])
        return jnp.concatenate([x, last], axis=-1)

    def inverse(self, x):
        x = jnp.asarray(x, dtype=float)
        km1 = x.shape[-1] - 1
        head = x[..., :-1]
        rest_before = 1.0 - jnp.concatenate(
            [jnp.zeros_like(head[..., :1]), jnp.cumsum(head, axis=-1)[..., :-1]], -1
        )
        z = head / rest_before
        return jnp.log(z) - jnp.log1p(-z) + self._offset(km1)

    def log_det_jacobian(self, u):
        u = jnp.asarray(u, dtype=float)
        km1 = u.shape[-1]
        v = u - self._offset(km1)
        log_rest = jnp.cumsum(log_sigmoid(-v), axis=-1)
        log_rest_before = jnp.concatenate(
            [jnp.zeros_like(u[..., :1]), log_rest[..., :-1]], -1
        )
        return jnp.sum(log_sigmoid(v) + log_sigmoid(-v) + log_rest_before, -1)

    def in_support(self, x):
        x = jnp.asarray(x)
        ok = jnp.all(jnp.isfinite(x) & (x > 0), axis=-1)
        ok = ok & (jnp.abs(jnp.sum(x, axis=-1) - 1.0) <= self.atol)
        return jnp.broadcast_to(ok[..., None], x.shape)

    def unconstrained_shape(self, shape: tuple) -> tuple:
        shape = tuple(shape)
        if len(shape) == 0 or shape[-1] < 2:
            raise ValueError(f"A simplex needs a last axis of length >= 2, got shape {shape}.")
        return shape[:-1] + (shape[-1] - 1,)
