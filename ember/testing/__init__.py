"""Test beds that ship with the package (multi-host namespaces for tests and benchmarks)."""
