"""Optimizers and learning-rate schedules for PVI: optax, plus the few settings optax lacks.

The PVI step (:func:`ppl_loo.numerics.vi.objective.build_step`) takes any ``optax.GradientTransformation``
(BlackJAX style): ``init(params) -> opt_state`` and ``update(grads, opt_state, params) ->
(updates, opt_state)``. Optax minimizes, so the step feeds it the gradient of ``-J`` and applies
``optax.apply_updates``; the run-time learning-rate scale ``Hyper.lr_scale`` multiplies the
updates (a traced scalar, so one compiled step serves several learning rates).

What this module adds to optax:

- :func:`get_optimizer`: the names accepted by :func:`ppl_loo.pvi` (``"adam"``, ``"rmsprop"``,
  ``"sgd"``) with the project's conventions: RMSProp with ``eps`` *outside* the square root,
  ``g / (sqrt(nu) + eps)`` (optax's default puts it inside), and optional global-norm clipping
  applied before the optimizer;
- :func:`step_decay`: the paper's posteriordb schedule (Lai & Yao, App. D.3), RMSProp with the
  learning rate multiplied by 0.1 from half of the iterations on, as an optax schedule.
"""

from __future__ import annotations

from collections.abc import Callable

import optax

__all__ = ["OPTIMIZERS", "get_optimizer", "step_decay"]


def _rmsprop(learning_rate, eps: float = 1e-8) -> optax.GradientTransformation:
    # the hand-written RMSProp this replaces divided by sqrt(nu) + eps: keep that (eps_in_sqrt=False)
    return optax.rmsprop(learning_rate, decay=0.9, eps=eps, eps_in_sqrt=False)


OPTIMIZERS = {"adam": optax.adam, "rmsprop": _rmsprop, "sgd": optax.sgd}


def step_decay(learning_rate: float, boundary: int, factor: float = 0.1) -> Callable:
    """``learning_rate`` before step ``boundary``, ``learning_rate * factor`` from it on (App. D.3).

    ``optax.join_schedules`` switches at ``step >= boundary``; ``optax.piecewise_constant_schedule``
    would switch one step later (``step > boundary``).
    """
    return optax.join_schedules(
        [optax.constant_schedule(learning_rate), optax.constant_schedule(learning_rate * factor)], [int(boundary)]
    )


def get_optimizer(optimizer, learning_rate, clip_norm=None) -> optax.GradientTransformation:
    """An optax transformation from a name and a learning rate (number or schedule), or itself.

    Parameters
    ----------
    optimizer : {"adam", "rmsprop", "sgd"} or optax.GradientTransformation
        A transformation is returned unchanged (``learning_rate`` and ``clip_norm`` are ignored).
    learning_rate : float or callable
        A number or an optax schedule ``step -> rate``.
    clip_norm : float, optional
        Clip the gradient to this global norm first (``optax.clip_by_global_norm``).
    """
    if isinstance(optimizer, optax.GradientTransformation):
        return optimizer
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"optimizer={optimizer!r} is not known; choose from {sorted(OPTIMIZERS)} or pass an "
            "optax.GradientTransformation."
        )
    tx = OPTIMIZERS[optimizer](learning_rate)
    if clip_norm is None:
        return tx
    return optax.chain(optax.clip_by_global_norm(clip_norm), tx)
