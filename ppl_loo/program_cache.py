"""Traced programs kept on disk, so that a new Python process skips tracing and lowering them.

XLA's persistent compilation cache (:mod:`ppl_loo.jax_settings`) saves the compilation of a
program, but every new process still traces the Python code to a jaxpr and lowers it to StableHLO
before it can look the compilation up; for the adaptive search of a small model those two steps
take seconds, longer than the sampler. :func:`exported_jit` keeps the lowered program itself
(``jax.export``, serialized) in ``<cache folder>/exported``, under a key that names everything
the program depends on: the caller's description of what the traced code closes over (for the
search, the model's fingerprint, :func:`ppl_loo.model.fingerprint.model_fingerprint`, and the
engine's settings), the shapes and dtypes of the arguments, the versions of JAX and jaxlib, and a
digest of ppl_loo's own source. A later process with the same key deserializes the program and
calls it (the compilation then comes from XLA's cache): the same StableHLO, the same numbers.

Where the program cannot be exported (a host callback) or the folder cannot be written, the
function is jit-compiled as usual. ``PPL_LOO_CACHE_DIR=off`` turns this cache off with XLA's.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import pickle
import tempfile
from pathlib import Path

import jax

from ppl_loo.jax_settings import cache_folder

__all__ = ["exported_jit", "programs_folder", "source_digest", "MAX_PROGRAMS"]

#: the most exported programs kept; beyond it the least recently used are removed
MAX_PROGRAMS = 200


def programs_folder():
    """``<cache folder>/exported`` (:func:`ppl_loo.jax_settings.cache_folder`), or None where the cache is off."""
    base = cache_folder()
    return None if base is None else os.path.join(base, "exported")


@functools.cache
def source_digest() -> str:
    """SHA-256 of every ``.py`` file of the ppl_loo package: a program traced by other code is never reused."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _signature(leaves):
    return tuple((tuple(x.shape), str(x.dtype)) for x in leaves)


def _key(name, key, treedef, leaves) -> str:
    h = hashlib.sha256()
    for part in (name, key, str(treedef), _signature(leaves), jax.__version__, importlib.metadata.version("jaxlib"),
                 bool(jax.config.jax_enable_x64), jax.default_backend(), source_digest()):
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _load(path):
    try:
        with open(path, "rb") as f:
            blob, out_tree = pickle.load(f)
        exp = jax.export.deserialize(blob)
    except Exception:  # absent, partly written by another process, or from an incompatible version
        return None
    os.utime(path)  # recently used
    return exp, out_tree


def _save(path, exp, out_tree):
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((exp.serialize(), out_tree), f)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except Exception:
        return
    _evict(folder)


def _evict(folder):
    files = sorted(Path(folder).glob("*.prog"), key=lambda p: p.stat().st_mtime)
    for p in files[:max(0, len(files) - MAX_PROGRAMS)]:
        p.unlink(missing_ok=True)


def _export(fn, leaves, treedef):
    box = {}

    def flat(*xs):
        out = fn(*jax.tree_util.tree_unflatten(treedef, xs))
        out_leaves, box["tree"] = jax.tree_util.tree_flatten(out)
        return out_leaves

    exp = jax.export.export(jax.jit(flat))(*leaves)
    return exp, box["tree"]


def exported_jit(fn, name, key):
    """``jax.jit(fn)``, with the traced and lowered program kept on disk across processes.

    Parameters
    ----------
    fn : callable
        A function of arrays (pytrees of them) returning a pytree of arrays.
    name : str
        What the program is (part of the key).
    key : hashable with a deterministic ``repr``, or None
        Everything ``fn`` closes over that changes its program (the model's fingerprint, settings).
        None, or the cache off: plain ``jax.jit(fn)``.
    """
    jitted = jax.jit(fn)
    folder = programs_folder()
    if key is None or folder is None:
        return jitted
    programs = {}  # per argument signature: the deserialized program, or None where it cannot be exported

    def call(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        sig = (str(treedef), _signature(leaves))
        if sig not in programs:
            programs[sig] = _program(fn, name, key, folder, leaves, treedef)
        prog = programs[sig]
        if prog is None:
            return jitted(*args)
        run, out_tree = prog
        return jax.tree_util.tree_unflatten(out_tree, run(*leaves))

    return call


def _program(fn, name, key, folder, leaves, treedef):
    """The program of ``fn`` at these arguments, loaded from ``folder`` or exported to it; None where it cannot be
    exported."""
    path = os.path.join(folder, _key(name, key, treedef, leaves) + ".prog")
    loaded = _load(path)
    if loaded is None:
        try:
            loaded = _export(fn, leaves, treedef)
        except Exception:  # a host callback, or an effect export does not serialize: trace as usual
            return None
        _save(path, *loaded)
    exp, out_tree = loaded
    return jax.jit(exp.call), out_tree
