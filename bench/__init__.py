"""modelplan's benchmark: ``python -m bench [--quick]`` prints one JSON line per figure.

Every figure is measured in the same run against a ``redis-server`` of its own on loopback, next to the
baseline it is compared with (RQ's no-op jobs, ``redis-benchmark``), so that the ratio holds on a noisy
machine. ``BENCHMARKS.md`` has the figures and the targets, ``docs/PERFORMANCE.md`` the design choices.
"""
