"""Stochastic-gradient optimizers and learning-rate schedules as pure JAX functions.

An :class:`Optimizer` is a pair of pure functions in the style of optax / BlackJAX:

- ``init(params) -> opt_state``;
- ``update(grads, opt_state, step, lr_scale) -> (updates, opt_state)``.

``grads`` is the gradient of an objective to **maximize**; ``params + updates`` is the ascent
step. ``lr_scale`` multiplies the learning rate (a traced scalar, so one compiled step serves
several learning rates). Learning rates are numbers or schedules ``step -> rate``.

The paper's posteriordb settings (Lai & Yao, App. D.3) are ``rmsprop`` with the learning rate
multiplied by 0.1 after half of the iterations (:func:`step_decay`); the default of
:func:`ppl_loo.pvi` is ``adam``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["OPTIMIZERS", "Optimizer", "adam", "get_optimizer", "rmsprop", "sgd", "step_decay", "warmup_cosine"]


class Optimizer(NamedTuple):
    """``init(params) -> state`` and ``update(grads, state, step, lr_scale) -> (updates, state)``."""

    name: str
    init: Callable
    update: Callable


def _rate(learning_rate, step):
    return learning_rate(step) if callable(learning_rate) else learning_rate


def _clip(grads, clip_norm):
    if clip_norm is None:
        return grads
    norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree_util.tree_leaves(grads)))
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(norm, 1e-300))
    return jax.tree_util.tree_map(lambda g: g * factor, grads)


class AdamState(NamedTuple):
    mu: object
    nu: object


def adam(learning_rate=1e-2, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, clip_norm=None) -> Optimizer:
    """Adam (Kingma & Ba 2015) for gradient ascent, with optional global-norm clipping."""

    def init(params):
        z = jax.tree_util.tree_map(jnp.zeros_like, params)
        return AdamState(z, z)

    def update(grads, state, step, lr_scale=1.0):
        grads = _clip(grads, clip_norm)
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g**2, state.nu, grads)
        t = step + 1
        c1 = 1.0 - b1**t
        c2 = 1.0 - b2**t
        lr = _rate(learning_rate, step) * lr_scale
        upd = jax.tree_util.tree_map(lambda m, v: lr * (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
        return upd, AdamState(mu, nu)

    return Optimizer("adam", init, update)


def rmsprop(learning_rate=1e-3, decay: float = 0.9, eps: float = 1e-8, clip_norm=None) -> Optimizer:
    """RMSProp (Tieleman & Hinton 2012), the paper's optimizer (App. D), for gradient ascent."""

    def init(params):
        return jax.tree_util.tree_map(jnp.zeros_like, params)

    def update(grads, state, step, lr_scale=1.0):
        grads = _clip(grads, clip_norm)
        nu = jax.tree_util.tree_map(lambda v, g: decay * v + (1 - decay) * g**2, state, grads)
        lr = _rate(learning_rate, step) * lr_scale
        upd = jax.tree_util.tree_map(lambda g, v: lr * g / (jnp.sqrt(v) + eps), grads, nu)
        return upd, nu

    return Optimizer("rmsprop", init, update)


def sgd(learning_rate=1e-3, clip_norm=None) -> Optimizer:
    """Plain stochastic gradient ascent."""

    def init(params):
        return ()

    def update(grads, state, step, lr_scale=1.0):
        grads = _clip(grads, clip_norm)
        lr = _rate(learning_rate, step) * lr_scale
        return jax.tree_util.tree_map(lambda g: lr * g, grads), state

    return Optimizer("sgd", init, update)


def step_decay(learning_rate: float, boundary: int, factor: float = 0.1) -> Callable:
    """``learning_rate`` before step ``boundary``, ``learning_rate * factor`` from it on (App. D.3)."""

    def schedule(step):
        return jnp.where(step < boundary, learning_rate, learning_rate * factor)

    return schedule


def warmup_cosine(peak: float, warmup: int, total: int, end: float) -> Callable:
    """Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then cosine decay to ``end`` (App. D.2)."""

    def schedule(step):
        step = jnp.asarray(step, dtype=jnp.float64)
        warm = peak * step / max(warmup, 1)
        frac = jnp.clip((step - warmup) / max(total - warmup, 1), 0.0, 1.0)
        cos = end + 0.5 * (peak - end) * (1.0 + jnp.cos(jnp.pi * frac))
        return jnp.where(step < warmup, warm, cos)

    return schedule


OPTIMIZERS = {"adam": adam, "rmsprop": rmsprop, "sgd": sgd}


def get_optimizer(optimizer, learning_rate, clip_norm=None) -> Optimizer:
    """An :class:`Optimizer` from its name and learning rate (number or schedule), or itself."""
    if isinstance(optimizer, Optimizer):
        return optimizer
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"optimizer={optimizer!r} is not known; choose from {sorted(OPTIMIZERS)} or pass a "
            "ppl_loo.numerics.optim.Optimizer."
        )
    return OPTIMIZERS[optimizer](learning_rate, clip_norm=clip_norm)
