"""A remote OpenAI-compatible server's address as a person types it (torch-free, Qt-free: the app's
remote engine and the CLI's ``generate --server`` read it alike)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: What an error about an address shows as the form to give.
EXAMPLE = "http://127.0.0.1:8080"
#: A URL's start up to its host: the scheme (or the text's start: an address typed without one) and the
#: user information before the last ``@`` of the authority (which ends at ``/``, ``?``, ``#`` or a space).
_USER_INFO = re.compile(r"(^\s*|[A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s]*)@")


def api_base(url: str) -> str:
    """``http://host:port/v1`` from what a user typed (with or without ``/v1``, trailing slashes; no
    scheme: http)."""
    url = _with_scheme(url.strip().rstrip("/"))
    return url if url.endswith("/v1") else url + "/v1"


def _with_scheme(url: str) -> str:
    return url if "://" in url else "http://" + url


def masked_url(text: str) -> str:
    """``text`` (a server's address, or a message that holds URLs) fit to show in a message or a log:
    a password in a URL as ``***`` (``http://user:***@host:9``), a user name without one too
    (``http://***@host``: it may be the key); everything else as it was."""
    def mask(found: re.Match) -> str:
        user, colon, _password = found.group(2).partition(":")
        return f"{found.group(1)}{user + ':***' if colon else '***'}@"
    return _USER_INFO.sub(mask, text)


def split_password(url: str) -> tuple[str, str]:
    """``(url without its password, the password)``; ``(url, "")`` when it holds none. The user
    information is read as :func:`masked_url` reads it (up to the last ``@`` of the authority; the
    password after the user's first ``:``): ``http://bob:pa55@host:8080/v1`` ->
    ``("http://bob@host:8080/v1", "pa55")``."""
    found = _USER_INFO.match(url)
    user, _colon, password = found.group(2).partition(":") if found else ("", "", "")
    if not password:
        return url, ""
    return f"{found.group(1)}{user}@{url[found.end():]}", password


def with_password(url: str, password: str) -> str:
    """``url`` (a user, no password: ``http://bob@host``) with ``password`` put back after its user;
    ``url`` as it was without a user or a password to put."""
    found = _USER_INFO.match(url) if password else None
    return f"{found.group(1)}{found.group(2)}:{password}@{url[found.end():]}" if found else url


def check_server_address(text: str) -> str:
    """``text`` if it can be a server's address: ``http(s)://host[:port][/path]``, or ``host:port``
    without a scheme (http, as :func:`api_base` takes it); a port from 1 to 65535. A bare word is
    refused rather than taken as a host name: it is far more often something else (a model name, a
    typo) than a server on port 80, and a failed DNS lookup would not say so.

    Raises:
        ValueError: "'TEXT' is not a server address; give one like http://127.0.0.1:8080" (TEXT
            :func:`masked_url`).
    """
    url = text.strip()
    parts = urlsplit(_with_scheme(url))
    refused = ValueError(f"{masked_url(text)!r} is not a server address; give one like {EXAMPLE}")
    try:
        port = parts.port
    except ValueError:  # a port that is no number, or beyond 65535
        raise refused from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url) \
            or ("://" not in url and port is None) or port == 0:  # 0 asks the system for a free port: no server's
        raise refused
    if not _host_ok(parts.hostname):
        raise refused
    return text


#: A host name's label (RFC 1123): letters, digits, hyphens inside, at most 63 characters; any
#: other character passes (an internationalised name is the resolver's to judge).
_LABEL = re.compile(r"(?!-)[^.\s]{1,63}(?<!-)")


def _host_ok(host: str) -> bool:
    """``host`` can name a machine: an IP address (``[::1]`` arrives without brackets), or labels of 1-63
    characters joined by single dots, none starting or ending with a hyphen ("...." and "-bad-.com"
    are refused here: the resolver's codec would raise on the first, DNS fail on the second)."""
    if ":" in host:  # an IPv6 address, which urlsplit has checked for brackets
        return True
    return all(_LABEL.fullmatch(label) for label in host.rstrip(".").split("."))
