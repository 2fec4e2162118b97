"""Draws that do not belong to the program, its data or whose ``--log-lik`` variable is not the log-likelihood are
refused (``pl.loo``: a ``ValueError``; ``ppl-loo loo``: exit status 2, one line), while genuine output of the same
program and data never trips the check (a CmdStan CSV's 6 significant digits, PyMC's float64 values).

Real compiled Stan programs: ``stan_models/normal_known_sigma.stan`` sampled by Stan's NUTS in-process (the
program and data of ``tests/test_cli.py``: its compiled library is reused from the cache), the real CmdStan CSV
files of eight schools in ``tests/data/cmdstan-eight-schools``, a Student-t variant of the normal program; and
a PyMC Poisson model with its exact (conjugate) posterior draws.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy import stats

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

from cli_tools import run_cli
from data_paths import EIGHT_SCHOOLS as ES_DIR

import ppl_loo as pl
from ppl_loo.adapters.as_model import as_model
from ppl_loo.stan_bridge import as_data_dict
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv
from ppl_loo.workflow.loo.draws import LogLikMismatchError, loo_draws

ROOT = Path(__file__).resolve().parents[1]
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"
Y = [0.3, -0.5, 1.1, 0.2, -0.9, 0.4, 0.0, 0.7, -0.2, 0.5, -0.4, 6.0]  # as tests/test_cli.py
DATA = {"N": len(Y), "y": Y, "sigma": 1.0, "mu0": 0.0, "tau0": 2.0}
EDITED = {**DATA, "y": Y[:3] + [Y[3] + 0.25] + Y[4:]}  # y[4] edited after sampling
STUDENT = NORMAL.read_text().replace("y ~ normal(mu, sigma);", "y ~ student_t(4, mu, sigma);").replace(
    "normal_lpdf(y[i] | mu, sigma)", "student_t_lpdf(y[i] | 4, mu, sigma)")


def error_line(err):
    """The one error line of stderr (and nothing but warnings besides)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ppl-loo: error: ")]
    assert len(errors) == 1, err
    assert all(ln.startswith(("ppl-loo: error: ", "ppl-loo: warning: ")) for ln in lines), err
    return errors[0]


def closed_form_elpd(data):
    """Exact LOO of the normal mean with known sigma (as tests/test_cli.py)."""
    y, s, t, m0 = np.asarray(data["y"], float), data["sigma"], data["tau0"], data["mu0"]
    out = []
    for i in range(len(y)):
        rest = np.delete(y, i)
        prec = 1 / t**2 + len(rest) / s**2
        mean = (m0 / t**2 + rest.sum() / s**2) / prec
        out.append(stats.norm.logpdf(y[i], mean, np.sqrt(s**2 + 1 / prec)))
    return np.array(out)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The data files (the original, one with y[4] edited) and 2 x 300 draws of the normal program."""
    d = tmp_path_factory.mktemp("wrong")
    (d / "data.json").write_text(json.dumps(DATA))
    (d / "edited.json").write_text(json.dumps(EDITED))
    (d / "student.stan").write_text(STUDENT)
    sm = pl.StanModel(NORMAL, DATA, sampler=True)
    sample_cmdstan_csv(sm, d / "csv", chains=2, random_seed=7, num_warmup=300, num_samples=300)
    return d


def _paths(work):
    return sorted(str(p) for p in (work / "csv").glob("output_*.csv"))


# ----------------------------------------------------------------------------------------- (a) genuine output
def test_same_program_and_data_pass_and_match_the_closed_form(work):
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "csv", "--json", "--quiet",
                             "--mixture", "off", "--smc", "off")
    assert code == 0 and err == ""
    summary = json.loads(out)
    exact = closed_form_elpd(DATA)
    assert summary["elpd_loo"] == pytest.approx(exact.sum(), abs=0.3)
    np.testing.assert_allclose(summary["elpd_i"], exact, atol=0.1)
    tree = pl.from_cmdstan(_paths(work))
    assert tree.attrs["sig_figs"] == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # not even a warning
        draws = loo_draws(tree, as_model(pl.StanModel(NORMAL, DATA), data=tree), None, None)
    stored = tree["log_likelihood"]["log_lik"].values.reshape(draws.ll.shape)
    assert 0 < np.max(np.abs(stored - draws.ll)) < 1e-4  # rounded to 6 digits, and well within the tolerance


def test_real_cmdstan_csv_of_eight_schools_pass():
    tree = pl.from_cmdstan(sorted(str(p) for p in ES_DIR.glob("output_*.csv")))
    model = as_model(pl.StanModel(EIGHT, ES_DIR / "eight_schools.data.R"), data=tree)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loo_draws(tree, model, None, None)
    # the same CSV files with one y of the data file edited: refused, the school named
    data = as_data_dict(ES_DIR / "eight_schools.data.R")
    edited = {**data, "y": np.asarray(data["y"], float) + np.eye(8)[2] * 4.0}
    with pytest.raises(LogLikMismatchError, match=r"log_lik\[3\].*the other 7 observations agree.*y\[3\] = 1"):
        loo_draws(tree, as_model(pl.StanModel(EIGHT, edited), data=tree), None, None)


# ----------------------------------------------------------------------------------------- (b) edited data
def test_edited_data_file_is_refused_by_the_command_line(work):
    code, out, err = run_cli("loo", NORMAL, "--data", work / "edited.json", work / "csv", "--quiet")
    line = error_line(err)
    assert code == 2 and out == ""
    csv1 = str(work / "csv" / "output_1.csv")
    assert line.startswith(f"ppl-loo: error: {csv1} (and 1 more) and {work / 'edited.json'}: ")
    assert "column 'log_lik' of the CSV files differs from normal_known_sigma.stan's" in line
    assert "6 significant digits" in line and "largest difference is at log_lik[4]" in line
    assert "the other 11 observations agree" in line and "in edited.json: y[4] = 0.45" in line
    assert "--no-check-log-lik" in line
    # the opt-out: the program's values are used, with a warning
    code, out, err = run_cli("loo", NORMAL, "--data", work / "edited.json", work / "csv", "--no-check-log-lik",
                             "--mixture", "off", "--smc", "off")
    assert code in (0, 1) and "elpd" in out.lower()
    assert "differs from" in err and "--no-check-log-lik" in err and "error" not in err


def test_edited_data_is_refused_by_pl_loo(work):
    tree = pl.from_cmdstan(_paths(work))
    with pytest.raises(ValueError, match=r"log_likelihood\['log_lik'\] differs from the model's .* log_lik\[4\]"
                                         r".*compute=\{'check_log_lik': False\}") as info:
        pl.loo(tree, pl.StanModel(NORMAL, EDITED), progressbar=False)
    assert isinstance(info.value, LogLikMismatchError) and info.value.label == "log_lik[4]"
    assert "\n" not in str(info.value)
    with pytest.warns(UserWarning, match="differs from the model's"):
        res = pl.loo(tree, pl.StanModel(NORMAL, EDITED), progressbar=False,
                     second_opinions={"mixture": False, "smc": False}, compute={"check_log_lik": False})
    assert res.elpd == pytest.approx(closed_form_elpd(EDITED).sum(), abs=0.5)  # the model's (edited) values
    # the out-of-core path compares the observations it evaluates the same way
    with pytest.raises(LogLikMismatchError):
        pl.loo(tree, pl.StanModel(NORMAL, EDITED), progressbar=False, search={"adapt": "all"},
               compute={"chunk_size": 4})


# ----------------------------------------------------------------------------------------- (c) other draws
def test_csv_files_of_another_program_are_refused(work):
    code, out, err = run_cli("loo", work / "student.stan", "--data", work / "data.json", work / "csv", "--quiet")
    line = error_line(err)
    assert code == 2 and out == ""
    assert "differs from student.stan's" in line and str(work / "data.json") in line
    assert "another model" in line or "other data" in line
    # eight schools' CmdStan CSV files (mu, tau, theta_tilde, ...) with the normal program and 8 observations:
    # its only parameter mu is there, the log_lik columns have the right shape, and the values are another model's
    (work / "eight.json").write_text(json.dumps({**DATA, "N": 8, "y": [28, 8, -3, 7, -1, 1, 18, 12], "sigma": 10.0}))
    code, out, err = run_cli("loo", NORMAL, "--data", work / "eight.json", ES_DIR, "--quiet")
    line = error_line(err)
    assert code == 2 and out == "" and "eight.json" in line and "output_1.csv (and 3 more)" in line
    assert "in 8 of 8 observations" in line
    assert "the CSV files have columns normal_known_sigma.stan does not declare (tau, theta_tilde" in line


def test_wrong_log_lik_variable_is_refused(tmp_path):
    csvs = [str(p) for p in sorted(ES_DIR.glob("output_*.csv"))]
    code, out, err = run_cli("loo", EIGHT, "--data", ES_DIR / "eight_schools.data.R", *csvs, "--log-lik", "y_hat",
                             "--quiet")
    line = error_line(err)
    assert code == 2 and out == ""
    assert "column 'y_hat' of the CSV files differs from eight_schools_noncentered.stan's" in line
    assert "eight_schools.data.R" in line and "output_1.csv (and 3 more)" in line


# ----------------------------------------------------------------------------------------- PyMC
@pytest.fixture(scope="module")
def poisson():
    """A PyMC Poisson model with a Gamma prior and exact posterior draws (2 x 300), log-likelihood in float64."""
    pm = pytest.importorskip("pymc")
    y = np.array([2, 0, 3, 1, 4, 2, 1, 0, 2, 3])
    a, b = 2.0, 1.0
    rng = np.random.default_rng(3)
    lam = rng.gamma(a + y.sum(), 1.0 / (b + y.size), size=(2, 300))

    def tree(ll):
        return xr.DataTree.from_dict({
            "posterior": xr.Dataset({"lam": (("chain", "draw"), lam)}),
            "log_likelihood": xr.Dataset({"y": (("chain", "draw", "y_dim_0"), ll)})})

    def model(obs):
        with pm.Model() as m:
            rate = pm.Gamma("lam", a, b)
            pm.Poisson("y", rate, observed=obs)
        return m

    good = tree(stats.poisson.logpmf(y[None, None, :], lam[..., None]))
    y_rep = tree(rng.poisson(lam[..., None], size=lam.shape + (y.size,)).astype(float))
    return model, y, good, y_rep


def test_pymc_draws_of_the_same_model_pass_and_others_are_refused(poisson):
    model, y, good, y_rep = poisson
    kw = {"progressbar": False, "second_opinions": {"mixture": False, "smc": False}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loo_draws(good, as_model(model(y), data=good), None, None)
    edited = y.copy()
    edited[5] += 3
    with pytest.raises(ValueError, match=r"float rounding.*y\[y_dim_0=5\].*the other 9 observations agree"):
        pl.loo(good, model(edited), **kw)
    with pytest.warns(UserWarning, match="differs from the model's"):
        pl.loo(good, model(edited), **kw, compute={"check_log_lik": False})
    # replicated counts stored as the log-likelihood: positive values for a discrete outcome
    with pytest.raises(ValueError, match=r"positive .* y is declared discrete.*not the pointwise log-likelihood"):
        pl.loo(y_rep, model(y), **kw)
