"""One measured call of ``benchmarks/scale.py``, run in a fresh process so that its peak memory is its own.

    python benchmarks/scale_tasks.py TASK SPEC_JSON OUT_JSON

``SPEC_JSON`` holds the store path and the task's settings. The process imports everything, opens the store
lazily (``xr.open_datatree(path, engine="zarr", chunks={})``), reads its resident memory (the baseline), runs the
measured call once, and writes to ``OUT_JSON``: the wall time of the call, ``ru_maxrss`` (the process's peak) and
the peak minus the baseline, the estimates, and the pointwise arrays to an ``.npz`` next to it (for the agreement
checks of the driver). An exception is written as ``{"error": "<type>: <message>"}``: a failing call is a cell
of the table, never a number.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_NUM_THREADS", "2")


def rss_bytes():
    import psutil

    return psutil.Process().memory_info().rss


def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def open_tree(path):
    import xarray as xr

    return xr.open_datatree(path, engine="zarr", chunks={})


def summary(res):
    """elpd, se, p and the pointwise elpd_i / pareto_k of an ELPDData (ours or arviz_stats's)."""
    out = {"elpd": float(res.elpd), "se": float(res.se), "p": float(res.p)}
    for key in ("subsampling_se", "subsample_size"):
        v = getattr(res, key, None)
        if v is not None:
            out[key] = float(v)
    arrays = {}
    for key in ("elpd_i", "pareto_k"):
        v = getattr(res, key, None)
        if v is not None:
            arrays[key] = np.asarray(v).ravel()
    return out, arrays


# ---------------------------------------------------------------------------------------------- plain PSIS-LOO
def plain_ours(tree, spec):
    import ppl_loo as pl

    return pl.loo(tree, progressbar=False)


def plain_ours_memory(tree, spec):
    """``pl.loo`` on the tree loaded into memory (the in-memory path, for reference where it fits)."""
    import ppl_loo as pl

    return pl.loo(tree.load(), progressbar=False)


def plain_arviz_lazy(tree, spec):
    """``arviz_stats.loo`` on the lazily opened tree as it is."""
    import arviz_stats as azs

    return azs.loo(tree, pointwise=True)


def plain_arviz_memory(tree, spec):
    """``arviz_stats.loo`` on the tree loaded into memory (what an arviz_stats user does where the lazy call fails)."""
    import arviz_stats as azs

    return azs.loo(tree.load(), pointwise=True)


class ChunkedELPD:
    """The totals of ``arviz_stats.loo`` results on consecutive chunks of observations, summed as arviz_stats's
    ``loo_summary`` does (``se = sqrt(n var(elpd_i, ddof=1))``, ``p`` additive)."""

    def __init__(self, elpd_i, pareto_k, p):
        n = elpd_i.size
        self.elpd_i, self.pareto_k = elpd_i, pareto_k
        self.elpd = float(np.sum(elpd_i))
        self.se = float(np.sqrt(n * np.var(elpd_i, ddof=1)))
        self.p = float(p)


def plain_arviz_chunked(tree, spec):
    """``arviz_stats.loo`` on one chunk of observations at a time (each loaded, with the whole posterior), summed."""
    import arviz_stats as azs
    import xarray as xr

    posterior = tree["posterior"].to_dataset().load()
    ll = tree["log_likelihood"].to_dataset()
    n = ll.sizes["obs_id"]
    step = int(spec["chunk_obs"])
    elpd_i, khat, p = [], [], 0.0
    for lo in range(0, n, step):
        part = xr.DataTree.from_dict({"posterior": posterior,
                                      "log_likelihood": ll.isel(obs_id=slice(lo, lo + step)).load()})
        r = azs.loo(part, pointwise=True)
        elpd_i.append(np.asarray(r.elpd_i).ravel())
        khat.append(np.asarray(r.pareto_k).ravel())
        p += float(r.p)
    return ChunkedELPD(np.concatenate(elpd_i), np.concatenate(khat), p)


# ---------------------------------------------------------------------------------------------- subsampling LOO
def subsample_indices(n, m, seed):
    return np.sort(np.random.default_rng(seed).choice(n, size=min(m, n), replace=False))


def subsample_ours(tree, spec):
    import ppl_loo as pl

    idx = subsample_indices(tree["log_likelihood"].sizes["obs_id"], spec["observations"], spec["seed"])
    return pl.loo_subsample(tree, observations=idx, approximation="lpd", estimator="diff_srs")


def subsample_arviz(tree, spec):
    import arviz_stats as azs

    idx = subsample_indices(tree["log_likelihood"].sizes["obs_id"], spec["observations"], spec["seed"])
    return azs.loo_subsample(tree, observations=idx, method="lpd", pointwise=True)


def subsample_arviz_memory(tree, spec):
    import arviz_stats as azs

    idx = subsample_indices(tree["log_likelihood"].sizes["obs_id"], spec["observations"], spec["seed"])
    return azs.loo_subsample(tree.load(), observations=idx, method="lpd", pointwise=True)


# ---------------------------------------------------------------------------------------------- adaptive search
def adaptive(tree, spec):
    """``pl.loo(data, model)`` with ``pl.models.LogisticRegression``, in-process (workers = 0) or with a
    ``dask.distributed`` ``LocalCluster`` of ``workers`` single-threaded worker processes (``client=``).

    Called twice: the first call includes compiling the search (on every worker); the second, timed as
    ``wall_s``, reuses what the first compiled where the implementation caches it."""
    import ppl_loo as pl

    X = np.asarray(tree["constant_data"]["X"].values)
    y = np.asarray(tree["observed_data"]["y"].values)
    model = pl.models.LogisticRegression(X, y)
    workers = int(spec["workers"])
    transforms = spec.get("transforms", "all")
    kwargs = {"progressbar": False,
              "search": {"transforms": transforms if isinstance(transforms, str) else tuple(transforms)}}
    cluster = client = None
    try:
        if workers:
            from distributed import Client, LocalCluster

            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
            kwargs["compute"] = {"client": client}
        t0 = time.perf_counter()
        pl.loo(tree, model, **kwargs)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = pl.loo(tree, model, **kwargs)
        warm = time.perf_counter() - t0
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    searched = int(np.asarray(res.searched).sum())
    res.bench_extra = {"cold_wall_s": cold, "warm_wall_s": warm, "searched": searched,
                       "adapted": int(np.sum(np.asarray(res.transform) != "psis")),
                       "doubtful": int(np.asarray(res.doubtful).sum())}
    return res


TASKS = {f.__name__: f
         for f in (plain_ours, plain_ours_memory, plain_arviz_lazy, plain_arviz_memory, plain_arviz_chunked,
                                  subsample_ours, subsample_arviz, subsample_arviz_memory, adaptive)}


def main(task, spec_json, out_json):
    spec = json.loads(spec_json)
    out = Path(out_json)
    record = {"task": task}
    try:
        # what the task needs, imported before the baseline (an arviz_stats row does not pay for JAX)
        import arviz_stats  # noqa: F401

        if "ours" in task or task == "adaptive":
            import ppl_loo  # noqa: F401
        if spec.get("workers"):
            import distributed  # noqa: F401

        tree = open_tree(spec["store"])
        base = rss_bytes()
        t0 = time.perf_counter()
        res = TASKS[task](tree, spec)
        wall = time.perf_counter() - t0
        peak = max_rss_bytes()
        record.update({"wall_s": wall, "peak_rss_gb": peak / 1e9, "baseline_rss_gb": base / 1e9,
                       "peak_increase_gb": (peak - base) / 1e9})
        values, arrays = summary(res)
        record.update(values)
        extra = getattr(res, "bench_extra", None)
        if extra:
            record.update(extra)
            record["wall_s"] = extra["warm_wall_s"]
        if arrays:
            np.savez(out.with_suffix(".npz"), **arrays)
    except BaseException as err:  # noqa: BLE001 - every failure is reported as a cell of the table
        lines = traceback.format_exception_only(type(err), err)
        record["error"] = " ".join(lines[-1].split())[:400]
        record["traceback"] = traceback.format_exc()[-3000:]
    out.write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:4])
