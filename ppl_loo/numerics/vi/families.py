"""Variational families: reparameterized samplers with log densities, as pure JAX functions.

A family is a :class:`Family` of pure functions over a parameter pytree ``params``; nothing is
stored in the family itself except static settings (the number of flow layers, ...). Every
family is a pushforward ``theta = T_phi(eps)`` of a standard normal ``eps ~ N(0, I_d)`` (the
reparameterization of Lai & Yao, Sec. 3, Table 1), so gradients of any Monte Carlo estimate
with respect to ``params`` flow through ``sample``. The interface is shared by predictive VI
(:mod:`ppl_loo.numerics.vi.objective`), plain VI, and later posterior approximations:

- ``init(dim, loc=None, scale=0.1) -> params``: a fresh parameter pytree (Python, not traced);
- ``sample(params, eps) -> theta``: ``eps`` of shape ``(..., d)``;
- ``sample_and_log_q(params, eps) -> (theta, log_q)``: the draws and their log density in one
  pass (no inverse needed);
- ``log_q(params, theta) -> scalar``: log density of one draw ``theta`` (``(d,)``); vmap it for
  batches;
- ``entropy(params)``: the analytic entropy, or ``None`` when the family has none (flows);
- ``marginals(params, eps) -> (mean, sd)``: marginal means and standard deviations, exact for
  the Gaussian families and the Monte Carlo estimate over ``eps`` for flows.

Families: ``meanfield`` (diagonal Gaussian), ``fullrank`` (Gaussian with a Cholesky factor)
and ``flow`` (rational-quadratic spline coupling layers, Durkan et al. 2019, followed by a
diagonal affine map; at initialization it *is* the mean-field Gaussian).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["FAMILIES", "Family", "flatten_params", "flow", "fullrank", "get_family", "meanfield"]

_LOG_2PI = math.log(2.0 * math.pi)


class Family(NamedTuple):
    """A variational family as pure functions (see the module docstring)."""

    name: str
    init: Callable
    sample: Callable
    sample_and_log_q: Callable
    log_q: Callable
    entropy: Callable | None
    marginals: Callable


def _std_normal_logpdf(eps):
    return -0.5 * jnp.sum(eps**2, axis=-1) - 0.5 * eps.shape[-1] * _LOG_2PI


def _init_loc_scale(dim, loc, scale):
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"the unconstrained dimension must be at least 1, got {dim}.")
    loc = np.zeros(dim) if loc is None else np.asarray(loc, dtype=np.float64).reshape(-1)
    if loc.shape != (dim,):
        raise ValueError(f"init loc has shape {loc.shape}; expected ({dim},).")
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), (dim,))
    if not (np.all(np.isfinite(loc)) and np.all(scale > 0) and np.all(np.isfinite(scale))):
        raise ValueError("init loc must be finite and init scale positive and finite.")
    return jnp.asarray(loc), jnp.asarray(np.log(scale))


# ----------------------------------------------------------------------------- mean field
def meanfield() -> Family:
    """Diagonal Gaussian ``theta = loc + exp(log_scale) * eps``.

    ``params = {"loc": (d,), "log_scale": (d,)}``; entropy
    ``sum(log_scale) + d/2 (1 + log 2 pi)``.
    """

    def init(dim, loc=None, scale=0.1):
        m, ls = _init_loc_scale(dim, loc, scale)
        return {"loc": m, "log_scale": ls}

    def sample(params, eps):
        return params["loc"] + jnp.exp(params["log_scale"]) * eps

    def sample_and_log_q(params, eps):
        return sample(params, eps), _std_normal_logpdf(eps) - jnp.sum(params["log_scale"])

    def log_q(params, theta):
        z = (theta - params["loc"]) * jnp.exp(-params["log_scale"])
        return _std_normal_logpdf(z) - jnp.sum(params["log_scale"])

    def entropy(params):
        d = params["loc"].shape[-1]
        return jnp.sum(params["log_scale"]) + 0.5 * d * (1.0 + _LOG_2PI)

    def marginals(params, eps=None):
        return params["loc"], jnp.exp(params["log_scale"])

    return Family("meanfield", init, sample, sample_and_log_q, log_q, entropy, marginals)


# ----------------------------------------------------------------------------- full rank
def _chol(params):
    return jnp.tril(params["off_diag"], -1) + jnp.diag(jnp.exp(params["log_diag"]))


def fullrank() -> Family:
    """Gaussian ``theta = loc + L eps`` with ``L = diag(exp(log_diag)) + tril(off_diag, -1)``.

    ``params = {"loc": (d,), "log_diag": (d,), "off_diag": (d, d)}`` (only the strictly lower
    triangle of ``off_diag`` is used); entropy ``sum(log_diag) + d/2 (1 + log 2 pi)``.
    """

    def init(dim, loc=None, scale=0.1):
        m, ls = _init_loc_scale(dim, loc, scale)
        return {"loc": m, "log_diag": ls, "off_diag": jnp.zeros((m.shape[0], m.shape[0]))}

    def sample(params, eps):
        return params["loc"] + eps @ _chol(params).T

    def sample_and_log_q(params, eps):
        return sample(params, eps), _std_normal_logpdf(eps) - jnp.sum(params["log_diag"])

    def log_q(params, theta):
        L = _chol(params)
        z = jax.scipy.linalg.solve_triangular(L, theta - params["loc"], lower=True)
        return _std_normal_logpdf(z) - jnp.sum(params["log_diag"])

    def entropy(params):
        d = params["loc"].shape[-1]
        return jnp.sum(params["log_diag"]) + 0.5 * d * (1.0 + _LOG_2PI)

    def marginals(params, eps=None):
        L = _chol(params)
        return params["loc"], jnp.sqrt(jnp.sum(L**2, axis=1))

    return Family("fullrank", init, sample, sample_and_log_q, log_q, entropy, marginals)


# ----------------------------------------------------------------------------- spline flow
def _rq_params(raw, n_bins, bound, min_bin=1e-3, min_deriv=1e-3):
    """Knots and derivatives of a rational-quadratic spline on ``[-bound, bound]``.

    ``raw`` has shape ``(..., 3 K - 1)``: unnormalized widths (K), heights (K) and interior
    derivatives (K - 1). Zero ``raw`` gives the identity (equal bins, unit derivatives).
    """
    K = n_bins
    w = jax.nn.softmax(raw[..., :K], axis=-1)
    h = jax.nn.softmax(raw[..., K:2 * K], axis=-1)
    w = min_bin + (1.0 - min_bin * K) * w
    h = min_bin + (1.0 - min_bin * K) * h
    shift = math.log(math.expm1(1.0 - min_deriv))  # softplus(shift) + min_deriv = 1
    dint = min_deriv + jax.nn.softplus(raw[..., 2 * K:] + shift)
    ones = jnp.ones(raw.shape[:-1] + (1,))
    deriv = jnp.concatenate([ones, dint, ones], axis=-1)  # (..., K + 1), unit at the ends
    zero = jnp.zeros(raw.shape[:-1] + (1,))
    xk = jnp.concatenate([zero, jnp.cumsum(w, axis=-1)], axis=-1) * 2 * bound - bound
    yk = jnp.concatenate([zero, jnp.cumsum(h, axis=-1)], axis=-1) * 2 * bound - bound
    xk = xk.at[..., -1].set(bound)
    yk = yk.at[..., -1].set(bound)
    return xk, yk, deriv


def _gather(a, k):
    return jnp.take_along_axis(a, k[..., None], axis=-1)[..., 0]


def _rq_bin(v, knots, xk, yk, deriv, bound):
    """The spline bin of each ``v`` and its pieces, shared by :func:`_rq_forward` and :func:`_rq_inverse`.

    ``knots`` is ``xk`` to locate an input of the forward map, ``yk`` to locate an output (the
    inverse). Returns ``inside`` (``|v| < bound``), ``v`` clipped into the interval, and the bin's
    left knot ``(x0, y0)``, end derivatives ``d0, d1``, width ``wk``, height ``hk`` and slope
    ``s = hk / wk``.
    """
    inside = jnp.abs(v) < bound
    vc = jnp.clip(v, -bound + 1e-9, bound - 1e-9)
    k = jnp.clip(jnp.sum(vc[..., None] >= knots[..., 1:-1], axis=-1), 0, knots.shape[-1] - 2)
    x0, x1 = _gather(xk, k), _gather(xk, k + 1)
    y0, y1 = _gather(yk, k), _gather(yk, k + 1)
    d0, d1 = _gather(deriv, k), _gather(deriv, k + 1)
    wk, hk = x1 - x0, y1 - y0
    return inside, vc, x0, y0, d0, d1, wk, hk, hk / wk


def _rq_log_slope(xi, om, s, d0, d1, den):
    """``log g'(x)`` at ``xi`` in ``[0, 1]`` within the bin, ``om = xi (1 - xi)`` (Durkan et al. 2019, Eq. 5)."""
    return jnp.log(s**2 * (d1 * xi**2 + 2.0 * s * om + d0 * (1.0 - xi) ** 2) / den**2)


def _rq_forward(x, xk, yk, deriv, bound):
    """Elementwise spline ``y = g(x)`` and ``log g'(x)``; identity outside ``[-bound, bound]``."""
    inside, xc, x0, y0, d0, d1, wk, hk, s = _rq_bin(x, xk, xk, yk, deriv, bound)
    xi = (xc - x0) / wk
    om = xi * (1.0 - xi)
    den = s + (d1 + d0 - 2.0 * s) * om
    y = y0 + hk * (s * xi**2 + d0 * om) / den
    return jnp.where(inside, y, x), jnp.where(inside, _rq_log_slope(xi, om, s, d0, d1, den), 0.0)


def _rq_inverse(y, xk, yk, deriv, bound):
    """Inverse of :func:`_rq_forward`: ``x = g^{-1}(y)`` and ``log g'(x)`` (forward log-slope)."""
    inside, yc, x0, y0, d0, d1, wk, hk, s = _rq_bin(y, yk, xk, yk, deriv, bound)
    dy = yc - y0
    c2 = d1 + d0 - 2.0 * s
    a = hk * (s - d0) + dy * c2
    b = hk * d0 - dy * c2
    c = -s * dy
    disc = jnp.maximum(b**2 - 4.0 * a * c, 0.0)
    xi = jnp.clip((2.0 * c) / (-b - jnp.sqrt(disc)), 0.0, 1.0)
    x = x0 + xi * wk
    om = xi * (1.0 - xi)
    den = s + c2 * om
    return jnp.where(inside, x, y), jnp.where(inside, _rq_log_slope(xi, om, s, d0, d1, den), 0.0)


def _cond_mask(d, layer):
    """Coordinates the conditioner of ``layer`` reads (and leaves unchanged)."""
    if d == 1:
        return np.zeros(1, bool)  # one coordinate: every layer is an unconditional spline
    return (np.arange(d) % 2) == (layer % 2)


def _flow_init_layers(key, d, n_layers, hidden, n_raw):
    """Conditioner weights of ``n_layers`` coupling layers; the zero output layer makes each the identity."""
    layers = []
    for _ in range(n_layers):
        key, k1 = jax.random.split(key)
        layers.append({
            "w1": jax.random.normal(k1, (d, hidden)) / math.sqrt(max(d, 1)),
            "b1": jnp.zeros(hidden),
            "w2": jnp.zeros((hidden, d * n_raw)),
            "b2": jnp.zeros(d * n_raw),
        })
    return layers


def _coupling(params, x, logdet, layers, spline, n_bins, bound):
    """Apply the coupling ``layers`` (indices, in that order) of a flow to ``x``.

    Parameters
    ----------
    params : dict
        The flow's parameters (``params["layers"]``, see :func:`flow`).
    x : array, shape (..., d)
    logdet : array
        Starting value of the accumulated log-slope, shape ``x.shape[:-1]`` or broadcastable.
    layers : iterable of int
    spline : callable
        :func:`_rq_forward` (forward pass) or :func:`_rq_inverse` (inverse pass, layers reversed).
    n_bins : int
    bound : float

    Returns
    -------
    (x, logdet)
        The mapped coordinates and ``logdet`` plus the forward log-slopes of the moved coordinates.
    """
    d = x.shape[-1]
    n_raw = 3 * n_bins - 1
    for layer in layers:
        lp = params["layers"][layer]
        cond = jnp.asarray(_cond_mask(d, layer), dtype=x.dtype)
        h = jnp.tanh((x * cond) @ lp["w1"] + lp["b1"])
        raw = (h @ lp["w2"] + lp["b2"]).reshape(x.shape[:-1] + (d, n_raw))
        xk, yk, dv = _rq_params(raw, n_bins, bound)
        y, ld = spline(x, xk, yk, dv, bound)
        x = jnp.where(cond > 0, x, y)
        logdet = logdet + jnp.sum(jnp.where(cond > 0, 0.0, ld), axis=-1)
    return x, logdet


def flow(n_layers: int = 4, hidden: int = 16, n_bins: int = 8, bound: float = 4.0) -> Family:
    """Neural spline flow: coupling layers of rational-quadratic splines, then a diagonal affine.

    ``theta = loc + exp(log_scale) * (g_L o ... o g_1)(eps)``. Layer ``l`` keeps the coordinates of
    :func:`_cond_mask` fixed and maps each other coordinate through a monotone rational-quadratic
    spline on ``[-bound, bound]`` (identity outside) whose ``n_bins`` bin widths, heights and
    knot derivatives are the output of a one-hidden-layer tanh network of the fixed coordinates
    (Durkan et al. 2019). With one parameter the splines are unconditional. The output layer of
    every network starts at zero, so the initial flow is the mean-field Gaussian ``init`` gives;
    its inverse (for :func:`log_q` at arbitrary points) is closed form.

    Parameters
    ----------
    n_layers, hidden, n_bins : int
        Coupling layers, hidden units per conditioner, spline bins.
    bound : float
        Half-width of the spline interval in the standardized space.
    """
    n_layers, hidden, n_bins, bound = int(n_layers), int(hidden), int(n_bins), float(bound)
    if n_layers < 1 or hidden < 1 or n_bins < 2 or not bound > 0:
        raise ValueError("flow needs n_layers >= 1, hidden >= 1, n_bins >= 2 and bound > 0.")

    def init(dim, loc=None, scale=0.1, key=None):
        m, ls = _init_loc_scale(dim, loc, scale)
        key = jax.random.PRNGKey(0) if key is None else key
        layers = _flow_init_layers(key, m.shape[0], n_layers, hidden, 3 * n_bins - 1)
        return {"loc": m, "log_scale": ls, "layers": layers}

    def sample_and_log_q(params, eps):
        x, logdet = _coupling(params, eps, jnp.zeros(eps.shape[:-1]), range(len(params["layers"])),
                              _rq_forward, n_bins, bound)
        theta = params["loc"] + jnp.exp(params["log_scale"]) * x
        return theta, _std_normal_logpdf(eps) - (logdet + jnp.sum(params["log_scale"]))

    def sample(params, eps):
        return sample_and_log_q(params, eps)[0]

    def log_q(params, theta):
        x = (theta - params["loc"]) * jnp.exp(-params["log_scale"])
        x, logdet = _coupling(params, x, jnp.sum(params["log_scale"]), reversed(range(len(params["layers"]))),
                              _rq_inverse, n_bins, bound)
        return _std_normal_logpdf(x) - logdet

    def marginals(params, eps):
        theta = sample(params, eps)
        return jnp.mean(theta, axis=0), jnp.std(theta, axis=0, ddof=1)

    return Family("flow", init, sample, sample_and_log_q, log_q, None, marginals)


FAMILIES = {"meanfield": meanfield, "fullrank": fullrank, "flow": flow}


def get_family(family, **kwargs) -> Family:
    """A :class:`Family` from its name (``"meanfield"``, ``"fullrank"``, ``"flow"``) or itself."""
    if isinstance(family, Family):
        if kwargs:
            raise ValueError("family options apply to a family given by name only.")
        return family
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is not known; choose from {sorted(FAMILIES)} or pass a Family.")
    if kwargs and family != "flow":
        raise ValueError(f"family {family!r} takes no options; got {sorted(kwargs)}.")
    return FAMILIES[family](**kwargs)


def flatten_params(params) -> tuple[np.ndarray, list]:
    """All leaves of a parameter pytree as one float vector, with ``(path, shape)`` per leaf."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    flat = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for _, v in leaves]) if leaves else np.zeros(0)
    info = [(jax.tree_util.keystr(p), tuple(np.shape(v))) for p, v in leaves]
    return flat, info
