"""Interrupts and faults (issue 16): Ctrl-C stops every long path within 2 s with a clean
``KeyboardInterrupt`` (timed from the signal to the ``KeyboardInterrupt`` at the script's top level;
the interpreter's shutdown after it, 1-4 s for any process that imported JAX, is reported by the
benchmark, not asserted), leaving no child process and no half-written cache entry; concurrent compiles
of a valid and of a broken Stan program; a cache folder that cannot be written or is not private; a
library whose recorded hash does not match; refits that resume after an interruption.

Each SIGINT test runs a small script in a subprocess (``interrupt_tools.interrupt_when``), sends
SIGINT once the script reaches the phase (a ``cc1plus`` child, or the phase's progress bar) and times
signal to exit with ``time.monotonic``. ``benchmarks/interrupts.py`` measures the same latencies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest

from interrupt_tools import ROOT, has_child_named, interrupt_when, printed, processes_mentioning

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

import ppl_loo as pl  # noqa: E402
from ppl_loo.stan import StanCacheError, StanCompileError  # noqa: E402
from ppl_loo.stan.compile import build_library  # noqa: E402

LIMIT_S = 2.0  # the requirement: stop within 2 s of the signal
BROKEN = "parameters { real mu; } model { mu ~ normal(0, 1) }"  # missing ';' (a stanc syntax error)


def valid_program(token):
    return f"// {token}\nparameters {{ real mu; }}\nmodel {{ mu ~ normal(0, 1); }}\n"


def _stopped(r):
    """The script got SIGINT, raised KeyboardInterrupt at its top level within LIMIT_S and exited with it."""
    assert r["signalled"], r["output"]
    assert r["returncode"] != 0 and "KeyboardInterrupt" in r["output"], r["output"][-3000:]
    assert r["stop_s"] is not None and r["stop_s"] < LIMIT_S, (r["stop_s"], r["output"][-3000:])


def _entries_complete(cache):
    """No temporary build folder, no lock file, and every entry has its library and its hash."""
    names = [p.name for p in cache.iterdir()]
    assert not [n for n in names if n.startswith((".tmp-", ".old-")) or n.endswith(".lock")], names
    for entry in cache.iterdir():
        assert (entry / "bridge.so").is_file() and (entry / "bridge.so.sha256").is_file(), list(entry.iterdir())


# ----------------------------------------------------------------------------- compile
COMPILE_SCRIPT = """
import os
import ppl_loo as pl
print("compiling", flush=True)
pl.StanModel(os.environ["PROGRAM"], {})
print("compiled", flush=True)
"""


def test_sigint_during_compile_kills_the_compiler_and_leaves_no_entry(tmp_path):
    cache = tmp_path / "cache"
    r = interrupt_when(COMPILE_SCRIPT, has_child_named("cc1plus"), after_s=1.0, timeout_s=300,
                       env={"PPL_LOO_STAN_CACHE": str(cache), "PROGRAM": valid_program(uuid.uuid4().hex)})
    _stopped(r)
    assert processes_mentioning(str(cache)) == []  # no orphan cc1plus (its arguments name the build folder)
    _entries_complete(cache)
    assert list(cache.iterdir()) == []


PARALLEL_SCRIPT = """
import os, sys
from ppl_loo.stan import StanCompileError
import ppl_loo as pl
try:
    m = pl.StanModel(os.environ["PROGRAM"], {})
    print("OK", m.compiled, m.build.library)
except StanCompileError as err:
    print("StanCompileError", str(err).splitlines()[1] if len(str(err).splitlines()) > 1 else err)
"""


def _four(program, cache):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PPL_LOO_STAN_CACHE": str(cache), "PROGRAM": program}
    procs = [subprocess.Popen([sys.executable, "-c", PARALLEL_SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    return [p.communicate(timeout=900) + (p.returncode,) for p in procs]


def test_four_processes_compile_a_broken_program():
    """Issue 16: one of four got FileNotFoundError (the cache folder deleted under another's lock)."""
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / f"ppl_loo_broken_{uuid.uuid4().hex}"
    try:
        results = _four(BROKEN, cache)
        for out, err, rc in results:
            assert rc == 0, err
            assert out.startswith("StanCompileError") and "Syntax error in 'model.stan'" in out, (out, err)
        assert list(cache.iterdir()) == []
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """Four processes compile the same valid program into an empty cache: one compiles, three wait and
    load the same library."""
    cache = tmp_path_factory.mktemp("cache")
    program = valid_program(uuid.uuid4().hex)
    return cache, program, _four(program, cache)


def test_four_processes_compile_a_valid_program(built_cache):
    cache, _, results = built_cache
    outs = [out.split() for out, _, _ in results]
    assert all(o[0] == "OK" for o in outs), results
    assert sorted(o[1] for o in outs) == ["False", "False", "False", "True"]
    assert len({o[2] for o in outs}) == 1
    _entries_complete(cache)
    assert len(list(cache.iterdir())) == 1
    assert (os.stat(cache).st_mode & 0o777) == 0o700


def test_library_with_a_wrong_hash_is_rebuilt(built_cache, monkeypatch):
    cache, program, _ = built_cache
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(cache))
    first = build_library(program)
    assert first.compiled is False
    record = first.library.with_name("bridge.so.sha256")
    record.write_text("0" * 64)  # a library that is not the one built here
    again = build_library(program)
    assert again.compiled is True and again.library == first.library
    assert record.read_text() != "0" * 64
    _entries_complete(cache)


def test_cache_folder_that_cannot_be_created(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(blocker / "cache"))
    with pytest.raises(StanCacheError, match=r"(?s)a_file/cache.*PPL_LOO_STAN_CACHE"):
        pl.StanModel(valid_program("unused"), {})
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(blocker))
    with pytest.raises(StanCacheError, match=r"(?s)a_file is not a folder.*PPL_LOO_STAN_CACHE"):
        pl.StanModel(valid_program("unused"), {})


def test_shared_cache_folder_is_made_private(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(cache))
    with pytest.raises(StanCompileError):
        pl.StanModel(BROKEN, {})
    assert (os.stat(cache).st_mode & 0o777) == 0o700


def test_fresh_cache_folder_is_private(tmp_path, monkeypatch):
    cache = tmp_path / "new" / "cache"
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(cache))
    with pytest.raises(StanCompileError):
        pl.StanModel(BROKEN, {})
    assert (os.stat(cache).st_mode & 0o777) == 0o700
