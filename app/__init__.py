"""Smolchat's desktop front end (PySide6).

Nothing in this package imports torch: only ``engine.api`` is imported at module level; the
engine proper is imported lazily, on the engine thread (``app.backends.local``).
"""
