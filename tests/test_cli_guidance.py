"""What ``ppl-loo loo`` tells a command-line user (issue 26, item 6): advice in the command line's terms
(``--refit doubtful --seed N``, not ``pl.loo(...)``), "no --data given" instead of Stan's "variable does not
exist", and which path gives the log-likelihood when the CSV files have no column for it. Real compiled Stan
programs and Stan's own NUTS (``stan_models/normal_known_sigma.stan``, whose LOO has a closed form)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest
from scipy.stats import norm

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

import ppl_loo as pl  # noqa: E402
from ppl_loo.cli import main  # noqa: E402
from ppl_loo.cli.errors import for_the_command_line  # noqa: E402
from ppl_loo.stan.sampler import sample_cmdstan_csv  # noqa: E402

from tests.test_cli import DATA, NORMAL  # noqa: E402  (the same program and data: one compiled library)


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([os.fspath(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def closed_form_total(data):
    """Exact elpd_loo of the normal mean with known sigma and a normal prior."""
    y, s, t, m0 = np.asarray(data["y"], float), data["sigma"], data["tau0"], data["mu0"]
    total = 0.0
    for i in range(len(y)):
        rest = np.delete(y, i)
        prec = 1 / t**2 + len(rest) / s**2
        mean = (m0 / t**2 + rest.sum() / s**2) / prec
        total += norm.logpdf(y[i], mean, np.sqrt(s**2 + 1 / prec))
    return total


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("guidance")
    (d / "data.json").write_text(json.dumps(DATA))
    sm = pl.StanModel(NORMAL, DATA, sampler=True)
    sample_cmdstan_csv(sm, d / "csv", chains=2, seed=11, num_warmup=300, num_samples=400)
    sample_cmdstan_csv(sm, d / "short", chains=2, seed=3, num_warmup=10, num_samples=40)
    return d


def test_api_advice_becomes_command_line_advice():
    text = ("2 observation(s) are doubtful (res.doubtful) ... (res.reason). Exact LOO: pl.loo(data, model, "
            "refit='doubtful', random_seed=...) refits the model; or call pl.loo again")
    assert for_the_command_line(text) == ("2 observation(s) are doubtful (--json: doubtful) ... (--json: reason). "
                                          "Exact LOO: --refit doubtful --seed N refits the model; or run ppl-loo "
                                          "loo again")


def test_doubtful_warning_speaks_the_command_line(work):
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "short", "--mixture", "off",
                             "--smc", "off")
    assert code == 1 and "doubtful" in err
    assert "pl.loo(" not in err + out and "res." not in err + out
    assert "--refit doubtful --seed N" in err


def test_no_data_given_says_so(work):
    code, out, err = run_cli("loo", NORMAL, work / "csv", "--quiet")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith(f"ppl-loo: error: {NORMAL}: no --data given")
    assert "pass --data FILE" in lines[0]


def test_data_deletion_path_is_named(work):
    code, out, err = run_cli("loo", NORMAL, "--data", work / "data.json", work / "csv", "--log-lik", "none", "--json")
    assert code in (0, 1)
    assert ("ppl-loo: --log-lik none: the pointwise log-likelihood comes from the program by data deletion"
            in err)
    summary = json.loads(out)
    assert summary["elpd_loo"] == pytest.approx(closed_form_total(DATA), abs=0.3)
