"""The ``ppl-loo`` command line: ``loo``, ``compare``, ``report`` and ``sample`` on real compiled Stan programs.

The CmdStan-format CSV files are written by Stan's own NUTS in-process (``ppl-loo sample``, i.e.
``ppl_loo.stan_bridge.sampler.sample_cmdstan_csv``) for ``stan_models/normal_known_sigma.stan``, whose LOO has a
closed form. Most tests call ``ppl_loo.cli.main`` in-process; ``test_subprocess_*`` run ``python -m
ppl_loo.cli`` for the exit statuses a script sees.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy.stats import norm

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

from cli_tools import run_cli
from data_paths import EIGHT_SCHOOLS as ES_DIR

import ppl_loo as pl
from ppl_loo.cli import main
from ppl_loo.cli.inputs import observed_mapping, read_csvs
from ppl_loo.stan_bridge import as_data_dict
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"
Y = [0.3, -0.5, 1.1, 0.2, -0.9, 0.4, 0.0, 0.7, -0.2, 0.5, -0.4, 6.0]  # the last one an outlier
DATA = {"N": len(Y), "y": Y, "sigma": 1.0, "mu0": 0.0, "tau0": 2.0}
NARROW = {**DATA, "tau0": 0.1}  # a prior that pulls mu to 0: the second model of the comparisons


def closed_form_elpd(data):
    """Exact LOO of the normal mean with known sigma: ``log N(y_i | mean_-i, sigma^2 + var_-i)``."""
    y, s, t, m0 = np.asarray(data["y"], float), data["sigma"], data["tau0"], data["mu0"]
    out = []
    for i in range(len(y)):
        rest = np.delete(y, i)
        prec = 1 / t**2 + len(rest) / s**2
        mean = (m0 / t**2 + rest.sum() / s**2) / prec
        out.append(norm.logpdf(y[i], mean, np.sqrt(s**2 + 1 / prec)))
    return np.array(out)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Data files and CSV files of the normal model: ``csv/`` (2 x 400 draws), ``narrow/`` (the other prior,
    written by ``ppl-loo sample``) and ``short/`` (2 x 40 draws: some observations doubtful)."""
    d = tmp_path_factory.mktemp("cli")
    (d / "data.json").write_text(json.dumps(DATA))
    (d / "narrow.json").write_text(json.dumps(NARROW))
    sm = pl.StanModel(NORMAL, DATA, sampler=True)
    sample_cmdstan_csv(sm, d / "csv", chains=2, random_seed=1, num_warmup=300, num_samples=400)
    sample_cmdstan_csv(sm, d / "short", chains=2, random_seed=3, num_warmup=10, num_samples=40)
    code, out, err = run_cli("sample", NORMAL, "--data", d / "narrow.json", "--out-dir", d / "narrow", "--chains", "2",
                             "--warmup", "300", "--draws", "400", "--seed", "5", "--quiet")
    assert code == 0 and out.split() == [str(d / "narrow" / f"output_{c}.csv") for c in (1, 2)]
    return d


@pytest.fixture(scope="module")
def fit_json(work):
    """``ppl-loo loo ... --json --out fit.nc`` on a quoted glob pattern."""
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", str(work / "csv" / "output_*.csv"),
                             "--out", work / "fit.nc", "--json", "--quiet")
    return code, json.loads(out), err


def test_loo_json_equals_pl_loo_and_the_closed_form(work, fit_json):
    code, summary, err = fit_json
    assert err == ""  # --quiet
    paths = sorted(str(p) for p in (work / "csv").glob("output_*.csv"))
    assert summary["csv_files"] == paths
    res = pl.loo(pl.from_cmdstan(paths), pl.StanModel(NORMAL, DATA), progressbar=False, random_seed=1)
    assert summary["elpd_loo"] == pytest.approx(res.elpd, rel=1e-12)
    assert summary["se"] == pytest.approx(res.se, rel=1e-12) and summary["p_loo"] == pytest.approx(res.p, rel=1e-12)
    np.testing.assert_allclose(summary["elpd_i"], res.elpd_i.values, rtol=1e-12)
    np.testing.assert_allclose(summary["pareto_k_psis"], res.pareto_k_psis.values, rtol=1e-12)
    assert summary["transform"] == [str(t) for t in res.transform.values]
    assert summary["n_obs"] == 12 and summary["n_draws"] == 800 and summary["n_refit"] == 0
    assert summary["n_doubtful"] == 0 and code == summary["exit_status"] == 0
    assert summary["pareto_k_psis"][11] > 0.5  # the outlier: plain PSIS is shaky there ...
    # ... and a second, independent estimate (the mixture run's, or an adapted proposal's) settles it
    assert summary["evidence"][11] not in ("psis", "") and "+" in summary["evidence"][11]
    exact = closed_form_elpd(DATA)
    assert summary["elpd_loo"] == pytest.approx(exact.sum(), abs=0.3)
    np.testing.assert_allclose(summary["elpd_i"], exact, atol=0.1)


def test_out_round_trips_and_text_output(work, fit_json):
    _, summary, _ = fit_json
    tree = xr.open_datatree(work / "fit.nc")
    res = pl.LooResult.from_datatree(tree)
    assert res.elpd == pytest.approx(summary["elpd_loo"], rel=1e-12)
    assert res.se == pytest.approx(summary["se"], rel=1e-12)
    np.testing.assert_allclose(res.elpd_i.values, summary["elpd_i"], rtol=1e-12)
    assert tree["posterior"]["mu"].shape == (2, 400)
    assert tree.attrs["ppl_loo_stan_file"] == str(NORMAL) and "y ~ normal(mu, sigma)" in tree.attrs["ppl_loo_stan_code"]
    assert not [p for p in work.iterdir() if p.name.startswith(".fit.nc")]  # no temporary file left
    tree.close()
    before = (work / "fit.nc").stat().st_mtime_ns
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "csv", "--out", work / "fit.nc",
                             "--overwrite")
    assert code == 0
    assert f"elpd_loo   {summary['elpd_loo']:.2f}" in out and "Adaptive importance sampling (ppl_loo)" in out
    assert "adaptive LOO of" in err and f"wrote {work / 'fit.nc'}" in err  # progress on stderr, not stdout
    assert (work / "fit.nc").stat().st_mtime_ns > before
    again = pl.LooResult.from_datatree(xr.open_datatree(work / "fit.nc"))
    assert again.elpd == pytest.approx(summary["elpd_loo"], rel=1e-12)


def test_doubtful_observations_give_status_1(work):
    # the search alone on 2 x 40 draws (--mixture off --smc off): the second opinions, from their own draws, would
    # settle what these few draws cannot
    off = ("--mixture", "off", "--smc", "off")
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "short", "--json", "--quiet", *off)
    summary = json.loads(out)
    assert summary["n_draws"] == 80
    assert summary["n_doubtful"] >= 1 and code == summary["exit_status"] == 1
    assert sum(summary["doubtful"]) == summary["n_doubtful"]
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "short", *off)
    assert code == 1 and "doubtful" in out and "--refit doubtful --seed N" in err


def test_refuses_to_overwrite(work, fit_json):
    content = (work / "fit.nc").read_bytes()
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "csv", "--out", work / "fit.nc")
    assert code == 2 and out == ""
    assert err == f"ppl-loo: error: {work / 'fit.nc'}: exists; pass --overwrite to replace it, or choose another name\n"
    assert (work / "fit.nc").read_bytes() == content


def test_sample_subcommand_equals_the_sampler_and_refuses_overwrite(work):
    sm = pl.StanModel(NORMAL, NARROW, sampler=True)
    paths, _ = sample_cmdstan_csv(sm, work / "narrow_py", chains=2, random_seed=5, num_warmup=300, num_samples=400)
    a = pl.from_cmdstan(sorted(str(p) for p in (work / "narrow").glob("*.csv")))
    b = pl.from_cmdstan([str(p) for p in paths])
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    assert a["posterior"]["mu"].shape == (2, 400)
    code, out, err = run_cli("sample", NORMAL, "--data", work / "narrow.json", "--out-dir", work / "narrow",
                             "--chains", "2", "--seed", "5")
    assert code == 2 and err.startswith(f"ppl-loo: error: {work / 'narrow' / 'output_1.csv'}: exists; pass --overwrite")


# ----------------------------------------------------------------------------- compare and report
@pytest.fixture(scope="module")
def two_results(work, fit_json):
    code, _, _ = run_cli("loo", NORMAL, "--data", work / "narrow.json", work / "narrow", "--out", work / "narrow.nc",
                         "--quiet")
    assert code in (0, 1)
    return work / "fit.nc", work / "narrow.nc"


def _reference(paths, names, **kwargs):
    trees = {}
    for name, p in zip(names, paths):
        with xr.open_datatree(p) as t:
            trees[name] = t.load()
    return pl.compare(trees, **kwargs)


def test_compare_equals_pl_compare(two_results, monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # the table in one block, as to_string() prints it
    a, b = two_results
    code, out, err = run_cli("compare", a, b, "--quiet")
    df = _reference([a, b], ["fit", "narrow"])
    assert code == 0 and out == df.to_string() + "\n"
    exact = {"tight": closed_form_elpd(NARROW).sum(), "wide": closed_form_elpd(DATA).sum()}
    code, out, err = run_cli("compare", a, b, "--names", "wide", "tight", "--json", "--quiet")
    rows = json.loads(out)["models"]
    df = _reference([a, b], ["wide", "tight"], round_to="none")
    assert [r["name"] for r in rows] == list(df.index) == sorted(exact, key=exact.get, reverse=True)
    for r in rows:
        for col in ("elpd", "se", "elpd_diff", "dse", "weight"):
            assert r[col] == pytest.approx(float(df.loc[r["name"], col]), rel=1e-12)
        assert r["n_doubtful"] == int(df.loc[r["name"], "n_doubtful"]) and r["rank"] == int(df.loc[r["name"], "rank"])
        assert r["elpd"] == pytest.approx(exact[r["name"]], abs=0.3)
    wide = next(r for r in rows if r["name"] == "wide")
    assert wide["elpd"] == pytest.approx(pl.LooResult.from_datatree(xr.open_datatree(a)).elpd, rel=1e-12)


def test_report_and_compare_html(two_results, tmp_path):
    a, b = two_results
    code, out, err = run_cli("report", a, b, "--out", tmp_path / "r.html", "--names", "wide", "tight", "--quiet")
    html = (tmp_path / "r.html").read_text()
    assert code == 0 and out.strip() == str(tmp_path / "r.html")
    assert "wide" in html and "tight" in html and html.lstrip().lower().startswith("<!doctype html")
    code, out, err = run_cli("report", a, b, "--out", tmp_path / "r.html")
    assert code == 2 and err.startswith(f"ppl-loo: error: {tmp_path / 'r.html'}: exists; pass --overwrite")
    code, out, err = run_cli("compare", a, b, "--html", tmp_path / "c.html", "--quiet")
    assert code == 0 and (tmp_path / "c.html").stat().st_size > 1000
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


# ----------------------------------------------------------------------------- bad input: one line, its status
def _one_error_line(err, where):
    """The one error line of ``err``; progress notices ("ppl-loo: <file>: compiling the Stan program ...", on a
    machine whose cache lacks the program) may precede it, nothing else."""
    lines = [ln for ln in err.splitlines() if ln.startswith("ppl-loo: error: ") or not ln.startswith("ppl-loo: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"ppl-loo: error: {where}: "), lines[0]
    return lines[0]


def test_missing_files(work, tmp_path):
    data, csv = work / "data.json", work / "csv"
    cases = [
        (("loo", tmp_path / "nope.stan", "--data", data, csv), tmp_path / "nope.stan", "no such Stan program"),
        (("loo", NORMAL, "--data", tmp_path / "nope.json", csv), tmp_path / "nope.json", "no such data file"),
        (("loo", NORMAL, "--data", data, csv / "output_1.csv", tmp_path / "nope.csv"), tmp_path / "nope.csv",
         "no such CSV file"),
        (("loo", NORMAL, "--data", data, str(tmp_path / "x_*.csv")), tmp_path / "x_*.csv", "no file matches"),
        (("loo", NORMAL, "--data", data, tmp_path), tmp_path, "no .csv files in this directory"),
        (("compare", tmp_path / "nope.nc", work / "fit.nc"), tmp_path / "nope.nc", "no such result file"),
    ]
    for argv, where, what in cases:
        code, out, err = run_cli(*argv)
        assert code == 2 and out == "", argv
        assert what in _one_error_line(err, where)


def test_garbled_csv_names_the_file(work, tmp_path):
    good = work / "csv" / "output_1.csv"
    lines = good.read_text().splitlines(keepends=True)
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith("lp__"))
    cut = tmp_path / "cut.csv"  # a chain killed while writing: the last row stops mid-line
    cut.write_text("".join(lines[: header_at + 50]) + lines[header_at + 50][:20])
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00garbage")
    for bad in (cut, binary):
        code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", good, bad)
        assert code == 2
        assert "not a readable CmdStan CSV file" in _one_error_line(err, bad)


def test_csv_files_of_another_program(work):
    code, out, err = run_cli("loo", EIGHT, "--data", work / "data.json", work / "csv")
    assert code == 2  # the data do not even fit eight schools' data block
    assert "the data do not match the program's data block" in _one_error_line(err, work / "data.json")
    code, out, err = run_cli("loo", EIGHT, "--data", ES_DIR / "eight_schools.data.R", work / "csv")
    line = _one_error_line(err, work / "csv" / "output_1.csv")
    assert code == 2 and "no column for the parameter 'tau' of eight_schools_noncentered.stan" in line


def test_data_that_do_not_match(work, tmp_path):
    short = tmp_path / "eleven.json"  # N = 11: log_lik has 11 entries, the CSV files 12
    short.write_text(json.dumps({**DATA, "N": 11, "y": Y[:11]}))
    code, out, err = run_cli("loo", NORMAL, "--data", short, work / "csv")
    line = _one_error_line(err, work / "csv" / "output_1.csv")
    assert code == 2 and "'log_lik' has shape (12,) in the CSV files but (11,)" in line and "eleven.json" in line
    missing = tmp_path / "nosigma.json"
    missing.write_text(json.dumps({k: v for k, v in DATA.items() if k != "sigma"}))
    code, out, err = run_cli("loo", NORMAL, "--data", missing, work / "csv")
    line = _one_error_line(err, missing)
    assert code == 2 and "do not match the program's data block" in line and "sigma" in line
    for name, text in (("broken.json", '{"N": 12, "y": [1, 2'), ("broken.R", "N <- 12\ny <- c(1, 2,\n")):
        (tmp_path / name).write_text(text)
        code, out, err = run_cli("loo", NORMAL, "--data", tmp_path / name, work / "csv")
        assert code == 2 and "not a readable" in _one_error_line(err, tmp_path / name)


def test_posterior_predictive_mapping_errors(work):
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "csv", "--posterior-predictive",
                             "mu=nope")
    assert code == 2 and "no data entry 'nope'" in _one_error_line(err, work / "data.json")
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "csv", "--posterior-predictive",
                             "y_hat=y")
    line = _one_error_line(err, work / "csv" / "output_1.csv")
    assert code == 2 and "'y_hat' is not a variable of the CmdStan output" in line and "log_lik" in line


def test_posterior_predictive_mapping_reads_observed_data():
    paths = sorted(str(p) for p in ES_DIR.glob("output_*.csv"))
    data = as_data_dict(ES_DIR / "eight_schools.data.R")
    pp, observed = observed_mapping(["y_hat=y"], data, "eight_schools.data.R", paths[0])
    tree = read_csvs(paths, log_likelihood="log_lik", posterior_predictive=pp, observed=observed)
    np.testing.assert_array_equal(tree["observed_data"]["y"].values, [28, 8, -3, 7, -1, 1, 18, 12])
    raw = pl.from_cmdstan(paths, posterior_predictive="y_hat")
    np.testing.assert_array_equal(tree["posterior_predictive"]["y"].values, raw["posterior_predictive"]["y_hat"].values)
    assert "y_hat" not in tree["posterior_predictive"]


def test_result_file_without_loo_group(work, tmp_path):
    plain = tmp_path / "plain.nc"
    pl.from_cmdstan(sorted(str(p) for p in (work / "csv").glob("*.csv"))).to_netcdf(plain)
    text = tmp_path / "text.nc"
    text.write_text("not netCDF")
    code, out, err = run_cli("compare", plain, work / "fit.nc")
    assert code == 2 and "no 'loo' group; write the file with `ppl-loo loo" in _one_error_line(err, plain)
    code, out, err = run_cli("report", work / "fit.nc", text, "--out", tmp_path / "r.html")
    assert code == 2 and "not a netCDF file" in _one_error_line(err, text)
    assert not (tmp_path / "r.html").exists()
    code, out, err = run_cli("compare", work / "fit.nc", work / "fit.nc", "--names", "a")
    assert code == 2 and "1 names for 2 files" in _one_error_line(err, "--names")
    code, out, err = run_cli("compare", work / "fit.nc", "--json")  # one result: its row alone, as pl.compare
    rows = json.loads(out)["models"]
    assert code == 0 and [r["name"] for r in rows] == ["fit"] and rows[0]["elpd_diff"] == 0.0


def test_results_of_other_data_are_refused(work, tmp_path):
    tree = pl.from_cmdstan(sorted(str(p) for p in (work / "csv").glob("*.csv")))
    tree["log_likelihood"] = tree["log_likelihood"].to_dataset().isel(log_lik_dim_0=slice(0, 11))
    pl.add_loo(tree, pl.loo(tree)).to_netcdf(tmp_path / "eleven.nc")  # plain PSIS on 11 of the 12 observations
    for cmd in (("compare",), ("report", "--out", tmp_path / "r.html")):
        code, out, err = run_cli(*cmd[:1], work / "fit.nc", tmp_path / "eleven.nc", *cmd[1:])
        line = _one_error_line(err, f"{work / 'fit.nc'}, {tmp_path / 'eleven.nc'}")
        assert code == 2 and "differ in their number of observations" in line and "12" in line and "11" in line


def test_compile_error_is_status_3(work, tmp_path):
    bad = tmp_path / "bad.stan"
    bad.write_text("data { int N; }\nparameters { real mu; }\nmodel { mu ~ normal(0, foo); }\n")
    code, out, err = run_cli("loo", bad, "--data", work / "data.json", work / "csv", "--quiet")
    line = _one_error_line(err, bad)
    assert code == 3 and 'Semantic error, line 3, column 23 to column 26: Identifier "foo" not in scope' in line


def test_stan_runtime_error_is_status_4(work, tmp_path):
    oob = tmp_path / "oob.stan"  # the normal program plus an index out of range: Stan throws at every evaluation
    oob.write_text(NORMAL.read_text().replace("y ~ normal(mu, sigma);",
                                              "y ~ normal(mu, sigma);\n  target += normal_lpdf(y[N + 1] | mu, sigma);"))
    code, out, err = run_cli("loo", oob, "--data", work / "data.json", work / "csv", "--quiet")
    line = _one_error_line(err, oob)
    assert code == 4 and "Stan failed on the draws" in line and "index 13 out of range" in line


def test_debug_shows_the_traceback(work, tmp_path):
    code, out, err = run_cli("loo", NORMAL, "--data", tmp_path / "nope.json", work / "csv", "--debug")
    assert code == 2 and "Traceback" in err and err.splitlines()[-1].startswith("ppl-loo: error: ")


def test_usage_error_is_status_2():
    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exc:
        main(["loo", str(NORMAL)])  # no CSV file
    assert exc.value.code == 2 and "the following arguments are required: CSV" in err.getvalue()


# ----------------------------------------------------------------------------- as a script sees it
def _script(*argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "ppl_loo.cli", *map(os.fspath, argv)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)


def test_subprocess_exit_statuses(work, tmp_path):
    proc = _script("loo", NORMAL, "--data", tmp_path / "nope.json", work / "csv")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"ppl-loo: error: {tmp_path / 'nope.json'}: no such data file; give the .json or .R "
                           "(R dump) data file the program was run with\n")
    bad = tmp_path / "bad.stan"
    bad.write_text("parameters { real mu }\n")
    proc = _script("loo", bad, work / "csv")
    last = proc.stderr.splitlines()[-1]  # after the notice that the program is being compiled
    assert proc.returncode == 3 and last.startswith(f"ppl-loo: error: {bad}: Syntax error")
    assert "Traceback" not in proc.stderr
    proc = _script("compare", "--help")
    assert proc.returncode == 0 and "ppl-loo compare centered.nc noncentered.nc" in proc.stdout
    assert "1  results computed" in proc.stdout and "3  the Stan program does not compile" in proc.stdout


def test_every_subcommand_help_has_an_example():
    for cmd, example in (("loo", "ppl-loo loo eight_schools.stan --data eight_schools.data.R 'output_*.csv'"),
                         ("compare", "ppl-loo compare centered.nc noncentered.nc"),
                         ("report", "ppl-loo report centered.nc noncentered.nc --out report.html"),
                         ("sample", "ppl-loo sample eight_schools_centered.stan --data eight_schools.data.R"),
                         ("demo", "ppl-loo demo --prior normal")):
        with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit) as exc:
            main([cmd, "--help"])
        assert exc.value.code == 0 and example in out.getvalue(), cmd
        if cmd != "demo":
            assert "exit status:" in out.getvalue() and "4  Stan failed" in out.getvalue()


def test_demo_runs_end_to_end_on_a_short_chain():
    """The README's first command (``ppl-loo demo``), shortened: one short chain, no mixture run. The embedded ovarian
    data has 54 observations and 1,536 genes; every observation is accounted for in the summary."""
    proc = subprocess.run([sys.executable, "-m", "ppl_loo.cli", "demo", "--prior", "normal", "--no-progress",
                           "--chains", "1", "--warmup", "30", "--draws", "60", "--mixture", "off"],
                          capture_output=True, text=True, timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), text[-3000:]  # 1: doubtful observations, as for ppl-loo loo
    assert "n = 54 observations, p = 1536 genes" in text
    assert "of 54 observations" in text and "elpd_loo  adaptive" in text
