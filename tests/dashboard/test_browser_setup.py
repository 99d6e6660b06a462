"""The browser tests' own machinery (issue 30, acceptance 1 and 3): Chromium runs through Debian's
chromedriver without Selenium Manager, leaves no process behind, a missing browser fails with the
Makefile's reason, and the dialog and console checks catch a script that runs."""

from __future__ import annotations

import subprocess
import urllib.parse

import pytest

from support import browser as b
from support import process_running

pytestmark = pytest.mark.xdist_group("browser")  # one worker: one Chromium, one scenario broker

def test_chromium_starts_through_the_system_chromedriver_without_selenium_manager_and_leaves_no_process(monkeypatch):
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    def refuse(*args, **kwargs):
        raise AssertionError(f"Selenium Manager was asked for a driver: {args}")

    monkeypatch.setattr(SeleniumManager, "binary_paths", refuse)
    driver = b.start_chromium()
    try:
        assert driver.service.path == b.CHROMEDRIVER
        assert driver.capabilities["browserName"] == "chrome"
        version = subprocess.run([b.CHROMIUM, "--version"], capture_output=True, text=True, check=True).stdout
        assert driver.capabilities["browserVersion"] in version, (driver.capabilities["browserVersion"], version)
        driver.get("data:text/html,<title>t</title><p id=p>hello</p>")
        assert driver.find_element("id", "p").text == "hello"
        started = [driver.service.process.pid] + [p.pid for p in b.descendants(driver.service.process.pid)]
        assert len(started) >= 3, started  # chromedriver, chromium and its helpers
    except BaseException:
        b.stop_chromium(driver)
        raise
    assert b.stop_chromium(driver) == []
    assert [pid for pid in started if process_running(pid)] == []


def test_a_missing_browser_fails_with_the_reason_the_makefile_recorded(tmp_path, monkeypatch):
    log = tmp_path / "browser-install.log"
    log.write_text("not root and no passwordless sudo: run 'sudo apt-get install chromium chromium-driver'\n")
    monkeypatch.setenv("QUAFKA_BROWSER_LOG", str(log))
    monkeypatch.setattr(b, "CHROMEDRIVER", str(tmp_path / "chromedriver"))
    reason = b.browser_missing_reason()
    assert reason is not None and str(tmp_path / "chromedriver") in reason and "no passwordless sudo" in reason
    log.unlink()
    assert "run `make browser`" in b.browser_missing_reason()
    monkeypatch.setattr(b, "CHROMEDRIVER", "/usr/bin/chromedriver")
    assert b.browser_missing_reason() is None


def test_make_test_installs_the_browser_and_make_run_does_not():
    def dry_run(target: str) -> str:
        # -n prints the recipes; CHROMIUM pointing nowhere makes the browser recipe's install branch show
        return subprocess.run(["make", "-n", target, "CHROMIUM=/nonexistent/chromium"], cwd=b.ROOT,
                              capture_output=True, text=True, check=True).stdout

    test = dry_run("test")
    assert "apt-get install" in test and "chromium-driver" in test
    assert test.index("apt-get install") < test.index("-m pytest")
    run = dry_run("run")
    assert "apt-get" not in run and "chromium" not in run


def test_the_page_checks_catch_a_script_that_runs(browser):
    html = "<title>x</title><p>a</p><img src=x onerror=alert(1)>"
    browser.open("data:text/html," + urllib.parse.quote(html))
    assert browser.dialogs() == [["alert", "1"]]
    with pytest.raises(AssertionError, match="dialog"):
        browser.assert_clean()
    browser.driver.execute_script("window.__dialogs = []")
    browser.driver.execute_script("setTimeout(() => { throw new Error('boom') })")
    b.wait_until(lambda: any("boom" in e["message"] for e in browser.driver.get_log("browser")), 5, 0.05,
                 message="the error in the console")
