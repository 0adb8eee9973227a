// The `{{name}}` onestep handler, in JavaScript: built with componentize-js (`npm run build`)
// into a WebAssembly component of world onestep:handler/handler@0.3.0 (the WIT is in wit/; the
// world imports wasi:http). It asks an OpenAI-compatible chat-completions endpoint one question
// (through ./wasi_http.js) and returns the assistant's answer.
//
// Each model call is a durable step (./steps.js) keyed by its place in the work, `model-0` (an
// agent loop's next calls: `model-1`, `model-2`, …): a retried or resumed attempt of the same
// execution loads the recorded answer and does not pay for the call again.
//
// Payload {"prompt": "...", "system"?: "...", "model"?: "...", "max_tokens"?: N}; the endpoint is
// handler.params.base_url and the default model handler.params.model (handler.yaml). It sends
// POST {base_url}/chat/completions with a Content-Length.
//
// The guest never holds the API key: sandbox.network.headers in handler.yaml makes the host add
// Authorization to the requests for that origin, from the worker's environment.
//
// Output {"answer", "model", "usage"} (usage null when the server sends none). Errors: 429 and
// 5xx answers are retryable (retryAfterMs from `Retry-After: <seconds>`), other non-2xx answers
// fatal; a refused origin is fatal; connection failures and timeouts are retryable; a cancel
// before the request, or noticed when the answer arrives, is retryable. A thrown plain object is
// the handler error ({retryable, message, retryAfterMs}; u64 as BigInt).
import { cancelRequested, log } from "onestep:handler/host@0.3.0";
import { step } from "./steps.js";
import { RequestFailed, send } from "./wasi_http.js";

const ERROR_TEXT_CHARS = 300;

// wasi:http error codes after which the same request may well succeed later.
const RETRYABLE_CODES = new Set([
  "DNS-timeout",
  "DNS-error",
  "destination-unavailable",
  "connection-refused",
  "connection-terminated",
  "connection-timeout",
  "connection-read-timeout",
  "connection-write-timeout",
  "HTTP-response-incomplete",
  "HTTP-response-timeout",
]);

function fatal(message) {
  return { retryable: false, message };
}

function object(what, text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw fatal(`${what} is not JSON: ${e}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw fatal(`${what} is not a JSON object: ${text}`);
  }
  return value;
}

// `key` as a string from the payload, else the params.
function setting(key, payload, params) {
  for (const [name, values] of [["payload", payload], ["params", params]]) {
    const value = values[key];
    if (value === undefined || value === null) {
      continue;
    }
    if (typeof value !== "string") {
      throw fatal(`${name}.${key} must be a string, got ${JSON.stringify(value)}`);
    }
    return value;
  }
  return undefined;
}

function build(ctx, payload) {
  const data = object("payload", payload);
  const params = object("params", ctx.params);
  if (typeof data.prompt !== "string") {
    throw fatal("the payload needs a string `prompt`");
  }
  if (typeof params.base_url !== "string") {
    throw fatal("handler.params.base_url must be a string");
  }
  const model = setting("model", data, params);
  if (model === undefined) {
    throw fatal("no model: set handler.params.model");
  }
  const messages = [];
  const system = setting("system", data, params);
  if (system !== undefined) {
    messages.push({ role: "system", content: system });
  }
  messages.push({ role: "user", content: data.prompt });
  const body = { model, messages };
  const maxTokens = data.max_tokens ?? params.max_tokens;
  if (maxTokens !== undefined && maxTokens !== null) {
    if (!Number.isInteger(maxTokens) || maxTokens < 0) {
      throw fatal(`max_tokens must be a positive integer, got ${JSON.stringify(maxTokens)}`);
    }
    body.max_tokens = maxTokens;
  }
  return { url: `${params.base_url.replace(/\/+$/, "")}/chat/completions`, model, body };
}

function requestFailed(url, e) {
  if (!(e instanceof RequestFailed)) {
    return fatal(`request to ${url} failed: ${e}`);
  }
  if (e.code === "HTTP-request-denied") {
    return fatal(
      `request to ${url} denied by the sandbox (HTTP-request-denied): its origin is not in the task's sandbox.network.allow`,
    );
  }
  return { retryable: RETRYABLE_CODES.has(e.code), message: `request to ${url} failed: ${e.message}` };
}

function statusError(response) {
  const text = new TextDecoder().decode(response.body);
  let detail = text;
  try {
    const message = JSON.parse(text).error.message;
    if (typeof message === "string") {
      detail = message;
    }
  } catch (e) {
    // not the usual {"error": {"message": ...}}: the body's text
  }
  const message = `chat completions answered ${response.status}: ${detail.slice(0, ERROR_TEXT_CHARS)}`;
  if (response.status === 429 || (response.status >= 500 && response.status <= 599)) {
    const after = (response.header("retry-after") ?? "").trim();
    return {
      retryable: true,
      message,
      retryAfterMs: /^[0-9]+$/.test(after) ? BigInt(after) * 1000n : undefined,
    };
  }
  return fatal(message);
}

export function handle(ctx, payload) {
  const { url, model, body } = build(ctx, payload);
  // The model call as the step `model-0`: recorded when it succeeds, loaded (no request) by any
  // later attempt of this execution. An agent loop keys turn N `model-${N}`.
  const turn = 0;
  return JSON.stringify(step(`model-${turn}`, () => ask(url, model, body)));
}

function ask(url, model, body) {
  const bytes = new TextEncoder().encode(JSON.stringify(body));
  if (cancelRequested()) {
    throw { retryable: true, message: "cancelled before the request" };
  }
  log("info", `POST ${url} (model ${model})`);
  // A cancel while the request is in flight stops the attempt (after the task's
  // sandbox.cancel_grace_ms), even while it waits for the answer.
  let response;
  try {
    response = send(
      "POST",
      url,
      [
        ["content-type", "application/json"],
        ["accept", "application/json"],
        // With Content-Length the body goes out in one piece; without, chunked.
        ["content-length", String(bytes.length)],
      ],
      bytes,
    );
  } catch (e) {
    throw requestFailed(url, e);
  }
  if (response.status < 200 || response.status > 299) {
    throw statusError(response);
  }
  if (cancelRequested()) {
    throw { retryable: true, message: "cancelled" };
  }
  let content;
  let answer;
  try {
    answer = JSON.parse(new TextDecoder().decode(response.body));
    content = answer.choices[0].message.content;
  } catch (e) {
    content = undefined;
  }
  if (typeof content !== "string") {
    throw fatal(`chat completions answered ${response.status} without choices[0].message.content`);
  }
  const usage = answer.usage ?? null;
  log("info", `${response.status}, usage ${JSON.stringify(usage)}`);
  return {
    answer: content,
    model: typeof answer.model === "string" ? answer.model : model,
    usage,
  };
}
