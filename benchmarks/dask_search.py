"""Throughput of the adaptive search on a ``dask.distributed`` LocalCluster (``pl.loo(..., compute={"client": ...})``).

A logistic regression (``pl.models.LogisticRegression``, n observations, 2 x S/2 NUTS draws) with
``adapt="all"``: every observation searched. Rows: this process (``client=False``), then a LocalCluster
of 1, 2, ... worker processes of one thread each; for each, a cold run (the workers build and compile the
search) and a warm one (cached on the workers). Observations per second = searched / wall time. Each
distributed result is checked to equal the single-process one exactly.

    python benchmarks/dask_search.py --n 200 --draws 2000 --workers 1 2

Writes ``benchmarks/results/dask_search.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np


def _loo(pl, data, model, client, batch_size):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = pl.loo(data, model, progressbar=False, search={"adapt": "all", "batch_size": batch_size},
                     compute={"client": client})
        return res, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--p", type=int, default=4)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "dask_search.json"))
    args = ap.parse_args()

    import distributed

    import ppl_loo as pl
    from ppl_loo.sampling import sample_nuts

    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.p))
    y = (X @ rng.normal(size=args.p) + rng.normal(size=args.n) > 0).astype(int)
    model = pl.models.LogisticRegression(X, y)
    data = sample_nuts(model, num_chains=2, num_warmup=500, num_samples=args.draws // 2, random_seed=1)
    rows = []
    ref, _ = _loo(pl, data, model, False, args.batch_size)  # compile in this process
    _, t = _loo(pl, data, model, False, args.batch_size)
    rows.append({"where": "this process", "workers": 0, "cold_s": None, "warm_s": t, "obs_per_s": args.n / t})
    for w in args.workers:
        with distributed.LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=":0",
                                      silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as client:
            res, cold = _loo(pl, data, model, client, args.batch_size)
            res2, warm = _loo(pl, data, model, client, args.batch_size)
        same = all(np.array_equal(getattr(ref, k).values, getattr(r, k).values, equal_nan=True)
                   for r in (res, res2) for k in ("elpd_i", "pareto_k", "p_loo_i"))
        rows.append({"where": f"LocalCluster {w} x 1 thread", "workers": w, "cold_s": cold, "warm_s": warm,
                     "obs_per_s": args.n / warm, "identical": bool(same)})
    print(f"n = {args.n} searched observations, S = {args.draws}, batch_size = {args.batch_size}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'where':<28}{'cold s':>9}{'warm s':>9}{'obs/s':>9}  identical")
    for r in rows:
        cold = "" if r["cold_s"] is None else f"{r['cold_s']:.1f}"
        print(f"{r['where']:<28}{cold:>9}{r['warm_s']:>9.1f}{r['obs_per_s']:>9.1f}  {r.get('identical', '')}")
    out = {"n": args.n, "p": args.p, "draws": args.draws, "batch_size": args.batch_size, "cpus": os.cpu_count(),
           "machine": platform.processor() or platform.machine(), "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
