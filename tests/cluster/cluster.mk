# The Redis Cluster resharding test beyond its bounded run in `make test` (tests/cluster/test_resharding.py). The
# Makefile includes this file and defines VENV, PY and the install target.
#
#   make reshard-chaos                         the queue's slots moved back and forth ten times (RESHARD_ROUND_TRIPS)
#   make reshard-redis-py6                     the bounded run on redis-py 6.4, whose cluster client closed connections
#                                              under running commands (pyproject allows redis-py >= 5.2)
RESHARD_ROUND_TRIPS ?= 10
REDIS_PY_OLD        ?= 6.4.0

.PHONY: reshard-chaos reshard-redis-py6

## Resharding under load, longer (~2 min): each queue shard's slot moved to another master and back RESHARD_ROUND_TRIPS times.
reshard-chaos: install
	RESHARD_ROUND_TRIPS=$(RESHARD_ROUND_TRIPS) $(VENV)/bin/pytest -p no:cacheprovider -s tests/cluster/test_resharding.py

## Resharding under load on redis-py $(REDIS_PY_OLD) (installed beside the venv, in var/, for this run only).
reshard-redis-py6: install
	$(VENV)/bin/pip install -q --no-deps --target var/redis-py-$(REDIS_PY_OLD) 'redis==$(REDIS_PY_OLD)'
	PYTHONPATH=var/redis-py-$(REDIS_PY_OLD) $(VENV)/bin/pytest -p no:cacheprovider tests/cluster/test_resharding.py tests/cluster/test_cluster.py
