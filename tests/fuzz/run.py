"""Run schemathesis's command line against a live deployment, and ``make fuzz`` (``python -m tests.fuzz.run``).

The CLI fetches ``/openapi.json`` from the running API and sends every request over HTTP to the real
uvicorn; nothing is served in-process. The tests in ``test_fuzz_api.py`` and ``make fuzz`` share
:func:`fuzz`, so the long run differs from the bounded one only in how many examples it draws and
its seed. Besides its own report, each run writes schemathesis's JSON and NDJSON reports, from which
:class:`Outcome` counts the test cases and each check's passes and failures (the CLI prints only the
failures), which ``make fuzz`` writes to ``bench/results/fuzz.md``.

Both also send the hostile-JSON corpus (:mod:`tests.fuzz.hostile`: what schemathesis never sends) to every
route of each API, through :func:`hostile_run`: the fixed corpus and some drawn combinations in ``make test``,
many more in ``make fuzz``; no answer may be a 5xx or a dropped connection, every refusal must name its field,
and the API may log nothing above WARNING meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.fuzz import hostile
from tests.fuzz.deployment import Deployment, Target, deployment
from tests.support.service import ROOT

CHECKS = "all"
"""Every check schemathesis has: not_a_server_error, status_code_conformance, content_type_conformance,
response_headers_conformance, response_schema_conformance, negative_data_rejection, missing_required_header,
unsupported_method, allow_header_conformance, use_after_free, ensure_resource_availability, ignored_auth and
the others, plus this project's (:mod:`tests.fuzz.hooks`)."""

REPLACED_CHECKS = "positive_data_acceptance,use_after_free"
"""Run as :func:`tests.fuzz.hooks.schema_valid_requests_are_served`, the same check less the refusals that depend
on the registry or on the cleaned text, and :func:`tests.fuzz.hooks.deleted_resources_are_gone`, the same check
less a cancelled task's status (``DELETE /v1/tts/tasks/{id}`` cancels; the record stays readable)."""

REQUEST_TIMEOUT_S = 120
"""An audio stream or an OpenAI speech request lasts until its job is synthesised, behind everything queued before it."""

MAX_RESPONSE_S = REQUEST_TIMEOUT_S
"""``--checks all`` includes ``max_response_time`` (10 s unless told). A speech request answers when the worker has
synthesised it, which on two shared cores behind a fuzzer's queue took 15 s once; latency is measured by the
benchmarks, so here the check only asserts that every answer comes within the request timeout (no hang)."""

CONFIG = Path(__file__).with_name("schemathesis.toml")
"""How long a stateful scenario may grow, and why."""

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@dataclass(frozen=True)
class Outcome:
    """One CLI run: its exit status, report (the key masked), and what its JSON and NDJSON reports counted."""

    returncode: int
    output: str
    seconds: float
    command: list[str]
    report: dict[str, Any] = field(default_factory=dict)
    """schemathesis's JSON report (test cases, failures by kind, warnings, phases); empty if it wrote none."""
    checks: dict[str, Counter[str]] = field(default_factory=dict)
    """Check name → how many test cases it passed (``success``) and failed (``failure``), from the NDJSON report."""

    @property
    def passed(self) -> bool:
        return self.returncode == 0

    @property
    def cases(self) -> int:
        return int(self.report.get("test_cases", {}).get("generated", 0))

    @property
    def failures(self) -> int:
        """Failing test cases (0 when green)."""
        cases = self.report.get("test_cases", {})
        return int(cases.get("with_failures", 0)) + int(cases.get("errored", 0))

    @property
    def summary(self) -> str:
        """schemathesis's count of test cases (``1127 generated, 1127 passed, 36 skipped``) and the time it took."""
        counts = re.search(r"^\s*(\d+ generated.*)$", self.output, re.MULTILINE)
        return f"{counts.group(1) if counts else 'no count'} in {self.seconds:.0f}s"


def tally_checks(ndjson: Path) -> dict[str, Counter[str]]:
    """Each check's results over every test case of a run, read from schemathesis's NDJSON event stream."""
    tally: dict[str, Counter[str]] = {}
    if not ndjson.exists():
        return tally
    with ndjson.open(encoding="utf-8") as events:
        for line in events:
            if '"ScenarioFinished"' not in line[:40]:
                continue
            recorder = json.loads(line)["ScenarioFinished"].get("recorder", {})
            for results in recorder.get("checks", {}).values():
                for result in results:
                    tally.setdefault(result["name"], Counter())[result["status"]] += 1
    return dict(sorted(tally.items()))


def command(target: Target, *, max_examples: int, seed: int | None, workers: int, phases: str | None = None) -> list[str]:
    args = [
        str(SCHEMATHESIS),
        "--config-file",
        str(CONFIG),
        "run",
        f"{target.url}/openapi.json",
        "--checks",
        CHECKS,
        "--exclude-checks",
        REPLACED_CHECKS,
        "--max-examples",
        str(max_examples),
        "--workers",
        str(workers),
        "--request-timeout",
        str(REQUEST_TIMEOUT_S),
        "--max-response-time",
        str(MAX_RESPONSE_S),
        "--no-color",
        "--generation-database",
        "none",
        "--suppress-health-check",
        "too_slow",  # a real server on two shared cores is slower than hypothesis's in-process expectations
    ]
    if seed is not None:
        args += ["--seed", str(seed)]
    if phases is not None:
        args += ["--phases", phases]
    if target.key is not None:
        args += ["-H", f"Authorization: Bearer {target.key}"]
    return args


WORKERS = 1
"""Schemathesis workers (threads of one process). One: with two, a clean-clone ``make test`` on 2026-12-05 failed on a
Runtime Error of the tool's own, not a finding about the API: ``SystemError: AST constructor recursion depth mismatch``
from ``ast.parse`` in Hypothesis's description of a filter lambda while building ``GET /v1/admin/dead-letters``'s
coverage cases, a CPython 3.11 error reported from threaded programs (python/cpython#106905). One thread leaves no
second parse to interleave with."""


def fuzz(
    target: Target, *, max_examples: int, seed: int | None = None, workers: int = WORKERS, phases: str | None = None
) -> Outcome:
    """Run the CLI against ``target``; its report is the outcome's output (the key is masked)."""
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.fuzz.hooks", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="ttsq-fuzz-") as folder:  # the CLI keeps a cache folder in its working directory
        cwd = Path(folder)
        args = command(target, max_examples=max_examples, seed=seed, workers=workers, phases=phases)
        args += ["--report", "json,ndjson", "--report-json-path", str(cwd / "report.json")]
        args += ["--report-ndjson-path", str(cwd / "events.ndjson")]
        started = time.monotonic()
        result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - started
        report = json.loads((cwd / "report.json").read_text()) if (cwd / "report.json").exists() else {}
        checks = tally_checks(cwd / "events.ndjson")
    output = result.stdout + result.stderr
    shown = [("Bearer <admin key>" if target.key and arg.endswith(target.key) else arg) for arg in args[: args.index("--report")]]
    if target.key:
        output = output.replace(target.key, "<admin key>")
    return Outcome(result.returncode, output, seconds, shown, report, checks)


HEALTHZ_MAX_S = 1.0
"""Slowest ``/healthz`` answer allowed while the hostile corpus runs (``make fuzz`` only; ``make test`` asserts no
timing)."""

RSS_BOUND_MB = 300
"""Most resident memory the API process may reach while the hostile corpus runs (``make fuzz``): it starts near
100 MB and peaked at 117 MB (bench/results/hostile.md); a 1 Hz recording header alone once grew it by 22 GB."""


@dataclass
class Watch:
    """``/healthz`` answered and the API process's memory sampled every ``interval_s`` from a thread, while a run lasts."""

    url: str
    pid: int
    interval_s: float = 0.2
    probes: int = 0
    slowest_s: float = 0.0
    failed_probes: int = 0
    rss_start_mb: float = 0.0
    rss_peak_mb: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _rss_mb(self) -> float:
        process = psutil.Process(self.pid)
        return float(sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])) / 2**20

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    ok = client.get(f"{self.url}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                self.probes += 1
                self.failed_probes += 0 if ok else 1
                self.rss_peak_mb = max(self.rss_peak_mb, self._rss_mb())
                self._stop.wait(self.interval_s)

    def __enter__(self) -> Watch:
        self.rss_start_mb = self.rss_peak_mb = self._rss_mb()
        self._thread = threading.Thread(target=self._run, name="watch-healthz", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def held(self) -> bool:
        return self.failed_probes == 0 and self.slowest_s < HEALTHZ_MAX_S and self.rss_peak_mb <= RSS_BOUND_MB


@dataclass(frozen=True)
class HostileOutcome:
    """The hostile corpus against one API: its answers, what the API logged above WARNING meanwhile, the bodies it was
    never sent in full, and (``make fuzz``) how ``/healthz`` and the process's memory held up."""

    outcome: hostile.Outcome
    fixed: int
    drawn: int
    logged: list[str]
    seconds: float
    abuse: int = 0
    unsent: list[hostile.Unsent] = field(default_factory=list)
    watch: Watch | None = None

    @property
    def unsent_problems(self) -> list[str]:
        return [
            f"POST {u.path} with a body never finished -> {u.status}, connection {'closed' if u.closed else 'held'}"
            for u in self.unsent
            if u.status not in (401, 403, 408) or not u.closed
        ]

    @property
    def passed(self) -> bool:
        held = self.watch is None or self.watch.held
        return (
            not self.outcome.problems and self.outcome.server_errors == 0 and not self.logged and not self.unsent_problems and held
        )


def hostile_run(deployed: Deployment, target: Target, *, draws: int, seed: int, watch: bool = False) -> HostileOutcome:
    """Send the fixed corpus, the costly inputs and ``draws`` drawn cases per operation with a body to ``target`` (with
    its key), then declare bodies it never finishes; ``watch``: probe ``/healthz`` and sample the API's memory all along."""
    before = len(deployed.service.log(target.process))
    headers = {"Authorization": f"Bearer {target.key}"} if target.key else {}

    async def send() -> tuple[hostile.Outcome, int, int, int]:
        async with httpx.AsyncClient(base_url=target.url, timeout=REQUEST_TIMEOUT_S) as client:
            spec = (await client.get("/openapi.json", headers=headers)).raise_for_status().json()
            fixed, abuse, drawn = hostile.cases(spec), hostile.abuse_cases(spec), hostile.random_cases(spec, draws, seed)
            return await hostile.send(client, fixed + abuse + drawn, key=target.key), len(fixed), len(drawn), len(abuse)

    watcher = Watch(target.url, deployed.service.named[target.process].pid) if watch else None
    started = time.monotonic()
    with watcher if watcher is not None else contextlib.nullcontext():
        outcome, fixed, drawn, abuse = asyncio.run(send())
        port = httpx.URL(target.url).port
        assert port is not None
        unsent = hostile.unsent_bodies("127.0.0.1", port, target.key)
        if target.key is not None:  # and without it: refused before the body, never waited for
            unsent += hostile.unsent_bodies("127.0.0.1", port, None)
    seconds = time.monotonic() - started
    logged = hostile.log_lines_above_warning(deployed.service.log(target.process)[before:].decode("utf-8", "replace"))
    return HostileOutcome(outcome, fixed, drawn, logged, seconds, abuse, unsent, watcher)


def hostile_markdown(target: Target, result: HostileOutcome) -> list[str]:
    """The hostile corpus's section of ``bench/results/fuzz.md`` for one target."""
    outcome = result.outcome
    statuses = ", ".join(f"{status}: {count}" for status, count in sorted(outcome.statuses.items()))
    unsent = ", ".join(f"{u.path} {u.status}{'' if u.closed else ' (held)'}" for u in result.unsent)
    lines = [
        f"## hostile corpus, {target.name}: {'passed' if result.passed else 'FAILED'}",
        "",
        f"- requests: {outcome.sent} ({result.fixed} of the fixed corpus, {result.abuse} costly inputs, {result.drawn} drawn) "
        f"in {result.seconds:.0f}s, to every operation of the schema",
        f"- answers by status: {statuses}",
        f"- server errors (5xx or a dropped connection): {outcome.server_errors}",
        f"- answers breaking a rule (not refused, field not named, status not documented): {len(outcome.problems)}",
        f"- API log lines above WARNING meanwhile: {len(result.logged)}",
        f"- bodies declared and never finished: {unsent}",
    ]
    if result.watch is not None:
        watch = result.watch
        lines += [
            f"- /healthz meanwhile: {watch.probes} probes, slowest {watch.slowest_s * 1000:.0f} ms (bound "
            f"{HEALTHZ_MAX_S * 1000:.0f} ms), {watch.failed_probes} failed",
            f"- API resident memory: {watch.rss_start_mb:.0f} MB at the start, {watch.rss_peak_mb:.0f} MB at most "
            f"(bound {RSS_BOUND_MB} MB)",
        ]
    shown = [*outcome.problems[:20], *result.logged[:20], *result.unsent_problems]
    if shown:
        lines += ["", "```", *shown, "```"]
    return [*lines, ""]


def _cli_section(output: str, title: str) -> str:
    """One ``=== title ===`` section of the CLI's report (FAILURES, WARNINGS, SUMMARY), or ''."""
    found = re.search(rf"^=+ {title} =+$\n(.*?)(?=^=+ [A-Z0-9 ,]+ =+$|\Z)", output, re.MULTILINE | re.DOTALL)
    return found.group(1).strip() if found else ""


def markdown(target: Target, outcome: Outcome) -> list[str]:
    """The summary of one target's run for ``bench/results/fuzz.md``: verdict, cases, failures, each check."""
    verdict = "passed" if outcome.passed else "FAILED"
    phases = outcome.report.get("phases") or {}
    operations = outcome.report.get("operations") or {}
    phase_states = ", ".join(f"{name} {state['status']}" for name, state in phases.items())
    lines = [
        f"## {target.name}: {verdict}",
        "",
        "```",
        "$ " + " ".join(outcome.command),
        "```",
        "",
        f"- operations tested: {operations.get('tested', '?')} of {operations.get('total', '?')}",
        f"- phases: {phase_states}",
        f"- test cases: {outcome.cases} generated, {outcome.failures} with failures ({outcome.summary})",
        f"- unique failures: {outcome.report.get('test_cases', {}).get('unique_failures', '?')}",
        "",
        "| check | passed | failed |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {counts['success']} | {counts['failure']} |" for name, counts in outcome.checks.items()]
    for group in outcome.report.get("failures", []):
        lines.append(f"\nfailure {group['code']} {group['title']}: {group['count']} ({', '.join(group['operations'])})")
    warnings = _cli_section(outcome.output, "WARNINGS")
    if warnings:
        lines += ["", "schemathesis's warnings (not failures):", "", "```", warnings, "```"]
    failures = _cli_section(outcome.output, "FAILURES")
    if failures:
        lines += ["", "```", failures, "```"]
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    """``make fuzz``: both deployments (keys optional, then ``AUTH=on`` with an admin key), many examples, a fresh seed."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__)
    parser.add_argument("--max-examples", type=int, default=100, help="examples per operation and phase")
    parser.add_argument("--seed", type=int, help="reproduce a run (default: a fresh one, printed in the report)")
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument(
        "--hostile-draws", type=int, default=500, help="hostile-JSON bodies drawn per operation with a body (and the fixed corpus)"
    )
    parser.add_argument(
        "--hostile-only", action="store_true", help="skip schemathesis: only the hostile corpus (make fuzz-hostile)"
    )
    parser.add_argument("--output", type=Path, help="write the summary here (markdown: date, command, cases, each check)")
    parser.add_argument(
        "--logs", type=Path, default=ROOT / "var" / "fuzz", help="the CLI's full reports and, on failure, the processes' logs"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)

    from ttsq.inference.engines.checkpoint import build_tiny_checkpoint

    checkpoint = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    invocation = "python -m tests.fuzz.run " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.datetime.now(datetime.UTC)
    args.logs.mkdir(parents=True, exist_ok=True)
    for stale in args.logs.glob("*-deployment.log"):  # a passing run leaves none, so an old one would mislead
        stale.unlink()
    report = [
        "# Hostile corpus (`make fuzz-hostile`)" if args.hostile_only else "# API fuzzing (`make fuzz`)",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- command: `{invocation.strip()}`, seed {seed} (reproduce with `--seed {seed}`)",
    ]
    if not args.hostile_only:
        report.append(
            f"- examples per operation and phase: {args.max_examples}; schemathesis checks: {CHECKS} (positive_data_acceptance "
            "as schema_valid_requests_are_served, use_after_free as deleted_resources_are_gone), plus no_internal_details"
        )
    report += [
        f"- hostile corpus (`tests/fuzz/hostile.py`): the fixed corpus, the costly inputs and {args.hostile_draws} drawn bodies "
        "per operation with a body, on every operation of each API, then bodies declared and never finished; /healthz "
        f"probed every 0.2 s meanwhile (slowest allowed {HEALTHZ_MAX_S:g} s) and the API's memory sampled (at most "
        f"{RSS_BOUND_MB} MB)",
        "- deployment: redis-server, one worker on the tiny checkpoint, two API replicas "
        "(keys optional; AUTH=on with an admin key)",
        "",
    ]
    failed = False
    with tempfile.TemporaryDirectory(prefix="ttsq-fuzz-deploy-") as tmp, deployment(Path(tmp), checkpoint) as deployed:
        for target in () if args.hostile_only else (deployed.open, deployed.keyed):
            outcome = fuzz(target, max_examples=args.max_examples, seed=seed, workers=args.workers)
            slug = "keyed" if target.key else "open"
            (args.logs / f"{slug}.txt").write_text(outcome.output)
            print(f"{target.name}: {'passed' if outcome.passed else 'FAILED'}, {outcome.summary}", flush=True)
            if not outcome.passed:
                failed = True
                print(outcome.output, flush=True)
                (args.logs / f"{slug}-deployment.log").write_text(deployed.logs())
            report += markdown(target, outcome)
        for target in (deployed.open, deployed.keyed):
            result = hostile_run(deployed, target, draws=args.hostile_draws, seed=seed, watch=True)
            print(f"hostile corpus, {target.name}: {'passed' if result.passed else 'FAILED'}", flush=True)
            if not result.passed:
                failed = True
                (args.logs / f"hostile-{target.process}-deployment.log").write_text(deployed.logs())
            report += hostile_markdown(target, result)
    minutes = (datetime.datetime.now(datetime.UTC) - started).total_seconds() / 60
    report.insert(3, f"- wall time: {minutes:.1f} min; verdict: {'FAILED' if failed else 'passed'}")
    text = "\n".join(report)
    print(text, flush=True)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
