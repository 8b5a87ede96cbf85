# Failovers and slot moves under load, at full size (tests/sentinel/failover_chaos.py, tests/cluster/slot_chaos.py;
# what `make test` holds of them is tests/sentinel/test_replicas.py and tests/cluster/test_ride_through.py). The
# Makefile includes this file and defines VENV, PY and the install target. Figures are appended to
# bench/results/failover-chaos.md.
#
#   make failover-chaos                              both runs below
#   make failover-chaos-sentinel FAILOVER_ARGS='--failovers 20 --seed 7'
#   make failover-chaos-cluster SLOT_CHAOS_ARGS='--rounds 5'
FAILOVER_ARGS   ?=
SLOT_CHAOS_ARGS ?=

.PHONY: failover-chaos failover-chaos-sentinel failover-chaos-cluster

## Failover chaos (~10 min on 2 CPUs): Sentinel failovers, then Redis Cluster slot moves, under submits and realtime sessions.
failover-chaos: failover-chaos-sentinel failover-chaos-cluster

## SENTINEL FAILOVER 10 times under submits and 5 live realtime sessions: acknowledged tasks lost, sessions hung (target 0 each).
failover-chaos-sentinel: install
	$(PY) -m tests.sentinel.failover_chaos $(FAILOVER_ARGS)

## Every queue shard's Redis Cluster slot moved twice under 5 live sessions: sessions ended early (target 0), each equal to its submit.
failover-chaos-cluster: install
	$(PY) -m tests.cluster.slot_chaos $(SLOT_CHAOS_ARGS)
