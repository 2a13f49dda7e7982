"""The Swagger UI page, served from packaged assets, loads in headless Chromium and "Try it out" works.

Chromium (Debian `chromium`) is driven over its remote debugging protocol with a small websocket
client: the page is opened, an operation expanded, "Try it out" and "Execute" clicked, and the live
response read back from the page.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import websocket
from werkzeug.serving import make_server

from service.app import create_app

pytestmark = pytest.mark.integration

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]
DEADLINE_S = 60


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is missing: apt-get install -y chromium (.ci/run installs it)")
    return found


class Page:
    """One page target over the DevTools protocol: evaluate JavaScript, wait for a condition."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: object) -> dict:
        message_id = next(self.ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str) -> object:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(
            f"timed out waiting for {what}; page text: {self.evaluate('document.body.innerText')}"
        )

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def served_app(redis_url, scenario) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, create_app({"REDIS_URL": redis_url}), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def browser_page(served_app) -> Iterator[Page]:
    profile = tempfile.mkdtemp(prefix="srm-chromium-")
    process = subprocess.Popen(
        [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"{served_app}/swagger-ui"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None  # a pipe, asked for above
    page = None
    try:
        port_file = Path(profile, "DevToolsActivePort")
        deadline = time.monotonic() + DEADLINE_S
        while not (port_file.exists() and port_file.read_text().strip()):
            assert process.poll() is None, f"chromium exited: {process.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "chromium did not open its debugging port"
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        yield page
    finally:
        if page is not None:
            page.close()
        process.kill()
        process.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def click_js(selector: str, scope: str = "document") -> str:
    return (
        f"(() => {{ const el = {scope}.querySelector({json.dumps(selector)}); if (!el) return false; "
        "el.click(); return true; })()"
    )


def opblock(path: str) -> str:
    return (
        "[...document.querySelectorAll('.opblock')].find(b => "
        f"b.querySelector('.opblock-summary-path')?.dataset.path === {json.dumps(path)})"
    )


def try_it_out(page: Page, path: str, parameters: dict[str, str]) -> str:
    """Expand the operation, click Try it out, fill the parameters, Execute; the live status code."""
    block = opblock(path)
    page.wait_for(f"!!{block}", f"operation {path}")
    page.evaluate(
        f"({block}.querySelector('.opblock-summary-control') || "
        f"{block}.querySelector('.opblock-summary')).click()"
    )
    page.wait_for(click_js(".try-out__btn", block), "the Try it out button")
    for name, value in parameters.items():
        # React keeps its own copy of an input's value: set it through the native setter, then tell React;
        # swagger-ui debounces its inputs and flushes them on blur.
        page.wait_for(
            f"""(() => {{
            const input = {block}.querySelector('tr[data-param-name={json.dumps(name)}] input');
            if (!input) return false;
            input.focus();
            const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
            setter.call(input, {json.dumps(value)});
            input.dispatchEvent(new Event('input', {{bubbles: true}}));
            input.blur();
            return true; }})()""",
            f"parameter {name}",
        )
    page.wait_for(click_js(".execute", block), "the Execute button")
    return str(
        page.wait_for(
            f"{block}.querySelector('.live-responses-table tbody .response-col_status')?.innerText.trim()",
            f"the response of {path}",
        )
    )


def test_swagger_ui_loads_from_packaged_assets_and_try_it_out_answers_200(browser_page, scenario, tmp_path):
    page = browser_page
    title = page.wait_for("document.querySelector('.info .title')?.innerText", "the API title")
    assert "SRM Service" in title
    assert not page.evaluate("[...document.scripts].some(s => s.src && !s.src.startsWith(location.origin))")

    assert try_it_out(page, "/v2/clusters", {}) == "200"
    shown = page.evaluate(f"{opblock('/v2/clusters')}.querySelector('.live-responses-table').innerText")
    assert scenario.west in shown

    assert try_it_out(page, "/v2/cluster-info/{cluster}", {"cluster": scenario.west}) == "200"
    shown = page.evaluate(
        f"{opblock('/v2/cluster-info/{cluster}')}.querySelector('.live-responses-table').innerText"
    )
    assert scenario.east in shown and "ACTIVE" in shown

    shot = page.call("Page.captureScreenshot", format="png")["data"]
    (tmp_path / "swagger-ui.png").write_bytes(base64.b64decode(shot))
