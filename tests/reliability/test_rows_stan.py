"""Reliability rows of the Stan compile cache and of resumable refits.

The SIGINT tests (Ctrl-C during a compile, a Stan-backed search and refits) are in
``test_interrupts.py``: they signal a subprocess rather than check one call's value or error.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

import httpstan  # noqa: E402,F401  (stanc and the Stan headers)
import numpy as np
import pytest
from rows import Row, check_row, params

assert shutil.which("g++") is not None, "these rows compile Stan programs: install g++ (bash dev.sh env does)"

import ppl_loo as pl  # noqa: E402
from ppl_loo.stan_bridge import StanCacheError, StanCompileError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "parameters { real mu; } model { mu ~ normal(0, 1) }"  # missing ';'
VALID = "parameters { real mu; }\nmodel { mu ~ normal(0, 1); }\n"
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
SETTINGS = {"chains": 2, "draws": 300, "warmup": 300}


def _with_cache(path, fn):
    old = os.environ.get("PPL_LOO_STAN_CACHE")
    os.environ["PPL_LOO_STAN_CACHE"] = str(path)
    try:
        return fn()
    finally:
        if old is None:
            del os.environ["PPL_LOO_STAN_CACHE"]
        else:
            os.environ["PPL_LOO_STAN_CACHE"] = old


def _a_file():
    path = Path(tempfile.mkdtemp()) / "not_a_folder"
    path.write_text("")
    return path


def cache_inside_a_file():
    return _with_cache(_a_file() / "stan", lambda: pl.StanModel(VALID, {}))


def cache_is_a_file():
    return _with_cache(_a_file(), lambda: pl.StanModel(VALID, {}))


def shared_cache_mode():
    cache = Path(tempfile.mkdtemp()) / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    try:
        _with_cache(cache, lambda: pl.StanModel(BROKEN, {}))
    except StanCompileError:
        pass
    return os.stat(cache).st_mode & 0o777, sorted(os.listdir(cache))


FOUR = """
import os
import ppl_loo as pl
from ppl_loo.stan_bridge import StanCompileError
try:
    pl.StanModel(os.environ["PROGRAM"], {})
    print("built")
except StanCompileError as err:
    print("StanCompileError:", str(err).replace(chr(10), " "))
"""


def four_broken_compiles():
    """Four processes compile the same broken program into one empty cache at once."""
    cache = Path(tempfile.mkdtemp()) / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PPL_LOO_STAN_CACHE": str(cache),
           "PROGRAM": f"// {uuid.uuid4().hex}\n{BROKEN}"}
    procs = [subprocess.Popen([sys.executable, "-c", FOUR], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(4)]
    return [p.communicate(timeout=600) + (p.returncode,) for p in procs], sorted(os.listdir(cache))


def check_four_broken(value):
    results, left = value
    for out, err, rc in results:
        assert rc == 0 and "FileNotFoundError" not in err, err
        assert out.startswith("StanCompileError:") and "Syntax error in 'model.stan'" in out, (out, err)
    assert left == []  # nothing cached, no lock or temporary folder left


@functools.cache
def normal_fit():
    import jax.scipy.stats as st

    from ppl_loo.sampling import sample_nuts

    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: st.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
    return model, sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)


def refit_with_checkpoint(checkpoint, seed=2):
    model, data = normal_fit()
    return pl.loo(data, model, progressbar=False, refit=[10], random_seed=seed,
                  second_opinions={"refit_options": {**SETTINGS, "checkpoint": checkpoint}})


def garbled_checkpoint():
    path = Path(tempfile.mkdtemp()) / "refits.json"
    path.write_text("{not json")
    return refit_with_checkpoint(str(path))


def foreign_checkpoint():
    """A checkpoint written by a run with another seed: not used, replaced."""
    path = Path(tempfile.mkdtemp()) / "refits.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refit_with_checkpoint(str(path), seed=1)
    return refit_with_checkpoint(str(path), seed=2), path


def closed_form_elpd(i, s=1.0, t0=10.0):
    yi = np.delete(Y, i)
    prec = 1 / t0**2 + len(yi) / s**2
    m = (yi.sum() / s**2) / prec
    var = s**2 + 1 / prec
    return -0.5 * np.log(2 * np.pi * var) - 0.5 * (Y[i] - m) ** 2 / var


def check_foreign(value):
    res, path = value
    e, se = float(res.elpd_i.values[10]), float(res.mcse_elpd_i.values[10])
    assert bool(res.refit.values[10]) and abs(e - closed_form_elpd(10)) <= 4 * se + 0.01, (e, se)
    assert '"10"' in path.read_text()  # the checkpoint now holds this run's refit


ROWS = [
    Row("pl.StanModel", "files", "cache folder inside a regular file", cache_inside_a_file, error=StanCacheError,
        says=("not_a_folder/stan", "PPL_LOO_STAN_CACHE", "writable")),
    Row("pl.StanModel", "files", "cache path is a regular file", cache_is_a_file, error=StanCacheError,
        says=("not_a_folder is not a folder", "PPL_LOO_STAN_CACHE")),
    Row("pl.StanModel", "files", "broken program", lambda: _with_cache(tempfile.mkdtemp(), lambda: pl.StanModel(
        BROKEN, {})), error=StanCompileError, says=("stanc failed", "Syntax error in 'model.stan'", "line 1")),
    Row("pl.StanModel", "overwrite and escaping", "shared (0777) cache folder is made private",
        shared_cache_mode, check=lambda v: (v[0] == 0o700 and v[1] == []) or pytest.fail(str(v)), warns=None),
    Row("pl.StanModel", "duplicates", "four processes compile the same broken program", four_broken_compiles,
        check=check_four_broken, warns=None, regression=True),
    Row("pl.loo (refit)", "options", "checkpoint is not a path",
        lambda: refit_with_checkpoint(3), error=ValueError, says=("checkpoint=3", "file path")),
    Row("pl.loo (refit)", "files", "garbled checkpoint file", garbled_checkpoint, error=ValueError,
        says=("refits.json", "not a checkpoint", "delete it")),
    Row("pl.loo (refit)", "mismatched data and results", "checkpoint of another run (other seed)",
        foreign_checkpoint, check=check_foreign, warns=UserWarning, says=("holds refits of other draws", "not used")),
]


@params(ROWS)
def test_row(row):
    check_row(row)
