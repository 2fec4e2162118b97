"""What XLA's persistent compilation cache (``PPL_LOO_CACHE_DIR``, on by default) saves on the first call of the search.

Runs ``benchmarks/engine.py --set all`` (the ovarian logistic regression, d = 1537, 54 observations, every
transformation over the full grid) in fresh Python processes, each printing its first call (compilation included)
and its second call (compiled) of ``pl.loo``'s search:

1. ``PPL_LOO_CACHE_DIR=off``: no cache;
2. ``PPL_LOO_CACHE_DIR=<empty folder>``: the cache is written (cold);
3. the same folder again: the cache is read (warm), what a user's second session pays.

Prints a table and writes ``benchmarks/results/compile_cache.json``.

    .venv/bin/python benchmarks/compile_cache.py [--draws 1000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(cache, draws, out):
    env = {**os.environ, "PPL_LOO_CACHE_DIR": cache}
    subprocess.run([sys.executable, str(HERE / "engine.py"), "--set", "all", "--draws", str(draws), "--out", out],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    row = json.loads(Path(out).read_text())[0]
    return {"wall_first_s": row["wall_first_s"], "wall_second_s": row["wall_second_s"],
            "compile_s": row["wall_first_s"] - row["wall_second_s"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "results" / "compile_cache.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "engine.json")
        for r in range(args.repeats):
            cache = os.path.join(work, f"xla{r}")
            os.makedirs(cache)
            for label, where in (("no cache", "off"), ("cache written (cold)", cache), ("cache read (warm)", cache)):
                rows.append({"run": label, "repeat": r, **_run(where, args.draws, out)})
                row = rows[-1]
                print(f"{label:22s} first call {row['wall_first_s']:6.2f} s, compiled {row['wall_second_s']:6.2f} s, "
                      f"difference {row['compile_s']:6.2f} s", flush=True)
            rows[-1]["cache_files"] = len(os.listdir(cache))
    result = {"what": "benchmarks/engine.py --set all (ovarian LR, d = 1537, 54 observations, 89 candidates each) "
                      "in fresh processes: the first call of the search with and without XLA's persistent cache",
              "draws": args.draws, "cpu_count": os.cpu_count(), "load_average_1min_at_end": os.getloadavg()[0],
              "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
