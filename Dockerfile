# ttsq images, one per process role (see deploy/README.md):
#   podman build --target api    -t ttsq-api .     # FastAPI + uvicorn, no torch, no ChatTTS
#   podman build --target worker -t ttsq-worker .  # CUDA PyTorch + ChatTTS + WeTextProcessing (runs on CPU too)
# `make image` builds both; `make image-check` builds them on a locally made Debian base and runs them.
#
# BASE_IMAGE needs python3 (3.11) with venv and CA certificates. The default is the official image,
# pinned by tag and digest: the index digest of python:3.11-slim-bookworm (Python 3.11.16) as pinned
# in several public Dockerfiles in September 2026, found with a code search on 2026-12-01. No registry
# is reachable from the machines this was written on, so it was never pulled here: verify it with
# `skopeo inspect docker://python:3.11-slim-bookworm` before relying on it. The local checks build on
# a Debian bookworm rootfs made with mmdebstrap instead (BASE_IMAGE=localhost/bookworm-py).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# ---- build stages: a virtual environment per role in /opt/venv --------------------------------------
# Every dependency comes as a wheel (pynini, hiredis, uvloop, httptools included), so no compiler is
# needed even here; nothing of these stages but /opt/venv reaches the final images.
FROM ${BASE_IMAGE} AS build-base
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/venv
WORKDIR /build

FROM build-base AS deps
# The requirement lists come from pyproject.toml's extras; the versions from the pinned constraints
# (the dev environment's, in which the test suite passes).
COPY pyproject.toml deploy/image/requirements.py deploy/image/constraints.txt ./

FROM deps AS api-build
RUN python3 requirements.py pyproject.toml api > requirements.txt \
 && /opt/venv/bin/pip install -c constraints.txt -r requirements.txt

FROM build-base AS worker-build
# torch and torchaudio first, as a matched pair (see the Makefile's install target), in a layer of
# their own that no change to pyproject.toml invalidates (it is ~7 GB). PyPI's default torch wheel
# for x86_64 is the CUDA build: it runs on a GPU node and on CPU alike.
ARG TORCH_VERSION=2.9.1
RUN /opt/venv/bin/pip install "torch==${TORCH_VERSION}" "torchaudio==${TORCH_VERSION}"
COPY --from=deps /build /build
RUN python3 requirements.py pyproject.toml worker > requirements.txt \
 && /opt/venv/bin/pip install -c constraints.txt -r requirements.txt

# ---- the source tree, byte-compiled ----------------------------------------------------------------
# The source tree runs from /app rather than a `pip install .`: app.py serves static/ from its own
# directory and settings.py resolves var/ from its own directory, so a site-packages install would
# lose the page and point the default caches inside site-packages. Bytecode is compiled here (same
# Python as the final stages): at run time the root filesystem may be read-only.
FROM build-base AS source
WORKDIR /app
# Every top-level module: pyproject.toml's py-modules is their one list, and a test holds the root's *.py files,
# the app's imports and that list equal (tests/deploy/test_images.py).
COPY *.py LICENSE ./
COPY ttsq ./ttsq
COPY static ./static
RUN python3 -m compileall -q /app

# ---- runtime base: the non-root user and the writable paths ------------------------------------------
FROM ${BASE_IMAGE} AS runtime-base
RUN groupadd --system --gid 10001 ttsq \
 && useradd --system --uid 10001 --gid ttsq --home-dir /home/ttsq --create-home --shell /usr/sbin/nologin ttsq \
 && mkdir -p /data/hf /data/cache /data/tiny-checkpoint \
 && chown -R ttsq:ttsq /data
# Every writable path is under /data (a volume in compose and Kubernetes, where the root filesystem
# is read-only) or /tmp. Weights are never baked in: MODEL=hub downloads into HF_HOME (mount a
# volume there), MODEL=/models/... reads a mounted directory. deploy/README.md says how to bake them
# into a derived image for air-gapped clusters.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HOME=/data/hf \
    CACHE_DIR=/data/cache \
    TINY_CHECKPOINT_DIR=/data/tiny-checkpoint
WORKDIR /app

# ---- api ---------------------------------------------------------------------------------------------
FROM runtime-base AS api
# The virtual environment before the code: a code change does not copy the dependencies again.
COPY --from=api-build /opt/venv /opt/venv
COPY --from=source /app /app
USER 10001:10001
EXPOSE 8000
# uvicorn stops accepting and finishes in-flight requests on SIGTERM.
STOPSIGNAL SIGTERM
# Liveness only (the process serves HTTP). /readyz (Redis reachable) is for orchestrators' readiness.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
# The command of ttsq.runtime.launch.api_command (tests/deploy checks they stay the same): uvicorn with the server's
# limits (WebSocket message size, no compression, header and idle timeouts, connection cap) from the settings.
CMD ["python", "api_server.py", "--host", "0.0.0.0", "--port", "8000"]

# ---- worker ------------------------------------------------------------------------------------------
FROM runtime-base AS worker
COPY --from=worker-build /opt/venv /opt/venv
COPY --from=source /app /app
# The probe server must be reachable from outside the container (the default is loopback only).
# PYTORCH_CUDA_ALLOC_CONF and torch's thread count are not set here: worker.py sets them from the
# CUDA_ALLOC_CONF and CPU_THREADS settings before torch loads.
ENV WORKER_HEALTH_HOST=0.0.0.0 \
    WORKER_HEALTH_PORT=8001
USER 10001:10001
EXPOSE 8001
# On SIGTERM the worker stops claiming and lets its batch finish within SHUTDOWN_GRACE_S (25 s by
# default): give it longer than that before SIGKILL (`podman stop -t 60`, terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# /healthz: the event loop ticks and no inference is past JOB_TIMEOUT_S (a Redis outage never fails
# it). The start period covers the model load: minutes for MODEL=hub, more with COMPILE=true.
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('WORKER_HEALTH_PORT', '8001'); sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status != 200)"]
CMD ["python", "worker.py"]
