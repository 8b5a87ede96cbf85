"""The domain: what a job, a text, a voice, a cache key and a piece of audio are. No I/O; imports nothing else of ttsq."""
