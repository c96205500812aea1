"""The bytes the running task's mergers and sorters spilled: PySpark's
pyspark.shuffle.MemoryBytesSpilled and DiskBytesSpilled (readable and writable there as
ember.shuffle's attributes). A task process resets them when a task starts and adds them to
the task's metrics when it ends. A leaf, so that the spilling code can count here without
importing the package that names it."""
MemoryBytesSpilled = 0
DiskBytesSpilled = 0
