# Stream admission on a contended machine, as a check with real processes (bench/listening/contended.py): 40 realtime
# sessions opened within 2 s on one tiny worker while a CPU hog takes a core. The Makefile includes this file and
# defines VENV, PY and the install target.
#
#   make contended                                          the default check: admission on slack, one hog
#   make contended CONTENDED_ARGS='--hogs 2'                the machine's both cores taken by hogs
CONTENDED_ARGS ?=

.PHONY: contended

## 40 realtime sessions at once on one tiny worker beside a CPU hog (~3 min; CONTENDED_ARGS, e.g. --hogs 2): fails unless, with STREAM_ADMISSION=wait, every session ends well with no underrun heard or counted by the worker; figures to bench/results/contended-check.md.
contended: install
	$(PY) -m bench.listening.contended --variants slack --check slack --results bench/results/contended-check.md $(CONTENDED_ARGS)
