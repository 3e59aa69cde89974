"""Workload harnesses, the demo job and benchmarks."""
