# API fuzzing (tests/fuzz): schemathesis against a live deployment from its own /openapi.json.
# The Makefile includes this file; it uses the Makefile's PY (.venv/bin/python) and install target.
# `make test` runs a bounded, fixed-seed version (tests/fuzz/test_fuzz_api.py).
FUZZ_EXAMPLES ?= 100
FUZZ_ARGS     ?=

.PHONY: fuzz fuzz-hostile

## API fuzzing, long: every route and check (--checks all), FUZZ_EXAMPLES per operation and phase, a fresh seed (FUZZ_ARGS, e.g. --seed N); summary in bench/results/fuzz.md, full reports in var/fuzz/.
fuzz: install
	$(PY) -m tests.fuzz.run --max-examples $(FUZZ_EXAMPLES) --output bench/results/fuzz.md $(FUZZ_ARGS)

## The hostile corpus alone (no schemathesis), long: the fixed corpus, the costly inputs, 500 drawn bodies per operation and bodies never finished, on both replicas, /healthz probed and the API's memory sampled all along; summary in bench/results/hostile.md.
fuzz-hostile: install
	$(PY) -m tests.fuzz.run --hostile-only --output bench/results/hostile.md $(FUZZ_ARGS)
