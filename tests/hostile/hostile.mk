# The hostile suite at full size (tests/hostile; the bounded version runs in `make test`). The Makefile
# includes this file and defines PY and the install target.
#
#   make hostile-realtime                                   200 bombs, 10 flooding sessions, 2,000 idle connections
#   make hostile-realtime HOSTILE_ARGS='--idle 4000 --flood-s 30'   bigger or longer (python -m tests.hostile.run --help)
HOSTILE_ARGS ?=

.PHONY: hostile-realtime

## Hostile clients against the API as shipped (1,024 open files): 200 keyless compressed-bomb WebSockets, 10 sessions flooding messages, 2,000 idle + 50 trickling connections; /healthz and the API's memory sampled throughout (~2 min); bench/results/hostile-realtime.md.
hostile-realtime: install
	$(PY) -m tests.hostile.run $(HOSTILE_ARGS)

.PHONY: hostile-ssml

## Hostile SSML (billion laughs, external entity, 10,000 deep, a 1 MB attribute) against one API process with every SSML limit at its widest: every answer 422 in < 100 ms, RSS flat (~30 s); bench/results/hostile-ssml.md.
hostile-ssml: install
	$(PY) -m tests.hostile.ssml $(HOSTILE_SSML_ARGS)
