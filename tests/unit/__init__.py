"""Unit tests, mirroring ttsq/: one process, no worker loop, no process started (``make unit``)."""
