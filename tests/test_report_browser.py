"""pl.report in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``) through
Selenium, offline (the driver's path is given, so Selenium Manager never looks for one on the network).

The page is opened from ``file://``; the comparison table is read through the DOM and checked against
``pl.compare``; every image must be decoded; the browser console must have no error. A full-page
screenshot goes to the test's tmp folder (and to ``benchmarks/results/report_screenshot.png`` with
``PPL_LOO_SAVE_SCREENSHOT=1``, so that a test run does not modify the checkout).
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import ppl_loo as pl
from report_helpers import PNG_SIGNATURE, logistic_fits, same_value

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
                       Object.fromEntries(Array.from(tr.querySelectorAll('td')).map(td => [td.dataset.col, td.dataset.value]))]);
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
        png = _full_page_png(driver)
        log = driver.get_log("browser")
    finally:
        driver.quit()
    table = pl.compare(results, round_to="none")
    assert [name for name, _ in rows] == list(table.index)  # the DOM unescapes "<i>" back to the name
    for name, cells in rows:
        assert set(cells) == set(table.columns)
        for col in table.columns:
            assert same_value(cells[col], table.loc[name, col]), (name, col, cells[col], table.loc[name, col])
    # Pareto k x 2, elpd differences x 1, LOO-PIT x 2 (same draws, posterior_predictive), ROC/PR x 1
    assert len(images) == 6
    assert all(complete and width > 0 and h > 0 for complete, width, h in images), images
    assert [e for e in log if e["level"] == "SEVERE"] == []
    assert png[:8] == PNG_SIGNATURE and height > 900
    shot_path = tmp_path / "report_screenshot.png"
    shot_path.write_bytes(png)
    if os.environ.get("PPL_LOO_SAVE_SCREENSHOT"):  # refresh the committed copy only when asked
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(png)
    import matplotlib.image as mpimg

    shot = mpimg.imread(shot_path)
    assert abs(shot.shape[0] - height) <= 1, (shot.shape, height)  # the whole page, not the viewport
    assert np.ptp(shot[..., :3]) > 0.5  # not a blank page
