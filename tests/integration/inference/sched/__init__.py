"""Integration tests of ttsq/inference/sched/."""
