"""Reliability rows of the command line: every bad input ends ``ppl-loo`` with exit status 2 and one line,
``ppl-loo: error: <file or option>: <what>; <fix>``, before any Stan program is compiled.

Most rows call ``ppl_loo.cli.main`` in-process (the same code path, stderr captured); the rows marked
``subprocess`` run ``python -m ppl_loo.cli`` as a script would, for the exit status the shell sees.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
from arviz_base import from_dict
from data_paths import DATA
from data_paths import EIGHT_SCHOOLS as ES_DIR
from rows import Row, check_row, params
from scipy.stats import norm

import ppl_loo as pl
from ppl_loo.cli import main

ROOT = Path(__file__).resolve().parents[2]
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"
OPTIMIZE = DATA / "cmdstan_optimize_rosenbrock_mle.csv"

ES_DATA = ES_DIR / "eight_schools.data.R"


class Ran(NamedTuple):
    code: int
    out: str
    err: str


def cli(*argv, via_subprocess=False) -> Ran:
    argv = [os.fspath(a) for a in argv]
    if via_subprocess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        p = subprocess.run([sys.executable, "-m", "ppl_loo.cli", *argv], capture_output=True, text=True, timeout=300,
                           env=env, cwd=ROOT)
        return Ran(p.returncode, p.stdout, p.stderr)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    return Ran(code, out.getvalue(), err.getvalue())


def fails(where, *says, code=2, prefix="ppl-loo: error: "):
    """The check of a bad-input row: exit status ``code``, one error line naming ``where`` and saying ``says``."""

    def check(ran: Ran):
        assert ran.code == code, f"exit status {ran.code}, stderr:\n{ran.err}"
        lines = [ln for ln in ran.err.splitlines() if ln.startswith("ppl-loo: error") or "error:" in ln]
        assert len(lines) == 1, ran.err
        line = lines[0]
        assert "Traceback" not in ran.err and "compiling" not in ran.err, ran.err  # no compile for an input error
        if prefix:
            assert line.startswith(f"{prefix}{where}"), line
        else:
            assert str(where) in line, line
        low = line.lower()
        for s in says:
            assert s.lower() in low, f"{s!r} not in {line!r}"

    return check


@functools.cache
def tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="ppl_loo_rows_cli_"))


def write(name, text=None, data=None) -> Path:
    p = tmp() / name
    if data is not None:
        p.write_bytes(data)
    else:
        p.write_text(text)
    return p


def es(i=1):
    return ES_DIR / f"output_{i}.csv"


def truncated():
    src = es().read_text()
    return write("truncated.csv", src[: int(len(src) * 0.6)])


def header_only():
    lines = es().read_text().splitlines(True)
    k = next(i for i, ln in enumerate(lines) if ln.startswith("lp__"))
    return write("header_only.csv", "".join(lines[: k + 1]))


Y = np.array([0.3, -1.2, 0.8, 0.1, 0.5, -0.4, 1.9, 0.0])


@functools.cache
def result_nc(name="fit_a", shift=0.0) -> Path:
    """A saved result: exact posterior draws of a normal mean (sd 1, prior N(0, 2^2)), plain PSIS-LOO as group loo."""
    prec = 1 / 4 + len(Y)
    m, v = (np.sum(Y) / prec) + shift, 1 / prec
    theta = np.random.default_rng(2).normal(m, np.sqrt(v), size=(2, 500))
    tree = from_dict({"posterior": {"mu": theta},
                      "log_likelihood": {"y": norm.logpdf(Y[None, None, :], theta[..., None], 1.0)}})
    path = tmp() / f"{name}.nc"
    pl.add_loo(tree, pl.loo(tree)).to_netcdf(path)
    return path


def no_loo_nc():
    path = tmp() / "no_loo.nc"
    from_dict({"posterior": {"mu": np.zeros((2, 20))}}).to_netcdf(path)
    return path


def existing(name):
    p = tmp() / name
    p.write_text("keep me\n")
    return p


@functools.cache
def fresh_program() -> Path:
    """The eight-schools program with a comment of its own: not in the compile cache, so a row whose input error
    were found only after compiling would print the compile notice (and take a minute) and fail."""
    p = tmp() / "eight_schools_fresh.stan"
    p.write_text(EIGHT.read_text() + f"\n// reliability rows {os.getpid()} {tmp().name}\n")
    return p


def loo(*csv, extra=(), via_subprocess=False):
    return cli("loo", fresh_program(), "--data", ES_DATA, *csv, *extra, via_subprocess=via_subprocess)


def warned_then_failed(warning, where, *says):
    """Exit status 2 with its error line, after the warning line ``ppl-loo: warning: ...`` saying ``warning``."""
    failed = fails(where, *says)

    def check(ran: Ran):
        failed(ran)
        assert any(ln.startswith("ppl-loo: warning: ") and warning in ln for ln in ran.err.splitlines()), ran.err

    return check


def copy_of(i=1):
    return Path(shutil.copy(es(i), tmp() / f"copy_of_output_{i}.csv"))


def vb_through_cli():
    """``ppl-loo loo`` of a CmdStan method=variational file (the conjugate normal model of test_rows_cmdstan)."""
    import json

    import test_rows_cmdstan as vb

    data = tmp() / "normal.json"
    data.write_text(json.dumps({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in vb.DATA.items()}))
    return cli("loo", vb.NORMAL, "--data", data, vb.vb_csv(), "--json", "--quiet"), float(vb.exact_loo().sum())


def check_vb_cli(value):
    import json

    ran, exact = value
    assert ran.code == 0, ran.err
    summary = json.loads(ran.out)
    assert summary["approximation"] == "variational" and summary["n_draws"] == 4000
    assert abs(summary["elpd_loo"] - exact) < 0.1


def check_compare_ok(ran: Ran):
    assert ran.code == 0, ran.err
    assert "fit_a" in ran.out and "fit_b" in ran.out


L, C, R = "ppl-loo loo", "ppl-loo compare", "ppl-loo report"
ROWS = [
    # ------------------------------------------------------------------ ppl-loo loo: the program and the data
    Row(L, "files", "missing Stan program (subprocess)", lambda: cli("loo", tmp() / "nothere.stan", es(),
        via_subprocess=True), check=fails(tmp() / "nothere.stan", "no such Stan program", "path of the .stan file")),
    Row(L, "files", "Stan program is a directory", lambda: cli("loo", tmp(), es()),
        check=fails(tmp(), "is a directory", ".stan")),
    Row(L, "files", "missing data file", lambda: cli("loo", EIGHT, "--data", tmp() / "nodata.json", es()),
        check=fails(tmp() / "nodata.json", "no such data file", ".json or .R")),
    Row(L, "files", "garbled JSON data file",
        lambda: cli("loo", EIGHT, "--data", write("bad.json", "{\"J\": 8,"), es()),
        check=fails(tmp() / "bad.json", "not a readable JSON data file", "JSON (.json) or R dump")),
    # ------------------------------------------------------------------ ppl-loo loo: the CSV files
    Row(L, "files", "missing CSV file", lambda: loo(tmp() / "nothere.csv"),
        check=fails(tmp() / "nothere.csv", "no such CSV file", "output_*.csv"), regression=True),
    Row(L, "files", "empty CSV file", lambda: loo(write("empty.csv", "")),
        check=fails(tmp() / "empty.csv", "empty", "give the CSV files")),
    Row(L, "files", "truncated CSV file", lambda: loo(es(2), truncated()),
        check=fails(tmp() / "truncated.csv", "truncated", "give the CSV files"), regression=True),
    Row(L, "files", "binary CSV file", lambda: loo(write("binary.csv", data=bytes(range(256)) * 8)),
        check=fails(tmp() / "binary.csv", "binary", "give the CSV files")),
    Row(L, "files", "CSV header and no draws", lambda: loo(header_only()),
        check=fails(tmp() / "header_only.csv", "no draws", "give the CSV files"), regression=True),
    Row(L, "files", "CSV of another program", lambda: loo(write("other.csv", "a,b\n1,2\n")),
        check=fails(tmp() / "other.csv", "not CmdStan output", "give the CSV files")),
    Row(L, "files", "glob matching nothing", lambda: loo(str(tmp() / "zz_*.csv")),
        check=fails(tmp() / "zz_*.csv", "no file matches", "pattern")),
    Row(L, "CmdStan methods", "method=optimize output (subprocess)", lambda: loo(OPTIMIZE, via_subprocess=True),
        check=fails(OPTIMIZE, "method=optimize", "method=sample"), regression=True),
    Row(L, "CmdStan methods", "method=variational output: Eq. 13, exact LOO", vb_through_cli, check=check_vb_cli,
        warns=None, regression=True),
    # ------------------------------------------------------------------ ppl-loo loo: duplicates
    Row(L, "duplicates", "the same CSV file twice (read once, with a warning)", lambda: loo(es(1), es(1), extra=(
        "--posterior-predictive", "theta=zz")), check=warned_then_failed(f"{es(1)} is given twice; it is read once",
        ES_DATA, "no data entry 'zz'"), regression=True),
    Row(L, "duplicates", "a copy of a chain (identical draws)",
        lambda: loo(es(1), copy_of(1), extra=("--log-lik", "zz")),
        check=warned_then_failed("identical draws", es(1), "'zz' is not a variable", "--log-lik")),
    # ------------------------------------------------------------------ ppl-loo loo: options and outputs
    Row(L, "options", "--k-threshold x (subprocess)",
        lambda: loo(es(), extra=("--k-threshold", "x"), via_subprocess=True),
        check=fails("argument --k-threshold", "invalid float value: 'x'", prefix=None), regression=True),
    Row(L, "options", "--k-threshold out of range", lambda: loo(es(), extra=("--k-threshold", "5")),
        check=fails("--k-threshold", "(0, 1]", "--k-threshold 0.7")),
    Row(L, "options", "--posterior-predictive naming no data entry", lambda: loo(es(), extra=("--posterior-predictive",
        "theta=zz")), check=fails(ES_DATA, "no data entry 'zz'", "name a data entry")),
    Row(L, "overwrite and escaping", "--out exists, no --overwrite",
        lambda: loo(es(), extra=("--out", existing("fit.nc"))),
        check=fails(tmp() / "fit.nc", "exists", "--overwrite")),
    Row(L, "overwrite and escaping", "--out in a missing folder",
        lambda: loo(es(), extra=("--out", tmp() / "no" / "f.nc")),
        check=fails(tmp() / "no" / "f.nc", "does not exist", "create it")),
    # ------------------------------------------------------------------ ppl-loo compare / report
    Row(C, "files", "missing result file", lambda: cli("compare", result_nc(), tmp() / "gone.nc"),
        check=fails(tmp() / "gone.nc", "no such result file", "ppl-loo loo")),
    Row(C, "files", "garbled .nc file", lambda: cli("compare", result_nc(), write("bad.nc", "not netcdf")),
        check=fails(tmp() / "bad.nc", "not a netcdf file", "ppl-loo loo")),
    Row(C, "files", ".nc without a loo group", lambda: cli("compare", result_nc(), no_loo_nc()),
        check=fails(tmp() / "no_loo.nc", "no 'loo' group", "pl.add_loo")),
    Row(C, "options", "--names of another length", lambda: cli("compare", result_nc(), result_nc("fit_b", 0.3),
        "--names", "a"), check=fails("--names", "1 names for 2 files", "one name per file")),
    Row(C, "options", "--names repeated", lambda: cli("compare", result_nc(), result_nc("fit_b", 0.3),
        "--names", "a", "a"), check=fails("--names", "repeat", "its own name")),
    Row(C, "overwrite and escaping", "--html exists, no --overwrite", lambda: cli("compare", result_nc(),
        "--html", existing("cmp.html")), check=fails(tmp() / "cmp.html", "exists", "--overwrite")),
    Row(C, "mismatched data and results", "two results of the same data (control)",
        lambda: cli("compare", result_nc(), result_nc("fit_b", 0.3)), check=check_compare_ok, warns=None),
    Row(R, "overwrite and escaping", "--out exists, no --overwrite", lambda: cli("report", result_nc(),
        "--out", existing("rep.html")), check=fails(tmp() / "rep.html", "exists", "--overwrite")),
    Row(R, "files", ".nc without a loo group", lambda: cli("report", no_loo_nc(), "--out", tmp() / "r.html"),
        check=fails(tmp() / "no_loo.nc", "no 'loo' group", "ppl-loo loo")),
]


@params(ROWS)
def test_row(row):
    check_row(row)


def test_outputs_untouched():
    """A refused output keeps its content, and nothing else is written beside it."""
    runs = {"fit.nc": lambda p: loo(es(), extra=("--out", p)),
            "cmp.html": lambda p: cli("compare", result_nc(), "--html", p),
            "rep.html": lambda p: cli("report", result_nc(), "--out", p)}
    result_nc()  # the input, written before the folder is listed
    for name, run in runs.items():
        p = existing(name)
        before = sorted(os.listdir(tmp()))
        assert run(p).code == 2
        assert p.read_text() == "keep me\n"
        assert sorted(os.listdir(tmp())) == before
