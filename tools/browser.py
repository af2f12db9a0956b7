"""Headless Chromium for tools/browser_test.py, driven by Selenium (Debian's python3-selenium) through
chromedriver (Debian's chromium-driver). One page; what the browser reported (console errors, uncaught
exceptions, failed loads, requests) is collected from chromedriver's browser and performance logs into
`events`, shaped like the DevTools Protocol events the test inspects."""
import base64, json, os, re, shutil, signal, subprocess, tempfile, time

from selenium import webdriver
from selenium.common.exceptions import JavascriptException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.remote_connection import RemoteConnection
from urllib3.exceptions import HTTPError as DriverUnreachable  # a command timed out or chromedriver is gone

# Every WebDriver command answers within this (Selenium 4.8 otherwise waits on chromedriver forever); the
# page load (90 s) and script (60 s) timeouts below fail first, with chromedriver's own message.
COMMAND_TIMEOUT = 120


class Browser:
    def __init__(self, binary, driver="/usr/bin/chromedriver", width=1366, height=768):
        self.profile = tempfile.mkdtemp(prefix="subledger-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for arg in ("--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                    "--disable-extensions", "--disable-background-networking", "--disable-sync",
                    "--disable-component-update", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
                    "--password-store=basic", "--disable-dev-shm-usage", f"--user-data-dir={self.profile}",
                    f"--window-size={width},{height}"):
            options.add_argument(arg)
        if os.geteuid() == 0:
            options.add_argument("--no-sandbox")  # Chromium's sandbox refuses to run as root
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        # chromedriver named explicitly: Selenium Manager (which would download one) never runs.
        RemoteConnection.set_timeout(COMMAND_TIMEOUT)
        self.driver = webdriver.Chrome(service=Service(executable_path=driver), options=options)
        self.driver.set_script_timeout(60)
        self.driver.set_page_load_timeout(90)
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.events = []

    def page(self, method, **params):
        """A DevTools Protocol command on the page (Selenium's Chromium passthrough)."""
        return self.driver.execute_cdp_cmd(method, params)

    def pump(self, seconds=0.05):
        """Collects what the browser reported meanwhile into `events`."""
        time.sleep(seconds)
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method", "").startswith("Network."):
                self.events.append({"method": message["method"], "params": message.get("params", {})})
        for entry in self.driver.get_log("browser"):
            if entry.get("level") != "SEVERE":
                continue
            self.events.append({"method": "Log.entryAdded", "params": {"entry": {
                "level": "error", "source": entry.get("source", ""), "text": entry.get("message", ""), "url": ""}}})

    def eval(self, expression, await_promise=True):
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(f"evaluating {expression[:80]!r}: {d.get('exception', {}).get('description') or d.get('text')}")
        return r.get("result", {}).get("value")

    def wait(self, expression, timeout=30, what=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                value = self.eval(expression)
            except (RuntimeError, WebDriverException):  # the page is navigating: its context is gone for a moment
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"timed out waiting for {what or expression}")

    def navigate(self, url):
        self.driver.get(url)
        self.wait("document.readyState === 'complete'", what=f"{url} to load")

    def type_into(self, selector, text):
        """Types into an input as a user would (WebDriver key events)."""
        element = self.driver.find_element(By.CSS_SELECTOR, selector)
        element.click()
        element.send_keys(text)

    def key(self, key, code=None, vk=0, text=None):
        """Presses a key in the focused element (Enter, Escape, Tab…)."""
        name = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", key).upper()  # "ArrowLeft" → Keys.ARROW_LEFT
        self.driver.switch_to.active_element.send_keys(getattr(Keys, name, key))

    def click(self, selector):
        """A real click in the middle of the element, scrolled into view."""
        element = self.driver.find_element(By.CSS_SELECTOR, selector)
        try:
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        except JavascriptException:
            pass
        element.click()

    def screenshot(self, path, full=False):
        if full:
            w, h = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            data = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                             clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})["data"]
            with open(path, "wb") as f:
                f.write(base64.b64decode(data))
        else:
            self.eval("window.scrollTo(0, 0)")
            self.driver.save_screenshot(path)

    def close(self):
        """Closes Chromium and stops chromedriver, bounded in time. Not driver.quit(): Selenium 4.8's
        Service.stop() asks a hung chromedriver to shut down without a timeout and so would wait forever."""
        try:
            webdriver.Remote.quit(self.driver)  # the WebDriver quit command (COMMAND_TIMEOUT): Chromium exits
        except Exception:
            pass
        process, self.driver.service.process = self.driver.service.process, None
        if process and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        # Whatever Chromium outlived a hung chromedriver: the processes on this run's own profile directory.
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f"--user-data-dir={self.profile}".encode() in f.read():  # the zygote rewrites its title
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
