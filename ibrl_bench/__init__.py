"""ibrl-bench: cross-play benchmark harness for strategic dialogue agents."""

__version__ = "0.1.0"
