"""Unit tests of ttsq/domain/."""
