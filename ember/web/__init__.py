"""Ember's HTTP surfaces' common ground, in the bottom layer: the aiohttp server thread with
its connection guards (`server`), who may use a surface (`security`, with the HS256 tokens of
`jws`), and the escaped HTML and Prometheus building blocks of every UI page (`pages`).

Why a package below the daemons: the master's, the worker's, the history server's and the
application's UIs and the REST gateway all serve HTTP; what they share must not live inside
one of them (the worker's pages imported the master's package for a formatter, the
history server imported `ember.deploy` for its server). Nothing here imports a daemon, a
scheduler or a UI; `ember.rpc` is below it (port binding, secrets).
"""
