"""The domain: what a job, a text, a voice, a cache key, a piece of audio and a webhook are.

No I/O; imports nothing else of ttsq.
"""
