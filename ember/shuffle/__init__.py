"""Shuffle: map output writing, fetching, and external (spilling) aggregation/sort."""
