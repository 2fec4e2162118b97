"""What a user reads from a LOO result of real Stan draws: one count of each kind of observation in ``print(res)``,
``ppl-loo loo`` and ``--json``, ``pl.compare`` and the HTML report; Stan's 1-based labels in the report, its k
figure and the R-hat message; the observations not settled by plain PSIS named in the text; and the command line's
advice on the number of observations.

The draws are the CmdStan 2.18 output of the non-centered eight schools (``tests/data/cmdstan-eight-schools``), 4 x
100 draws: with the defaults (mixture importance sampling, seed 1) some observations are vouched for by the mixture
alone with plain PSIS, some by an adapted proposal that the mixture confirms (evidence ``"adapted+mixture"``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

from cli_tools import run_cli
from data_paths import EIGHT_SCHOOLS as ES_DIR
from report_helpers import ReportReader

import ppl_loo as pl
from ppl_loo.adapters.stan.data import detect_n_obs
from ppl_loo.cli.errors import for_the_command_line
from ppl_loo.cli.stan_cmd import json_summary
from ppl_loo.stan_bridge import StanDataError, as_data_dict
from ppl_loo.workflow.loo.inputs import rank_rhat

ROOT = Path(__file__).resolve().parents[1]
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"
COUNTS = re.compile(r"Adaptive importance sampling \(ppl_loo\), (\d+) observations: (\d+) not adapted \(plain PSIS\), "
                    r"(\d+) adapted \(search\), (\d+) vouched by a second opinion \(mixture, SMC\), (\d+) refit "
                    r"\(exact LOO\), (\d+) doubtful")


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    """``ppl-loo loo`` of the eight schools' CSV files (text output, ``--out``): ``(stdout, result, report text,
    the tree of the .nc file)``."""
    d = tmp_path_factory.mktemp("readout")
    code, out, _ = run_cli("loo", EIGHT, "--data", ES_DIR / "eight_schools.data.R", ES_DIR, "--out", d / "es.nc",
                           "--quiet")
    assert code in (0, 1)
    tree = xr.open_datatree(d / "es.nc")
    res = pl.LooResult.from_datatree(tree)
    page = pl.report({"es": res}, d / "report.html").read_text(encoding="utf-8")
    return out, res, page, tree


def _hand_counts(res):
    """The counts by hand from the evidence: adapted where ``evidence`` names an adapted proposal, a second opinion
    where it names the mixture or SMC otherwise, plain PSIS where it is ``"psis"``, doubtful where empty."""
    ev = [str(e) for e in res.evidence.values]
    return {"psis": ev.count("psis"), "adapted": sum("adapted" in e for e in ev),
            "second_opinion": sum(("mixture" in e or "smc" in e) and "adapted" not in e for e in ev),
            "refit": ev.count("refit"), "doubtful": ev.count("")}


def test_counts_agree_in_text_json_compare_and_report(eight):
    out, res, page, _ = eight
    hand = _hand_counts(res)
    # the case that read differently before: estimates of adapted proposals confirmed by the mixture
    assert hand["adapted"] >= 1 and hand["second_opinion"] >= 1 and sum(hand.values()) == 8
    assert hand["doubtful"] == int(res.doubtful.values.sum())
    assert res.counts == hand
    text = [m.groups() for m in COUNTS.finditer(out)]
    assert len(text) == 1 and [int(v) for v in text[0]] == [8, *hand.values()]
    assert COUNTS.search(str(res)) and [int(v) for v in COUNTS.search(str(res)).groups()] == [8, *hand.values()]
    summary = json_summary(res)
    assert {k: summary[f"n_{k}"] for k in hand if k != "psis"} == {k: v for k, v in hand.items() if k != "psis"}
    table = pl.compare({"es": res}, round_to="none")
    assert {k: int(table.loc["es", f"n_{k}"]) for k in hand if k != "psis"} == {
        k: v for k, v in hand.items() if k != "psis"}
    counts = next(a for t, a, _ in ReportReader(page).paragraphs if a.get("class") == "counts")
    assert {k: int(counts[f"data-{k.replace('_', '-')}"]) for k in hand} == hand
    assert {k: int(v) for k, v in ReportReader(page).tables["compare-table"]["es"].items()
            if k in {f"n_{c}" for c in hand}} == {f"n_{k}": v for k, v in hand.items()}


def test_problem_observations_are_named_in_the_text(eight):
    """Every observation not settled by plain PSIS alone is counted in the text and the first named, with where
    to find the rest (Python: summary_table; command line: --json)."""
    out, res, _, _ = eight
    flagged = np.flatnonzero(res.flagged())
    not_psis = np.flatnonzero(res.categories != "psis")
    assert set(not_psis) <= set(flagged) and len(not_psis) == 8 - res.counts["psis"]
    line = next(ln for ln in str(res).splitlines() if "not settled by plain PSIS alone" in ln)
    assert line.startswith(f"{flagged.size} observation(s) not settled by plain PSIS alone")
    named = re.findall(r"log_lik\[(\d+)\] \(k ", line)
    assert len(named) == min(5, flagged.size) and {int(j) - 1 for j in named} <= set(flagged)
    assert "res.summary_table(flagged_only=True)" in line
    assert len(res.summary_table(flagged_only=True)) == flagged.size
    cli_line = next(ln for ln in out.splitlines() if "not settled by plain PSIS alone" in ln)
    assert "--json" in cli_line and "res." not in cli_line


def test_doubtful_observations_are_named_first():
    """Without second opinions the unconverged CmdStan draws leave schools doubtful (those whose log-likelihood draws
    have not mixed or whose estimates nothing confirms) among others that are settled: the text names the doubtful
    ones first."""
    code, out, _ = run_cli("loo", EIGHT, "--data", ES_DIR / "eight_schools.data.R", ES_DIR, "--mixture", "off",
                           "--smc", "off", "--quiet")
    assert code == 1
    line = next(ln for ln in out.splitlines() if "not settled by plain PSIS alone" in ln)
    entries = re.findall(r"log_lik\[(\d+)\] \(k [^)]*?(doubtful|second opinion|adapted)", line)
    kinds = [kind for _, kind in entries]
    assert "doubtful" in kinds and kinds == sorted(kinds, key=lambda k: k != "doubtful"), line


def test_stan_labels_are_one_based_in_the_report_and_the_rhat_message(eight):
    _, res, page, tree = eight
    reader = ReportReader(page)
    cells = [a for t, a in reader.elements if t == "td" and a.get("data-col") == "observation"]
    assert cells and "<th class=\"text\">index</th>" not in page
    labels = res.obs_labels()
    assert labels[0] == "log_lik[1]" and labels[7] == "log_lik[8]"
    for m in re.finditer(r'data-index="(\d+)">([^<]+)</td>', page):
        assert m.group(2) == f"log_lik[{int(m.group(1)) + 1}]"
    img = next(a for a in reader.images if a["alt"] == "Pareto k of es")
    ticks = json.loads(img["data-xticks"])
    for panel in ticks:
        assert panel and all(float(t).is_integer() for t in panel)
        assert 0 <= min(panel) <= 1 and 8 <= max(panel) <= 9  # observations 1 .. 8
    # the largest R-hat, by hand over every posterior entry, named 1-based as Stan names it
    best, where = -np.inf, None
    for name, da in tree["posterior"].to_dataset().data_vars.items():
        a = np.asarray(da.values, dtype=float)
        rh = rank_rhat(a.reshape(a.shape[0], a.shape[1], -1))
        if np.any(np.isfinite(rh)) and np.nanmax(rh) > best:
            best, j = float(np.nanmax(rh)), int(np.nanargmax(rh))
            where = name + (f"[{j + 1}]" if a.ndim > 2 else "")
    assert res.max_rhat == pytest.approx(best, abs=1e-12) and res.max_rhat_var == where
    assert where.endswith("]") and f"({where})" in str(res)


def test_khat_figure_ticks_are_integers():
    """The k figure's x axis: integer ticks and the numbers given (1-based here), whatever the count."""
    from ppl_loo.workflow.loo.categories import CATEGORIES
    from ppl_loo.workflow.report.figures import khat_figure

    k = np.array([0.1, 0.8, 0.3, 0.2, 0.5])
    cats = np.array(["psis", "adapted", "psis", "psis", "doubtful"])
    drawn = khat_figure(k, k, cats, CATEGORIES, 0.7, "t", [f"log_lik[{i}]" for i in range(1, 6)],
                        x=np.arange(1, 6), xlabel="Data Point (as log_lik[n], 1-based)")
    for panel in drawn.xticks:
        assert panel and all(float(t).is_integer() for t in panel) and 1 <= min(panel) and max(panel) <= 5


def test_number_of_observations_advice_names_the_flag_on_the_command_line(tmp_path):
    """Two integer entries equal to the length of log_lik: ambiguous. The command line names --n-obs (and works
    with it), Python names n_obs=."""
    data = {k: (np.asarray(v).tolist() if np.ndim(v) else v.item() if hasattr(v, "item") else v)
            for k, v in as_data_dict(ES_DIR / "eight_schools.data.R").items()}
    data.update({"K": 8, "z": list(range(8))})
    (tmp_path / "amb.json").write_text(json.dumps(data))
    code, out, err = run_cli("loo", EIGHT, "--data", tmp_path / "amb.json", ES_DIR, "--quiet", "--mixture", "off",
                             "--smc", "off")
    assert code == 2 and "--n-obs" in err and "n_obs=" not in err and "pl.StanModel" not in err
    assert "for example --n-obs J" in err
    with pytest.raises(StanDataError, match=r"Pass n_obs=\.\.\. to pl\.StanModel, for example n_obs='J'"):
        pl.loo(pl.from_cmdstan(sorted(str(p) for p in ES_DIR.glob("output_*.csv"))), pl.StanModel(EIGHT, data),
               progressbar=False)
    # no candidate at all (a log_lik one entry short): the same advice in the other message
    with pytest.raises(StanDataError) as err_info:
        detect_n_obs({"N": 3, "y": [1.0, 2.0, 3.0]}, n_log_lik=2)
    msg = str(err_info.value)
    assert "n_obs='N'" in msg and "pl.StanModel" in msg
    cli = for_the_command_line(msg)
    assert "--n-obs NAME" in cli and "n_obs=" not in cli and "pl.StanModel" not in cli
