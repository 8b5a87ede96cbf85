"""Integration tests of bench/."""
