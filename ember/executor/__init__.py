"""Executor side: the long-lived task processes that run tasks, and the pool that feeds them."""
