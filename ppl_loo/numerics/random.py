"""Random seeds: one raw JAX PRNG key from whatever seed the user passes."""

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
    """``random_seed`` itself, or, for None, an int derived from the bytes of ``arrays``
    (a rerun on the same input reproduces)."""
    if random_seed is not None:
        return random_seed
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return int.from_bytes(h.digest(), "little") & (2**63 - 1)
