"""Stan bridge speed: gradients per second through the bridge against Stan's own gradient cost.

    .venv/bin/python benchmarks/stan.py            # eight schools and the ovarian horseshoe model
    .venv/bin/python benchmarks/stan.py --quick    # smaller batches, fewer repeats, no PyStan

Prints a table and writes ``benchmarks/results/stan.json``. For each model:

* **compile**: a cold build of the bridge library (stanc + C++ compiler) into an empty temporary
  cache, and the time to construct a ``pl.StanModel`` again once it is cached (library lookup,
  ``dlopen``, data to JSON, model instantiation);
* **Stan's own gradient** (the reference): ``StanModel.time_gradient``, a C++ loop of
  ``stan::model::log_prob_grad<true, true>`` (what NUTS evaluates) at one point of the same
  compiled model, with no Python in between (about 20 ms of evaluations, best of 5); mean over 5
  points. For comparison, the
  "Gradient evaluation took X seconds" that Stan itself prints at the start of sampling, captured
  from a PyStan run of the same program and data (one evaluation timed by Stan in httpstan's own
  build of the model; microsecond resolution, so only indicative);
* **bridge**: ``StanModel.log_density_gradient`` on batches of 1,000 and 10,000 different draws,
  one call each (best of 5), on 1 thread and on all threads; ``overhead`` is the bridge's time per
  gradient on 1 thread over Stan's own. Target: below 1.5;
* **JAX path**: what the LOO engine runs, ``jax.jit(jax.vmap(jax.value_and_grad(logp)))`` of the
  model's ``pl.loo`` adapter (one ``jax.pure_callback`` per batch), all threads.

The draws are random unconstrained points (standard normal, scale 0.5; the horseshoe's log tau
around log scale_global), the same for every method. Timings on a shared machine are inflated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "stan_models"
# this file is called stan.py: keep `import stan` (PyStan) from importing it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def best_of(fn, repeats):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def eight_schools():
    data = {"J": 8, "y": np.array([28.0, 8, -3, 7, -1, 1, 18, 12]),
            "sigma": np.array([15.0, 10, 16, 11, 9, 11, 10, 18])}
    return "eight_schools", MODELS / "eight_schools_noncentered.stan", data, None


def horseshoe_ovarian():
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.stan_bridge import horseshoe_data

    X, y = load_ovarian()
    data = horseshoe_data(X, y)
    return "horseshoe_ovarian", MODELS / "logistic_horseshoe.stan", data, np.log(data["scale_global"])


def draws(model, S, log_tau, seed):
    x = np.random.default_rng(seed).normal(scale=0.5, size=(S, model.dim))
    if log_tau is not None:
        names = model.unconstrained_param_names()
        x[:, names.index("tau")] += log_tau
    return x


def compile_times(path, data):
    """Cold build into an empty cache, then a cached construction."""
    import ppl_loo as pl

    old = os.environ.get("PPL_LOO_STAN_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PPL_LOO_STAN_CACHE"] = tmp
        try:
            t0 = time.perf_counter()
            m = pl.StanModel(path, data)
            cold = time.perf_counter() - t0
            assert m.compiled
            del m
            cached = best_of(lambda: pl.StanModel(path, data), 3)
        finally:
            if old is None:
                del os.environ["PPL_LOO_STAN_CACHE"]
            else:
                os.environ["PPL_LOO_STAN_CACHE"] = old
    return cold, cached


def pystan_gradient_seconds(path, data):
    """Stan's "Gradient evaluation took X seconds" from a short PyStan run (4 chains)."""
    import stan

    from ppl_loo.io.pystan import pystan_messages as _pystan_messages

    payload = {k: np.asarray(v).tolist() for k, v in data.items()}
    posterior = stan.build(Path(path).read_text(), data=payload, random_seed=1)
    fit = posterior.sample(num_chains=4, num_warmup=20, num_samples=5, max_depth=5)
    return [m["gradient_seconds"] for m in _pystan_messages(fit) if "gradient_seconds" in m]


def bench_model(spec, sizes, repeats, with_compile, with_pystan):
    import jax
    import jax.numpy as jnp

    import ppl_loo as pl
    from ppl_loo.adapters.stan.posterior import loo_adapter
    from ppl_loo.stan_bridge import default_threads

    name, path, data, log_tau = spec
    row = {"model": name}
    if with_compile:
        row["compile_s"], row["cached_construct_s"] = compile_times(path, data)
    model = pl.StanModel(path, data)
    row["dim"] = model.dim
    if "cached_construct_s" not in row:
        row["cached_construct_s"] = best_of(lambda: pl.StanModel(path, data), 3)
    pts = draws(model, 5, log_tau, seed=1)
    t1 = model.time_gradient(pts[0], n_reps=10)
    reps = int(np.clip(0.02 / max(t1, 1e-9), 10, 100_000))  # about 20 ms per timing, best of 5 per point
    own = [min(model.time_gradient(p, n_reps=reps) for _ in range(5)) for p in pts]
    row["stan_gradient_s"] = float(np.mean(own))
    if with_pystan:
        try:
            row["pystan_reported_gradient_s"] = pystan_gradient_seconds(path, data)
        except Exception as err:  # noqa: BLE001
            row["pystan_error"] = repr(err)
    threads = default_threads()
    row["threads"] = threads
    post = loo_adapter(model)
    vg = jax.jit(jax.vmap(jax.value_and_grad(post.logp)))
    row["batches"] = []
    for S in sizes:
        x = draws(model, S, log_tau, seed=2)
        entry = {"S": S}
        for nt in sorted({1, threads}):
            model.n_threads = nt
            model.log_density_gradient(x[: min(S, 100)], on_error="reject")
            t = best_of(lambda x=x: model.log_density_gradient(x, on_error="reject"), repeats)
            entry[f"bridge_{nt}t_s"] = t
            entry[f"bridge_{nt}t_grads_per_s"] = S / t
        model.n_threads = threads
        xj = jnp.asarray(x)
        jax.block_until_ready(vg(xj))  # compile
        t = best_of(lambda xj=xj: jax.block_until_ready(vg(xj)), repeats)
        entry["jax_path_s"] = t
        entry["jax_path_grads_per_s"] = S / t
        entry["overhead_1t"] = (entry["bridge_1t_s"] / S) / row["stan_gradient_s"]
        entry["overhead_jax_path"] = (t / S) / (row["stan_gradient_s"] / threads)
        row["batches"].append(entry)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batches of 1,000 only, no compile or PyStan timing")
    ap.add_argument("--no-pystan", action="store_true", help="skip the PyStan runs")
    ap.add_argument("--no-compile", action="store_true", help="skip the cold compile timing")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    sizes = (1000,) if args.quick else (1000, 10000)
    repeats = 2 if args.quick else 5
    rows = []
    for spec in (eight_schools(), horseshoe_ovarian()):
        rows.append(bench_model(spec, sizes, repeats, not (args.quick or args.no_compile),
                                not (args.quick or args.no_pystan)))

    print(f"{'model':>18} {'dim':>5} {'compile [s]':>11} {'cached [ms]':>11} {'Stan grad [us]':>14} "
          f"{'PyStan says [us]':>16}")
    for r in rows:
        ps = r.get("pystan_reported_gradient_s")
        ps_txt = "-" if not ps else "/".join(f"{v * 1e6:.0f}" for v in ps)
        comp = r.get("compile_s")
        print(f"{r['model']:>18} {r['dim']:>5} {'-' if comp is None else f'{comp:.1f}':>11} "
              f"{r['cached_construct_s'] * 1e3:>11.1f} {r['stan_gradient_s'] * 1e6:>14.2f} {ps_txt:>16}")
    print()
    print(f"{'model':>18} {'S':>6} {'bridge 1t [grad/s]':>19} {'bridge {}t [grad/s]'.format(rows[0]['threads']):>19} "
          f"{'JAX path [grad/s]':>18} {'overhead 1t':>11}")
    for r in rows:
        nt = r["threads"]
        for b in r["batches"]:
            print(f"{r['model']:>18} {b['S']:>6} {b['bridge_1t_grads_per_s']:>19,.0f} "
                  f"{b[f'bridge_{nt}t_grads_per_s']:>19,.0f} {b['jax_path_grads_per_s']:>18,.0f} "
                  f"{b['overhead_1t']:>10.2f}x")
    result = {
        "benchmark": "stan",
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "load_average_1min_start_end": [load_start[0], os.getloadavg()[0]]},
        "reference": "stan_gradient_s: C++ loop of stan::model::log_prob_grad<true,true> in the same compiled "
                     "library (StanModel.time_gradient); pystan_reported_gradient_s: Stan's 'Gradient evaluation "
                     "took' message of a PyStan run (httpstan's build), one per chain",
        "target": "overhead_1t < 1.5",
        "models": rows,
    }
    out = Path(__file__).resolve().parent / "results" / "stan.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"load average (1 min) at start / end: {load_start[0]:.1f} / {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
