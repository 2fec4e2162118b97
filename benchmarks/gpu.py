"""One-call GPU benchmark: each row on JAX's default backend (the GPU on a GPU machine) and beside it
the same row on the same machine's CPUs, within a time budget.

Rows, in this order (those with speed targets first), each in a fresh subprocess so that its peak host memory
(``ru_maxrss``) is its own:

- ``engine``: the compiled engine, ``pl.loo`` on the ovarian logistic regression (normal prior, d = 1537, S = 1000
  NUTS draws) with every observation adapted, the default transformations over the hbar grid and no second
  opinions (``second_opinions={"mixture": False, "smc": False}``; ``benchmarks/engine.py::run_one``): the first
  call (JIT compile included) and a second, compiled call. Both rows read the same draws (sampled once on the host CPU),
  so their elpd must agree. Target: the default backend's compiled call at least 5x faster than the CPU's.
- ``refits``: the batched refits of the ovarian horseshoe LR (``pl.loo(..., refit=...)``,
  ``benchmarks/batched_refits.py``), all 54 observations on the default backend and 2 on the CPU (a per-refit
  figure), each scored against the committed truth (``benchmarks/results/truth/ovarian_lr.json``) by
  ``z = (elpd_i - truth) / combined SE``. The full-data fit (4 chains x (500 + 500)) runs once on the host CPU and
  both rows use it. Target: all 54 refits within 2 minutes.
- ``search``: the adaptive search of ``benchmarks/glm_lines.py`` at n = 10^5 (``pl.loo`` of a logistic regression,
  S = 2000, the log-likelihood dask-backed when dask is installed, no second opinions): wall time and peak host
  memory. Target: below 4 GB.
- ``nuts``: NumPyro's NUTS on the ovarian horseshoe LR with 4, 64 and 256 chains x (100 + 100), vectorized
  (``benchmarks/nuts.py::run``): wall time (JIT compile included), draws per second, R-hat, ESS.

The CPU rows run with ``JAX_PLATFORMS=cpu``. Each row's default-backend part runs first; its CPU part follows when
the time left, less an estimate of the later rows' default-backend parts (``PLAN``), allows it, and otherwise after
all the default-backend parts, or is recorded as skipped with the reason. Every subprocess has a time limit from the
budget; one past it is recorded as ``timeout`` with the items it had finished. ``DIR/gpu.json`` (machine, versions,
rows, GPU/CPU comparisons, targets) is rewritten after every row, and a table is printed as the rows finish.

    python benchmarks/gpu.py --out DIR [--budget-s 420] [--rows engine,refits,search,nuts] [--small]

On a GPU machine: ``bash benchmarks/gpu_run.sh`` (it installs the wheels of ``.whl/``, then runs this with
``--out $OUT``), about 7 minutes. ``.whl/`` holds the packages that ``import ppl_loo`` needs beyond jax, numpyro,
xarray, pandas and scipy (arviz-base, arviz-stats, blackjax, cmdstanpy, stanio, xarray-einstats, lazy-loader, dask,
partd, locket), fetched on a machine with internet by ``python3 -m pip download --no-deps --only-binary=:all:
--python-version 3.12 -d .whl NAME==VERSION``. On a machine without a GPU the "default" rows run on the CPU too.
``--small`` makes every row tiny (a few minutes on 2 cores): a test of the script end to end, not a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# benchmarks/pymc.py would shadow the pymc package: import from the repository root
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

ROWS = ("engine", "refits", "search", "nuts")  # the rows with speed targets first
PLATFORMS = ("default", "cpu")
FULL = {
    "engine": {"draws": 1000, "transforms": None},  # None: pl.DEFAULT_TRANSFORMS
    "refits": {"obs": 54, "cpu_obs": 2, "warmup": 200, "draws": 200, "fit_warmup": 500, "fit_draws": 500},
    "search": {"n": 100_000, "S": 2000, "rare": 2, "lazy": True},
    "nuts": {"chains": [4, 64, 256], "cpu_chains": [4, 64], "warmup": 100, "draws": 100},
}
SMALL = {
    "engine": {"draws": 100, "transforms": ["pmm1", "kl"]},
    "refits": {"obs": 2, "cpu_obs": 1, "warmup": 10, "draws": 10, "fit_warmup": 30, "fit_draws": 30},
    "search": {"n": 2000, "S": 200, "rare": 2, "lazy": True},
    "nuts": {"chains": [2, 4], "cpu_chains": [2], "warmup": 10, "draws": 10},
}
#: per row, seconds: (the default-backend row's estimate, its limit, the least a CPU row is started with, its
#: limit). A CPU row runs right after its default-backend row when the time left, less the estimates of the later
#: rows' default-backend parts, allows; otherwise it waits until every default-backend row has run.
PLAN = {"engine": (45, 120, 30, 120), "refits": (140, 240, 70, 150), "search": (60, 150, 150, 240),
        "nuts": (100, 200, 30, 120)}
PLAN_SMALL = {row: (10, 300, 5, 300) for row in ROWS}
#: the engine and the search alone: without the second opinions that pl.loo runs by default on what the search
#: leaves doubtful (a mixture-IS MCMC run of the model, about the cost of a fit, whose log-likelihood at its draws is
#: one (draws, n) array: 3.2 GB at n = 10^5, and tempered SMC)
NO_SECOND_OPINIONS = {"second_opinions": {"mixture": False, "smc": False}}
MIN_START_S = 20  # a subprocess is not started with less (imports and JIT alone take about that)
CURRENT = {}  # the running subprocess, ended on SIGTERM


def sizes(small):
    return SMALL if small else FULL


# ---------------------------------------------------------------------------------------------- the subprocesses


def _horseshoe():
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.models import LogisticRegression

    X, y = load_ovarian()
    return LogisticRegression(X, y, prior="horseshoe")


def _save_posterior(data, path):
    import numpy as np

    post = data["posterior"].to_dataset()
    np.savez(path, **{k: np.asarray(post[k].values) for k in post.data_vars})


def _load_posterior(path):
    """The saved posterior as a DataTree (posterior group only: ``pl.loo`` evaluates the log-likelihood itself)."""
    import numpy as np
    import xarray as xr

    z = np.load(path)
    post = xr.Dataset({k: (("chain", "draw", *[f"{k}_dim_{j}" for j in range(z[k].ndim - 2)]), z[k]) for k in z.files})
    return xr.DataTree.from_dict({"posterior": post})


def child_engine(size, rec, save, args):
    import jax

    import ppl_loo as pl
    from benchmarks import engine

    with jax.default_device(jax.devices("cpu")[0]):  # the draws on the host CPU, cached: both rows read the same
        model, data, t_fit = engine._draws("normal", size["draws"], 1)
    if t_fit:  # just sampled: read them back as the other row will
        model, data, _ = engine._draws("normal", size["draws"], 1)
    rec["details"] = {"draws_nuts_cpu_s": t_fit}
    save()
    transforms = list(size["transforms"] or pl.DEFAULT_TRANSFORMS)
    s = engine.run_one(pl, model, data, t_fit, argparse.Namespace(prior="normal", batch_size="auto"),
                       "default" if size["transforms"] is None else "reduced", transforms, NO_SECOND_OPINIONS)
    rec["details"].update(s)
    evals = s["n"] * s["candidates_per_observation"]
    rec["items"].append({"label": f"d={s['d_total']} S={s['S']}, {evals} (obs, transform, hbar)",
                         "first_s": s["wall_first_s"], "compiled_s": s["wall_second_s"],
                         "throughput": evals / s["wall_second_s"], "unit": "cand/s", "check": f"elpd {s['elpd']:.4f}"})


def child_refits(size, rec, save, args):
    import jax

    from benchmarks import batched_refits as br

    fit = Path(args.shared) / "refit_fit.npz"
    n_obs = size["obs"] if args.platform == "default" else size["cpu_obs"]
    w, d = size["fit_warmup"], size["fit_draws"]
    rec["details"] = {"fit": f"4 x ({w} + {d}), target 0.95, on the host CPU", "fit_shared": fit.exists()}
    if not fit.exists():  # the full-data fit on the host CPU (NumPyro's NUTS, the chains one after the other: not
        # what is measured here, and faster there than on a GPU), shared with the CPU row
        with jax.default_device(jax.devices("cpu")[0]):
            _, data, fit_s = br.ovarian_fit(1, w, d, chain_method="sequential")
        _save_posterior(data, fit)
        rec["details"].update(fit_s=fit_s, fit_divergences=int(data["sample_stats"]["diverging"].sum()))
        save()
    row = br.ovarian_refits(_horseshoe(), _load_posterior(fit), n_obs, size["warmup"], size["draws"])
    rec["details"].update(row)
    rec["items"].append({"label": f"{n_obs} refits of 4 x ({size['warmup']} + {size['draws']}), batched",
                         "first_s": row["refits_s"], "throughput": n_obs / row["refits_s"], "unit": "refits/s",
                         "check": f"max |z| {row['max_abs_z']:.2f}, {row['within_3se']}/{n_obs} within 3 SE"})


def child_nuts(size, rec, save, args):
    from benchmarks import nuts

    model = _horseshoe()
    w, d = size["warmup"], size["draws"]
    for chains in size["chains"] if args.platform == "default" else size["cpu_chains"]:
        r = nuts.run("logistic horseshoe", model, chains, w, d, chain_method="vectorized")
        rec["items"].append({"label": f"{chains} chains x ({w} + {d}), vectorized", "first_s": r["wall_s"],
                             "throughput": chains * d / r["wall_s"], "unit": "draws/s", "chains": chains,
                             "check": f"R-hat {r['max_rhat']:.2f}, ESS {r['min_ess_bulk']:.0f}, "
                                      f"{r['divergences']} div.", **r})
        save()


def child_search(size, rec, save, args):
    from benchmarks import glm_lines

    lazy = bool(size["lazy"]) and _installed("dask")
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):  # glm_lines.one prints its row as one JSON line
        glm_lines.one(size["n"], size["S"], None, lazy, size["rare"], loo_kwargs=NO_SECOND_OPINIONS)
    total = time.perf_counter() - t0
    r = json.loads(buf.getvalue().strip().splitlines()[-1])
    rec["details"] = {**r, "with_data_s": total}
    rec["items"].append({"label": f"n={size['n']:,} S={size['S']}, log-lik {'dask' if lazy else 'in memory'}",
                         "first_s": r["wall_s"], "throughput": r["searched"] / r["wall_s"], "unit": "searched/s",
                         "check": f"{r['searched']} searched, {r['adapted']} adapted, peak {r['peak_gb']} GB"})


CHILDREN = {"engine": child_engine, "refits": child_refits, "nuts": child_nuts, "search": child_search}


def child(args):
    """Run one row here; its record (rewritten after each step, so a timeout keeps what finished) goes to
    ``args.result``."""
    import resource
    import traceback

    import jax

    jax.config.update("jax_enable_x64", True)
    rec = {"row": args.child, "platform": args.platform, "backend": jax.default_backend(),
           "devices": [f"{d.platform}:{getattr(d, 'device_kind', '?')}" for d in jax.devices()],
           "status": "running", "items": []}

    def save():
        rec["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        _write_json(Path(args.result), rec)

    save()
    try:
        CHILDREN[args.child](sizes(args.small)[args.child], rec, save, args)
        rec["status"] = "ok"
    except Exception as exc:  # noqa: BLE001  (recorded, and the parent goes on with the next row)
        traceback.print_exc()
        rec["status"], rec["error"] = "error", f"{type(exc).__name__}: {exc}"[:2000]
    save()
    return 0 if rec["status"] == "ok" else 1


# --------------------------------------------------------------------------------------------------- the driver


def _installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _write_json(path, doc):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def _machine():
    """The machine and versions, without starting JAX here (a GPU backend started in this process would hold
    the GPU's memory that the subprocesses need)."""
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else None
    mem = next((int(ln.split()[1]) / 2**20 for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")), None) if Path("/proc/meminfo").exists() else None
    gpu = sh(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]) \
        if shutil.which("nvidia-smi") else None
    pkgs = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt",
            "numpyro", "blackjax", "numpy", "scipy", "pandas", "xarray", "optax", "arviz-base", "arviz-stats", "dask")
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_model": cpu,
            "cpu_count": os.cpu_count(), "ram_gb": mem, "gpu": gpu, "load_average_at_start": os.getloadavg(),
            "versions": {p: _installed(p) for p in pkgs if _installed(p)}}


def _wait(proc, timeout):
    """Wait for ``proc`` at most ``timeout`` seconds (then kill it); its exit code, resource usage and whether it
    ran out of time (``os.wait4``: the child's own peak memory, even when killed)."""
    end = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() >= end:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage, True
        time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage, False


def run_child(row, plat, timeout, args, shared):
    result = Path(shared) / f"{row}_{plat}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", row, "--platform", plat, "--result", str(result),
           "--shared", str(shared)] + (["--small"] if args.small else [])
    env = dict(os.environ, **({"JAX_PLATFORMS": "cpu"} if plat == "cpu" else {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True)
    CURRENT["proc"] = proc
    rc, usage, timed_out = _wait(proc, timeout)
    CURRENT.pop("proc", None)
    rec = json.loads(result.read_text()) if result.exists() else {"row": row, "platform": plat, "items": []}
    rec.update(process_s=time.perf_counter() - t0, limit_s=timeout, returncode=rc,
               peak_rss_gb=usage.ru_maxrss / 2**20)  # Linux: KiB
    if CURRENT.get("stop"):
        rec["status"] = CURRENT["stop"]
    elif timed_out:
        rec["status"] = "timeout"
        rec["note"] = f"stopped after {timeout:.0f} s (the budget's limit); the items listed had finished"
    elif rec.get("status") == "running":
        rec["status"] = f"error (exit code {rc})"
    return rec


def budget_limit(row, plat, later, left, plan):
    """The time limit for one subprocess, or the reason not to start it now."""
    est, cap, cpu_min, cpu_cap = plan[row]
    left = max(left, 0.0)
    if plat == "default":
        limit = min(cap, left - MIN_START_S * len(later))
        return (limit, None) if limit >= MIN_START_S else (None, f"budget: {left:.0f} s left")
    keep = sum(plan[r][0] for r in later)
    limit = min(cpu_cap, left - keep)
    if limit < max(cpu_min, MIN_START_S):
        kept = f", {keep:.0f} s kept for the default-backend rows of {', '.join(later)}" if later else ""
        return None, f"budget: {left:.0f} s left{kept}; this CPU row needs at least {max(cpu_min, MIN_START_S)} s"
    return limit, None


def _rec(doc, row, plat):
    return next((r for r in reversed(doc["rows"]) if r["row"] == row and r["platform"] == plat), None)


def _compare_engine(g, c, tg):
    tg["engine_compiled_5x_faster_than_cpu"] = None
    if not (c and c["status"] == "ok"):
        return {}
    gd, cd = g["details"], c["details"]
    out = {"speedup_compiled": cd["wall_second_s"] / gd["wall_second_s"],
           "speedup_first_call": cd["wall_first_s"] / gd["wall_first_s"],
           "elpd_abs_diff": abs(gd["elpd"] - cd["elpd"]),
           "elpd_i_max_abs_diff": max(abs(a - b) for a, b in zip(gd["elpd_i"], cd["elpd_i"]))}
    tg["engine_compiled_5x_faster_than_cpu"] = out["speedup_compiled"] >= 5
    return out


def _compare_refits(g, c, tg):
    gd = g["details"]
    out = {"default_s_per_refit": gd["refits_s"] / gd["refits"]}
    if gd["refits"] == 54:
        tg["all_54_refits_within_120_s"] = gd["refits_s"] <= 120
    if c and c.get("details", {}).get("refits_s"):
        out["cpu_s_per_refit"] = c["details"]["refits_s"] / c["details"]["refits"]
        out["speedup_per_refit"] = out["cpu_s_per_refit"] / out["default_s_per_refit"]
    return out


def _compare_search(g, c, tg):
    gd = g["details"]
    tg["search_host_memory_under_4_gb"] = gd["peak_gb"] < 4 if gd["n"] >= 10**5 else None
    if c and c["status"] == "ok":
        cd = c["details"]
        return {"speedup": cd["wall_s"] / gd["wall_s"], "elpd_abs_diff": abs(gd["elpd"] - cd["elpd"])}
    if c and c["status"] == "timeout":  # a lower bound: the CPU row's whole process ran out of time
        return {"speedup_at_least": c["limit_s"] / g["process_s"], "note": "the CPU row ran out of time (whole "
                "processes compared: imports, data and search)"}
    return {}


def _compare_nuts(g, c, tg):
    cpu = {it["chains"]: it["throughput"] for it in (c or {}).get("items", [])}
    return {str(it["chains"]): {"default_draws_per_s": it["throughput"], "cpu_draws_per_s": cpu.get(it["chains"]),
                                "speedup": it["throughput"] / cpu[it["chains"]] if it["chains"] in cpu else None}
            for it in g["items"]}


def compare(doc, row):
    """The default backend against the CPU for ``row`` (where the default backend has results), and the
    targets (``doc["targets"]``: true, false, or null where not measured)."""
    g, c = _rec(doc, row, "default"), _rec(doc, row, "cpu")
    ok = g is not None and (g["status"] == "ok" or (row == "nuts" and g.get("items")))
    if ok:
        fn = {"engine": _compare_engine, "refits": _compare_refits, "search": _compare_search, "nuts": _compare_nuts}
        doc["comparisons"][row] = fn[row](g, c, doc["targets"])


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-".rjust(int(spec.split(".")[0]))


def print_rec(rec):
    head = f"{rec['row']:<7} {rec['platform'] + ' (' + str(rec.get('backend', '-')) + ')':<14}"
    if rec.get("status") == "skipped":
        print(f"{head} skipped: {rec['reason']}", flush=True)
        return
    for it in rec.get("items", []):
        print(f"{head} {it['label'][:44]:<44} {_fmt(it.get('first_s'), '9.1f')} {_fmt(it.get('compiled_s'), '9.2f')} "
              f"{_fmt(it.get('throughput'), '10.4g')} {it['unit']:<10} {_fmt(rec.get('peak_rss_gb'), '6.2f')}  "
              f"{it.get('check', '')}", flush=True)
    if rec.get("status") != "ok":
        print(f"{head} {rec.get('status')}: {rec.get('error') or rec.get('note', '')} "
              f"(process {rec.get('process_s', 0):.0f} s, peak {rec.get('peak_rss_gb', 0):.2f} GB)", flush=True)


def _on_sigterm(signum, frame):
    """Stop: end the running row (its record keeps what it finished) and start no other."""
    CURRENT["stop"] = f"stopped by signal {signum}"
    proc = CURRENT.get("proc")
    if proc is not None and proc.returncode is None:
        proc.kill()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE / "results"), help="folder for gpu.json")
    ap.add_argument("--budget-s", type=float, default=420.0, help="wall-clock budget of the whole run")
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated, of " + ", ".join(ROWS))
    ap.add_argument("--small", action="store_true", help="tiny rows: a test of the script on a CPU")
    ap.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    ap.add_argument("--platform", choices=PLATFORMS, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--shared", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"unknown rows {bad}; choose from {', '.join(ROWS)}")
    return drive(args, rows)


def drive(args, rows):
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu.json"
    doc = {"what": __doc__.splitlines()[0], "command": " ".join(sys.argv), "small": args.small,
           "budget_s": args.budget_s, "machine": _machine(), "sizes": {r: sizes(args.small)[r] for r in rows},
           "rows": [], "comparisons": {}, "targets": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(json.dumps(doc["machine"], indent=1), flush=True)
    print(f"{'row':<7} {'platform':<14} {'item':<44} {'first [s]':>9} {'compiled':>9} {'throughput':>10} {'':<10} "
          f"{'RSS GB':>6}  check", flush=True)
    plan = PLAN_SMALL if args.small else PLAN
    shared = tempfile.mkdtemp(prefix="gpu_bench_")
    signal.signal(signal.SIGTERM, _on_sigterm)

    def step(row, plat, later, last_chance):
        """Run (row, plat) if the budget allows; False when it is put off."""
        limit, reason = budget_limit(row, plat, later, args.budget_s - (time.monotonic() - t0), plan)
        if CURRENT.get("stop"):
            reason, last_chance = CURRENT["stop"], True
        if reason and not last_chance:
            print(f"{row:<7} {plat:<14} put off until the default-backend rows are done ({reason})", flush=True)
            return False
        rec = (run_child(row, plat, limit, args, shared) if reason is None
               else {"row": row, "platform": plat, "status": "skipped", "reason": reason, "items": []})
        doc["rows"].append(rec)
        if plat == "default" and rec.get("devices") and "jax_devices" not in doc:
            doc["jax_devices"], doc["default_backend"] = rec["devices"], rec["backend"]
        compare(doc, row)
        doc["elapsed_s"] = time.monotonic() - t0
        _write_json(path, doc)
        print_rec(rec)
        return True

    try:
        put_off = []
        for k, row in enumerate(rows):
            step(row, "default", rows[k + 1:], True)
            if not step(row, "cpu", rows[k + 1:], k == len(rows) - 1 and not put_off):
                put_off.append(row)
        for row in put_off:
            step(row, "cpu", [], True)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        doc["elapsed_s"] = time.monotonic() - t0
        _write_json(path, doc)
        print(f"comparisons: {json.dumps(doc['comparisons'])}\ntargets: {json.dumps(doc['targets'])}\n"
              f"wrote {path} ({doc['elapsed_s']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
