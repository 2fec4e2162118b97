"""The ground-truth suite (``benchmarks/truth``) in its reduced mode: ppl_loo against brute-force refits.

``benchmarks/truth/run.py --reduced`` re-runs the main fits of the suite's cheaper models (real
MCMC: NumPyro, ``pm.sample``, Stan's NUTS; the full run's seeds and settings), runs plain PSIS and
``pl.loo`` on them, and scores both against the *committed* truth of the full run
(``benchmarks/results/truth/<model>.json``: refits of every observation without it, bridge sampling,
exact values where the model has them). It also refits one observation per model afresh, which
must reproduce the committed truth within Monte Carlo error. Known answers asserted per model:

- ppl_loo's mean |error| is no larger than plain PSIS's beyond Monte Carlo error (the mean of
  ``|err_ppl_loo| - |err_plain|`` over observations at most 2 of its SEs);
- no silent failure: no observation off by more than 3 combined Monte Carlo SEs without being
  marked doubtful;
- the fresh refit agrees with the committed one (|z| < 4).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "truth" / "run.py"


def _reduced_models():
    """``REDUCED_MODELS`` of run.py, read without importing it (importing it loads JAX and the problems)."""
    import ast

    for node in ast.parse(SCRIPT.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REDUCED_MODELS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("REDUCED_MODELS not found in " + str(SCRIPT))


REDUCED_MODELS = _reduced_models()


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    cache = tmp_path_factory.mktemp("truth")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--reduced", "--cache", str(cache)], capture_output=True,
                          text=True, cwd=ROOT, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((cache / "reduced" / "summary.json").read_text())


def test_every_reduced_model_ran(summary):
    assert sorted(summary) == sorted(REDUCED_MODELS)
    for name, s in summary.items():
        assert {"plain", "ppl_loo"} <= set(s["table"]), name
        assert s["table"]["ppl_loo"]["n"] == s["table"]["plain"]["n"] > 0


@pytest.mark.parametrize("name", REDUCED_MODELS)
def test_ppl_loo_no_worse_than_plain_and_no_silent_failure(summary, name):
    t = summary[name]["table"]
    # no worse than plain PSIS beyond Monte Carlo error: the mean over observations of
    # |err_ppl_loo| - |err_plain| at most 2 of its SEs (from both methods' pointwise MCSEs)
    assert t["ppl_loo"]["vs_plain"] <= 2.0 * t["ppl_loo"]["vs_plain_se"], t
    assert t["ppl_loo"]["silent_failures"] == 0, t["ppl_loo"]["silent_obs"]


@pytest.mark.parametrize("name", REDUCED_MODELS)
def test_fresh_refit_reproduces_the_committed_truth(summary, name):
    checks = summary[name]["refit_checks"]
    assert checks, name
    for i, c in checks.items():
        assert abs(c["z"]) < 4.0, (name, i, c)
