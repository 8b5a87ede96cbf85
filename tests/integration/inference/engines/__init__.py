"""Integration tests of ttsq/inference/engines/."""
