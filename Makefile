# ttsq — run it with `make up`, test it with `make test`; `make help` lists every target.
PYTHON_BASE ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
MODEL       ?= hub
WORKERS     ?= 1
PORT        ?= 8000

.DEFAULT_GOAL := help
.PHONY: help up test unit lint types typecheck pytest install agent-clients chromium prometheus debian-redis tiny-checkpoint loadtest bench bench-quick clean

## Every target here and in the included *.mk files, with its ## line.
help:
	@awk '/^## /{doc = doc (doc == "" ? "" : " ") substr($$0, 4); next} \
		/^[a-z][a-z0-9-]*:([^=]|$$)/{split($$0, rule, ":"); printf "  %-18s %s\n", rule[1], (doc == "" ? "(no ## line)" : doc)} \
		{doc = ""}' $(MAKEFILE_LIST)

# torch and torchaudio must come as a matched pair: ChatTTS imports torchaudio, and 2.9.1 is the
# newest pair whose torchaudio wheels load on these machines (the CUDA build runs on CPU too).
$(VENV)/.installed: pyproject.toml
	$(PYTHON_BASE) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.9.1 torchaudio==2.9.1
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

## Install everything into .venv (once; again when pyproject.toml changes).
install: $(VENV)/.installed

## Run Redis (embedded unless REDIS_URL is set), $(WORKERS) worker(s) and the API on 127.0.0.1:$(PORT).
up: install
	$(PY) scripts/up.py --model '$(MODEL)' --workers $(WORKERS) --port $(PORT)

## Lint, type-check and run every test (the same command CI runs).
test: install lint typecheck pytest

# The unit tests: in one process, no worker loop and no process started, with at most a real redis-server (the bundled
# one) and the tiny checkpoint; none needs chromium, prometheus, the TLS redis-server, the agents' venv or the deployment
# tools. By wing, mirroring ttsq/ (tests/unit/<wing>/), and the checks on the repository itself (tests/project/).
UNIT_TESTS := tests/unit tests/project

## The fast loop: lint, types and the unit tests (UNIT_TESTS), with none of the heavy installs (under 3 minutes here).
unit: install lint types
	$(VENV)/bin/pytest -n $(PYTEST_PROCESSES) --dist loadfile --no-loadscope-reorder -q $(UNIT_TESTS)

## ruff; the import contracts (pyproject.toml [tool.importlinter]: the layers, and the rooms and wings inside them); no
## class over 25 methods and no module over 600 lines (scripts/room_sizes.py).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) scripts/room_sizes.py

## mypy, strict, over the project (integrations/ is checked against the frameworks by make typecheck).
types: install
	$(VENV)/bin/mypy .

## make types, and ttsq's plugins in integrations/ checked with mypy --strict against the frameworks (var/agents-venv).
typecheck: types agent-clients
	cd integrations && MYPYPATH=livekit-plugins-ttsq:ttsq-pipecat ../var/agents-venv/bin/mypy --strict --explicit-package-bases \
		livekit-plugins-ttsq/livekit ttsq-pipecat/ttsq_pipecat

# Two test processes (pytest-xdist), each taking whole files: a file's module fixtures (the chaos deployment) and
# its order stay in one process, and the second CPU core works while the first waits on a worker process. Files go out
# in collection order (tests/conftest.py: the slowest first), not reordered by how many tests each holds.
PYTEST_PROCESSES ?= 2

## Every test (what make test runs after lint and types), with everything the tests need installed first.
pytest: install chromium prometheus debian-redis deploy-tools agent-clients
	$(VENV)/bin/pytest -n $(PYTEST_PROCESSES) --dist loadfile --no-loadscope-reorder --durations=40 -rfE

## LiveKit Agents' and Pipecat's own TTS clients (OpenAI, ElevenLabs, Cartesia) and the elevenlabs and cartesia SDKs in their
## own venv (var/agents-venv), with ttsq's plugins (integrations/, type-checked there), for tests/e2e/test_*_clients.py.
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

## Benchmark suite, side by side, reported as ratios (~20 min + ~15 min for the decoder; results in bench/results/, see
## BENCHMARKS.md); the list is bench/__main__.py's.
bench: install
	$(VENV)/bin/pip install -q -e '.[dev,bench]'
	$(PY) -m bench

## The same benchmarks as a short smoke run (a few minutes): those with a --quick form.
bench-quick: install
	$(VENV)/bin/pip install -q -e '.[dev,bench]'
	$(PY) -m bench --quick

## Load-test a running service (start it first: make up MODEL=tiny). USERS, SPAWN_RATE, DURATION, CLASSES, HOST; reports in var/loadtest/.
loadtest: install
	HOST="$${HOST:-http://127.0.0.1:$(PORT)}" loadtest/run.sh

## The tiny random-weight ChatTTS checkpoint the tests use, in var/tiny-checkpoint.
tiny-checkpoint: install
	$(PY) scripts/make_tiny_checkpoint.py var/tiny-checkpoint

## Remove var/ and the tools' caches.
clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache test-artifacts

include deploy/make.mk
include bench/gpu/gpu.mk
include tests/chaos/chaos.mk
include tests/chaos/realtime.mk
include tests/fuzz/fuzz.mk
include tests/hostile/hostile.mk
include tests/cluster/cluster.mk
include tests/sentinel/failover.mk
include loadtest/soak.mk
include bench/listening/contended.mk
