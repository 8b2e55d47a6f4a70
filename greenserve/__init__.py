"""GreenServe command-line entry points, embedded stack launcher and benchmarks."""

__all__: list[str] = []
