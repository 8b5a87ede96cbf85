"""Unit tests of ttsq/store/."""
