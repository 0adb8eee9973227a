#!/usr/bin/env python3
"""Per-statement totals from a MariaDB slow query log written with long_query_time=0 and
log_slow_verbosity=query_plan,innodb (docs/benchmarks.md#the-completions-range-analysis).

MariaDB's performance_schema gives prepared statements no digest (every COM_STMT_EXECUTE is
`statement/com/Execute` with no text), so this groups the slow log's entries by statement shape
instead: literals become `?`, `CASE id WHEN … THEN …` and `IN (…)` lists fold to one element.

    python3 scripts/lib/slowlog_summary.py SLOW_LOG EXECUTIONS [TOP]

prints, per shape and per execution: calls, server time (ms), rows examined and pages accessed,
then rows examined and pages accessed per call.
"""
import collections
import re
import sys


def shape(sql: str) -> str:
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "?", sql)
    s = re.sub(r"TIMESTAMP\?", "?", s)
    s = re.sub(r"\b\d+(\.\d+)?\b", "N", s)
    s = re.sub(r"(WHEN \? THEN \? ?)+", "WHEN..THEN.. ", s)
    s = re.sub(r"\((\?, ?)+\?\)", "(?..)", s)
    s = re.sub(r"(\(\?\.\.\),? ?)+", "(?..) ", s)
    return re.sub(r"\s+", " ", s)


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, executions = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    text = open(path, errors="replace").read()
    totals = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    for entry in re.split(r"\n(?=# User@Host)", text):
        m = re.search(r"Query_time: ([\d.]+)\s+Lock_time: [\d.]+\s+Rows_sent: \d+\s+Rows_examined: (\d+)", entry)
        if not m:
            continue
        pages = re.search(r"Pages_accessed: (\d+)", entry)
        lines = [
            line for line in entry.split("\n")
            if line and not line.startswith(("#", "SET timestamp", "use "))
        ]
        t = totals[shape(" ".join(lines))]
        t[0] += 1
        t[1] += float(m.group(1))
        t[2] += int(m.group(2))
        t[3] += int(pages.group(1)) if pages else 0
    all_s = sum(t[1] for t in totals.values())
    print(f"{sum(t[0] for t in totals.values())} statements, {all_s:.2f} s of server time; per execution ({executions}):")
    print(f"{'calls':>8} {'ms':>8} {'rows ex.':>9} {'pages':>8} {'rows/call':>9} {'pages/call':>10}  statement")
    for sql, t in sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]:
        n = executions
        print(f"{t[0] / n:8.3f} {t[1] * 1000 / n:8.3f} {t[2] / n:9.2f} {t[3] / n:8.1f} {t[2] / t[0]:9.1f} {t[3] / t[0]:10.1f}  {sql[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
