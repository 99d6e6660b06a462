"""Headless Chromium for the dashboard's browser tests (issue 30): Debian's chromium and
chromedriver, driven by Selenium without Selenium Manager (no driver download, no usage statistics),
with what every page check needs: dialogs recorded instead of shown, the console's errors, and
screenshots written into docs/images. The fixtures are in tests/dashboard/conftest.py; the
Makefile's `browser` target installs the packages (docs/testing.md, "Browser tests").

Selenium never looks for or downloads a driver: the Service names /usr/bin/chromedriver, which
makes selenium's DriverFinder skip Selenium Manager (selenium/webdriver/common/driver_finder.py,
`_binary_paths`); SE_MANAGER_PATH=/bin/false makes any call to it fail instead of downloading, and
SE_OFFLINE and SE_AVOID_STATS turn off its downloads and its statistics. CDP commands go through
`execute_cdp_cmd` (raw, whatever the Chromium version), never selenium's per-version devtools modules.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import struct
import time
import zlib
from pathlib import Path

from support import descendants, process_running, wait_until

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEFAULT_INSTALL_LOG = ROOT / ".venv" / ".browser-install.log"
IMAGES = ROOT / "docs" / "images"
SCREENSHOT_HASHES = IMAGES / ".dashboard-hashes.json"
WINDOW = (1280, 900)
MAX_PAGE_PX = 4000  # full-page screenshots are cut here (headless software rendering tops out near 16k)
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox",  # root (CI) needs --no-sandbox
    f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", "--hide-scrollbars",
    "--disable-gpu", "--disable-extensions", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-breakpad", "--lang=en-US", "--force-prefers-reduced-motion",
)
# What differs between two runs of the same page: numbers, times (and AM/PM), ports, member and cluster ids.
# what decides whether a screenshot is rewritten: the parts of a page that show its layout, not its
# live numbers or which topics and groups earlier tests happened to leave (a tracked image is
# rewritten when a heading, a column or a legend entry changes, not on every run)
LAYOUT_SELECTOR = "h1, h2, h3, th, summary, label, button, nav a, #strip-legend li"
VARYING = re.compile(r"\b[\w-]{20,}\b|[\w.:-]*\d[\w.:-]*|\b[AP]M\b")
# Chromium asks every origin for /favicon.ico by itself; a 404 there is no page's doing.
SELENIUM_ENV = {"SE_MANAGER_PATH": "/bin/false", "SE_OFFLINE": "true", "SE_AVOID_STATS": "true"}

# Runs before any script of every page (CDP, so a page's CSP does not stop it): dialogs are
# recorded, never shown, and the tests assert that none was asked for.
RECORD_DIALOGS = ("window.__dialogs = [];"
                  "for (const k of ['alert', 'confirm', 'prompt', 'print'])"
                  "  window[k] = (m) => { window.__dialogs.push([k, String(m)]); };")


def browser_missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when Chromium and chromedriver are there."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if not missing:
        return None
    log = Path(os.environ.get("QUAFKA_BROWSER_LOG", DEFAULT_INSTALL_LOG))
    if log.exists():
        text = log.read_text(errors="replace").strip()
        why = text if len(text) < 3000 else text[:1000] + "\n...\n" + text[-1500:]
        why = f"`make browser` could not install them ({log}):\n{why}"
    else:
        why = "run `make browser` (as root or with passwordless sudo), which `make test` runs first"
    return f"headless Chromium is not installed ({', '.join(missing)} missing): {why}"


class Browser:
    """The session's Chromium, with what every browser test checks: no dialog and no console error."""

    def __init__(self, driver) -> None:
        self.driver = driver

    def open(self, url: str) -> None:
        """Load `url` and wait until the document is complete."""
        self.driver.get(url)
        wait_until(lambda: self.driver.execute_script("return document.readyState") == "complete", 10, 0.02,
                   message=f"{url} to load")

    def console_errors(self) -> list[dict]:
        """SEVERE entries of the browser console since the last call (script errors, CSP
        violations, failed loads such as an injected <img src=x>)."""
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def dialogs(self) -> list:
        return self.driver.execute_script("return window.__dialogs || []")

    def assert_clean(self) -> None:
        """No dialog was asked for and the console holds no error (each read clears the log)."""
        assert self.dialogs() == [], f"a page asked for a dialog: {self.dialogs()}"
        errors = self.console_errors()
        assert errors == [], f"console errors on {self.driver.current_url}: {errors}"

    def data(self, element_id: str) -> dict[str, str]:
        """The data-* attributes of the element with id `element_id`, read in one script (a live
        update may replace the element between two WebDriver calls)."""
        return self.driver.execute_script(
            "return Object.assign({}, document.getElementById(arguments[0]).dataset)", element_id)

    def text(self) -> str:
        return self.driver.execute_script("return document.body.innerText")

    def png(self, element_id: str | None = None, full_page: bool = False) -> bytes:
        """A PNG of the element with id `element_id` (whole, even where it reaches past the
        viewport), of the whole page (`full_page`, at most MAX_PAGE_PX tall), or of the viewport.
        Through the DevTools protocol: WebDriver's element screenshot is cut at the viewport. The
        element is found by id in the same script that measures it: a live update may replace it
        at any moment (a WebElement held across calls would go stale)."""
        if element_id is None and not full_page:
            return self.driver.get_screenshot_as_png()
        if element_id is not None:
            box = self.driver.execute_script(
                "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
                "return [r.left + scrollX, r.top + scrollY, r.width, r.height]", element_id)
        else:
            box = [0, 0, self.driver.execute_script("return document.documentElement.clientWidth"),
                   min(MAX_PAGE_PX, self.driver.execute_script("return document.documentElement.scrollHeight"))]
        x, y, width, height = box
        shot = self.driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": x, "y": y, "width": max(1, width), "height": max(1, height), "scale": 1}})
        return base64.b64decode(shot["data"])

    def screenshot(self, name: str, element_id: str | None = None, full_page: bool = False) -> Path:
        """docs/images/dashboard-<name>.png (see `png`). Written when the page's layout text
        (LAYOUT_SELECTOR, with numbers and ids masked: VARYING) differs from the last one written
        (a sidecar of hashes), so that every run keeps the picture current without rewriting a
        tracked file whose page did not change but for its live numbers."""
        IMAGES.mkdir(parents=True, exist_ok=True)
        path = IMAGES / f"dashboard-{name}.png"
        shown = self.driver.execute_script(  # the page's layout: its headings, column names, labels, legend
            "const root = arguments[0] === null ? document : document.getElementById(arguments[0]);"
            "return [...root.querySelectorAll(LAYOUT)].map(e => e.tagName + ':' + e.innerText).join('\\n')"
            .replace("LAYOUT", repr(LAYOUT_SELECTOR)), element_id)
        digest = hashlib.sha256(f"{VARYING.sub('#', shown)}|{full_page}".encode()).hexdigest()
        hashes = json.loads(SCREENSHOT_HASHES.read_text()) if SCREENSHOT_HASHES.exists() else {}
        png = self.png(element_id, full_page)
        assert png.startswith(b"\x89PNG") and len(png) > 1000, f"{name}: {len(png)} bytes"
        if hashes.get(path.name) == digest and path.exists():
            return path
        path.write_bytes(png)
        hashes[path.name] = digest
        SCREENSHOT_HASHES.write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")
        return path


def start_chromium():
    """A headless Chromium through Debian's chromedriver (no Selenium Manager, no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.update(SELENIUM_ENV)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_DIALOGS})
    return driver


def stop_chromium(driver, timeout_s: float = 10.0) -> list:
    """Quit the driver (Chromium, then chromedriver) and wait until every process it started is
    gone; returns those still running after `timeout_s` (then killed)."""
    service_pid = driver.service.process.pid
    started = [service_pid] + [p.pid for p in descendants(service_pid)]
    try:
        driver.quit()
    finally:
        deadline = time.monotonic() + timeout_s
        left = [pid for pid in started if process_running(pid)]
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in started if process_running(pid)]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return left


def png_pixels(png: bytes) -> "PngImage":
    """The pixels of an 8-bit RGB or RGBA non-interlaced PNG (what Chromium writes),
    each row as bytes of 3 or 4 per pixel: enough to read colours back from a screenshot."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat.append(data)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(b"".join(idat)), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return PngImage(width, height, bpp, rows)


class PngImage:
    def __init__(self, width: int, height: int, bpp: int, rows: list[bytes]) -> None:
        self.width, self.height, self.bpp, self.rows = width, height, bpp, rows

    def rgb(self, x: int, y: int) -> tuple[int, int, int]:
        row = self.rows[y]
        return tuple(row[x * self.bpp:x * self.bpp + 3])
