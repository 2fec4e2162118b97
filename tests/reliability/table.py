"""Print the reliability suite's rows: counts by entry point and kind of input, and the full list.

    python tests/reliability/table.py            # counts (text)
    python tests/reliability/table.py --markdown # the tables of docs/reliability.md
    python tests/reliability/table.py --json F   # the rows as JSON (entry, kind, case, outcome, regression)

Rows come from the ``ROWS`` lists of ``tests/reliability/test_rows_*.py`` (see rows.py); nothing is run.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # rows.py here, data_paths.py in tests/

from rows import KINDS  # noqa: E402


def load_rows():
    rows = []
    for path in sorted(HERE.glob("test_rows_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        rows += [(path.name, r) for r in getattr(mod, "ROWS", [])]
    return rows


def outcome(row) -> str:
    if row.error is not None:
        return f"error ({row.error.__name__})"
    return "answer" + (f" + {row.warns.__name__}" if row.warns is not None else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    rows = load_rows()
    entries = sorted({r.entry for _, r in rows})
    kinds = [k for k in KINDS if any(r.kind == k for _, r in rows)]
    count = collections.Counter((r.entry, r.kind) for _, r in rows)
    n_reg = sum(r.regression for _, r in rows)
    if args.json:
        Path(args.json).write_text(json.dumps([dict(file=f, entry=r.entry, kind=r.kind, case=r.case, outcome=outcome(r),
                                                    regression=r.regression) for f, r in rows], indent=1))
    if args.markdown:
        print(f"{len(rows)} rows ({n_reg} of them regressions: inputs that earlier versions handled wrongly).\n")
        print("| entry point | " + " | ".join(kinds) + " | total |")
        print("|---|" + "---:|" * (len(kinds) + 1))
        for e in entries:
            cells = [str(count[(e, k)] or "") for k in kinds]
            print(f"| `{e}` | " + " | ".join(cells) + f" | {sum(count[(e, k)] for k in kinds)} |")
        print("| total | " + " | ".join(str(sum(count[(e, k)] for e in entries)) for k in kinds) + f" | {len(rows)} |")
        print("\n| entry point | kind | case | expected | regression |")
        print("|---|---|---|---|:-:|")
        for _, r in sorted(rows, key=lambda fr: (fr[1].entry, KINDS.index(fr[1].kind), fr[1].case)):
            print(f"| `{r.entry}` | {r.kind} | {r.case} | {outcome(r)} | {'yes' if r.regression else ''} |")
        return
    print(f"{len(rows)} rows, {n_reg} of them regressions")
    w = max(len(e) for e in entries) if entries else 10
    for e in entries:
        parts = ", ".join(f"{k}: {count[(e, k)]}" for k in kinds if count[(e, k)])
        print(f"{e:<{w}}  {sum(count[(e, k)] for k in kinds):3d}  ({parts})")


if __name__ == "__main__":
    main()
