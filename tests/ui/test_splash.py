"""The start-up page: served at once, shows the steps, relays early requests once Gradio serves."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx

from unreal_demo.ui.splash import STATUS_PATH, Splash

APP = Path(__file__).resolve().parents[2] / "app.py"


def _get(port: int, path: str, data: bytes | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", data=data, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class _Real(BaseHTTPRequestHandler):
    """Stands in for Gradio: echoes the method, path and body; ``/stream`` sends two parts 1 s apart."""

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: one\n\n")
            self.wfile.flush()
            time.sleep(1.0)
            self.wfile.write(b"data: two\n\n")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = json.dumps({"method": self.command, "path": self.path, "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer


class TestSplash:
    def test_page_and_steps(self):
        splash = Splash("127.0.0.1", 0)
        try:
            splash.step("importing Gradio")
            code, page = _get(splash.port, "/")
            assert code == 200 and b"UNREAL Explorer is starting" in page
            code, status = _get(splash.port, STATUS_PATH)
            steps = json.loads(status)["steps"]
            assert [s[1] for s in steps] == ["starting Python", "importing Gradio"]
            assert steps[1][0] >= steps[0][0] >= 0
        finally:
            splash.close()

    def test_early_requests_wait_and_are_relayed(self):
        splash = Splash("127.0.0.1", 0)
        port = splash.port
        got: dict[str, tuple[int, bytes]] = {}
        waiting = [threading.Thread(target=lambda: got.__setitem__("get", _get(port, "/config?x=1"))),
                   threading.Thread(target=lambda: got.__setitem__("post", _get(port, "/api", b"hello")))]
        for t in waiting:
            t.start()
        for t in waiting:
            t.join(0.5)
            assert t.is_alive()  # held: nothing serves the app yet
        splash.hand_over()
        real = HTTPServer(("127.0.0.1", port), _Real)  # the port is free again, as Gradio finds it
        threading.Thread(target=real.serve_forever, daemon=True).start()
        try:
            splash.served()
            for t in waiting:
                t.join(30)
            assert got["get"][0] == 200
            assert json.loads(got["get"][1]) == {"method": "GET", "path": "/config?x=1", "body": ""}
            assert json.loads(got["post"][1]) == {"method": "POST", "path": "/api", "body": "hello"}
            assert json.loads(_get(port, "/")[1])["path"] == "/"  # now the real server answers "/"
        finally:
            real.shutdown()
            real.server_close()

    def test_config_outlasts_a_clients_read_timeout(self):
        """gradio_client asks /config with httpx's default 5 s read timeout; the app serves 6.5 s later."""
        splash = Splash("127.0.0.1", 0)
        port, real = splash.port, None

        def serve_late():
            nonlocal real
            time.sleep(6.5)
            splash.hand_over()
            real = HTTPServer(("127.0.0.1", port), _Real)
            threading.Thread(target=real.serve_forever, daemon=True).start()
            splash.served()

        threading.Thread(target=serve_late, daemon=True).start()
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/config")  # default timeouts, as gradio_client.Client
            assert r.is_success and r.json() == {"method": "GET", "path": "/config", "body": ""}
        finally:
            time.sleep(0.1)
            if real is not None:
                real.shutdown()
                real.server_close()

    def test_a_stream_is_relayed_as_it_flows(self):
        splash = Splash("127.0.0.1", 0)
        splash.hand_over()
        real = HTTPServer(("127.0.0.1", splash.port), _Real)
        threading.Thread(target=real.serve_forever, daemon=True).start()
        try:
            splash.served()
            t0 = time.monotonic()
            with httpx.stream("GET", f"http://127.0.0.1:{splash.port}/stream", timeout=30) as r:
                parts = [(time.monotonic() - t0, part) for part in r.iter_bytes() if part.strip()]
        finally:
            real.shutdown()
            real.server_close()
        assert b"".join(p for _, p in parts) == b"data: one\n\ndata: two\n\n"
        assert len(parts) == 2 and parts[0][0] < parts[1][0] - 0.5  # the first part came before the second

    def test_failure_is_told_to_waiting_requests(self):
        splash = Splash("127.0.0.1", 0)
        got = {}
        t = threading.Thread(target=lambda: got.__setitem__("r", _get(splash.port, "/api/x")))
        t.start()
        try:
            time.sleep(0.2)
            splash.fail("no head file at x.safetensors", linger=0.5)
            t.join(30)
            code, body = got["r"]
            assert code == 503 and b"no head file at x.safetensors" in body
            assert json.loads(_get(splash.port, STATUS_PATH)[1])["error"] == "no head file at x.safetensors"
            assert json.loads(_get(splash.port, "/config")[1]) == {"error": "no head file at x.safetensors"}
        finally:
            splash.close()


class TestAppStart:
    def test_taken_port_is_a_clear_error(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            run = subprocess.run([sys.executable, str(APP), "--port", str(port)], capture_output=True, text=True,
                                 timeout=120)
        assert run.returncode == 2
        assert f"cannot serve on 127.0.0.1:{port}" in run.stderr and "Traceback" not in run.stderr

    def test_bad_head_is_a_clear_error(self, tmp_path):
        head = tmp_path / "missing" / "head.safetensors"
        run = subprocess.run([sys.executable, str(APP), "--port", "0", "--head", str(head)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2
        assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr

    def test_bad_open_stores_setting_is_a_clear_error(self):
        run = subprocess.run([sys.executable, str(APP), "--port", "0"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "UNREAL_OPEN_STORES": "maybe"})
        assert run.returncode == 2
        assert run.stderr == "error: $UNREAL_OPEN_STORES is 0 or 1, not 'maybe'\n"
