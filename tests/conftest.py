"""Test configuration.

- The persistent XLA compilation cache is opt-in for users (``PPL_LOO_CACHE_DIR``); the tests opt in
  (unless the variable is already set), so that the adaptive search compiles once per machine.
- ppl_loo enables float64 around its own entry points only. Test modules that call its low-level
  numerics or model methods directly on JAX arrays are the user's own JAX code: they carry
  ``pytestmark = pytest.mark.x64``, which runs the module (its module-scoped fixtures included) with
  ``jax_enable_x64`` set process-wide, as such a user would (``jax.config.update``), and restores it.
"""

import os

import jax
import pytest

os.environ.setdefault("PPL_LOO_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "ppl_loo", "xla"))


def pytest_configure(config):
    config.addinivalue_line("markers", "x64: run the test module with jax_enable_x64 (JAX float64) enabled")


@pytest.fixture(scope="module", autouse=True)
def x64_for_marked_modules(request):
    """``jax_enable_x64`` for the whole of a module marked ``x64``; nothing otherwise."""
    if request.node.get_closest_marker("x64") is None:
        yield
        return
    before = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)
