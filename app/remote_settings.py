"""The servers the user added (Settings ▸ Engines) and their API keys.

Servers (name, base URL, per-model "can see images" toggles) live in the settings file; API keys never
do: they go to the system keyring (``keyring``), or, when no keyring backend is available, stay in this
process's memory for the session only (and the settings dialog says so). A password in a base URL
(``http://user:password@host``, a proxy's basic authentication) is a key too: the file keeps the URL
without it (``http://user@host``), the keyring the password (:func:`url_password_name`).
"""

from __future__ import annotations

import json
import logging

from PySide6.QtCore import QSettings

from app.backends.remote_http import Server
from app.settings import open_settings
from engine.api.servers import split_password, with_password

log = logging.getLogger(__name__)
SERVERS_KEY = "remote/servers"
UNREADABLE_KEY = "remote/servers_unreadable"  # a damaged list as it was
KEYRING_SERVICE = "smolchat"


def _entries(raw: str) -> tuple[list, bool]:
    """The JSON list ``raw`` read as far as its entries are whole: ``(entries, whole)``; ``whole`` is
    False when the list is cut short or damaged after them (a settings file cut off by a crash or a
    full disk still gives back the servers written before the cut)."""
    try:
        value = json.loads(raw)
        return (value, True) if isinstance(value, list) else ([], False)
    except (ValueError, RecursionError):
        pass
    decoder, entries = json.JSONDecoder(), []
    text = raw.lstrip()
    if not text.startswith("["):
        return [], False
    pos = 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return entries, False
        entries.append(entry)


#: What the Base URL field shows for a stored password (:func:`masked_url`'s form): saved unchanged, it
#: keeps the stored one.
MASK = "***"


def url_password_name(name: str) -> str:
    """The keyring entry of server ``name``'s URL password (its API key's is ``name``)."""
    return f"{name} (URL password)"


def load_servers(qs: QSettings | None = None) -> list[dict]:
    """``[{"name", "url", "vision": {model: bool}}]`` in the order added (those whole in a list cut short)."""
    return _usable(_entries(str((qs or open_settings()).value(SERVERS_KEY, "[]") or "[]"))[0])


def _usable(servers: list) -> list[dict]:
    """The entries of ``servers`` that name a server and its URL, with their "can see images" toggles."""
    out = []
    for s in servers:
        if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"] and isinstance(s.get("url"), str) \
                and s["url"]:
            vision = s.get("vision") if isinstance(s.get("vision"), dict) else {}
            out.append({**s, "vision": {str(k): bool(v) for k, v in vision.items()}})
    return out


def unreadable_servers(qs: QSettings | None = None) -> str:
    """One line when the saved servers list holds entries :func:`load_servers` had to ignore, or is cut
    short ("" otherwise). The value as it was is kept under ``remote/servers_unreadable`` (once: a later
    start does not overwrite it with what was saved since), as a settings file that cannot be read is
    kept beside it, since the next save of a server replaces the list."""
    qs = qs or open_settings()
    raw = str(qs.value(SERVERS_KEY, "[]") or "[]")
    servers, whole = _entries(raw)
    read = len(_usable(servers))
    dropped = len(servers) - read
    if whole and not dropped:
        return ""
    if not qs.contains(UNREADABLE_KEY):
        qs.setValue(UNREADABLE_KEY, raw)
        qs.sync()
    kept = f"the value as it was is kept as {UNREADABLE_KEY}"
    if not whole:
        got = "none could be read" if not read else f"{read} {'was' if read == 1 else 'were'} read"
        return (f"Settings file {qs.fileName()}: the saved servers ({SERVERS_KEY}) are cut short or damaged: "
                f"{got}; {kept}.")
    what = "1 saved server" if dropped == 1 else f"{dropped} saved servers"
    return (f"Settings file {qs.fileName()}: ignored {what} that could not be read ({SERVERS_KEY}); the rest "
            f"apply; {kept}.")


def save_servers(servers: list[dict], qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    clean = [{"name": s["name"], "url": s["url"], "vision": dict(s.get("vision") or {})} for s in servers]
    qs.setValue(SERVERS_KEY, json.dumps(clean))
    qs.sync()


def upsert_server(entry: dict, qs: QSettings | None = None, old_name: str | None = None) -> None:
    """Add ``entry`` or replace the server named ``old_name`` (or ``entry["name"]``) in place."""
    servers = load_servers(qs)
    names = [s["name"] for s in servers]
    key = old_name if old_name in names else entry["name"]
    if key in names:
        servers[names.index(key)] = {**servers[names.index(key)], **entry}
    else:
        servers.append(entry)
    save_servers(servers, qs)


def remove_server(name: str, qs: QSettings | None = None) -> None:
    save_servers([s for s in load_servers(qs) if s["name"] != name], qs)
    KEYS.delete(name)
    KEYS.delete(url_password_name(name))


def store_url(name: str, url: str, old_name: str = "", saved_url: str = "") -> tuple[str, bool]:
    """``url`` as the settings file keeps it, its password (if any) put in the keyring for ``name``:
    ``(url without the password, kept)``; ``kept`` is False when the password stays for this session
    only. A password given as :data:`MASK` is the one stored for ``old_name`` (the field showed it
    so), or the one in ``saved_url`` (the server's URL in the file, as an earlier Smolchat wrote it),
    moved to ``name`` if the server was renamed; a URL without one forgets any stored."""
    bare, password = split_password(url)
    previous = stored_password(old_name or name, saved_url)
    if old_name and old_name != name:
        KEYS.delete(url_password_name(old_name))
    if password == MASK:
        password = previous
    return bare, KEYS.set(url_password_name(name), password)


def stored_password(name: str, saved_url: str = "") -> str:
    """Server ``name``'s URL password: the keyring's, else the one in ``saved_url`` (its URL in the
    settings file, as an earlier Smolchat wrote it); "" when neither holds one."""
    return KEYS.get(url_password_name(name)) or split_password(saved_url)[1]


def shown_url(entry: dict) -> str:
    """The Base URL field's text for a saved server: its URL with ``***`` where a password is stored (in
    the keyring, or in the URL as an earlier Smolchat wrote it to the file)."""
    bare = split_password(entry["url"])[0]
    return with_password(bare, MASK) if stored_password(entry["name"], entry["url"]) else entry["url"]


def move_passwords_out_of_the_file(qs: QSettings | None = None) -> int:
    """Servers saved by an earlier Smolchat with a password in their URL: the password goes to the
    keyring and the file keeps the URL without it. Only with a keyring (otherwise the next start would
    have lost it). Returns how many were moved."""
    if not KEYS.persistent:
        return 0
    servers, moved = load_servers(qs), 0
    for entry in servers:
        bare, password = split_password(entry["url"])
        if password and KEYS.set(url_password_name(entry["name"]), password):
            entry["url"], moved = bare, moved + 1
    if moved:
        save_servers(servers, qs)
        log.info("moved %d URL password(s) from the settings file to the keyring", moved)
    return moved


class KeyStore:
    """API keys by server name: the system keyring (under ``service``), else memory for this session only."""

    def __init__(self, service: str = KEYRING_SERVICE) -> None:
        self.service = service
        self._session: dict[str, str] = {}
        self.problem = ""  # why keys are session-only ("" when the keyring works)
        try:
            import keyring
            from keyring.backends import fail

            backend = keyring.get_keyring()
            if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 1) <= 0:
                self.problem = "no system keyring is available"
        except Exception as exc:  # keyring missing or broken: session keys still work
            self.problem = f"the system keyring cannot be used ({exc})"

    @property
    def persistent(self) -> bool:
        return not self.problem

    def get(self, name: str) -> str:
        if name in self._session or not self.persistent:
            return self._session.get(name, "")
        try:
            import keyring

            return keyring.get_password(self.service, name) or ""
        except Exception as exc:
            log.warning("keyring lookup for %s failed: %s", name, exc)
            return ""

    def set(self, name: str, key: str) -> bool:
        """Store ``key`` (``""`` deletes it); False when it is kept for this session only."""
        if not key:
            self.delete(name)
            return self.persistent
        if self.persistent:
            try:
                import keyring

                keyring.set_password(self.service, name, key)
                self._session.pop(name, None)
                return True
            except Exception as exc:
                self.problem = f"the system keyring refused the key ({exc})"
        self._session[name] = key
        return False

    def delete(self, name: str) -> None:
        self._session.pop(name, None)
        if self.persistent:
            try:
                import keyring

                keyring.delete_password(self.service, name)
            except Exception:  # nothing stored: fine
                pass


KEYS = KeyStore()


def server(name: str, qs: QSettings | None = None) -> Server:
    """The :class:`Server` named ``name`` with its key (may read the keyring: call off the UI thread)."""
    for entry in load_servers(qs):
        if entry["name"] == name:
            url = with_password(entry["url"], KEYS.get(url_password_name(name)))
            return Server(entry["name"], url, KEYS.get(name), dict(entry.get("vision") or {}))
    raise KeyError(f"no server named {name!r} in Settings ▸ Engines")
