"""The JAX settings ppl_loo needs, applied around its entry points and never at import.

- **float64**: PSIS must agree with ``arviz_stats`` to 1e-8, and log densities of hundreds of nats
  are differenced. The public entry points (``pl.loo``, ``pl.pvi``, ``pl.predictive_scores``,
  ``pl.loo_expectations``, ``pl.loo_roc``, the samplers, the constructors of models that hold JAX
  arrays) run inside :func:`x64`, which enables ``jax_enable_x64`` for the duration of the call
  only: importing or calling ppl_loo leaves the user's own JAX code in the precision they chose.
  While such a call runs, the process-wide flag is on as well (JAX runs host callbacks, such as the
  Stan bridge's, on threads of its own, which do not see a thread's ``jax.enable_x64``); the
  user's value is restored when the outermost call returns.
  Arrays the user builds with ``jax.numpy`` outside such a call follow the user's setting
  (float32 by default); pass NumPy arrays, or enable x64 yourself, for float64 data.
- **Persistent XLA compilation cache** (opt-in): with ``PPL_LOO_CACHE_DIR=<dir>`` in the
  environment, the first entry point called points JAX's ``jax_compilation_cache_dir`` there, so
  that the adaptive search is compiled once per machine rather than once per Python session.
  A cache directory the user configured is never replaced.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

import jax

__all__ = ["x64", "uses_x64", "CACHE_ENV"]

#: environment variable naming the persistent compilation cache directory (unset or "off": none)
CACHE_ENV = "PPL_LOO_CACHE_DIR"

_LOCK = threading.Lock()
_GLOBAL = {"depth": 0, "saved": False}  # nesting depth of x64() blocks and the user's process-wide value


@contextlib.contextmanager
def x64():
    """Enable float64 in JAX inside the block (``jax.enable_x64``), restoring the caller's setting.

    The process-wide flag is on too while the outermost block runs (for JAX's callback threads),
    then set back to the user's value. Also applies the opt-in compilation cache
    (:data:`CACHE_ENV`) the first time it is entered.
    """
    _opt_in_cache()
    with _LOCK:
        if _GLOBAL["depth"] == 0:
            _GLOBAL["saved"] = _process_x64()
            jax.config.update("jax_enable_x64", True)
        _GLOBAL["depth"] += 1
    try:
        with jax.enable_x64(True):
            yield
    finally:
        with _LOCK:
            _GLOBAL["depth"] -= 1
            if _GLOBAL["depth"] == 0:
                jax.config.update("jax_enable_x64", _GLOBAL["saved"])


def _process_x64():
    """The process-wide ``jax_enable_x64``, whatever this thread's ``jax.enable_x64`` says: read
    from a fresh thread, which sees no thread-local override."""
    out = []
    reader = threading.Thread(target=lambda: out.append(bool(jax.config.jax_enable_x64)))
    reader.start()
    reader.join()
    return out[0]


def uses_x64(fn):
    """Decorator: run ``fn`` inside :func:`x64`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with x64():
            return fn(*args, **kwargs)

    return wrapper


@functools.cache
def _opt_in_cache():
    """Point JAX's persistent compilation cache at ``$PPL_LOO_CACHE_DIR`` (once per process), unless
    the variable is unset or ``off`` or the user configured a cache directory of their own."""
    path = os.environ.get(CACHE_ENV, "")
    if not path or path.lower() == "off" or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # read-only location: run without the cache
        return
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
