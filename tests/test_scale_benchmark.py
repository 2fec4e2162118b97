"""The scale benchmark (``benchmarks/scale.py``) in its reduced mode, end to end, so that it cannot rot.

Runs ``benchmarks/scale.py --reduced`` (n = 10^3 and 10^4, S = 400, the stores written to zarr chunk by chunk,
every measurement in its own process) into a temporary directory and checks, with known answers:

- the stored log-likelihood is the Bernoulli-logit log density of the stored draws, X and y (closed form);
- ``arviz_stats.loo`` summed over chunks of observations equals ``arviz_stats.loo`` on the whole loaded array
  (n = 10^3: the benchmark's bounded-memory reference is the real thing);
- ``pl.loo`` on the lazily opened zarr DataTree equals ``arviz_stats.loo`` (elpd, se, p, every elpd_i to 1e-8),
  and (n = 10^3) ``pl.loo`` on the same tree loaded;
- ``pl.loo_subsample`` equals ``arviz_stats.loo_subsample`` on the same observations (to 1e-8);
- the adaptive rows ran with 1 and 2 dask workers and give the same numbers;
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
SCRIPT = ROOT / "benchmarks" / "scale.py"
SIZES = ("1000", "10000")
MEASURED = ("wall_s", "peak_rss_gb", "peak_tree_rss_gb", "peak_increase_gb", "elpd", "se", "p",
            "load_average_before", "load_average_after")


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    base = tmp_path_factory.mktemp("scale")
    out = base / "scale.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--reduced", "--out", str(out), "--data-dir",
                           str(base / "data")],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(out.read_text()), proc.stdout


def test_json_has_every_field(reduced):
    doc, stdout = reduced
    for key in ("settings", "machine", "versions", "design", "data", "runs", "agreement", "targets"):
        assert key in doc, key
    for key in ("cpu_model", "cores_logical", "ram_gb", "gpu", "load_average_at_start"):
        assert key in doc["machine"], key
    for pkg in ("numpy", "jax", "xarray", "dask", "distributed", "zarr", "arviz_stats", "ppl_loo"):
        assert doc["versions"][pkg], pkg
    assert doc["settings"]["sizes"] == [1000, 10000] and doc["settings"]["draws"] == 400
    for n in SIZES:
        d = doc["data"][n]
        assert d["how"] in ("written", "reused") and d["size_gb"] > int(n) * 400 * 8 / 1e9
        assert d["rare_observations"] > 0
        runs = doc["runs"][n]
        assert set(runs) >= {"plain_ours", "plain_arviz_chunked", "plain_ours_memory", "plain_arviz_memory",
                             "subsample_ours", "subsample_arviz_memory", "adaptive_w1", "adaptive_w2"}
        # --reduced: the loaded-whole plain rows and the adaptive rows at n = 10^3 only
        assert all("skipped" not in r for r in runs.values()) if n == "1000" else (
            {k for k, r in runs.items() if "skipped" in r} == {"plain_ours_memory", "plain_arviz_memory",
                                                                "adaptive_w1", "adaptive_w2"})
        for key, r in runs.items():
            if "skipped" in r:
                continue
            # a failing call is an error cell, never a number
            assert "error" not in r, (n, key, r.get("error"))
            for field in MEASURED:
                assert np.isfinite(r[field]), (n, key, field)
        for target in ("memory_below_4gb", "plain_within_1.5x_of_arviz_stats", "throughput_grows_with_workers"):
            assert n in doc["targets"][target], (target, n)
    assert "exponent" in doc["targets"]["time_linear_in_n"]["plain_ours"]
    assert "\ntargets:\n" in stdout and "wrote" in stdout


def test_stored_log_likelihood_is_the_bernoulli_logit_density(reduced):
    import xarray as xr

    doc, _ = reduced
    tree = xr.open_datatree(doc["data"]["1000"]["store"], engine="zarr", chunks={})
    assert tree["log_likelihood"]["y"].chunks is not None  # opened lazily, as the benchmark opens it
    idx = [0, 17, 999]
    post = tree["posterior"]
    beta0 = post["beta0"].values  # (chain, draw)
    beta = post["beta"].values  # (chain, draw, feature)
    X = tree["constant_data"]["X"].values[idx]
    y = tree["observed_data"]["y"].values[idx]
    eta = beta0[..., None] + np.einsum("cdf,of->cdo", beta, X)
    p = 1.0 / (1.0 + np.exp(-eta))
    expected = np.where(y == 1, np.log(p), np.log1p(-p))
    got = tree["log_likelihood"]["y"].isel(obs_id=idx).values
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_arviz_chunk_loop_equals_arviz_on_the_whole_array(reduced):
    doc, _ = reduced
    for n in SIZES[:1]:
        d = doc["agreement"][n]["plain_arviz_chunked vs plain_arviz_memory"]
        for key in ("abs_elpd_diff", "abs_se_diff", "abs_p_diff", "max_abs_elpd_i_diff", "max_abs_pareto_k_diff"):
            assert d[key] <= 1e-10, (n, key, d[key])


def test_plain_pl_loo_on_zarr_agrees_with_arviz_stats(reduced):
    doc, _ = reduced
    for n, pairs in (("1000", ("plain_ours vs plain_arviz_chunked", "plain_ours_memory vs plain_arviz_memory",
                               "plain_ours vs plain_ours_memory")),
                     ("10000", ("plain_ours vs plain_arviz_chunked",))):
        for pair in pairs:
            d = doc["agreement"][n][pair]
            assert "not_compared" not in d, (n, pair, d.get("not_compared"))
            for key in ("abs_elpd_diff", "abs_se_diff", "abs_p_diff", "max_abs_elpd_i_diff"):
                assert d[key] <= 1e-8, (n, pair, key, d[key])
            assert d["max_abs_pareto_k_diff"] <= 1e-6, (n, pair, d["max_abs_pareto_k_diff"])


def test_loo_subsample_agrees_with_arviz_stats(reduced):
    doc, _ = reduced
    for n in SIZES:
        d = doc["agreement"][n]["subsample_ours vs subsample_arviz_memory"]
        assert "not_compared" not in d, (n, d.get("not_compared"))
        for key in ("abs_elpd_diff", "abs_se_diff", "abs_p_diff", "abs_subsampling_se_diff", "max_abs_elpd_i_diff",
                    "max_abs_pareto_k_diff"):
            assert d[key] <= 1e-8, (n, key, d[key])


def test_adaptive_search_same_numbers_with_one_and_two_workers(reduced):
    doc, _ = reduced
    runs = doc["runs"]["1000"]
    for key in ("adaptive_w1", "adaptive_w2"):
        assert runs[key]["searched"] > 0 and runs[key]["obs_per_s"] > 0, key
    assert runs["adaptive_w1"]["searched"] == runs["adaptive_w2"]["searched"]
    d = doc["agreement"]["1000"]["adaptive across worker counts"]
    assert d["max_abs_elpd_diff"] <= 1e-10 and d["max_abs_elpd_i_diff"] <= 1e-10, d
