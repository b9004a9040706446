"""Parity suite: the same TF2 programs run under TensorFlow and tapejax (see harness.py)."""
