"""The importance-sampling transformations T_i(theta) = theta + t * Delta_i(theta).

Every transformation of the papers, and the project's own, is written as a *line* through each
draw: ``phi(t) = theta + t * delta`` where ``delta`` (shape ``(S, d_b)``, on the adapted block
of the parameters) does not depend on the step ``t``. The step grid is ``t = hbar``:

- PMM1, PMM2 (Chang et al. v3 Eq. 15; Paananen et al. 2021 MM1/MM2 at hbar = 1): ``hbar`` multiplies ``Q``
  directly (notes, item 8.6);
- MM3, the full-covariance map of Paananen et al. (``L_w L^-1``), at hbar = 1 only;
- KL descent (Eq. 18), variance descent (Eq. 19) and log-likelihood descent (Elvira et al.
  2022): ``delta = c Q`` with the step rule of Eq. 21, ``c = 1 / max_{s,a} |Q_sa / sd_a|``, so
  that ``t = hbar`` moves a draw at most ``hbar`` posterior standard deviations;
- ``newton`` (this project): the affine map that sends a Gaussian approximation of the
  posterior to the Gaussian approximation of the LOO posterior obtained by one Newton step on
  ``log p(theta | D) - log l_i(theta)``, built from the expected gradient and Hessian of the
  observation's log-likelihood. It is exact for Gaussian models (linear regression with known
  noise); ``t < 1`` damps it.

The Jacobian determinant of each map is returned for every ``t`` together with its sign: a
signed determinant ``<= 0`` means the map is not invertible at that draw (notes 4, pitfall 1).

All functions here are pure and jit-able; the model enters only through per-draw JAX functions
passed in by the adaptive search, :mod:`ppl_loo.numerics.loo`.

Papers: "Chang et al. 2024" is Chang, Li, Xu, Yao, Porcino and Chow, "Gradient-flow adaptive importance
sampling for Bayesian leave one out cross-validation with application to sigmoidal classification models"
(arXiv:2402.08151, with its supplement: equations ``S.N``); "Chang et al. v3" is its revision, "Perturbative
partial moment matching and gradient-flow adaptive importance sampling transformations for Bayesian leave one
out cross-validation" (arXiv:2402.08151v3), whose numbering a bare "Eq. N" follows.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ppl_loo.numerics.moments import weighted_mean

__all__ = [
    "Proposal",
    "LowRank",
    "DiagAffine",
    "dense",
    "ObsContext",
    "not_applicable",
    "pmm1",
    "pmm2",
    "mm3",
    "gradient_direction",
    "newton",
    "gaussian_newton",
    "diag_affine",
    "step_scale",
    "logdet_exact",
    "logdet_first_order",
]


class ObsContext(NamedTuple):
    """Quantities of one observation ``i`` at the original draws (block coordinates ``_b``).

    ``centred`` and ``centred_sq`` (``theta_b - mean_b`` and its square) are per-run constants that
    the engine computes once; when absent they are formed here.
    """

    theta_b: jnp.ndarray  # (S, d_b) adapted block of the draws
    lw_raw: jnp.ndarray  # (S,) normalized raw log weights of plain IS (Eq. 6 / Eq. 13)
    mean_b: jnp.ndarray  # (d_b,)
    sd_b: jnp.ndarray  # (d_b,)
    centred: jnp.ndarray = None  # (S, d_b)
    centred_sq: jnp.ndarray = None  # (S, d_b)

    def z(self):
        return self.theta_b - self.mean_b if self.centred is None else self.centred

    def z2(self):
        return jnp.square(self.z()) if self.centred_sq is None else self.centred_sq


class LowRank(NamedTuple):
    """A displacement field ``delta = coef @ basis`` of low rank ``r`` (shape ``(S, d)``).

    The moment-matching shift, the gradient flows of GLMs (every draw moves along the design row)
    and the Newton step all have this form; a model with a linear predictor then evaluates the
    line ``theta + t delta`` in ``O(S n r)`` instead of ``O(S n d)``
    (:meth:`ppl_loo.adapters.jax.base.PosteriorModel.line_eval`).
    """

    coef: jnp.ndarray  # (S, r)
    basis: jnp.ndarray  # (r, d)

    def dense(self, theta=None):
        return self.coef @ self.basis


class DiagAffine(NamedTuple):
    """A displacement field ``delta = shift + slope * theta`` (componentwise; shape ``(S, d)``).

    The images ``phi = theta + t delta`` of a diagonal affine map (PMM2/MM2, iterated moment
    matching) are never formed: a model with a linear predictor evaluates the line from
    ``theta @ (slope * X)^T`` and per-run sums, and the weighted moments of the images follow from
    those of the draws (:meth:`ppl_loo.adapters.jax.base.PosteriorModel.line_eval`).
    """

    shift: jnp.ndarray  # (d,)
    slope: jnp.ndarray  # (d,)

    def dense(self, theta):
        return self.shift + self.slope * theta


def dense(delta, theta=None):
    """``delta`` as an ``(S, d)`` array: dense, :class:`LowRank` or :class:`DiagAffine` (needs ``theta``)."""
    if isinstance(delta, DiagAffine):
        if theta is None:
            raise ValueError("a DiagAffine displacement needs the draws theta to be made dense")
        return delta.dense(theta)
    return delta.dense() if isinstance(delta, LowRank) else delta


class Proposal(NamedTuple):
    """A family of maps ``phi(t) = theta + t * delta`` with its Jacobian determinants."""

    delta: object  # (S, d_b) array or LowRank
    logdet: jnp.ndarray  # (T, S) log|det J(t)|
    ok: jnp.ndarray  # (T, S) signed det > 0 (map locally invertible)
    applicable: jnp.ndarray  # () bool: False when the transformation cannot be built
    inverse: object = None  # affine maps: t -> T_t^{-1}(theta_b) - theta_b (array or LowRank); mixtures


def not_applicable(ctx, ts):
    """A proposal that cannot be built for these shapes (decided at trace time: never evaluated)."""
    zeros = jnp.zeros((ts.shape[0], ctx.theta_b.shape[0]))
    return Proposal(jnp.zeros_like(ctx.theta_b), zeros, jnp.ones_like(zeros, bool), False)


def _const_logdet(logdet_t, S):
    """Broadcast a per-``t`` constant log-determinant to ``(T, S)``."""
    return jnp.broadcast_to(logdet_t[:, None], (logdet_t.shape[0], S))


# ----------------------------------------------------------------------------- moment matching
def pmm1(ctx: ObsContext, ts) -> Proposal:
    """PMM1 (Chang et al. v3 Eq. 15): ``T(theta) = theta + hbar (theta_bar_w - theta_bar)``; Jacobian 1."""
    S = ctx.theta_b.shape[0]
    shift = weighted_mean(ctx.theta_b, ctx.lw_raw) - ctx.mean_b
    ones = jnp.ones((S, 1), dtype=ctx.theta_b.dtype)
    delta = LowRank(ones, shift[None, :])
    logdet = jnp.zeros((ts.shape[0], S))

    def inverse(t):
        return LowRank(-t * ones, shift[None, :])

    return Proposal(delta, logdet, jnp.ones_like(logdet, bool), jnp.asarray(True), inverse)


def pmm2(ctx: ObsContext, ts) -> Proposal:
    """PMM2 (Chang et al. v3 Eq. 15): ``theta + hbar (v_w^1/2 v^-1/2 (theta - theta_bar) + theta_bar_w - theta)``.

    ``v`` and ``v_w`` are the plain and weighted componentwise variances about the plain mean
    (Paananen's T2). Jacobian ``prod_a |1 + hbar (r_a - 1)|`` with ``r = sqrt(v_w / v)``,
    constant over draws.
    """
    S = ctx.theta_b.shape[0]
    v = jnp.mean(ctx.z2(), axis=0)
    v_w = jnp.exp(ctx.lw_raw) @ ctx.z2()  # weighted variance about the plain mean (Paananen's T2)
    r = jnp.where(v > 0, jnp.sqrt(v_w / jnp.where(v > 0, v, 1.0)), 1.0)
    shift = jnp.exp(ctx.lw_raw) @ ctx.z()  # theta_bar_w - theta_bar
    # delta = (r - 1)(theta - theta_bar) + shift, a diagonal affine field
    delta = DiagAffine(shift - (r - 1.0) * ctx.mean_b, r - 1.0)
    factors = 1.0 + ts[:, None] * (r - 1.0)  # (T, d_b)
    logdet_t = jnp.sum(jnp.log(jnp.abs(factors)), axis=1)
    ok_t = jnp.all(factors > 0, axis=1)

    def inverse(t):
        # T_t^-1(theta) = theta_bar + (theta - theta_bar - t shift) / f, f = 1 + t (r - 1)
        f = 1.0 + t * (r - 1.0)
        return DiagAffine(ctx.mean_b - (ctx.mean_b + t * shift) / f, 1.0 / f - 1.0)

    return Proposal(delta, _const_logdet(logdet_t, S), jnp.broadcast_to(ok_t[:, None], (ts.shape[0], S)),
                    jnp.asarray(True), inverse)


def mm3(ctx: ObsContext, ts) -> Proposal:
    """MM3 of Paananen et al. (2021): ``L_w L^-1 (theta - theta_bar) + theta_bar_w`` (full covariance).

    ``L`` and ``L_w`` are Cholesky factors of the sample covariance and of the weighted covariance
    (about the weighted mean, as R ``loo``). The map needs a full-rank covariance estimate: it is
    reported as not applicable when there are fewer than ``2 d_b`` draws.
    """
    S, d = ctx.theta_b.shape
    if S < 2 * d:  # static shapes: decided at trace time, no d x d work is done
        return not_applicable(ctx, ts)
    centred = ctx.theta_b - ctx.mean_b
    cov = centred.T @ centred / (S - 1)
    mean_w = weighted_mean(ctx.theta_b, ctx.lw_raw)
    cw = ctx.theta_b - mean_w
    w = jnp.exp(ctx.lw_raw)
    cov_w = (cw * w[:, None]).T @ cw / (1.0 - jnp.sum(w * w))
    L = jnp.linalg.cholesky(cov)
    Lw = jnp.linalg.cholesky(cov_w)
    A = Lw @ jax.scipy.linalg.solve_triangular(L, jnp.eye(d), lower=True)
    delta = centred @ (A - jnp.eye(d)).T + (mean_w - ctx.mean_b)
    M = A - jnp.eye(d)
    sign, logdet_t = jax.vmap(lambda t: jnp.linalg.slogdet(jnp.eye(d) + t * M))(ts)
    applicable = jnp.all(jnp.isfinite(A))
    delta = jnp.where(applicable, delta, 0.0)
    shift = mean_w - ctx.mean_b

    def inverse(t):
        rhs = centred - t * shift
        return jnp.linalg.solve(jnp.eye(d) + t * M, rhs.T).T - centred

    return Proposal(delta, _const_logdet(logdet_t, S), jnp.broadcast_to((sign > 0)[:, None], (ts.shape[0], S)),
                    applicable, inverse)


# ----------------------------------------------------------------------------- gradient flows
def step_scale(log_abs_a, v, sd_b):
    """Eq. 21 in log space: ``c = 1 / max_{s,a} |a_s v_sa| / sd_a`` for ``Q_s = a_s v_s``.

    ``log_abs_a`` has shape ``(S,)`` (already shifted by its maximum), ``v`` shape ``(S, d_b)``.
    Returns ``log c``. Components with zero posterior sd are ignored (they cannot move).
    """
    sd_safe = jnp.where(sd_b > 0, sd_b, jnp.inf)
    log_ratio = log_abs_a[:, None] + jnp.log(jnp.abs(v) + 1e-300) - jnp.log(sd_safe)
    return -jnp.max(log_ratio)


def gradient_direction(kind, logp0, ll0, grad_ll_b, log_target=None, grad_log_target_b=None):
    """Scalar field ``a_s`` (log-abs, sign) and vector field ``v_s`` with ``Q_s = a_s v_s``.

    - ``"kl"`` (Eq. 18): ``Q = pi(theta|D) grad(1/l_i) = -(p~/l_i) grad log l_i``;
    - ``"var"`` (Eq. 19): ``Q = p~ (f/l_i) grad(f/l_i) = p~ (f/l_i)^2 grad log(f/l_i)``, with
      ``f`` the variance target (``log_target``; ``None`` means ``f = 1``);
    - ``"ll"`` (Elvira et al.): ``Q = -grad log l_i``.

    ``p~`` is the unnormalized posterior: its constant drops out of the Eq. 21 step (notes 3.3).
    Returns ``(log_abs_a shifted by its max, sign_a, v, shift)``; the same ``shift`` must be used
    wherever ``Q`` is recomputed (the Jacobian), so that ``h Q`` is scale-free (notes 4, pitfall 4).
    """
    if kind == "kl":
        log_a = logp0 - ll0
        sign = -jnp.ones_like(ll0)
        v = grad_ll_b
    elif kind == "var":
        if log_target is None:
            g, grad_g = -ll0, -grad_ll_b
        else:
            g, grad_g = log_target - ll0, grad_log_target_b - grad_ll_b
        log_a = logp0 + 2.0 * g
        sign = jnp.ones_like(ll0)
        v = grad_g
    elif kind == "ll":
        log_a = jnp.zeros_like(ll0)
        sign = -jnp.ones_like(ll0)
        v = grad_ll_b
    else:  # pragma: no cover - guarded by the caller
        raise ValueError(kind)
    finite = jnp.isfinite(log_a)
    log_a = jnp.where(finite, log_a, -jnp.inf)
    shift = jnp.max(log_a)
    return log_a - shift, sign, v, shift


def logdet_exact(jac, ts):
    """``log|det(I + t M)|`` and its sign for every ``t``; ``jac`` has shape ``(S, d, d)``."""
    d = jac.shape[-1]
    eye = jnp.eye(d)

    def one_t(t):
        return jnp.linalg.slogdet(eye + t * jac)

    sign, logdet = jax.vmap(one_t)(ts)
    return logdet, sign > 0


def logdet_first_order(trace, ts):
    """First-order Jacobian (Eq. 22): ``|1 + t tr(grad Q)|``; ``trace`` has shape ``(S,)``."""
    val = 1.0 + ts[:, None] * trace[None, :]
    return jnp.log(jnp.abs(val)), val > 0


# ----------------------------------------------------------------------------- Newton step
def newton(ctx: ObsContext, ts, g_bar, V, D) -> Proposal:
    """Newton-step (Laplace) proposal for the LOO posterior (this project's extension).

    The posterior is summarized by the draws' mean ``m`` and covariance ``Sigma``; the expected
    log-likelihood Hessian of observation ``i`` is ``H = V diag(D) V^T`` (``V``: ``(d_b, q)``,
    usually ``q = 1`` for a GLM) and its expected gradient is ``g_bar``. The map is
    :func:`gaussian_newton` with ``Sigma V`` and ``Sigma g_bar`` from the draws (``Sigma`` is never
    formed: ``O(S d_b q)``).
    """
    S = ctx.theta_b.shape[0]
    Z = ctx.z()
    U = Z.T @ (Z @ V) / (S - 1)  # Sigma V, (d_b, q)
    sigma_g = Z.T @ (Z @ g_bar) / (S - 1)
    return gaussian_newton(Z, ts, g_bar, V, D, U, sigma_g)


def gaussian_newton(Z, ts, g_bar, V, D, U, sigma_g) -> Proposal:
    """The affine map sending ``N(m, Sigma)`` to the Newton-step LOO Gaussian ``N(m_-i, Sigma_-i)``.

    ``Z = theta - m`` (``(S, d_b)``), ``H = V diag(D) V^T`` the Hessian of ``log l_i`` and ``g_bar``
    its gradient (expected over the draws, or at the mode for the Laplace cavity), ``U = Sigma V``
    and ``sigma_g = Sigma g_bar``. The LOO posterior ``log p - log l_i`` has precision
    ``Sigma^-1 + H`` (Woodbury: ``Sigma_-i = Sigma + U N U^T``, ``N = -(I + D G)^-1 D``,
    ``G = V^T U``) and mean ``m_-i = m - Sigma_-i g_bar`` (one Newton step from ``m``). The map
    ``T(theta) = m_-i + A (theta - m)`` with ``A = I + U C V^T``, ``C`` symmetric solving
    ``2C + C G C = N``, sends ``N(m, Sigma)`` to ``N(m_-i, Sigma_-i)`` exactly, and costs
    ``O(S d_b q)``. ``det A = det(I + C G)``. It is exact for Gaussian models (linear regression
    with known noise); ``t < 1`` damps it.
    """
    S = Z.shape[0]
    ZV = Z @ V  # (S, q)
    G = V.T @ U  # (q, q)
    G = 0.5 * (G + G.T)
    q = G.shape[0]
    Iq = jnp.eye(q)
    N = -jnp.linalg.solve(Iq + D[:, None] * G, jnp.diag(D))
    N = 0.5 * (N + N.T)
    # symmetric C with 2C + C G C = N via Y = G^1/2 C G^1/2, (Y + I)^2 = I + G^1/2 N G^1/2
    eg, Eg = jnp.linalg.eigh(G)
    eg_pos = jnp.maximum(eg, 1e-300)
    G_half = (Eg * jnp.sqrt(eg_pos)) @ Eg.T
    G_mhalf = (Eg * jnp.where(eg > 1e-12 * jnp.max(jnp.abs(eg)), 1.0 / jnp.sqrt(eg_pos), 0.0)) @ Eg.T
    K = G_half @ N @ G_half
    ek, Ek = jnp.linalg.eigh(Iq + 0.5 * (K + K.T))
    applicable = jnp.all(ek > 0) & jnp.all(jnp.isfinite(ek))
    Y = (Ek * jnp.sqrt(jnp.maximum(ek, 1e-12))) @ Ek.T - Iq
    C = G_mhalf @ Y @ G_mhalf
    # mean shift: Sigma_-i g = Sigma g + U N U^T g
    dm = -(sigma_g + U @ (N @ (U.T @ g_bar)))
    # rows: dm + U C V^T z_s, i.e. coef = [1, Z V C^T], basis = [dm; U^T]
    ones = jnp.ones((S, 1), dtype=Z.dtype)
    basis = jnp.concatenate([dm[None, :], U.T], axis=0)
    coef = jnp.concatenate([ones, ZV @ C.T], axis=1)
    CG = C @ G
    sign, logdet_t = jax.vmap(lambda t: jnp.linalg.slogdet(Iq + t * CG))(ts)
    applicable = applicable & jnp.all(jnp.isfinite(basis)) & jnp.all(jnp.isfinite(coef))
    coef = jnp.where(applicable, coef, 0.0)
    delta = LowRank(coef, basis)

    def inverse(t):
        # (I + t U C V^T)^-1 y = y - t U C (I + t G C)^-1 V^T y   (Woodbury; G = V^T U), y = z - t dm,
        # so T_t^-1(theta) - theta = -t dm - t U C (I + t G C)^-1 V^T (z - t dm): rank q + 1
        y_V = ZV - t * (dm @ V)[None, :]  # (S, q) = (z - t dm)^T V
        inner = jnp.linalg.solve(Iq + t * G @ C, y_V.T)  # (q, S)
        back_coef = jnp.concatenate([-t * ones, -t * (C @ inner).T], axis=1)
        return LowRank(jnp.where(applicable, back_coef, 0.0), basis)

    return Proposal(delta, _const_logdet(logdet_t, S), jnp.broadcast_to((sign > 0)[:, None], (ts.shape[0], S)),
                    applicable, inverse)


def diag_affine(ts, S, shift, slope) -> Proposal:
    """The proposal of a componentwise affine field ``delta = shift + slope * theta``.

    ``phi(t) = theta + t delta`` has Jacobian ``prod_a |1 + t slope_a|``, constant over draws (the
    projective LOO update of a mean-field Gaussian is of this form, :mod:`ppl_loo.numerics.loo.proposals`).
    """
    factors = 1.0 + ts[:, None] * slope  # (T, d_b)
    logdet_t = jnp.sum(jnp.log(jnp.abs(factors)), axis=1)
    ok_t = jnp.all(factors > 0, axis=1)
    applicable = jnp.all(jnp.isfinite(shift)) & jnp.all(jnp.isfinite(slope))
    shift, slope = jnp.where(applicable, shift, 0.0), jnp.where(applicable, slope, 0.0)

    def inverse(t):
        f = 1.0 + t * slope  # T_t^-1(theta) = (theta - t shift) / f
        return DiagAffine(-t * shift / f, 1.0 / f - 1.0)

    return Proposal(DiagAffine(shift, slope), _const_logdet(logdet_t, S),
                    jnp.broadcast_to(ok_t[:, None], (ts.shape[0], S)), applicable, inverse)
