"""``make bench-gpu`` (``python -m bench.gpu``) without a GPU: a real dry run on CPU, and its parts.

The dry run starts everything the GPU run starts (the engine phase, ttsq's decoder phase,
redis-server + ``uvicorn app:app`` + ``python worker.py`` per ``MAX_BATCH``, the ``COMPILE=true``
stack) on the tiny checkpoint, with
short windows, and checks that the results files are rewritten after every phase, hold the fields
the issue asks for, leave the GPU fields empty and say "dry run on CPU" wherever a figure appears.
The report's verdicts are checked on made-up GPU numbers, and the time limit on a stand-in phase.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.gpu import report as gpu_report
from bench.gpu import run as gpu
from bench.gpu.e2e import groups, parse_metrics, recompiles
from tests.support.service import wait_for

ROOT = Path(__file__).resolve().parents[3]


def _poll_results(proc: subprocess.Popen[str], path: Path, timeout_s: float) -> list[list[str]]:
    """The phases recorded in ``results.json`` each time it changed while ``proc`` ran."""
    seen: list[list[str]] = []
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"python -m bench.gpu --quick did not finish within {timeout_s:.0f}s")
        try:
            phases = list(json.loads(path.read_text())["phases"])
        except (OSError, ValueError, KeyError):
            phases = []
        if phases and (not seen or seen[-1] != phases):
            seen.append(phases)
        time.sleep(0.2)
    return seen


def _why(window: dict[str, Any], out: Path, output: str) -> str:
    """What a failed window assertion shows: the window, the run's log and its processes' last lines."""
    logs = out / "process_logs.txt"
    tails = logs.read_text(errors="replace")[-6000:] if logs.exists() else "(no process_logs.txt)"
    return f"window {json.dumps(window)}\n--- bench.gpu output (end)\n{output[-4000:]}\n--- process logs (end)\n{tails}"


@pytest.mark.e2e
@pytest.mark.timeout(480)
def test_dry_run_on_cpu_writes_every_phase_as_it_finishes(tmp_path: Path, tiny_checkpoint_dir: Path) -> None:
    out = tmp_path / "out"
    # 1 s windows: the plumbing, not the figures, is checked, and no window comes back empty however short (a dry run's
    # client completes one job whatever the clock says; a real-time listener opens one stream at least).
    cmd = [
        sys.executable, "-m", "bench.gpu", "--quick", "--device", "cpu", "--model", str(tiny_checkpoint_dir),
        "--out", str(out), "--budget-s", "390", "--max-batches", "auto,1", "--clients", "4,8", "--window-s", "1",
        "--drain-s", "8", "--batches", "1,4,8",
    ]  # fmt: skip
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        seen = _poll_results(proc, out / "results.json", 460)
        output = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 0, output[-4000:]

    # Rewritten after every phase, not only at the end: a cut-off run keeps what finished.
    phases = ["checkpoint", "engine", "decoder", "e2e", "compile", "realtime"]
    assert seen[0] == ["checkpoint"], seen
    for done in range(2, len(phases)):
        assert phases[:done] in seen, seen
    assert seen[-1] == phases, seen
    marker = "results written after "
    written = [line.split(marker)[1].split(":")[0] for line in output.splitlines() if marker in line]
    assert written == [*phases, "the run"]

    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    assert results["dry_run"] is True
    assert results["label"] == "dry run on CPU (not a GPU result)"
    assert results["command"].startswith("python -m bench.gpu --quick")
    assert results["date"].endswith("UTC")
    assert results["machine"]["gpu"] is None
    assert {name: results["phases"][name]["status"] for name in phases} == dict.fromkeys(phases, "ok")
    assert results["e2e_backend"] == "ttsq"

    engine = results["phases"]["engine"]["data"]
    assert [row["batch"] for row in engine["summary"]] == [1, 4, 8]
    for row in engine["summary"]:
        assert row["wall_s"] > 0 and row["gpt_ms_per_step"] > 0 and row["decode_vocoder_s"] > 0
        assert row["audio_s_per_wall_s"] > 0 and row["jobs_per_s"] > 0 and row["empty_items"] == 0
        assert row["max_mem_alloc_mib"] is None and row["gpu_util_mean"] is None  # no GPU: empty, not made up

    # ttsq's decoder through one batcher of the largest batch's slots: every request of a size shares every step.
    decoder = results["phases"]["decoder"]["data"]
    assert decoder["engine"] == "ttsq" and decoder["cuda_graphs_requested"] is True
    assert decoder["batcher"]["slots"] == 8
    assert decoder["batcher"]["cuda_graphs"] is False  # on a CPU nothing is captured, and nothing is made up:
    assert decoder["batcher"]["graph_buckets"] is None and decoder["batcher"]["capture_s"] is None
    assert decoder["batcher"]["alloc_mib"] is None
    assert [row["batch"] for row in decoder["summary"]] == [1, 4, 8]
    for row in decoder["summary"]:
        assert row["wall_s"] > 0 and row["gpt_ms_per_step"] > 0 and row["decode_vocoder_s"] > 0 and row["prefill_s"] > 0
        assert row["decode_step_ms"] > 0 and row["decode_step_ms_median"] > 0 and row["decode_steps_s"] < row["wall_s"]
        assert row["steps"] >= results["tokens"] - 1 and row["rows_per_step"] >= 1
        assert row["rows_per_step"] == row["batch"] == row["computed_per_step"]  # forced token counts: all end together
        # every row prefilled once, those admitted together in one pass (no prefill thread here, as on CUDA); each row
        # decoded to audio alone
        assert row["prefilled_rows"] == row["chattts_calls"] == row["batch"]
        assert row["prefills"] == 1 and row["rows_per_prefill"] == row["batch"]  # all admitted at the first step
        assert row["audio_s_per_wall_s"] > 0 and row["jobs_per_s"] > 0 and row["empty_items"] == 0
        assert row["out_of_memory"] == 0 and row["suspects"] == 0
        assert row["max_mem_alloc_mib"] is None and row["gpu_util_mean"] is None
    audio_per_item = decoder["summary"][0]["audio_s_per_item"]

    e2e = results["phases"]["e2e"]["data"]
    assert e2e["engine_backend"] == "ttsq"
    assert [s["max_batch"] for s in e2e["stacks"]] == ["auto", "1"]
    assert all(s["ready_s"] > 0 and "error" not in s for s in e2e["stacks"])
    windows = {(w["max_batch"], w["clients"]): w for w in e2e["windows"]}
    assert set(windows) == {("auto", 4), ("auto", 8), ("1", 4), ("1", 8)}
    for w in windows.values():
        # A dry run's client completes one job however slow the CPU is (--min-jobs 1): a window is never empty.
        assert w["min_jobs_per_client"] == 1 and w["completed"] >= w["clients"], _why(w, out, output)
        assert w["errors"] == 0 and w["jobs_per_s"] > 0, _why(w, out, output)
        assert w["p50_s"] > 0 and w["p99_s"] >= w["p50_s"] and w["mean_batch"] >= 1
        assert w["gpu_util_mean"] is None
        # A job is one row of the same forced token count: its audio is an item's, not a step's share of it.
        assert w["worker_jobs"] >= w["completed"] and 0.5 < w["audio_s_per_job"] / audio_per_item < 2, _why(w, out, output)
    assert windows[("1", 8)]["batch_limit"] == 1 and windows[("1", 8)]["mean_batch"] == 1
    assert windows[("auto", 8)]["batch_limit"] == 8  # MAX_BATCH=auto on a CPU is 8

    compile_ = results["phases"]["compile"]["data"]
    assert compile_["compile"] is True and compile_["engine_backend"] == "chattts" and compile_["stacks"][0]["ready_s"] > 0
    assert {w["clients"] for w in compile_["windows"]} == {4, 8}
    for w in compile_["windows"]:
        assert w["completed"] >= w["clients"] and w["errors"] == 0 and w["jobs_per_s"] > 0, _why(w, out, output)
    assert all(w["recompiles_during"] is None for w in compile_["windows"])  # torch.compile is CUDA-only

    # Real-time streams: ttsq beside ChatTTS's own streaming server, N = 1 and 2 (the quick profile), on the CPU.
    realtime = results["phases"]["realtime"]["data"]
    servers = realtime["checkpoints"]["model"]
    assert set(servers) == {"ttsq", "ChatTTS stream"} and realtime["complete"] is True
    for figures in servers.values():
        assert [level["streams"] for level in figures["levels"]] == [1, 2]
        assert all(level["requests"] >= 1 and level["success"] > 0 for level in figures["levels"]), figures

    criteria = {row["criterion"]: row for row in results["criteria"]}
    streams = next(row for name, row in criteria.items() if name.startswith("realtime: concurrent real-time streams"))
    assert streams["met"] is False and gpu_report.DRY_RUN_NOTE in streams["note"]  # 2 streams at most: far from 256
    same_batch = [row for name, row in criteria.items() if "the engine's at the same batch" in name]
    assert len(same_batch) == 4  # auto at 4 and 8 clients, eager and COMPILE=true
    assert all(row["met"] is not None and "dry run on CPU" in row["note"] for row in same_batch)
    # Each service is compared with the engine its workers ran: ttsq's decoder, or ChatTTS's loop for COMPILE=true.
    assert all(row["note"].startswith("ttsq's decoder") for row in same_batch if row["criterion"].startswith("ENGINE_BACKEND"))
    assert all(row["note"].startswith("ChatTTS's engine") for row in same_batch if row["criterion"].startswith("COMPILE"))
    assert criteria["COMPILE=true: graphs compiled while serving (ttsq_compile_recompiles_total)"]["measured"].startswith("absent")
    step_1 = criteria["ttsq decoder, batch 1: ≤ 4 ms per decode step"]
    assert step_1["met"] is not None and step_1["note"].endswith(gpu_report.DRY_RUN_NOTE)
    step_64 = criteria["ttsq decoder, batch 64: ≤ 3 ms per decode step"]
    assert step_64["met"] is None and step_64["measured"] == "batch 64 not measured"
    busy = criteria["ttsq decoder: GPU busy ≥ 70% at batch 1 and 64"]
    assert busy["met"] is None and "no GPU samples at batch 1 and 64" in busy["note"]  # never a verdict without a GPU sample

    md = (out / "results.md").read_text()
    assert md.startswith("# ttsq GPU benchmark: DRY RUN ON CPU (not a GPU result)")
    assert "none is a GPU result" in md
    assert md.count(results["command"]) >= 5  # the title block and every table name the command
    headings = (
        "## Done-when criteria",
        "## Engine alone",
        "## ttsq's decoder alone",
        "## Service end to end, ENGINE_BACKEND=ttsq",
        "## Service end to end, COMPILE=true",
        "## Real-time streams (bench.listening.realtime)",
    )
    assert all(heading in md for heading in headings)
    assert "no CUDA graphs (not on CUDA, or not asked for): every step eager" in md  # no capture claimed on a CPU
    assert all((out / f"{phase}.json").exists() for phase in phases[1:])
    assert "MAX_BATCH=auto" in (out / "process_logs.txt").read_text()


def test_a_phase_past_its_limit_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """Like a worker that ``spawn`` started in its own session: the limit ends it too, found by its marker."""
    pids = tmp_path / "pids"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{child.pid}}')\n"
        "time.sleep(120)\n"
    )
    marker = f"test-{os.getpid()}-{time.time_ns()}/phase/"
    record = gpu.run_limited("stand-in", [sys.executable, "-c", script], 3.0, marker)
    assert record["status"].startswith("timeout")
    assert record["rc"] == -signal.SIGTERM, "stopped at its limit, not left to finish its 120 s"
    child = int(pids.read_text())

    def child_gone() -> bool:
        """SIGKILLed at the limit: gone, or a zombie (its command line empty) until it is reaped."""
        try:
            return b"sleep" not in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            return True

    wait_for(child_gone, 60, "the phase's child, SIGKILLed by its marker, to be gone")
    assert gpu.marked_pids(marker) == []


def test_worker_metrics_are_read_by_sample_name() -> None:
    text = (
        "# HELP ttsq_batch_size Jobs per engine call.\n# TYPE ttsq_batch_size histogram\n"
        'ttsq_batch_size_bucket{le="1.0"} 2.0\nttsq_batch_size_bucket{le="+Inf"} 5.0\n'
        "ttsq_batch_size_count 5.0\nttsq_batch_size_sum 160.0\n"
        "# HELP ttsq_batch_limit The largest batch.\n# TYPE ttsq_batch_limit gauge\nttsq_batch_limit 64.0\n"
        "# HELP ttsq_compile_recompiles Graphs.\n# TYPE ttsq_compile_recompiles counter\nttsq_compile_recompiles_total 0.0\n"
    )
    metrics = parse_metrics(text)
    assert metrics["ttsq_batch_size_sum"] / metrics["ttsq_batch_size_count"] == 32
    assert metrics["ttsq_batch_limit"] == 64
    assert recompiles(metrics) == 0.0
    assert recompiles({"ttsq_compile_recompiles": 2.0}) == 2.0  # exported as a gauge
    assert recompiles({}) is None


def test_an_auto_stack_starts_alone_on_cuda_only() -> None:
    assert groups(["auto", "8", "1"], "cuda") == [["auto"], ["8", "1"]]
    assert groups(["8", "auto", "1"], "cuda:0") == [["8"], ["auto"], ["1"]]
    assert groups(["auto", "8", "1"], "cpu") == [["auto", "8", "1"]]


def _gpu_results(recompiles_during: float | None = 0.0) -> dict[str, Any]:
    """Made-up numbers shaped like an H200 run: the engine at 1/64/256, the service at auto/8."""
    engine: list[dict[str, Any]] = [
        {"batch": 1, "wall_s": 2.72, "wall_s_all": [2.72], "gpt_ms_per_step": 10.6, "decode_vocoder_s": 0.05},
        {"batch": 64, "wall_s": 3.64, "wall_s_all": [3.64], "gpt_ms_per_step": 13.9, "decode_vocoder_s": 0.2},
        {"batch": 256, "wall_s": 4.94, "wall_s_all": [4.94], "gpt_ms_per_step": 17.9, "decode_vocoder_s": 0.5},
    ]
    for row in engine:
        row.update(audio_s_per_wall_s=row["batch"] * 5.46 / row["wall_s"], jobs_per_s=row["batch"] / row["wall_s"])

    def window(max_batch: str, clients: int, jobs: float, limit: float, **extra: Any) -> dict[str, Any]:
        return {
            "max_batch": max_batch, "clients": clients, "window_s": 30.0, "completed": int(jobs * 30), "jobs_per_s": jobs,
            "errors": 0, "abandoned_at_drain_cap": 0, "batch_limit": limit, "mean_batch": min(clients, limit), "max_gap_s": 4.0,
            "recompiles_during": None, **extra,
        }  # fmt: skip

    e2e = [window("auto", 64, 16.5, 200), window("auto", 256, 38.0, 200), window("8", 64, 1.61, 8)]
    compiled = [window("auto", 64, 17.0, 200, recompiles_during=recompiles_during, max_gap_s=40.0)]
    return {
        "command": "python -m bench.gpu",
        "date": "2026-12-02 10:00 UTC",
        "dry_run": False,
        "device": "cuda",
        "machine": {"gpu": "NVIDIA H200", "driver": "580", "cpu": "x", "cores": 16},
        "model": {"name": "full-random", "size_arg": "full", "path": "var/full-random-checkpoint"},
        "tokens": 256,
        "phases_planned": ["engine", "e2e", "compile"],
        "phases": {
            "engine": {"status": "ok", "data": {"summary": engine, "runs": engine}},
            "e2e": {"status": "ok", "data": {"stacks": [], "windows": e2e}},
            "compile": {"status": "ok", "data": {"stacks": [], "windows": compiled}},
        },
    }


def _with_decoder(results: dict[str, Any], steps_ms: dict[int, float], busy: dict[int, float]) -> dict[str, Any]:
    """Made-up decoder-phase rows (ttsq's decoder alone at 1/64/256, graphs captured) added to ``results``."""
    rows: list[dict[str, Any]] = []
    for batch, wall in ((1, 1.2), (64, 1.6), (256, 4.0)):
        rows.append(
            {
                "batch": batch, "wall_s": wall, "wall_s_all": [wall], "gpt_ms_per_step": steps_ms.get(batch, 2.0) + 0.4,
                "decode_step_ms_median": steps_ms.get(batch, 2.0), "steps": 255, "rows_per_step": float(batch),
                "computed_per_step": float(batch), "prefill_s": 0.004 * batch, "decode_vocoder_s": 0.01 * batch,
                "audio_s_per_wall_s": batch * 5.46 / wall, "jobs_per_s": batch / wall, "gpu_util_mean": busy.get(batch),
            }
        )  # fmt: skip
    batcher = {
        "slots": 256, "cuda_graphs": True, "graph_buckets": [1, 2, 4, 8, 16, 32, 64, 128, 256],
        "graph_windows": [32, 64, 128, 256, 512, 753], "capture_s": 6.5,
        "captures": [{"mode": "code", "mem_get_info_calls_beside": 900}, {"mode": "text", "mem_get_info_calls_beside": 40}],
        "attended_positions": 753, "max_prompt": 496, "max_new": 256,
    }  # fmt: skip
    results["phases"]["decoder"] = {"status": "ok", "data": {"engine": "ttsq", "batcher": batcher, "summary": rows}}
    results["phases_planned"] = ["engine", "decoder", "e2e", "compile"]
    return results


def test_the_decoder_acceptance_is_judged_per_step_on_the_full_size_checkpoint_only() -> None:
    results = _with_decoder(_gpu_results(), {1: 3.6, 64: 3.2}, {1: 81.0, 64: 64.0})
    rows = {row["criterion"]: row for row in gpu_report.criteria(results)}
    at_1 = rows["ttsq decoder, batch 1: ≤ 4 ms per decode step"]
    assert at_1["met"] is True and at_1["measured"].startswith("3.6 ms per step") and "CUDA graphs on" in at_1["measured"]
    assert rows["ttsq decoder, batch 64: ≤ 3 ms per decode step"]["met"] is False
    busy = rows["ttsq decoder: GPU busy ≥ 70% at batch 1 and 64"]
    assert busy["met"] is False and busy["measured"] == "batch 1: 81%, batch 64: 64%"
    md = gpu_report.render(results)
    assert "## ttsq's decoder alone" in md
    assert (
        "buckets [1, 2, 4, 8, 16, 32, 64, 128, 256] x attention windows [32, 64, 128, 256, 512, 753] captured in 6.50 s "
        "(while another thread called torch.cuda.mem_get_info 940 times, as a metrics scrape does), "
        "each step attending the smallest window that holds its longest row, at most 753 positions"
    ) in md
    assert "| 64 | 13.9 | 3.6 | 3.86× | 3.20 |" in md  # ChatTTS's GPT ms/step beside ttsq's, at the same batch

    results["model"] = {"name": "tiny-random", "size_arg": "tiny"}
    for row in gpu_report.decoder_criteria(results):
        assert row["met"] is None and row["note"].startswith("n/a: needs the full-size checkpoint")


def test_a_service_on_ttsqs_decoder_is_compared_with_the_decoder_alone() -> None:
    results = _with_decoder(_gpu_results(), {}, {})
    results["phases"]["e2e"]["data"]["engine_backend"] = "ttsq"
    rows = {row["criterion"]: row for row in gpu_report.criteria(results)}
    auto64 = rows["ENGINE_BACKEND=ttsq, MAX_BATCH=auto, 64 clients: service jobs/s ≥ 0.9× the engine's at the same batch (64)"]
    assert "= 0.412×" in auto64["measured"] and auto64["note"].startswith("ttsq's decoder measured")  # 16.5 / (64 / 1.6)
    assert "ttsq's decoder alone at the same batch size" in gpu_report.render(results)
    compiled = rows["COMPILE=true, MAX_BATCH=auto, 64 clients: service jobs/s ≥ 0.9× the engine's at the same batch (64)"]
    assert compiled["note"].startswith("ChatTTS's engine measured")  # COMPILE=true runs ChatTTS's loop


def test_the_done_when_verdicts_compare_the_service_with_the_engine_at_the_same_batch() -> None:
    results = _gpu_results()
    rows = {row["criterion"]: row for row in gpu_report.criteria(results)}
    auto64 = rows["eager, MAX_BATCH=auto, 64 clients: service jobs/s ≥ 0.9× the engine's at the same batch (64)"]
    assert auto64["met"] is True and "= 0.938×" in auto64["measured"]  # 16.5 / (64 / 3.64)
    auto256 = rows["eager, MAX_BATCH=auto, 256 clients: service jobs/s ≥ 0.9× the engine's at the same batch (200)"]
    assert "interpolated between 64 and 256" in auto256["note"]
    at_256 = rows["eager, MAX_BATCH=auto, 256 clients: ≥ 0.9× the engine at batch 256"]
    assert at_256["met"] is False  # 38 / (256 / 4.94) = 0.73: the limit the worker chose held it back
    h200 = rows["eager, MAX_BATCH=auto, 64 clients: ≥ 10× the H200 MAX_BATCH=8 figure (1.61 jobs/s, 2026-12-01)"]
    assert h200["met"] is True and h200["needs"] == "≥ 16.1 jobs/s"
    stall = rows["COMPILE=true, MAX_BATCH=auto: no stall (every window completes jobs, no error, no gap over its limit)"]
    assert stall["met"] is False  # a 40 s gap: over 3 engine calls of batch 64
    assert rows["COMPILE=true: graphs compiled while serving (ttsq_compile_recompiles_total)"]["met"] is True
    md = gpu_report.render(results)
    assert md.startswith("# ttsq GPU benchmark: NVIDIA H200, 2026-12-02 10:00 UTC")
    assert "**NOT met**" in md and "dry run" not in md.lower()


def test_absent_recompile_metric_and_a_dry_run_are_never_passed_off_as_gpu_verdicts() -> None:
    results = _gpu_results(recompiles_during=None)
    rows = {row["criterion"]: row for row in gpu_report.criteria(results)}
    assert rows["COMPILE=true: graphs compiled while serving (ttsq_compile_recompiles_total)"]["met"] is None
    results["dry_run"] = True
    _with_decoder(results, {1: 3.0, 64: 2.0}, {1: 90.0, 64: 90.0})
    judged = [row for row in gpu_report.criteria(results) if row["met"] is not None]
    assert any(row["criterion"].startswith("ttsq decoder") for row in judged)
    for row in judged:
        assert row["note"].endswith(gpu_report.DRY_RUN_NOTE)
    assert gpu_report.render(results).startswith("# ttsq GPU benchmark: DRY RUN ON CPU (not a GPU result)")


def test_a_compile_worker_that_never_got_ready_is_reported_not_skipped() -> None:
    results = _gpu_results()
    error = "MAX_BATCH=auto, COMPILE=true: not ready within 170s\n--- worker.log ..."
    results["phases"]["compile"] = {
        "status": "partial: MAX_BATCH=auto failed",
        "data": {"stacks": [{"max_batch": "auto", "compile": True, "error": error}]},
    }
    rows = {row["criterion"]: row for row in gpu_report.criteria(results)}
    row = rows["COMPILE=true, MAX_BATCH=auto: the service measured"]
    assert row["met"] is None and row["note"] == "MAX_BATCH=auto, COMPILE=true: not ready within 170s"
    assert "not ready within 170s" in gpu_report.render(results)


def test_gpu_utilisation_is_sampled_through_nvml_and_paired_with_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for nvidia-ml-py's ``pynvml`` (there is no GPU here): the sampler's own code path otherwise."""
    from types import SimpleNamespace

    fake = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=40),
        nvmlDeviceGetMemoryInfo=lambda handle: SimpleNamespace(used=3 * 2**30),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = gpu.GpuSampler(period_s=0.01)
    t0 = time.monotonic()
    sampler.start(dict(os.environ))
    time.sleep(0.3)
    sampler.stop()
    window = sampler.window(t0, time.monotonic())
    assert sampler.info()["source"] == "NVML"
    assert window["gpu_util_mean"] == 40 and window["gpu_mem_used_max_mib"] == 3072 and window["gpu_samples"] > 5
    assert sampler.window(t0 - 10, t0 - 5)["gpu_util_mean"] is None
