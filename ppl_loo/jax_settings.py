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
- **Persistent XLA compilation cache** (on by default): the first entry point called points JAX's
  ``jax_compilation_cache_dir`` at ``$PPL_LOO_CACHE_DIR``, by default ``$XDG_CACHE_HOME/ppl_loo/xla``
  (``~/.cache/ppl_loo/xla``), so that the adaptive search, the mixture run and the other compiled
  programs are compiled once per machine rather than once per Python session (every program, the
  small ones too; the traced programs themselves are kept beside them, :mod:`ppl_loo.program_cache`).
  The folder is bounded (:data:`CACHE_MAX_BYTES`, the oldest entries removed when a process first uses it) and
  shared by concurrent processes (an entry read while another process writes it is compiled again, with JAX's
  warning "Error reading persistent compilation cache entry"). ``PPL_LOO_CACHE_DIR=off`` turns it off; a
  cache directory the user configured in JAX is never replaced.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

import jax

__all__ = ["x64", "uses_x64", "CACHE_ENV", "CACHE_MAX_BYTES", "cache_folder", "bound_folder"]

#: environment variable naming the persistent compilation cache directory ("off": none; unset: the default folder)
CACHE_ENV = "PPL_LOO_CACHE_DIR"
#: the most the compilation cache holds on disk; beyond it the oldest programs are removed when a process starts
CACHE_MAX_BYTES = 2 * 1024**3
#: programs that compile faster than this are not written to the cache: none, since a new process compiles dozens of
#: small programs (eager array operations, PSIS), each read back faster than compiled
CACHE_MIN_COMPILE_SECONDS = 0.0

_LOCK = threading.Lock()
_GLOBAL = {"depth": 0, "saved": False}  # nesting depth of x64() blocks and the user's process-wide value


@contextlib.contextmanager
def x64():
    """Enable float64 in JAX inside the block (``jax.enable_x64``), restoring the caller's setting.

    The process-wide flag is on too while the outermost block runs (for JAX's callback threads),
    then set back to the user's value. Also applies the persistent compilation cache
    (:func:`cache_folder`) the first time it is entered.
    """
    _use_cache()
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


def cache_folder():
    """The persistent compilation cache folder ppl_loo uses: ``$PPL_LOO_CACHE_DIR``, by default
    ``$XDG_CACHE_HOME/ppl_loo/xla`` (``~/.cache/ppl_loo/xla``); None where the variable is ``off``."""
    path = os.environ.get(CACHE_ENV, "")
    if path.lower() == "off":
        return None
    if path:
        return os.path.expanduser(path)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ppl_loo", "xla")


@functools.cache
def _use_cache():
    """Point JAX's persistent compilation cache at :func:`cache_folder` (once per process), unless it is
    off or the user configured a cache directory of their own."""
    path = cache_folder()
    if path is None or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # read-only location: run without the cache
        return
    if not os.access(path, os.W_OK):
        return
    bound_folder(path, CACHE_MAX_BYTES)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    # JAX's own bound scans the whole folder under a lock at every write (thousands of small programs: seconds each);
    # bound_folder keeps it bounded once per process instead
    jax.config.update("jax_compilation_cache_max_size", -1)


def bound_folder(path, max_bytes):
    """Remove the oldest files (by modification time) of ``path``, its subfolders included, until it holds at most
    ``max_bytes``; files another process removes meanwhile are skipped."""
    entries = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, full))
    total = sum(size for _, size, _ in entries)
    for _, size, full in sorted(entries):
        if total <= max_bytes:
            break
        try:
            os.remove(full)
        except OSError:
            continue
        total -= size
