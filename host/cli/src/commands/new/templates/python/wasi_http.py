"""Blocking outbound HTTP over ``wasi:http`` for a synchronous onestep handler.

The host calls ``handle`` synchronously and the handler waits for one answer, so this helper
needs no event loop: it waits on each ``wasi:io`` pollable with ``block()``. (componentize-py
bundles an asyncio loop, ``poll_loop``, for the ``wasi:http/proxy`` world; it imports the HTTP
types as ``wit_world.imports.types``, a name that in world ``onestep:handler/handler`` belongs
to ``onestep:handler/types``, so the HTTP types are ``wit_world.imports.wasi_http_types`` here.)

``send(method, url, headers, body)`` returns a ``Response`` (status, headers, the whole body)
or raises ``RequestFailed`` with the ``wasi:http`` error code the host gave, e.g.
``ErrorCode::HttpRequestDenied`` for an origin the task's ``sandbox.network.allow`` does not
list. Response bodies are read whole; the host caps them (``max_response_bytes``).
"""

from typing import List, Optional, Tuple
from urllib.parse import urlsplit

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler
from wit_world.imports.streams import StreamError_Closed
from wit_world.imports.wasi_http_types import (
    Fields,
    IncomingBody,
    Method,
    Method_Get,
    Method_Other,
    Method_Post,
    OutgoingBody,
    OutgoingRequest,
    Scheme_Http,
    Scheme_Https,
    http_error_code,
)

# `blocking-write-and-flush` takes at most 4096 bytes per call.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024


class RequestFailed(Exception):
    """A request without a (complete) response. ``code`` is the ``wasi:http`` error code
    (an ``ErrorCode_*`` value) when the host gave one, else ``None``."""

    def __init__(self, code: Optional[object], detail: str = ""):
        self.code = code
        self.detail = detail
        super().__init__(self.name())

    def name(self) -> str:
        """``ErrorCode::HttpRequestDenied`` (the code's name, as the Rust guests print it),
        or the detail when there is no code."""
        if self.code is None:
            return self.detail or "unknown error"
        kind = type(self.code).__name__.replace("ErrorCode_", "ErrorCode::", 1)
        value = getattr(self.code, "value", None)
        return kind if value is None else f"{kind}({value!r})"


class Response:
    def __init__(self, status: int, headers: List[Tuple[str, bytes]], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (case-insensitive), decoded as latin-1."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value.decode("latin-1")
        return None


def _method(name: str) -> Method:
    upper = name.upper()
    if upper == "GET":
        return Method_Get()
    if upper == "POST":
        return Method_Post()
    return Method_Other(upper)


def _wait(pollable) -> None:
    with pollable:
        pollable.block()


def _request(method: str, url: str, headers: List[Tuple[str, str]]) -> OutgoingRequest:
    parts = urlsplit(url)
    if parts.scheme == "https":
        scheme = Scheme_Https()
    elif parts.scheme == "http":
        scheme = Scheme_Http()
    else:
        raise RequestFailed(None, f"unsupported URL scheme in {url!r} (http or https)")
    if not parts.netloc:
        raise RequestFailed(None, f"no host in URL {url!r}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        fields = Fields.from_list([(k, v.encode("latin-1")) for k, v in headers])
    except Err as e:
        raise RequestFailed(None, f"invalid request header: {e.value}")
    request = OutgoingRequest(fields)
    try:
        request.set_method(_method(method))
        request.set_scheme(scheme)
        request.set_authority(parts.netloc)
        request.set_path_with_query(path)
    except Err:
        raise RequestFailed(None, f"invalid request {method} {url!r}")
    return request


def _write_body(out_body: OutgoingBody, body: bytes) -> Optional[RequestFailed]:
    """Writes and finishes the request body. A failure is returned, not raised: the
    response future usually says why, and wins."""
    try:
        with out_body.write() as stream:
            for start in range(0, len(body), _WRITE_CHUNK):
                stream.blocking_write_and_flush(body[start : start + _WRITE_CHUNK])
        OutgoingBody.finish(out_body, None)
    except Err as e:
        value = e.value
        return RequestFailed(value if type(value).__name__.startswith("ErrorCode_") else None,
                             f"writing the request body failed: {value!r}")
    return None


def _read_body(incoming: IncomingBody) -> bytes:
    chunks = []
    with incoming.stream() as stream:
        while True:
            try:
                chunks.append(stream.blocking_read(_READ_CHUNK))
            except Err as e:
                if isinstance(e.value, StreamError_Closed):
                    break
                # last-operation-failed: a wasi:io error, maybe carrying an HTTP error code.
                with e.value.value as error:
                    raise RequestFailed(http_error_code(error), error.to_debug_string())
    with IncomingBody.finish(incoming):
        pass
    return b"".join(chunks)


def send(
    method: str, url: str, headers: List[Tuple[str, str]], body: bytes = b""
) -> Response:
    """Sends one request and waits for the whole response."""
    request = _request(method, url, headers)
    out_body = request.body()
    try:
        future = outgoing_handler.handle(request, None)
    except Err as e:
        raise RequestFailed(e.value)
    with future:
        body_failed = _write_body(out_body, body)
        result = future.get()
        while result is None:
            _wait(future.subscribe())
            result = future.get()
    if isinstance(result, Err) or not isinstance(result, Ok):
        raise RequestFailed(None, "the response was already taken")
    if isinstance(result.value, Err):
        raise RequestFailed(result.value.value)
    if body_failed is not None:
        raise body_failed
    with result.value.value as response:
        status = response.status()
        with response.headers() as fields:
            entries = fields.entries()
        data = _read_body(response.consume())
    return Response(status, entries, data)
