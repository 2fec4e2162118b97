"""R ``loo`` 2.10.1's Monte Carlo SEs of ``elpd_loo`` for ``tests/test_mcse_calibration.py``.

R's side is ``reference_mcse.R`` beside this file (R ``loo`` from ``install_r_loo.sh``). The cases are the
log-likelihoods of ``tests/data/r_loo/input.npz`` as ``make_reference.py`` builds them (its ``cases``); R computes,
with ``r_eff = relative_eff(exp(log_lik), chain_id)``, the pointwise ``mcse_elpd_loo`` and ``mcse_loo`` (NA where a
k-hat is above the threshold), written to ``tests/data/r_loo/mcse.npz``; the test needs no R.

    R_LIBS=/work/rlib .venv/bin/python benchmarks/r_loo/make_mcse_reference.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "tests" / "data" / "r_loo"
KEYS = ("r_eff", "elpd_loo_i", "mcse_elpd_loo_i", "pareto_k")


def r_mcse(cases):
    """``({name: {r_eff, elpd_loo_i, mcse_elpd_loo_i, pareto_k, mcse_loo}}, versions)`` from R for
    ``cases = {name: (ll (S, n) chain-major, chains)}``."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, (ll, chains) in cases.items():
            d = Path(tmp) / name
            d.mkdir()
            (d / "meta.json").write_text(json.dumps({"S": ll.shape[0], "n": ll.shape[1], "chains": int(chains)}))
            np.ascontiguousarray(ll, dtype="<f8").tofile(d / "log_lik.bin")
        proc = subprocess.run(["Rscript", str(HERE / "reference_mcse.R"), tmp, *cases], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        out = {}
        for name, (ll, _) in cases.items():
            values = np.fromfile(Path(tmp) / name / "r_mcse.bin", dtype="<f8")
            n = ll.shape[1]
            assert values.size == 4 * n + 1
            out[name] = {key: values[j * n:(j + 1) * n] for j, key in enumerate(KEYS)}
            out[name]["mcse_loo"] = values[-1]
    return out, json.loads(proc.stdout)


def main():
    sys.path.insert(0, str(HERE))
    from make_reference import cases as reference_cases

    inp = np.load(OUT / "input.npz")
    all_cases = reference_cases(inp["mu"], inp["beta_leverage"], inp["beta_logistic"], inp["example_log_lik"])
    got, versions = r_mcse({name: (c["ll"], c["chains"]) for name, c in all_cases.items()})
    np.savez_compressed(OUT / "mcse.npz", **{f"{name}/{key}": value for name, d in got.items()
                                             for key, value in d.items()},
                        versions=json.dumps(versions))
    for name, d in got.items():
        print(f"{name}: mcse_loo {d['mcse_loo']:.6g}")
    print(f"wrote {OUT / 'mcse.npz'} (R {versions['r_version']}, loo {versions['loo_version']})")


if __name__ == "__main__":
    main()
