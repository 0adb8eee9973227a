#!/usr/bin/env python3
"""A loopback fake of an OpenAI-compatible chat-completions endpoint, for checking handlers.

    python3 scripts/lib/fake-openai.py --key KEY [--port N]

Listens on 127.0.0.1 (port 0 = any free one) and prints ``port N`` on its first stdout line.
``POST /v1/chat/completions`` answers like the real API, as a naive server would read it:

* no ``Content-Length`` (e.g. a chunked body): 411 ``{"error": {"message": ...}}``;
* an ``Authorization`` other than ``Bearer KEY``: 401;
* a body that is not JSON with a ``model`` and ``messages``: 400;
* a last message whose content is ``status:NNN``: that status (429 with ``Retry-After: 7``);
* otherwise 200 with one choice ``{"role": "assistant", "content": "echo: <last message>"}``,
  the model asked for, and a ``usage`` of 3 prompt + 2 completion tokens.

``GET /requests`` answers ``{"chat_completions": N}``, the number of ``POST /v1/chat/completions``
received so far (whatever their answer), so that a check can tell whether a handler asked the
model. Every other path is 404. It runs until killed; each request is logged to stderr.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key", required=True, help="the API key the Authorization must carry")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    counts = {"chat_completions": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status: int, body: dict, headers=()) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def error(self, status: int, message: str, headers=()) -> None:
            self.answer(status, {"error": {"message": message, "type": "fake"}}, headers)

        def do_GET(self) -> None:
            if self.path == "/requests":
                with lock:
                    self.answer(200, dict(counts))
                return
            self.error(404, f"no such path: GET {self.path}")

        def do_POST(self) -> None:
            length = self.headers.get("Content-Length")
            if self.headers.get("Transfer-Encoding") or length is None or not length.isdigit():
                self.close_connection = True
                self.error(411, "Content-Length required (got a request without one, e.g. chunked)")
                return
            raw = self.rfile.read(int(length))
            if self.path != "/v1/chat/completions":
                self.error(404, f"no such path: POST {self.path}")
                return
            with lock:
                counts["chat_completions"] += 1
            if self.headers.get("Authorization") != f"Bearer {args.key}":
                self.error(401, "Incorrect API key provided")
                return
            try:
                request = json.loads(raw)
                model = request["model"]
                last = request["messages"][-1]["content"]
            except (ValueError, KeyError, IndexError, TypeError) as e:
                self.error(400, f"invalid request body: {e!r}")
                return
            if isinstance(last, str) and last.startswith("status:") and last[7:].isdigit():
                status = int(last[7:])
                extra = [("Retry-After", "7")] if status == 429 else []
                self.error(status, f"the status {status} asked for", extra)
                return
            self.answer(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"echo: {last}"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
                },
            )

        def log_message(self, format: str, *values) -> None:
            sys.stderr.write("fake-openai: " + (format % values) + "\n")

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
