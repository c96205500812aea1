"""Spark's REST submission gateway (`/v1/submissions/...`, port 6066) for Ember.

The pure pieces live here so the HTTP server and client (added separately) only move bytes:
`protocol` holds the v1 messages, their Jackson-compatible JSON, request validation, routing
and driver-description building; `jws` holds the JWSFilter token check that 4.0 offers as the
REST gateway's only authentication.
"""
