"""Exit statuses of ``ppl-loo`` and the one-line error messages of bad input.

Every failure a user can cause ends the command with one line on stderr,
``ppl-loo: error: <file>: <what is wrong>; <the fix>``, and an exit status a script can test
(:data:`EXIT_CODES`); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import textwrap
import traceback
import warnings

from ppl_loo.stan_bridge import StanCompileError, StanDataError, StanEvaluationError

__all__ = ["EXIT_CODES", "EXIT_EPILOG", "OK", "DOUBTFUL", "BAD_INPUT", "COMPILE_ERROR", "STAN_ERROR", "INTERNAL",
           "CliError", "one_line", "run_guarded", "warnings_to_stderr", "for_the_command_line",
           "interrupted"]

OK = 0
DOUBTFUL = 1
BAD_INPUT = 2
COMPILE_ERROR = 3
STAN_ERROR = 4
INTERNAL = 5

#: status -> meaning, as the ``--help`` epilogs and the package docstring list them
EXIT_CODES = {
    OK: "success: every observation vouched for",
    DOUBTFUL: "results computed (and written), but some observations are doubtful (or a compared result "
              "has doubtful observations): consider --refit doubtful",
    BAD_INPUT: "usage error or bad input (missing or garbled file, data that do not match the program, "
               "a .nc file without a loo group, an output that exists without --overwrite)",
    COMPILE_ERROR: "the Stan program does not compile (stanc or the C++ compiler)",
    STAN_ERROR: "Stan failed while evaluating the program on the draws, or while sampling",
    INTERNAL: "unexpected internal error (a bug: rerun with --debug and report the traceback)",
}
EXIT_EPILOG = "exit status:\n" + "\n".join(
    textwrap.fill(v, 100, initial_indent=f"  {k}  ", subsequent_indent="     ") for k, v in EXIT_CODES.items())


#: the code excerpt of a stanc message: rules, numbered lines, the caret line
_CODE_LINE = re.compile(r"^(-+|\d+:.*|\^)$")


class CliError(Exception):
    """A failure with its file, what is wrong, the fix and the exit status."""

    def __init__(self, where, what, fix, code=BAD_INPUT):
        super().__init__(f"{where}: {str(what).rstrip('. ')}; {fix}")
        self.code = code


def one_line(text, limit=400):
    """``text`` on one line (whitespace runs collapsed), at most ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def compile_summary(err):
    """stanc's or the compiler's message reduced to one line: where (its first line) and what (its last)."""
    lines = [ln.strip() for ln in str(err).splitlines()]
    lines = [ln for ln in lines if ln and not _CODE_LINE.match(ln)
             and not ln.startswith(("stanc failed", "C++ compilation"))]
    if not lines:
        return one_line(err)
    where = re.sub(r" in '[^']*'", "", lines[0]).rstrip(":")
    return one_line(where if len(lines) == 1 else f"{where}: {lines[-1]}")


def _classify(err):
    """``(status, message)`` of an exception that escaped a subcommand."""
    if isinstance(err, CliError):
        return err.code, str(err)
    if isinstance(err, StanCompileError):
        return COMPILE_ERROR, f"Stan program: {compile_summary(err)}; fix the program (stanc's full message: --debug)"
    if isinstance(err, StanEvaluationError):
        return STAN_ERROR, (f"Stan program: Stan failed on the draws: {one_line(err)}; check that the program and "
                            "data are the ones the CSV files came from")
    if isinstance(err, StanDataError):
        return BAD_INPUT, f"data: {for_the_command_line(one_line(err))}; give the data file the program was run with"
    return INTERNAL, f"internal error: {type(err).__name__}: {one_line(err)}; rerun with --debug and report it"


def _quiet_after_interrupt():
    """After Ctrl-C, one line and nothing more: the work still running in JAX's and Stan's threads as the
    process shuts down (host callbacks told to stop, tracing outside the float64 context, a progress bar's last
    refresh) would print dozens of lines of tracebacks and warnings to the terminal. Warnings and logging are
    switched off and, where stderr is the process's own (the command line, not a caller's redirection), file
    descriptor 2 goes to /dev/null. Returns a duplicate of the original descriptor 2 (the caller writes its one
    line there and closes it), or None where stderr is not the process's own."""
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    if sys.stderr is sys.__stderr__:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            os.close(null)
            return saved
        except (OSError, ValueError):  # no file descriptor 2 to replace: nothing printed there either
            pass
    return None


def interrupted():
    """Ctrl-C: ``ppl-loo: interrupted`` on stderr, nothing after it; the exit status 130 (128 + SIGINT).
    Descriptor 2 is silenced before the line is written (to a duplicate of it): a thread still printing
    cannot slip a line in after it."""
    saved = _quiet_after_interrupt()
    if saved is None:
        print("ppl-loo: interrupted", file=sys.stderr, flush=True)
        return 130
    try:
        os.write(saved, b"ppl-loo: interrupted\n")
    except OSError:  # the terminal or pipe is gone: nobody left to tell
        pass
    finally:
        os.close(saved)
    return 130


def run_guarded(fn, args):
    """Run ``fn(args)``; an exception becomes one line on stderr and its exit status (``--debug``: the traceback)."""
    try:
        return fn(args)
    except KeyboardInterrupt:
        return interrupted()
    except Exception as err:  # noqa: BLE001 - the one place every failure is turned into a status
        code, message = _classify(err)
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"ppl-loo: error: {message}", file=sys.stderr)
        return code


#: the Python API's advice in the library's messages, and what a command-line user types instead
_CLI_ADVICE = (("pl.loo(data, model, refit='doubtful', random_seed=...)", "--refit doubtful --seed N"),
               ("pl.loo(..., refit='doubtful', random_seed=...)", "--refit doubtful --seed N"),
               ("call pl.loo again", "run ppl-loo loo again"),
               ("res.reason", "--json: reason"), ("res.doubtful", "--json: doubtful"),
               ("res.evidence", "--json: evidence"), ("res.pareto_k_ids()", "--json: pareto_k_psis"),
               ("res.summary_table(flagged_only=True)", "--json: elpd_i, evidence, reason"),
               ("compute={'check_log_lik': False}", "--no-check-log-lik"))


#: the same for the advice on which data entry is the number of observations (``pl.StanModel(..., n_obs=...)``)
_CLI_PATTERNS = ((re.compile(r"Pass n_obs='N' \(the name of that entry\) to pl\.StanModel"),
                  "Pass --n-obs NAME (the name of that entry), e.g. --n-obs N"),
                 (re.compile(r"Pass n_obs=\.\.\. to pl\.StanModel, for example n_obs='([^']*)', and "
                             r"obs_keys=\[\.\.\.\] if not every such array is indexed by observation"),
                  r"Pass --n-obs NAME, for example --n-obs \1"),
                 (re.compile(r"\bn_obs='([^']*)'"), r"--n-obs \1"))


def for_the_command_line(text):
    """``text`` with the Python API's advice (``pl.loo(..., refit='doubtful', ...)``, ``res.reason``,
    ``n_obs='N'`` of ``pl.StanModel``) replaced by the command line's (``--refit doubtful --seed N``, ``--json``,
    ``--n-obs N``)."""
    for api, cli in _CLI_ADVICE:
        text = text.replace(api, cli)
    for pattern, cli in _CLI_PATTERNS:
        text = pattern.sub(cli, text)
    return text


@contextlib.contextmanager
def warnings_to_stderr(quiet=False):
    """Python warnings raised inside the block as ``ppl-loo: warning: ...`` lines (none with ``quiet``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen = set()
            for w in caught:
                text = for_the_command_line(one_line(w.message, limit=2000))
                if not quiet and text not in seen:
                    seen.add(text)
                    print(f"ppl-loo: warning: {text}", file=sys.stderr)
