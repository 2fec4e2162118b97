"""Test configuration.

- The persistent XLA compilation cache is on by default (``ppl_loo.jax_settings.cache_folder``): the tests' workers
  share it, so that a program one worker compiled is read back by the others and by the next run.
- ppl_loo enables float64 around its own entry points only. Test modules that call its low-level
  numerics or model methods directly on JAX arrays are the user's own JAX code: they carry
  ``pytestmark = pytest.mark.x64``, which runs the module (its module-scoped fixtures included) with
  ``jax_enable_x64`` set process-wide, as such a user would (``jax.config.update``), and restores it.
"""

import faulthandler
import gc
import os
import signal
import sys
import time

import jax
import pytest

#: with PPL_LOO_TEST_TRACE=<file> (set by .ci/run), each test's start (node id and the process' resident memory)
#: is appended to <file>, and a fatal signal's traceback (every thread) goes to <file>.crash, so that a crash of
#: the whole test process names the test and the native frame even when the console output is truncated
#: (one file per pytest-xdist worker: <file>.<worker id>)
_TRACE = os.environ.get("PPL_LOO_TEST_TRACE", "")
if _TRACE and os.environ.get("PYTEST_XDIST_WORKER"):
    _TRACE = f"{_TRACE}.{os.environ['PYTEST_XDIST_WORKER']}"


def _status(field: str) -> int:
    """A number from /proc/self/status (``VmRSS`` in kB, ``Threads``), -1 where unavailable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started with SIGINT ignored (a background job of a shell without job control: `bash .ci/run &`), which every
        # process started from here would inherit: the Ctrl-C tests' subprocesses would never see their SIGINT, nor
        # ``_thread.interrupt_main()`` this one. Python's own handler, as in a process started from a terminal (in
        # each pytest-xdist worker too: pytest_configure runs there)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "x64: run the test module with jax_enable_x64 (JAX float64) enabled")


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    if _TRACE:
        crash = open(_TRACE + ".crash", "w")  # noqa: SIM115 - kept open for the process' lifetime
        faulthandler.enable(file=crash, all_threads=True)
        sys.modules[__name__]._crash_file = crash


def _n_maps() -> int:
    try:
        with open("/proc/self/maps") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return -1


#: test files that take minutes (a reduced benchmark run, Stan compiles, subprocesses): collected first, so that with
#: parallel workers (``bash dev.sh test``, pytest-xdist ``--dist loadfile``) they start first and the short files fill
#: the gaps, instead of the longest starting last and running alone at the end
SLOW_FIRST = ("test_truth_suite.py", "test_ovarian_benchmark.py", "test_examples.py", "test_interrupts.py",
              "test_scale_benchmark.py", "test_stan_obs_params.py", "test_cli.py", "test_stan_loo.py",
              "test_cmdstan_csv.py", "test_distributed.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: k for k, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: the rest keeps its order


def pytest_runtest_logstart(nodeid, location):
    if _TRACE:
        with open(_TRACE, "a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {nodeid} rss={_status('VmRSS') // 1024}MB "
                     f"threads={_status('Threads')} maps={_n_maps()}\n")


@pytest.fixture(scope="module", autouse=True)
def release_compiled_code():
    """Drop JAX's compiled executables after each test module.

    Each XLA executable holds about six memory mappings and they are freed only when its function is; one
    process running the whole suite compiles tens of thousands of them and reached the kernel's limit on
    mappings (``vm.max_map_count``, 65530): LLVM's next code allocation failed and the process died of a
    segfault inside ``backend_compile``. A user's session compiles a small fraction of that; the
    persistent compilation cache makes the recompiles after this cheap.
    """
    yield
    jax.clear_caches()
    gc.collect()


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
