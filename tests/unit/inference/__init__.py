"""Unit tests of ttsq/inference/."""
