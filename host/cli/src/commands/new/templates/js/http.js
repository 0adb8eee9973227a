// The `{{name}}` onestep handler, in JavaScript: built with componentize-js (`npm run build`)
// into a WebAssembly component of world onestep:handler/handler@0.3.0 (the WIT is in wit/; the
// world imports wasi:http). It fetches one URL (through ./wasi_http.js) and returns what it got.
// The fetch is a durable step, `fetch` (./steps.js): a later attempt of the same execution
// returns what an earlier one fetched instead of fetching again.
//
// The URL is the payload's `url`, else handler.params.url (handler.yaml). The host sends the
// request only if its origin is under the task's sandbox.network.allow.
//
// Output {"url", "status", "content_type", "bytes", "text"} (`text`: the body as UTF-8, its first
// 2000 characters). A 429 or 5xx answer is a retryable error; any other answer is the result. A
// refused origin is a fatal error; connection failures and timeouts are retryable. A thrown plain
// object is the handler error ({retryable, message, retryAfterMs}; u64 as BigInt).
import { cancelRequested, log } from "onestep:handler/host@0.3.0";
import { step } from "./steps.js";
import { RequestFailed, send } from "./wasi_http.js";

const TEXT_CHARS = 2000;

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

function requestFailed(url, e) {
  if (!(e instanceof RequestFailed)) {
    return { retryable: false, message: `request to ${url} failed: ${e}` };
  }
  if (e.code === "HTTP-request-denied") {
    return {
      retryable: false,
      message: `request to ${url} denied by the sandbox (HTTP-request-denied): its origin is not in the task's sandbox.network.allow`,
    };
  }
  return { retryable: RETRYABLE_CODES.has(e.code), message: `request to ${url} failed: ${e.message}` };
}

export function handle(ctx, payload) {
  const params = JSON.parse(ctx.params);
  let data;
  try {
    data = JSON.parse(payload);
  } catch (e) {
    throw { retryable: false, message: `the payload is not JSON: ${e}` };
  }
  const url = data !== null && typeof data === "object" && data.url !== undefined ? data.url : params.url;
  if (typeof url !== "string") {
    throw { retryable: false, message: "no url: give a string `url` in the payload or in handler.params" };
  }
  // The step `fetch`, recorded when it returns; an error (a 5xx to retry) records nothing.
  return JSON.stringify(step("fetch", () => fetch(url)));
}

function fetch(url) {
  if (cancelRequested()) {
    throw { retryable: true, message: "cancelled before the request" };
  }
  log("info", `GET ${url}`);
  // A cancel while the request is in flight stops the attempt (after the task's
  // sandbox.cancel_grace_ms), even while it waits for the network.
  let response;
  try {
    response = send("GET", url, [["accept", "*/*"]]);
  } catch (e) {
    throw requestFailed(url, e);
  }
  if (response.status === 429 || (response.status >= 500 && response.status <= 599)) {
    throw { retryable: true, message: `${url} answered ${response.status}` };
  }
  const text = new TextDecoder().decode(response.body);
  return {
    url,
    status: response.status,
    content_type: response.header("content-type") ?? null,
    bytes: response.body.length,
    text: text.slice(0, TEXT_CHARS),
  };
}
