"""Durable steps (onestep's docs/steps.md) over the ``onestep:handler/durable@0.3.0`` import.

``step(key, fn)`` returns the value an earlier attempt of this execution recorded under ``key``,
or calls ``fn()``, records its value (as JSON) and returns it. A later attempt (after a crash, a
lost lease or a retryable error) so skips the work an earlier one finished::

    pages = step("fetch-pages", lambda: fetch())

``@step("key")`` makes each call of a function a step; the key may name the call's arguments
(``str.format``), so that each call is its own step::

    @step("model-{turn}")
    def ask(turn, messages):
        ...

    reply = ask(0, messages)    # the step "model-0"

Keys must name the same unit of work in every attempt: derive them from the position in the work
(``model-{turn}``, ``page-{n}``), never from the clock or randomness. A step is at-least-once:
its work runs again when the attempt stops between the work and the save. Values are JSON (what
``json.dumps`` takes; a tuple comes back as a list), at most 1 MiB each and 16 MiB per
execution; 1,000 steps per execution.

An exception of the work propagates as it is and records nothing. A refused step call raises the
handler's error: retryable when this attempt lost the execution (``fenced``) or the store is
unreachable, fatal (with the key and the cap) for a bad key or value or a cap reached.
"""

import functools
import inspect
import json

from componentize_py_types import Err
from wit_world.imports import durable

try:  # world `handler` (with wasi:http, which has a `types` of its own)
    from wit_world.imports.onestep_handler_types import HandlerError
except ImportError:  # world `compute`
    from wit_world.imports.types import HandlerError


def step(key: str, fn=None):
    """Runs ``fn()`` as the durable step ``key``; without ``fn``, a decorator (see above)."""
    if fn is not None:
        return _run(key, fn)

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            name = key.format(**bound.arguments)
            return _run(name, lambda: function(*args, **kwargs))

        return wrapper

    return decorate


def _run(key: str, fn):
    try:
        text = durable.step_load(key)
    except Err as e:
        raise step_error(key, "loaded", e.value)
    if text is not None:
        try:
            return json.loads(text)
        except ValueError as e:
            raise _error(False, f"step '{key}': its recorded value does not decode: {e}")
    value = fn()
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        raise _error(False, f"step '{key}': its value does not encode as JSON: {e}")
    try:
        durable.step_save(key, text)
    except Err as e:
        raise step_error(key, "saved", e.value)
    return value


def _error(retryable: bool, message: str) -> Err:
    return Err(HandlerError(retryable=retryable, message=message, retry_after_ms=None))


def step_error(key: str, what: str, e) -> Err:
    """A refused step call (``what``: "loaded" or "saved") as the handler's error: a lost lease or
    an unreachable store is worth another attempt, which resumes from the steps recorded so far;
    a refused key or value, or a cap reached, would fail the same way again."""
    if isinstance(e, durable.StepError_Fenced):
        retryable, why = True, (
            "this attempt no longer holds the execution (another attempt took over, or its "
            "lease ran out)"
        )
    elif isinstance(e, durable.StepError_Unavailable):
        retryable, why = True, f"the step store is unavailable: {e.value}"
    elif isinstance(e, durable.StepError_InvalidKey):
        retryable, why = False, (
            f"invalid key ({e.value}): 1 to 255 bytes of UTF-8, no control characters"
        )
    elif isinstance(e, durable.StepError_InvalidValue):
        retryable, why = False, f"the value is not one JSON document: {e.value}"
    elif isinstance(e, durable.StepError_TooLarge):
        retryable, why = False, f"the value is {e.value} bytes, over the cap of 1 MiB per step"
    elif isinstance(e, durable.StepError_TooManySteps):
        retryable, why = False, (
            "the execution has the most steps it may record (the cap: 1,000 per execution)"
        )
    elif isinstance(e, durable.StepError_ExecutionBudget):
        retryable, why = False, (
            f"the execution's steps would hold {e.value} bytes, "
            "over the cap of 16 MiB per execution"
        )
    elif isinstance(e, durable.StepError_InvalidWake):
        retryable, why = False, f"invalid wake time: {e.value}"
    else:
        retryable, why = False, repr(e)
    return _error(retryable, f"step '{key}' not {what}: {why}")
