"""Ember's deploy layer: Spark Standalone's master, worker, submission clients and their messages.

Why a package of its own: everything that knows what a deploy message *means* lives here, above
`ember.rpc` (which only moves bytes and knows no message) and below the user API. `messages.py`
is the one vocabulary every daemon speaks; `master/` holds the master's sans-I/O core.
"""
