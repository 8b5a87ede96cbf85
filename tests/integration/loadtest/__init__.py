"""Integration tests of loadtest/."""
