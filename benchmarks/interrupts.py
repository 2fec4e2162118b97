"""Ctrl-C latency in each long-running path: signal to ``KeyboardInterrupt`` and signal to exit.

    PYTHONPATH=. .venv/bin/python benchmarks/interrupts.py [--repeats N]

Each path runs a small script in a subprocess (the scripts of ``tests/reliability/test_interrupts.py``
plus a pure-JAX search), sends SIGINT once it reaches the phase, and measures with ``time.monotonic``:

- ``stop_s``: signal to the ``KeyboardInterrupt`` at the script's top level (what a user waits for);
- ``exit_s``: signal to the process's exit; it adds the interpreter's shutdown, which for any process
  that imported JAX takes 1-4 s on a loaded machine (``teardown_s``: the same measured for a script
  that imports ppl_loo and ends normally);
- ``left``: processes left behind (a /proc scan for the script's private cache folder, compile only).

Prints a table and writes ``benchmarks/results/interrupts.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from interrupt_tools import bar_moved, has_child_named, interrupt_when, printed, processes_mentioning  # noqa: E402
from test_interrupts import (  # noqa: E402
    COMPILE_SCRIPT,
    PYMC_REFIT_SCRIPT,
    REFIT_SCRIPT,
    SEARCH_SCRIPT,
    STAN_REFIT_SCRIPT,
    valid_program,
)

#: a pure-JAX model with a long search: Poisson-lognormal counts, one latent effect per observation
JAX_SEARCH_SCRIPT = """
import warnings
import numpy as np
import jax.numpy as jnp
import jax.scipy.stats as st
from jax.scipy.special import gammaln
import ppl_loo as pl
from ppl_loo.adapters.jax.bijectors import Exp
from ppl_loo.sampling import sample_nuts
rng = np.random.default_rng(1)
N = 40
y = rng.poisson(np.exp(1.0 + 0.8 * rng.normal(size=N)))
y[3] = 60
yj = np.asarray(y, dtype=float)
def prior(v):
    return st.norm.logpdf(v["mu"], 0, 2) + st.norm.logpdf(v["s"], 0, 1) + np.log(2.0) + jnp.sum(st.norm.logpdf(v["z"]))
def loglik(v):
    eta = v["mu"] + v["s"] * v["z"]
    return yj * eta - jnp.exp(eta) - gammaln(yj + 1)
model = pl.JaxModel({"mu": ((), None), "s": ((), Exp()), "z": ((N,), None)}, prior, loglik,
                    obs_dims=("obs",), observed=yj)
data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
warnings.simplefilter("ignore")
res = pl.loo(data, model, progressbar=True, search={"adapt": "all", "transforms": "all"})
print("DONE", flush=True)
"""

TEARDOWN_SCRIPT = """
import subprocess, sys, time, os
p = subprocess.Popen([sys.executable, "-c", "import ppl_loo, jax.numpy as jnp; jnp.ones(3).sum(); print('end',
flush=True)"],
                     stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
for line in p.stdout:
    if line.startswith("end"):
        t = time.monotonic()
p.wait()
print(time.monotonic() - t)
"""


def paths():
    cache = Path(tempfile.mkdtemp()) / "cache"
    return [
        ("Stan compile (g++/cc1plus)", COMPILE_SCRIPT, has_child_named("cc1plus"), 1.0,
         {"PPL_LOO_STAN_CACHE": str(cache), "PROGRAM": valid_program(uuid.uuid4().hex)}, str(cache)),
        ("Stan-backed adaptive search (first batch compiled)", SEARCH_SCRIPT, bar_moved("adaptive LOO"), 1.0,
         {"ROOT": str(ROOT)}, None),
        ("Stan-backed adaptive search (during XLA compile)", SEARCH_SCRIPT, printed("adaptive LOO"), 3.0,
         {"ROOT": str(ROOT)}, None),
        ("JAX-model adaptive search (first batch compiled)", JAX_SEARCH_SCRIPT, bar_moved("adaptive LOO"), 1.0, {},
         None),
        ("refit (NumPyro refits of a JaxModel)", REFIT_SCRIPT, printed("refit:"), 3.0, {}, None),
        ("refit (Stan's NUTS in the library)", STAN_REFIT_SCRIPT, printed("refit:"), 3.0, {}, None),
        ("refit (pm.sample)", PYMC_REFIT_SCRIPT, printed("refit:"), 3.0, {}, None),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    rows = []
    for name, script, ready, after, env, cache in paths():
        for rep in range(args.repeats):
            r = interrupt_when(script, ready, env=env, after_s=after, timeout_s=1200)
            left = len(processes_mentioning(cache)) if cache else None
            ok = r["signalled"] and "KeyboardInterrupt" in r["output"] and "DONE" not in r["output"]
            rows.append({"path": name, "repeat": rep, "signal_after_phase_s": after, "stop_s": r["stop_s"],
                         "exit_s": r["exit_s"], "returncode": r["returncode"], "clean_keyboardinterrupt": ok,
                         "processes_left": left})
            print(f"{name:40s} stop {r['stop_s'] if r['stop_s'] is None else round(r['stop_s'], 2)!s:>6} s   "
                  f"exit {r['exit_s'] if r['exit_s'] is None else round(r['exit_s'], 2)!s:>6} s   "
                  f"clean={ok} left={left}", flush=True)
    teardown = float(subprocess.run([sys.executable, "-c", TEARDOWN_SCRIPT], capture_output=True, text=True,
                                    env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()[-1])
    print(f"{'interpreter shutdown after import ppl_loo':40s} {teardown:.2f} s (part of every exit_s)")
    out = {"command": "PYTHONPATH=. .venv/bin/python benchmarks/interrupts.py", "machine": platform.node(),
           "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "requirement": "stop_s < 2 s", "teardown_s": teardown, "rows": rows}
    dest = ROOT / "benchmarks" / "results" / "interrupts.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
