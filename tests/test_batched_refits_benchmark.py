"""The batched-refits benchmark (``benchmarks/batched_refits.py``) in its reduced mode, end to end, so it cannot rot.

Runs ``benchmarks/batched_refits.py --reduced``: 8 refits of the leverage regression of ``tests/gaussian_models.py``
(n = 40, p = 15, sigma known: exact LOO in closed form), batched and one after the other, and checks them against
that known answer (each within 4 of its Monte Carlo SEs). Timings are recorded, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "batched_refits.py"


def test_reduced_batched_refits_against_the_closed_form(tmp_path):
    out = tmp_path / "batched_refits.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--reduced", "--out", str(out)], capture_output=True,
                          text=True, cwd=ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    doc = json.loads(out.read_text())
    row = doc["row"]
    assert doc["reduced"] is True and row["refits"] == 8
    assert row["sampler"] == "BlackJAX NUTS, warm-started, step size adapted, one batched run of 8 refits"
    assert row["max_abs_z_batched"] <= 4.0 and row["max_abs_z_sequential"] <= 4.0
    assert row["batched_refits_s"] > 0 and row["sequential_refits_s"] > 0
    assert "batched_refits_s" in proc.stdout and f"wrote {out}" in proc.stdout
