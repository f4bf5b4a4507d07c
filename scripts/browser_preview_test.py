#!/usr/bin/python3
"""Real-browser test of `viewfinder preview` (issue 13): headless Chromium loads the page served
from the sim camera, sees the picture change, clicks on it and checks that the exposure spot the
frames report follows the click; the charts must have drawn. Keeps a screenshot as an artifact.

Usage: browser_preview_test.py VIEWFINDER_BIN ARTIFACT_DIR
Needs Debian's chromium, chromium-driver and python3-selenium (scripts/install-deps.sh).
Prints '2 passed, 0 failed'-style counts; exit status 0 only if every check passed.
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

BIN = sys.argv[1] if len(sys.argv) > 1 else ".build/debug/viewfinder"
ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else ".build/preview-artifacts"
TOKEN = "browser-test-token"

passed, failed = 0, 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {what}", flush=True)
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def wait_for(fn, seconds, what):
    deadline = time.time() + seconds
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # the page may not be ready yet
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {seconds} s (last: {last!r})")


def main():
    os.makedirs(ARTIFACTS, exist_ok=True)
    out = tempfile.mkdtemp(prefix="vf-browser-")
    # Bound to all addresses on purpose: the server must then insist on the token.
    server = subprocess.Popen([BIN, "preview", "--device", "sim:width=320,height=240,fps=30,shake=2", "--stages", "stabilise", "--port", "0",
                               "--bind", "0.0.0.0", "--token", TOKEN, "--output", out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    driver = None
    try:
        url = None
        deadline = time.time() + 30
        while time.time() < deadline and url is None:
            line = server.stdout.readline()
            if not line:
                break
            print("server: " + line.rstrip(), flush=True)
            m = re.search(r"(http://\S+)", line)
            if m and "viewfinder preview:" in line:
                url = m.group(1).replace("0.0.0.0", "127.0.0.1")
        if url is None:
            raise AssertionError("the server printed no address")
        base = url.split("?")[0].rstrip("/")
        # Without the token, the stream is refused.
        try:
            urllib.request.urlopen(base + "/metrics", timeout=5)
            check(False, "/metrics without the token is refused")
        except urllib.error.HTTPError as e:
            check(e.code == 401, f"/metrics without the token answers 401 (got {e.code})")

        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]:
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.set_page_load_timeout(30)
        driver.get(url)

        # The picture arrives and changes.
        img = driver.find_element(By.ID, "picture")
        wait_for(lambda: driver.execute_script("return arguments[0].naturalWidth", img) > 0, 20, "the picture")
        first = img.screenshot_as_png
        changed = wait_for(lambda: hashlib.sha256(img.screenshot_as_png).digest() != hashlib.sha256(first).digest(), 10,
                           "the picture changing")
        check(bool(changed), "the picture changes in the browser")

        # Statistics arrive over server-sent events and the charts draw.
        stats = wait_for(lambda: driver.execute_script("return window.vf.messages > 3 && window.vf.stats"), 20, "statistics")
        check(stats.get("captured", 0) > 0 and stats.get("fps", 0) > 0, f"statistics: captured {stats.get('captured')}, fps {stats.get('fps')}")
        drawn = driver.execute_script(
            "const c = document.getElementById('c-exposure'); const g = c.getContext('2d');"
            "const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0;"
            "for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;")
        check(drawn > 50, f"the exposure chart has drawn ({drawn} pixels)")

        # A click on the picture moves the metered spot there (reported by the frames' metadata).
        for fx, fy in [(0.25, 0.3), (0.7, 0.65)]:
            rect = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", img)
            ActionChains(driver).move_to_element_with_offset(img, int((fx - 0.5) * rect[0]), int((fy - 0.5) * rect[1])).click().perform()
            tap = wait_for(lambda: driver.execute_script("return window.vf.tap"), 5, "the tap")

            def spot_at_tap():
                s = driver.execute_script("return window.vf.stats && window.vf.stats.spot")
                return s if s and abs(s["x"] - tap["x"]) < 1e-6 and abs(s["y"] - tap["y"]) < 1e-6 else None
            spot = wait_for(spot_at_tap, 15, f"the spot at the click ({tap})")
            check(abs(tap["x"] - fx) < 0.03 and abs(tap["y"] - fy) < 0.03, f"the click lands at ({tap['x']:.3f}, {tap['y']:.3f}), aimed at ({fx}, {fy})")
            check(spot is not None, f"the exposure spot follows the click: {spot}")
        errors = driver.execute_script("return window.vf.errors")
        check(not errors, f"no control errors in the page: {errors}")
        time.sleep(1.0)  # let the charts show the change in the screenshot
        shot = os.path.abspath(os.path.join(ARTIFACTS, "preview-page.png"))
        driver.save_screenshot(shot)
        check(os.path.getsize(shot) > 10000, f"screenshot kept: {shot}")
        print(f"browser-preview: screenshot {shot}", flush=True)
    except Exception as e:
        check(False, f"browser test raised {type(e).__name__}: {e}")
    finally:
        if driver is not None:
            driver.quit()
        server.send_signal(signal.SIGINT)
        try:
            rest, _ = server.communicate(timeout=20)
            for line in rest.splitlines():
                print("server: " + line, flush=True)
            check(server.returncode == 0, f"the server stops cleanly on SIGINT (exit {server.returncode})")
        except subprocess.TimeoutExpired:
            server.kill()
            check(False, "the server stops within 20 s of SIGINT")
    print(f"browser-preview: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
