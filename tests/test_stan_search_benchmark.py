"""``benchmarks/stan_search.py --reduced``: the Stan callbacks' full-model cache changes no number and saves
evaluations.

On ``stan_models/poisson_lognormal.stan`` (a latent effect per observation, so the LOO density is
``log p(theta | y) - log_lik[i]``), ``pl.loo`` runs with the cache (``FULL_CACHE_ENTRIES = 2``) and
without it (0). Known answers: the pointwise ``elpd_i`` are identical (the cache returns the very values a
fresh evaluation gives at the same bytes of draws), and with the cache the bridge evaluates fewer draws (the
full model is evaluated once where the search's full-posterior and LOO callbacks meet at the same draws).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cache_changes_no_number_and_saves_evaluations(tmp_path):
    out = tmp_path / "stan_search.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stan_search.py"), "--reduced", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["models"]["poisson_lognormal"]
    with_c, without = rows["with cache"], rows["without cache"]
    assert with_c["elpd_i"] == without["elpd_i"]
    assert len(with_c["elpd_i"]) == 12
    assert with_c["draws_evaluated"] < 0.9 * without["draws_evaluated"], (with_c, without)
    assert "elpd_i identical with and without the cache: True" in proc.stdout
