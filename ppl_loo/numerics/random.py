"""Random seeds: one raw JAX PRNG key from whatever seed the user passes, and the one meaning of
``random_seed=None`` (a seed derived from the input arrays, :func:`seed_from`)."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["prng_key", "seed_from"]


def prng_key(random_seed):
    """A raw JAX PRNG key from an int, a ``numpy.random.Generator`` or a JAX key.

    Parameters
    ----------
    random_seed : int, numpy.random.Generator or jax.Array
        An integer seed, a NumPy generator (one integer is drawn from it), a typed JAX key
        (``jax.random.key``; its raw data is returned) or a raw ``uint32`` key (returned as is).

    Returns
    -------
    jax.Array
        A raw key, as from ``jax.random.PRNGKey``.

    Raises
    ------
    TypeError
        ``random_seed`` is of another type (``None`` included: the caller needs an explicit seed).
    """
    if isinstance(random_seed, np.random.Generator):
        return jax.random.PRNGKey(int(random_seed.integers(2**63 - 1)))
    if isinstance(random_seed, (int, np.integer)):
        return jax.random.PRNGKey(int(random_seed))
    if isinstance(random_seed, jax.Array):
        if jnp.issubdtype(random_seed.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(random_seed)
        return random_seed
    raise TypeError(
        "random_seed must be an int, a numpy.random.Generator or a JAX PRNG key, got "
        f"{type(random_seed).__name__}; pass an explicit seed."
    )


def seed_from(random_seed, *arrays):
    """``random_seed`` itself, or for None a seed derived from the bytes of ``arrays``.

    The one meaning of ``random_seed=None`` in the public functions: a rerun on the same input (the same draws)
    gives the same result, and different inputs get unrelated seeds.

    Parameters
    ----------
    random_seed : None, int, numpy.random.Generator or jax.Array
        None: derive an int from ``arrays``; anything else is returned unchanged (checked where it is used, e.g.
        by :func:`prng_key`).
    *arrays : array-like
        The input the seed is derived from (the posterior draws, the log-likelihood), hashed in order.

    Returns
    -------
    int or the given seed
        For None a non-negative int below ``2**63``: the first 8 bytes of the BLAKE2b hash of the arrays'
        C-ordered bytes.
    """
    if random_seed is not None:
        return random_seed
    h = hashlib.blake2b()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return int.from_bytes(h.digest()[:8], "little") & (2**63 - 1)
