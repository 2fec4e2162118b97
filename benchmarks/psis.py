"""PSIS speed: ppl_loo's batched JAX psislw against arviz_stats's array-level psislw.

    .venv/bin/python benchmarks/psis.py

Prints a table and writes ``benchmarks/results/psis.json``. Same inputs for both; the JAX time is
the best of 5 calls after compilation (the first call, compile included, is reported too).
"""

import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)


def best_of(fn, repeats):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    import jax
    import jax.numpy as jnp
    from arviz_stats.base import array_stats

    from ppl_loo.numerics.psis import psislw

    rows = []
    f = jax.jit(psislw, static_argnames="r_eff")
    for shape in [(54, 1000), (262, 4000), (1000, 4000)]:
        x = np.random.default_rng(0).standard_t(4, size=shape)
        xj = jnp.asarray(x)
        t0 = time.perf_counter()
        jax.block_until_ready(f(xj, r_eff=1.0))
        first = time.perf_counter() - t0
        t_jax = best_of(lambda: jax.block_until_ready(f(xj, r_eff=1.0)), 5)
        t_az = best_of(lambda: array_stats.psislw(-x, r_eff=1.0, axis=-1), 2)
        rows.append({"shape": shape, "jax_ms": t_jax * 1e3, "jax_first_ms": first * 1e3, "arviz_ms": t_az * 1e3,
                     "speedup": t_az / t_jax})
    print(f"{'(n, S)':>14} {'ppl_loo [ms]':>13} {'first call [ms]':>16} {'arviz_stats [ms]':>17} {'speed-up':>9}")
    for r in rows:
        print(f"{str(r['shape']):>14} {r['jax_ms']:>13.2f} {r['jax_first_ms']:>16.0f} {r['arviz_ms']:>17.1f} "
              f"{r['speedup']:>8.1f}x")
    out = Path(__file__).resolve().parent / "results" / "psis.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
