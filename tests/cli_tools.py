"""The command line in-process, for the tests of ``ppl_loo.cli``."""

from __future__ import annotations

import contextlib
import io
import os

from ppl_loo.cli import main


def run_cli(*argv):
    """``main(argv)`` in-process: ``(status, stdout, stderr)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([os.fspath(a) for a in argv])
    return code, out.getvalue(), err.getvalue()
