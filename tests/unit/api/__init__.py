"""Unit tests of ttsq/api/."""
