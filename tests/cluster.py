"""The test suite's cluster fixture lives in the package (benchmarks use it too)."""
from ember.deploy.local_cluster import ROOT, LocalCluster, _env, free_port  # noqa: F401
