"""The second-opinions benchmark (``benchmarks/second_opinions.py``) in its reduced mode, end to end, so it cannot rot.

Runs ``benchmarks/second_opinions.py --reduced`` (the JAX leverage regression of ``tests/gaussian_models.py``:
n = 40, p = 15, two high-leverage outliers, sigma known, so the exact LOO is closed form; 4 x 500 NUTS draws)
and checks with that known answer: plain PSIS is more than a nat off somewhere; ``pl.loo`` with its defaults
(the mixture run where the search leaves something doubtful) leaves no observation doubtful and every
``elpd_i`` within 0.25 nats of the closed form; the JSON has every column of the cost table. Timings are
recorded, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "second_opinions.py"


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("second_opinions") / "second_opinions.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--reduced", "--out", str(out)], capture_output=True,
                          text=True, cwd=ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(out.read_text()), proc.stdout


def test_leverage_row_against_the_closed_form(reduced):
    doc, stdout = reduced
    assert doc["reduced"] is True and len(doc["rows"]) == 1
    row = doc["rows"][0]
    assert row["n"] == 40 and row["draws"] == 2000
    assert row["max_abs_error_plain"] > 1.0  # plain PSIS is measurably off on the leverage points
    assert row["doubtful_after"] == 0
    assert row["max_abs_error_after"] < 0.25
    assert sum(row["evidence"].values()) == 40 and "doubtful" not in row["evidence"]
    for key in ("fit_s", "search_s", "loo_default_s", "mixture_s", "smc_s", "ratio_to_fit_plus_search",
                "opinions_to_fit"):
        assert np.isfinite(row[key]) and row[key] >= 0, key
    assert "ratio_to_fit_plus_search" in stdout and "wrote" in stdout
