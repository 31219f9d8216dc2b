"""Screenshots of a Snakemake report's pages of the paper's claims and Table 3, as headless Chromium renders
them, and the text of those pages' tables (docs/pipeline.md#dry-run-lint-report; tests/test_workflow.py runs
it on the quick study's report).

    python docs/report_screenshots.py report.html --out docs [--print]

writes ``report_claims.png`` and ``report_table3.png`` into ``--out``; ``--print`` prints, as JSON, each page's
table cells and text. Snakemake's report is a JavaScript app with no address per entry, so the browser is
driven over the DevTools protocol (``--remote-debugging-pipe``: no package beyond the standard library):
the report is opened, each entry shown as its own button shows it (``app.setView``), and the page inside
its frame read once its table is there.
"""

import argparse
import base64
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpstudy import paths

CHROMIUM = Path("/usr/bin/chromium")  # Debian's chromium package (.ci/run installs it)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = {
    "claims": f"{paths.CLAIMS}.html",  # the report's entries screenshot, by name: their result paths
    "table3": paths.TABLES.format(experiment="uci", metric="rmse") + ".html",
}
WINDOW = (1920, 1000)  # the browser's viewport, CSS pixels
TIMEOUT = 60.0  # seconds for Chromium to answer, to load the report and to show a page

SHOW = """async (path) => {
    for (const [category, subcategories] of Object.entries(categories))
        for (const [subcategory, entries] of Object.entries(subcategories))
            if (entries.includes(path)) {
                app.setView({navbarMode: "menu"});
                await new Promise(resolve => setTimeout(resolve, 100));
                app.setView({navbarMode: "subcategory", category: category, subcategory: subcategory,
                             content: "html", contentPath: results[path].data_uri, resultPath: path});
                return results[path].data_uri;
            }
    return null;
}"""  # the report's own view of an entry: its menu, then its list and page as the list's eye button shows it
# (the menu first, as a reader's clicks go: a list shown straight after another keeps the other's rows);
# the page's frame address, or null if the report has no such entry
READ = """document.querySelector("table") === null ? null : {
    text: document.body.innerText, cells: Array.from(document.querySelectorAll("th, td"), cell => cell.innerText)}"""


class Chromium:
    """A headless Chromium driven over ``--remote-debugging-pipe`` (fds 3 and 4, NUL-terminated JSON)."""

    def __init__(self, profile: Path):
        self.log = profile / "chromium.log"  # its stderr, for an error's message
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()

        def pipes():  # in the child: its fd 3 reads our commands, fd 4 writes its answers
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.process = subprocess.Popen(
            [
                str(CHROMIUM),
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "about:blank",
            ],
            preexec_fn=pipes,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next, self.events = b"", 0, []

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command and return its result (events that arrive meanwhile are kept in ``events``)."""
        self._next += 1
        message = {"id": self._next, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._receive()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"Chromium: {method} failed: {answer['error']}")
                return answer["result"]
            self.events.append(answer)

    def wait_event(self, method: str) -> dict:
        """The first event ``method`` (kept or next to arrive), removed from ``events``."""
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._receive())

    def _receive(self) -> dict:
        deadline = time.monotonic() + TIMEOUT
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._read], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._read, 1 << 20) if ready else b""
            if not chunk:
                raise RuntimeError(
                    f"Chromium did not answer within {TIMEOUT:g} s (exit status {self.process.poll()}); "
                    f"its log ends: {self.log.read_text(errors='replace')[-2000:]}"
                )
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except RuntimeError:
            pass  # already gone
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._write)
        os.close(self._read)


def _until(condition, what: str):
    """Poll ``condition()`` every 0.1 s until it returns something truthy, for at most ``TIMEOUT`` seconds."""
    deadline = time.monotonic() + TIMEOUT
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {TIMEOUT:g} s")
        time.sleep(0.1)
    return value


def render_pages(report: Path, pages: dict[str, str] = PAGES) -> dict[str, dict]:
    """Open ``report`` in headless Chromium and show each of ``pages`` (name: the entry's result path).

    Returns:
        Per name: ``png`` (the screenshot, bytes), ``cells`` (the text of every header and data cell of the
        page's tables, in order) and ``text`` (the page's text), as the browser rendered them.

    Raises:
        FileNotFoundError: no Chromium at ``CHROMIUM`` or no ``report``.
        RuntimeError: an entry is not in the report, or Chromium failed or took longer than ``TIMEOUT``.
    """
    report = Path(report).resolve()
    if not CHROMIUM.exists():
        raise FileNotFoundError(f"no Chromium at {CHROMIUM}: apt-get install --no-install-recommends chromium")
    if not report.is_file():
        raise FileNotFoundError(f"no report at {report}: make it with snakemake --report {report.name}")
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        browser = Chromium(Path(profile))
        try:
            return _render(browser, report, pages)
        finally:
            browser.close()


def _render(browser: Chromium, report: Path, pages: dict[str, str]) -> dict[str, dict]:
    target = browser.call("Target.createTarget", url="about:blank")["targetId"]
    session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        session,
        width=WINDOW[0],
        height=WINDOW[1],
        deviceScaleFactor=1,
        mobile=False,
    )
    browser.call("Page.enable", session)
    browser.call("Page.navigate", session, url=report.as_uri())
    browser.wait_event("Page.loadEventFired")

    def evaluate(expression: str, **where):
        answer = browser.call(
            "Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True, **where
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{report}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    _until(lambda: evaluate("typeof app !== 'undefined' && app !== undefined"), f"{report}: the report's app start")
    rendered = {}
    for name, path in pages.items():
        address = evaluate(f"({SHOW})({json.dumps(path)})")
        if address is None:
            raise RuntimeError(f"{report}: no entry {path}; its entries: {', '.join(evaluate('Object.keys(results)'))}")

        def page_frame():
            frames = browser.call("Page.getFrameTree", session)["frameTree"].get("childFrames", [])
            return next((frame["frame"]["id"] for frame in frames if frame["frame"]["url"] == address), None)

        frame = _until(page_frame, f"{report}: the frame of {path}")
        world = browser.call("Page.createIsolatedWorld", session, frameId=frame)["executionContextId"]
        page = _until(lambda: evaluate(READ, contextId=world), f"{report}: the table of {path}")
        png = base64.b64decode(browser.call("Page.captureScreenshot", session, format="png")["data"])
        rendered[name] = {"png": png, **page}
    return rendered


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the report, from snakemake --report report.html")
    parser.add_argument("--out", type=Path, help="folder of the screenshots report_{claims,table3}.png")
    parser.add_argument("--print", action="store_true", help="print each page's table cells and text as JSON")
    args = parser.parse_args(argv)
    rendered = render_pages(args.report)
    if args.out:
        for name, page in rendered.items():
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"report_{name}.png").write_bytes(page["png"])
    if args.print:
        json.dump(
            {name: {"cells": page["cells"], "text": page["text"]} for name, page in rendered.items()},
            sys.stdout,
            ensure_ascii=False,
            indent=1,
        )
        print()


if __name__ == "__main__":
    main()
