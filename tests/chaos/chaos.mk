# The chaos suite at full size (tests/chaos; the bounded version runs in `make test`). The Makefile
# includes this file and defines VENV, PY and the install target.
#
#   make chaos                         every scenario at full size: 100 kill -9s, longer outages, a bigger flood
#   make chaos CHAOS_ARGS='--kills 300 --seed 7'   more kills; replay a run's random choices
#   make chaos CHAOS_ARGS='--only S1,S4'           some scenarios (keys: python -m tests.chaos --help)
CHAOS_ARGS ?=

.PHONY: chaos

## Chaos suite, full size (~35 min on 2 CPUs; CHAOS_ARGS, e.g. --kills 300 --seed 7): real processes, real faults; figures to bench/results/chaos.md.
chaos: install
	$(PY) -m tests.chaos $(CHAOS_ARGS)
