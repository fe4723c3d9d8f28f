"""Smolchat's desktop front end (PySide6).

Nothing in this package imports torch: the engine is imported lazily, inside the worker thread.
"""
