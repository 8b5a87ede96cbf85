"""``make bench-gpu``: ttsq on a GPU in one time-boxed command (the GPU-serving issue, item 5).

    python -m bench.gpu [--phases engine,decoder,e2e,compile,realtime] [--budget-s 780] [--out DIR] [--model full|tiny|DIR]
                        [--device auto|cuda|cpu] [--batches 1,8,32,64,128,256] [--clients 64,256]
                        [--max-batches auto,8,1] [--tokens 256] [--e2e-backend ttsq|chattts|auto] [--quick]

First the checkpoint (``--model full``: the full-size random-weight one, built into
``var/full-random-checkpoint`` when missing), then four phases, each in its own process group with
its own time limit inside ``--budget-s``; a phase still running at its limit is stopped (SIGTERM,
then SIGKILL for everything it started) and the next one runs:

1. ``engine`` (:mod:`bench.gpu.engine`): ``ChatTTSEngine.synthesize_batch`` alone per batch size —
   wall time, GPT ms per decode step apart from mel decode + vocoder, audio-seconds per
   wall-second, jobs/s, peak GPU memory, GPU busy (NVML).
2. ``decoder`` (:mod:`bench.gpu.engine` ``--engine ttsq --cuda-graphs``): ttsq's decoder alone at the
   same batch sizes, through one batcher whose CUDA graphs (one per batch bucket) are captured first
   — the same figures, the capture time, the decode step's own ms, rows per step (the decoder
   issue's GPU acceptance: ms per step at batch 1 and 64, GPU busy).
3. ``e2e`` (:mod:`bench.gpu.e2e`): redis-server + ``uvicorn app:app`` + one ``python worker.py`` per
   ``MAX_BATCH`` (``auto``, 8, 1), workers on ``ENGINE_BACKEND=ttsq`` (``--e2e-backend``), closed-loop
   clients (64, 256) — jobs/s, p50/p99, the mean batch and the batch limit from the worker's
   ``/metrics``, GPU utilisation, and the service's jobs/s over its engine's alone at the same batch
   size (the GPU-serving issue's done-when ratio).
4. ``compile``: the same with ``COMPILE=true``, ``MAX_BATCH=auto`` and ``ENGINE_BACKEND=chattts``
   (torch.compile is ChatTTS's path) — warm-up (worker ready) time, jobs/s, and graphs compiled while
   serving (``ttsq_compile_recompiles_total``; "absent" if the worker does not export it).
5. ``realtime`` (:mod:`bench.listening.realtime`): real-time streaming capacity — N listeners playing streams from their
   first byte, ttsq (workers on ``--e2e-backend``) beside a server running ChatTTS's own ``infer(stream=True)``, both
   on the GPU — success, first audio p50/p99, RTF p99, underruns, and the capacity (the largest N with success 1.00,
   first audio p99 ≤ 1 s, RTF p99 ≤ 1); the realtime issue asks for ≥ 256 streams, first audio p99 ≤ 300 ms and
   no underrun on an H200 (full-size).

``results.json`` and ``results.md`` (:mod:`bench.gpu.report`) are rewritten after the checkpoint and
after every phase, so a run cut off anywhere keeps what finished; each phase's own JSON is
rewritten after every measurement. Without a GPU (``--device cpu``, or ``auto`` on a machine
without ``nvidia-smi``) the run is a **dry run on CPU**, labelled so in every output. Every process
this run starts carries ``TTSQ_BENCH_GPU_RUN=<run id>`` in its environment, so whatever a killed
phase left behind is found and ended (here at the end of the phase, or by the next run if this one
was itself killed). ``scripts/gpu_run.sh`` runs this on a bare GPU machine; see ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.gpu import report as gpu_report
from bench.interrupt import Interrupted, on_stop_signals, restore
from bench.machine import cpu_model

DEFAULT_OUT = ROOT / "var" / "bench-gpu"
CHECKPOINTS = {"full": ROOT / "var" / "full-random-checkpoint", "tiny": ROOT / "var" / "tiny-checkpoint"}
PHASES = ("engine", "decoder", "e2e", "compile", "realtime")
WEIGHTS = {"engine": 0.12, "decoder": 0.15, "e2e": 0.32, "compile": 0.25, "realtime": 0.16}
"""How the budget left after the checkpoint is shared out; what a phase leaves unused goes to the later ones."""
MIN_PHASE_S = {"engine": 20.0, "decoder": 20.0, "e2e": 40.0, "compile": 40.0, "realtime": 40.0}
E2E_BACKENDS = ("ttsq", "chattts", "auto")
STOP_GRACE_S = 20.0
"""How long a phase told to stop (SIGTERM) has to write its results and stop its stacks before SIGKILL."""
MARKER = "TTSQ_BENCH_GPU_RUN"
RUNS_FILE = Path(tempfile.gettempdir()) / "ttsq-bench-gpu-runs"
"""Run ids of ``bench.gpu`` runs on this machine, so a later run can end what a killed one left running."""
OUTPUT_FILES = ("results.json", "results.md", *(f"{phase}.json" for phase in PHASES), "realtime.md", "process_logs.txt")
T0 = time.monotonic()


@dataclass(frozen=True)
class Profile:
    tokens: int
    batches: str
    clients: str
    max_batches: str
    window_s: float
    drain_s: float
    reps: int
    model: str
    streams: str
    """The realtime phase's concurrencies N."""


FULL = Profile(
    tokens=256,
    batches="1,8,32,64,128,256",
    clients="64,256",
    max_batches="auto,8,1",
    window_s=30,
    drain_s=12,
    reps=2,
    model="full",
    streams="16,64,128,256,320",
)
QUICK = Profile(
    tokens=24,
    batches="1,4,8,16",
    clients="4,16",
    max_batches="auto,8,1",
    window_s=4,
    drain_s=10,
    reps=1,
    model="tiny",
    streams="1,2",
)
"""``--quick``: a smoke run of the whole benchmark (the tiny checkpoint, short windows), a few minutes on a CPU."""


def log(message: str) -> None:
    print(f"[bench.gpu {time.strftime('%H:%M:%S')} +{time.monotonic() - T0:5.1f}s] {message}", flush=True)


# ---- this run's processes ----------------------------------------------------------------------


def marked_pids(value_prefix: str) -> list[int]:
    """Processes whose environment holds ``TTSQ_BENCH_GPU_RUN=<value starting with value_prefix>`` (never this one)."""
    needle = f"{MARKER}={value_prefix}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(needle) for item in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def kill_marked(value_prefix: str) -> list[str]:
    """SIGKILL every process marked with ``value_prefix`` (twice over, for children started meanwhile); their names."""
    killed = []
    for _ in range(2):
        for pid in marked_pids(value_prefix):
            name = "?"
            with contextlib.suppress(OSError):
                name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(f"{pid} {name[:100]}")
        time.sleep(0.2)
    return killed


def _alive(run_id: str) -> bool:
    pid = run_id.split("-", 1)[0]
    try:
        return b"bench.gpu" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def cleanup_stale_runs(own: str | None = None) -> None:
    """End what earlier ``bench.gpu`` runs on this machine left behind when they were killed; register ``own``."""
    runs = RUNS_FILE.read_text().split() if RUNS_FILE.exists() else []
    keep = []
    for run_id in runs:
        if _alive(run_id):
            keep.append(run_id)
            continue
        killed = kill_marked(f"{run_id}/")
        if killed:
            log(f"ended {len(killed)} process(es) left by the killed run {run_id}: {'; '.join(killed)}")
    if own:
        keep.append(own)
    with contextlib.suppress(OSError):
        RUNS_FILE.write_text("".join(f"{run_id}\n" for run_id in keep))


def unregister(run_id: str) -> None:
    with contextlib.suppress(OSError):
        if RUNS_FILE.exists():
            RUNS_FILE.write_text("".join(f"{r}\n" for r in RUNS_FILE.read_text().split() if r != run_id))


def run_limited(name: str, cmd: list[str], limit_s: float, marker: str) -> dict[str, Any]:
    """Run ``cmd`` in its own process group for at most ``limit_s``: then SIGTERM (it writes what it has and
    stops what it started), and ``STOP_GRACE_S`` later SIGKILL for every process carrying its ``marker``.
    SIGTERM or SIGINT to this process stops the phase the same way; the record then says ``interrupted``."""
    shown = shlex.join(cmd).replace(sys.executable, "python")
    log(f"{name}: {shown}  (limit {limit_s:.0f}s)")
    env = os.environ | {MARKER: marker, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    status, interrupted = "ok", ""
    try:
        rc = proc.wait(timeout=max(1.0, limit_s))
        if rc != 0:
            status = f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        status = f"timeout: stopped at its {limit_s:.0f}s limit"
        log(f"{name}: TIMEOUT after {limit_s:.0f}s, stopping it")
    except Interrupted as exc:
        interrupted = str(exc)
        status = f"interrupted ({exc})"
        log(f"{name}: {status}, stopping it")
    finally:
        handlers = on_stop_signals(signal.SIG_IGN)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(STOP_GRACE_S)
        left = kill_marked(marker)
        if left:
            log(f"{name}: ended {len(left)} process(es) it left running: {'; '.join(left)}")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        restore(handlers)
    record: dict[str, Any] = {
        "status": status,
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "limit_s": round(limit_s, 1),
    }
    if interrupted:
        record["interrupted"] = interrupted
    return record


# ---- GPU utilisation -----------------------------------------------------------------------------


class GpuSampler:
    """GPU utilisation and memory every ``period_s``: NVML (``pynvml``, from nvidia-ml-py), else ``nvidia-smi``.

    NVML's utilisation is the share of the last sample period in which a kernel was running: the
    GPU's busy fraction. Samples carry ``time.monotonic()``, which the phases record too.
    """

    def __init__(self, period_s: float = 0.2) -> None:
        self.period_s = period_s
        self.samples: list[tuple[float, float, float]] = []
        self.source: str | None = None
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._smi: subprocess.Popen[str] | None = None

    def start(self, env: dict[str, str]) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.source = "NVML"
            self._thread = threading.Thread(target=self._nvml, args=(pynvml, handle), daemon=True)
        except Exception as exc:  # noqa: BLE001 - no NVML (no GPU, or no nvidia-ml-py): try nvidia-smi
            self.error = f"NVML: {type(exc).__name__}: {exc}"
            smi = shutil.which("nvidia-smi")
            if smi is None:
                self.error += "; no nvidia-smi"
                return
            cmd = [
                smi,
                "--query-gpu=utilization.gpu,memory.used",
                "--format=csv,noheader,nounits",
                f"--loop-ms={int(self.period_s * 1000)}",
            ]
            self._smi = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            self.source = "nvidia-smi"
            self._thread = threading.Thread(target=self._read_smi, daemon=True)
        self._thread.start()

    def _nvml(self, nvml: Any, handle: Any) -> None:
        while not self._stop.wait(self.period_s):
            try:
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                used = float(nvml.nvmlDeviceGetMemoryInfo(handle).used) / 2**20
            except Exception as exc:  # noqa: BLE001
                self.error = f"NVML: {type(exc).__name__}: {exc}"
                return
            self.samples.append((time.monotonic(), util, used))

    def _read_smi(self) -> None:
        assert self._smi is not None and self._smi.stdout is not None
        for line in self._smi.stdout:
            with contextlib.suppress(ValueError):
                util, used = (float(x) for x in line.split(",")[:2])
                self.samples.append((time.monotonic(), util, used))

    def stop(self) -> None:
        self._stop.set()
        if self._smi is not None and self._smi.poll() is None:
            self._smi.terminate()
            self._smi.wait(5)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        rows = [s for s in self.samples if t0 <= s[0] <= t1]
        if not rows:
            return {"gpu_util_mean": None, "gpu_mem_used_max_mib": None, "gpu_samples": 0}
        return {
            "gpu_util_mean": round(statistics.fmean(r[1] for r in rows), 1),
            "gpu_mem_used_max_mib": round(max(r[2] for r in rows)),
            "gpu_samples": len(rows),
        }

    def info(self) -> dict[str, Any]:
        return {"source": self.source, "samples": len(self.samples), "error": self.error if not self.samples else ""}


# ---- the machine -----------------------------------------------------------------------------------


def _nvidia_smi(query: str) -> list[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def detect_device() -> str:
    return "cuda" if _nvidia_smi("name") else "cpu"


def machine_info(device: str) -> dict[str, Any]:
    machine: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform()}
    machine.update(gpu=None, driver=None)
    if device.startswith("cuda"):
        rows = _nvidia_smi("name,driver_version,memory.total")
        if rows:
            name, driver, memory = (x.strip() for x in rows[0].split(",")[:3])
            machine.update(gpu=name, driver=driver, gpu_memory=memory, gpus=len(rows))
    return machine


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in (
        "torch",
        "torchaudio",
        "transformers",
        "tokenizers",
        "chattts",
        "vocos",
        "numpy",
        "fastapi",
        "uvicorn",
        "redis",
        "nvidia-ml-py",
    ):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def model_name(path: Path) -> str:
    try:
        return str(json.loads((path / "ttsq-model.json").read_text()).get("name", path.name))
    except (OSError, ValueError):
        return path.name


# ---- the run -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="ttsq on a GPU: ChatTTS's loop and ttsq's decoder alone, the service end to end, torch.compile; "
        "each phase time-boxed.",
        epilog="Defaults not given on the command line come from the profile: the full one, or --quick.",
    )
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--budget-s", type=float, default=780.0, help="the whole run, checkpoint included")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder (default var/bench-gpu)")
    parser.add_argument("--model", help="full (built when missing), tiny, or a checkpoint directory")
    parser.add_argument("--device", default="auto", help="cuda, cpu (a dry run), or auto: cuda when nvidia-smi sees a GPU")
    parser.add_argument("--batches", help="engine batch sizes (1,8,32,64,128,256)")
    parser.add_argument("--clients", help="closed-loop clients per end-to-end window (64,256)")
    parser.add_argument("--max-batches", help="MAX_BATCH values of the e2e phase, measured in this order (auto,8,1)")
    parser.add_argument("--tokens", type=int, help="audio tokens per item and job, forced (256)")
    parser.add_argument("--streams", help="concurrent listeners N of the realtime phase (16,64,128,256,320)")
    parser.add_argument("--reps", type=int, help="engine repetitions per batch size (2)")
    parser.add_argument("--window-s", type=float, help="closed-loop window per MAX_BATCH and client count (30)")
    parser.add_argument("--drain-s", type=float, help="after a window, how long running jobs may still finish (12)")
    parser.add_argument(
        "--min-jobs",
        type=int,
        help="jobs every client completes whatever the window (default: 1 on a dry run, so a slow CPU never leaves a "
        "window empty; 0 on a GPU, where a window without a completed job is a stall to report)",
    )
    parser.add_argument("--ready-timeout-s", type=float, default=300.0, help="longest wait for a worker's /readyz")
    parser.add_argument(
        "--e2e-backend",
        choices=E2E_BACKENDS,
        default="ttsq",
        help="ENGINE_BACKEND of the e2e phase's workers (ttsq: the decoder, CUDA graphs on); the compile phase always runs "
        "chattts, whose loop COMPILE=true compiles",
    )
    for phase in PHASES:
        parser.add_argument(f"--{phase}-max-s", type=float, help=f"cap on the {phase} phase's time limit")
    parser.add_argument("--quick", action="store_true", help="smoke profile: tiny checkpoint, 24 tokens, short windows")
    args = parser.parse_args(argv)
    profile = QUICK if args.quick else FULL
    for key in ("tokens", "batches", "clients", "max_batches", "window_s", "drain_s", "reps", "model", "streams"):
        if getattr(args, key) is None:
            setattr(args, key, getattr(profile, key))
    args.phase_list = [p.strip() for p in args.phases.split(",") if p.strip()]
    if unknown := set(args.phase_list) - set(PHASES):
        parser.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    args.device = detect_device() if args.device == "auto" else args.device
    if args.min_jobs is None:
        args.min_jobs = 0 if args.device.startswith("cuda") else 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m bench.gpu " + shlex.join(sys.argv[1:] if argv is None else argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES:  # never leave an older run's file beside this run's
        (out / name).unlink(missing_ok=True)
    end = T0 + args.budget_s
    run_id = f"{os.getpid()}-{int(time.time())}"
    cleanup_stale_runs(own=run_id)
    dry_run = not args.device.startswith("cuda")
    results: dict[str, Any] = {
        "command": command.strip(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "dry_run": dry_run,
        "device": args.device,
        "machine": machine_info(args.device),
        "versions": versions(),
        "tokens": args.tokens,
        "e2e_backend": args.e2e_backend,
        "budget_s": args.budget_s,
        "phases_planned": args.phase_list,
        "phases": {},
    }
    results["label"] = "dry run on CPU (not a GPU result)" if dry_run else f"GPU run on {results['machine'].get('gpu')}"
    sampler = GpuSampler()
    sampler.start(dict(os.environ, **{MARKER: f"{run_id}/sampler/"}))
    log(
        f"run {run_id}: {'DRY RUN ON CPU' if dry_run else results['machine'].get('gpu')}, budget {args.budget_s:.0f}s, "
        f"phases {args.phase_list}, GPU sampling {sampler.source or 'off'}; results in {out}"
    )
    previous = on_stop_signals()
    ok = True

    def write(after: str) -> None:
        results["elapsed_s"] = round(time.monotonic() - T0, 1)
        results["gpu_sampler"] = sampler.info()
        _annotate_gpu(results, sampler)
        if after in results["phases"]:
            results["phases"][after]["written_at"] = f"+{results['elapsed_s']:.0f}s"
        gpu_report.write(out, results)
        log(f"results written after {after}: {out / 'results.md'}")

    try:
        model = _checkpoint(args, results, end, run_id)
        write("checkpoint")
        _raise_if_interrupted(results["phases"]["checkpoint"])
        for index, phase in enumerate(args.phase_list):
            left = end - time.monotonic()
            remaining = args.phase_list[index:]
            limit = left * WEIGHTS[phase] / sum(WEIGHTS[p] for p in remaining)
            if index == len(args.phase_list) - 1:
                limit = left - 5
            cap = getattr(args, f"{phase}_max_s")
            limit = min(limit, cap) if cap else limit
            if model is None or limit < MIN_PHASE_S[phase]:
                reason = "no checkpoint" if model is None else f"{left:.0f}s left, {limit:.0f}s for this phase"
                results["phases"][phase] = {"status": f"skipped: {reason}"}
                ok = False
            else:
                results["phases"][phase] = record = _run_phase(phase, args, model, limit, out, f"{run_id}/{phase}/")
                ok = ok and record["status"] == "ok"
            write(phase)
            _raise_if_interrupted(results["phases"][phase])
    except Interrupted as exc:
        results["interrupted"] = str(exc)
        log(f"interrupted ({exc}): writing what was measured")
        ok = False
    finally:
        kill_marked(f"{run_id}/")
        sampler.stop()
        unregister(run_id)
        shutil.rmtree(_tmp(run_id), ignore_errors=True)
        restore(previous)
        write("the run")
    log(f"done in {time.monotonic() - T0:.0f}s of {args.budget_s:.0f}s")
    print((out / "results.md").read_text(), flush=True)
    return 0 if ok else 1


def _raise_if_interrupted(record: dict[str, Any]) -> None:
    if record.get("interrupted"):
        raise Interrupted(record["interrupted"])


def _checkpoint(args: argparse.Namespace, results: dict[str, Any], end: float, run_id: str) -> Path | None:
    """The checkpoint directory: ``full``/``tiny`` are built (or reused after a hash check) by the project's builder."""
    if args.model in CHECKPOINTS:
        path = CHECKPOINTS[args.model]
        cmd = [sys.executable, "scripts/make_tiny_checkpoint.py", str(path), "--size", args.model]
        record = run_limited("checkpoint", cmd, min(300.0, max(30.0, end - time.monotonic() - 60)), f"{run_id}/checkpoint/")
    else:
        path = Path(args.model).resolve()
        record = {"status": "ok" if (path / "asset").is_dir() else f"failed: {path} is not a checkpoint directory", "seconds": 0.0}
    record["path"] = str(path)
    results["phases"]["checkpoint"] = record
    results["model"] = {"path": str(path), "name": model_name(path), "size_arg": args.model}
    return path if record["status"] == "ok" else None


def _run_phase(phase: str, args: argparse.Namespace, model: Path, limit: float, out: Path, marker: str) -> dict[str, Any]:
    own_budget = f"{max(5.0, limit - 12):.0f}"  # the phase ends itself before its limit; the limit is the backstop
    common = ["--model", str(model), "--device", args.device, "--tokens", str(args.tokens), "--budget-s", own_budget]
    path = out / f"{phase}.json"
    if phase in ("engine", "decoder"):
        cmd = [sys.executable, "-m", "bench.gpu.engine", *common, "--batches", args.batches, "--reps", str(args.reps)]
        if phase == "decoder":
            cmd += ["--engine", "ttsq", "--cuda-graphs"]
    elif phase == "realtime":
        cmd = [
            sys.executable, "-m", "bench.listening.realtime", *common,
            "--streams", args.streams,
            "--window-s", str(args.window_s),
            "--timeout-s", str(max(30.0, args.window_s)),
            "--ready-timeout-s", str(args.ready_timeout_s),
            "--ttsq-env", f"ENGINE_BACKEND={args.e2e_backend}",
            "--results", str(out / "realtime.md"),
            "--tmp", str(_tmp(marker.split("/")[0]) / phase),
        ]  # fmt: skip
    else:
        cmd = [
            sys.executable, "-m", "bench.gpu.e2e", *common,
            "--max-batches", "auto" if phase == "compile" else args.max_batches,
            "--clients", args.clients,
            "--window-s", str(args.window_s),
            "--drain-s", str(args.drain_s),
            "--min-jobs", str(args.min_jobs),
            "--ready-timeout-s", str(args.ready_timeout_s),
            "--engine-backend", "chattts" if phase == "compile" else args.e2e_backend,
            "--tmp", str(_tmp(marker.split("/")[0]) / phase),
        ]  # fmt: skip
        if phase == "compile":
            cmd.append("--compile")
    cmd += ["--out", str(path)]
    record = run_limited(phase, cmd, limit, marker)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        data = {}
        record["error"] = f"no results from the phase: {exc}"
        if record["status"] == "ok":
            record["status"] = "failed (no results)"
    tails = [stack.pop("log_tail") for stack in data.get("stacks", []) if "log_tail" in stack]
    tails += [str(stack["error"]) for stack in data.get("stacks", []) if "error" in stack]
    if tails:
        with (out / "process_logs.txt").open("a") as logs:
            logs.write(f"===== {phase} =====\n" + "\n".join(tails) + "\n")
    failed_stacks = [s["max_batch"] for s in data.get("stacks", []) if "error" in s]
    skipped = len(data.get("skipped", [])) + len(data.get("skipped_batches", []))
    if record["status"] == "ok" and (failed_stacks or skipped or data.get("error") or not data.get("complete")):
        if failed_stacks:
            why = f"MAX_BATCH={','.join(failed_stacks)} failed"
        elif data.get("error") or not data.get("complete"):
            why = str(data.get("error") or "incomplete")
        else:
            why = f"{skipped} measurement(s) skipped for lack of time"
        record["status"] = f"partial: {why[:200]}"
    record["data"] = data
    return record


def _tmp(run_id: str) -> Path:
    """This run's process logs and Redis files (their tails are kept in ``process_logs.txt``)."""
    return Path(tempfile.gettempdir()) / f"ttsq-bench-gpu-{run_id}"


def _annotate_gpu(results: dict[str, Any], sampler: GpuSampler) -> None:
    """Pair every engine or decoder call and end-to-end window with the GPU samples taken meanwhile."""
    for phase in PHASES:
        data = (results["phases"].get(phase) or {}).get("data") or {}
        for row in [*data.get("runs", []), *data.get("summary", [])]:
            if "t0" in row:
                row.update(sampler.window(row["t0"], row["t1"]))
        for window in data.get("windows", []):
            if "mono" in window:
                window.update(sampler.window(*window["mono"]))


if __name__ == "__main__":
    sys.exit(main())
