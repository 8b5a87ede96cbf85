"""Integration tests of ttsq/store/."""
