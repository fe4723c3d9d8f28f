"""A remote OpenAI-compatible server's address as a person types it (torch-free, Qt-free: the app's
remote engine and the CLI's ``generate --server`` read it alike)."""

from __future__ import annotations

from urllib.parse import urlsplit

#: What an error about an address shows as the form to give.
EXAMPLE = "http://127.0.0.1:8080"


def api_base(url: str) -> str:
    """``http://host:port/v1`` from what a user typed (with or without ``/v1``, trailing slashes; no
    scheme: http)."""
    url = _with_scheme(url.strip().rstrip("/"))
    return url if url.endswith("/v1") else url + "/v1"


def _with_scheme(url: str) -> str:
    return url if "://" in url else "http://" + url


def check_server_address(text: str) -> str:
    """``text`` if it can be a server's address: ``http(s)://host[:port][/path]``, or ``host:port``
    without a scheme (http, as :func:`api_base` takes it). A bare word is refused rather than taken
    as a host name: it is far more often something else (a model name, a typo) than a server on
    port 80, and a failed DNS lookup would not say so.

    Raises:
        ValueError: "'TEXT' is not a server address; give one like http://127.0.0.1:8080".
    """
    url = text.strip()
    parts = urlsplit(_with_scheme(url))
    refused = ValueError(f"{text!r} is not a server address; give one like {EXAMPLE}")
    try:
        port = parts.port
    except ValueError:  # a port that is no number, or beyond 65535
        raise refused from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url) \
            or ("://" not in url and port is None):
        raise refused
    return text
