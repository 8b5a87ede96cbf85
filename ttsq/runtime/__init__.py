"""Process runtime: the worker loop, liveness and readiness probes, and launching the processes."""
