"""Turning :mod:`bench.service.throughput`'s raw numbers into the markdown report, the JSON and one plot.

Kept apart from the runner so that the report can be re-rendered from a saved JSON
(``python -m bench.service.throughput_report bench/results/throughput.json``) without re-running anything.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fixed_cost_engine import FIXED_COST_LABEL

FLAT_MIB_PER_100_JOBS = 1.0
"""What "flat" means for worker RSS here: less than 1 MiB of growth per 100 jobs after the first step."""


@dataclass(frozen=True)
class Ratio:
    """One comparison: what was measured against what, and the aim (None: reported as measured)."""

    label: str
    value: float
    aim: float | None
    detail: str
    invalid: str | None = None
    """Why the figure does not count (e.g. refused requests were counted as served)."""

    @property
    def verdict(self) -> str:
        if self.invalid:
            return f"**invalid**: {self.invalid}"
        if self.aim is None:
            return "reported as measured"
        return "**met**" if self.value >= self.aim else "**not met**"


def ratios(results: dict[str, Any]) -> list[Ratio]:
    """Every ratio the run produced, in report order."""
    out: list[Ratio] = []
    if submit := results.get("submit"):
        refused = sum(variant["non_2xx"] for variant in submit["variants"].values())
        invalid = f"{refused} answers were not 2xx" if refused else None
        out.append(Ratio("submit req/s: ttsq / bare LPUSH", submit["ratio_rps"], submit["aim"], "wrk -c64", invalid))
    if queue := results.get("queue"):
        for batch in (8, 1):
            out.append(Ratio(f"queue: ttsq MAX_BATCH={batch} / arq tuned (best arq)", queue[f"ratio_b{batch}"], queue["aim"], ""))
            out.append(Ratio(f"queue: ttsq MAX_BATCH={batch} / arq defaults", queue[f"ratio_b{batch}_default"], queue["aim"], ""))
    names = {"fixed": "e2e fixed-cost GPU model", "full": "e2e full-size checkpoint", "tiny": "e2e tiny checkpoint"}
    for key, e2e in results.get("e2e", {}).items():
        out.append(Ratio(f"{names[key]}: ttsq / baseline", e2e["ratio"], e2e["aim"], "16 clients, jobs/s"))
    if scaling := results.get("scaling"):
        out.append(Ratio("scaling: batch 8 / batch 1 (1 worker)", scaling["ratio_batch"], scaling["aim_batch"], "fixed-cost"))
        out.append(Ratio("scaling: 2 workers / 1 (MAX_BATCH=8)", scaling["ratio_workers_b8"], scaling["aim_workers"], "fixed-cost"))
        out.append(Ratio("scaling: 2 workers / 1 (MAX_BATCH=1)", scaling["ratio_workers_b1"], scaling["aim_workers"], "fixed-cost"))
        if "ratio_workers_b8_wait100" in scaling:
            label = "scaling: 2 workers / 1 (MAX_BATCH=8, BATCH_WAIT_MS=100; not the default)"
            out.append(Ratio(label, scaling["ratio_workers_b8_wait100"], None, "fixed-cost"))
    return out


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def render_markdown(results: dict[str, Any]) -> str:
    machine, versions = results["machine"], results.get("versions", {})
    lines = [
        "# ttsq throughput",
        "",
        f"Command: `{results['command']}` ({results['profile']} profile, {results.get('elapsed_s', 0):.0f} s). "
        f"Date: {results['date']}.",
        "",
        f"Machine: {machine['platform']}, {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"no GPU. Client, servers, Redis and workers all share these cores. Load average at start "
        f"{machine['load_average_at_start']}, at end {machine.get('load_average_at_end', '?')} "
        "(other work on the machine shows up here; it is why only same-run ratios are reported).",
        "",
        "Versions: " + ", ".join(f"{name} {version}" for name, version in versions.items()) + ".",
        "",
        "Every throughput run: result cache off, single-flight off, a fixed audio length "
        "(MIN_NEW_TOKEN = MAX_NEW_TOKEN), a queue deep enough never to refuse. A ratio above 1 means ttsq is faster.",
        "",
        "## Ratios against their aims",
        "",
        "| comparison | measured | aim | verdict |",
        "|---|---|---|---|",
    ]
    for ratio in ratios(results):
        aim = f"≥ {ratio.aim:g}×" if ratio.aim is not None else "—"
        lines.append(f"| {ratio.label} | {ratio.value:.2f}× | {aim} | {ratio.verdict} |")
    if memory := results.get("memory"):
        flat = abs(memory["slope_after_first_step_mib_per_100_jobs"]) < FLAT_MIB_PER_100_JOBS
        lines.append(
            f"| worker RSS slope after the first {memory['step']} jobs | "
            f"{memory['slope_after_first_step_mib_per_100_jobs']:+.2f} MiB / 100 jobs | flat "
            f"(< {FLAT_MIB_PER_100_JOBS:g} MiB / 100 jobs) | {'**met**' if flat else '**not met**'} |"
        )
    lines += _submit_section(results) + _queue_section(results) + _e2e_section(results)
    lines += _scaling_section(results) + _memory_section(results)
    return "\n".join(lines) + "\n"


def _submit_section(results: dict[str, Any]) -> list[str]:
    submit = results.get("submit")
    if not submit:
        return []
    lines = [
        "",
        "## 1. Submit endpoint",
        "",
        f"{submit['wrk']}, `-t{submit['threads']} -c{submit['connections']}`, {submit['rounds']} interleaved "
        f"round(s) of {submit['round_s']} s per variant after a warm-up; body `{json.dumps(submit['body'], ensure_ascii=False)}`. "
        "No worker runs, so every ttsq submit records and queues a new job. One uvicorn worker each, same flags "
        "(`--loop uvloop --http httptools --no-access-log`). p50/p99 from wrk's `--latency` (mean of rounds).",
        "",
        "| endpoint | requests | req/s | p50 ms | p99 ms | non-2xx | socket errors | req/s vs LPUSH |",
        "|---|---|---|---|---|---|---|---|",
    ]
    floor = submit["variants"]["bare FastAPI + one LPUSH"]["requests_per_s"]
    for name, v in submit["variants"].items():
        lines.append(
            f"| {name} | {v['requests']:,} | {_f(v['requests_per_s'])} | {_f(v['p50_ms'], 2)} | {_f(v['p99_ms'], 2)} | "
            f"{v['non_2xx']} | {v['socket_errors']} | {v['requests_per_s'] / floor:.2f}× |"
        )
    lines.append("")
    lines.append(f"p99 ratio (ttsq / LPUSH): {submit['ratio_p99']:.2f}×.")
    return lines


def _queue_section(results: dict[str, Any]) -> list[str]:
    queue = results.get("queue")
    if not queue:
        return []
    lines = [
        "",
        "## 2. Queue overhead",
        "",
        f"{queue['jobs_per_round']:,} no-op jobs per round, {queue['rounds']} interleaved round(s), one Redis. "
        "Jobs are enqueued first; jobs/s is counted from the first claim to the last completion (ttsq: the job "
        "records' `started_at`/`finished_at`; arq: its stored results' start/finish). ttsq runs its real worker "
        "process (`worker.main` via `bench.fixed_worker`) with the no-op engine (benchmark stand-in), which returns "
        "10 ms of silence at once; each job still goes claim → lease → WAV encode → stream → complete. arq "
        f"{queue['arq_version']} runs a burst-mode worker in its own venv (redis-py {queue['arq_redis_py']}: arq pins "
        f"redis<6; ttsq uses redis-py {queue['ttsq_redis_py']}). Neither logs per job.",
        "",
        "| queue | jobs | seconds | jobs/s | vs best arq | vs arq defaults |",
        "|---|---|---|---|---|---|",
    ]
    best, default = queue["best_arq_jobs_per_s"], queue["default_arq_jobs_per_s"]
    for name, v in queue["variants"].items():
        lines.append(
            f"| {name} | {v['jobs']:,} | {_f(v['seconds'], 2)} | {_f(v['jobs_per_s'])} | "
            f"{v['jobs_per_s'] / best:.2f}× | {v['jobs_per_s'] / default:.2f}× |"
        )
    return lines


def _cpu_lines(variants: dict[str, Any]) -> list[str]:
    """Where the CPU went (cores used on average while each variant ran), to show what bounds it."""
    lines = []
    for name, v in variants.items():
        if v.get("cpu_cores"):
            used = ", ".join(f"{role} {cores:.2f}" for role, cores in v["cpu_cores"].items())
            lines.append(f"- CPU cores used, {name}: {used} (of 2).")
    return ["", *lines] if lines else []


def _loop_rows(variants: dict[str, Any], engine: str, reference: float) -> list[str]:
    rows = []
    for name, v in variants.items():
        ratio = f"{v['jobs_per_s'] / reference:.2f}×" if reference else "—"
        batch = f"{v['mean_batch']:.2f}" if v.get("mean_batch") else "—"
        rows.append(
            f"| {name} | {engine} | {v['completed']} | {_f(v['wall_s'])} | {v['jobs_per_s']:.2f} | "
            f"{_f(v['p50_ms'], 0)} | {_f(v['p99_ms'], 0)} | {v['error_count']} | {batch} | {ratio} |"
        )
    return rows


_LOOP_HEADER = [
    "| variant | engine | jobs | busy s | jobs/s | p50 ms | p99 ms | errors | mean batch | ratio |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def _e2e_section(results: dict[str, Any]) -> list[str]:
    e2e = results.get("e2e")
    if not e2e:
        return []
    lines = [
        "",
        "## 3. End to end",
        "",
        "16 concurrent closed-loop clients (asyncio + httpx). ttsq clients submit, poll the task every 100 ms, then "
        "download; baseline clients POST and wait for the audio. The baseline is `bench/service/baseline_app.py`: an "
        "`async def` handler that runs the same engine synchronously, as upstream's API example does. Each client "
        "runs jobs until the round's time is up and then finishes the job it holds; jobs/s = completed jobs / "
        "(last completion − start). Latency: first request to last byte. Rounds alternate baseline and ttsq. "
        "Ratio: jobs/s over the baseline's. Mean batch: jobs per engine call in the ttsq worker (its /healthz "
        "counters). Raw engine gain: 8 single calls vs one batch of 8 of the same engine in one process, no "
        "service (measured in this run; analytic for the fixed-cost model) — the ceiling for the ratio.",
    ]
    for e in e2e.values():
        env = ", ".join(f"{k}={v}" for k, v in e["env"].items())
        lines += ["", f"**{e['engine']}** — {e['rounds']} round(s) of {e['round_s']:.0f} s per variant; {env}", ""]
        lines += _LOOP_HEADER
        baseline = next(v for name, v in e["variants"].items() if name.startswith("baseline"))
        lines += _loop_rows(e["variants"], e["engine"], baseline["jobs_per_s"])
        lines += _cpu_lines(e["variants"])
        raw = e.get("raw_engine")
        if raw:
            how = "analytic" if raw.get("analytic") else "measured"
            lines += [
                "",
                f"Raw engine gain ({how}): 8 single calls {raw['singles_s']:.2f} s, one batch of 8 {raw['batch_s']:.2f} s "
                f"→ {raw['gain']:.2f}×; the service delivered {e['ratio']:.2f}× = {e['share_of_raw_gain']:.0%} of it.",
            ]
    return lines


def _scaling_section(results: dict[str, Any]) -> list[str]:
    scaling = results.get("scaling")
    if not scaling:
        return []
    lines = [
        "",
        "## 4. Scaling",
        "",
        f"{scaling['engine']}; one API, {scaling['clients']} clients (meant to keep two batching workers busy; "
        "the mean batch column shows whether they were), "
        f"{scaling['rounds']} round(s) of {scaling['round_s']:.0f} s per variant. Each worker is its own process "
        "(`python -m bench.fixed_worker`, own WORKER_ID and WORKER_HEALTH_PORT). Ratio: over MAX_BATCH=1 with 1 worker.",
        "",
        *_LOOP_HEADER,
    ]
    reference = scaling["variants"].get("MAX_BATCH=1, 1 worker", {}).get("jobs_per_s", 0.0)
    lines += _loop_rows(scaling["variants"], FIXED_COST_LABEL, reference)
    lines += _cpu_lines(scaling["variants"])
    per_round = scaling.get("per_round_jobs_per_s", {})
    lines += [
        "",
        f"batch 8 / batch 1 (1 worker): {scaling['ratio_batch']:.2f}×; 2 workers / 1: "
        f"{scaling['ratio_workers_b8']:.2f}× at MAX_BATCH=8, {scaling['ratio_workers_b1']:.2f}× at MAX_BATCH=1. "
        "Jobs/s per round: "
        + "; ".join(f"{name}: {', '.join(f'{r:.2f}' for r in rates)}" for name, rates in per_round.items())
        + ".",
        "The most a batch of 8 can gain with this cost model is 5.57× (8 × 320 ms vs 460 ms); two workers, 2×. "
        "The rows with BATCH_WAIT_MS=100 (default 20) are not used for the aims: they show how much of the two-worker "
        "loss comes from batches started before polled clients (who resubmit spread over their 100 ms poll interval) "
        "have refilled the queue — compare their mean batch with the default rows'.",
    ]
    return lines


def _memory_section(results: dict[str, Any]) -> list[str]:
    memory = results.get("memory")
    if not memory:
        return []
    lines = [
        "",
        "## 5. Worker memory",
        "",
        f"A real worker process (`python worker.py`, {memory['engine']}); {memory['jobs']} jobs enqueued "
        f"{memory['step']} at a time, RSS (psutil) after each {memory['step']} completions ({memory['seconds']:.0f} s). "
        "Jobs alternate a named voice (batched) and a fresh random voice (a new speaker each, batch of one); "
        "a third of the texts are English with numbers (normalizer path).",
        "",
        "| jobs done | RSS MiB |",
        "|---|---|",
    ]
    lines += [f"| {s['jobs']} | {s['rss_mib']:.1f} |" for s in memory["samples"]]
    lines += [
        "",
        f"First {memory['first_mib']:.1f} MiB, last {memory['last_mib']:.1f} MiB, max {memory['max_mib']:.1f} MiB; "
        f"slope {memory['slope_mib_per_100_jobs']:+.2f} MiB / 100 jobs over all samples, "
        f"{memory['slope_after_first_step_mib_per_100_jobs']:+.2f} MiB / 100 jobs after the first {memory['step']} jobs. "
        f"Growth per {memory['step']} jobs after the first step: median {memory.get('median_step_growth_mib', 0):+.2f} MiB, "
        f"largest {memory.get('largest_step_growth_mib', 0):+.2f} MiB (a one-off step, e.g. an allocator arena, moves "
        "the slope; steady growth moves the median).",
    ]
    return lines


def render_plot(results: dict[str, Any], path: Path) -> None:
    """One PNG: each ratio as a bar beside its aim (no aim bar where it is reported as measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    items = ratios(results)
    if not items:
        return
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(items) + 1.8))
    positions = list(range(len(items)))[::-1]
    height = 0.38
    for y, item in zip(positions, items, strict=True):
        color = "#9e9e9e" if item.aim is None else ("#2e7d32" if item.value >= item.aim else "#c62828")
        ax.barh(y + height / 2, item.value, height, color=color)
        ax.text(item.value, y + height / 2, f" {item.value:.2f}×", va="center", fontsize=8)
        if item.aim is not None:
            ax.barh(y - height / 2, item.aim, height, color="#bdbdbd", hatch="//", edgecolor="#757575")
            ax.text(item.aim, y - height / 2, f" aim {item.aim:g}×", va="center", fontsize=8, color="#616161")
    ax.set_yticks(positions, [item.label for item in items], fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    values = [item.value for item in items] + [item.aim for item in items if item.aim is not None]
    low, high = min(0.8, min(values) / 1.5), max(values) * 1.6
    ax.set_xlim(low, high)
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 50, 100) if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("ratio (log scale; > 1 means ttsq is faster)")
    ax.set_title(f"ttsq throughput ratios vs aims — {results['date']}, {results['profile']} run, 2-core CPU machine", fontsize=10)
    fig.text(
        0.01,
        0.01,
        "green: aim met · red: not met · grey: reported as measured · hatched: aim. "
        "'fixed-cost' rows use a model of GPU time (not ChatTTS).",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(results: dict[str, Any], prefix: Path) -> str:
    """Write ``PREFIX.json``, ``PREFIX.md`` and ``PREFIX.png``; return the markdown."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    report = render_markdown(results)
    prefix.with_suffix(".md").write_text(report, encoding="utf-8")
    render_plot(results, prefix.with_suffix(".png"))
    return report


if __name__ == "__main__":
    source = Path(sys.argv[1])
    print(write_outputs(json.loads(source.read_text(encoding="utf-8")), source.with_suffix("")))
