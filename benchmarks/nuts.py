"""NUTS (NumPyro) on the ovarian models: wall time, divergences, R-hat, ESS.

    .venv/bin/python benchmarks/nuts.py [--warmup 500] [--draws 500] [--chains 2]

Prints a table and writes ``benchmarks/results/nuts.json``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import jax

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)



def run(name, model, chains, warmup, draws, chain_method="sequential", stats=True):
    """One NUTS fit (the horseshoe through its non-centered NumPyro model): wall time (JIT compile included),
    divergences and, with ``stats``, the largest R-hat and the smallest bulk ESS over the parameters."""
    from arviz_stats import ess, rhat

    from ppl_loo.sampling import sample_nuts

    kw = {"numpyro_model": model.numpyro_model()} if "horseshoe" in name else {}
    t0 = time.perf_counter()
    dt = sample_nuts(model, num_chains=chains, num_warmup=warmup, num_samples=draws, random_seed=1,
                     chain_method=chain_method, **kw)
    wall = time.perf_counter() - t0
    row = {"model": name, "dim": model.dim, "wall_s": wall, "divergences": int(dt["sample_stats"]["diverging"].sum())}
    if stats:
        r, e = rhat(dt, group="posterior"), ess(dt, group="posterior")
        row.update(max_rhat=max(float(r[v].max()) for v in r.data_vars),
                   min_ess_bulk=min(float(e[v].min()) for v in e.data_vars))
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--chains", type=int, default=2)
    args = ap.parse_args(argv)
    from ppl_loo.datasets import load_ovarian
    from ppl_loo.models import LogisticRegression, ReluNet

    X, y = load_ovarian()
    rows = [run(name, model, args.chains, args.warmup, args.draws)
            for name, model in [("logistic normal", LogisticRegression(X, y, prior="normal")),
                                ("logistic horseshoe", LogisticRegression(X, y, prior="horseshoe")),
                                ("relu net H=3", ReluNet(X, y, hidden=3))]]
    print(f"{args.chains} chains x ({args.warmup} warmup + {args.draws} draws)")
    print(f"{'model':<20} {'dim':>6} {'wall [s]':>9} {'div':>5} {'max R-hat':>10} {'min ESS':>8}")
    for r in rows:
        print(f"{r['model']:<20} {r['dim']:>6} {r['wall_s']:>9.1f} {r['divergences']:>5} {r['max_rhat']:>10.3f} "
              f"{r['min_ess_bulk']:>8.0f}")
    out = Path(__file__).resolve().parent / "results" / "nuts.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
