"""A start-up page served within a second of ``python app.py``, while Gradio and PyTorch import.

Importing Gradio (~4.6 s on 2 cores) and PyTorch (~2 s) and building six tabs takes 7–8 s
before Gradio can bind its port. Until then a standard-library HTTP server holds the port:

- ``/`` is a page that lists each start-up step as it happens (polled from :data:`STATUS_PATH`)
  and reloads into the app once the app answers;
- ``/config`` (what ``gradio_client.Client`` asks first, with httpx's 5 s read timeout) is
  answered at once with ``200`` and JSON whitespace every second until Gradio serves, then the
  app's own config, so a client that connects early neither times out nor fails;
- any other request waits until Gradio serves and is then relayed to it, streamed (an event
  stream keeps flowing).

:meth:`Splash.hand_over` closes the port for Gradio to bind; :meth:`Splash.served` releases the
waiting requests. This module imports only the standard library (it runs before anything heavy).

Examples
--------
>>> splash = Splash("127.0.0.1", 0)   # port 0: any free port
>>> splash.step("importing Gradio")
>>> splash.steps[-1][1]
'importing Gradio'
>>> splash.close()
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

STATUS_PATH = "/unreal-starting.json"
HOLD_S = 300.0  # a request waits at most this long for the app (then: the start-up failed or hangs)
RELAY_S = 600.0  # socket timeout of a relayed request (a long answer streams within it)
IDLE_S = 30.0  # an idle or half-sent connection is closed after this long
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
       "content-length", "date", "server"}  # not passed on (the relay sets its own)

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>UNREAL Explorer: starting</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;color:#222}
li{margin:.3em 0}.done{color:#777}.now{font-weight:600}</style></head>
<body><h1>UNREAL Explorer is starting</h1>
<p id="unreal-splash">The page switches to the app by itself once it is served (7–8 s on 2 CPU cores);
the model then loads in the background and the page shows its progress.</p><ol id="steps"></ol>
<script>
const list = document.getElementById('steps');
let failed = false;
async function poll() {
  try {
    const r = await fetch('STATUS_PATH', {cache: 'no-store'});
    const s = await r.json();
    list.innerHTML = s.steps.map((x, i) => `<li class="${i + 1 < s.steps.length ? 'done' : 'now'}">` +
      `${x[1]} <small>(${x[0].toFixed(1)} s)</small></li>`).join('');
    if (s.error) {
      failed = true;
      document.getElementById('unreal-splash').textContent = 'Start-up failed: ' + s.error;
      return;
    }
  } catch (e) { /* the port is changing hands: try again */ }
  setTimeout(poll, 500);
}
async function waitForApp() {  // /config is answered by the app once it serves
  while (!failed) {
    try {
      const r = await fetch('config', {cache: 'no-store'});
      if (r.ok && (await r.json()).components) { location.reload(); return; }
    } catch (e) { /* the port is changing hands */ }
    await new Promise(ok => setTimeout(ok, 500));
  }
}
poll(); waitForApp();
</script></body></html>""".replace("STATUS_PATH", STATUS_PATH)


class _Handler(BaseHTTPRequestHandler):
    """One connection to the start-up server (HTTP/1.0: it closes after its answer)."""

    server: _Server
    timeout = IDLE_S

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path, splash = urlsplit(self.path).path, self.server.splash
        if splash.handed_over:  # a connection accepted before the hand-over (a browser's preconnect)
            self._relay()
        elif path == "/":
            self._send(200, "text/html; charset=utf-8", PAGE.encode())
        elif path == STATUS_PATH:
            self._send(200, "application/json", json.dumps({"steps": splash.steps, "error": splash.error}).encode())
        elif path == "/config":
            self._config()
        else:
            self._relay()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = lambda self: self._relay()  # noqa: E731

    def _send(self, code: int, kind: str, body: bytes) -> None:
        """A complete answer of our own."""
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes | None:
        """The request's body (a chunked one is read whole), or None."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers
                pass
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _wait(self) -> bool:
        """Wait for the app; False (with a 503 sent) if it failed or never came."""
        splash = self.server.splash
        if splash.wait(HOLD_S) and not splash.error:
            return True
        reason = splash.error or f"it did not serve within {HOLD_S:.0f} s"
        self._send(503, "text/plain; charset=utf-8", f"UNREAL Explorer did not start: {reason}".encode())
        return False

    def _upstream(self, body: bytes | None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(*self.server.splash.target, timeout=RELAY_S)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn.request(self.command, self.path, body=body, headers=headers)
        return conn.getresponse()

    def _config(self) -> None:
        """``/config``: 200 at once, whitespace while waiting (JSON ignores it), then the app's config."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()  # no length: the body ends when this connection closes
        splash = self.server.splash
        for _ in range(int(HOLD_S)):
            if splash.wait(1.0):
                break
            self.wfile.write(b" ")
            self.wfile.flush()
        if splash.error or not splash.wait(0):
            self.wfile.write(json.dumps({"error": splash.error or "the app did not start"}).encode())
            return
        try:
            self.wfile.write(self._upstream(None).read())
        except OSError as exc:
            self.wfile.write(json.dumps({"error": f"the app is not answering: {exc}"}).encode())

    def _relay(self) -> None:
        """Wait for the app, then pass this request on and stream its answer back."""
        body = self._body()
        if not self._wait():
            return
        try:
            answer = self._upstream(body)
        except OSError as exc:
            self._send(502, "text/plain; charset=utf-8", f"UNREAL Explorer is not answering: {exc}".encode())
            return
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        if self.command == "HEAD" and answer.getheader("Content-Length"):
            self.send_header("Content-Length", answer.getheader("Content-Length"))
        self.end_headers()  # no length: the body ends when this connection closes
        if self.command != "HEAD":
            while data := answer.read1(65536):
                self.wfile.write(data)
                self.wfile.flush()
        answer.close()


class _Server(ThreadingHTTPServer):
    splash: Splash


class _Server6(_Server):
    address_family = socket.AF_INET6


class Splash:
    """Hold ``host:port`` with a start-up page until Gradio takes it over.

    Parameters
    ----------
    host, port
        Where the app will serve (the same address Gradio binds afterwards); port 0 picks a free
        port, read back from :attr:`port`.

    Raises
    ------
    OSError
        If the address cannot be bound (a taken port: the same error Gradio would give).
    """

    def __init__(self, host: str, port: int) -> None:
        self.t0 = time.monotonic()
        self.steps: list[tuple[float, str]] = [(0.0, "starting Python")]
        self.error = ""
        self.handed_over = False
        self._served = threading.Event()
        host = host.strip("[]")
        server = _Server6 if ":" in host else _Server
        self._server = server((host, port), _Handler)
        self._server.splash = self
        self.port = self._server.server_address[1]
        local = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
        self.target = (local, self.port)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def step(self, text: str) -> None:
        """Show the next start-up step on the page (and its time since start)."""
        self.steps.append((time.monotonic() - self.t0, text))

    def wait(self, seconds: float) -> bool:
        """Wait until the app serves or the start-up failed (:attr:`error` says which); False on timeout."""
        return self._served.wait(seconds)

    def hand_over(self) -> None:
        """Close the port for Gradio to bind; requests already waiting stay open."""
        self.step("starting the web server")
        self.handed_over = True
        self._server.shutdown()
        self._server.server_close()

    def served(self) -> None:
        """Gradio serves: relay the waiting requests to it."""
        self._served.set()

    def fail(self, message: str, linger: float = 1.0) -> None:
        """Start-up failed: the page and every waiting request say why (given ``linger`` s to do so)."""
        self.error = message
        self._served.set()
        time.sleep(linger)

    def close(self) -> None:
        """Stop serving without handing over (a start-up that ends here)."""
        if not self.handed_over:
            self.handed_over = True
            self._server.shutdown()
            self._server.server_close()
        self._served.set()
