"""Redis infrastructure: the job queue, audio streams, heartbeats, webhook deliveries, the result cache, voices,
key names and connections."""
