"""pybkx benchmarks: the pytest-benchmark suite (micro and system), the side-by-side run against
Apache BookKeeper (``python -m bench.compare``) and the older stand-alone scripts.

Nothing here is imported by pybkx or by the test suite, and nothing here asserts on timings.
"""
