"""Whole steps compiled with ``jax.jit`` (``tapejax.function``) and control flow (``cond``,
``while_loop``, ``scan``); see README.md."""
