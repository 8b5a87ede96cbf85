# The soak test (loadtest/README.md, "Soak"); the Makefile includes this file.
# Uses the Makefile's PY (.venv/bin/python) and install target. DURATION is shared with `make loadtest`
# (whose run.sh defaults it to 60s), so the soak's default of 10m applies only to this target.
SOAK_OUT  ?= bench/results/soak
SOAK_ARGS ?=

.PHONY: soak

## Soak: the locust mix for DURATION (default 10m) per engine, the fixed-cost STAND-IN then MODEL=tiny, each on a fresh deployment with the fair-use limits lifted; RSS, Redis and p99 sampled. summary.md, summary.json and raw files in bench/results/soak/ (~25 min).
soak: install
	$(PY) -m loadtest.soak --duration $(or $(DURATION),10m) --engines fixed,tiny --out $(SOAK_OUT) $(SOAK_ARGS)
