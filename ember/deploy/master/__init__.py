"""The standalone master: a sans-I/O state machine (`state.MasterState`) and pure scheduling.

Why split this way: Spark's `Master` endpoint mixes bookkeeping, scheduling and I/O in one
actor. Here `scheduling.py` holds the placement algorithms as plain functions over plain data,
`state.py` holds the master's whole state and turns events into instructions, and a thin shell
(elsewhere) carries the instructions out over RPC. Both halves are testable without sockets.
"""
