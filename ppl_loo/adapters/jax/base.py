"""``PosteriorModel``: the base class of the adapters that turn a model into a :class:`~ppl_loo.model.Model`.

Everything the LOO engine needs from a model, in the unconstrained space. A model supplies
*per-draw* JAX functions (``logp``, ``loglik``); the batched methods used by the engine
(``log_density``, ``log_lik``, gradients, line evaluations) are derived from them with
``jax.vmap`` and ``jax.jit`` here, once, and may be overridden by models that know a faster way
(for example a linear predictor, see :class:`GLMStructure`).

Backends that cannot be traced by JAX (Stan) override the batched methods directly and set
``is_jax = False``; the engine then uses the first-order Jacobian (Eq. 22) and batched callbacks.
"""

from __future__ import annotations

from functools import cached_property

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.build import Compiled
from ppl_loo.numerics.glm_lines import draw_batch
from ppl_loo.numerics.nuts import nuts_draws

__all__ = ["PosteriorModel", "HOST_METHODS"]

#: the methods that hand arrays to the caller: they run in float64 (:func:`ppl_loo.jax_settings.x64`)
#: whoever calls them, as the entry points do, without changing the caller's own JAX setting
HOST_METHODS = ("unconstrain", "constrain", "log_density", "log_density_and_grad", "log_lik", "line_cache",
                "predicted_probability", "refit_draws")


def _host_in_x64(cls):
    """Wrap the :data:`HOST_METHODS` that ``cls`` defines itself in :func:`ppl_loo.jax_settings.uses_x64`."""
    for name in HOST_METHODS:
        fn = cls.__dict__.get(name)
        if callable(fn) and not getattr(fn, "runs_in_x64", False):
            wrapped = uses_x64(fn)
            wrapped.runs_in_x64 = True
            setattr(cls, name, wrapped)


class PosteriorModel:
    """Base class of every model adapter.

    Subclasses set ``dim`` (unconstrained dimension), ``n_obs``, ``obs_dims`` / ``obs_shape``
    (the observation dims of the log-likelihood variable), ``var_name``, and implement

    - ``logp(theta) -> scalar``: unnormalized log posterior of one unconstrained draw ``theta``
      (shape ``(dim,)``), log-Jacobian of the constraining transforms included;
    - ``loglik(theta) -> (n_obs,)``: pointwise log-likelihood of one draw;
    - ``unconstrain(posterior) -> (S, dim)`` and ``constrain(theta) -> dict``.

    Optional:

    - ``loo_logp(theta, i)``: exact log posterior without observation ``i`` for models whose
      likelihood does not factorize (default ``logp - loglik_i``);
    - ``log_var_target(theta, i)``: log of the target ``f`` of variance descent (Eq. 19); default
      ``None`` means ``f = 1``; Bernoulli models use the complement probability (paper, S.9);
      an adapter that wraps a user function may set ``var_target_fn`` instead of overriding it;
    - ``structure``: a :class:`GLMStructure` or :class:`ReluStructure`;
    - ``adapt_index``: indices of ``theta`` the transformations act on (default: all). The
      other coordinates of each draw are held fixed; the Jacobian is block-triangular so only this
      block enters the determinant (notes 8.14).

    Optional metadata, used when writing DataTrees (``ppl_loo.sampling.sample_nuts``):

    - ``param_names``: names of the constrained variables, in the order of ``theta``;
    - ``param_dims``: ``name -> tuple of dim names`` (without ``chain``/``draw``);
    - ``coords``: coordinate values of those dims and of ``obs_dims``;
    - ``observed``: the observed data, shape ``obs_shape`` (group ``observed_data``).
    """

    dim: int
    n_obs: int
    var_name: str = "y"
    obs_dims: tuple = ("obs_dim_0",)
    obs_shape: tuple = ()
    is_jax: bool = True
    structure = None
    adapt_index = None
    factorizes: bool = True
    param_names: tuple | None = None
    param_dims: dict | None = None
    coords: dict | None = None
    observed = None
    #: optional ``(theta, i) -> log f_i`` at one unconstrained draw, for adapters whose variance-descent
    #: target is a function given by the user (see :meth:`log_var_target`)
    var_target_fn = None
    #: backends that call host code from JAX (``pure_callback``) store the exception raised there, so
    #: that the workflow re-raises it as itself instead of a ``JaxRuntimeError`` (:meth:`take_callback_error`)
    last_callback_error: BaseException | None = None
    #: whether the host callbacks stop at Ctrl-C: they check ``cancel_requested`` (set by
    #: :meth:`request_cancel`, the protocol's ``Model.cancel``) between short chunks of native calls
    cancellable: bool = False
    cancel_requested: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _host_in_x64(cls)

    def __getstate__(self):
        """Pickled (cloudpickle: dask workers) without its compiled programs and the last host error; the
        unpickled adapter compiles its own on first use."""
        return {k: v for k, v in vars(self).items() if k not in ("compiled_programs", "last_callback_error")}

    @cached_property
    def compiled_programs(self) -> Compiled:
        """The programs the algorithms compile for this model (``Model.compiled``: the search, samplers), kept
        with the adapter so that every later call with it reuses them, and released with it."""
        return Compiled()

    def take_callback_error(self):
        """The exception raised in this model's last failed host callback, forgotten as it is returned (None if
        there was none)."""
        err, self.last_callback_error = self.last_callback_error, None
        return err

    def request_cancel(self, flag: bool = True):
        """Ask the host callbacks to stop at their next chunk (``True``), or clear that request (``False``)."""
        self.cancel_requested = bool(flag)

    # ------------------------------------------------------------------ per-draw (JAX) API
    def logp(self, theta):  # pragma: no cover - abstract
        raise NotImplementedError

    def loglik(self, theta):  # pragma: no cover - abstract
        raise NotImplementedError

    def loglik_i(self, theta, i):
        """Log-likelihood of observation ``i`` (flat index) at one draw."""
        return self.loglik(theta)[i]

    def loo_logp(self, theta, i):
        """Unnormalized log posterior without observation ``i`` at one draw."""
        return self.logp(theta) - self.loglik_i(theta, i)

    def log_prior(self, theta):
        """Log prior density at one unconstrained draw, log-Jacobian included (``logp - sum(loglik)``)."""
        return self.logp(theta) - jnp.sum(self.loglik(theta))

    def log_var_target(self, theta, i):
        """Log of the variance-descent target ``f_i`` (Eq. 19); ``None`` means ``f = 1``.

        This default gives ``var_target_fn(theta, i)``, or ``None`` when the adapter has none.
        """
        if self.var_target_fn is None:
            return None
        return self.var_target_fn(theta, i)

    @property
    def has_var_target(self):
        """True when :meth:`log_var_target` gives a target: ``var_target_fn`` is set, or a subclass
        overrides the method."""
        if self.var_target_fn is not None:
            return True
        return type(self).log_var_target is not PosteriorModel.log_var_target

    # ------------------------------------------------------------------ exact LOO by refitting
    def refit_draws(self, i, *, chains, warmup, draws, random_seed, init, target_accept=0.8, max_tree_depth=10):
        """MCMC draws of the posterior without observation ``i`` (exact LOO by refitting).

        This default runs NumPyro's NUTS on :meth:`loo_logp` in the unconstrained space, each chain
        started at ``init`` (draws of the full-data posterior). Backends with a sampler of their
        own (PyMC, Stan) override it.

        Returns
        -------
        (draws, info)
            ``(chains, draws, dim)`` unconstrained draws and a dict (``sampler``, ``divergences``).
        """
        out, div = nuts_draws(lambda th: self.loo_logp(th, int(i)), init, num_warmup=warmup, num_samples=draws,
                              random_seed=random_seed, target_accept=target_accept, max_tree_depth=max_tree_depth)
        return out, {"sampler": "NumPyro NUTS on the log density without the observation",
                     "divergences": int(div.sum())}

    # ------------------------------------------------------------------ constrained space
    def unconstrain(self, posterior) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def constrain(self, theta) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ batched API
    @cached_property
    def _batched(self):
        n = int(getattr(self, "n_obs", 1) or 1)

        def over_draws(f):  # all draws at once (vmap) for small problems, in batches of draws above the
            # budget of numerics.glm_lines.draw_batch, so that no (S, n) intermediates are held at large n
            def g(theta):
                k = draw_batch(theta.shape[0], n)
                return jax.vmap(f)(theta) if k == 0 else jax.lax.map(f, theta, batch_size=k)
            return jax.jit(g)

        return over_draws(self.logp), over_draws(self.loglik), over_draws(jax.value_and_grad(self.logp))

    def log_density(self, theta):
        """Unnormalized log posterior, shape ``(S,)``."""
        return self._batched[0](jnp.asarray(theta))

    def log_lik(self, theta, obs=None):
        """Pointwise log-likelihood, shape ``(S, n_obs)`` or ``(S, len(obs))``."""
        ll = self._batched[1](jnp.asarray(theta))
        return ll if obs is None else ll[:, jnp.asarray(obs)]

    def log_density_and_grad(self, theta):
        """Value ``(S,)`` and gradient ``(S, dim)`` of the log posterior in one call."""
        return self._batched[2](jnp.asarray(theta))

    # ------------------------------------------------------------------ line evaluations
    def line_cache(self, theta):
        """Per-draw quantities that every :meth:`line_eval` call can reuse (a pytree, or None).

        Computed once per LOO run on the ``(S, d)`` draws and passed to the jit-compiled search as
        an argument (for example the linear predictor at the draws).
        """
        return None

    def line_eval(self, cache, theta, delta, ts, i):
        """``(log p~(theta + t delta), log l_i(theta + t delta))`` for every ``t``: two ``(T, S)`` arrays.

        ``delta`` is an ``(S, dim)`` array, a low-rank ``coef @ basis``
        (:class:`ppl_loo.numerics.transforms.LowRank`) or a diagonal affine field
        ``shift + slope * theta`` (:class:`ppl_loo.numerics.transforms.DiagAffine`); ``delta.dense(theta)``
        gives the array.

        ``log l_i`` is ``logp - loo_logp`` for models that do not factorize. This is the inner loop
        of the adaptive search; models with a linear predictor override it (and
        :meth:`line_cache`) to avoid re-evaluating the full model for every step.
        """
        ts = jnp.asarray(ts)
        if hasattr(delta, "dense"):  # LowRank / DiagAffine of ppl_loo.numerics.transforms
            delta = delta.dense(theta)

        def both(th):
            lp = self.logp(th)
            if self.factorizes:
                return lp, self.loglik_i(th, i)
            return lp, lp - self.loo_logp(th, i)

        f = jax.vmap(both)
        return jax.vmap(lambda t: f(theta + t * delta))(ts)

    # a function of logp and loglik_i (loo_logp) only: ppl_loo.model.fingerprint may stand for the search's program
    line_eval.generic_line_eval = True

    def logp_line(self, theta, delta, ts, i=None):
        """Log density at ``theta + t * delta`` for every ``t`` in ``ts``: shape ``(T, S)``.

        With ``i`` given, the exact LOO log density (``loo_logp``) is returned instead. This is
        the inner loop of the adaptive search: models with a linear predictor override it.
        """
        ts = jnp.asarray(ts)
        if i is None:
            f = jax.vmap(self.logp)
        else:
            f = jax.vmap(lambda th: self.loo_logp(th, i))
        return jax.vmap(lambda t: f(theta + t * delta))(ts)


_host_in_x64(PosteriorModel)
