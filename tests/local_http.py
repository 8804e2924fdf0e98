"""A JSON answer over HTTP on 127.0.0.1, for tests of what a client or broker fetches (OAuth token
endpoints, JWKS): `answer(method, body)` gives the JSON to send for each request."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Answer = Callable[[str, str, dict[str, str]], object]
"""(method, request body, request headers) -> the JSON value to answer."""


@contextmanager
def json_endpoint(answer: Answer, path: str = "/") -> Iterator[str]:
    """Serve `answer` until the block ends; yields the URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = self.rfile.read(length).decode() if length else ""
            body = json.dumps(answer(self.command, request, dict(self.headers))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()
