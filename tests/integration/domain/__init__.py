"""Integration tests of ttsq/domain/."""
