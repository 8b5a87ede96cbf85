"""Integration tests of ttsq/client/."""
