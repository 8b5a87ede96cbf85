# Realtime sessions under faults (tests/chaos/realtime.py); `make test` has the bounded check of the same guarantee
# (tests/e2e/test_stream_outage.py). The Makefile includes this file and defines VENV, PY and the install target.
#
#   make realtime-chaos                                             every scenario: Redis restarts, worker kills, no worker
#   make realtime-chaos REALTIME_CHAOS_ARGS='--only redis --seed 7'  one scenario; replay a run's random choices
#   make realtime-chaos REALTIME_CHAOS_ARGS='--only redis --timings chaos'  the chaos suite's short leases (LEASE_S=3)
REALTIME_CHAOS_ARGS ?=

.PHONY: realtime-chaos

## Realtime sessions under faults (~15 min on 2 CPUs; REALTIME_CHAOS_ARGS, e.g. --only redis --restarts 20): each session equal to its text submitted whole or ended with an error, never a hole; figures to bench/results/realtime-chaos.md.
realtime-chaos: install
	$(PY) -m tests.chaos.realtime $(REALTIME_CHAOS_ARGS)
