#!/usr/bin/env python3
"""Summarises auto_explain plans from a PostgreSQL server log on stdin (scripts/bench-dbcost.sh
--explain): per distinct statement its calls, the mean rows its scans read (actual rows times
loops of every scan node plus the rows their filters removed) and the mean shared buffers of
the whole statement (hit + read), then the plan of its last call. Markdown on stdout."""

import re
import sys
from collections import OrderedDict

ENTRY = re.compile(r"^\S+ \S+ \S+ \[\d+\] LOG:\s+duration: [\d.]+ ms\s+plan:\s*$")
NEW_LINE = re.compile(r"^\d{4}-\d{2}-\d{2} ")
ACTUAL = re.compile(r"actual rows=(\d+) loops=(\d+)")
REMOVED = re.compile(r"Rows Removed by (?:Filter|Index Recheck|Join Filter): (\d+)")
BUFFERS = re.compile(r"Buffers: shared((?: \w+=\d+)+)")


def entries(lines):
    current = None
    for line in lines:
        line = line.rstrip("\n")
        if ENTRY.match(line):
            if current:
                yield current
            current = []
        elif NEW_LINE.match(line):
            if current:
                yield current
            current = None
        elif current is not None:
            current.append(line[1:] if line.startswith("\t") else line)
    if current:
        yield current


def normalise(text):
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r'"onestep_([a-z_]+)"', r"\1", text)
    text = re.sub(r"\$\d+", "$", text)
    return text.strip()


def measure(plan):
    rows = 0
    buffers = None
    last_scan_loops = None
    for line in plan:
        m = ACTUAL.search(line)
        if m and "Scan" in line:
            rows += int(m.group(1)) * int(m.group(2))
            last_scan_loops = int(m.group(2))
        elif m:
            last_scan_loops = int(m.group(2))
        r = REMOVED.search(line)
        if r:
            rows += int(r.group(1)) * (last_scan_loops or 1)
        b = BUFFERS.search(line)
        if b and buffers is None:
            parts = dict(p.split("=") for p in b.group(1).split())
            buffers = int(parts.get("hit", 0)) + int(parts.get("read", 0))
    return rows, buffers or 0


def main():
    stats = OrderedDict()
    for entry in entries(sys.stdin):
        if not entry or not entry[0].startswith("Query Text:"):
            continue
        query = normalise(entry[0][len("Query Text:"):])
        plan = entry[1:]
        if query.upper().startswith(("SET ", "SHOW ", "BEGIN", "COMMIT", "ROLLBACK")):
            continue
        rows, buffers = measure(plan)
        s = stats.setdefault(query, {"calls": 0, "rows": 0, "buffers": 0, "plan": plan})
        s["calls"] += 1
        s["rows"] += rows
        s["buffers"] += buffers
        s["plan"] = plan
    if not stats:
        print("(no plans were logged)")
        return
    ordered = sorted(stats.items(), key=lambda kv: -kv[1]["buffers"])
    print("| statement | calls | rows read per call | shared buffers per call |")
    print("|---|---|---|---|")
    for i, (query, s) in enumerate(ordered, 1):
        short = query[:100].replace("|", "\\|")
        print(
            f"| P{i} `{short}` | {s['calls']} | {s['rows'] / s['calls']:.1f} "
            f"| {s['buffers'] / s['calls']:.1f} |"
        )
    for i, (query, s) in enumerate(ordered, 1):
        print()
        print(f"P{i}, last call: `{query[:160]}`")
        print()
        print("```")
        for line in s["plan"][:40]:
            print(line)
        if len(s["plan"]) > 40:
            print(f"… {len(s['plan']) - 40} more lines")
        print("```")


if __name__ == "__main__":
    main()
