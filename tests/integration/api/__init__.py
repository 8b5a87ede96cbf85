"""Integration tests of ttsq/api/."""
