"""Scale: LOO on a synthetic logistic regression with n = 10^4, 10^5, 10^6 observations stored in zarr.

    .venv/bin/python benchmarks/scale.py                      # n = 10^4, 10^5 (add --sizes 10000 100000 1000000)
    .venv/bin/python benchmarks/scale.py --reduced --out X.json   # what tests/test_scale_benchmark.py runs
    .venv/bin/python benchmarks/scale.py --combine A.json B.json --out benchmarks/results/scale.json

Data (``benchmarks/scale_data.py``): a logistic regression with 10 covariates, a few "rare" covariates that give
about 80 high-k observations at every n, ``S`` draws of the Laplace approximation of the posterior (Newton's method
on the full data, no MCMC), and the log-likelihood array (chain, draw, obs) written to a zarr DataTree store chunk
by chunk, under ``--data-dir`` (reused when present).

Every measurement runs in a fresh process (``benchmarks/scale_tasks.py``) on the store opened lazily
(``xr.open_datatree(store, engine="zarr", chunks={})``): wall time of the call, the process's peak resident memory
(``ru_maxrss``) and its increase over the baseline after imports, and the peak of the whole process tree (the
dask workers included) sampled every 0.1 s from here. A process whose tree passes ``--mem-limit-gb`` or
``--timeout`` is killed and reported as an error. Rows (at every n):

- plain PSIS-LOO: ``pl.loo(data)`` and ``arviz_stats.loo(data)`` on the lazy tree; ``arviz_stats.loo`` on one
  loaded chunk of observations at a time (summed as ``arviz_stats`` sums: the comparison with bounded memory);
  and both on the tree loaded whole (``.load()``), where it fits in ``--mem-limit-gb``;
- subsampling LOO: ``pl.loo_subsample`` and ``arviz_stats.loo_subsample`` (``method="lpd"``, the same
  ``--observations`` indices, drawn with ``--seed``), on the lazy tree and (arviz_stats) loaded;
- the adaptive search: ``pl.loo(data, pl.models.LogisticRegression(X, y))`` in-process (0 workers) and with a
  ``dask.distributed`` ``LocalCluster`` of 1 and 2 worker processes (``client=``); called twice, the second call
  timed; throughput = searched observations per second.

A call that fails is an ``error: ...`` cell, never a number. Prints a table and the scale targets (memory, speed,
throughput), and writes ``benchmarks/results/scale.json`` (machine, versions, settings, every number).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import scale_data  # noqa: E402

PLAIN = ("plain_ours", "plain_arviz_lazy", "plain_arviz_chunked", "plain_ours_memory", "plain_arviz_memory")
SUBSAMPLE = ("subsample_ours", "subsample_arviz", "subsample_arviz_memory")
LABELS = {
    "plain_ours": "pl.loo (lazy)",
    "plain_arviz_lazy": "arviz_stats.loo (lazy)",
    "plain_arviz_chunked": "arviz_stats.loo (chunk loop)",
    "plain_ours_memory": "pl.loo (loaded)",
    "plain_arviz_memory": "arviz_stats.loo (loaded)",
    "subsample_ours": "pl.loo_subsample (lazy)",
    "subsample_arviz": "arviz_stats.loo_subsample (lazy)",
    "subsample_arviz_memory": "arviz_stats.loo_subsample (loaded)",
}
#: pairs whose estimates must agree (ours, reference)
PAIRS = (("plain_ours", "plain_arviz_chunked"), ("plain_ours_memory", "plain_arviz_memory"),
         ("plain_ours", "plain_ours_memory"), ("plain_arviz_chunked", "plain_arviz_memory"),
         ("subsample_ours", "subsample_arviz"), ("subsample_ours", "subsample_arviz_memory"))
MEMORY_TARGET_GB = 4.0
LOADED_PLAIN = ("plain_ours_memory", "plain_arviz_memory")
LOADED_TASKS = (*LOADED_PLAIN, "subsample_arviz_memory")


def adaptive_label(workers):
    return "pl.loo + model, in-process" if workers == 0 else f"pl.loo + model, {workers} dask worker(s)"


# ---------------------------------------------------------------------------------------------- running tasks
def tree_rss(proc):
    """Resident memory of a process and all its descendants, in bytes (0 once it has gone)."""
    import psutil

    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_task(task, spec, workdir, timeout, mem_limit_gb):
    """Run one task in a fresh process (its own session); returns its record with the sampled tree peak."""
    import psutil

    out = Path(workdir) / f"{task}_{spec.get('n')}_{spec.get('workers', '')}.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load_before = os.getloadavg()[0]
    child = subprocess.Popen([sys.executable, str(HERE / "scale_tasks.py"), task, json.dumps(spec), str(out)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True, text=True)
    proc = psutil.Process(child.pid)
    peak, killed, t0 = 0, None, time.perf_counter()
    while child.poll() is None:
        peak = max(peak, tree_rss(proc))
        if peak > mem_limit_gb * 1e9:
            killed = f"killed: the process tree passed --mem-limit-gb {mem_limit_gb:g} GB"
        elif time.perf_counter() - t0 > timeout:
            killed = f"killed: ran past --timeout {timeout:g} s"
        if killed:
            os.killpg(child.pid, 9)
            break
        time.sleep(0.1)
    log = child.communicate()[0]
    record = json.loads(out.read_text()) if out.is_file() and not killed else {"task": task}
    if killed:
        record["error"] = killed
    elif "error" not in record and child.returncode:
        record["error"] = f"the process exited with status {child.returncode}: {log[-300:]}"
    record["peak_tree_rss_gb"] = peak / 1e9
    record["load_average_before"], record["load_average_after"] = load_before, os.getloadavg()[0]
    npz = out.with_suffix(".npz")
    arrays = dict(np.load(npz)) if npz.is_file() and "error" not in record else {}
    return record, arrays


def loaded_fits(n, S, mem_limit_gb):
    """Whether the loaded-whole rows can run: the array plus the working copies arviz_stats / pl.loo make
    (about 3 times the array, measured at n = 10^4) under the limit."""
    return 3.0 * n * S * 8 + 1.5e9 < mem_limit_gb * 1e9


def measure_size(n, args, workdir):
    S = args.draws
    t0 = time.perf_counter()
    path, how = scale_data.generate(args.data_dir, n, S, args.seed, args.chunk_obs)
    data = {"store": str(path), "how": how, "wall_s": time.perf_counter() - t0,
            "size_gb": sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 1e9,
            "rare_observations": len(json.loads(_attr(path, "rare_observations")))}
    print(f"n = {n}: store {how} in {data['wall_s']:.1f} s ({data['size_gb']:.2f} GB): {path}", flush=True)
    spec = {"store": str(path), "n": n, "chunk_obs": args.chunk_obs, "observations": args.observations,
            "seed": args.seed, "transforms": args.transforms}
    jobs = []  # (key, task, spec)
    runs, arrays = {}, {}
    for task in PLAIN + SUBSAMPLE:
        if task in args.skip:
            continue
        if task in LOADED_PLAIN and args.loaded_max_n is not None and n > args.loaded_max_n:
            runs[task] = {"task": task, "skipped": f"n above --loaded-max-n {args.loaded_max_n}"}
            continue
        if task in LOADED_TASKS and not loaded_fits(n, S, args.mem_limit_gb):
            runs[task] = {"task": task, "skipped": f"the loaded array ({n * S * 8 / 1e9:.0f} GB, with working copies "
                                                   f"about three times that) does not fit --mem-limit-gb "
                                                   f"{args.mem_limit_gb:g}"}
            continue
        jobs.append((task, task, spec))
    if "adaptive" not in args.skip:
        for w in args.workers:
            key = f"adaptive_w{w}"
            if args.adaptive_max_n is not None and n > args.adaptive_max_n:
                runs[key] = {"task": "adaptive", "skipped": f"n above --adaptive-max-n {args.adaptive_max_n}"}
            else:
                jobs.append((key, "adaptive", {**spec, "workers": w}))
    from concurrent.futures import ThreadPoolExecutor

    def one(job):
        key, task, sp = job
        return key, run_task(task, sp, workdir, args.timeout, args.mem_limit_gb)

    with ThreadPoolExecutor(max_workers=args.parallel) as pool:  # --parallel 1: one process at a time
        for key, (record, arr) in pool.map(one, jobs):
            runs[key], arrays[key] = record, arr
            _progress(n, LABELS.get(key) or adaptive_label(int(key[len("adaptive_w"):])), record)
    plain = runs.get("plain_ours", {})
    for key, r in runs.items():
        if key.startswith("adaptive_w") and "error" not in r and "skipped" not in r:
            r["obs_per_s"] = r["searched"] / r["wall_s"]
            if "error" not in plain and "wall_s" in plain and r["wall_s"] > plain["wall_s"]:
                r["obs_per_s_search"] = r["searched"] / (r["wall_s"] - plain["wall_s"])
    runs = {k: runs[k] for k in [*PLAIN, *SUBSAMPLE, *(f"adaptive_w{w}" for w in args.workers)] if k in runs}
    return data, runs, agreement(runs, arrays)


def _attr(path, name):
    import xarray as xr

    return xr.open_datatree(path, engine="zarr", chunks={}).attrs[name]


def _progress(n, label, r):
    if "error" in r:
        print(f"  {label:<40} error: {r['error'][:150]}", flush=True)
    else:
        print(f"  {label:<40} {r['wall_s']:9.2f} s  peak {r['peak_tree_rss_gb']:6.2f} GB  elpd {r['elpd']:.6f}",
              flush=True)


def agreement(runs, arrays):
    """|differences| of elpd, se, p and the pointwise elpd_i, pareto_k between the pairs that both ran."""
    out = {}
    for a, b in PAIRS:
        ra, rb = runs.get(a, {}), runs.get(b, {})
        key = f"{a} vs {b}"
        missing = [f"{t}: {r.get('error') or r.get('skipped') or 'not run'}" for t, r in ((a, ra), (b, rb))
                   if "elpd" not in r]
        if missing:
            out[key] = {"not_compared": "; ".join(missing)[:400]}
            continue
        d = {f"abs_{k}_diff": abs(ra[k] - rb[k]) for k in ("elpd", "se", "p", "subsampling_se") if k in ra and k in rb}
        for k in ("elpd_i", "pareto_k"):
            xa, xb = arrays.get(a, {}).get(k), arrays.get(b, {}).get(k)
            if xa is not None and xb is not None and xa.shape == xb.shape:
                both = np.isfinite(xa) & np.isfinite(xb)  # a subsample's pointwise values are NaN off the subsample
                if np.array_equal(np.isnan(xa), np.isnan(xb)) and both.any():
                    d[f"max_abs_{k}_diff"] = float(np.max(np.abs(xa[both] - xb[both])))
                else:
                    d[f"{k}_nan_pattern_differs"] = True
        out[key] = d
    adaptive = {k: r for k, r in runs.items() if k.startswith("adaptive_w") and "elpd" in r}
    if len(adaptive) > 1:
        keys = sorted(adaptive)
        out["adaptive across worker counts"] = {
            "compared": keys, "max_abs_elpd_diff": max(abs(adaptive[k]["elpd"] - adaptive[keys[0]]["elpd"])
                                                       for k in keys),
            "max_abs_elpd_i_diff": max((float(np.max(np.abs(arrays[k]["elpd_i"] - arrays[keys[0]]["elpd_i"])))
                                        for k in keys if "elpd_i" in arrays.get(k, {})), default=None)}
    return out


# ---------------------------------------------------------------------------------------------- targets and table
def fit_exponent(ns, ts):
    """Slope of log(time) on log(n) by least squares (1 = linear)."""
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def targets(sizes, runs):
    adaptive_rows = sorted({k for n in sizes for k in runs[str(n)] if k.startswith("adaptive")})
    ours = ["plain_ours", "subsample_ours"] + adaptive_rows
    out = {"memory_below_4gb": {}, "plain_within_1.5x_of_arviz_stats": {}, "throughput_grows_with_workers": {}}
    for n in sizes:
        rn = runs[str(n)]
        mem = {}
        for t in ours:
            r = rn.get(t, {"skipped": "not run"})
            mem[t] = ("skipped" if "skipped" in r else "error" if "error" in r or "peak_tree_rss_gb" not in r
                      else ("pass" if r["peak_tree_rss_gb"] < MEMORY_TARGET_GB else "FAIL"))
        out["memory_below_4gb"][str(n)] = mem
        a, b = rn.get("plain_ours", {}), rn.get("plain_arviz_chunked", {})
        if "wall_s" in a and "wall_s" in b and "error" not in a and "error" not in b:
            ratio = a["wall_s"] / b["wall_s"]
            out["plain_within_1.5x_of_arviz_stats"][str(n)] = {"ratio": ratio,
                                                               "verdict": "pass" if ratio <= 1.5 else "FAIL"}
        else:
            out["plain_within_1.5x_of_arviz_stats"][str(n)] = {"verdict": "error (a row did not run)"}
        tp = {k: rn[k].get("obs_per_s_search", rn[k].get("obs_per_s")) for k in rn
              if k.startswith("adaptive_w") and k != "adaptive_w0" and "wall_s" in rn[k] and "error" not in rn[k]}
        if len(tp) > 1:
            ks = sorted(tp, key=lambda k: int(k[len("adaptive_w"):]))
            grows = all(tp[ks[i + 1]] > tp[ks[i]] for i in range(len(ks) - 1))
            out["throughput_grows_with_workers"][str(n)] = {"obs_per_s": tp, "verdict": "pass" if grows else "FAIL"}
        else:
            out["throughput_grows_with_workers"][str(n)] = {"verdict": "error (fewer than two worker counts ran)"}
    lin = {}
    for t in ("plain_ours", "plain_arviz_chunked", "subsample_ours"):
        pts = [(n, runs[str(n)][t]["wall_s"]) for n in sizes if "error" not in runs[str(n)].get(t, {"error": 1})
               and "wall_s" in runs[str(n)][t]]
        e = fit_exponent([p[0] for p in pts], [p[1] for p in pts]) if len(pts) == len(sizes) else None
        lin[t] = {"exponent": e, "verdict": ("error (a size did not run)" if e is None and len(sizes) > 1 else
                                             "n/a (one size)" if e is None else "pass" if e <= 1.15 else "FAIL")}
    out["time_linear_in_n"] = {"criterion": "slope of log(wall time) on log(n) at most 1.15", **lin}
    return out


def cell(r, key, fmt):
    if "skipped" in r:
        return "skipped"
    if "error" in r:
        return "error"
    v = r.get(key)
    return "-" if v is None else fmt.format(v)


def print_table(sizes, runs, agree, tg):
    head = (f"{'n':>8} {'row':<40} {'wall [s]':>9} {'peak tree [GB]':>15} {'+ over base [GB]':>17} {'elpd':>16} "
            f"{'obs/s':>8}")
    print("\n" + head + "\n" + "-" * len(head))
    errors = []
    for n in sizes:
        for key, r in runs[str(n)].items():
            label = LABELS.get(key) or adaptive_label(int(key[len("adaptive_w"):]))
            print(f"{n:>8} {label:<40} {cell(r, 'wall_s', '{:.2f}'):>9} {cell(r, 'peak_tree_rss_gb', '{:.2f}'):>15} "
                  f"{cell(r, 'peak_increase_gb', '{:.2f}'):>17} {cell(r, 'elpd', '{:.4f}'):>16} "
                  f"{cell(r, 'obs_per_s', '{:.2f}'):>8}")
            if "error" in r or "skipped" in r:
                errors.append(f"{n:>8} {label}: {r.get('error') or 'skipped: ' + r['skipped']}")
    if errors:
        print("\nerrors and skipped rows:\n" + "\n".join(errors))
    print("\nagreement (|difference|):")
    for n in sizes:
        for pair, d in agree[str(n)].items():
            text = d.get("not_compared") or ", ".join(f"{k} {v:.2e}" for k, v in d.items() if isinstance(v, float))
            print(f"{n:>8} {pair}: {text[:200]}")
    print("\ntargets:")
    for n in sizes:
        print(f"{n:>8} peak memory < 4 GB: " + ", ".join(f"{k} {v}" for k, v in tg["memory_below_4gb"][str(n)].items()))
        p = tg["plain_within_1.5x_of_arviz_stats"][str(n)]
        print(f"{n:>8} plain PSIS within 1.5x of arviz_stats (chunk loop): "
              + (f"{p['ratio']:.2f}x {p['verdict']}" if "ratio" in p else p["verdict"]))
        w = tg["throughput_grows_with_workers"][str(n)]
        print(f"{n:>8} adaptive throughput grows with workers: "
              + (", ".join(f"{k} {v:.2f} obs/s" for k, v in w["obs_per_s"].items()) + f" {w['verdict']}"
                 if "obs_per_s" in w else w["verdict"]))
    for t, v in tg["time_linear_in_n"].items():
        if isinstance(v, dict):
            e = v["exponent"]
            print(f"time linear in n ({tg['time_linear_in_n']['criterion']}): {t}: "
                  + (f"slope {e:.2f} " if e is not None else "") + v["verdict"])


# ---------------------------------------------------------------------------------------------- machine, main
def machine():
    import psutil

    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu_model": cpu, "cores_logical": os.cpu_count(), "cores_physical": psutil.cpu_count(logical=False),
            "ram_gb": psutil.virtual_memory().total / 1e9, "platform": platform.platform(),
            "python": platform.python_version(),
            "gpu": "none: this machine has no GPU, and no GPU machine was lent to this session",
            "load_average_at_start": os.getloadavg(),
            "note": "the machine is shared with other sessions: see each row's load_average_before/after"}


def versions():
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("numpy", "jax", "xarray", "dask", "distributed", "zarr", "arviz_stats", "arviz_base", "scipy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    sys.path.insert(0, str(ROOT))
    import ppl_loo

    out["ppl_loo"] = ppl_loo.__version__
    try:
        out["ppl_loo_git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                            text=True).stdout.strip()
    except OSError:
        out["ppl_loo_git"] = None
    return out


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reduced", action="store_true",
                    help="n = 10^3, 10^4, 400 draws, 200 subsampled observations (the CI test)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--draws", type=int, default=None, help="S (a multiple of 8; default 2000)")
    ap.add_argument("--chunk-obs", type=int, default=None, help="observations per zarr chunk (default 5000)")
    ap.add_argument("--observations", type=int, default=None, help="subsample size (default 1000)")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2],
                    help="dask worker counts of the adaptive rows (0: in-process, no client)")
    ap.add_argument("--transforms", nargs="+", default=None,
                    help="transforms of the adaptive rows (default: all; --reduced: pmm1, to keep compiling short)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="", help="a line kept in the JSON's settings (what code ran, why)")
    ap.add_argument("--data-dir", default="/tmp/ppl_loo_scale")
    ap.add_argument("--out", default=str(HERE / "results" / "scale.json"))
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per measured process")
    ap.add_argument("--mem-limit-gb", type=float, default=6.0,
                    help="a measured process tree above this is killed (the machine is shared: keep it low)")
    ap.add_argument("--skip", nargs="*", default=None, help="task names to leave out (e.g. adaptive)")
    ap.add_argument("--loaded-max-n", type=int, default=None,
                    help="leave the loaded-whole plain rows out above this n (--reduced: 1000)")
    ap.add_argument("--adaptive-max-n", type=int, default=None, help="leave the adaptive rows out above this n")
    ap.add_argument("--parallel", type=int, default=None,
                    help="measured processes at a time (default 1; --reduced: 3, whose timings then mean nothing)")
    args = ap.parse_args(argv)
    red = args.reduced
    args.sizes = args.sizes or ([1000, 10000] if red else [10_000, 100_000])
    args.draws = args.draws or (400 if red else 2000)
    args.chunk_obs = args.chunk_obs or (2500 if red else 5000)
    args.observations = args.observations or (200 if red else 1000)
    if args.skip is None:  # the reduced run leaves out the lazy arviz_stats rows (they fail in arviz_stats 1.3.3)
        args.skip = ["plain_arviz_lazy", "subsample_arviz"] if red else []
    if red and args.loaded_max_n is None:
        args.loaded_max_n = 1000
    if red and args.adaptive_max_n is None:
        args.adaptive_max_n = 1000
    if red and args.workers == [0, 1, 2]:
        args.workers = [1, 2]
    args.parallel = args.parallel or (4 if red else 1)
    args.transforms = args.transforms or (["pmm1"] if red else "all")
    return args


def combine(paths, out):
    """One document from the JSON of several runs (different sizes): data, runs and agreement by n, the targets
    recomputed over every size, each run's settings and machine kept (``runs_combined``)."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    doc = {k: docs[-1][k] for k in ("settings", "machine", "versions", "design")}
    doc["runs_combined"] = [{"file": str(p), "settings": d["settings"], "machine": d["machine"],
                             "versions": d["versions"]} for p, d in zip(paths, docs)]
    for key in ("data", "runs", "agreement"):
        doc[key] = {n: v for d in docs for n, v in d[key].items()}
    sizes = sorted(int(n) for n in doc["runs"])
    doc["settings"] = {**doc["settings"], "sizes": sizes}
    doc["targets"] = targets(sizes, doc["runs"])
    print_table(sizes, doc["runs"], doc["agreement"], doc["targets"])
    Path(out).write_text(json.dumps(doc, indent=1, default=float))
    print(f"wrote {out}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--combine":  # scale.py --combine A.json B.json ... --out OUT.json
        i = argv.index("--out")
        return combine(argv[1:i], argv[i + 1])
    args = parse(argv)
    doc = {"settings": {k: v for k, v in vars(args).items()}, "machine": machine(), "versions": versions(),
           "design": scale_data.__doc__, "data": {}, "runs": {}, "agreement": {}}
    with tempfile.TemporaryDirectory(prefix="ppl_loo_scale_") as workdir:
        for n in args.sizes:
            data, runs, agree = measure_size(n, args, workdir)
            doc["data"][str(n)], doc["runs"][str(n)], doc["agreement"][str(n)] = data, runs, agree
    doc["targets"] = targets(args.sizes, doc["runs"])
    print_table(args.sizes, doc["runs"], doc["agreement"], doc["targets"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=float))
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
