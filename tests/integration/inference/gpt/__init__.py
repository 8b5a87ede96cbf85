"""Integration tests of ttsq/inference/gpt/."""
