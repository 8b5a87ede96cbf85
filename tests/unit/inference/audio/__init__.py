"""Unit tests of ttsq/inference/audio/."""
