"""What ``ppl-loo loo`` tells a command-line user: advice in the command line's terms
(``--refit doubtful --seed N``, not ``pl.loo(...)``), "no --data given" instead of Stan's "variable does not
exist", and which path gives the log-likelihood when the CSV files have no column for it. Real compiled Stan
programs and Stan's own NUTS (``stan_models/normal_known_sigma.stan``, whose LOO has a closed form)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

import ppl_loo as pl  # noqa: E402
from ppl_loo.cli.errors import for_the_command_line  # noqa: E402
from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv  # noqa: E402
from tests.test_cli import DATA, NORMAL, closed_form_elpd, run_cli  # noqa: E402  (one compiled library)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("guidance")
    (d / "data.json").write_text(json.dumps(DATA))
    sm = pl.StanModel(NORMAL, DATA, sampler=True)
    sample_cmdstan_csv(sm, d / "csv", chains=2, random_seed=11, num_warmup=300, num_samples=400)
    sample_cmdstan_csv(sm, d / "short", chains=2, random_seed=3, num_warmup=10, num_samples=40)
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
    assert summary["elpd_loo"] == pytest.approx(closed_form_elpd(DATA).sum(), abs=0.3)
