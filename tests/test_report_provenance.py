"""The report of results made from the command line: ``ppl-loo sample`` (Stan's own NUTS) and ``ppl-loo loo --out``
on the real compiled ``stan_models/normal_known_sigma.stan``, then ``ppl-loo report``. The page names the Stan
program, the data file and the CSV files each result came from (stored by ``ppl-loo loo`` in the netCDF file), and
shows no section that would only tell a command-line user to pass Python arguments."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from cli_tools import run_cli
from report_helpers import ReportReader
from test_cli import DATA, NARROW, NORMAL

RUNS = (("wide", "data.json", DATA), ("tight", "narrow.json", NARROW))


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    """Two ``ppl-loo loo --out`` files of the normal model (two priors), each from 2 chains of CSV files."""
    d = tmp_path_factory.mktemp("provenance")
    for name, data_file, data in RUNS:
        (d / data_file).write_text(json.dumps(data))
        code, out, err = run_cli("sample", NORMAL, "--data", d / data_file, "--out-dir", d / name, "--chains", "2",
                                 "--warmup", "300", "--draws", "400", "--seed", "5", "--quiet")
        assert code == 0, err
        code, out, err = run_cli("loo", NORMAL, "--data", d / data_file, d / name, "--out", d / f"{name}.nc",
                                 "--quiet")
        assert code in (0, 1), err
    return d


def _table_html(text, table_id):
    found = re.search(rf'<table id="{re.escape(table_id)}">(.*?)</table>', text, flags=re.S)
    assert found, table_id
    return found.group(1)


def test_report_names_the_stan_program_data_and_csv_files(cli_results):
    d = cli_results
    code, out, err = run_cli("report", d / "wide.nc", d / "tight.nc", "--out", d / "r.html", "--quiet")
    assert code == 0, err
    text = (d / "r.html").read_text(encoding="utf-8")
    page = ReportReader(text)
    # no posterior_predictive, no model object, no PVI fit: those sections are left out, not explained away
    assert page.sections == ["source", "compare", "pareto-k", "elpd-diff", "settings"]
    assert page.h2[0] == "Source" and page.h3[:2] == ["wide", "tight"]
    for bad in ("pass models=", "no model given", "pass data=", "no pvi group", "No LOO-PIT", "No ROC"):
        assert bad not in text
    for name, data_file, _ in RUNS:
        cells = [unescape(c) for c in re.findall(r'<td class="text" data-col="([^"]+)">', _table_html(text,
                                                                                                   f"source-{name}"))]
        assert cells == ["Stan program", "data file", "CSV files"]
        files = unescape(_table_html(text, f"source-{name}"))
        assert str(NORMAL) in files and str(d / data_file) in files
        csvs = [str(d / name / f"output_{c}.csv") for c in (1, 2)]
        assert all(c in files for c in csvs)
        other = "tight" if name == "wide" else "wide"
        assert str(d / other / "output_1.csv") not in files  # each model names its own files
    programs = [unescape(p) for p in re.findall(r"<pre>(.*?)</pre>", text, flags=re.S)]
    assert sum("log_lik[i] = normal_lpdf(y[i] | mu, sigma);" in p for p in programs) == 2
    assert text.count("<summary>Stan program as compiled") == 2
