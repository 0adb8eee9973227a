"""The `{{name}}` onestep handler, in Python: built with componentize-py into a WebAssembly
component of world ``onestep:handler/handler@0.3.0`` (the WIT is in ``wit/``; the world imports
``wasi:http``). It asks an OpenAI-compatible chat-completions endpoint one question and returns
the assistant's answer.

Each model call is a durable step (``steps.py``) keyed by its place in the work, ``model-0`` (an
agent loop's next calls: ``model-1``, ``model-2``, ...): a retried or resumed attempt of the same
execution loads the recorded answer and does not pay for the call again.

Payload ``{"prompt": "...", "system"?: "...", "model"?: "...", "max_tokens"?: N}``; the endpoint
is ``handler.params.base_url`` and the default model ``handler.params.model`` (handler.yaml). It
sends ``POST {base_url}/chat/completions`` with a ``Content-Length``.

The guest never holds the API key: ``sandbox.network.headers`` in handler.yaml makes the host add
``Authorization`` to the requests for that origin, from the worker's environment.

Output ``{"answer", "model", "usage"}`` (``usage`` null when the server sends none). Errors: 429
and 5xx answers are retryable (``retry_after_ms`` from ``Retry-After: <seconds>``), other non-2xx
answers fatal; a refused origin is fatal; connection failures and timeouts are retryable; a
cancel before the request, or noticed when the answer arrives, is retryable.
"""

import json
from http import HTTPStatus

import wit_world
from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports.onestep_handler_types import Context, HandlerError

import wasi_http
from steps import step

ERROR_TEXT_CHARS = 300

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


def fatal(message: str) -> Err:
    return Err(HandlerError(retryable=False, message=message, retry_after_ms=None))


def retryable(message: str, retry_after_ms=None) -> Err:
    return Err(HandlerError(retryable=True, message=message, retry_after_ms=retry_after_ms))


def parse_object(what: str, text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise fatal(f"{what} is not JSON: {e}")
    if not isinstance(value, dict):
        raise fatal(f"{what} is not a JSON object: {text}")
    return value


def setting(key: str, payload: dict, params: dict):
    """``key`` as a string from the payload, else the params."""
    for name, values in (("payload", payload), ("params", params)):
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise fatal(f"{name}.{key} must be a string, got {json.dumps(value)}")
        return value
    return None


def build(ctx: Context, payload: str):
    data = parse_object("payload", payload)
    params = parse_object("params", ctx.params)
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise fatal("the payload needs a string `prompt`")
    base_url = params.get("base_url")
    if not isinstance(base_url, str):
        raise fatal("handler.params.base_url must be a string")
    model = setting("model", data, params)
    if model is None:
        raise fatal("no model: set handler.params.model")
    messages = []
    system = setting("system", data, params)
    if system is not None:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    body = {"model": model, "messages": messages}
    max_tokens = data.get("max_tokens", params.get("max_tokens"))
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise fatal(f"max_tokens must be a positive integer, got {json.dumps(max_tokens)}")
        body["max_tokens"] = max_tokens
    return base_url.rstrip("/") + "/chat/completions", model, body


def request_failed(url: str, failure: wasi_http.RequestFailed) -> Err:
    name = failure.name()
    if name == "ErrorCode::HttpRequestDenied":
        return fatal(
            f"request to {url} denied by the sandbox (ErrorCode::HttpRequestDenied): its origin "
            "is not in the task's sandbox.network.allow"
        )
    if name.split("(", 1)[0] in RETRYABLE_CODES:
        return retryable(f"request to {url} failed: {name}")
    return fatal(f"request to {url} failed: {name}")


def status_text(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


def status_error(response: wasi_http.Response) -> Err:
    detail = response.body.decode("utf-8", "replace")
    try:
        message = json.loads(response.body)["error"]["message"]
        if isinstance(message, str):
            detail = message
    except (ValueError, KeyError, TypeError):
        pass
    message = f"chat completions answered {status_text(response.status)}: {detail[:ERROR_TEXT_CHARS]}"
    if response.status == 429 or 500 <= response.status <= 599:
        after = (response.header("retry-after") or "").strip()
        return retryable(message, int(after) * 1000 if after.isdigit() else None)
    return fatal(message)


class WitWorld(wit_world.WitWorld):
    def handle(self, ctx: Context, payload: str) -> str:
        url, model, body = build(ctx, payload)
        # The model call as the step `model-0`: recorded when it succeeds, loaded (no request)
        # by any later attempt of this execution. An agent loop asks turn N as ask(N, ...).
        return json.dumps(ask(0, url, model, body))


@step("model-{turn}")
def ask(turn: int, url: str, model: str, body: dict) -> dict:
    text = json.dumps(body).encode("utf-8")
    if host.cancel_requested():
        raise retryable("cancelled before the request")
    host.log(host.Level.INFO, f"POST {url} (model {model}, turn {turn})")
    # A cancel while the request is in flight stops the attempt (after the task's
    # sandbox.cancel_grace_ms), even while it waits for the answer.
    try:
        response = wasi_http.send(
            "POST",
            url,
            [
                ("content-type", "application/json"),
                ("accept", "application/json"),
                # With Content-Length the body goes out in one piece; without, chunked.
                ("content-length", str(len(text))),
            ],
            text,
        )
    except wasi_http.RequestFailed as failure:
        raise request_failed(url, failure)
    if not 200 <= response.status <= 299:
        raise status_error(response)
    if host.cancel_requested():
        raise retryable("cancelled")
    try:
        answer = json.loads(response.body)
        content = answer["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str):
        raise fatal(
            f"chat completions answered {status_text(response.status)} without "
            "choices[0].message.content"
        )
    usage = answer.get("usage")
    host.log(host.Level.INFO, f"{status_text(response.status)}, usage {json.dumps(usage)}")
    model = answer.get("model") if isinstance(answer.get("model"), str) else model
    return {"answer": content, "model": model, "usage": usage}
