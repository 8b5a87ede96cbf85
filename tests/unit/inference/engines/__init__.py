"""Unit tests of ttsq/inference/engines/."""
