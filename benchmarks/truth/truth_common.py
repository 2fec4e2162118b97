"""Paths, settings and small helpers of the ground-truth suite (``benchmarks/truth``).

Two modes:

- ``full``: every observation of every model refit with real MCMC (hours); the per-observation
  truth is written to ``benchmarks/results/truth/<model>.json`` and committed;
- ``reduced``: what CI runs (``tests/test_truth_suite.py``): the main fits of the cheap models, every
  LOO method on them, scored against the *committed* truth, plus a few fresh refits that must
  reproduce the committed truth within Monte Carlo error.

Every stage caches its output under ``benchmarks/.cache/truth/<mode>/<model>/`` (gitignored): the
main fit as ``.npz``, one ``.npz`` per refit. Delete a file to recompute that piece.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STAN_DIR = ROOT / "stan_models"
DEFAULT_CACHE = ROOT / "benchmarks" / ".cache" / "truth"
RESULTS = ROOT / "benchmarks" / "results" / "truth"


def cache_dir(cache, mode, name) -> Path:
    p = Path(cache) / mode / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_json(path):
    return json.loads(Path(path).read_text())


def save_json(path, obj):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(jsonable(obj), indent=1))
    os.replace(tmp, path)


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if np.isfinite(x) else str(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def floats(values):
    """JSON lists back to floats (``"nan"``, ``"inf"`` strings included)."""
    return np.asarray([float(v) for v in values], dtype=float)


def machine_info():
    import platform

    return {"cpu_count": os.cpu_count(), "load_average_1min": os.getloadavg()[0], "platform": platform.platform()}


def truth_value(rec):
    """``(truth, mcse)``: exact where known, else the bridge estimate."""
    if "exact" in rec:
        return float(rec["exact"]), 0.0
    return float(rec["bridge"]), float(rec["bridge_mcse"])
