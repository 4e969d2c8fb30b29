"""ibrl-bench: cross-play benchmark harness for strategic dialogue agents."""

__version__ = "0.1.0"

__all__ = ["__version__", "load_run"]


def __getattr__(name: str):
    # Lazy, so that `import ibrl_bench` (and the CLI's start-up) does not pull in pandas.
    if name == "load_run":
        from ibrl_bench.runs import load_run

        return load_run
    raise AttributeError(f"module 'ibrl_bench' has no attribute {name!r}")
