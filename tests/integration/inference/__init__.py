"""Integration tests of ttsq/inference/."""
