"""Server settings: where it listens, who may call it, and the limits every request is held to."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

MB = 1024 * 1024


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: addresses only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServerConfig:
    """How the server runs.

    Attributes:
        model: checkpoint folder, Hub id or GGUF file; ``model_id`` is the name clients use
            (default: the folder's name).
        api_key: required as ``Authorization: Bearer KEY`` on /v1 and /metrics when set.
        insecure_no_key: allow a non-loopback ``host`` without a key (explicit opt-in).
        cors_origins: origins allowed by CORS; empty = CORS off.
        allow_remote_media: fetch ``http(s)`` image URLs (off: only data URIs and base64).
        allow_private_media_hosts: with ``allow_remote_media``, also fetch from hosts that are not
            public addresses (this machine, the local network, cloud metadata services); off, such
            URLs are a 400 ``media_fetch_refused`` (server.media.public_address says which).
        max_queue: generations waiting or running before new ones get 429.
        max_body_bytes, max_images, max_image_pixels, max_media_bytes: 413 beyond these.
        remote_timeout_s: total time for fetching one remote image or video (seconds), from the
            name's resolution to the last byte, redirects included.
        max_stored_media: media files kept on disk (least recently used ones go first, down to an
            eighth below this number once it is exceeded, so the folder is listed seldom).
        default_max_tokens: answer length when a request gives none.
    """

    model: str = ""
    model_id: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    insecure_no_key: bool = False
    cors_origins: list[str] = field(default_factory=list)
    allow_remote_media: bool = False
    allow_private_media_hosts: bool = False
    max_queue: int = 16
    max_body_bytes: int = 32 * MB
    max_images: int = 16
    max_image_pixels: int = 40_000_000
    max_media_bytes: int = 20 * MB
    remote_timeout_s: float = 10.0
    max_stored_media: int = 512
    default_max_tokens: int = 512
    load_options: dict = field(default_factory=dict)

    def check(self) -> None:
        """Raise ``ValueError`` for settings that would expose the engine: a host other machines can
        reach needs an API key or an explicit ``insecure_no_key``."""
        if not is_loopback(self.host) and not self.api_key and not self.insecure_no_key:
            raise ValueError(f"--host {self.host} lets other machines in: give --api-key KEY "
                             "(or --insecure-no-key to allow anyone)")
        if self.max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {self.max_queue}")
