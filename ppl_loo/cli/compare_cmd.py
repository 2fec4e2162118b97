"""``ppl-loo compare`` and ``ppl-loo report``: saved results (``.nc`` files with a ``loo`` group) side by side."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import textwrap

import numpy as np
import pandas as pd

import ppl_loo as pl
from ppl_loo.cli.errors import DOUBTFUL, EXIT_EPILOG, OK, CliError, one_line, warnings_to_stderr
from ppl_loo.cli.inputs import check_output, load_results
from ppl_loo.workflow.downstream.compare import DEFAULT_DECIMALS, LEGEND

__all__ = ["add_compare_parser", "add_report_parser", "compare_records", "run_compare", "run_report"]

COMPARE_EXAMPLE = """\
examples:
  ppl-loo compare centered.nc noncentered.nc
  ppl-loo compare fit_a.nc fit_b.nc --names linear quadratic --html report.html --json
  ppl-loo compare centered.nc noncentered.nc --round-to 1

The .nc files are what `ppl-loo loo ... --out FILE.nc` writes (or pl.add_loo(tree, res).to_netcdf(FILE.nc)).
Models are named by their file names unless --names is given. The table prints every number with 2
decimals (--round-to N: N decimals); --json gives the unrounded numbers.
"""

REPORT_EXAMPLE = """\
example:
  ppl-loo report centered.nc noncentered.nc --out report.html --title "Eight schools"

A self-contained HTML page (pl.report): the comparison table, each model's pointwise diagnostics, and
what was adapted, doubtful or refit.
"""


def _common(p):
    p.add_argument("results", nargs="+", metavar="RESULT.nc", help="saved results (netCDF with a loo group)")
    p.add_argument("--names", nargs="+", metavar="NAME", help="one name per result (default: the file names)")
    p.add_argument("--title", help="title of the HTML report")
    p.add_argument("--overwrite", action="store_true", help="replace an existing HTML file")
    p.add_argument("--quiet", action="store_true", help="no progress messages or warnings")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")


def add_compare_parser(sub):
    """Add the ``compare`` subcommand to the subparsers ``sub`` and return its parser."""
    p = sub.add_parser("compare", help="compare saved results (pl.compare), optionally with an HTML report",
                       description="Read saved LOO results and print pl.compare's table: elpd differences, their "
                                   "SE, weights, and how many observations were adapted, doubtful or refit.",
                       epilog=COMPARE_EXAMPLE + "\n" + EXIT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("--html", metavar="REPORT.html", help="also write the HTML report (pl.report)")
    p.add_argument("--json", action="store_true", help="print the table as JSON instead (unrounded numbers)")
    p.add_argument("--round-to", metavar="N", default=None,
                   help=f"decimals of every number in the printed table (default {DEFAULT_DECIMALS}, like R's "
                        "loo_compare; the numbers are not rounded otherwise)")
    p.set_defaults(run=run_compare)
    return p


def add_report_parser(sub):
    """Add the ``report`` subcommand to the subparsers ``sub`` and return its parser."""
    p = sub.add_parser("report", help="write the self-contained HTML report of saved results (pl.report)",
                       description="Write a self-contained HTML report of saved LOO results (pl.report).",
                       epilog=REPORT_EXAMPLE + "\n" + EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("--out", required=True, metavar="REPORT.html", help="the HTML file to write")
    p.set_defaults(run=run_report)
    return p


def _load(args):
    """The results (one alone is allowed, as in ``pl.compare``)."""
    return load_results(args.results, args.names)


def _status(results):
    """1 when a result has doubtful observations, else 0."""
    for tree in results.values():
        res = pl.LooResult.from_datatree(tree)
        if res.doubtful is not None and bool(np.any(res.doubtful.values)):
            return DOUBTFUL
    return OK


def _report(results, path, args):
    kwargs = {"title": args.title} if args.title else {}
    try:
        with warnings_to_stderr(args.quiet):
            pl.report(results, path, overwrite=args.overwrite, **kwargs)  # written atomically by pl.report
    except ValueError as err:
        raise CliError(", ".join(args.results), one_line(err), "give results fitted to the same data") from err
    if not args.quiet:
        print(f"ppl-loo: wrote {path}", file=sys.stderr)


def _plain(v):
    if v is pd.NA:
        return None
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def compare_records(df):
    """``pl.compare``'s DataFrame (its unrounded numbers) as a list of ``{"name": ..., column: value}`` in rank order
    (NaN as null)."""
    return [{"name": str(name), **{str(k): _plain(v) for k, v in row.items()}} for name, row in df.iterrows()]


def round_to_arg(text):
    """``--round-to``'s value: a whole number of decimals >= 0 (else a one-line error, exit status 2)."""
    if text is None:
        return DEFAULT_DECIMALS
    value = str(text).strip()
    if not (value.isascii() and value.isdigit()):  # digits only: no sign, no decimal point, no exponent
        raise CliError("--round-to", f"{text!r} is not a number of decimals",
                       f"give a whole number >= 0, e.g. --round-to {DEFAULT_DECIMALS}")
    return int(value)


def run_compare(args):
    """``ppl-loo compare``; exit status 0, or 1 when a result has doubtful observations."""
    decimals = round_to_arg(getattr(args, "round_to", None))
    html = check_output(args.html, args.overwrite, "HTML report")
    results = _load(args)
    try:
        with warnings_to_stderr(args.quiet):  # full precision; the printed table rounds to `decimals`
            df = pl.compare(results, round_to=decimals)
    except ValueError as err:  # results that cannot be compared (different observations, scales)
        raise CliError(", ".join(args.results), one_line(err), "give results fitted to the same data") from err
    if args.json:
        print(json.dumps({"models": compare_records(df)}, indent=1))
    else:
        print(df.to_string(line_width=shutil.get_terminal_size().columns))  # blocks as wide as the terminal
        if not args.quiet:
            print("\n" + textwrap.fill(LEGEND, width=100))
    if html is not None:
        _report(results, html, args)
    return _status(results)


def run_report(args):
    """``ppl-loo report``; exit status 0, or 1 when a result has doubtful observations."""
    out = check_output(args.out, args.overwrite, "HTML report")
    results = _load(args)
    _report(results, out, args)
    print(out)
    return _status(results)
