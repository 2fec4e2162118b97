"""Diagonal SWAG variances for the ``"subset-swag"`` subspace (Faller & Martin 2025, Section 5, notes A16).

SGD with momentum is run from ``theta_hat``; after every ``snapshot_freq`` epochs the iterate is a
snapshot, and the variance of parameter ``j`` is ``mean_t theta_{j,t}^2 - (mean_t theta_{j,t})^2``,
clamped below at ``min_var``. Settings of the paper (App. A, the authors' code through laplace-torch's
``fit_diagonal_swag_var``): 10 snapshots (100 for ENB), one per epoch, learning rate 0.01, momentum
0.9, weight decay 3e-4, ``min_var = 1e-30``. As there, ``theta_hat`` itself is not a snapshot, the
running moments are updated as ``m <- m t/(t+1) + theta/(t+1)``, and the weight decay is added to the
gradient before the momentum (PyTorch ``SGD``: ``optax.add_decayed_weights`` then ``optax.sgd``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

__all__ = ["swag_diagonal"]


def swag_diagonal(loss_fn, theta_map, batches, *, n_snapshots=10, snapshot_freq=1, lr=0.01, momentum=0.9,
                  weight_decay=3e-4, min_var=1e-30):
    """Diagonal SWAG variances ``(d,)`` from SGD snapshots started at ``theta_map``.

    Parameters
    ----------
    loss_fn : callable
        ``(theta (d,), batch) -> scalar``: the training criterion of one mini-batch (the mean loss,
        as PyTorch's ``MSELoss`` / ``CrossEntropyLoss``; the prior enters only as ``weight_decay``).
    theta_map : array (d,)
        The MAP ``theta_hat``, the starting point.
    batches : pytree of arrays with a leading axis ``(n_batches, ...)``
        One epoch's mini-batches, in order (the same order every epoch; a single full batch is
        ``jax.tree.map(lambda x: x[None], data)``).
    n_snapshots, snapshot_freq, lr, momentum, weight_decay, min_var
        As in laplace-torch's ``fit_diagonal_swag_var`` (module docstring).

    Returns
    -------
    array (d,)
        ``clip(E[theta^2] - E[theta]^2, min_var)`` over the snapshots.
    """
    opt = optax.chain(optax.add_decayed_weights(float(weight_decay)),
                      optax.sgd(float(lr), momentum=float(momentum) if momentum else None))
    grad = jax.grad(loss_fn)
    theta0 = jnp.asarray(theta_map)

    def sgd_step(carry, batch):
        theta, state = carry
        updates, state = opt.update(grad(theta, batch), state, theta)
        return (optax.apply_updates(theta, updates), state), None

    def epoch(carry, _):
        return jax.lax.scan(sgd_step, carry, batches)[0], None

    def snapshot(carry, t):
        theta, state, mean, sq = carry
        (theta, state), _ = jax.lax.scan(epoch, (theta, state), None, length=int(snapshot_freq))
        mean = mean * (t / (t + 1.0)) + theta / (t + 1.0)
        sq = sq * (t / (t + 1.0)) + theta**2 / (t + 1.0)
        return (theta, state, mean, sq), None

    init = (theta0, opt.init(theta0), jnp.zeros_like(theta0), jnp.zeros_like(theta0))
    run = jax.jit(lambda c: jax.lax.scan(snapshot, c, jnp.arange(int(n_snapshots), dtype=theta0.dtype))[0])
    _, _, mean, sq = run(init)
    return jnp.clip(sq - mean**2, float(min_var), None)
