"""Inference: the engine protocol, the ChatTTS engine, text normalization, checkpoints and fault injection.

Importing this package is cheap; torch and ChatTTS load only when an engine loads its model.
"""
