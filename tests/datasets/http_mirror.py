"""A real HTTP server on 127.0.0.1 (http.server in a thread) serving a folder, with
HTTP Range support and switches for the failures the fetcher must survive."""

from __future__ import annotations

import http.server
import re
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "data"


@dataclass
class Behaviour:
    """What the server does, per request path (`/relative/path`)."""

    cut_after: dict[str, int] = field(default_factory=dict)  # send N bytes, then close
    short: dict[str, int] = field(default_factory=dict)  # announce and send only N bytes
    ignore_range: bool = False
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range)


def make_handler(root: Path, behaviour: Behaviour) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            behaviour.requests.append((path, self.headers.get("Range")))
            file = root / path.lstrip("/")
            if not file.is_file():
                self.send_error(404, "Not Found")
                return
            data = file.read_bytes()
            start, status = 0, 200
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if match and not behaviour.ignore_range:
                start = int(match.group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            body = data[start:]
            if path in behaviour.short:
                body = body[:behaviour.short[path]]
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if path in behaviour.cut_after:
                self.wfile.write(body[:behaviour.cut_after[path]])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


class MirrorServer:
    """Serves `root` at `self.url` until `close()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.behaviour = Behaviour()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                     make_handler(root, self.behaviour))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
