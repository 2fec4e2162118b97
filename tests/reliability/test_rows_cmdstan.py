"""Reliability rows of ``pl.from_cmdstan`` (CmdStan CSV files): broken files, other CmdStan methods, duplicates.

Real CmdStan output: the eight-schools CSV files in ``tests/data/cmdstan-eight-schools`` (CmdStan 2.18,
``method=sample``) and cmdstanpy's optimize output (``tests/data``). The variational and laplace files are
written here in the format of CmdStan 2.37's ``method=variational`` and 2.39's ``method=laplace`` output, from
a Gaussian ``q`` drawn here, for the conjugate normal model ``stan_models/normal_known_sigma.stan`` whose
exact LOO has a closed form.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

import cmdstanpy
import numpy as np
from data_paths import DATA
from data_paths import EIGHT_SCHOOLS as ES_DIR
from rows import Row, check_row, params
from scipy.stats import norm

import ppl_loo as pl

ROOT = Path(__file__).resolve().parents[2]
OPTIMIZE = DATA / "cmdstan_optimize_rosenbrock_mle.csv"
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
FIX = "give the csv files cmdstan wrote"


@functools.cache
def tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="ppl_loo_rows_cmdstan_"))


def es(i=1) -> str:
    return str(ES_DIR / f"output_{i}.csv")


def _lines(i=1):
    return Path(es(i)).read_text().splitlines(True)


def _header_index(lines):
    return next(k for k, ln in enumerate(lines) if ln.startswith("lp__"))


def write(name, text=None, data=None) -> str:
    p = tmp() / name
    if data is not None:
        p.write_bytes(data)
    else:
        p.write_text(text)
    return str(p)


def truncated():
    src = Path(es()).read_text()
    return write("truncated.csv", src[: int(len(src) * 0.6)])


def header_only():
    lines = _lines()
    return write("header_only.csv", "".join(lines[: _header_index(lines) + 5]))  # header + adaptation comments


def garbled():
    lines = _lines()
    k = _header_index(lines) + 8
    row = lines[k].split(",")
    row[3] = "abc"
    lines[k] = ",".join(row)
    return write("garbled.csv", "".join(lines))


def with_method(method):
    lines = _lines()
    lines = [f"# method = {method}\n" if ln.startswith("# method = ") else ln for ln in lines]
    return write(f"method_{method}.csv", "".join(lines))


def copy_of(i=1):
    return str(shutil.copy(es(i), tmp() / f"copy_of_output_{i}.csv"))


# ----------------------------------------------------------------------------- the variational file
Y = np.array([0.3, -0.5, 1.1, 0.2, -0.9, 0.4, 0.0, 0.7, -0.2, 0.5, -0.4, 4.0])
DATA = {"N": len(Y), "y": Y, "sigma": 1.0, "mu0": 0.0, "tau0": 2.0}

VB_HEADER = """# stan_version_major = 2
# stan_version_minor = 37
# stan_version_patch = 0
# model = normal_known_sigma_model
# start_datetime = 2026-05-03 16:33:45 UTC
# method = variational
#   variational
#     algorithm = meanfield (Default)
#       meanfield
#     iter = 10000 (Default)
#     grad_samples = 1 (Default)
#     elbo_samples = 100 (Default)
#     eta = 1 (Default)
#     adapt
#       engaged = true (Default)
#       iter = 50 (Default)
#     tol_rel_obj = 0.01 (Default)
#     eval_elbo = 100 (Default)
#     output_samples = {S} (Default)
# id = 1 (Default)
# data
#   file = normal.json
# init = 2 (Default)
# random
#   seed = 999999
# output
#   file = normal_vb.csv
#   diagnostic_file =  (Default)
#   refresh = 100 (Default)
#   sig_figs = 17
#   profile_file = profile.csv (Default)
#   save_cmdstan_config = true
# num_threads = 1 (Default)
# stanc_version = stanc3 v2.37.0
# stancflags = --filename-in-msg=normal_known_sigma.stan
"""


def posterior(y, sigma=DATA["sigma"], mu0=DATA["mu0"], tau0=DATA["tau0"]):
    prec = 1 / tau0**2 + len(y) / sigma**2
    return (mu0 / tau0**2 + np.sum(y) / sigma**2) / prec, 1 / prec


def exact_loo():
    """Closed-form elpd_i: the predictive density of y_i under the posterior without y_i."""
    out = []
    for i in range(len(Y)):
        m, v = posterior(np.delete(Y, i))
        out.append(norm.logpdf(Y[i], m, np.sqrt(v + DATA["sigma"] ** 2)))
    return np.array(out)


@functools.cache
def vb_csv(S=4000, seed=5):
    """A CmdStan-format method=variational CSV: mean row, then S draws of a Gaussian q (wider and shifted
    from the posterior, as ADVI's q is), with log_p__, log_g__ and the generated log_lik."""
    m, v = posterior(Y)
    qm, qs = m + 0.3 * np.sqrt(v), 1.4 * np.sqrt(v)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(S)
    mu = qm + qs * z
    log_g = -0.5 * z**2  # CmdStan's log_g__: the standardized normal's log density, up to a constant
    log_p = norm.logpdf(mu, DATA["mu0"], DATA["tau0"]) + norm.logpdf(Y[None, :], mu[:, None], DATA["sigma"]).sum(1)
    ll = norm.logpdf(Y[None, :], mu[:, None], DATA["sigma"])
    cols = ["lp__", "log_p__", "log_g__", "mu"] + [f"log_lik.{i + 1}" for i in range(len(Y))]
    rows = [[0, 0, 0, qm] + list(norm.logpdf(Y, qm, DATA["sigma"]))]
    rows += [[0, lp, lg, t] + list(li) for lp, lg, t, li in zip(log_p, log_g, mu, ll)]
    body = "\n".join(",".join(f"{x:.17g}" for x in r) for r in rows)
    text = (VB_HEADER.replace("{S}", str(S)) + ",".join(cols) + "\n# Stepsize adaptation complete.\n# eta = 1\n"
            + body + "\n")
    return write(f"normal_vb_{S}_{seed}.csv" if (S, seed) != (4000, 5) else "normal_vb.csv", text)


LAPLACE_HEADER = """# stan_version_major = 2
# stan_version_minor = 39
# stan_version_patch = 0
# model = normal_known_sigma_model
# start_datetime = 2026-08-28 01:36:03 UTC
# method = laplace
#   laplace
#     mode = normal-opt.csv
#     jacobian = true (Default)
#     draws = {S} (Default)
#     calculate_lp = true (Default)
# id = 1 (Default)
# data
#   file = normal.json
# init = 2 (Default)
# random
#   seed = 1234
# output
#   file = normal_laplace.csv
#   diagnostic_file =  (Default)
#   refresh = 100 (Default)
#   sig_figs = 17
#   profile_file = profile.csv (Default)
#   save_cmdstan_config = true
# num_threads = 1 (Default)
# stanc_version = stanc3 v2.39.0
# stancflags = --filename-in-msg=normal_known_sigma.stan
"""


@functools.cache
def laplace_csv(S=4000, seed=7):
    """A CmdStan 2.39 method=laplace CSV (columns log_p__, log_q__, then the variables; no mean row), from a
    Gaussian q drawn here."""
    m, v = posterior(Y)
    qm, qs = m - 0.2 * np.sqrt(v), 1.2 * np.sqrt(v)
    z = np.random.default_rng(seed).standard_normal(S)
    mu = qm + qs * z
    log_p = norm.logpdf(mu, DATA["mu0"], DATA["tau0"]) + norm.logpdf(Y[None, :], mu[:, None], DATA["sigma"]).sum(1)
    ll = norm.logpdf(Y[None, :], mu[:, None], DATA["sigma"])
    cols = ["log_p__", "log_q__", "mu"] + [f"log_lik.{i + 1}" for i in range(len(Y))]
    rows = [[lp, -0.5 * zz * zz, t] + list(li) for lp, zz, t, li in zip(log_p, z, mu, ll)]
    body = "\n".join(",".join(f"{x:.17g}" for x in r) for r in rows)
    return write("normal_laplace.csv", LAPLACE_HEADER.replace("{S}", str(S)) + ",".join(cols) + "\n" + body + "\n")


def laplace_loo():
    tree = pl.from_cmdstan(laplace_csv())
    return tree, pl.loo(tree, pl.StanModel(NORMAL, DATA), progressbar=False)


def check_laplace_loo(value):
    tree, res = value
    assert tree["posterior"].sizes["draw"] == 4000
    exact = exact_loo()
    assert res.approximation == "laplace"
    np.testing.assert_array_less(np.abs(np.asarray(res.elpd_i.values) - exact),
                                 5 * np.asarray(res.mcse_elpd_i.values) + 0.02)


def vb_loo():
    tree = pl.from_cmdstan(vb_csv())
    return tree, pl.loo(tree, pl.StanModel(NORMAL, DATA), progressbar=False)


def check_vb_tree(tree):
    assert tree["posterior"].sizes["draw"] == 4000  # the mean row dropped
    assert "lp__" not in tree["posterior"] and "log_p__" not in tree["posterior"]
    assert tree["log_likelihood"]["log_lik"].shape == (1, 4000, len(Y))
    lq = tree["variational"]["log_q"].values
    assert lq.shape == (1, 4000) and np.all(lq <= 0)
    assert tree["variational"].attrs["algorithm"] == "meanfield"


def check_vb_loo(value):
    tree, res = value
    exact = exact_loo()
    elpd_i = np.asarray(res.elpd_i.values)
    mcse = np.asarray(res.mcse_elpd_i.values)
    assert res.approximation == "variational"
    np.testing.assert_array_less(np.abs(elpd_i - exact), 5 * mcse + 0.02)
    assert abs(res.elpd - exact.sum()) < 0.1
    # Eq. 13 matters: the same draws weighted as posterior draws (Eq. 10) are off on the outlier
    naive = pl.loo(tree.copy().drop_nodes("variational"), progressbar=False)
    assert abs(float(naive.elpd_i.values[-1]) - exact[-1]) > 0.1


def two_identical(paths):
    def run():
        return pl.from_cmdstan(paths())

    return run


def check_two_chains(tree):
    assert tree["posterior"].sizes["chain"] == 2 and tree["posterior"].sizes["draw"] == 100


def check_four_chains(tree):
    assert tree["posterior"].sizes["chain"] == 4


F = "pl.from_cmdstan"
ROWS = [
    # ------------------------------------------------------------------ files
    Row(F, "files", "missing file", lambda: pl.from_cmdstan(str(tmp() / "nothere.csv")), error=FileNotFoundError,
        says=("nothere.csv", "no such", FIX), regression=True),
    Row(F, "files", "directory in the list of files", lambda: pl.from_cmdstan([es(1), str(ES_DIR)]), error=ValueError,
        says=(str(ES_DIR), "is a directory", "give the directory alone")),
    Row(F, "files", "empty file", lambda: pl.from_cmdstan(write("empty.csv", "")), error=ValueError,
        says=("empty.csv", "empty", FIX), regression=True),
    Row(F, "files", "header and no draws", lambda: pl.from_cmdstan(header_only()), error=ValueError,
        says=("header_only.csv", "no draws", FIX), regression=True),
    Row(F, "files", "truncated file", lambda: pl.from_cmdstan([es(2), truncated()]), error=ValueError,
        says=("truncated.csv", "truncated", FIX), regression=True),
    Row(F, "files", "garbled value", lambda: pl.from_cmdstan(garbled()), error=ValueError,
        says=("garbled.csv", "'abc'", FIX), regression=True),
    Row(F, "files", "binary file", lambda: pl.from_cmdstan(write("binary.csv", data=bytes(range(256)) * 8)),
        error=ValueError, says=("binary.csv", "binary", FIX), regression=True),
    Row(F, "files", "CSV of another program", lambda: pl.from_cmdstan(write("other.csv", "a,b,c\n1,2,3\n")),
        error=ValueError, says=("other.csv", "not CmdStan output", FIX)),
    Row(F, "files", "not UTF-8 text",
        lambda: pl.from_cmdstan(write("latin1.csv", data="lp__,\xe9\n1,2\n".encode("latin-1"))),
        error=ValueError, says=("latin1.csv", "not a text file", FIX)),
    Row(F, "files", "empty directory", lambda: pl.from_cmdstan(str(Path(tempfile.mkdtemp(dir=tmp()))) ),
        error=ValueError, says=("no CmdStan CSV files",)),
    # ------------------------------------------------------------------ CmdStan methods
    Row(F, "CmdStan methods", "method=variational read as the approximation's draws",
        lambda: pl.from_cmdstan(vb_csv()), check=check_vb_tree, warns=None, regression=True),
    Row("pl.loo (model)", "CmdStan methods", "method=variational: Eq. 13 weights, exact LOO", vb_loo,
        check=check_vb_loo, warns=None, regression=True),
    Row("pl.loo (plain)", "CmdStan methods", "method=variational without the model",
        lambda: pl.loo(pl.from_cmdstan(vb_csv())), error=ValueError,
        says=("variational approximation", "pass the model", "pl.StanModel")),
    Row(F, "CmdStan methods", "method=variational, two files", lambda: pl.from_cmdstan([vb_csv(), vb_csv(200, 6)]),
        error=ValueError, says=("normal_vb.csv", "method=variational", "give one file")),
    Row(F, "CmdStan methods", "method=optimize (real CmdStan output)", lambda: pl.from_cmdstan(OPTIMIZE),
        error=ValueError,
        says=("rosenbrock_mle.csv", "method=optimize", "point estimate", "method=sample", "pl.laplace"),
        regression=True),
    Row("pl.loo (model)", "CmdStan methods", "method=laplace: Eq. 13 weights with log_q__, exact LOO", laplace_loo,
        check=check_laplace_loo, warns=None),
    Row(F, "CmdStan methods", "method=laplace header on sampler columns",
        lambda: pl.from_cmdstan(with_method("laplace")),
        error=ValueError, says=("method_laplace.csv", "method=laplace", "log_p__")),
    Row(F, "CmdStan methods", "method=pathfinder", lambda: pl.from_cmdstan(with_method("pathfinder")), error=ValueError,
        says=("method_pathfinder.csv", "method=pathfinder", "method=sample")),
    Row(F, "CmdStan methods", "method=generate_quantities", lambda: pl.from_cmdstan(with_method("generate_quantities")),
        error=ValueError, says=("method_generate_quantities.csv", "generate_quantities", "method=sample run")),
    Row(F, "CmdStan methods", "files of different methods", lambda: pl.from_cmdstan([es(1), with_method("laplace")]),
        error=ValueError, says=("different methods", "output_1.csv (sample)", "method_laplace.csv (laplace)")),
    Row(F, "CmdStan methods", "a cmdstanpy CmdStanVB object", lambda: pl.from_cmdstan(
        cmdstanpy.from_csv(vb_csv(), method="variational")), check=check_vb_tree, warns=None),
    Row(F, "CmdStan methods", "a cmdstanpy CmdStanMLE object", lambda: pl.from_cmdstan(
        cmdstanpy.from_csv(str(OPTIMIZE), method="optimize")), error=ValueError,
        says=("rosenbrock_mle.csv", "method=optimize", "method=sample")),
    # ------------------------------------------------------------------ shapes and types, names
    Row(F, "shapes and types", "a number instead of files", lambda: pl.from_cmdstan(123), error=TypeError,
        says=("csv_files=123", "a csv path", "a list of paths")),
    Row(F, "names", "log_likelihood naming no variable", lambda: pl.from_cmdstan(es(1), log_likelihood="loglik"),
        error=KeyError, says=("'loglik'", "not a variable", "theta")),
    Row(F, "names", "posterior_predictive naming no variable",
        lambda: pl.from_cmdstan(es(1), posterior_predictive="y_rep"),
        error=KeyError, says=("'y_rep'", "not a variable", "theta")),
    # ------------------------------------------------------------------ duplicates
    Row(F, "duplicates", "the same file twice", two_identical(lambda: [es(1), es(2), es(1)]), check=lambda t: None,
        warns=UserWarning, says=("output_1.csv is given twice", "r-hat"), regression=True),
    Row(F, "duplicates", "a copy of a chain", two_identical(lambda: [es(1), copy_of(1)]), check=check_two_chains,
        warns=UserWarning, says=("copy_of_output_1.csv and", "identical draws")),
    Row(F, "duplicates", "four distinct chains: no warning", lambda: pl.from_cmdstan(str(ES_DIR)),
        check=check_four_chains, warns=None),
]


@params(ROWS)
def test_row(row):
    check_row(row)
