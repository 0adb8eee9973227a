"""python-echo: an onestep handler written in Python (built with componentize-py against
world ``onestep:handler/compute@0.2.0``).

Returns ``{"echo": <payload>, "attempt": N, "task": NAME, "params": <the task's
handler.params>, "language": "python"}``. A payload of ``{"fail": "message"}`` returns a
retryable handler error instead, to show how errors are raised from Python.
"""

import json

import wit_world
from wit_world.imports import host
from wit_world.imports.types import Context, HandlerError
from componentize_py_types import Err


class WitWorld(wit_world.WitWorld):
    def handle(self, ctx: Context, payload: str) -> str:
        data = json.loads(payload)
        if isinstance(data, dict) and "fail" in data:
            raise Err(HandlerError(retryable=True, message=str(data["fail"]), retry_after_ms=1000))
        params = json.loads(ctx.params)
        host.log(host.Level.INFO, f"python-echo attempt {ctx.attempt} of {ctx.task_name}")
        return json.dumps(
            {
                "echo": data,
                "attempt": ctx.attempt,
                "task": ctx.task_name,
                "params": params,
                "language": "python",
            }
        )
