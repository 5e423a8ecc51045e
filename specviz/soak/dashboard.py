"""The dashboard used as a room uses it, for many minutes: several browser sessions at once start runs on
the Run, Compare and lane-method pages, and end them every way a visitor does — waiting for the end,
pressing Stop, closing the tab, switching page mid-run. The server (a real ``streamlit run``) is sampled
every minute; a page showing an exception and any traceback in the server's log are failures.

Drives Debian's Chromium with selenium (``make browser-deps``), as ``tests/test_browser.py`` does.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .resources import Holdings, sample

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[2]
ENDINGS = ("finish", "stop", "close_tab", "switch")
LANE_PAGES = ("SSD", "PPSD", "Mirror_SD")
RUN_PROMPTS = ("Write a haiku about autumn.", "Explain what a compiler does.", "Count from 1 to 50.")


def unavailable_reason() -> str | None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return f"no {' or '.join(missing)}: the dashboard soak drives Debian's Chromium (`make browser-deps`)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@dataclass
class DashboardResult:
    minutes: float
    sessions: int
    samples: list[tuple[float, Holdings]] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)  # "page/ending" → count
    page_errors: list[str] = field(default_factory=list)
    log_tracebacks: list[str] = field(default_factory=list)
    session_failures: list[str] = field(default_factory=list)

    def warm_and_end(self, warmup_minutes: float) -> tuple[Holdings, Holdings]:
        warm = next((h for t, h in self.samples if t >= warmup_minutes * 60), self.samples[-1][1])
        return warm, self.samples[-1][1]

    @classmethod
    def from_dict(cls, record: dict) -> "DashboardResult":
        samples = [(row["t_s"], Holdings(**{k: v for k, v in row.items() if k != "t_s"})) for row in record["samples"]]
        return cls(record["minutes"], record["sessions"], samples, record["actions"], record["page_errors"],
                   record["log_tracebacks"], record["session_failures"])

    def as_dict(self) -> dict:
        return {"minutes": self.minutes, "sessions": self.sessions, "actions": self.actions,
                "samples": [{"t_s": round(t, 1), **h.as_dict()} for t, h in self.samples],
                "page_errors": self.page_errors, "log_tracebacks": self.log_tracebacks,
                "session_failures": self.session_failures}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    # as `make app` starts it: two malloc arenas (the Makefile says why)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", MALLOC_ARENA_MAX="2")
    command = [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless", "true",
               "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return process, url
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("streamlit did not serve within 120 s")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


def open_browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={profile}", "--window-size=1400,1800"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options), profile


def press(driver, by: str, selector: str, seconds: float = 60.0) -> None:
    """Click a button found afresh on each try. Streamlit redraws elements while a script runs (a live stream
    redraws its Stop button with every token), so an element found a moment earlier may be gone by the click."""
    from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def clicked(d) -> bool:
        d.find_element(by, selector).click()
        return True

    WebDriverWait(driver, seconds, poll_frequency=0.1, ignored_exceptions=(
        StaleElementReferenceException, ElementClickInterceptedException)).until(clicked)


def idle(driver) -> bool:
    from selenium.webdriver.common.by import By

    return bool(driver.find_elements(By.CSS_SELECTOR, '[data-test-script-state="notRunning"]'))


class Visitor:
    """One browser session: picks a page and an ending at random, again and again until the deadline."""

    def __init__(self, url: str, rng: random.Random, max_new_tokens: int, result: DashboardResult,
                 lock: threading.Lock):
        self.url, self.rng, self.tokens, self.result, self.lock = url, rng, max_new_tokens, result, lock
        self.page = ""  # where the visit is, for a failure's report

    def count(self, key: str) -> None:
        with self.lock:
            self.result.actions[key] = self.result.actions.get(key, 0) + 1

    def wait(self, driver, condition, seconds: float = 300.0):
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(driver, seconds, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException,)).until(condition)

    def open_page(self, driver) -> tuple[str, str]:
        """Load a page set up by its link and return (its name, the run button's label)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        kind = self.rng.choice(("Run", "Compare", "Lanes"))
        self.page = kind
        if kind == "Run":
            method = self.rng.choice(("ar", "sps", "pld", "eagle", "eesd"))
            query = urllib.parse.urlencode({"method": method, "max_new_tokens": self.tokens,
                                            "prompt": self.rng.choice(RUN_PROMPTS)})
            driver.get(f"{self.url}/?{query}")
            self.wait(driver, lambda d: idle(d) and d.find_elements(By.XPATH, "//button[normalize-space(.)='Generate']"))
            return f"Run/{method}", "Generate"
        if kind == "Compare":
            query = urllib.parse.urlencode({"c1": "pld", "c2": "sps(gamma=3,draft=tiny)", "max_new_tokens": self.tokens})
            driver.get(f"{self.url}/Compare?{query}")
            self.wait(driver, lambda d: idle(d) and d.find_elements(By.XPATH, "//button[normalize-space(.)='Compare']"))
            return "Compare", "Compare"
        page = self.page = self.rng.choice(LANE_PAGES)
        driver.get(f"{self.url}/{page}")
        self.wait(driver, lambda d: idle(d) and d.find_elements(By.TAG_NAME, "h1"))
        for box in driver.find_elements(By.CSS_SELECTOR, 'input[aria-label="max new tokens"]')[:1]:
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(str(self.tokens), Keys.ENTER)
            self.wait(driver, lambda d: idle(d) and d.find_element(
                By.CSS_SELECTOR, 'input[aria-label="max new tokens"]').get_attribute("value") == str(self.tokens))
        return page, ""

    def press_run(self, driver, label: str) -> None:
        from selenium.webdriver.common.by import By

        time.sleep(0.5)
        where = (By.XPATH, f"//button[normalize-space(.)='{label}']") if label else \
            (By.CSS_SELECTOR, '[data-testid="stMain"] button[data-testid="stBaseButton-primary"]')
        press(driver, *where)

    def dismiss_dialogs(self, driver, where: str) -> None:
        """A dialog over a page just opened (Streamlit's "Page not found") is a finding; close it and go on."""
        from selenium.webdriver.common.keys import Keys

        text = dialogs_on(driver)
        if text:
            with self.lock:
                self.result.page_errors.append(f"{where}:{text}")
            driver.switch_to.active_element.send_keys(Keys.ESCAPE)
            time.sleep(0.5)

    def check_page(self, driver, where: str) -> None:
        from selenium.webdriver.common.by import By

        for error in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'):
            with self.lock:
                self.result.page_errors.append(f"{where}: {error.text[:300]}")

    def visit(self, driver) -> object:
        """One visit; returns the driver to go on with (a closed tab leaves a new one)."""
        from selenium.webdriver.common.by import By

        page, label = self.open_page(driver)
        self.dismiss_dialogs(driver, page)
        ending = self.rng.choice(ENDINGS)
        self.press_run(driver, label)
        if ending == "finish":
            self.wait(driver, lambda d: idle(d), 600)
            self.check_page(driver, page)
        else:
            time.sleep(self.rng.uniform(0.5, 8.0))
            stop = driver.find_elements(By.XPATH, "//button[normalize-space(.)='⏹ Stop']")
            if ending == "stop" and stop:
                try:
                    stop[0].click()
                except Exception:  # noqa: BLE001 - the run ended (and the button went) as we clicked
                    pass
                self.wait(driver, lambda d: idle(d), 300)
                self.check_page(driver, page)
            elif ending == "close_tab":
                old = driver.current_window_handle
                driver.switch_to.new_window("tab")
                new = driver.current_window_handle
                driver.switch_to.window(old)
                driver.close()
                driver.switch_to.window(new)
            else:  # switch page mid-run (also what "stop" does where the page has no Stop button)
                ending = "switch"
                self.check_page(driver, page)
                driver.get(f"{self.url}/Results")
                self.wait(driver, lambda d: idle(d), 300)
        self.count(f"{page}/{ending}")
        return driver

    def run_until(self, deadline: float) -> None:
        driver, profile = open_browser()
        try:
            while time.monotonic() < deadline:
                try:
                    driver = self.visit(driver)
                except Exception as error:  # noqa: BLE001 - a session that cannot go on is a finding
                    with self.lock:
                        self.result.session_failures.append(f"{self.page}: {type(error).__name__}: "
                                                            f"{str(error)[:200]}"
                                                            + dialogs_on(driver))
                    driver.quit()
                    driver, _ = open_browser()
        finally:
            driver.quit()
            shutil.rmtree(profile, ignore_errors=True)


def dialogs_on(driver) -> str:
    """The text of any dialog covering the page (Streamlit's connection-lost modal is one)."""
    from selenium.webdriver.common.by import By

    try:
        texts = [d.text.strip()[:200] for d in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDialog"]')]
    except Exception:  # noqa: BLE001 - the window itself is gone
        return ""
    return "".join(f" [dialog: {t}]" for t in texts if t)


def tracebacks_in(log: str) -> list[str]:
    """Each traceback in the server's log, as its last line (the exception)."""
    found, lines = [], log.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Traceback"):
            tail = next((l for l in lines[index + 1:] if l and not l.startswith((" ", "\t"))), "")
            found.append(tail[:300])
    return found


def soak_dashboard(minutes: float, sessions: int = 3, max_new_tokens: int = 48, seed: int = 0,
                   every_s: float = 60.0, progress: Callable[[float], None] | None = None) -> DashboardResult:
    result = DashboardResult(minutes, sessions)
    folder = Path(tempfile.mkdtemp(prefix="soak-dashboard-"))
    log_path = folder / "streamlit.log"
    server, url = start_server(log_path)
    lock = threading.Lock()
    try:
        begin = time.monotonic()
        deadline = begin + minutes * 60
        visitors = [threading.Thread(target=Visitor(url, random.Random(seed + i), max_new_tokens, result,
                                                    lock).run_until, args=(deadline,), daemon=True)
                    for i in range(sessions)]
        for visitor in visitors:
            visitor.start()
        next_sample = begin
        while any(v.is_alive() for v in visitors):
            now = time.monotonic()
            if now >= next_sample:
                result.samples.append((now - begin, sample(server.pid)))
                next_sample += every_s
                if progress is not None:
                    progress((now - begin) / 60)
            time.sleep(1.0)
        time.sleep(5.0)  # the last runs' pages are closed: let the server drop their sessions
        result.samples.append((time.monotonic() - begin, sample(server.pid)))
    finally:
        stop_server(server)
        result.log_tracebacks = tracebacks_in(log_path.read_text(errors="replace"))
        shutil.rmtree(folder, ignore_errors=True)
    return result
