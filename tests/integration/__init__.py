"""Tests of whole paths, mirroring ttsq/: the worker loop in-process, real processes, full pipelines."""
