"""A loopback HTTP server for download tests: Range requests, and faults on demand.

Behaviour per path is set by the test: serve bytes (honouring Range), cut the connection after
some bytes the first time, hang until the test ends, or answer 404.
"""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field


@dataclass
class Route:
    body: bytes = b""
    cut_after: int | None = None  # first request: send this many bytes, then close
    hang: bool = False
    status: int = 200
    requests: list[str | None] = field(default_factory=list)  # Range header of each request


class Server:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.release = threading.Event()
        routes, release = self.routes, self.release

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                route = routes.get(self.path)
                if route is None or route.status == 404:
                    self.send_error(404)
                    return
                route.requests.append(self.headers.get("Range"))
                if route.hang:
                    release.wait(30)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0])
                    if start >= len(route.body):
                        self.send_response(416)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(route.body) - 1}/{len(route.body)}")
                else:
                    self.send_response(200)
                body = route.body[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if route.cut_after is not None and len(route.requests) == 1:
                    self.wfile.write(body[: route.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
