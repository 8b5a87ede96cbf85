#!/usr/bin/env bash
# Run the ttsq load test headless for a bounded time; CSV, HTML and JSON reports go to var/loadtest/.
#
#   loadtest/run.sh                                   # 20 users, 5/s, 60 s, every class, http://127.0.0.1:8000
#   CLASSES=SubmitPollUser USERS=4 DURATION=20s loadtest/run.sh
#   CLASSES="CacheHeavyUser OpenAIUser" loadtest/run.sh --tts-flow-rows   # extra arguments go to locust
#
# Environment: USERS (20), SPAWN_RATE (5), DURATION (60s), HOST (http://127.0.0.1:8000), CLASSES (all,
# by weight), RUN_NAME (ttsq: the reports' file names), OUT (var/loadtest), LOCUST (.venv/bin/locust).
# Exits with locust's status: 1 when any request failed. Only load-test a service you own.
set -euo pipefail
cd "$(dirname "$0")/.."

USERS=${USERS:-20}
SPAWN_RATE=${SPAWN_RATE:-5}
DURATION=${DURATION:-60s}
HOST=${HOST:-http://127.0.0.1:8000}
CLASSES=${CLASSES:-}
RUN_NAME=${RUN_NAME:-ttsq}
OUT=${OUT:-var/loadtest}
LOCUST=${LOCUST:-.venv/bin/locust}
PYTHON=${PYTHON:-.venv/bin/python}

if [[ ! -x $LOCUST ]]; then
    echo "loadtest: $LOCUST not found; install it: .venv/bin/pip install -e '.[loadtest]'" >&2
    exit 2
fi
if [[ ! $HOST =~ ^https?:// ]]; then  # zsh, for one, sets HOST to the machine's name
    echo "loadtest: HOST must be a URL such as http://127.0.0.1:8000 (got '$HOST')" >&2
    exit 2
fi
read -ra classes <<<"$CLASSES"

# Fail fast, with the fix, when nothing answers (rather than 60 s of connection errors).
if ! "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=5)' "$HOST" 2>/dev/null; then
    echo "loadtest: $HOST/readyz does not answer 200; start the service first (make up MODEL=tiny) or set HOST" >&2
    exit 2
fi

mkdir -p "$OUT"
prefix="$OUT/$RUN_NAME"
echo "loadtest: $USERS users (+$SPAWN_RATE/s) for $DURATION against $HOST; classes: ${CLASSES:-all (by weight)}"
status=0
"$LOCUST" -f loadtest/locustfile.py --headless \
    -u "$USERS" -r "$SPAWN_RATE" -t "$DURATION" --host "$HOST" \
    --csv "$prefix" --html "$prefix.html" --json-file "$prefix" --only-summary \
    "$@" "${classes[@]}" || status=$?

# The summary, from the JSON (written after the run stopped: exact, unlike the CSV's last 1 s snapshot).
if [[ -f $prefix.json ]]; then
    "$PYTHON" - "$prefix.json" <<'EOF'
import json, sys

def percentile(times: dict[str, int], total: int, fraction: float) -> int:
    """locust's own rule (stats.calculate_response_time_percentile) on its response-time histogram."""
    rank, seen = int(total * fraction), 0
    for ms in sorted((int(k) for k in times), reverse=True):
        seen += times[str(ms)]
        if total - seen <= rank:
            return ms
    return 0

def line(method: str, name: str, n: int, fails: int, times: dict[str, int]) -> str:
    p50, p95, p99 = (percentile(times, n, f) for f in (0.5, 0.95, 0.99))
    return f"{method:<6} {name:<40} {n:>7} {fails:>6} {p50:>7} {p95:>7} {p99:>7}"

rows = json.load(open(sys.argv[1]))
print(f"\n{'type':<6} {'name':<40} {'reqs':>7} {'fails':>6} {'p50':>7} {'p95':>7} {'p99':>7}  (ms)")
merged: dict[str, int] = {}
for row in sorted(rows, key=lambda r: (r["method"], r["name"])):
    print(line(row["method"], row["name"], row["num_requests"], row["num_failures"], row["response_times"]))
    for ms, count in row["response_times"].items():
        merged[ms] = merged.get(ms, 0) + count
total, fails = sum(r["num_requests"] for r in rows), sum(r["num_failures"] for r in rows)
print(line("", "Aggregated", total, fails, merged))
EOF
fi
echo "loadtest: reports in $prefix.html, ${prefix}_stats.csv (read its Aggregated row), ${prefix}_failures.csv, $prefix.json"
exit "$status"
