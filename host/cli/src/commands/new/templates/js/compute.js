// The `{{name}}` onestep handler, in JavaScript: built with componentize-js (`npm run build`)
// into a WebAssembly component of world onestep:handler/compute@0.3.0 (the WIT is in wit/).
// It gets the payload and a context (executionId, attempt, taskName, namespace, metadata, and
// the task's `params` from handler.yaml, as JSON text) and returns JSON output, or throws a
// plain object that is the handler error ({retryable, message, retryAfterMs}; u64 as BigInt).
//
// Payload {"name": "world"} -> {"message": "Hello, world!", "attempt": 1}, with the greeting
// from params.greeting. The message is made in a durable step, `greeting` (./steps.js): a later
// attempt of the same execution loads it instead of making it again.
import { log } from "onestep:handler/host@0.3.0";
import { step } from "./steps.js";

// An error not worth retrying: the same input fails the same way.
function fatal(message) {
  return { retryable: false, message };
}

export function handle(ctx, payload) {
  const params = JSON.parse(ctx.params);
  let data;
  try {
    data = JSON.parse(payload);
  } catch (e) {
    throw fatal(`the payload is not JSON: ${e}`);
  }
  const name = data !== null && typeof data === "object" ? data.name : undefined;
  if (typeof name !== "string") {
    throw fatal("the payload needs a string `name`");
  }
  const greeting = typeof params.greeting === "string" ? params.greeting : "Hello";
  log("info", `attempt ${ctx.attempt} of execution ${ctx.executionId}`);
  // A unit of work recorded as a step: real handlers put their expensive or side-effecting work
  // here (a download, a model call, a payment with an idempotency key).
  const message = step("greeting", () => `${greeting}, ${name}!`);
  return JSON.stringify({ message, attempt: ctx.attempt });
}
