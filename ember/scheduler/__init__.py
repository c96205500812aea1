"""Driver-side scheduling: DAGScheduler (stages), TaskScheduler (task sets), backends."""
