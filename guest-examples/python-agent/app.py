"""python-agent: the ``agent`` example in Python (componentize-py, world
``onestep:handler/handler@0.2.0``, so it imports ``wasi:http``): one question to an
OpenAI-compatible chat-completions endpoint.

Payload ``{"prompt": "...", "system"?: "...", "max_tokens"?: N, "base_url"?: "...",
"model"?: "..."}``. ``base_url`` and ``model`` come from the payload, else the execution's
metadata, else the task's ``handler.params``; ``system`` and ``max_tokens`` from the payload,
else the params. It POSTs ``{base_url}/chat/completions`` and returns ``{"answer", "model",
"usage", "language": "python"}``.

The API key is not the guest's: the task's ``sandbox.network.headers`` makes the host add
``Authorization`` to requests for that origin; this handler sets no such header.

Errors: 429 and 5xx answers are retryable (``retry_after_ms`` from ``Retry-After: <seconds>``),
other non-2xx answers fatal; a request the sandbox refuses is fatal and says so; connection
failures and timeouts are retryable.
"""

import json
from http import HTTPStatus

import wit_world
from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports.onestep_handler_types import Context, HandlerError

import wasi_http

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
    "ErrorCode::ConnectionLimitReached",
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


def first_string(key: str, sources) -> str | None:
    """``key`` from the first of ``sources`` (``(name, dict)`` pairs) that has it."""
    for name, values in sources:
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise fatal(f"{name}.{key} must be a string, got {json.dumps(value)}")
        return value
    return None


def build_request(ctx: Context, payload: str):
    data = parse_object("payload", payload)
    endpoint = [
        ("payload", data),
        ("metadata", parse_object("metadata", ctx.metadata)),
        ("params", parse_object("params", ctx.params)),
    ]
    settings = [endpoint[0], endpoint[2]]
    prompt = first_string("prompt", endpoint[:1])
    if prompt is None:
        raise fatal('payload needs "prompt": a string')
    base_url = first_string("base_url", endpoint)
    if base_url is None:
        raise fatal(
            "no base_url: set handler.params.base_url (or base_url in the payload or the metadata)"
        )
    model = first_string("model", endpoint)
    if model is None:
        raise fatal("no model: set handler.params.model (or model in the payload or the metadata)")
    messages = []
    system = first_string("system", settings)
    if system is not None:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    body = {"model": model, "messages": messages}
    for name, values in settings:
        max_tokens = values.get("max_tokens")
        if max_tokens is None:
            continue
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise fatal(f"{name}.max_tokens must be a positive integer, got {json.dumps(max_tokens)}")
        body["max_tokens"] = max_tokens
        break
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
    """``401 Unauthorized``, as the Rust guest prints a status."""
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
        retry_after = response.header("retry-after")
        retry_after_ms = int(retry_after.strip()) * 1000 if retry_after and retry_after.strip().isdigit() else None
        return retryable(message, retry_after_ms)
    return fatal(message)


class WitWorld(wit_world.WitWorld):
    def handle(self, ctx: Context, payload: str) -> str:
        url, model, body = build_request(ctx, payload)
        text = json.dumps(body).encode("utf-8")
        host.log(host.Level.INFO, f"python-agent: POST {url} (model {model})")
        try:
            response = wasi_http.send(
                "POST",
                url,
                [
                    ("content-type", "application/json"),
                    ("accept", "application/json"),
                    ("content-length", str(len(text))),
                ],
                text,
            )
        except wasi_http.RequestFailed as failure:
            raise request_failed(url, failure)
        if not 200 <= response.status <= 299:
            raise status_error(response)
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
        host.log(
            host.Level.INFO,
            f"python-agent: {status_text(response.status)}, answer of {len(content)} characters, usage {json.dumps(usage)}",
        )
        return json.dumps(
            {
                "answer": content,
                "model": answer.get("model") if isinstance(answer.get("model"), str) else model,
                "usage": usage,
                "language": "python",
            }
        )
