// Blocking outbound HTTP over wasi:http for a synchronous onestep handler (componentize-js binds
// every interface of the world as an importable module; the handler waits on each wasi:io
// pollable with block(), so no event loop is needed).
//
// send(method, url, headers, body) returns {status, headers, body} (the whole body, a
// Uint8Array; the host caps it with sandbox.network.max_response_bytes) or throws a
// RequestFailed whose `code` is the wasi:http error code the host gave, e.g.
// "HTTP-request-denied" for an origin the task's sandbox.network.allow does not list.
//
// A request body goes out with the `content-length` header you pass (without one, chunked).
import { handle as outgoingHandle } from "wasi:http/outgoing-handler@0.2.12";
import { Fields, OutgoingBody, OutgoingRequest } from "wasi:http/types@0.2.12";

// blocking-write-and-flush takes at most 4096 bytes per call.
const WRITE_CHUNK = 4096;
const READ_CHUNK = 65536n;

export class RequestFailed extends Error {
  constructor(code, detail) {
    super(code === undefined ? detail : `ErrorCode::${code}`);
    this.code = code; // the wasi:http error-code tag, e.g. "connection-refused"
  }
}

// The wasi:http error code of a failed call: its variant tag, or undefined.
function codeOf(e) {
  const payload = e && e.payload !== undefined ? e.payload : e;
  return payload && typeof payload.tag === "string" ? payload.tag : undefined;
}

function drop(resource) {
  if (resource && typeof resource[Symbol.dispose] === "function") {
    resource[Symbol.dispose]();
  }
}

function request(method, url, headers) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch (e) {
    throw new RequestFailed(undefined, `invalid URL ${JSON.stringify(url)}`);
  }
  let scheme;
  if (parsed.protocol === "https:") {
    scheme = { tag: "HTTPS" };
  } else if (parsed.protocol === "http:") {
    scheme = { tag: "HTTP" };
  } else {
    throw new RequestFailed(undefined, `unsupported URL scheme in ${url} (http or https)`);
  }
  const encoder = new TextEncoder();
  let fields;
  try {
    fields = Fields.fromList(headers.map(([name, value]) => [name, encoder.encode(value)]));
  } catch (e) {
    throw new RequestFailed(undefined, `invalid request header: ${JSON.stringify(e.payload)}`);
  }
  const req = new OutgoingRequest(fields);
  const upper = method.toUpperCase();
  req.setMethod(
    upper === "GET" ? { tag: "get" } : upper === "POST" ? { tag: "post" } : { tag: "other", val: upper },
  );
  req.setScheme(scheme);
  req.setAuthority(parsed.host);
  req.setPathWithQuery(parsed.pathname + parsed.search);
  return req;
}

function writeBody(outBody, body) {
  const stream = outBody.write();
  for (let start = 0; start < body.length; start += WRITE_CHUNK) {
    stream.blockingWriteAndFlush(body.subarray(start, start + WRITE_CHUNK));
  }
  drop(stream); // the stream must be gone before the body is finished
}

function readBody(incoming) {
  const stream = incoming.stream();
  const chunks = [];
  let total = 0;
  for (;;) {
    let chunk;
    try {
      chunk = stream.blockingRead(READ_CHUNK);
    } catch (e) {
      if (e.payload && e.payload.tag === "closed") {
        break;
      }
      throw new RequestFailed(undefined, `reading the response body failed: ${e}`);
    }
    chunks.push(chunk);
    total += chunk.length;
  }
  drop(stream);
  const out = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

// Sends one request and waits for the whole response.
export function send(method, url, headers, body) {
  const req = request(method, url, headers);
  const outBody = req.body();
  let future;
  try {
    future = outgoingHandle(req, undefined);
  } catch (e) {
    throw new RequestFailed(codeOf(e), `request failed: ${e}`);
  }
  let bodyFailed;
  try {
    if (body && body.length > 0) {
      writeBody(outBody, body);
    }
    OutgoingBody.finish(outBody, undefined);
  } catch (e) {
    // The response usually says why, and wins.
    bodyFailed = new RequestFailed(codeOf(e), `writing the request body failed: ${e}`);
  }
  let result = future.get();
  while (result === undefined) {
    const pollable = future.subscribe();
    pollable.block();
    drop(pollable);
    result = future.get();
  }
  drop(future);
  if (result.tag !== "ok") {
    throw new RequestFailed(undefined, "the response was already taken");
  }
  if (result.val.tag !== "ok") {
    throw new RequestFailed(codeOf(result.val.val), "request failed");
  }
  if (bodyFailed !== undefined) {
    throw bodyFailed;
  }
  const response = result.val.val;
  const status = response.status();
  const headerFields = response.headers();
  const entries = headerFields.entries();
  drop(headerFields);
  const decoder = new TextDecoder();
  const responseHeaders = entries.map(([name, value]) => [name.toLowerCase(), decoder.decode(value)]);
  const data = readBody(response.consume());
  drop(response);
  return {
    status,
    headers: responseHeaders,
    body: data,
    header(name) {
      const found = responseHeaders.find(([key]) => key === name.toLowerCase());
      return found === undefined ? undefined : found[1];
    },
  };
}
