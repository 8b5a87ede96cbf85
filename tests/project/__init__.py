"""Checks on the repository itself: the architecture table, the docs' links, the settings' docs, the Makefile."""
