// Durable steps (onestep's docs/steps.md) over the onestep:handler/durable@0.3.0 import.
//
// step(key, fn) returns the value an earlier attempt of this execution recorded under `key`, or
// calls fn(), records its value (as JSON) and returns it. A later attempt (after a crash, a lost
// lease or a retryable error) so skips the work an earlier one finished:
//
//   const pages = step("fetch-pages", () => fetch());
//   const reply = step(`model-${turn}`, () => ask(messages));
//
// The handler is synchronous (wasi:http is called blocking, see wasi_http.js), and so is step;
// a fn that returns a Promise gets a Promise back, resolved once the value is recorded.
//
// Keys must name the same unit of work in every attempt: derive them from the position in the
// work (`model-${turn}`, `page-${n}`), never from the clock or randomness. A step is
// at-least-once: its work runs again when the attempt stops between the work and the save.
// Values are JSON (what JSON.stringify takes; `undefined` is recorded as null), at most 1 MiB
// each and 16 MiB per execution; 1,000 steps per execution.
// Encoding takes memory: JSON.stringify of a 0.9 MB string peaked at ~80 MB, over the 64 MiB
// of handler.yaml's sandbox.memory_limit_bytes (raise it for large values).
//
// An exception of fn propagates as it is and records nothing. A refused step call throws the
// handler's error ({retryable, message}): retryable when this attempt lost the execution
// (`fenced`) or the store is unreachable, fatal (with the key and the cap) for a bad key or
// value or a cap reached.
import { stepLoad, stepSave } from "onestep:handler/durable@0.3.0";

export function step(key, fn) {
  let text;
  try {
    text = stepLoad(key);
  } catch (e) {
    throw stepError(key, "loaded", e);
  }
  if (text !== undefined) {
    try {
      return JSON.parse(text);
    } catch (e) {
      throw { retryable: false, message: `step '${key}': its recorded value does not decode: ${e}` };
    }
  }
  const value = fn();
  if (value !== null && typeof value === "object" && typeof value.then === "function") {
    return value.then((resolved) => save(key, resolved));
  }
  return save(key, value);
}

function save(key, value) {
  let text;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (e) {
    throw { retryable: false, message: `step '${key}': its value does not encode as JSON: ${e}` };
  }
  try {
    stepSave(key, text);
  } catch (e) {
    throw stepError(key, "saved", e);
  }
  return value;
}

// A refused step call (`what`: "loaded" or "saved") as the handler's error: a lost lease or an
// unreachable store is worth another attempt, which resumes from the steps recorded so far; a
// refused key or value, or a cap reached, would fail the same way again.
export function stepError(key, what, e) {
  const error = e && e.payload !== undefined ? e.payload : e;
  const tag = error && typeof error.tag === "string" ? error.tag : undefined;
  const val = error ? error.val : undefined;
  let retryable = false;
  let why;
  switch (tag) {
    case "fenced":
      retryable = true;
      why = "this attempt no longer holds the execution (another attempt took over, or its lease ran out)";
      break;
    case "unavailable":
      retryable = true;
      why = `the step store is unavailable: ${val}`;
      break;
    case "invalid-key":
      why = `invalid key (${val}): 1 to 255 bytes of UTF-8, no control characters`;
      break;
    case "invalid-value":
      why = `the value is not one JSON document: ${val}`;
      break;
    case "too-large":
      why = `the value is ${val} bytes, over the cap of 1 MiB per step`;
      break;
    case "too-many-steps":
      why = "the execution has the most steps it may record (the cap: 1,000 per execution)";
      break;
    case "execution-budget":
      why = `the execution's steps would hold ${val} bytes, over the cap of 16 MiB per execution`;
      break;
    case "invalid-wake":
      why = `invalid wake time: ${val}`;
      break;
    default:
      why = String(e);
  }
  return { retryable, message: `step '${key}' not ${what}: ${why}` };
}
