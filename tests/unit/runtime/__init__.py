"""Unit tests of ttsq/runtime/."""
