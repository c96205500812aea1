"""Block storage: cached RDD partitions in task-process memory and on executor disk."""
