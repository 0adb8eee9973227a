"""The `{{name}}` onestep handler, in Python: built with componentize-py into a WebAssembly
component of world ``onestep:handler/compute@0.3.0`` (the WIT is in ``wit/``). It gets the
payload and a context (execution id, attempt, task, namespace, metadata, and the task's
``params`` from handler.yaml) and returns JSON output or raises a handler error.

Payload ``{"name": "world"}`` -> ``{"message": "Hello, world!", "attempt": 1}``, with the
greeting from ``params.greeting``. The message is made in a durable step, ``greeting``
(``steps.py``): a later attempt of the same execution loads it instead of making it again.
"""

import json

import wit_world
from wit_world.imports import host
from wit_world.imports.types import Context, HandlerError
from componentize_py_types import Err

from steps import step


def fatal(message: str) -> Err:
    """An error not worth retrying: the same input fails the same way."""
    return Err(HandlerError(retryable=False, message=message, retry_after_ms=None))


class WitWorld(wit_world.WitWorld):
    def handle(self, ctx: Context, payload: str) -> str:
        params = json.loads(ctx.params)
        try:
            data = json.loads(payload)
        except ValueError as e:
            raise fatal(f"the payload is not JSON: {e}")
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str):
            raise fatal("the payload needs a string `name`")
        greeting = params.get("greeting", "Hello")
        host.log(host.Level.INFO, f"attempt {ctx.attempt} of execution {ctx.execution_id}")
        # A unit of work recorded as a step: real handlers put their expensive or side-effecting
        # work here (a download, a model call, a payment with an idempotency key).
        message = step("greeting", lambda: f"{greeting}, {name}!")
        return json.dumps({"message": message, "attempt": ctx.attempt})
