"""Make the explorer screenshots of docs/ (``make screenshots``, or run this file).

Writes the pages with ``ringccl explore`` into a temporary folder, opens each in headless
Chromium (Debian's ``chromium`` and ``chromium-driver``; scripts/install_browser.sh) with the
network off, moves the slider and saves:

* docs/explore-ring-step3.png, docs/explore-ring-step10.png: the 8-rank ring all-reduce at step
  3 (reduce-scatter) and step 10 (all-gather);
* docs/explore-side-by-side.png: ring and double binary tree at 8 ranks;
* docs/explore-crossover.png: the cost model's crossover chart (``--model``);
* docs/explore-plan.png: ``ringccl plan --html`` for a small Llama 3 8B layout.

    PYTHONPATH=src python scripts/screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import shutil
import sys
import tempfile
import time

from ringccl.cli import main as ringccl

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


def _browser(width: int, height: int):
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--proxy-server=127.0.0.1:9",
                "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    return driver


def _goto(driver, position: int) -> None:
    slider = driver.find_element(By.CSS_SELECTOR, "#explorer-0 .slider")
    slider.send_keys(Keys.HOME)
    for _ in range(position):
        slider.send_keys(Keys.ARROW_RIGHT)
    time.sleep(0.3)  # let plotly finish drawing before the picture


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs", help="folder for the PNGs (default docs)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        pages = {
            "ring": ["explore", "all_reduce", "-a", "ring", "-N", "8"],
            "two": ["explore", "all_reduce", "-a", "ring,double_binary_tree", "-N", "8"],
            "model": ["explore", "all_reduce", "--model", "-N", "64"],
        }
        with contextlib.redirect_stdout(io.StringIO()):  # the commands' reports: not needed
            for name, cmd in pages.items():
                if ringccl(cmd + ["-o", str(tmp / f"{name}.html")]) != 0:
                    return 1
            if ringccl(["plan", "--model", "llama3-8b", "--dp", "2", "--tp", "4", "--pp", "4",
                        "--global-batch-size", "32", "--html", str(tmp / "plan.html")]) != 0:
                return 1
        driver = _browser(1400, 1500)
        try:
            driver.get((tmp / "ring.html").as_uri())
            section = driver.find_element(By.ID, "explorer-0")
            for position in (3, 10):
                _goto(driver, position)
                section.screenshot(str(out / f"explore-ring-step{position}.png"))
            driver.get((tmp / "two.html").as_uri())
            _goto(driver, 2)
            driver.find_element(By.CSS_SELECTOR, "#explorer-1 .slider").send_keys(
                Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)
            time.sleep(0.3)
            driver.find_element(By.CLASS_NAME, "explorers").screenshot(
                str(out / "explore-side-by-side.png"))
            driver.get((tmp / "model.html").as_uri())
            time.sleep(0.3)
            driver.find_element(By.CLASS_NAME, "model").screenshot(
                str(out / "explore-crossover.png"))
            driver.get((tmp / "plan.html").as_uri())
            time.sleep(0.3)
            driver.find_element(By.ID, "plan-timeline").screenshot(
                str(out / "explore-plan.png"))
        finally:
            driver.quit()
    for png in sorted(out.glob("explore-*.png")):
        print(f"wrote {png} ({png.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
