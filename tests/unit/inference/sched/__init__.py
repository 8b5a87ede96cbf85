"""Unit tests of ttsq/inference/sched/."""
