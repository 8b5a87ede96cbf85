"""Redis infrastructure: the job queue, result cache, voices, audio streams, key names and connections."""
