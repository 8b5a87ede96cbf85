"""Integration tests of ttsq/runtime/."""
