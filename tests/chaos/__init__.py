"""The chaos suite: real ttsq processes, real faults, and one invariant checked for every acknowledged id.

An acknowledged job (the API answered 202 or 200 with a task id) must end done — with audio equal,
sample for sample, to what a clean deployment gives for the same deterministic request — or failed
with a reason, and never be lost or get two different results. The scenarios kill workers with
SIGKILL at chosen moments, stop them with SIGTERM mid-batch, kill, restart and stall Redis, feed
poison jobs, hang an inference, flood the API and break the disk cache, and then check that
promise for every id the client was given.

``pytest tests/chaos`` (marker ``chaos``) runs bounded versions that share one deployment;
``python -m tests.chaos`` (``make chaos``) runs the full sizes and writes ``bench/results/chaos.md``.
"""
