"""Test doubles that tests and benchmarks share (they need the [dev] extra)."""
