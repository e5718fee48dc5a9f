"""The chat page `ntransformer serve` answers GET / with, driven in headless
Chromium through the DevTools protocol (loopback only): the test types a
message into the page, clicks Send, and watches the reply stream into it
piece by piece; the reply is the one the API gives the same greedy request,
and the page shows the model's plan from /props and the speed it measured.

Skips where Chromium or websocket-client is missing (CI installs both).
Every wait is bounded; nothing depends on timing."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from test_server import MODEL_ID, TIMEOUT, openai, serving

websocket = pytest.importorskip("websocket")
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)),
                None)
if CHROMIUM is None:
    pytest.skip("Chromium is not installed", allow_module_level=True)

MESSAGE = "Name three colors."
MAX_TOKENS = 16


class Browser:
    """Headless Chromium with one page, spoken to over its DevTools websocket."""

    def __init__(self):
        self.profile = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Chromium writes the port it took into its profile.
        port_file = os.path.join(self.profile.name, "DevToolsActivePort")
        deadline = time.monotonic() + TIMEOUT
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            assert time.monotonic() < deadline and self.proc.poll() is None, "Chromium did not start"
            time.sleep(0.1)
        port = int(open(port_file).read().split("\n")[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=TIMEOUT) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=TIMEOUT)
        self.next_id = 0

    def send(self, method, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:  # events in between are not needed
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message.get("result", {})

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait_until(self, expression, what):
        deadline = time.monotonic() + TIMEOUT
        while not self.evaluate(expression):
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    def click(self, element_id):
        box = self.evaluate(f"(() => {{ const r = document.getElementById('{element_id}').getBoundingClientRect();"
                            f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def close(self):
        try:
            self.socket.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)
            self.profile.cleanup()


@pytest.fixture(scope="module")
def server():
    with serving("-np", 1) as served:
        yield served


@pytest.fixture
def browser():
    b = Browser()
    yield b
    b.close()


def test_the_page_streams_a_reply_to_a_typed_message(server, browser):
    browser.send("Page.navigate", url=server.base + "/")
    browser.wait_until("document.readyState === 'complete' && !!document.getElementById('model')?.textContent"
                       f"?.startsWith({json.dumps(MODEL_ID)})", "the page never showed the model from /props")
    props = json.loads(server.request("GET", "/props")[1])
    assert browser.evaluate("document.querySelectorAll('#layers div.cpu').length") == props["model"]["n_layers"]

    # Greedy and short, so the API's own reply to the same message is the reference.
    browser.evaluate("document.getElementById('temperature').value = '0';"
                     f"document.getElementById('max_tokens').value = '{MAX_TOKENS}'")
    # Every change the stream makes to the reply's text, as the page makes it.
    browser.evaluate("""window.seen = [];
        new MutationObserver((records) => {
          for (const r of records) {
            if (r.target.matches?.('.msg.assistant span:last-child')) r.addedNodes.forEach(n => seen.push(n.textContent));
          }
        }).observe(document.getElementById('log'), {subtree: true, childList: true});""")
    browser.evaluate("document.getElementById('message').focus()")
    browser.send("Input.insertText", text=MESSAGE)
    assert browser.evaluate("document.getElementById('message').value") == MESSAGE
    browser.click("send")
    browser.wait_until("document.querySelector('.msg.assistant')?.dataset.state === 'done'", "the reply never ended")

    assert browser.evaluate("document.querySelector('.msg.user').textContent") == MESSAGE
    assert browser.evaluate("document.querySelectorAll('.msg.error').length") == 0
    reply = browser.evaluate("document.querySelector('.msg.assistant span:last-child').textContent")
    expected = server.openai().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": MESSAGE}], temperature=0,
        max_tokens=MAX_TOKENS).choices[0].message.content
    assert reply == expected and reply
    # It arrived in pieces, each extending the last.
    seen = browser.evaluate("window.seen")
    assert len(seen) > 1 and seen[-1] == reply
    assert all(later.startswith(earlier) for earlier, later in zip(seen, seen[1:]))
    assert re.fullmatch(r"\d+(\.\d)? tok/s", browser.evaluate("document.getElementById('last_rate').textContent"))

    # The conversation goes on: a second message is answered in the same page.
    browser.evaluate("document.getElementById('message').focus()")
    browser.send("Input.insertText", text="And one more?")
    browser.click("send")
    browser.wait_until("document.querySelectorAll('.msg.assistant').length === 2 &&"
                       "document.querySelectorAll('.msg.assistant')[1].dataset.state === 'done'",
                       "the second reply never ended")
    assert browser.evaluate("document.querySelectorAll('.msg.error').length") == 0
