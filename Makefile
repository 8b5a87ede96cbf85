# ttsq — run it with `make up`, test it with `make test`.
PYTHON_BASE ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
MODEL       ?= hub
WORKERS     ?= 1
PORT        ?= 8000

.PHONY: up test lint typecheck pytest install agent-clients chromium prometheus debian-redis tiny-checkpoint loadtest bench bench-quick clean

## Install everything into .venv (once; again when pyproject.toml changes).
# torch and torchaudio must come as a matched pair: ChatTTS imports torchaudio, and 2.9.1 is the
# newest pair whose torchaudio wheels load on these machines (the CUDA build runs on CPU too).
$(VENV)/.installed: pyproject.toml
	$(PYTHON_BASE) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.9.1 torchaudio==2.9.1
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

## Run Redis (embedded unless REDIS_URL is set), $(WORKERS) worker(s) and the API on 127.0.0.1:$(PORT).
up: install
	$(PY) scripts/up.py --model '$(MODEL)' --workers $(WORKERS) --port $(PORT)

## Lint, type-check and run every test (the same command CI runs).
test: install lint typecheck pytest

## ruff, and the layer rule: pyproject.toml [tool.importlinter] (HTTP and worker on top, the domain at the bottom).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

typecheck: install agent-clients
	$(VENV)/bin/mypy .
	cd integrations && ../var/agents-venv/bin/mypy --strict --explicit-package-bases livekit/plugins/ttsq/__init__.py ttsq_pipecat/__init__.py

## Two test processes (pytest-xdist), each taking whole files: a file's module fixtures (the chaos deployment) and
## its order stay in one process, and the second CPU core works while the first waits on a worker process.
PYTEST_PROCESSES ?= 2
pytest: install chromium prometheus debian-redis deploy-tools agent-clients
	$(VENV)/bin/pytest -n $(PYTEST_PROCESSES) --dist loadfile --durations=40

## LiveKit Agents' and Pipecat's own TTS clients in their own venv (var/agents-venv), with ttsq's plugins for them
## (integrations/, type-checked there against the frameworks), for tests/e2e/test_agent_clients.py.
agent-clients:
	scripts/install_agent_clients.sh

## Debian's chromium for the page tests (Playwright drives it; it never downloads a browser).
chromium:
	scripts/install_chromium.sh

## Debian's prometheus and promtool, for the alert unit tests and the real-Prometheus end-to-end test.
prometheus:
	scripts/install_prometheus.sh

## Debian's redis-server, built with TLS, for the Redis-over-TLS test (the bundled one has no TLS).
debian-redis:
	scripts/install_debian_redis.sh

## Benchmark suite, side by side, reported as ratios (~20 min + ~15 min for the decoder; results in bench/results/, see BENCHMARKS.md).
bench: install
	$(VENV)/bin/pip install -q -e '.[dev,bench]'
	$(PY) -m bench.service.throughput
	$(PY) -m bench.engine.decoder
	$(PY) -m bench.engine.decoder_steps
	$(PY) -m bench.engine.cpu_matmul
	$(PY) -m bench.engine.cpu_gemm
	$(PY) -m bench.engine.streaming_audio
	$(PY) -m bench.engine.compaction
	$(PY) -m bench.scale.shards
	$(PY) -m bench.scale.sentinel
	$(PY) -m bench.listening.encoders
	$(PY) -m bench.listening.stream_formats
	$(PY) -m bench.listening.listeners
	$(PY) -m bench.listening.realtime
	GC_FULL_COLLECTION_S=0 $(PY) -m bench.listening.listeners --results bench/results/listeners-cpython-gc.md  # control: CPython's collector

## The same benchmarks as a short smoke run (a few minutes).
bench-quick: install
	$(VENV)/bin/pip install -q -e '.[dev,bench]'
	$(PY) -m bench.service.throughput --quick
	$(PY) -m bench.engine.decoder --quick --checkpoints tiny
	$(PY) -m bench.scale.shards --quick
	$(PY) -m bench.scale.sentinel --quick
	$(PY) -m bench.listening.realtime --quick

## Load-test a running service (start it first: make up MODEL=tiny). USERS, SPAWN_RATE, DURATION, CLASSES, HOST; reports in var/loadtest/.
loadtest: install
	HOST="$${HOST:-http://127.0.0.1:$(PORT)}" loadtest/run.sh

tiny-checkpoint: install
	$(PY) scripts/make_tiny_checkpoint.py var/tiny-checkpoint

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache test-artifacts

include deploy/make.mk
include bench/gpu/gpu.mk
include tests/chaos/chaos.mk
include tests/fuzz/fuzz.mk
include tests/cluster/cluster.mk
include tests/sentinel/failover.mk
include loadtest/soak.mk
