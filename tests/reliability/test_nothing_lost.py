"""Nothing lost: writers never replace a file without overwrite, write atomically, and the HTML report
prints every name as text.

The results are real (plain PSIS-LOO of exact posterior draws of a normal mean, and ``pl.loo`` itself);
the HTML is read back with the report tests' parser.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from arviz_base import from_dict
from scipy.stats import norm

import ppl_loo as pl
from ppl_loo.cli.inputs import write_atomic

Y = np.array([0.3, -1.2, 0.8, 0.1, 0.5, -0.4, 1.9, 0.0])
SCRIPT = "<script>alert(1)</script>"


def tree_named(var="y", shift=0.0, seed=2):
    """Exact posterior draws (sd 1, prior N(0, 2^2)) with the log-likelihood variable called ``var``."""
    prec = 1 / 4 + len(Y)
    m, v = np.sum(Y) / prec + shift, 1 / prec
    theta = np.random.default_rng(seed).normal(m, np.sqrt(v), size=(2, 500))
    return from_dict({"posterior": {"mu": theta},
                      "log_likelihood": {var: norm.logpdf(Y[None, None, :], theta[..., None], 1.0)}},
                     dims={var: ["obs<b>"]}, coords={"obs<b>": [f"<i>{k}" for k in range(len(Y))]})


@pytest.fixture(scope="module")
def results():
    a = tree_named("<script>")
    b = tree_named("<script>", shift=0.3, seed=3)
    return {SCRIPT: pl.add_loo(a, pl.loo(a)), "plain & <b>bold</b>": pl.add_loo(b, pl.loo(b))}


def test_report_escapes_every_name(results, tmp_path):
    path = pl.report(results, tmp_path / "r.html", title=f"title {SCRIPT}")
    html = Path(path).read_text()
    assert "<script" not in html.lower()  # no raw script tag anywhere (the report has no script of its own)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the model's and the title's name, as text
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold" not in html
    assert html.count("&lt;script&gt;") >= 3  # title, model name, variable name
    assert "<i>" not in html


def test_report_never_replaces_without_overwrite(results, tmp_path):
    path = tmp_path / "r.html"
    path.write_text("keep me")
    with pytest.raises(FileExistsError) as info:
        pl.report(results, path)
    assert str(path) in str(info.value) and "overwrite=True" in str(info.value)
    assert path.read_text() == "keep me"
    assert os.listdir(tmp_path) == ["r.html"]
    pl.report(results, path, overwrite=True)
    assert path.read_text().startswith("<!DOCTYPE html>")
    assert os.listdir(tmp_path) == ["r.html"]  # no temporary file left


def test_report_to_a_missing_folder_names_it(results, tmp_path):
    with pytest.raises((FileNotFoundError, OSError)) as info:
        pl.report(results, tmp_path / "nofolder" / "r.html")
    assert "nofolder" in str(info.value)


def test_write_atomic_keeps_the_old_file_when_the_writer_fails(tmp_path):
    """A write that fails half-way (here: netCDF of a tree with an object the format cannot hold) leaves the
    existing file as it was and no temporary file behind."""
    path = tmp_path / "fit.nc"
    good = tree_named()
    write_atomic(path, good.to_netcdf)
    before = path.read_bytes()
    bad = tree_named()
    bad["posterior"]["bad"] = (("chain", "draw"), np.full((2, 500), object()))
    with pytest.raises(Exception):
        write_atomic(path, bad.to_netcdf)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["fit.nc"]


def test_write_atomic_replaces_in_one_step(tmp_path):
    path = tmp_path / "fit.nc"
    path.write_text("old")
    write_atomic(path, tree_named().to_netcdf)
    import xarray as xr

    with xr.open_datatree(path) as back:
        assert "posterior" in back.children
    assert os.listdir(tmp_path) == ["fit.nc"]


def test_write_atomic_failure_is_a_clear_error(tmp_path):
    """A write the file system refuses (here the output's name is over the 255-byte limit of a file name) ends
    with an error that names the output and the fix, and leaves nothing behind (the temporary file removed)."""
    from ppl_loo.cli.errors import CliError

    path = tmp_path / ("f" * 300 + ".nc")
    with pytest.raises(CliError) as info:
        write_atomic(path, tree_named().to_netcdf)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "could not be written" in msg and "writable" in msg
    assert os.listdir(tmp_path) == []


def test_write_atomic_long_name(tmp_path):
    """A long (valid) file name: the temporary name stays within the limit, the file is written."""
    path = tmp_path / ("f" * 245 + ".nc")
    write_atomic(path, tree_named().to_netcdf)
    assert os.listdir(tmp_path) == [path.name]


def test_report_mode_and_long_name(results, tmp_path):
    """The report gets the mode a plain open() gives (not the temporary file's 0600), also with a long name."""
    path = pl.report(results, tmp_path / ("r" * 245 + ".html"))
    mask = os.umask(0o022)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask
    assert os.listdir(tmp_path) == [Path(path).name]
