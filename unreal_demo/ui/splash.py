"""A start-up page served within a second of ``python app.py``, while Gradio and PyTorch import.

Importing Gradio (~4.6 s on 2 cores) and PyTorch (~2 s) and building six tabs takes about ten
seconds before Gradio can bind its port. Until then a standard-library HTTP server holds the
port: ``/`` is a page that shows each start-up step as it happens (polled from
``/unreal-starting.json``), and any other request (a browser's, or a ``gradio_client.Client``
asking for ``/config``) waits until Gradio serves, and is then relayed to it, so a client that
connects early gets the real answer instead of an error. :meth:`Splash.hand_over` closes the
port just before Gradio binds it; :meth:`Splash.served` releases the waiting requests.

This module imports only the standard library (it runs before anything heavy is imported).

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
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATUS_PATH = "/unreal-starting.json"
WAIT_S = 300.0  # a held request gives up after this long (the start-up failed or hangs)

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>UNREAL Explorer: starting</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;color:#222}
li{margin:.3em 0}.done{color:#777}.now{font-weight:600}</style></head>
<body><h1>UNREAL Explorer is starting</h1>
<p id="unreal-splash">The page switches to the app by itself once it is served (about ten seconds);
the model then loads in the background and the page shows its progress.</p><ol id="steps"></ol>
<script>
const list = document.getElementById('steps');
async function poll() {
  try {
    const r = await fetch('STATUS_PATH', {cache: 'no-store'});
    const s = await r.json();
    list.innerHTML = s.steps.map((x, i) => `<li class="${i + 1 < s.steps.length ? 'done' : 'now'}">` +
      `${x[1]} <small>(${x[0].toFixed(1)} s)</small></li>`).join('');
    if (s.error) { document.getElementById('unreal-splash').textContent = 'Start-up failed: ' + s.error; return; }
  } catch (e) { /* the port is changing hands: try again */ }
  setTimeout(poll, 500);
}
async function waitForApp() {  // held by the start-up server until the app serves, then relayed
  for (;;) {
    try { const r = await fetch('config', {cache: 'no-store'}); if (r.ok) { location.reload(); return; } }
    catch (e) { /* the port is changing hands */ }
    await new Promise(ok => setTimeout(ok, 500));
  }
}
poll(); waitForApp();
</script></body></html>""".replace("STATUS_PATH", STATUS_PATH)


class Splash:
    """Hold ``host:port`` with a start-up page until Gradio takes it over.

    Parameters
    ----------
    host, port
        Where the app will serve (the same address Gradio binds afterwards).

    Raises
    ------
    OSError
        If the port is taken (the same error Gradio would give).
    """

    def __init__(self, host: str, port: int) -> None:
        self.t0 = time.monotonic()
        self.steps: list[tuple[float, str]] = [(0.0, "starting Python")]
        self.error = ""
        self._served = threading.Event()
        splash = self

        class Handler(BaseHTTPRequestHandler):  # HTTP/1.0: every connection closes after its answer
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path in ("/", "/?"):
                    self._send(200, "text/html; charset=utf-8", PAGE.encode())
                elif self.path.startswith(STATUS_PATH):
                    body = {"steps": splash.steps, "error": splash.error}
                    self._send(200, "application/json", json.dumps(body).encode())
                else:
                    self._relay()

            def do_POST(self) -> None:
                self._relay()

            def _send(self, code: int, kind: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _relay(self) -> None:
                """Wait for Gradio, then pass this request on and its answer back."""
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not splash._served.wait(WAIT_S) or splash.error:
                    self._send(503, "text/plain", f"UNREAL Explorer did not start: {splash.error}".encode())
                    return
                conn = http.client.HTTPConnection(*splash._target, timeout=WAIT_S)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                except OSError as exc:
                    self._send(502, "text/plain", f"UNREAL Explorer is not answering: {exc}".encode())
                    return
                finally:
                    conn.close()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._target = ("127.0.0.1" if host in ("0.0.0.0", "", "::") else host, self.port)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def step(self, text: str) -> None:
        """Show the next start-up step on the page (and its time since start)."""
        self.steps.append((time.monotonic() - self.t0, text))

    def hand_over(self) -> None:
        """Close the port for Gradio to bind; requests already waiting stay open."""
        self.step("starting the web server")
        self._server.shutdown()
        self._server.server_close()

    def served(self) -> None:
        """Gradio serves: relay the waiting requests to it."""
        self._served.set()

    def fail(self, message: str) -> None:
        """Start-up failed: the page and every waiting request say why."""
        self.error = message
        self._served.set()

    def close(self) -> None:
        """Stop serving (if still serving) without handing over."""
        if not self._served.is_set():
            self._server.shutdown()
            self._server.server_close()
            self._served.set()
