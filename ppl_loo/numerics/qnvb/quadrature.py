"""Quadrature nodes for mean-field Gaussian expectations (Duersch, Sections 2.2, 3 and Appendix A).

- :func:`hadamard_signs` / :func:`antithetic_nodes`: the cross-polytope vertices in the Hadamard
  basis (Algorithm 1), antithetic pairs ``mu +- s * sigma`` with weight 1/2 each. One pair
  integrates every univariate quadratic exactly (univariate cubics too for symmetric laws); an
  aligned block of ``2^b`` pairs averages to the 4-node tensor cubature on every coordinate pair
  whose indices first differ in bit ``b`` (Theorem 3.3); a full period of ``2^ceil(log2 d)`` pairs
  integrates every quadratic.
- :func:`simplex_sigma_points` (Algorithm 4) and :func:`blocked_stochastic_nodes` (Section 3.1):
  equal-weight simplex sigma points per block, with an independent random permutation of the
  nodes in each block (exact for within-block quadratics, exact *in expectation* across blocks,
  Theorem 3.1).
- :func:`qmc_nodes`: the baselines of Section 2.2: Monte Carlo, QMC-1 (mean matching) and QMC-2
  (mean and variance matching, variance divided by ``n``).

Everything is a pure JAX function; ``q`` may be traced, node counts are static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "hadamard_period",
    "hadamard_signs",
    "antithetic_nodes",
    "simplex_sigma_points",
    "blocked_stochastic_nodes",
    "qmc_standard",
    "qmc_nodes",
    "gauss_hermite_nodes",
]

QMC_MATCH = (None, "mean", "mean_var")


def hadamard_period(d: int) -> int:
    """``2^ceil(log2 d)``: the number of antithetic pairs after which the sequence repeats (1 for d = 1)."""
    d = int(d)
    if d < 1:
        raise ValueError(f"the dimension d must be >= 1, got {d}.")
    return 1 << (d - 1).bit_length()


def hadamard_signs(d: int, q, dtype=None):
    """Signs of the ``q``-th antithetic pair of cross-polytope vertices in the Hadamard basis (Algorithm 1).

    ``p_i = XOR_j bit_j(i) bit_j(q) = popcount(i AND q) mod 2`` (bit 1 the least significant) and
    ``s = 2 p - 1``, i.e. ``s_i = -H[q, i]`` with ``H`` the Sylvester-Hadamard matrix, rows
    truncated to ``d`` columns. The pair is ``mu + s * sigma`` and ``mu - s * sigma``.

    Parameters
    ----------
    d : int
        Dimension (static).
    q : int or int array (may be traced)
        Iterate index; only ``q mod 2^ceil(log2 d)`` matters.
    dtype : dtype, optional
        Float dtype of the result (default: JAX's default float, float64 under x64).

    Returns
    -------
    array, shape (d,)
        Entries in ``{-1, +1}``.
    """
    dtype = jnp.result_type(float) if dtype is None else dtype
    i = jnp.arange(int(d), dtype=jnp.uint32)
    qu = jnp.asarray(q).astype(jnp.uint32)
    p = jax.lax.population_count(i & qu) & jnp.uint32(1)
    return (2 * p.astype(jnp.int32) - 1).astype(dtype)


def antithetic_nodes(mu, sigma, q1, n_pairs: int):
    """Nodes of ``n_pairs`` consecutive antithetic pairs starting at iterate ``q1`` (Algorithm 1).

    Parameters
    ----------
    mu, sigma : array, shape (d,)
    q1 : int (may be traced)
        First iterate index; keep it a multiple of ``n_pairs`` (a power of 2) for the aligned
        exactness of Theorem 3.3.
    n_pairs : int
        Number of pairs (static).

    Returns
    -------
    array, shape (2 n_pairs, d)
        Rows ``2k`` and ``2k+1`` are ``mu + s_k sigma`` and ``mu - s_k sigma`` with ``s_k`` the
        signs of iterate ``q1 + k``; every node has weight ``1 / (2 n_pairs)``.
    """
    mu = jnp.asarray(mu)
    d = mu.shape[-1]
    s = jax.vmap(lambda q: hadamard_signs(d, q, mu.dtype))(jnp.asarray(q1) + jnp.arange(int(n_pairs)))
    nodes = jnp.stack([mu + s * sigma, mu - s * sigma], axis=1)  # (n_pairs, 2, d)
    return nodes.reshape(2 * int(n_pairs), d)


def simplex_sigma_points(d: int):
    """Equal-weight simplex-polytope sigma points (Algorithm 4).

    ``r_1 = sqrt(d)``; for ``i = 1..d``: ``X_ii = r_i``, ``X_ij = -r_i / (d + 1 - i)`` for
    ``j > i``, ``r_{i+1} = r_i sqrt((d + 1 - i)^2 - 1) / (d + 1 - i)``. The columns sum to zero,
    ``X X^T / (d + 1) = I`` and every column has squared norm ``d``: the rule integrates every
    quadratic exactly against any law with mean 0 and identity covariance (not cubics).

    Returns
    -------
    X : ndarray, shape (d, d + 1)
        Standardized nodes (columns).
    w : float
        The common weight ``1 / (d + 1)``.
    """
    d = int(d)
    if d < 1:
        raise ValueError(f"simplex_sigma_points: d must be >= 1, got {d}.")
    i = np.arange(1, d + 1)
    m = (d + 1 - i).astype(float)
    factors = np.sqrt(m * m - 1.0) / m
    r = np.sqrt(d) * np.concatenate([[1.0], np.cumprod(factors[:-1])])
    j = np.arange(1, d + 2)[None, :]
    X = np.where(j == i[:, None], r[:, None], np.where(j > i[:, None], -(r / m)[:, None], 0.0))
    return X, 1.0 / (d + 1)


def blocked_stochastic_nodes(key, mu, block_chols):
    """Stochastic blocked mean-field quadrature with simplex sigma points (Section 3.1).

    Coordinates are split into consecutive blocks of size ``k``; block ``b`` gets the sigma points
    ``mu_b + L_b X`` of :func:`simplex_sigma_points` (``k + 1`` nodes, the same count in every
    block), its node columns permuted by an independent uniform permutation; the blocks are
    stacked. Within-block quadratics are integrated exactly; products across blocks exactly in
    expectation over the permutations (Theorem 3.1).

    Parameters
    ----------
    key : PRNG key
    mu : array, shape (d,)
    block_chols : array, shape (n_blocks, k, k)
        Lower Cholesky factors of the block covariances (``diag(sigma_b)`` for mean-field).
        ``d <= n_blocks k``: when ``d`` is smaller, the last block is truncated (its factor is
        read in its leading rows; truncated rows of the simplex keep the quadratic exactness).

    Returns
    -------
    array, shape (k + 1, d)
        The nodes, each with weight ``1 / (k + 1)``.
    """
    mu = jnp.asarray(mu)
    chols = jnp.asarray(block_chols, dtype=mu.dtype)
    n_blocks, k, _ = chols.shape
    d = mu.shape[-1]
    if d > n_blocks * k or d <= (n_blocks - 1) * k:
        raise ValueError(f"blocked_stochastic_nodes: mu has d = {d} entries but block_chols {chols.shape} "
                         f"covers {n_blocks * k}; pass ceil(d / k) blocks.")
    X = jnp.asarray(simplex_sigma_points(k)[0], dtype=mu.dtype)
    perms = jax.vmap(lambda kk: jax.random.permutation(kk, k + 1))(jax.random.split(key, n_blocks))
    blocks = jnp.einsum("bij,bjq->biq", chols, X[:, perms].transpose(1, 0, 2))  # (n_blocks, k, k+1)
    return mu[None, :] + blocks.reshape(n_blocks * k, k + 1)[:d].T


def qmc_standard(key, n: int, d: int, match=None, dtype=None):
    """Standardized Monte Carlo / QMC-1 / QMC-2 nodes ``x`` (``theta = mu + sigma x``), Section 2.2.

    ``match=None``: ``x ~ N(0, I)``; ``"mean"`` (QMC-1): ``x - mean(x)``; ``"mean_var"`` (QMC-2):
    ``(x - mean(x)) / sd(x)`` with the variance divided by ``n`` (not ``n - 1``), so that the
    sample mean is exactly 0 and the sample variance exactly 1 in every coordinate.

    Returns
    -------
    array, shape (n, d)
    """
    if match not in QMC_MATCH:
        raise ValueError(f"match={match!r}: choose None (MC), 'mean' (QMC-1) or 'mean_var' (QMC-2).")
    if match == "mean_var" and int(n) < 2:
        raise ValueError("match='mean_var' (QMC-2) needs n >= 2 nodes.")
    dtype = jnp.result_type(float) if dtype is None else dtype
    x = jax.random.normal(key, (int(n), int(d)), dtype=dtype)
    if match is None:
        return x
    x = x - jnp.mean(x, axis=0, keepdims=True)
    if match == "mean":
        return x
    return x / jnp.sqrt(jnp.mean(x * x, axis=0, keepdims=True))


def qmc_nodes(key, mu, sigma, n: int, match=None):
    """Monte Carlo (``match=None``), QMC-1 (``"mean"``) or QMC-2 (``"mean_var"``) nodes, Section 2.2.

    ``theta = mu + sigma * x`` with ``x`` from :func:`qmc_standard`: QMC-1 is ``theta - mean + mu``,
    QMC-2 ``(theta - mean) / sd * sigma + mu`` with ``sd^2 = mean((theta - mean)^2)`` (divided by
    ``n``). Equal weights ``1 / n``.

    Returns
    -------
    array, shape (n, d)
    """
    mu = jnp.asarray(mu)
    x = qmc_standard(key, n, mu.shape[-1], match, mu.dtype)
    return mu + sigma * x


def gauss_hermite_nodes(d: int, order: int = 30):
    """Tensor-product Gauss-Hermite rule for ``N(0, I_d)``: standardized nodes and weights.

    ``order^d`` nodes (``numpy.polynomial.hermite_e.hermegauss``, weights normalized to sum 1);
    exact for polynomials of degree ``< 2 order`` in each coordinate. Meant for very small ``d``
    (at most 3).

    Returns
    -------
    x : ndarray, shape (order^d, d)
    w : ndarray, shape (order^d,)
    """
    d, order = int(d), int(order)
    if not 1 <= d <= 3:
        raise ValueError(f"gauss_hermite_nodes: the tensor rule has order^d nodes; use d <= 3 (got d = {d}).")
    t, w1 = np.polynomial.hermite_e.hermegauss(order)
    w1 = w1 / w1.sum()
    grids = np.meshgrid(*([t] * d), indexing="ij")
    weights = np.meshgrid(*([w1] * d), indexing="ij")
    x = np.stack([g.ravel() for g in grids], axis=1)
    w = np.prod(np.stack([g.ravel() for g in weights], axis=1), axis=1)
    return x, w
