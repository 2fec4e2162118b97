"""``ppl-loo loo`` (adaptive LOO of CmdStan output) and ``ppl-loo sample`` (CmdStan-format CSV without CmdStan)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from pathlib import Path

import numpy as np

import ppl_loo as pl
from ppl_loo.adapters.stan.posterior import compile_sampling_program
from ppl_loo.cli.errors import (
    BAD_INPUT,
    DOUBTFUL,
    EXIT_EPILOG,
    OK,
    STAN_ERROR,
    CliError,
    for_the_command_line,
    one_line,
    warnings_to_stderr,
)
from ppl_loo.cli.inputs import (
    check_csv_matches_program,
    check_output,
    check_program_file,
    expand_csv_args,
    load_data,
    load_program,
    observed_mapping,
    read_csvs,
    write_atomic,
)
from ppl_loo.stan_bridge import StanDataError, StanEvaluationError
from ppl_loo.stan_bridge.compile import cache_dir, cached_build
from ppl_loo.stan_bridge.sampler import SAMPLER_FLAG, sample_cmdstan_csv
from ppl_loo.workflow.loo.categories import category_counts, observation_categories
from ppl_loo.workflow.loo.draws import LogLikMismatchError

__all__ = ["add_loo_parser", "add_sample_parser", "json_summary", "run_loo", "run_sample"]

LOO_EXAMPLE = """\
examples:
  ppl-loo loo eight_schools.stan --data eight_schools.data.R 'output_*.csv'
  ppl-loo loo model.stan --data model.json out/output_1.csv out/output_2.csv --out fit.nc
  ppl-loo loo model.stan --data model.json out/ --posterior-predictive y_rep=y --refit doubtful --seed 1 --json

--posterior-predictive NAME keeps the generated quantity NAME as group posterior_predictive;
NAME=DATA stores it there under the data entry's name DATA and adds the data file's DATA as group
observed_data (ArviZ pairs the two groups by name), e.g. y_hat=y.
"""

SAMPLE_EXAMPLE = """\
example:
  ppl-loo sample eight_schools_centered.stan --data eight_schools.data.R --out-dir centered --chains 4 --seed 1
  ppl-loo loo eight_schools_centered.stan --data eight_schools.data.R 'centered/output_*.csv'

Runs Stan's own NUTS in-process (CmdStan's default method=sample: diagonal metric, windowed adaptation)
and writes CmdStan-format CSV files <out-dir>/<prefix>_<chain>.csv: a way to get CmdStan output without
installing CmdStan. The program is compiled once with the sampler (cached), and beside the sampler the
derived mixture program that loo runs where plain PSIS leaves an observation unsettled (cached too).
"""


def _common(p):
    p.add_argument("--quiet", action="store_true", help="no progress messages, progress bar or warnings")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")


def add_loo_parser(sub):
    """Add the ``loo`` subcommand to the subparsers ``sub`` and return its parser."""
    p = sub.add_parser("loo", help="adaptive LOO of CmdStan output (program + data + CSV files)",
                       description="Adaptive importance-sampling LOO-CV of a Stan program's CmdStan output: "
                                   "compiles the program (cached), reads the CSV files, runs pl.loo with the "
                                   "program and prints the elpd table and what was adapted, doubtful or refit.",
                       epilog=LOO_EXAMPLE + "\n" + EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stan_file", metavar="MODEL.stan", help="the Stan program the CSV files were written by")
    p.add_argument("csv", nargs="+", metavar="CSV",
                   help="CmdStan CSV files (one per chain), directories of them, or quoted glob patterns")
    p.add_argument("--data", metavar="DATA", help="the data file (.json or R dump .R) the program was run with")
    p.add_argument("--log-lik", default="log_lik", metavar="NAME",
                   help="generated quantity with the pointwise log-likelihood (default log_lik; a program "
                        "without it gets the log-likelihood by data deletion)")
    p.add_argument("--no-check-log-lik", dest="check_log_lik", action="store_false",
                   help="use the program's log-likelihood even where the CSV files' --log-lik column differs from it "
                        "beyond the CSV's precision (by default such CSV files are refused, exit status 2: they "
                        "were written by another program or with other data)")
    p.add_argument("--posterior-predictive", action="append", metavar="NAME[=DATA]",
                   help="generated quantity for the posterior_predictive group (repeatable); see below")
    p.add_argument("--n-obs", metavar="NAME", help="data entry with the number of observations (when ambiguous)")
    p.add_argument("--refit", choices=["none", "doubtful", "flagged"], default="none",
                   help="exact LOO by refitting the program without each doubtful (or each adapted) observation")
    p.add_argument("--mixture", choices=["auto", "on", "off"], default="auto",
                   help="second opinion by mixture importance sampling (one extra run of Stan's NUTS on the "
                        "program's derived mixture target): auto (default) before the search whenever plain PSIS "
                        "leaves an observation unsettled (in-memory log-likelihood), on always, off never")
    p.add_argument("--smc", choices=["auto", "on", "off"], default="auto",
                   help="second opinion by tempered SMC from the draws to each LOO posterior: auto (default) for "
                        "what is still unsettled, on for every searched observation, off never")
    p.add_argument("--k-threshold", type=float, metavar="K",
                   help="Pareto k above which an observation is not vouched for (default min(1 - 1/log10(S), 0.7))")
    p.add_argument("--seed", type=int, default=1, help="seed of the refits and second opinions (default 1)")
    for name in ("chains", "warmup", "draws"):
        p.add_argument(f"--refit-{name}", type=int, metavar="N",
                       help=f"{name} of each refit (default: the {name} of the CSV files' run)")
    p.add_argument("--out", metavar="FILE.nc", help="write the draws and the result (group loo) to netCDF")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    _common(p)
    p.set_defaults(run=run_loo)
    return p


def add_sample_parser(sub):
    """Add the ``sample`` subcommand to the subparsers ``sub`` and return its parser."""
    p = sub.add_parser("sample", help="Stan's NUTS in-process, CmdStan-format CSV files (no CmdStan needed)",
                       description="Sample a Stan program with Stan's NUTS in-process and write CmdStan-format CSV.",
                       epilog=SAMPLE_EXAMPLE + "\n" + EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stan_file", metavar="MODEL.stan")
    p.add_argument("--data", metavar="DATA", help="data file (.json or R dump .R)")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="directory of the CSV files (created)")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000, help="sampling draws per chain")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--thin", type=int, default=1)
    p.add_argument("--adapt-delta", type=float, default=0.8)
    p.add_argument("--max-depth", type=int, default=10)
    p.add_argument("--prefix", default="output", help="file names <prefix>_<chain>.csv (default output)")
    p.add_argument("--overwrite", action="store_true", help="replace existing CSV files")
    _common(p)
    p.set_defaults(run=run_sample)
    return p


def _say(args, text):
    if not args.quiet:
        print(f"ppl-loo: {text}", file=sys.stderr, flush=True)


def _compile(args, data, sampler=False):
    """The program, with a notice when it is not in the cache yet (the first build takes a minute)."""
    try:
        flags = (SAMPLER_FLAG,) if sampler else ()
        # the sampler's library serves loo as well (ppl-loo sample, then loo: one build)
        cached = cached_build(Path(args.stan_file).read_text(), flags, accept_sampler=not sampler) is not None
    except Exception:  # noqa: BLE001 - a missing file or a bad cache folder: load_program names it
        cached = True
    if not cached:
        _say(args, f"{args.stan_file}: compiling the Stan program{' with the sampler' if sampler else ''} "
                   f"(about a minute, once: cached in {cache_dir()})")
    return load_program(args.stan_file, data, args.data, n_obs=getattr(args, "n_obs", None),
                        log_likelihood=getattr(args, "log_lik", "log_lik"), sampler=sampler)


_OPINION = {"auto": "auto", "on": True, "off": False}  # --mixture / --smc to pl.SecondOpinions' mixture / smc


def _run_loo(args, tree, model):
    """``pl.loo`` with the program; Stan's errors name the program, the engine's input errors too."""
    refit = None if args.refit == "none" else args.refit
    kw = {k: getattr(args, f"refit_{k}") for k in ("chains", "warmup", "draws") if getattr(args, f"refit_{k}")}
    try:
        with warnings_to_stderr(args.quiet):
            return pl.loo(tree, model, refit=refit, random_seed=args.seed, progressbar=not args.quiet,
                          k_threshold=getattr(args, "k_threshold", None),
                          second_opinions=pl.SecondOpinions(mixture=_OPINION[getattr(args, "mixture", "off")],
                                                            smc=_OPINION[getattr(args, "smc", "off")],
                                                            refit_options=kw or None),
                          compute=pl.ComputeOptions(check_log_lik=getattr(args, "check_log_lik", True)))
    except LogLikMismatchError as err:
        raise _mismatch_error(args, tree, model, err) from err
    except StanEvaluationError as err:
        raise CliError(args.stan_file, f"Stan failed on the draws: {one_line(err)}",
                       "check that the program and the data are the ones the CSV files came from",
                       STAN_ERROR) from err
    except StanDataError as err:
        raise CliError(args.data or args.stan_file, for_the_command_line(one_line(err)),
                       "check the data file against the program") from err
    except (ValueError, KeyError, TypeError) as err:
        raise CliError(args.stan_file, one_line(err.args[0] if err.args else err),
                       "check that the program, the data file and the CSV files belong together "
                       "(--debug for the traceback)") from err


def _mismatch_error(args, tree, model, err):
    """The CSV files' log-likelihood is not the program's with this data file: one line naming the files, the
    observation, what differs (and the CSV columns the program does not declare), and the fix."""
    paths = list(getattr(args, "csv_paths", None) or args.csv)
    csvs = paths[0] + (f" (and {len(paths) - 1} more)" if len(paths) > 1 else "")
    where = f"{csvs} and {args.data}" if args.data else csvs
    program = Path(args.stan_file).name
    what = err.detail.replace(f"log_likelihood[{err.var_name!r}]", f"column {err.var_name!r} of the CSV files", 1)
    if args.data:
        what = what.replace("in the model's data:", f"in {Path(args.data).name}:")
    what = what.replace("the model's", f"{program}'s").replace("this model", program)
    declared = set(model.get_dims()) | {err.var_name}
    extra = [v for v in tree["posterior"].to_dataset().data_vars if v not in declared]
    if extra:
        what += f"; the CSV files have columns {program} does not declare ({', '.join(map(str, extra[:5]))})"
    column = "" if err.var_name == "log_lik" else " and --log-lik the column with the pointwise log-likelihood"
    fix = (f"give the program and the data file the CSV files were written with{column}, or --no-check-log-lik "
           f"to use {program}'s log-likelihood anyway")
    return CliError(where, what, fix)


def run_loo(args):
    """``ppl-loo loo``; exit status 0, or 1 when some observations are doubtful."""
    k = getattr(args, "k_threshold", None)
    if k is not None and not (math.isfinite(k) and 0 < k <= 1):
        raise CliError("--k-threshold", f"{k} is not a Pareto k threshold in (0, 1]", "e.g. --k-threshold 0.7")
    out = check_output(args.out, args.overwrite)
    check_program_file(args.stan_file)
    data = load_data(args.data)
    with warnings_to_stderr(args.quiet):  # a file given twice, identical chains
        paths = expand_csv_args(args.csv)
        args.csv_paths = paths
        pp, observed = observed_mapping(args.posterior_predictive, data, args.data, paths[0])
        if args.log_lik in ("", "none"):  # no log-likelihood column: by data deletion
            args.log_lik = None
        tree = read_csvs(paths, log_likelihood=args.log_lik, posterior_predictive=pp, observed=observed)
    model = _compile(args, data)
    check_csv_matches_program(tree, model, paths, args.stan_file, args.data)
    if "log_likelihood" not in tree.children:  # say which path is taken: no stored log-likelihood to compare with
        _say(args, (f"the CSV files have no column {args.log_lik!r}" if args.log_lik else "--log-lik none")
             + ": the pointwise log-likelihood comes from the program by data deletion (the change in its log "
               "density when each observation is left out); --log-lik NAME names a generated quantity that "
               "holds it")
    _say(args, f"adaptive LOO of {args.stan_file} on {tree['posterior'].sizes['chain']} chains x "
               f"{tree['posterior'].sizes['draw']} draws")
    t0 = time.perf_counter()
    res = _run_loo(args, tree, model)
    _say(args, f"done in {time.perf_counter() - t0:.1f} s")
    n_doubtful = int(np.sum(res.doubtful.values)) if res.doubtful is not None else 0
    status = DOUBTFUL if n_doubtful else OK
    if out is not None:
        saved = pl.add_loo(tree, res)
        saved.attrs.update({"ppl_loo_stan_file": str(args.stan_file), "ppl_loo_data_file": str(args.data or ""),
                            "ppl_loo_csv_files": "\n".join(paths), "ppl_loo_stan_code": model.code})
        write_atomic(out, saved.to_netcdf)
        _say(args, f"wrote {out} (the draws and the result as group loo)")
    if args.json:
        print(json.dumps(json_summary(res, stan_file=args.stan_file, data_file=args.data, csv_files=paths,
                                      out=out, status=status), indent=1))
    else:
        print(for_the_command_line(str(res)))
    if n_doubtful:
        _say(args, f"{n_doubtful} doubtful observation(s) (exit status 1)"
                   + ("" if res.refit is not None and np.any(res.refit.values) else
                      ": --refit doubtful --seed N replaces them by exact refits"))
    return status


def _finite(x):
    x = float(x)
    return x if math.isfinite(x) else None


def _values(da, cast):
    if da is None:
        return None
    return [cast(v) for v in np.asarray(da.values).ravel()]


def json_summary(res, *, stan_file=None, data_file=None, csv_files=(), out=None, status=None):
    """The result as plain JSON-able data (non-finite numbers as null)."""
    tr = np.asarray(res.transform.values).ravel().astype(str)
    return {
        "elpd_loo": _finite(res.elpd), "se": _finite(res.se), "p_loo": _finite(res.p),
        "n_obs": int(res.n_data_points), "n_draws": int(res.n_samples), "k_threshold": _finite(res.good_k),
        **{f"n_{key}": count for key, count in category_counts(observation_categories(res)).items() if key != "psis"},
        "max_rhat": _finite(res.max_rhat), "var_name": res.var_name,
        "approximation": getattr(res, "approximation", None),  # draws of an approximation (CmdStan variational, ...)
        "elpd_i": _values(res.elpd_i, _finite), "mcse_elpd_i": _values(res.mcse_elpd_i, _finite),
        "pareto_k_psis": _values(res.pareto_k_psis, _finite), "pareto_k": _values(res.pareto_k, _finite),
        "transform": tr.tolist(), "doubtful": _values(res.doubtful, bool), "refit": _values(res.refit, bool),
        "evidence": _values(res.evidence, str), "reason": _values(res.reason, str),
        "stan_file": None if stan_file is None else str(stan_file),
        "data_file": None if data_file is None else str(data_file),
        "csv_files": [str(p) for p in csv_files], "out": None if out is None else str(out), "exit_status": status,
    }


def run_sample(args):
    """``ppl-loo sample``: exit status 0."""
    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(args.out_dir, "is a file, not a directory", "give a directory for the CSV files")
    targets = [out_dir / f"{args.prefix}_{c}.csv" for c in range(1, args.chains + 1)]
    present = [str(t) for t in targets if t.exists()]
    if present and not args.overwrite:
        raise CliError(present[0], "exists", "pass --overwrite to replace the CSV files, or choose another --out-dir")
    if args.chains < 1 or args.draws < 1 or args.warmup < 0 or args.thin < 1:
        raise CliError("--chains/--draws/--warmup/--thin", "must be positive (warmup: non-negative)",
                       "e.g. --chains 4 --warmup 1000 --draws 1000", BAD_INPUT)
    check_program_file(args.stan_file)
    data = load_data(args.data)
    model = _compile(args, data, sampler=True)
    ahead = threading.Thread(target=compile_sampling_program, args=(model, getattr(args, "log_lik", "log_lik")),
                             name="ppl_loo-compile-sampling", daemon=True)
    ahead.start()  # beside the sampler: the derived program ppl-loo loo samples (mixture run, refits)
    _say(args, f"sampling {args.stan_file}: {args.chains} chains x ({args.warmup} warmup + {args.draws} draws), "
               f"seed {args.seed}")
    try:
        paths, _ = sample_cmdstan_csv(model, out_dir, chains=args.chains, random_seed=args.seed, num_warmup=args.warmup,
                                      num_samples=args.draws, thin=args.thin, adapt_delta=args.adapt_delta,
                                      max_depth=args.max_depth, prefix=args.prefix, data_file=args.data)
    except StanEvaluationError as err:
        raise CliError(args.stan_file, one_line(err), "check the program and its data", STAN_ERROR) from err
    if ahead.is_alive():
        _say(args, "compiling the derived mixture program that ppl-loo loo runs on hard observations (once: cached)")
        ahead.join()
    for p in paths:
        print(p)
    _say(args, f"next: ppl-loo loo {args.stan_file} --data {args.data or 'DATA'} '{out_dir}/{args.prefix}_*.csv'")
    return OK
