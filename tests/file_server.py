"""A small HTTP file server on 127.0.0.1 for the download tests: serves bytes by path, honours
``Range``, records every request, and can cut a response short to simulate a dropped connection."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple


class FileServer:
    """``with FileServer({"/a.bin": b"..."}) as server: server.url("/a.bin")``. Stops on exit."""

    def __init__(self, files: Dict[str, bytes]) -> None:
        self.files = dict(files)
        self.requests: List[Tuple[str, Optional[str]]] = []  # (path, Range header)
        self.cut_after: Dict[str, int] = {}  # path -> bytes to send before dropping the connection, once
        self.declared_size: Dict[str, int] = {}  # path -> Content-Length to claim instead of the real one
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def __enter__(self) -> "FileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler_for(server: FileServer):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            range_header = self.headers.get("Range")
            server.requests.append((self.path, range_header))
            body = server.files.get(self.path)
            if body is None:
                self.send_error(404, "Not Found")
                return
            start = int(range_header.split("=")[1].split("-")[0]) if range_header else 0
            if start >= len(body) and range_header:
                self.send_error(416, "Range Not Satisfiable")
                return
            self._send(body, start)

        def _send(self, body: bytes, start: int) -> None:
            self.send_response(206 if start else 200)
            length = server.declared_size.get(self.path, len(body)) - start
            self.send_header("Content-Length", str(length))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.end_headers()
            cut = server.cut_after.pop(self.path, None)
            self.wfile.write(body[start:] if cut is None else body[start : start + cut])
            if cut is not None:
                self.close_connection = True

        def log_message(self, *args) -> None:
            pass

    return Handler
