"""The mode of the posterior (eq. 3-4 of Faller & Martin, in the unconstrained space) by optax's L-BFGS.

The loop is a ``lax.while_loop`` over ``optax.lbfgs`` with its zoom line search (the recipe of the
optax documentation), stopped when the largest gradient component is below ``tol`` (relative to
``1 + |value|``), when a step no longer moves (the line search stalls at a kink of a ReLU network or
at the float64 floor), or after ``max_steps``; the number of steps and whether it converged are returned
so that the caller can report them.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu

__all__ = ["MapResult", "map_estimate"]


class MapResult(NamedTuple):
    """The mode found and how it was found."""

    theta: jnp.ndarray  # (d,)
    value: jnp.ndarray  # () the minimized function at theta (the negative log posterior)
    grad_norm: jnp.ndarray  # () max |gradient| at theta
    steps: jnp.ndarray  # () L-BFGS iterations
    converged: jnp.ndarray  # () bool: the gradient criterion was met


def map_estimate(neg_logp, theta0, *, max_steps: int = 2000, tol: float = 1e-6, memory_size: int = 20) -> MapResult:
    """Minimize ``neg_logp`` (a JAX function of ``(d,)``) from ``theta0`` with L-BFGS.

    Parameters
    ----------
    neg_logp : callable
        ``theta -> scalar``, differentiable by JAX.
    theta0 : array, shape ``(d,)``
    max_steps : int
    tol : float
        Converged when ``max |grad| <= tol * (1 + |neg_logp|)``.
    memory_size : int
        L-BFGS history.
    """
    opt = optax.lbfgs(memory_size=memory_size)
    value_and_grad = optax.value_and_grad_from_state(neg_logp)

    def crit(state):
        g = otu.tree_get(state, "grad")
        v = otu.tree_get(state, "value")
        return jnp.max(jnp.abs(g)), jnp.abs(v)

    def step(carry):
        params, state, k, _ = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=neg_logp)
        new = optax.apply_updates(params, updates)
        return new, state, k + 1, jnp.all(new == params)

    def cond(carry):
        _, state, k, stalled = carry
        gmax, v = crit(state)
        ok = jnp.isfinite(v) & (gmax <= tol * (1.0 + v))
        # stalled: the line search made no move (a kink of a ReLU network, or the float64 floor)
        return (k == 0) | ((k < max_steps) & ~ok & ~stalled & jnp.isfinite(gmax))

    @jax.jit
    def run(theta0):
        state0 = opt.init(theta0)
        theta, state, k, _ = jax.lax.while_loop(cond, step, (theta0, state0, jnp.asarray(0), jnp.asarray(False)))
        value, grad = jax.value_and_grad(neg_logp)(theta)
        gmax = jnp.max(jnp.abs(grad))
        return MapResult(theta, value, gmax, k, jnp.isfinite(value) & (gmax <= tol * (1.0 + jnp.abs(value))))

    return run(jnp.asarray(theta0))
