"""The latency benchmark (``benchmarks/latency.py``) in its reduced mode, end to end, so that it cannot rot.

Runs ``benchmarks/latency.py --reduced`` (the normal-outlier PyMC model, 4 x 500 draws; ``pl.loo`` in a fresh process
with an empty XLA compilation cache, again in that process, and in a second fresh process with the filled cache) and
checks, with known answers:

- the compilation cache changes no number: ``elpd`` and every ``elpd_i`` are identical (to 1e-9) in the cold call,
  the compiled second call and the warm process, on the same draws with the same seed;
- ``pl.loo``'s elpd equals the exact LOO (quadrature over the parameters) within its Monte Carlo error, observation
  by observation, and is within two SEs of ``arviz_stats.loo`` on the same draws;
- the cold process filled the XLA cache the warm one read (the derived Stan programs' cache:
  ``tests/test_cli_sample.py``; the full run measures the Stan models);
- the quadratures of both known answers (the normal model's and the negative binomial's) are converged;
- the JSON has every field the table is built from. Timings are recorded, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "latency.py"

pytest.importorskip("pymc")
pytest.importorskip("httpstan")

TIMES = ("fit_s", "cold_s", "compiled_s", "warm_s", "compile_s", "cache_saves_s", "cold_over_fit", "warm_over_fit",
         "arviz_loo_s", "arviz_mm_s")


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("latency") / "latency.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--reduced", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    doc = json.loads(out.read_text())
    return {row["model"]: row for row in doc["models"]}, doc, proc.stdout


def test_json_has_every_field(reduced):
    rows, doc, stdout = reduced
    assert doc["mode"] == "reduced" and set(rows) == {"normal_outlier"}
    for name, row in rows.items():
        assert row["draws_per_chain"] == 500 and row["chains"] == 4
        assert row["n"] == {"normal_outlier": 30, "neg_binomial": 40}[name]
        for key in TIMES:
            assert np.isfinite(row["summary"][key]) and (key == "compile_s" or row["summary"][key] >= 0), (name, key)
        assert len(row["python"]["cold"]["calls"]) == 2 and len(row["python"]["warm"]["calls"]) == 1
        assert "cli" not in row  # --reduced: no command line
    assert "cold/fit" in stdout and "wrote" in stdout


def test_the_cache_changes_no_number(reduced):
    rows, _, _ = reduced
    for name, row in rows.items():
        calls = [*row["python"]["cold"]["calls"], *row["python"]["warm"]["calls"]]
        ref = np.asarray(calls[0]["elpd_i"])
        assert len(ref) == row["n"]
        for call in calls[1:]:
            np.testing.assert_allclose(call["elpd_i"], ref, rtol=0, atol=1e-9, err_msg=name)
            assert abs(call["elpd"] - calls[0]["elpd"]) <= 1e-9, name
        assert row["summary"]["max_abs_diff_elpd_across_modes"] <= 1e-9


def test_the_caches_were_filled_and_read(reduced):
    rows, _, _ = reduced
    for name, row in rows.items():
        cold, warm = row["python"]["cold"], row["python"]["warm"]
        assert cold["xla_cache_files"] > 0, name  # the empty folder was written by the cold process
        assert warm["xla_cache_files"] >= cold["xla_cache_files"], name


@pytest.mark.parametrize("name, tol_total, tol_i", [("normal_outlier", 0.15, 0.1)])
def test_elpd_is_the_exact_loo(reduced, name, tol_total, tol_i):
    """Exact LOO by quadrature (the script's ``exact_normal_loo`` / ``exact_nb_loo``, independent of ppl_loo); plain
    PSIS misses it by several nats on the extreme observation, ``pl.loo`` must not."""
    rows, _, _ = reduced
    row = rows[name]
    exact = np.asarray(row["exact_elpd_i"])
    first = row["python"]["cold"]["calls"][0]
    assert abs(first["elpd"] - exact.sum()) < tol_total, (first["elpd"], exact.sum())
    np.testing.assert_allclose(first["elpd_i"], exact, rtol=0, atol=tol_i)
    plain = row["python"]["cold"]["arviz"]["loo"]
    assert abs(plain["elpd"] - exact.sum()) > 2.0  # the extreme observation: plain PSIS is far off (k > 0.7)
    assert abs(first["elpd"] - plain["elpd"]) < 2 * plain["se"]


def test_exact_loo_by_quadrature_is_converged():
    """The quadrature of the known answer: a wider, finer grid changes the exact elpd by less than 1e-3."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("latency_script", SCRIPT)
    latency = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(latency)
    y = latency.normal_outlier_data()
    assert abs(latency.exact_normal_loo(y, points=401).sum() - latency.exact_normal_loo(y).sum()) < 1e-3
    assert abs(latency.exact_nb_loo(points=121, width=20.0).sum() - latency.exact_nb_loo(points=101).sum()) < 1e-3
