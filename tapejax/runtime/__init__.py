"""Deferred execution: the deferred executor, its pending values and graphs, pending Variable
updates, speculation; see README.md.  ``tapejax.set_deferred_execution`` and
``tapejax.set_speculative_updates`` are its public switches."""
