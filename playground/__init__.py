"""Experiment recipes: each file subclasses a config and only overrides fields.

Run one with ``python -m playground.<recipe> [field=value ...]``; ``DEBUG_MODE=1`` shrinks it to one device.
"""
