"""A soak's figures as ``summary.md``: the date, the command, the machine and a section per engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ---- the report ------------------------------------------------------------------------------------
from loadtest.soak.deployment import KEY_KINDS, L1_MAX_MIB
from loadtest.soak.figures import criteria, fmt, fmt_count, fmt_mib, fmt_pct, verdict


def render(report: Mapping[str, Any]) -> str:
    plan, machine = report["plan"], report["machine"]
    window_s = report["engines"][0].get("window_s", 0) if report["engines"] else 0
    lines = [
        "# Soak test",
        "",
        f"- **Date:** {report['date']}",
        f"- **Command:** `{report['command']}`",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, {machine['platform']}; "
        f"load average (1, 5, 15 min) at start {machine['load_average_start']}, at end {machine['load_average_end']}. "
        "This machine is **shared**: other engineers run tests on its 2 cores during the soak, so absolute latencies "
        "carry their load; the figures that matter are ratios within one run (start vs end).",
        f"- **Plan:** {plan['duration_s']:g} s of the locust mix per engine (every user class of `loadtest/locustfile.py`, "
        f"by weight, `--tts-flow-rows`, `--tts-seed {plan['seed']}`); warm-up {plan['warmup_s']:g} s; "
        f"`RESULT_TTL_S = CACHE_TTL_S = {plan['ttl_s']}`; samples every {plan['sample_s']:g} s; latency buckets of "
        f"{plan['bucket_s']:g} s. **Fair-use limits lifted:** `RATE_LIMIT_PER_S`, `RATE_LIMIT_BURST` and "
        "`MAX_QUEUED_PER_KEY` = 10⁶ in the deployment's environment (defaults 10/s, burst 50, 1,000 queued): every "
        "simulated client comes from one loopback address, so the per-client limit would refuse the mix with 429s. "
        "One deployment per engine: `redis-server` (ttsq.store.local_redis), "
        "`uvicorn app:app`, one worker, `DEVICE=cpu`, `CPU_THREADS=1`, L3 cache in a temporary directory, "
        f"`CACHE_L1_MAX_BYTES` = {L1_MAX_MIB} MiB (default 64): every new result enters the worker's in-process LRU, "
        "which at the default bound fills for about the whole 10 minutes and would read as a leak; this bound fills "
        "within the warm-up.",
        "- **Reading it:** RSS is compared between the end of warm-up and the end of the run (medians over "
        f"{window_s:g} s windows); Redis memory between the first steady window "
        "(once the first results have expired: after warm-up and after ramp-up + TTL) and the last. "
        "Latency per request name from locust's own histograms (ms, two significant digits above 100 ms). "
        "The exit status judges only unexpected errors; the other three criteria are measured figures, given a verdict "
        "below for the reader (on a shared machine, other work moves latency and, a little, memory).",
        "",
        "## Verdicts",
        "",
        "| criterion | target | " + " | ".join(_engine_name(result) for result in report["engines"]) + " |",
        "|---" * (2 + len(report["engines"])) + "|",
    ]
    judged = [result.get("criteria") or criteria(result) for result in report["engines"]]
    for index, first in enumerate(judged[0] if judged else []):
        cells = [f"**{c[index]['verdict']}**: {c[index]['measured']}" for c in judged]
        lines.append(f"| {first['criterion']} | {first['target']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Headline",
        "",
        "| engine | users | requests | failures | API RSS end/warm | worker RSS end/warm | Redis used_memory last/first steady | "
        "p99 whole job (FLOW submit+poll+result), first → last bucket, ms | unexpected errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in report["engines"]:
        rss, redis_fig = result.get("rss", {}), result.get("redis", {})
        problems = verdict(result)
        lines.append(
            f"| {_engine_name(result)} | {fmt(result.get('users'))} | {fmt(result.get('requests'))} | "
            f"{fmt(result.get('failures'))} | {fmt_pct(rss.get('api', {}).get('ratio'))} | "
            f"{fmt_pct(rss.get('worker', {}).get('ratio'))} | "
            f"{fmt_pct(redis_fig.get('used_memory_ratio'))} | {_first_last(result, 'FLOW', 'submit+poll+result')} | "
            f"{'none' if not problems else '; '.join(problems)} |"
        )
    for result in report["engines"]:
        lines += ["", *_engine_section(result, plan)]
    return "\n".join(lines) + "\n"


def _first_last(result: Mapping[str, Any], request_type: str, name: str) -> str:
    for row in result.get("latency", []):
        if row["type"] == request_type and row["name"] == name:
            return f"{fmt((row['first'] or {}).get('p99'))} → {fmt((row['last'] or {}).get('p99'))}"
    return "n/a"


def _engine_name(result: Mapping[str, Any]) -> str:
    return (
        f"`{result['engine']}` (STAND-IN, not ChatTTS)"
        if result["stand_in"]
        else f"`{result['engine']}` (ChatTTS code, random weights)"
    )


def _engine_section(result: Mapping[str, Any], plan: Mapping[str, Any]) -> list[str]:
    lines = [f"## {_engine_name(result)}", "", f"**Engine:** {result['label']}.", ""]
    if "error" in result:
        lines += [f"**The run did not complete:** {result['error']}", ""]
    if "users" in result:
        lines += [f"**Users:** {result['users']} (+{result['spawn_rate']}/s). {result['how_users']}.", ""]
    achieved, server = result.get("achieved", {}), result.get("server", {})
    if achieved:
        calibration = result.get("calibration")
        utilisation = (
            f" = {achieved['jobs_s'] / calibration['capacity_jobs_s']:.0%} of the measured capacity"
            if calibration and achieved.get("jobs_s") and calibration["capacity_jobs_s"]
            else ""
        )
        cpu = achieved["cpu_pct"]
        lines += [
            f"**Load achieved:** {fmt(achieved['jobs_s'])} jobs/s{utilisation}; mean rows per engine step (occupied slots) "
            f"{fmt(server.get('batch_mean'))} of {fmt(server.get('engine_slots'))}, wasted row-steps "
            f"{fmt(server.get('wasted_row_steps'))}; "
            f"queue depth mean {fmt(achieved['queue_depth_mean'])}, max {fmt_count(achieved['queue_depth_max'])}; "
            f"CPU (median of samples, % of one core) API {fmt_mib(cpu['api'])}, worker {fmt_mib(cpu['worker'])}, "
            f"locust {fmt_mib(cpu['locust'])}, Redis {fmt_mib(cpu['redis'])}; load average (1 min) median "
            f"{fmt(achieved['load1_median'])}, at start {result.get('load_average_start')}, "
            f"at end {result.get('load_average_end')}."
            + (" **locust warned that its CPU was saturated.**" if result.get("locust_cpu_warning") else ""),
            "",
        ]
    if "requests" in result:
        problems = verdict(result)
        codes = ", ".join(f"{code}: {count:,}" for code, count in result["status_codes"].items())
        lines += [
            "### Errors",
            "",
            f"- HTTP requests {result['requests']:,}, locust failures **{result['failures']:,}**; jobs seen whole (FLOW rows) "
            f"{result['flow_jobs']:,}, failed {result['flow_failures']:,}. Status codes: {codes or 'none'}.",
            "- Expected non-2xx: none. The load is sized below capacity, so a 429 (queue full, or the per-key caps, lifted "
            "here) or 503 (Redis unreachable) would be unexpected; so would any other failure.",
            f"- Server side: API 5xx {fmt_count(server.get('api_5xx'))}; "
            f"worker jobs done {fmt_count(server.get('jobs_done'))}, retried "
            f"{fmt_count(server.get('jobs_retried'))}, failed {fmt_count(server.get('jobs_failed'))}, dead-lettered "
            f"{fmt_count(server.get('jobs_dead_lettered'))}; logs (LOG_LEVEL=WARNING): "
            + "; ".join(
                f"{name} {f['errors']} ERROR, {f['warnings']} WARNING, {f['tracebacks']} tracebacks"
                for name, f in result.get("log_findings", {}).items()
            )
            + ".",
            f"- **Unexpected errors: {'none' if not problems else '; '.join(problems)}.**",
        ]
        for message, count in result["failure_messages"].items():
            lines.append(f"  - {count:,} × {message}")
        for name, findings in result.get("log_findings", {}).items():
            for example in findings["examples"]:
                lines.append(f"  - {name} log: `{example}`")
        lines.append("")
    if "rss" in result:
        rss, redis_fig = result["rss"], result["redis"]
        lines += [
            "### Memory",
            "",
            f"| process | RSS at start MiB | RSS at warm-up end ({plan['warmup_s']:g} s) MiB | RSS at the end MiB | end / warm "
            f"| slope after warm-up MiB/min | L1 cache (bound {L1_MAX_MIB} MiB) warm → end MiB, evictions |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in ("api", "worker", "locust"):
            figure = rss[name]
            l1 = (
                f"{fmt_mib(figure.get('l1_warm_mib'))} → {fmt_mib(figure.get('l1_end_mib'))}, "
                f"{fmt_count(figure.get('l1_evictions'))}"
                if name != "locust"
                else "(load generator)"
            )
            lines.append(
                f"| {name} | {fmt_mib(figure.get('start_mib'))} | {fmt_mib(figure['warm_mib'])} | {fmt_mib(figure['end_mib'])} | "
                f"{fmt_pct(figure['ratio'])} | "
                f"{fmt(figure['slope_mib_per_min'])} | {l1} |"
            )
        first, last = redis_fig["first"], redis_fig["last"]
        lines += [
            "",
            f"Redis, first steady window (from {redis_fig['steady_start_s']:g} s) vs the last"
            + (" — **the run is too short for these windows not to overlap**" if redis_fig["overlap"] else "")
            + ":",
            "",
            "| | used_memory MiB | RSS MiB | keys | keys without TTL | job | result | stream | cache | inflight |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, figure in (("first steady", first), ("last", last)):
            lines.append(
                f"| {label} | {fmt_mib(figure['redis_used_memory_mib'])} | {fmt_mib(figure['redis_rss_mib'])} | "
                f"{fmt_count(figure['redis_keys'])} | "
                f"{fmt_count(figure['redis_keys_no_ttl'])} | "
                + " | ".join(fmt_count(figure[f"keys_{k}"]) for k in KEY_KINDS)
                + " |"
            )
        lines += [
            "",
            f"used_memory last / first steady: {fmt_pct(redis_fig['used_memory_ratio'])}; slope over the steady part "
            f"{fmt(redis_fig['used_memory_slope_mib_per_min'], 3)} MiB/min, keys {fmt(redis_fig['keys_slope_per_min'])}/min. "
            "Keys that never expire, at the end: "
            + (", ".join(f"`{k}`" for k in result.get("keys_without_ttl_at_end", [])) or "none")
            + ".",
            "",
        ]
    if result.get("latency"):
        bucket = f"{plan['bucket_s']:g} s"
        lines += [
            "### Latency per request name (ms)",
            "",
            f"First and last bucket of {bucket} (the first includes the ramp-up); whole run from locust's final JSON. "
            "FLOW rows are whole jobs, submit to audio in hand.",
            "",
            "| request | requests | failures | first p50 | first p99 | last p50 | last p99 | run p50 | run p99 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in result["latency"]:
            first, last = row["first"] or {}, row["last"] or {}
            lines.append(
                f"| {row['type']} {row['name']} | {row['requests']:,} | {row['failures']:,} | {fmt(first.get('p50'))} | "
                f"{fmt(first.get('p99'))} | {fmt(last.get('p50'))} | {fmt(last.get('p99'))} | "
                f"{fmt(row['p50'])} | {fmt(row['p99'])} |"
            )
        lines += ["", f"### p50 / p99 per request name per {bucket} bucket (ms)", ""]
        n = result["n_buckets"]
        lines += [
            "| request | " + " | ".join(f"{b * plan['bucket_s']:g} s" for b in range(n)) + " |",
            "|---" * (n + 1) + "|",
        ]
        for row in result["latency"]:
            cells = result["per_bucket"].get(f"{row['type']} {row['name']}", {})
            lines.append(
                f"| {row['type']} {row['name']} | "
                + " | ".join(f"{fmt(cells[str(b)][0])} / {fmt(cells[str(b)][1])}" if str(b) in cells else "" for b in range(n))
                + " |"
            )
        lines += ["", f"### Timeline (per {bucket}; memory as sampled at the bucket's end)", ""]
        main_rows = [
            key for key in ("POST /v1/tts/submit", "GET /v1/tts/tasks/[id]", "FLOW submit+poll+result") if _has(result, key)
        ]
        lines += [
            "| from s | API RSS | worker RSS | Redis MiB | keys (no TTL) | queue max | requests | failures | "
            + " | ".join(f"p99 {key}" for key in main_rows)
            + " |",
            "|---" * (8 + len(main_rows)) + "|",
        ]
        for row in result["timeline"]:
            lines.append(
                f"| {row['start_s']} | {fmt_mib(row['api_rss_mib'])} | {fmt_mib(row['worker_rss_mib'])} | "
                f"{fmt_mib(row['redis_used_memory_mib'])} | "
                f"{fmt_count(row['redis_keys'])} ({fmt_count(row['redis_keys_no_ttl'])}) | "
                f"{fmt_count(row['queue_depth_max'])} | {row['requests']:,} | "
                f"{row['failures']:,} | " + " | ".join(fmt(row["p99"].get(key)) for key in main_rows) + " |"
            )
        lines.append("")
    return lines


def _has(result: Mapping[str, Any], key: str) -> bool:
    return any(f"{row['type']} {row['name']}" == key for row in result["latency"])
