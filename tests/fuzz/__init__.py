"""Fuzzing the live HTTP API from its own ``/openapi.json`` with schemathesis.

A real deployment (redis-server, ``uvicorn app:app``, one ``python worker.py`` on the tiny
checkpoint) is started by :mod:`tests.fuzz.deployment`, and schemathesis's command line runs
against it over HTTP (:mod:`tests.fuzz.run`): every operation, the links that lead from a submit to
its task and from a new voice to it, and every check (see :data:`tests.fuzz.run.CHECKS`), plus the
project's own checks in :mod:`tests.fuzz.hooks`. ``make test`` runs a bounded number of examples
(``tests/fuzz/test_fuzz_api.py``); ``make fuzz`` runs many more (``python -m tests.fuzz.run``).
"""
