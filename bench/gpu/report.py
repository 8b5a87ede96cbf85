"""The GPU benchmark's report: the done-when criteria and the markdown, from ``results.json``.

    python -m bench.gpu.report var/bench-gpu/results.json     # re-render results.md from saved numbers

:mod:`bench.gpu` calls :func:`write` after every phase. Every table is headed by the command and the
date that produced it, and a run that was not on a GPU says so in its title and in every verdict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SAME_BATCH_SHARE = 0.9
"""Done when: the service with ``MAX_BATCH=auto`` reaches this share of the engine's jobs/s at the same batch size."""
H200_MAX_BATCH_8_JOBS_PER_S = 1.61
"""The service at ``MAX_BATCH=8``, 64 clients, 256-token jobs, on an H200 (``../shared/gpu/`` kit, 2026-12-01)."""
H200_GAIN = 10.0
"""Done when: ``MAX_BATCH=auto`` at 64 clients does this many times the H200 ``MAX_BATCH=8`` figure."""
STALL_FLOOR_S = 10.0
"""A window stalls when no job completes for this long (or three engine calls of its batch size, if longer)."""
DRY_RUN_NOTE = "dry run on CPU: not the GPU criterion"
DECODER_STEP_MS = {1: 4.0, 64: 3.0}
"""The decoder issue's GPU acceptance: ms per decode step at these batch sizes, on the full-size checkpoint."""
DECODER_GPU_BUSY = 70.0
"""… and the GPU busy at least this share (%) of the time while the decoder runs them."""
REALTIME_STREAMS = 256
REALTIME_FIRST_AUDIO_S = 0.3
"""The realtime issue's GPU done-when: this many concurrent real-time streams on one H200 (full-size), first audio p99
within this many seconds, RTF p99 ≤ 1, success 1.00 and no underrun."""
REFERENCES = {"engine": "ChatTTS's engine", "decoder": "ttsq's decoder"}
"""The engine phases a service window is compared with, by the backend its workers ran."""


def engine_summary(results: dict[str, Any], phase: str = "engine") -> dict[int, dict[str, Any]]:
    """The best row per batch size of an engine phase (``engine``: ChatTTS's loop; ``decoder``: ttsq's)."""
    data = (results.get("phases", {}).get(phase) or {}).get("data") or {}
    return {int(row["batch"]): row for row in data.get("summary") or []}


def engine_at(results: dict[str, Any], batch: int, phase: str = "engine") -> tuple[float | None, float | None, str]:
    """(jobs/s, wall s) of the engine alone at ``batch``: measured, or interpolated between the neighbouring
    sizes (an engine call's time is close to linear in its batch size); None outside what was measured."""
    rows = engine_summary(results, phase)
    if batch in rows:
        wall = float(rows[batch]["wall_s"])
        return batch / wall, wall, "measured"
    below = [b for b in rows if b < batch]
    above = [b for b in rows if b > batch]
    if not below or not above:
        return None, None, "not measured"
    lo, hi = max(below), min(above)
    w_lo, w_hi = float(rows[lo]["wall_s"]), float(rows[hi]["wall_s"])
    wall = w_lo + (w_hi - w_lo) * (batch - lo) / (hi - lo)
    return batch / wall, wall, f"interpolated between {lo} and {hi}"


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def backend(results: dict[str, Any], phase: str) -> str:
    """The ENGINE_BACKEND a service phase's workers ran (``auto`` resolved as the worker resolves it);
    ``chattts`` for a phase that does not say (runs from before the decoder)."""
    data = (results.get("phases", {}).get(phase) or {}).get("data") or {}
    chosen = str(data.get("engine_backend") or "chattts")
    if chosen == "auto":
        return "chattts" if str(results.get("device", "")).startswith("cuda") else "ttsq"
    return chosen


def reference(results: dict[str, Any], phase: str) -> str:
    """The engine phase a service phase is compared with: ttsq's decoder alone for workers that ran it (when
    that phase was measured), else ChatTTS's engine."""
    return "decoder" if backend(results, phase) == "ttsq" and engine_summary(results, "decoder") else "engine"


def annotate_window(results: dict[str, Any], window: dict[str, Any], phase: str = "e2e") -> dict[str, Any]:
    """The comparisons for one end-to-end window: the engine alone (the one its workers ran, where measured)
    at the batch size the service ran."""
    limit = _int(window.get("batch_limit"))
    if limit is None and str(window.get("max_batch")).isdigit():
        limit = int(window["max_batch"])
    clients = int(window["clients"])
    same = min(clients, limit) if limit else clients
    ref = reference(results, phase)
    out: dict[str, Any] = {"same_batch": same, "engine_reference": ref}
    jobs, wall, how = engine_at(results, same, ref)
    out["engine_jobs_per_s_same_batch"] = round(jobs, 3) if jobs else None
    out["engine_same_batch_source"] = how
    service = window.get("jobs_per_s")
    out["ratio_same_batch"] = round(service / jobs, 3) if service and jobs else None
    if same != clients:
        jobs_c, _, _ = engine_at(results, clients, ref)
        out["engine_jobs_per_s_at_clients"] = round(jobs_c, 3) if jobs_c else None
        out["ratio_at_clients"] = round(service / jobs_c, 3) if service and jobs_c else None
    else:
        out["engine_jobs_per_s_at_clients"] = out["engine_jobs_per_s_same_batch"]
        out["ratio_at_clients"] = out["ratio_same_batch"]
    threshold = max(STALL_FLOOR_S, 3 * wall) if wall else STALL_FLOOR_S
    gap = window.get("max_gap_s")
    out["stall_threshold_s"] = round(threshold, 1)
    out["stalled"] = bool(window.get("errors")) or (gap is not None and gap > threshold) or not window.get("completed")
    return out


def _windows(results: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    data = (results.get("phases", {}).get(phase) or {}).get("data") or {}
    return [w | annotate_window(results, w, phase) for w in data.get("windows") or []]


def _find(windows: list[dict[str, Any]], max_batch: str, clients: int) -> dict[str, Any] | None:
    return next((w for w in windows if str(w["max_batch"]) == max_batch and int(w["clients"]) == clients), None)


def service_label(results: dict[str, Any], phase: str) -> str:
    """How criteria and tables name a service phase: ``COMPILE=true``; ``eager`` (ChatTTS's loop, not
    compiled) or ``ENGINE_BACKEND=ttsq`` (ttsq's decoder) for ``e2e``."""
    if phase == "compile":
        return "COMPILE=true"
    return "eager" if backend(results, phase) == "chattts" else f"ENGINE_BACKEND={backend(results, phase)}"


def _full_size(results: dict[str, Any]) -> bool:
    model = results.get("model") or {}
    return model.get("size_arg") == "full" or str(model.get("name", "")).startswith("full")


def decoder_criteria(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoder issue's GPU acceptance: ms per decode step at batch 1 and 64 on the full-size checkpoint,
    and the GPU busy while the decoder runs them. Judged on the decode step (``SlotDecoder.step``: a graph
    replay and the read of which rows ended); the GPT time per token with each row's prefill and the
    scheduling around the steps is shown beside it. ``met`` is None where there is nothing to judge."""
    record = results.get("phases", {}).get("decoder")
    if not record:
        return []
    dry = bool(results.get("dry_run"))
    rows = engine_summary(results, "decoder")
    data = record.get("data") or {}
    graphs = (data.get("batcher") or {}).get("cuda_graphs")
    applies = dry or _full_size(results)
    why_not = "" if applies else f"n/a: needs the full-size checkpoint (this run: {(results.get('model') or {}).get('name')})"
    out: list[dict[str, Any]] = []
    for batch, limit in DECODER_STEP_MS.items():
        row = rows.get(batch)
        step = row.get("decode_step_ms_median") if row else None
        measured = (
            f"{step} ms per step (median of {row.get('steps')}; CUDA graphs {'on' if graphs else 'off'}); "
            f"GPT with prefill and scheduling {row.get('gpt_ms_per_step')} ms per token"
            if row and step is not None
            else f"batch {batch} not measured"
        )
        met = None if step is None or not applies else float(step) <= limit
        out.append(
            _verdict(f"ttsq decoder, batch {batch}: ≤ {limit:g} ms per decode step", measured, f"≤ {limit:g} ms", met, why_not, dry)
        )
    busy = {batch: (rows.get(batch) or {}).get("gpu_util_mean") for batch in DECODER_STEP_MS}
    missing = [str(batch) for batch, value in busy.items() if value is None]
    known = not missing
    out.append(
        _verdict(
            f"ttsq decoder: GPU busy ≥ {DECODER_GPU_BUSY:g}% at batch {' and '.join(map(str, DECODER_STEP_MS))}",
            ", ".join(f"batch {b}: {_fmt(v, 0)}%" for b, v in busy.items()),
            f"≥ {DECODER_GPU_BUSY:g}% each",
            all(float(v) >= DECODER_GPU_BUSY for v in busy.values() if v is not None) if known and applies else None,
            why_not or ("" if known else f"no GPU samples at batch {' and '.join(missing)}" + (" (dry run on CPU)" if dry else "")),
            dry,
        )
    )
    return out


def _verdict(name: str, measured: str, needs: str, met: bool | None, note: str, dry: bool) -> dict[str, Any]:
    """One criterion's row; on a dry run every judged one says it is not the GPU criterion."""
    if dry and met is not None:
        note = f"{note}; {DRY_RUN_NOTE}" if note else DRY_RUN_NOTE
    return {"criterion": name, "measured": measured, "needs": needs, "met": met, "note": note}


def criteria(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoder issue's GPU acceptance (:func:`decoder_criteria`), then the GPU-serving issue's done-when
    checks, for the service (``e2e``) and with ``COMPILE=true`` (``compile``, the one that issue names).
    ``met`` is None where the run has nothing to judge."""
    dry = bool(results.get("dry_run"))
    tokens = results.get("tokens")
    out: list[dict[str, Any]] = decoder_criteria(results)

    def add(name: str, measured: str, needs: str, met: bool | None, note: str = "") -> None:
        out.append(_verdict(name, measured, needs, met, note, dry))

    eager = _windows(results, "e2e")
    eager_label = service_label(results, "e2e")
    for phase, label in (("compile", "COMPILE=true"), ("e2e", eager_label)):
        windows = _windows(results, phase)
        record = results.get("phases", {}).get(phase)
        if record and not [w for w in windows if str(w["max_batch"]) == "auto"]:
            data = record.get("data") or {}
            why = next(
                (
                    str(s["error"]).splitlines()[0]
                    for s in data.get("stacks") or []
                    if s.get("max_batch") == "auto" and "error" in s
                ),
                "",
            )
            add(f"{label}, MAX_BATCH=auto: the service measured", "no window", "a window", None, why or str(record.get("status")))
        if not windows:
            continue
        clients_seen = sorted({int(w["clients"]) for w in windows if str(w["max_batch"]) == "auto"})
        for clients in clients_seen:
            w = _find(windows, "auto", clients)
            assert w is not None
            ratio = w.get("ratio_same_batch")
            add(
                f"{label}, MAX_BATCH=auto, {clients} clients: service jobs/s ≥ {SAME_BATCH_SHARE}× the engine's at the same batch "
                f"({w['same_batch']})",
                f"{w.get('jobs_per_s')} vs {w.get('engine_jobs_per_s_same_batch')} jobs/s = {ratio}×",
                f"≥ {SAME_BATCH_SHARE}×",
                None if ratio is None else ratio >= SAME_BATCH_SHARE,
                f"{REFERENCES[w['engine_reference']]} {w.get('engine_same_batch_source')}; mean batch {w.get('mean_batch')}, "
                f"limit {w.get('batch_limit')}",
            )
            if w["same_batch"] != clients:
                ratio_c = w.get("ratio_at_clients")
                add(
                    f"{label}, MAX_BATCH=auto, {clients} clients: ≥ {SAME_BATCH_SHARE}× the engine at batch {clients}",
                    f"{w.get('jobs_per_s')} vs {w.get('engine_jobs_per_s_at_clients')} jobs/s = {ratio_c}×",
                    f"≥ {SAME_BATCH_SHARE}×",
                    None if ratio_c is None else ratio_c >= SAME_BATCH_SHARE,
                    f"the worker chose a batch limit of {w.get('batch_limit')}",
                )
        auto64 = _find(windows, "auto", 64)
        if auto64 is not None:
            jobs = auto64.get("jobs_per_s")
            target = H200_GAIN * H200_MAX_BATCH_8_JOBS_PER_S
            applicable = not dry and tokens == 256 and "H200" in str(results.get("machine", {}).get("gpu", ""))
            add(
                f"{label}, MAX_BATCH=auto, 64 clients: ≥ {H200_GAIN:.0f}× the H200 MAX_BATCH=8 figure "
                f"({H200_MAX_BATCH_8_JOBS_PER_S} jobs/s, 2026-12-01)",
                f"{jobs} jobs/s",
                f"≥ {target:.1f} jobs/s",
                (jobs is not None and jobs >= target) if applicable else None,
                "" if applicable else "n/a: that figure is for an H200 with 256-token jobs",
            )
            same_run8 = _find(eager, "8", 64)
            if same_run8 and same_run8.get("jobs_per_s") and jobs:
                gain = jobs / same_run8["jobs_per_s"]
                add(
                    f"{label}, MAX_BATCH=auto vs this run's MAX_BATCH=8 ({eager_label}), 64 clients: ≥ {H200_GAIN:.0f}×",
                    f"{jobs} vs {same_run8['jobs_per_s']} jobs/s = {gain:.2f}×",
                    f"≥ {H200_GAIN:.0f}×",
                    gain >= H200_GAIN,
                )
        autos = [w for w in windows if str(w["max_batch"]) == "auto"]
        if autos:
            stalls = [w for w in autos if w["stalled"]]
            gaps = ", ".join(f"{w['clients']} clients: {w.get('max_gap_s')}s (limit {w['stall_threshold_s']}s)" for w in autos)
            add(
                f"{label}, MAX_BATCH=auto: no stall (every window completes jobs, no error, no gap over its limit)",
                f"longest gap without a completion: {gaps}; errors {sum(w['errors'] for w in autos)}",
                "no stall",
                not stalls,
            )
        if phase == "compile":
            during = [w.get("recompiles_during") for w in autos]
            known = [x for x in during if x is not None]
            add(
                "COMPILE=true: graphs compiled while serving (ttsq_compile_recompiles_total)",
                ", ".join(str(x) for x in during) if known else "absent (the worker does not export it)",
                "0",
                (sum(known) == 0) if known else None,
            )
    out += realtime_criteria(results)
    return out


def _realtime_servers(results: dict[str, Any]) -> dict[str, Any]:
    """The realtime phase's one checkpoint: ``{server: {"levels": [...], "capacity": N}}``."""
    data = (results.get("phases", {}).get("realtime") or {}).get("data") or {}
    return next(iter((data.get("checkpoints") or {}).values()), {})


def realtime_capacity(levels: list[dict[str, Any]], first_audio_s: float) -> int:
    """The largest N (every smaller N measured passing too) with success 1.00, first audio p99 ≤ ``first_audio_s``,
    RTF p99 ≤ 1 and no underrun (bench.listening.realtime's rule, with the GPU criterion's bounds)."""
    best = 0
    for level in sorted(levels, key=lambda lv: lv["streams"]):
        ok = level["requests"] > 0 and level["success"] == 1.0 and level["underruns_per_stream"] == 0
        if not (ok and level["first_p99_s"] <= first_audio_s and level["rtf_p99"] <= 1.0):
            break
        best = level["streams"]
    return best


def realtime_criteria(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The realtime issue's GPU done-when, judged on the realtime phase's ttsq figures (none before it ran)."""
    if "realtime" not in results.get("phases", {}):
        return []
    levels = (_realtime_servers(results).get("ttsq") or {}).get("levels") or []
    dry = bool(results.get("dry_run"))
    got = realtime_capacity(levels, REALTIME_FIRST_AUDIO_S)
    measured = f"{got} streams (N measured: {', '.join(str(lv['streams']) for lv in levels) or 'none'})"
    met: bool | None = got >= REALTIME_STREAMS if levels else None
    note = "" if _full_size(results) else "not the full-size checkpoint"
    return [
        _verdict(
            f"realtime: concurrent real-time streams (success 1.00, first audio p99 ≤ {REALTIME_FIRST_AUDIO_S * 1000:.0f} ms, "
            "RTF p99 ≤ 1, no underrun)",
            measured,
            f"≥ {REALTIME_STREAMS}",
            met,
            note,
            dry,
        )
    ]


def _realtime_section(results: dict[str, Any]) -> list[str]:
    servers = _realtime_servers(results)
    if not servers:
        return []
    md = [
        "## Real-time streams (bench.listening.realtime)",
        "",
        f"Command: `{results.get('command', '?')}`; date {results.get('date', '?')}. N listeners play streams from their "
        "first byte; capacity = the largest N with success 1.00, first audio p99 ≤ 1 s and RTF p99 ≤ 1.",
        "",
        "| server | N | streams | success | first audio p50 / p99 s | RTF p99 | underruns / stream |",
        "|---|---|---|---|---|---|---|",
    ]
    for server, figures in servers.items():
        for lv in figures.get("levels", []):
            md.append(
                f"| {server} | {lv['streams']} | {lv['requests']} | {_fmt(lv['success'])} | {_fmt(lv['first_p50_s'])} / "
                f"{_fmt(lv['first_p99_s'])} | {_fmt(lv['rtf_p99'])} | {_fmt(lv['underruns_per_stream'])} |"
            )
    capacities = ", ".join(f"{server} {figures.get('capacity')}" for server, figures in servers.items())
    return [*md, "", f"Capacity: {capacities}.", ""]


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _status(results: dict[str, Any], phase: str) -> str:
    record = results.get("phases", {}).get(phase) or {}
    took = record.get("seconds")
    limit = record.get("limit_s")
    return f"{record.get('status', 'not run')}" + (f", {took:.0f}s of a {limit:.0f}s limit" if took is not None and limit else "")


def render(results: dict[str, Any]) -> str:
    dry = bool(results.get("dry_run"))
    machine = results.get("machine", {})
    where = "DRY RUN ON CPU (not a GPU result)" if dry else str(machine.get("gpu", "GPU"))
    md = [f"# ttsq GPU benchmark: {where}, {results.get('date', '?')}", ""]
    md.append(f"Command: `{results.get('command', '?')}`; date {results.get('date', '?')}.")
    if dry:
        md += [
            "",
            "> **Dry run on CPU.** Every figure below was measured on this machine's CPU, with the model named below; none "
            "is a GPU result, and the verdicts only show that the benchmark runs end to end.",
        ]
    model = results.get("model", {})
    md += [
        "",
        f"Device: {results.get('device')} ({_fmt(machine.get('gpu'))}; driver {_fmt(machine.get('driver'))}; "
        f"{_fmt(machine.get('cpu'))}, {_fmt(machine.get('cores'))} cores). Model: {model.get('name')} at `{model.get('path')}`. "
        f"Audio tokens per item/job: {results.get('tokens')} (forced: MIN_NEW_TOKEN = MAX_NEW_TOKEN); normalization, "
        "result cache and single-flight off.",
        f"Budget {_fmt(results.get('budget_s'), 0)} s, used {_fmt(results.get('elapsed_s'), 0)} s. "
        f"Versions: {json.dumps(results.get('versions', {}))}.",
        "",
    ]
    rows = criteria(results)
    if rows:
        md += ["## Done-when criteria", "", "| criterion | measured | needs | verdict |", "|---|---|---|---|"]
        for row in rows:
            verdict = {True: "met", False: "**NOT met**", None: "n/a"}[row["met"]]
            note = f" ({row['note']})" if row["note"] else ""
            md.append(f"| {row['criterion']} | {row['measured']} | {row['needs']} | {verdict}{note} |")
        md.append("")
    md += _engine_section(results)
    md += _decoder_section(results)
    md += _service_section(results, "e2e", f"Service end to end, {service_label(results, 'e2e')}")
    md += _service_section(results, "compile", "Service end to end, COMPILE=true")
    md += _realtime_section(results)
    sampler = results.get("gpu_sampler", {})
    md += [
        "## Phases",
        "",
        "| phase | status | written after it |",
        "|---|---|---|",
    ]
    for phase in ("checkpoint", *results.get("phases_planned", [])):
        md.append(
            f"| {phase} | {_status(results, phase)} | {_fmt((results.get('phases', {}).get(phase) or {}).get('written_at'))} |"
        )
    md += [
        "",
        f"GPU sampling: {sampler.get('source') or 'none'} ({sampler.get('samples', 0)} samples"
        f"{'; ' + sampler['error'] if sampler.get('error') else ''}).",
        "",
    ]
    return "\n".join(md)


def _engine_section(results: dict[str, Any]) -> list[str]:
    record = results.get("phases", {}).get("engine")
    if not record:
        return []
    data = record.get("data") or {}
    md = [
        f"## Engine alone (`ChatTTSEngine.synthesize_batch`, eager): {_status(results, 'engine')}",
        "",
        f"`{results.get('command')}`, {results.get('date')}. "
        f"Imports {_fmt(data.get('import_s'))} s, load {_fmt(data.get('load_s'))} s, "
        f"warm-up {_fmt(data.get('warm_up_s'))} s, weights {_fmt(data.get('weights_alloc_mib'), 0)} MiB allocated. "
        "Best of the repetitions; GPU busy = NVML utilisation over the call.",
        "",
        "| batch | wall s (all reps) | GPT ms/step | mel decode + vocoder s | audio-s per wall-s | jobs/s | max alloc MiB "
        "| GPU busy % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data.get("summary") or []:
        walls = ", ".join(f"{w:.2f}" for w in row.get("wall_s_all", [row["wall_s"]]))
        md.append(
            f"| {row['batch']} | {row['wall_s']:.2f} ({walls}) | {row['gpt_ms_per_step']:.1f} | {row['decode_vocoder_s']:.3f} "
            f"| {row['audio_s_per_wall_s']:.1f} | {row['jobs_per_s']:.2f} | {_fmt(row.get('max_mem_alloc_mib'), 0)} "
            f"| {_fmt(row.get('gpu_util_mean'), 0)} |"
        )
    return [*md, *_run_notes(record), ""]


def _run_notes(record: dict[str, Any]) -> list[str]:
    """Below an engine phase's table: the calls that failed, the sizes left out, the phase's own error."""
    data = record.get("data") or {}
    md = [f"\nBatch {run['batch']} failed: `{run['error']}`" for run in data.get("runs") or [] if "error" in run]
    if data.get("skipped_batches"):
        md.append(f"\nSkipped (time or a failure): batch sizes {data['skipped_batches']}.")
    for error in (data.get("error"), record.get("error")):
        if error:
            md.append(f"\nPhase error: `{str(error)[:500]}`")
    return md


def _decoder_section(results: dict[str, Any]) -> list[str]:
    record = results.get("phases", {}).get("decoder")
    if not record:
        return []
    data = record.get("data") or {}
    batcher = data.get("batcher") or {}
    chattts = engine_summary(results, "engine")
    positions = (
        f"{_fmt(batcher.get('attended_positions'))} positions (longest prompt {_fmt(batcher.get('max_prompt'))} + "
        f"{_fmt(batcher.get('max_new'))} tokens)"
    )
    scrapes = sum(int(c.get("mem_get_info_calls_beside") or 0) for c in batcher.get("captures") or [])
    graphs = (
        f"CUDA graphs for buckets {batcher.get('graph_buckets')} x attention windows {batcher.get('graph_windows')} "
        f"captured in {_fmt(batcher.get('capture_s'))} s (while another thread called torch.cuda.mem_get_info "
        f"{scrapes} times, as a metrics scrape does), each step attending the smallest window that holds its "
        f"longest row, at most {positions}"
        if batcher.get("cuda_graphs")
        else f"no CUDA graphs (not on CUDA, or not asked for): every step eager, attending the longest row's positions, "
        f"at most {positions}"
    )
    md = [
        f"## ttsq's decoder alone (`DecoderEngine.batcher`, CUDA graphs): {_status(results, 'decoder')}",
        "",
        f"`{results.get('command')}`, {results.get('date')}. "
        f"Imports {_fmt(data.get('import_s'))} s, load {_fmt(data.get('load_s'))} s, warm-up {_fmt(data.get('warm_up_s'))} s. "
        f"One batcher of {_fmt(batcher.get('slots'))} slots for every batch size, built in {_fmt(batcher.get('build_s'))} s: "
        f"{graphs}; KV cache {_fmt(batcher.get('kv_cache_mib'), 0)} MiB; "
        f"the batcher holds {_fmt(batcher.get('alloc_mib'), 0)} MiB. "
        "Per batch size that many requests are added and stepped until all have ended; best of the repetitions. "
        "GPT ms/step = (wall − mel decode − vocoder) ÷ tokens, as for ChatTTS's engine (each row's prefill and the "
        "scheduling included); decode step = one `SlotDecoder.step` (graph replay + reading which rows ended), median; "
        "prefill = `SlotDecoder.prefill_many`, rows admitted together going through the GPT in one pass; "
        "speed-up = ChatTTS's GPT ms/step ÷ ttsq's; rows/step from the batcher's counts (slots computed, padding "
        "included, in brackets); GPU busy = NVML utilisation over the call.",
        "",
        "| batch | GPT ms/step ChatTTS | GPT ms/step ttsq | speed-up | decode step ms | prefill s (rows per pass) "
        "| mel decode + vocoder s "
        "| rows/step (computed) | audio-s per wall-s | jobs/s | max alloc MiB | GPU busy % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data.get("summary") or []:
        theirs = (chattts.get(int(row["batch"])) or {}).get("gpt_ms_per_step")
        ours = row["gpt_ms_per_step"]
        speed_up = f"{theirs / ours:.2f}×" if theirs and ours else "–"
        md.append(
            f"| {row['batch']} | {_fmt(theirs, 1)} | {ours:.1f} | {speed_up} | {_fmt(row.get('decode_step_ms_median'))} "
            f"| {_fmt(row.get('prefill_s'), 3)} ({_fmt(row.get('rows_per_prefill'))}) | {row['decode_vocoder_s']:.3f} "
            f"| {_fmt(row.get('rows_per_step'))} "
            f"({_fmt(row.get('computed_per_step'))}) | {row['audio_s_per_wall_s']:.1f} | {row['jobs_per_s']:.2f} "
            f"| {_fmt(row.get('max_mem_alloc_mib'), 0)} | {_fmt(row.get('gpu_util_mean'), 0)} |"
        )
    unclean = [
        f"\nBatch {row['batch']}: {row.get('out_of_memory')} out-of-memory retreat(s), {row.get('suspects')} row(s) re-run "
        "alone after a failed step: its figures are not those of clean steps."
        for row in data.get("summary") or []
        if row.get("out_of_memory") or row.get("suspects")
    ]
    return [*md, *unclean, *_run_notes(record), ""]


def _service_section(results: dict[str, Any], phase: str, title: str) -> list[str]:
    record = results.get("phases", {}).get(phase)
    if not record:
        return []
    data = record.get("data") or {}
    md = [
        f"## {title}: {_status(results, phase)}",
        "",
        f"`{results.get('command')}`, {results.get('date')}. "
        "redis-server + `uvicorn app:app` + one `python worker.py` per MAX_BATCH; "
        "closed-loop clients submit, poll every 100 ms and download. jobs/s = completed / (last completion − start); "
        "mean batch (rows per engine step) and limit from the worker's `/metrics`; "
        f"workers on ENGINE_BACKEND={backend(results, phase)}; "
        f"ratio = service jobs/s ÷ {REFERENCES[reference(results, phase)]} alone at the same batch size.",
        "",
    ]
    for stack in data.get("stacks") or []:
        name = f"MAX_BATCH={stack['max_batch']}{', COMPILE=true' if stack.get('compile') else ''}"
        if "error" in stack:
            md.append(f"- {name}: **failed**: `{str(stack['error']).splitlines()[0][:300]}` (logs in process_logs.txt)")
        else:
            md.append(
                f"- {name}: worker ready {_fmt(stack.get('ready_s'), 1)} s after start (model load + warm-up"
                f"{' + compile' if stack.get('compile') else ''}), batch limit {_fmt(stack.get('batch_limit_at_ready'), 0)}, "
                f"graphs compiled by then {_fmt(stack.get('recompiles_at_ready'), 0)}"
            )
    md += [
        "",
        "| MAX_BATCH | limit | clients | window s | completed | jobs/s | p50 s | p99 s | mean batch | audio-s per job "
        "| engine jobs/s, same batch | ratio | longest gap s | errors | abandoned | recompiles | GPU util % "
        "| CPU cores API/worker |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in _windows(results, phase):
        md.append(
            f"| {w['max_batch']} | {_fmt(w.get('batch_limit'), 0)} | {w['clients']} | {w['window_s']:.0f} | {w['completed']} "
            f"| {_fmt(w.get('jobs_per_s'))} | {_fmt(w.get('p50_s'))} | {_fmt(w.get('p99_s'))} | {_fmt(w.get('mean_batch'))} "
            f"| {_fmt(w.get('audio_s_per_job'))} | {_fmt(w.get('engine_jobs_per_s_same_batch'))} (b={w['same_batch']}) "
            f"| {_fmt(w.get('ratio_same_batch'))} | {_fmt(w.get('max_gap_s'))} | {w['errors']} | {w['abandoned_at_drain_cap']} "
            f"| {_fmt(w.get('recompiles_during'), 0)} | {_fmt(w.get('gpu_util_mean'), 0)} "
            f"| {_fmt((w.get('cpu_cores') or {}).get('api'))}/{_fmt((w.get('cpu_cores') or {}).get('worker'))} |"
        )
    for skip in data.get("skipped") or []:
        clients = f", {skip['clients']} clients" if "clients" in skip else ""
        md.append(f"\nSkipped: MAX_BATCH={skip['max_batch']}{clients}: {skip['reason']}")
    if data.get("error") or record.get("error"):
        md.append(f"\nPhase error: `{str(data.get('error') or record.get('error'))[:500]}`")
    return [*md, ""]


def write(out: Path, results: dict[str, Any]) -> None:
    """``results.json`` (with the criteria) and ``results.md``, each replaced atomically."""
    results["criteria"] = criteria(results)
    for name, text in (("results.json", json.dumps(results, indent=1)), ("results.md", render(results))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.gpu.report RESULTS_JSON", file=sys.stderr)
        return 2
    path = Path(args[0])
    results = json.loads(path.read_text())
    write(path.parent, results)
    print((path.parent / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
