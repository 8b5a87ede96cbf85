"""Process runtime: the worker loop, the webhook deliverer and the upkeep they share, liveness and readiness probes,
and launching the processes."""
