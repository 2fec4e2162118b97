"""Interrupts and faults: Ctrl-C stops every long path with a clean ``KeyboardInterrupt`` that reaches the
script's top level before the computation finishes, leaving no child process and no half-written cache
entry; concurrent compiles of a valid and of a broken Stan program; a cache folder that cannot be written or
is not private; a library whose recorded hash does not match; refits that resume after an interruption.

Each SIGINT test runs a small script in a subprocess (``interrupt_tools.interrupt_when``), sends SIGINT once
the script reaches the phase (a ``cc1plus`` child, or the phase's progress bar) and checks what happened: the
script was interrupted (``KeyboardInterrupt`` at its top level, exit by SIGINT), the computation did not run
to its end, and nothing was left behind. How fast it stops depends on the machine's load, so no test asserts
a duration: ``benchmarks/interrupts.py`` measures the latencies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import httpstan  # noqa: E402,F401  (stanc and the Stan headers)
import numpy as np
import pytest
from interrupt_tools import ROOT, bar_moved, has_child_named, interrupt_when, printed, processes_mentioning

assert shutil.which("g++") is not None, "these tests compile Stan programs: install g++ (bash dev.sh env does)"

import ppl_loo as pl  # noqa: E402
from ppl_loo.stan_bridge import StanCacheError, StanCompileError  # noqa: E402
from ppl_loo.stan_bridge.compile import build_library  # noqa: E402

BROKEN = "parameters { real mu; } model { mu ~ normal(0, 1) }"  # missing ';' (a stanc syntax error)


def valid_program(token):
    return f"// {token}\nparameters {{ real mu; }}\nmodel {{ mu ~ normal(0, 1); }}\n"


def _stopped(r):
    """The script got SIGINT, raised KeyboardInterrupt at its top level and exited with it."""
    assert r["signalled"], r["output"]
    assert "KeyboardInterrupt" in r["output"], r["output"][-3000:]
    # -2: Python's exit after an unhandled KeyboardInterrupt (not -6 or -11: a crash in the shutdown)
    assert r["returncode"] == -2, (r["returncode"], r["output"][-3000:])
    # the wrapper's ``except KeyboardInterrupt`` printed its line: the interrupt reached the script's top level
    assert r["stop_s"] is not None, r["output"][-3000:]


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
    assert "compiled" not in r["output"].splitlines()  # pl.StanModel never returned
    assert processes_mentioning(str(cache)) == []  # no orphan cc1plus (its arguments name the build folder)
    _entries_complete(cache)
    assert list(cache.iterdir()) == []


PARALLEL_SCRIPT = """
import os, sys
from ppl_loo.stan_bridge import StanCompileError
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
    """Four processes compile the same broken program into one cache: each gets the compile error, none a
    FileNotFoundError (a process must not delete the cache folder while another holds its lock)."""
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


# ----------------------------------------------------------------------------- the Stan-backed search
#: Poisson-lognormal counts (16 observations, 18 parameters, an outlier), sampled with Stan's NUTS in
#: process; every observation searched (adapt="all"): the first batch of 8 observations takes tens of seconds
SEARCH_SCRIPT = """
import os, tempfile, warnings
import numpy as np
import ppl_loo as pl
from ppl_loo.adapters.stan import posterior as _posterior
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv
_check_cancel, _seen = _posterior.StanPosterior._check_cancel, []
def _reporting_check_cancel(self):  # prints CANCELLED once when a host callback aborts on the cancel flag
    try:
        _check_cancel(self)
    except _posterior.CallbackCancelled:
        if not _seen:
            _seen.append(True)
            print("CANCELLED", flush=True)
        raise
_posterior.StanPosterior._check_cancel = _reporting_check_cancel
rng = np.random.default_rng(1)
N = 16
y = rng.poisson(np.exp(1.0 + 0.8 * rng.normal(size=N)))
y[3] = 60
data = {"N": N, "y": y}
prog = os.path.join(os.environ["ROOT"], "stan_models", "poisson_lognormal.stan")
sm = pl.StanModel(prog, data, sampler=True)
paths, _ = sample_cmdstan_csv(sm, tempfile.mkdtemp(), chains=4, random_seed=3, num_warmup=300, num_samples=250)
tree = pl.from_cmdstan([str(p) for p in paths])
stan = pl.StanModel(prog, data)
warnings.simplefilter("ignore")
print("SEARCH", flush=True)
# the flows, PMM and their mixtures in one stage (no quick stage first): the signal lands in a batch
res = pl.loo(tree, stan, progressbar=True, search={"adapt": "all", "transforms": ("kl", "var", "ll", "pmm1", "pmm2",
                                                                                  "newton_mix", "pmm1_mix",
                                                                                  "pmm2_mix")})
print("DONE", flush=True)
"""


def test_sigint_during_stan_search():
    """Ctrl-C while a batch of the search runs in XLA and Stan's native code (where Python's handler cannot
    run): KeyboardInterrupt reaches the script, and the batch is aborted through the model's cancel flag."""
    # 0.4 s after the bar moves: inside the next batch (about a second per observation with warm caches), before the
    # batch's last host callback
    r = interrupt_when(SEARCH_SCRIPT, bar_moved("adaptive LOO"), after_s=0.4, timeout_s=900, env={"ROOT": str(ROOT)})
    assert "DONE" not in r["output"]
    _stopped(r)
    # the host callbacks saw the cancel flag and raised: the batch was aborted, not left running until its end
    assert "CANCELLED" in r["output"], r["output"][-3000:]  # (the progress bar's line may precede it)


#: the same search through the command line: ``ppl-loo loo`` on the CSV files; Ctrl-C must end it with one line,
#: without the ``jax.pure_callback failed`` / ``CallbackCancelled`` tracebacks or float64 warnings that the
#: aborted callbacks could print after it
CLI_SEARCH_SCRIPT = """
import json, os, sys, tempfile
import numpy as np
import ppl_loo as pl
from ppl_loo.cli import main
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv
rng = np.random.default_rng(1)
N = 40
y = rng.poisson(np.exp(1.0 + 0.8 * rng.normal(size=N)))
y[3] = 60
data = {"N": N, "y": y.tolist()}
work = tempfile.mkdtemp()
with open(os.path.join(work, "data.json"), "w") as f:
    json.dump(data, f)
prog = os.path.join(os.environ["ROOT"], "stan_models", "poisson_lognormal.stan")
sm = pl.StanModel(prog, data, sampler=True)
sample_cmdstan_csv(sm, os.path.join(work, "csv"), chains=4, random_seed=3, num_warmup=300, num_samples=500)
print("CLI", flush=True)
sys.exit(main(["loo", prog, "--data", os.path.join(work, "data.json"), os.path.join(work, "csv"), "--mixture",
               "off", "--smc", "off"]))
"""


def test_sigint_during_cli_search_is_one_line():
    r = interrupt_when(CLI_SEARCH_SCRIPT, printed("adaptive LOO:"), after_s=2.0, timeout_s=900, env={"ROOT": str(ROOT)})
    out = r["output"]
    assert r["signalled"], out[-3000:]
    assert r["returncode"] == 130, (r["returncode"], out[-3000:])  # 128 + SIGINT, and the CSV table never printed
    assert "elpd_loo" not in out, out[-3000:]
    assert "ppl-loo: interrupted" in out, out[-3000:]
    after = out[out.index("ppl-loo: interrupted") + len("ppl-loo: interrupted"):]
    assert after.strip() == "", after[:3000]  # nothing after the one line: no traceback, no warning
    assert "Traceback" not in out and "CallbackCancelled" not in out, out[-3000:]


# ----------------------------------------------------------------------------- refits
REFIT_SCRIPT = """
import warnings
import numpy as np
import jax.scipy.stats as st
import ppl_loo as pl
from ppl_loo.sampling import sample_nuts
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0),
                    lambda v: st.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
warnings.simplefilter("ignore")
# about 12 s of refits: at the default 500 draws they can end in 3 s
res = pl.loo(data, model, progressbar=True, refit=list(range(12)), random_seed=1,
             second_opinions={"refit_options": {"draws": 100000}})
print("DONE", flush=True)
"""


def test_sigint_during_refits():
    """The JAX model's refits run batched (one vectorized BlackJAX run in a worker thread): Ctrl-C stops it."""
    r = interrupt_when(REFIT_SCRIPT, printed("refit:"), after_s=3.0, timeout_s=600)
    assert "DONE" not in r["output"]
    _stopped(r)


PYMC_REFIT_SCRIPT = """
import warnings
import numpy as np
import pymc as pm
import ppl_loo as pl
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
with pm.Model() as model:
    mu = pm.Normal("mu", 0.0, 10.0)
    pm.Normal("y", mu, 1.0, observed=Y)
    idata = pm.sample(500, tune=300, chains=2, cores=1, random_seed=3, progressbar=False,
                      idata_kwargs={"log_likelihood": True})
warnings.simplefilter("ignore")
# pm.sample, one refit at a time
res = pl.loo(idata, model, progressbar=True, refit=list(range(12)), random_seed=1,
             second_opinions={"refit_options": {"draws": 20000, "warmup": 500, "batched": False}})
print("DONE", flush=True)
"""


def test_sigint_during_pymc_refits():
    """pm.sample catches Ctrl-C and returns the draws it has; the refit must not go on with them (a refit from
    a truncated run would be a wrong number): KeyboardInterrupt reaches the script within the limit."""
    r = interrupt_when(PYMC_REFIT_SCRIPT, printed("refit:"), after_s=3.0, timeout_s=600)
    assert "DONE" not in r["output"]
    _stopped(r)


STAN_REFIT_SCRIPT = f"""
import warnings
import numpy as np
import ppl_loo as pl
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv
import tempfile
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
data = {{"N": len(Y), "y": Y, "sigma": 1.0, "mu0": 0.0, "tau0": 10.0}}
program = "{ROOT / 'stan_models' / 'normal_known_sigma.stan'}"
sm = pl.StanModel(program, data, sampler=True)
paths, _ = sample_cmdstan_csv(sm, tempfile.mkdtemp(), chains=4, random_seed=11, num_warmup=300, num_samples=500)
tree = pl.from_cmdstan([str(p) for p in paths])
warnings.simplefilter("ignore")
res = pl.loo(tree, pl.StanModel(program, data), progressbar=True, refit=list(range(12)), random_seed=3,
             second_opinions={{"refit_options": {{"chains": 2, "draws": 1000000, "warmup": 300}}}})
print("DONE", flush=True)
"""


def test_sigint_during_stan_refits():
    """A Stan refit's chain runs in native code; the library's own SIGINT handler stops it at the next
    iteration (Stan's interrupt callback), and KeyboardInterrupt reaches the script within the limit."""
    r = interrupt_when(STAN_REFIT_SCRIPT, printed("refit:"), after_s=3.0, timeout_s=900)
    assert "DONE" not in r["output"]
    assert "interrupted on chain" in r["output"], r["output"][-3000:]
    _stopped(r)


@pytest.fixture(scope="module")
def normal_fit():
    import jax.scipy.stats as st

    from ppl_loo.sampling import sample_nuts

    y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: st.norm.logpdf(y, v["mu"], 1.0), obs_dims=("obs",), observed=y)
    return model, sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)


class Interrupted(KeyboardInterrupt):
    pass


def _counting(monkeypatch, model, fail_at=None):
    """Count ``refit_draws`` calls (observation indices); raise KeyboardInterrupt at call ``fail_at``."""
    calls = []
    cls = type(model)
    real = cls.__dict__.get("_real_refit_draws", cls.refit_draws)
    monkeypatch.setattr(cls, "_real_refit_draws", real, raising=False)

    def refit_draws(self, i, **kw):
        calls.append(i)
        if fail_at is not None and len(calls) == fail_at:
            raise Interrupted
        return real(self, i, **kw)

    monkeypatch.setattr(cls, "refit_draws", refit_draws)  # each pl.loo binds the model's methods anew
    return calls


def test_refits_resume_from_checkpoint(normal_fit, tmp_path, monkeypatch):
    """A refit run interrupted during its second refit, rerun: the first is not redone, and every elpd_i
    equals that of an uninterrupted run with the same seed."""
    model, data = normal_fit
    targets = [10, 0, 5]
    ckpt = tmp_path / "refits.json"
    kw = dict(progressbar=False, refit=targets, random_seed=4)
    settings = {"chains": 2, "draws": 300, "warmup": 300, "batched": False}  # the model's own sampler, per refit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = _counting(monkeypatch, model, fail_at=2)  # Ctrl-C during the second refit
        with pytest.raises(KeyboardInterrupt):
            pl.loo(data, model, **kw, second_opinions={"refit_options": {**settings, "checkpoint": str(ckpt)}})
        assert calls == [10, 0] and ckpt.exists()
        calls = _counting(monkeypatch, model)
        resumed = pl.loo(data, model, **kw, second_opinions={"refit_options": {**settings, "checkpoint": str(ckpt)}})
        assert calls == [0, 5]  # observation 10 finished before the interruption: not redone
        calls = _counting(monkeypatch, model)
        whole = pl.loo(data, model, **kw, second_opinions={"refit_options": settings})
        assert calls == targets
    np.testing.assert_array_equal(resumed.elpd_i.values, whole.elpd_i.values)
    np.testing.assert_array_equal(resumed.refit.values, whole.refit.values)
    assert sorted(resumed.refit_info) == sorted(targets)
    assert list(tmp_path.iterdir()) == [ckpt]  # no temporary file left
    # a checkpoint of other settings (another seed) is not used, and a warning says so
    calls = _counting(monkeypatch, model)
    with pytest.warns(UserWarning, match="holds refits of other draws"):
        pl.loo(data, model, progressbar=False, refit=[0], random_seed=5,
               second_opinions={"refit_options": {**settings, "checkpoint": str(ckpt)}})
    assert calls == [0]


def test_batched_refits_resume_from_checkpoint(normal_fit, tmp_path):
    """Batched refits write the checkpoint after each batch; a rerun with one more target reads the finished ones
    (the same records, not redone) and refits only the new one, which agrees with the same target refit in an
    uninterrupted run within Monte Carlo error."""
    model, data = normal_fit
    ckpt = tmp_path / "refits.json"
    settings = {"chains": 2, "draws": 300, "warmup": 300}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = pl.loo(data, model, progressbar=False, refit=[10, 0], random_seed=4,
                       second_opinions={"refit_options": {**settings, "checkpoint": str(ckpt)}})
        more = pl.loo(data, model, progressbar=False, refit=[10, 0, 5], random_seed=4,
                      second_opinions={"refit_options": {**settings, "checkpoint": str(ckpt)}})
        whole = pl.loo(data, model, progressbar=False, refit=[10, 0, 5], random_seed=4,
                       second_opinions={"refit_options": settings})
    for i in (10, 0):
        assert more.refit_info[i] == first.refit_info[i]  # read back, not redone (its "seconds" too)
        assert more.elpd_i.values[i] == first.elpd_i.values[i]
    warm = "BlackJAX NUTS, warm-started, step size adapted"
    assert more.refit_info[5]["sampler"] == f"{warm}, one batched run of 1 refit"
    assert whole.refit_info[5]["sampler"] == f"{warm}, one batched run of 3 refits"
    e, s = more.elpd_i.values[5], more.mcse_elpd_i.values[5]
    e2, s2 = whole.elpd_i.values[5], whole.mcse_elpd_i.values[5]
    assert abs(e - e2) <= 4 * np.hypot(s, s2) + 1e-3
    assert list(tmp_path.iterdir()) == [ckpt]


def test_refit_checkpoint_must_be_a_path(normal_fit):
    model, data = normal_fit
    with pytest.raises(ValueError, match="checkpoint=3 must be a file path"):
        pl.loo(data, model, progressbar=False, refit=[0], random_seed=5,
               second_opinions={"refit_options": {"checkpoint": 3}})


def test_a_cancelled_host_callback_logs_no_traceback(caplog):
    """JAX logs each exception of a host callback with its traceback; the planned stop after Ctrl-C
    (``CallbackCancelled``) is dropped from that log, any other exception still reaches it."""
    import jax
    import jax.numpy as jnp

    from ppl_loo.adapters.stan.posterior import CallbackCancelled

    def run(exc):
        def cb(x):
            raise exc
        f = jax.jit(lambda x: jax.pure_callback(cb, jax.ShapeDtypeStruct((), jnp.float32), x))
        caplog.clear()
        with pytest.raises(Exception):
            f(1.0)
        return [r for r in caplog.records if r.name == "jax._src.callback"]

    with caplog.at_level("ERROR", logger="jax._src.callback"):
        assert run(CallbackCancelled("stop")) == []
        assert len(run(ValueError("a real failure"))) == 1
