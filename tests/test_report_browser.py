"""pl.report in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``) through
Selenium, offline (the driver's path is given, so Selenium Manager never looks for one on the network).

The page is opened from ``file://``; the comparison table is read through the DOM and checked against
``pl.compare``; every image must be decoded; the browser console must have no error. A full-page
screenshot goes to the test's tmp folder (and to ``benchmarks/results/report_screenshot.png`` with
``PPL_LOO_SAVE_SCREENSHOT=1``, so that a test run does not modify the checkout).

The report of JAX normal / Student-t fits with an adapted, a doubtful, a refit and a second-opinion observation
(``report_helpers.outlier_fits``) is read as a reader sees it: the counts of each category agree between the
header line, the comparison table and the observation table; the Pareto k figure has one legend entry per
threshold, one y-scale and its legend below the panels; the LOO-PIT test is a sentence; only sections with
content are on the page.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from report_helpers import DOUBTFUL, PNG_SIGNATURE, REFIT, hand_categories, logistic_fits, outlier_fits, same_value

import ppl_loo as pl
from ppl_loo.workflow.downstream.compare import FLAG_COLUMNS
from ppl_loo.workflow.report.report import CATEGORIES, STACKING

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "report_screenshot.png"
INSTALL = ("`bash dev.sh env` installs them (as root with apt-get: apt-get install chromium chromium-driver), "
           "and `pip install -e '.[test]'` installs selenium.")


def _driver():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(f"the browser test needs headless Chromium and its driver; missing {missing}. {INSTALL}")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail(f"the browser test needs selenium. {INSTALL}")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900",
                "--allow-file-access-from-files"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


@pytest.fixture(scope="module")
def two_model_report(tmp_path_factory):
    """A PyMC logistic regression: adaptive LOO with the model, and plain PSIS of the same draws."""
    model, tree, _, plain, _, _ = logistic_fits(with_pvi=False)
    results = {"adaptive <model>": tree, "plain PSIS": plain}
    path = pl.report(results, tmp_path_factory.mktemp("browser") / "report.html", title="Logistic regression",
                     data={"plain PSIS": tree}, models={"adaptive <model>": model})
    return results, path


def _full_page_png(driver):
    """The whole page (not only the viewport), through the DevTools protocol."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})
    return base64.b64decode(shot["data"])


READ_TABLE = """
const rows = Array.from(document.querySelectorAll('#compare-table tbody tr'));
return rows.map(tr => [tr.querySelector('th').textContent,
                       Object.fromEntries(Array.from(tr.querySelectorAll('td'))
                                               .map(td => [td.dataset.col, td.dataset.value]))]);
"""
READ_IMAGES = "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);"


def test_report_in_chromium(two_model_report, tmp_path):
    results, path = two_model_report
    driver = _driver()
    try:
        driver.get(path.resolve().as_uri())
        assert driver.title == "Logistic regression"
        rows = driver.execute_script(READ_TABLE)
        images = driver.execute_script(READ_IMAGES)
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        # the page is no wider than the window: a wide table scrolls in its own box
        widths = driver.execute_script("const e = document.documentElement; return [e.scrollWidth, e.clientWidth, "
                                       "document.getElementById('compare-table').scrollWidth]")
        png = _full_page_png(driver)
        log = driver.get_log("browser")
    finally:
        driver.quit()
    table = pl.compare(results, round_to="none")
    assert [name for name, _ in rows] == list(table.index)  # the DOM unescapes "<i>" back to the name
    stats = [c for c in table.columns if c not in FLAG_COLUMNS]
    for name, cells in rows:  # pl.compare's arviz_stats columns, then the observations counted by category
        assert set(cells) == set(stats) | {f"n_{k}" for k in CATEGORIES} | {"diff_not_psis"}
        for col in stats:
            assert same_value(cells[col], table.loc[name, col]), (name, col, cells[col], table.loc[name, col])
        res = results[name] if isinstance(results[name], pl.LooResult) else pl.LooResult.from_datatree(results[name])
        hand = hand_categories(res)
        assert {k: int(cells[f"n_{k}"]) for k in CATEGORIES} == {k: hand.count(k) for k in CATEGORIES}
    # Pareto k x 2, elpd differences x 1, LOO-PIT x 2 (same draws, posterior_predictive), ROC/PR x 1
    assert len(images) == 6
    assert all(complete and width > 0 and h > 0 for complete, width, h in images), images
    assert [e for e in log if e["level"] == "SEVERE"] == []
    assert png[:8] == PNG_SIGNATURE and height > 900
    assert widths[0] <= widths[1], widths
    shot_path = tmp_path / "report_screenshot.png"
    shot_path.write_bytes(png)
    if os.environ.get("PPL_LOO_SAVE_SCREENSHOT"):  # refresh the committed copy only when asked
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(png)
    import matplotlib.image as mpimg

    shot = mpimg.imread(shot_path)
    assert abs(shot.shape[0] - height) <= 1, (shot.shape, height)  # the whole page, not the viewport
    assert np.ptp(shot[..., :3]) > 0.5  # not a blank page


READ_COUNTS = """
const out = {};
for (const p of document.querySelectorAll('p.counts')) {
  const model = p.dataset.model;
  const rows = Array.from(document.getElementById('obs-' + model)?.querySelectorAll('tbody tr') ?? []);
  const table = Array.from(document.querySelectorAll('#compare-table tbody tr'))
                     .find(tr => tr.querySelector('th').textContent === model);
  const cells = Object.fromEntries(Array.from(table.querySelectorAll('td'))
                                        .map(td => [td.dataset.col, td.dataset.value]));
  const img = Array.from(document.images).find(i => i.alt === 'Pareto k of ' + model);
  out[model] = {header: {...p.dataset}, text: p.innerText, rows: rows.map(r => r.dataset.category), cells: cells,
                legend: JSON.parse(img.dataset.legend), ylim: JSON.parse(img.dataset.ylim),
                outside: img.dataset.legendOutside, shown: [img.complete, img.naturalWidth, img.naturalHeight]};
}
return out;
"""
READ_PAGE = """
return {sections: Array.from(document.querySelectorAll('section')).map(s => s.id),
        h2: Array.from(document.querySelectorAll('h2')).map(h => h.innerText),
        pit: Array.from(document.querySelectorAll('p.pit-test')).map(p => [p.innerText, p.dataset.pValue]),
        weights: Array.from(document.querySelectorAll('p.weights')).map(p => p.innerText),
        doubtfulRow: Array.from(document.querySelectorAll('#obs-normal tr.cat-doubtful td')).map(td => td.innerText),
        text: document.body.innerText};
"""


def test_outlier_report_in_chromium(tmp_path):
    """What a reader sees of a report with an adapted, a doubtful, a refit and a second-opinion observation."""
    fits = outlier_fits()
    path = pl.report(fits, tmp_path / "outliers.html", title="Normal vs Student-t")
    driver = _driver()
    try:
        driver.get(path.resolve().as_uri())
        models = driver.execute_script(READ_COUNTS)
        page = driver.execute_script(READ_PAGE)
        log = driver.get_log("browser")
    finally:
        driver.quit()
    assert [e for e in log if e["level"] == "SEVERE"] == []
    assert page["sections"] == ["compare", "pareto-k", "elpd-diff", "loo-pit", "settings"]  # no ROC, PVI, Source
    assert "no model given" not in page["text"] and "pass models=" not in page["text"]
    assert sorted(models) == sorted(fits)
    for name, seen in models.items():
        hand = hand_categories(pl.LooResult.from_datatree(fits[name]))
        want = {k: hand.count(k) for k in CATEGORIES}
        dataset = {k: {"second_opinion": "secondOpinion"}.get(k, k) for k in CATEGORIES}  # data-second-opinion
        assert {k: int(seen["header"][dataset[k]]) for k in CATEGORIES} == want
        assert {k: int(seen["cells"][f"n_{k}"]) for k in CATEGORIES} == want
        assert {k: seen["rows"].count(k) for k in CATEGORIES if k != "psis"} == {k: v for k, v in want.items()
                                                                                if k != "psis"}
        assert seen["text"].startswith(f"{name}: 16 observations: {want['psis']} not adapted (plain PSIS)")
        assert [e for e in seen["legend"] if e.startswith("k threshold")] == ["k threshold 0.70 (good_k)"]
        assert seen["ylim"][0] == seen["ylim"][1] and seen["outside"] == "true"
        assert seen["shown"][0] and seen["shown"][1] > 500 and seen["shown"][2] > 200
    normal = models["normal"]
    assert (int(normal["header"]["doubtful"]), int(normal["header"]["refit"])) == (1, 1)
    assert normal["rows"][:2] == ["doubtful", "refit"]  # the doubtful one first
    assert page["doubtfulRow"][:2] == [f"y[obs={DOUBTFUL}]", "doubtful"]  # the label only: no 0-based index
    assert f"y[obs={REFIT}]" in page["text"]
    assert page["weights"] == [STACKING]
    assert len(page["pit"]) == 3
    for sentence, p in page["pit"]:
        p = float(p)
        assert sentence.startswith("The LOO-PIT values of y are ")
        assert (f"p-value {p:.2f}" if p >= 0.01 else f"p-value {p:.2g}") in sentence
    assert "α=" not in page["text"]
