"""The `{{name}}` onestep handler, in Python: built with componentize-py into a WebAssembly
component of world ``onestep:handler/handler@0.3.0`` (the WIT is in ``wit/``; the world imports
``wasi:http``). It fetches one URL and returns what it got. The fetch is a durable step,
``fetch`` (``steps.py``): a later attempt of the same execution returns what an earlier one
fetched instead of fetching again.

The URL is the payload's ``url``, else ``handler.params.url`` (handler.yaml). The host sends the
request only if its origin is under the task's ``sandbox.network.allow``.

Output ``{"url", "status", "content_type", "bytes", "text"}`` (``text``: the body as UTF-8, its
first 2000 characters). A 429 or 5xx answer is a retryable error; any other answer is the result.
A refused origin is a fatal error; connection failures and timeouts are retryable.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports.onestep_handler_types import Context, HandlerError

import wasi_http
from steps import step

TEXT_CHARS = 2000

# wasi:http error codes after which the same request may well succeed later.
RETRYABLE_CODES = {
    "ErrorCode::DnsTimeout",
    "ErrorCode::DnsError",
    "ErrorCode::DestinationUnavailable",
    "ErrorCode::ConnectionRefused",
    "ErrorCode::ConnectionTerminated",
    "ErrorCode::ConnectionTimeout",
    "ErrorCode::ConnectionReadTimeout",
    "ErrorCode::ConnectionWriteTimeout",
    "ErrorCode::HttpResponseIncomplete",
    "ErrorCode::HttpResponseTimeout",
}


def error(retryable: bool, message: str) -> Err:
    return Err(HandlerError(retryable=retryable, message=message, retry_after_ms=None))


def request_failed(url: str, failure: wasi_http.RequestFailed) -> Err:
    name = failure.name()
    if name == "ErrorCode::HttpRequestDenied":
        return error(
            False,
            f"request to {url} denied by the sandbox (ErrorCode::HttpRequestDenied): its origin "
            "is not in the task's sandbox.network.allow",
        )
    return error(name.split("(", 1)[0] in RETRYABLE_CODES, f"request to {url} failed: {name}")


class WitWorld(wit_world.WitWorld):
    def handle(self, ctx: Context, payload: str) -> str:
        params = json.loads(ctx.params)
        try:
            data = json.loads(payload)
        except ValueError as e:
            raise error(False, f"the payload is not JSON: {e}")
        url = data.get("url") if isinstance(data, dict) else None
        if url is None:
            url = params.get("url")
        if not isinstance(url, str):
            raise error(False, "no url: give a string `url` in the payload or in handler.params")
        return json.dumps(fetch(url))


# Each call is the durable step `fetch`, recorded when it returns; an error (a 5xx to retry)
# records nothing.
@step("fetch")
def fetch(url: str) -> dict:
    if host.cancel_requested():
        raise error(True, "cancelled before the request")
    host.log(host.Level.INFO, f"GET {url}")
    # A cancel while the request is in flight stops the attempt (after the task's
    # sandbox.cancel_grace_ms), even while it waits for the network.
    try:
        response = wasi_http.send("GET", url, [("accept", "*/*")])
    except wasi_http.RequestFailed as failure:
        raise request_failed(url, failure)
    if response.status == 429 or 500 <= response.status <= 599:
        raise error(True, f"{url} answered {response.status}")
    return {
        "url": url,
        "status": response.status,
        "content_type": response.header("content-type"),
        "bytes": len(response.body),
        "text": response.body.decode("utf-8", "replace")[:TEXT_CHARS],
    }
