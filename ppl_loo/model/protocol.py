"""The one model protocol (DESIGN.md, layer 2): :class:`Model`, a NamedTuple of pure functions.

Every algorithm of the package (the adaptive LOO search, PVI, the refits, NUTS) receives a
:class:`Model` and never the user's model object, as BlackJAX algorithms receive functions. A
backend adapter (``ppl_loo.adapters.jax``, ``ppl_loo.adapters.pymc``, ``ppl_loo.adapters.stan``) builds it once
with :func:`ppl_loo.adapters.as_model.as_model`.

Functions work in the unconstrained space, ``theta`` of shape ``(d,)`` for the per-draw ones and
``(S, d)`` for the batched ones; the log densities include the log-Jacobian of the constraining
transforms. A field a backend cannot provide is ``None`` and ``notes`` says why and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:  # the annotation only
    from ppl_loo.numerics.vi.objective import Terms

__all__ = ["Model", "Layout", "Observations", "Output", "GLMStructure", "ReluStructure"]


@dataclass(frozen=True)
class GLMStructure:
    """A Bernoulli-logit linear predictor ``mu_i = X[i] @ theta[beta_index] + offset_i``.

    ``X`` has shape ``(n, q)`` and includes the intercept column when there is one; ``beta_index``
    must equal the model's ``adapt_index`` (the block the transformations move). ``offset`` is
    ``None`` (zero) or a data offset of shape ``(n,)``. Declaring it
    lets the engine use the exact closed-form Jacobian of the gradient transformations (Eq. 28)
    and evaluate the log density along a line in ``O(S n)`` instead of ``O(S n d)``.
    """

    X: np.ndarray
    y: np.ndarray
    beta_index: np.ndarray
    family: str = "bernoulli_logit"
    offset: object = None


@dataclass(frozen=True)
class ReluStructure:
    """One-hidden-layer ReLU net ``mu = W2 . relu(W1 x) + b2`` (notes, section 4).

    ``X`` has shape ``(n, p)`` and already carries a constant-1 column for the first-layer bias.
    ``w1_index`` (``hidden * p`` entries, unit-major: unit 0's ``p`` weights first), ``w2_index``
    (``hidden``) and ``b2_index`` (1) locate the blocks in ``theta``.
    """

    X: np.ndarray
    y: np.ndarray
    hidden: int
    w1_index: np.ndarray
    w2_index: np.ndarray
    b2_index: int
    family: str = "bernoulli_logit"


class Output(NamedTuple):
    """The model's per-observation output ``f`` and the likelihood of ``y_i`` given ``f_i``: what the
    generalized Gauss-Newton curvature of a Laplace approximation needs (Faller & Martin, eq. 6-8).

    ``fn(theta (d,), X=None) -> (n, C)``: the outputs at the training inputs (``X=None``) or at new
    inputs ``X`` (rows of features, as the model was given them); ``likelihood``: ``"bernoulli"``
    (``C = 1`` logit), ``"categorical"`` (softmax logits) or ``"gaussian"`` (mean, noise sd ``sigma``).
    """

    fn: Callable
    likelihood: str
    sigma: float | None = None


class Layout(NamedTuple):
    """The parameters: unconstrained dimension, names and dims of the constrained variables, one
    label per unconstrained coordinate, and the maps between the two spaces.

    ``constrain(theta (S, d)) -> {name: (S, *shape)}``; ``unconstrain(posterior) -> (S, d)`` reads a
    posterior Dataset / DataTree / dict of ``(chain, draw, ...)`` arrays.
    """

    dim: int
    names: tuple
    dims: Mapping
    labels: tuple
    constrain: Callable
    unconstrain: Callable


class Observations(NamedTuple):
    """The scored variable: its name, dims, shape and size ``n`` (of the pointwise log-likelihood), the
    observed values as the backend holds them (``shape`` or ``shape + (k,)`` for vector outcomes, ``None``
    if unknown) and, for discrete outcomes scored by the quadratic score, the possible categories.

    ``observed_name`` is the ``observed_data`` entry when it differs from ``var_name`` (Stan); ``discrete``
    names the observed data declared discrete (a PyMC observed variable of integer dtype, a Stan program's
    ``int`` data indexed by observation); ``entries`` maps the name of each data entry indexed by
    observation (a Stan program's) to its values, for messages that name an observation's data.
    """

    var_name: str
    dims: tuple
    shape: tuple
    n: int
    observed: Any = None
    categories: Any = None
    observed_name: str | None = None
    discrete: tuple = ()
    entries: Mapping = {}  # read only


class Model(NamedTuple):
    """Everything an algorithm needs from a model (DESIGN.md, layer 2).

    Per draw (JAX, ``theta`` of shape ``(d,)``; Stan enters through ``jax.pure_callback``):

    - ``logp(theta)``: unnormalized log posterior; ``loglik(theta) -> (n,)``; ``loglik_i(theta, i)``;
    - ``loo_logp(theta, i)``: exact log posterior without observation ``i`` (data deletion where the
      likelihood does not factorize, ``factorizes = False``);
    - ``log_var_target(theta, i)``: log of the variance-descent target ``f_i`` (Eq. 19), used when
      ``has_var_target``.

    Batched (``theta`` of shape ``(S, d)``): ``log_density``, ``log_density_and_grad``,
    ``log_lik(theta, obs=None) -> (S, n)``, and the line evaluation of the adaptive search,
    ``line_cache(theta)`` and ``line_eval(cache, theta, delta, ts, i)`` (two ``(T, S)`` arrays).

    For PVI, ``terms`` (:class:`ppl_loo.numerics.vi.objective.Terms`: the differentiable per-observation
    training functions, prior and simulator included) and the evaluation functions
    ``eval_loglik``, ``eval_probs``, ``eval_predict``; they are built when asked for
    (``as_model(..., pvi=True)``).

    ``structure`` (:class:`GLMStructure`, :class:`ReluStructure` or None) and ``adapt_index`` (the
    block of ``theta`` the transformations move, None for all) let the engine use closed forms;
    ``refit_draws`` is the backend's own sampler without one observation (exact LOO by refitting).
    ``mixture_draws`` is the backend's own sampler on the mixture of all LOO posteriors,
    ``q_mix ∝ p(theta|y) sum_j 1/p(y_j|theta)`` (Silva & Zanella 2023; same signature as ``refit_draws``
    without ``i``, returning ``(theta (chains, draws, d), info)``); None: the workflow samples it with
    NumPyro's NUTS from ``logp`` and ``loglik``.
    ``output`` (:class:`Output`, from the structure where one is declared) gives the per-observation
    outputs the Gauss-Newton curvature of :func:`ppl_loo.laplace` is built on.

    What the after-LOO functions use (``params``: constrained values ``{name: (M, *shape)}``, as
    ``constrain`` gives them; each None where the model has none):

    - ``predictive_mean(params) -> (M, *obs_shape)``: ``E[y_rep_i | theta]`` (for a binary outcome, the
      predicted probability);
    - ``predicted_probability(params) -> (M, *obs_shape)``: ``p(y_i = 1 | theta)`` of a binary outcome;
    - ``pit_cdf(params)``: ``P(y_rep_i <= y_i | theta)``, for a discrete outcome the tuple with
      ``P(y_rep_i < y_i | theta)``;
    - ``discrete_outcome``: whether ``pit_cdf`` returns that tuple (None: unknown until it is called);
    - ``simulate(theta (M, d), rng) -> (M, n)``: one replicated data set ``y_rep`` per unconstrained point,
      drawn with the NumPy generator ``rng`` by the model's own sampler of its observed variable.

    ``batched_refit_density()`` gives the backend's own target for batched refits
    (:class:`ppl_loo.numerics.nuts.BatchedTarget`, or None: not batched) where it has one.
    ``log_lik_bound`` (PVI, shape ``(n,)``) is a known bound ``log C_i >= log p(y_i | theta)`` for every
    ``theta`` (0 for a discrete outcome), the rejection estimator's.

    Host code (Stan's callbacks): ``take_callback_error()`` returns the exception raised in the model's last
    failed host callback and forgets it (None if there was none), so that the workflow re-raises it as
    itself instead of a ``JaxRuntimeError``; ``cancel(flag)`` asks the host callbacks to stop at their next
    chunk (``True``) or clears that request (``False``), None where there is nothing to stop.

    ``compiled(name, key, build)`` returns the program ``build()`` kept for this model under ``(name, key)``:
    built on the first call and the same object after (the compiled search, samplers, PVI steps), shared
    by the models built from one adapter and released with it (:class:`ppl_loo.model.build.Compiled`).
    """

    kind: str
    layout: Layout
    obs: Observations
    coords: Mapping
    logp: Callable | None = None
    loglik: Callable | None = None
    loglik_i: Callable | None = None
    loo_logp: Callable | None = None
    adapt_index: np.ndarray | None = None
    log_var_target: Callable | None = None
    log_density: Callable | None = None
    log_density_and_grad: Callable | None = None
    log_lik: Callable | None = None
    notes: Mapping = {}  # read only: what a backend cannot give, and how to get it
    line_cache: Callable | None = None
    line_eval: Callable | None = None
    refit_draws: Callable | None = None
    mixture_draws: Callable | None = None
    terms: "Terms | None" = None
    eval_loglik: Callable | None = None
    eval_probs: Callable | None = None
    eval_predict: Callable | None = None
    structure: "GLMStructure | ReluStructure | None" = None
    output: Output | None = None
    factorizes: bool = True
    is_jax: bool = True
    has_var_target: bool = False
    predictive_mean: Callable | None = None
    predicted_probability: Callable | None = None
    pit_cdf: Callable | None = None
    discrete_outcome: bool | None = None
    simulate: Callable | None = None
    batched_refit_density: Callable | None = None
    log_lik_bound: np.ndarray | None = None
    take_callback_error: Callable | None = None
    cancel: Callable | None = None
    compiled: Callable | None = None

    # read-only shortcuts
    dim = property(lambda self: self.layout.dim, doc="The unconstrained dimension ``d``.")
    n_obs = property(lambda self: self.obs.n, doc="The number of observations ``n``.")
    var_name = property(lambda self: self.obs.var_name, doc="The scored (log-likelihood) variable.")
    obs_dims = property(lambda self: self.obs.dims, doc="Its dims.")
    obs_shape = property(lambda self: self.obs.shape, doc="Its shape.")

    def constrain(self, theta):
        """``layout.constrain``: constrained values ``{name: (S, *shape)}`` of ``theta`` ``(S, d)``."""
        return self.layout.constrain(theta)

    def unconstrain(self, posterior):
        """``layout.unconstrain``: the ``(S, d)`` unconstrained draws of a posterior group."""
        return self.layout.unconstrain(posterior)
