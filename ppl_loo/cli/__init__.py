"""The ``ppl-loo`` command line (user surface).

Subcommands::

    ppl-loo demo                                   the embedded ovarian demo, end to end
    ppl-loo loo MODEL.stan --data DATA CSV [CSV ...] [--out FIT.nc] [--json] [--refit doubtful]
                                                   adaptive LOO of CmdStan output
    ppl-loo compare A.nc B.nc ... [--names a b ...] [--html REPORT.html] [--json] [--round-to N]
                                                   compare saved results (pl.compare)
    ppl-loo report A.nc B.nc ... --out REPORT.html the self-contained HTML report (pl.report)
    ppl-loo sample MODEL.stan --data DATA --out-dir DIR [--chains 4] [--draws 1000] [--seed 1]
                                                   Stan's NUTS in-process, CmdStan-format CSV files

``ppl-loo SUBCOMMAND --help`` shows each one's options and an example.

Exit status (the same for every subcommand but ``demo``, which exits 0):

- 0: success, every observation vouched for;
- 1: results computed (and written), but some observations are doubtful, or a compared result has
  doubtful observations (``--refit doubtful`` replaces them by exact refits);
- 2: usage error or bad input: a missing or garbled file, data that do not match the program, a
  ``.nc`` file without a ``loo`` group, an output file that exists without ``--overwrite``;
- 3: the Stan program does not compile;
- 4: Stan failed while evaluating the program on the draws, or while sampling;
- 5: unexpected internal error (a bug: ``--debug`` shows the traceback).

Bad input ends the command with one line on stderr, ``ppl-loo: error: <file>: <what is wrong>;
<the fix>``, and no traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import sys

from ppl_loo.cli import compare_cmd, stan_cmd
from ppl_loo.cli import demo as demo_cmd
from ppl_loo.cli.demo import demo
from ppl_loo.cli.errors import EXIT_CODES, EXIT_EPILOG, interrupted, run_guarded

__all__ = ["EXIT_CODES", "build_parser", "demo", "main"]


def build_parser():
    """The ``ppl-loo`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="ppl-loo", description="Adaptive importance-sampling LOO-CV for Stan (CmdStan output), PyMC and JAX "
                                    "models. Run `ppl-loo SUBCOMMAND --help` for its options and an example.",
        epilog=EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    demo_cmd.add_parser(sub)
    stan_cmd.add_loo_parser(sub)
    compare_cmd.add_compare_parser(sub)
    compare_cmd.add_report_parser(sub)
    stan_cmd.add_sample_parser(sub)
    return parser


def main(argv=None):
    """Run ``ppl-loo`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":  # its errors keep their tracebacks; Ctrl-C is one line
        try:
            return args.run(args)
        except KeyboardInterrupt:
            return interrupted()
    return run_guarded(args.run, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
