"""Reference-side half of the backends' interop tests (host/mysql/tests/interop.rs,
host/postgres/tests: interop and the conformance suite on tables the reference created), driven
through host/testkit/src/backend_cases/reference.rs: runs the Python reference (onestep 1.15.0 +
onestep-sql 0.7.1) on the database a DSN names and prints executions as JSON. The reference's
backend class follows the DSN's scheme (`mysql+asyncmy://`, `postgresql+psycopg://`).

  ref_client.py DSN NAMESPACE AUTO_CREATE create
    (readiness only: with AUTO_CREATE=1 the reference creates its tables; prints null)
  ref_client.py DSN NAMESPACE AUTO_CREATE submit TASK KEY PAYLOAD_JSON METADATA_JSON
  ref_client.py DSN NAMESPACE AUTO_CREATE get ID
  ref_client.py DSN NAMESPACE AUTO_CREATE result ID
    (the reference client's view of one execution: {"status", "terminal", and "result" or
    "raised": the class of the exception `ExecutionClient.result` raised})
  ref_client.py DSN NAMESPACE AUTO_CREATE drain TASK LIMIT
    (what the reference worker does with storage: claim up to LIMIT, heartbeat each lease,
    complete each as succeeded with {"by": "reference", "echo": payload}; prints the
    completed executions as a JSON list)
"""
import asyncio
import json
import sys
import uuid

from onestep.execution import ExecutionClient, ExecutionCompletion, ExecutionStatus


def backend_class(dsn):
    if dsn.startswith("mysql"):
        from onestep_sql.mysql import MySQLExecutionBackend

        return MySQLExecutionBackend
    if dsn.startswith("postgresql"):
        from onestep_sql.postgres import PostgresExecutionBackend

        return PostgresExecutionBackend
    raise SystemExit(f"no reference backend for {dsn.split(':', 1)[0]}")


def dump(e):
    if e is None:
        return None
    return {
        "id": str(e.id),
        "namespace": e.namespace,
        "task_name": e.task_name,
        "status": getattr(e.status, "value", e.status),
        "payload": e.payload,
        "result": e.result,
        "metadata": dict(e.metadata),
        "attempts": e.attempts,
        "version": e.version,
        "created_at": e.created_at.isoformat(),
    }


async def main(argv):
    dsn, namespace, auto_create, cmd, *rest = argv
    backend = backend_class(dsn)(dsn=dsn, auto_create=auto_create == "1")
    async with ExecutionClient(backend, namespace=namespace) as client:
        if cmd == "create":
            e = await client.get(str(uuid.uuid4()))
            assert e is None
        elif cmd == "submit":
            task, key, payload, metadata = rest
            e = await client.submit(
                task, json.loads(payload), idempotency_key=key, metadata=json.loads(metadata)
            )
        elif cmd == "get":
            e = await client.get(rest[0])
        elif cmd == "result":
            e = await client.get(rest[0])
            out = {"status": getattr(e.status, "value", e.status), "terminal": e.terminal}
            try:
                out["result"] = await client.result(rest[0])
            except Exception as err:  # the reference's ExecutionNotReady, ExecutionFailed…
                out["raised"] = type(err).__name__
            print(json.dumps(out))
            return
        elif cmd == "drain":
            task, limit = rest
            leases = await backend.claim(namespace, [task], int(limit), 30.0, "ref-worker")
            done = []
            for lease in leases:
                x = lease.execution
                await backend.heartbeat(x.id, lease.attempt_id, lease.lease_token, 30.0)
                done.append(
                    await backend.complete(
                        x.id,
                        lease.attempt_id,
                        lease.lease_token,
                        ExecutionCompletion(
                            status=ExecutionStatus.SUCCEEDED,
                            result={"by": "reference", "echo": x.payload},
                        ),
                    )
                )
            print(json.dumps([dump(d) for d in done]))
            return
        else:
            raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(dump(e)))


asyncio.run(main(sys.argv[1:]))
