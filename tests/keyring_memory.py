"""An in-memory keyring backend for tests (the test machines have no system keyring)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def memory_keyring() -> Iterator[dict]:
    """Install a keyring backend that keeps passwords in a dict for the block, then restore the
    previous one; yields that dict, ``{(service, user): password}``."""
    import keyring
    from keyring.backend import KeyringBackend

    store: dict = {}

    class Memory(KeyringBackend):
        priority = 1

        def get_password(self, service, user):
            return store.get((service, user))

        def set_password(self, service, user, password):
            store[(service, user)] = password

        def delete_password(self, service, user):
            store.pop((service, user), None)

    previous = keyring.get_keyring()
    keyring.set_keyring(Memory())
    try:
        yield store
    finally:
        keyring.set_keyring(previous)
