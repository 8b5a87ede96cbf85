"""A soak's samples and latency buckets turned into figures, and the verdict per criterion (errors, RSS, Redis, p99)."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# ---- figures ---------------------------------------------------------------------------------------
from bench.stacks import EngineSpec
from loadtest.soak.buckets import percentile
from loadtest.soak.deployment import KEY_KINDS, Plan, Sampler


def _median(rows: Sequence[Mapping[str, float]], key: str) -> float | None:
    values = [row[key] for row in rows if key in row and not math.isnan(row[key])]
    return round(statistics.median(values), 2) if values else None


def _ratio(end: float | None, start: float | None) -> float | None:
    return round(end / start, 3) if end is not None and start else None


def _window(rows: Sequence[Mapping[str, float]], start: float, end: float) -> list[Mapping[str, float]]:
    return [row for row in rows if start <= row["t"] < end]


def _window_or_nearest(rows: Sequence[Mapping[str, float]], start: float, end: float) -> list[Mapping[str, float]]:
    """The samples in ``[start, end)``; when a slow sample left it empty, the one sample nearest to its middle."""
    inside = _window(rows, start, end)
    if inside or not rows:
        return inside
    middle = (start + end) / 2
    return [min(rows, key=lambda row: abs(row["t"] - middle))]


def _slope_per_min(rows: Sequence[Mapping[str, float]], key: str) -> float | None:
    """Least-squares slope of ``key`` against time, per minute: a leak is a steady positive slope."""
    points = [(row["t"], row[key]) for row in rows if key in row and not math.isnan(row[key])]
    if len(points) < 3:
        return None
    mean_t, mean_v = statistics.fmean(t for t, _ in points), statistics.fmean(v for _, v in points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return round(60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var, 3) if var else None


def summarise(
    spec: EngineSpec,
    plan: Plan,
    samples: list[dict[str, float]],
    tmp: Path,
    bounds: tuple[float, float],
    raw: Path,
    ramp_s: float,
) -> dict[str, Any]:
    """Every figure of one engine from its samples and locust's reports; copies the raw files (small) into ``raw``.

    ``bounds`` is (locust launched, locust exited) in wall-clock time. t = 0 is locust's ``test_start``; the run's end
    is when locust exited (its ``-t`` timer starts a moment before ``test_start``, so a loaded machine ends it before
    t = duration): the end windows are measured back from there, not from the nominal duration.
    """
    launched, stopped = bounds
    buckets_path = tmp / "buckets.json"
    buckets: dict[str, Any] = json.loads(buckets_path.read_text()) if buckets_path.exists() else {"started": None, "rows": []}
    origin = buckets["started"] or launched  # t = 0: locust's test_start
    for row in samples:
        row["t"] = round(row["ts"] - origin, 1)
    stop_t = round(min(stopped - origin, plan.duration_s + 1), 1)
    in_run = [row for row in samples if row["t"] <= stop_t + 1]
    n_buckets = max(1, math.ceil(plan.duration_s / plan.bucket_s - 1e-9))
    window = min(60.0, max(plan.sample_s, plan.duration_s / 10))
    figures: dict[str, Any] = {"window_s": window, "n_buckets": n_buckets, "stop_s": stop_t}

    # Memory: warm-up end vs the end of the run.
    start = _window_or_nearest(in_run, 0, window)
    warm = _window_or_nearest(in_run, plan.warmup_s, plan.warmup_s + window)
    end = _window_or_nearest(in_run, stop_t - window, stop_t + 1)
    rss: dict[str, Any] = {}
    after_warmup = _window(in_run, plan.warmup_s, stop_t + 1)
    for name in ("api", "worker", "locust"):
        first, last = _median(warm, f"{name}_rss_mib"), _median(end, f"{name}_rss_mib")
        if name == "locust":  # the last sample is taken after locust exited: its RSS is the window's other samples
            alive = [row for row in in_run if not math.isnan(row.get("locust_rss_mib", math.nan))]
            last = last if last is not None else _median(alive[-1:], "locust_rss_mib")
        slope = _slope_per_min(after_warmup, f"{name}_rss_mib")
        rss[name] = {
            "start_mib": _median(start, f"{name}_rss_mib"),
            "warm_mib": first,
            "end_mib": last,
            "ratio": _ratio(last, first),
            "slope_mib_per_min": slope,
        }
    for name in ("api", "worker"):
        rss[name]["l1_warm_mib"], rss[name]["l1_end_mib"] = _median(warm, f"{name}_l1_mib"), _median(end, f"{name}_l1_mib")
        evictions = [r[f"{name}_l1_evictions"] for r in in_run if not math.isnan(r.get(f"{name}_l1_evictions", math.nan))]
        rss[name]["l1_evictions"] = evictions[-1] if evictions else None
    figures["rss"] = rss

    # Redis: the first steady window (results made at the start have expired) vs the last.
    locust_stats = _locust_rows(tmp / "locust.json")
    steady_start = max(plan.warmup_s, ramp_s + plan.ttl_s + plan.sample_s)
    first_steady = _window_or_nearest(in_run, steady_start, steady_start + window)
    redis_fig: dict[str, Any] = {
        "steady_start_s": round(steady_start, 1),
        "overlap": steady_start + window > stop_t - window,
    }
    for label, rows in (("first", first_steady), ("last", end)):
        redis_fig[label] = {
            key: _median(rows, key)
            for key in (
                "redis_used_memory_mib",
                "redis_rss_mib",
                "redis_keys",
                "redis_keys_no_ttl",
                *(f"keys_{k}" for k in KEY_KINDS),
            )
        }
    redis_fig["used_memory_slope_mib_per_min"] = _slope_per_min(_window(in_run, steady_start, stop_t + 1), "redis_used_memory_mib")
    redis_fig["keys_slope_per_min"] = _slope_per_min(_window(in_run, steady_start, stop_t + 1), "redis_keys")
    redis_fig["used_memory_ratio"] = _ratio(redis_fig["last"]["redis_used_memory_mib"], redis_fig["first"]["redis_used_memory_mib"])
    figures["redis"] = redis_fig

    # Throughput and queue during the run.
    loaded = [row for row in in_run if 0 <= row["t"] <= stop_t]
    done = [row["jobs_done"] for row in loaded if not math.isnan(row.get("jobs_done", math.nan))]
    span = (loaded[-1]["t"] - loaded[0]["t"]) if len(loaded) > 1 else 0.0
    depths = [row["queue_depth"] for row in loaded if "queue_depth" in row]
    figures["achieved"] = {
        "jobs_s": round((done[-1] - done[0]) / span, 2) if len(done) > 1 and span else None,
        "queue_depth_mean": round(statistics.fmean(depths), 2) if depths else None,
        "queue_depth_max": max(depths) if depths else None,
        "load1_median": _median(loaded, "load1"),
        "cpu_pct": {name: _median(loaded, f"{name}_cpu_pct") for name in ("api", "worker", "locust", "redis")},
    }

    # Requests, failures, latency per name: whole run from locust's JSON, per bucket from the recorder.
    figures["requests"] = locust_stats["http_requests"]
    figures["failures"] = locust_stats["http_failures"]
    figures["flow_jobs"], figures["flow_failures"] = locust_stats["flow_requests"], locust_stats["flow_failures"]
    figures["failure_messages"] = _failures(tmp / "locust_failures.csv")
    per_bucket: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    statuses: Counter[str] = Counter()
    for row in buckets["rows"]:
        bucket = min(int(row["bucket"]), n_buckets - 1)  # a request ending as locust stops belongs to the last bucket
        key = (row["type"], row["name"])
        if bucket in per_bucket[key]:  # merge: percentiles of a tiny overflow bucket are dropped, counts kept
            per_bucket[key][bucket]["count"] += row["count"]
            per_bucket[key][bucket]["failures"] += row["failures"]
        else:
            per_bucket[key][bucket] = dict(row, bucket=bucket)
        if row["type"] != "FLOW":
            statuses.update(row["statuses"])
    figures["status_codes"] = dict(sorted(statuses.items()))
    latency = []
    for (request_type, name), whole in sorted(locust_stats["rows"].items()):
        rows_of = per_bucket.get((request_type, name), {})
        head, tail = rows_of.get(0), rows_of.get(n_buckets - 1)
        latency.append(
            {
                "type": request_type,
                "name": name,
                "requests": whole["requests"],
                "failures": whole["failures"],
                "p50": whole["p50"],
                "p99": whole["p99"],
                "first": {k: head[k] for k in ("count", "p50", "p99")} if head else None,
                "last": {k: tail[k] for k in ("count", "p50", "p99")} if tail else None,
            }
        )
    figures["latency"] = latency
    figures["per_bucket"] = {
        f"{request_type} {name}": {str(b): (row["p50"], row["p99"]) for b, row in sorted(rows_of.items())}
        for (request_type, name), rows_of in per_bucket.items()
    }
    figures["timeline"] = _timeline(plan, in_run, per_bucket, n_buckets)
    figures["ramp_s"] = round(ramp_s, 1)
    _copy_raw(spec, tmp, raw, samples, buckets)
    return figures


def _locust_rows(path: Path) -> dict[str, Any]:
    """locust's final JSON (exact: written after the users stopped): per-row totals and whole-run percentiles."""
    out: dict[str, Any] = {"rows": {}, "http_requests": 0, "http_failures": 0, "flow_requests": 0, "flow_failures": 0}
    if not path.exists():
        return out
    for row in json.loads(path.read_text()):
        histogram = {int(k): v for k, v in row["response_times"].items()}
        out["rows"][(row["method"], row["name"])] = {
            "requests": row["num_requests"],
            "failures": row["num_failures"],
            "p50": percentile(histogram, 0.5),
            "p99": percentile(histogram, 0.99),
        }
        kind = "flow" if row["method"] == "FLOW" else "http"
        out[f"{kind}_requests"] += row["num_requests"]
        out[f"{kind}_failures"] += row["num_failures"]
    return out


def _failures(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    with path.open(newline="") as handle:
        return {f"{row['Method']} {row['Name']}: {row['Error']}": int(row["Occurrences"]) for row in csv.DictReader(handle)}


def _timeline(
    plan: Plan,
    samples: Sequence[Mapping[str, float]],
    per_bucket: Mapping[tuple[str, str], Mapping[int, Mapping[str, Any]]],
    n: int,
) -> list[dict[str, Any]]:
    """One row per bucket: memory at its end, the worst queue, requests, failures, and p99 of the main rows."""
    timeline = []
    for bucket in range(n):
        start, stop = bucket * plan.bucket_s, min((bucket + 1) * plan.bucket_s, plan.duration_s)
        rows = _window(samples, start, stop + 0.5)
        last = rows[-1] if rows else {}
        http = [b[bucket] for (t, _), b in per_bucket.items() if t != "FLOW" and bucket in b]
        p99 = {f"{t} {name}": b[bucket]["p99"] for (t, name), b in per_bucket.items() if bucket in b}
        timeline.append(
            {
                "bucket": bucket,
                "start_s": round(start),
                "api_rss_mib": _round(last.get("api_rss_mib")),
                "worker_rss_mib": _round(last.get("worker_rss_mib")),
                "redis_used_memory_mib": _round(last.get("redis_used_memory_mib")),
                "redis_keys": last.get("redis_keys"),
                "redis_keys_no_ttl": last.get("redis_keys_no_ttl"),
                "queue_depth_max": max((r.get("queue_depth", 0) for r in rows), default=None),
                "requests": sum(b["count"] for b in http),
                "failures": sum(b["failures"] for b in http),
                "p99": p99,
            }
        )
    return timeline


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _copy_raw(spec: EngineSpec, tmp: Path, raw: Path, samples: Sequence[Mapping[str, float]], buckets: Mapping[str, Any]) -> None:
    """The engine's raw files, small: samples (CSV), per-bucket latency, locust's JSON without its per-second series."""
    raw.mkdir(parents=True, exist_ok=True)
    with (raw / f"{spec.key}-samples.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["t", *Sampler.FIELDS], extrasaction="ignore")
        writer.writeheader()
        for row in samples:
            writer.writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
    (raw / f"{spec.key}-buckets.json").write_text(json.dumps(buckets, indent=0))
    if (tmp / "locust.json").exists():
        rows = json.loads((tmp / "locust.json").read_text())
        for row in rows:
            row.pop("num_reqs_per_sec", None)
            row.pop("num_fail_per_sec", None)
        (raw / f"{spec.key}-locust.json").write_text(json.dumps(rows, indent=0))
    for name in ("locust_stats.csv", "locust_failures.csv"):
        if (tmp / name).exists():
            shutil.copyfile(tmp / name, raw / f"{spec.key}-{name.removeprefix('locust_')}")


def verdict(result: Mapping[str, Any]) -> list[str]:
    """Unexpected errors of one engine, as sentences; empty when there were none.

    Nothing is expected to fail: the load is sized below capacity, so even 429 (queue full) or 503
    would be unexpected here (they are the service's answers to deliberate overload).
    """
    problems = []
    if "error" in result:
        problems.append(f"the run did not complete: {result['error']}")
    if result.get("failures"):
        problems.append(f"{result['failures']} locust failures")
    if result.get("flow_failures"):
        problems.append(f"{result['flow_failures']} failed jobs (FLOW rows)")
    server = result.get("server", {})
    for key in ("api_5xx", "jobs_retried", "jobs_failed", "jobs_dead_lettered"):
        if server.get(key):
            problems.append(f"{key} = {server[key]:g}")
    for name, findings in result.get("log_findings", {}).items():
        if findings["errors"] or findings["tracebacks"]:
            problems.append(f"{name} log: {findings['errors']} ERROR lines, {findings['tracebacks']} tracebacks")
    if result.get("locust_tracebacks"):
        problems.append(f"locust log: {result['locust_tracebacks']} tracebacks")
    return problems


RSS_TOLERANCE = 0.10
"""API and worker RSS at the end within ±10 % of RSS at the end of warm-up."""
REDIS_TOLERANCE = 0.10
"""Redis used_memory in the last window within ±10 % of the first steady window (results made at the start expired)."""
P99_TOLERANCE, P99_SLACK_MS = 0.25, 10
"""p99 of the last bucket at most 25 % (or 10 ms: histogram steps and scheduler noise on small values) above the first."""
P99_ROWS = (("POST", "/v1/tts/submit"), ("GET", "/v1/tts/tasks/[id]"), ("FLOW", "submit+poll+result"))
"""The rows judged for p99 stability: the native API's submit and poll, and whole jobs (submit to audio in hand)."""


def criteria(result: Mapping[str, Any]) -> list[dict[str, str]]:
    """The soak's four criteria for one engine: name, target, what was measured, verdict (PASS, FAIL or n/a).

    Only the first is judged by the exit status; the other three are measured figures on whatever machine ran
    them (on a shared one, other work moves latency), reported for a reader to weigh.
    """
    problems = verdict(result)
    out = [
        {
            "criterion": "errors",
            "target": "zero unexpected errors (locust failures, failed jobs, 5xx, retries, ERROR log lines, tracebacks)",
            "measured": "none" if not problems else "; ".join(problems),
            "verdict": "FAIL" if problems else "PASS",
        }
    ]
    rss = result.get("rss", {})
    ratios = {name: rss.get(name, {}).get("ratio") for name in ("api", "worker")}
    known = [r for r in ratios.values() if r is not None]
    out.append(
        {
            "criterion": "RSS ±10 %",
            "target": f"API and worker RSS at the end within ±{RSS_TOLERANCE:.0%} of RSS at the end of warm-up",
            "measured": ", ".join(f"{name} {fmt_pct(ratio)}" for name, ratio in ratios.items()),
            "verdict": "n/a"
            if len(known) < len(ratios)
            else ("PASS" if all(abs(r - 1) <= RSS_TOLERANCE for r in known) else "FAIL"),
        }
    )
    redis_fig = result.get("redis", {})
    ratio = redis_fig.get("used_memory_ratio")
    first = redis_fig.get("first", {}).get("redis_used_memory_mib")
    last = redis_fig.get("last", {}).get("redis_used_memory_mib")
    out.append(
        {
            "criterion": "Redis flat",
            "target": f"used_memory in the last window within ±{REDIS_TOLERANCE:.0%} of the first steady window "
            "(after warm-up and after ramp-up + TTL: the first results have expired)",
            "measured": f"{fmt_mib(first)} → {fmt_mib(last)} MiB, {fmt_pct(ratio)}; slope "
            f"{fmt(redis_fig.get('used_memory_slope_mib_per_min'), 3)} MiB/min"
            + ("; the run is too short: the windows overlap" if redis_fig.get("overlap") else ""),
            "verdict": "n/a"
            if ratio is None or redis_fig.get("overlap")
            else ("PASS" if abs(ratio - 1) <= REDIS_TOLERANCE else "FAIL"),
        }
    )
    rows = {(row["type"], row["name"]): row for row in result.get("latency", [])}
    measured, judged = [], []
    for key in P99_ROWS:
        row = rows.get(key)
        head, tail = (row or {}).get("first") or {}, (row or {}).get("last") or {}
        if "p99" not in head or "p99" not in tail:
            measured.append(f"{' '.join(key)} n/a")
            continue
        ok = tail["p99"] <= max(head["p99"] * (1 + P99_TOLERANCE), head["p99"] + P99_SLACK_MS)
        judged.append(ok)
        measured.append(f"{' '.join(key)} {fmt(head['p99'])} → {fmt(tail['p99'])} ms{'' if ok else ' (worse)'}")
    out.append(
        {
            "criterion": "p99 stable",
            "target": f"p99 of the last bucket at most +{P99_TOLERANCE:.0%} (or +{P99_SLACK_MS} ms) over the first bucket's, "
            "for submit, status poll and whole jobs",
            "measured": "; ".join(measured),
            "verdict": "n/a" if len(judged) < len(P99_ROWS) else ("PASS" if all(judged) else "FAIL"),
        }
    )
    return out


# ---- figures as text (the verdicts and the report) ----------------------------------------------


def fmt(value: Any, digits: int = 2) -> str:
    """A number for a table: ``n/a`` when missing, thousands separated, ``digits`` decimals for floats."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def fmt_count(value: Any) -> str:
    return fmt(value, 0)


def fmt_mib(value: Any) -> str:
    return fmt(value, 1)


def fmt_pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f} ({(ratio - 1) * 100:+.1f} %)"
