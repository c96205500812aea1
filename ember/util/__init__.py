"""Ember's bottom layer: helpers every other package may import.

Nothing here imports from Ember's higher layers (deploy, scheduler, executor, rpc, ui),
so that any module can use one size parser, one logging setup or one guard around user
functions without creating an import cycle.
"""
