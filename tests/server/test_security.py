"""Binding, CORS, remote media (opt-in, size and time limits) and the CLI's refusal of unsafe settings."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from server import ServerConfig, create_app
from server.config import is_loopback
from server.media import public_address
from tests.server.fakes import FakeSession, fake_loader
from tests.server.helpers import REPO, ThreadServer, png_bytes

PNG = png_bytes()


class MediaHandler(http.server.BaseHTTPRequestHandler):
    """/photo.png, /big.png (over the limit), /slow.png (past the time limit), /drip.png (a byte at
    a time), /to/URL (a redirect), /svg. ``hosts``: the Host header of each request."""

    hosts: list = []

    def do_GET(self):  # noqa: N802 - the stdlib's name
        MediaHandler.hosts.append(self.headers["Host"])
        if self.path == "/slow.png":
            time.sleep(1.5)
        if self.path.startswith("/to/"):  # a redirect to the URL after "/to/"
            self.send_response(302)
            self.send_header("Location", self.path[len("/to/"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/drip.png":  # a byte every 0.2 s: never idle for a read timeout, 8 s in all
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            try:
                for i in range(40):
                    self.wfile.write(PNG[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.2)
                self.wfile.write(PNG[40:])
            except OSError:
                pass
            return
        body, kind = {"/big.png": (b"\x89PNG" + b"\x00" * 200_000, "image/png"),
                      "/svg": (b"<svg/>", "image/svg+xml")}.get(self.path, (PNG, "image/png"))
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def media_host():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MediaHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _certificates(folder) -> tuple[str, str]:
    """A test CA (``ca.pem``) and a server certificate for the name ``localhost`` only, signed by
    it (``server.pem`` with its key): ``(ca file, server file)``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key, issuer: str, issuer_key, ca: bool, names: list[str]):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
                critical=True).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                             critical=False)
        else:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                                            critical=False).add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("Smolchat test CA", ca_key, "Smolchat test CA", ca_key, True, [])
    server = cert("localhost", server_key, "Smolchat test CA", ca_key, False, ["localhost"])
    ca_file, server_file = folder / "ca.pem", folder / "server.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_file.write_bytes(server.public_bytes(serialization.Encoding.PEM) + server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(ca_file), str(server_file)


@pytest.fixture
def tls_media_host(tmp_path):
    """An HTTPS media host on 127.0.0.1 whose certificate names ``localhost``: ``(port, CA file)``."""
    import ssl

    pytest.importorskip("cryptography", reason="makes the test certificates")
    ca_file, server_file = _certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_file)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MediaHandler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], ca_file
    httpd.shutdown()


def serve(**config) -> tuple[ThreadServer, FakeSession]:
    session = FakeSession()
    return ThreadServer(create_app(ServerConfig(model="fake", **config), loader=fake_loader(session))), session


def chat_with_image(url: str, image: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=30, json={"model": "fake", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                     {"type": "text", "text": "what"}]}]})


def test_remote_images_only_with_the_switch_and_within_limits(media_host):
    off, _ = serve()
    on, session = serve(allow_remote_media=True, allow_private_media_hosts=True, max_media_bytes=100_000,
                        remote_timeout_s=0.5)
    try:
        refused = chat_with_image(off.url, f"{media_host}/photo.png")
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "remote_media_disabled"
        assert chat_with_image(on.url, f"{media_host}/photo.png").status_code == 200
        assert session.sent[-1][1][0].endswith(".png")  # stored by content hash, handed on as a file
        big = chat_with_image(on.url, f"{media_host}/big.png")
        assert big.status_code == 413 and big.json()["error"]["code"] == "media_too_large"
        slow = chat_with_image(on.url, f"{media_host}/slow.png")
        assert slow.status_code == 400 and slow.json()["error"]["code"] == "media_fetch_failed"
        svg = chat_with_image(on.url, f"{media_host}/svg")
        assert svg.status_code == 400 and svg.json()["error"]["code"] == "unsupported_image_format"
        local = chat_with_image(on.url, "file:///etc/hostname")  # never, switch or not
        assert local.status_code == 400 and local.json()["error"]["code"] == "invalid_url"
    finally:
        off.stop()
        on.stop()


def test_only_public_addresses_count_as_public():
    for address in ("8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"):
        assert public_address(address), address
    for address in ("127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
                    "224.0.0.1", "240.0.0.1", "0.0.0.0", "255.255.255.255", "::1", "::", "fe80::1%eth0",
                    "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
                    "2002:7f00:1::", "64:ff9b::7f00:1", "fd00:ec2::254",
                    # Global in the ipaddress tables of Python < 3.11.10 (CVE-2024-4032): listed explicitly.
                    "192.0.0.192", "192.0.0.8", "fec0::1"):
        assert not public_address(address), address


def test_remote_media_from_a_host_that_is_not_public_is_refused(media_host):
    """A request must not make the server fetch from itself, its network or a cloud metadata
    service: by name, by address in any form, or through a redirect."""
    srv, session = serve(allow_remote_media=True, remote_timeout_s=5)
    port = media_host.rsplit(":", 1)[1]
    try:
        MediaHandler.hosts.clear()
        for url in (f"{media_host}/photo.png", f"http://localhost:{port}/photo.png",
                    f"http://[::ffff:127.0.0.1]:{port}/photo.png", "http://169.254.169.254/latest/meta-data/",
                    f"http://0x7f.1:{port}/photo.png", "http://[::]:9/x.png"):
            refused = chat_with_image(srv.url, url)
            assert refused.status_code == 400, (url, refused.text)
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("media_fetch_refused", "messages[0].content[0]"), url
            assert "--allow-private-media-hosts" in error["message"]
        # A name IDNA cannot encode (an empty label) is a 400 too, not a 500 from a UnicodeError.
        bad = chat_with_image(srv.url, "http://x..y.example/photo.png")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "media_fetch_failed", bad.text
        assert MediaHandler.hosts == [] and session.sent == []  # nothing was fetched, nothing answered
    finally:
        srv.stop()


def test_every_redirect_is_checked_and_the_checked_address_is_the_one_reached(media_host, monkeypatch):
    """The host name resolves once, and the connection goes to that address (a second, different
    DNS answer cannot lead elsewhere); the name stays in the Host header. A redirect's host is
    checked like the first one."""
    import server.media

    port = media_host.rsplit(":", 1)[1]
    # photos.example's first address accepts no connection (nothing listens on 127.0.0.3): the next
    # checked one is tried, as a connection to the name would (only the first was, for a while).
    names = {"photos.example": ["127.0.0.3", "127.0.0.1"], "internal.example": ["127.0.0.2"]}
    asked = []

    async def resolve(host, port):
        asked.append(host)
        return names[host]

    monkeypatch.setattr(server.media, "resolve", resolve)
    monkeypatch.setattr(server.media, "public_address", lambda address: address in ("127.0.0.1", "127.0.0.3"))
    srv, session = serve(allow_remote_media=True, remote_timeout_s=5)
    try:
        MediaHandler.hosts.clear()
        ok = chat_with_image(srv.url, f"http://photos.example:{port}/to/http://photos.example:{port}/photo.png")
        assert ok.status_code == 200, ok.text
        assert MediaHandler.hosts == [f"photos.example:{port}"] * 2 and asked == ["photos.example"] * 2
        refused = chat_with_image(srv.url, f"http://photos.example:{port}/to/http://internal.example:{port}/photo.png")
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "media_fetch_refused", refused.text
        assert MediaHandler.hosts == [f"photos.example:{port}"] * 3  # the redirect was not followed
    finally:
        srv.stop()


def test_the_time_limit_bounds_the_whole_fetch_not_each_read(media_host):
    """A host that sends a byte now and then never leaves a read waiting for the timeout: the
    limit is on the whole fetch, so it ends with a 400 instead of holding the request open."""
    srv, _ = serve(allow_remote_media=True, allow_private_media_hosts=True, remote_timeout_s=1)
    try:
        slow = chat_with_image(srv.url, f"{media_host}/drip.png")
        assert slow.status_code == 400 and slow.json()["error"] == {
            "message": "fetching the media URL took longer than 1 s", "type": "invalid_request_error",
            "param": "messages[0].content[0]", "code": "media_fetch_failed"}
    finally:
        srv.stop()


def test_cors_is_off_unless_origins_are_listed():
    plain, _ = serve()
    cors, _ = serve(cors_origins=["http://localhost:3000"])
    try:
        preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
        assert "access-control-allow-origin" not in httpx.options(f"{plain.url}/v1/models", headers=preflight).headers
        allowed = httpx.options(f"{cors.url}/v1/chat/completions", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.get(f"{cors.url}/v1/models", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    finally:
        plain.stop()
        cors.stop()


def test_a_listed_origin_may_send_any_header_and_reach_a_private_address():
    """The openai JS package's preflight asks for its x-stainless-* headers, a key may come as
    x-api-key, and Chrome asks before a public page reaches a private address: all allowed for a
    listed origin (as llama-server and vLLM allow any header), none for another origin."""
    cors, _ = serve(cors_origins=["https://chat.example"], api_key="k")
    try:
        asked = "authorization, content-type, x-api-key, x-stainless-os, x-stainless-retry-count"
        preflight = {"Origin": "https://chat.example", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": asked, "Access-Control-Request-Private-Network": "true"}
        allowed = httpx.options(f"{cors.url}/v1/chat/completions", headers=preflight)
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == "https://chat.example"
        assert allowed.headers["access-control-allow-headers"] == asked
        assert allowed.headers["access-control-allow-private-network"] == "true"
        refused = httpx.options(f"{cors.url}/v1/chat/completions", headers={**preflight, "Origin": "https://evil.example"})
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
        models = httpx.get(f"{cors.url}/v1/models", headers={"Origin": "https://chat.example", "x-api-key": "k"})
        assert models.status_code == 200 and models.headers["access-control-allow-origin"] == "https://chat.example"
    finally:
        cors.stop()


def test_another_host_needs_a_key_or_an_explicit_opt_out():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    with pytest.raises(ValueError, match="--api-key"):
        ServerConfig(model="m", host="0.0.0.0").check()
    ServerConfig(model="m", host="0.0.0.0", api_key="k").check()
    ServerConfig(model="m", host="0.0.0.0", insecure_no_key=True).check()
    # The CLI refuses before loading anything: exit code 2 and one line on stderr.
    done = subprocess.run([sys.executable, "-m", "engine", "serve", "--model", "nowhere", "--host", "0.0.0.0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--api-key" in done.stderr


def test_the_key_is_never_logged(caplog):
    srv, _ = serve(api_key="topsecret-123")
    try:
        with caplog.at_level("DEBUG"):
            httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "fake", "messages": []},
                       headers={"Authorization": "Bearer topsecret-123"})
            httpx.get(f"{srv.url}/v1/models", headers={"Authorization": "Bearer wrong"})
        assert "topsecret-123" not in caplog.text
    finally:
        srv.stop()


def test_media_is_stored_once_by_content_and_trimmed_least_recently_used(tmp_path):
    import asyncio
    import base64

    from server.media import MediaStore

    store = MediaStore(ServerConfig(max_stored_media=3), tmp_path / "media")
    uris = ["data:image/png;base64," + base64.b64encode(png_bytes(color=(i, 0, 0))).decode() for i in range(5)]
    image = lambda uri: asyncio.run(store.image(uri, "x"))  # noqa: E731
    first = image(uris[0])
    assert image(uris[0]) == first  # the same bytes: the same path, so the engine's cache keys match
    for uri in uris[1:3]:
        time.sleep(0.01)
        image(uri)
    time.sleep(0.01)
    image(uris[0])  # used again: now the most recent
    time.sleep(0.01)
    image(uris[3])
    names = sorted(p.name for p in (tmp_path / "media").iterdir())
    assert len(names) == 3 and first.rsplit("/", 1)[1] in names  # uris[1], the least recently used, went


def test_a_re_sent_image_url_is_not_decoded_again_and_a_trimmed_file_comes_back(tmp_path, monkeypatch):
    import asyncio
    import base64

    from server import media
    from server.media import MediaStore

    store = MediaStore(ServerConfig(max_stored_media=1), tmp_path / "media")
    image = lambda uri: asyncio.run(store.image(uri, "x"))  # noqa: E731
    raw = base64.b64encode(png_bytes(color=(9, 0, 0))).decode()
    first = image("data:image/png;base64," + raw)
    assert image(raw) == first  # raw base64 of the same bytes: the same file

    decoded = []
    real = media.split_data
    monkeypatch.setattr(media, "split_data", lambda url, param: decoded.append(url) or real(url, param))
    assert image("data:image/png;base64," + raw) == first
    assert decoded == []  # the string was seen: no base64 decoding, no hashing
    other = image("data:image/png;base64," + base64.b64encode(png_bytes(color=(1, 2, 3))).decode())
    assert not os.path.exists(first)  # trimmed (one file kept)
    assert image(raw) == first and os.path.exists(first)  # stored again, not a dangling path
    assert len(decoded) == 2 and os.path.exists(first) and not os.path.exists(other)


def test_a_new_photo_is_decoded_once_the_engine_takes_the_servers_pixels(tmp_path, monkeypatch):
    import asyncio
    import base64

    import numpy as np
    from PIL import Image

    from engine.api import images
    from server.media import MediaStore

    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = png_bytes(noise=True)
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda fp, *a, **k: opened.append(fp) or real_open(fp, *a, **k))
    path = asyncio.run(store.image("data:image/png;base64," + base64.b64encode(data).decode(), "x"))
    assert len(opened) == 2  # the header check and the one full decode, both of the request's bytes
    decoding = images._HANDED[images._handed_key(path)][0]  # the server's decode, handed over running
    assert decoding.done()  # store.image waited for it (the chat route: MediaStore.confirm)
    handed = decoding.result()
    os.utime(path)  # the same photo re-sent meanwhile touches the file: the pixels still apply
    got = images.load_image(path)  # what the engine calls for the stored file
    assert got is handed and len(opened) == 2  # not decoded again
    again = images.load_image(path)  # taken once: a second read decodes the file
    assert again is not handed and len(opened) == 3
    assert np.array_equal(np.asarray(again), np.asarray(got)) and got.mode == "RGB"


def test_a_new_photo_is_named_by_the_engines_digest_and_the_engine_does_not_read_it_back(tmp_path, monkeypatch):
    """The store hashes a new photo's bytes once, with the engine's digest; ChatSession keys the
    photo's tiles by that digest without reading the stored file (it is not rewritten in place)."""
    import asyncio
    import base64
    from pathlib import Path

    from engine.api import images
    from server.media import MediaStore

    store = MediaStore(ServerConfig(), tmp_path / "media")
    data = png_bytes(noise=True)
    path = asyncio.run(store.image("data:image/png;base64," + base64.b64encode(data).decode(), "x"))
    assert Path(path).name == images.bytes_digest(data).hex() + ".png"
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"{self} read back")
                        if str(self) == path else real_read(self))
    assert images.file_digest(path) == images.bytes_digest(data)
    monkeypatch.undo()
    Path(path).unlink()  # another file there (a new inode and size): its own bytes are hashed
    Path(path).write_bytes(data + b"x")
    assert images.file_digest(path) == images.bytes_digest(data + b"x")
    for i in range(images.DIGESTS_MAX + 3):  # the newest DIGESTS_MAX are kept
        other = tmp_path / f"{i}.bin"
        other.write_bytes(b"%d" % i)
        images.note_digest(other, b"d")
    assert len(images._DIGESTS) == images.DIGESTS_MAX
    images._DIGESTS.clear()


def test_handed_pixels_are_not_used_for_a_changed_file_and_stay_few(tmp_path):
    import os

    from PIL import Image

    from engine.api import images

    path = tmp_path / "a.png"
    path.write_bytes(png_bytes(color=(1, 2, 3)))
    images.hand_over(path, Image.new("RGB", (32, 24), (9, 9, 9)))
    path.write_bytes(png_bytes(color=(4, 5, 6), size=(33, 24)))  # rewritten: another size
    os.utime(path, ns=(1, 1))
    assert images.load_image(path).getpixel((0, 0)) == (4, 5, 6)
    for i in range(images.HANDED_MAX + 2):
        p = tmp_path / f"{i}.png"
        p.write_bytes(png_bytes(color=(i, 0, 0)))
        images.hand_over(p, Image.new("RGB", (32, 24), (i, 0, 0)))
    assert len(images._HANDED) == images.HANDED_MAX  # the oldest dropped
    assert images._take_handed(tmp_path / "0.png") is None and images._take_handed(tmp_path / "5.png") is not None
    images._HANDED.clear()


def test_handed_pixels_stay_within_a_pixel_budget_and_expire(tmp_path, monkeypatch):
    """A request that fails after its photo was checked (n=2, a full queue) never takes the pixels:
    they must not stay in memory (36 MP photos held ~0.5 GB before the budget)."""
    from PIL import Image

    from engine.api import images

    monkeypatch.setattr(images, "HANDED_MAX_PIXELS", 3000)
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.png"
        p.write_bytes(png_bytes(color=(i, 0, 0)))
        paths.append(p)
        images.hand_over(p, Image.new("RGB", (40, 30), (i, 0, 0)))  # 1,200 pixels each
    assert len(images._HANDED) == 2  # 3,600 > 3,000: the oldest went
    images.hand_over(tmp_path / "big.png", Image.new("RGB", (60, 60)))  # alone over the budget: not kept
    assert len(images._HANDED) == 2
    clock = [1000.0]
    monkeypatch.setattr(images.time, "monotonic", lambda: clock[0])
    images._HANDED.clear()
    images.hand_over(paths[0], Image.new("RGB", (4, 4)))
    clock[0] += images.HANDED_TTL_S + 1
    images.hand_over(paths[1], Image.new("RGB", (4, 4)))  # any later call drops what is past its time
    assert images._handed_key(paths[0]) not in images._HANDED and len(images._HANDED) == 1
    assert images._take_handed(paths[1]) is not None
    assert not images._HANDED


def test_remembered_image_urls_stay_within_their_budget(tmp_path, monkeypatch):
    from server import media
    from server.media import MediaStore

    monkeypatch.setattr(media, "SEEN_URL_CHARS", 100)
    store = MediaStore(ServerConfig(), tmp_path / "media")
    store._remember("a" * 20, "/x/a")
    store._remember("a" * 20, "/x/a")  # the same new photo decoded by two requests side by side
    assert store._seen_chars == 20
    for i in range(5):
        store._remember(str(i) * 24, f"/x/{i}")
    urls = [url for url, _ in store._seen.values()]
    assert store._seen_chars <= 100 and "a" * 20 not in urls  # the oldest went first
    assert store._seen_chars == sum(len(u) for u in urls)
    assert media._memo_copy("z" * 26, fetched=False) is None  # more than a quarter of the budget: not kept
    assert media._memo_copy("y" * 25, fetched=True) is None  # a remote URL: its bytes may change
    url = "y" * 25
    kept = media._memo_copy(url, fetched=False)
    assert kept == url and kept is not url  # a copy of its own (made on the worker thread)


def test_image_urls_with_the_same_memo_key_each_find_their_own_file(tmp_path, monkeypatch):
    """The memo's key reads only some characters of a URL: one that shares it with another
    accepted URL is decoded and stored as its own photo, never given the other's file."""
    import asyncio
    import base64

    from server import media
    from server.media import MediaStore

    red, blue = ("data:image/png;base64," + base64.b64encode(png_bytes(color=c)).decode()
                 for c in ((200, 0, 0), (0, 0, 200)))
    monkeypatch.setattr(media, "_url_key", lambda url: url[:22])  # "data:image/png;base64,": one key for both
    store = MediaStore(ServerConfig(), tmp_path / "media")
    first, second = asyncio.run(store.image(red, "x")), asyncio.run(store.image(blue, "x"))
    assert first != second
    decoded = []
    real = media.split_data
    monkeypatch.setattr(media, "split_data", lambda url, param: decoded.append(url) or real(url, param))
    assert asyncio.run(store.image(blue, "x")) == second and decoded == []  # the latest of the two is remembered
    assert asyncio.run(store.image(red, "x")) == first and decoded == [red]  # the other is decoded, not mistaken


def test_line_wrapped_base64_is_the_same_photo_and_broken_base64_is_refused(tmp_path):
    import asyncio
    import base64
    import textwrap

    from server.errors import APIError
    from server.media import MediaStore

    store = MediaStore(ServerConfig(), tmp_path / "media")
    raw = base64.b64encode(png_bytes(color=(3, 4, 5))).decode()
    plain = asyncio.run(store.image("data:image/png;base64," + raw, "x"))
    wrapped = asyncio.run(store.image("data:image/png;base64," + "\n".join(textwrap.wrap(raw, 76)), "x"))
    assert wrapped == plain
    with pytest.raises(APIError) as err:
        asyncio.run(store.image("data:image/png;base64," + raw[:-3] + "!!!", "x"))
    assert err.value.status == 400 and err.value.code == "invalid_base64"


def test_base64_decodes_as_the_standard_library_does():
    """The server's base64 (pybase64 first) gives the standard library's bytes for what that takes,
    including what pybase64 alone refuses (padding after a whole group, line breaks), and a 400 for
    what neither takes."""
    import base64
    import os

    from server.errors import APIError
    from server.media import _b64

    data = os.urandom(3000)
    text = base64.b64encode(data).decode()
    assert _b64(text, "x") == data
    assert _b64(base64.encodebytes(data).decode(), "x") == data  # MIME: a line break every 76 characters
    assert _b64("bHfu=", "x") == base64.b64decode("bHfu=", validate=True) == b"lw\xee"
    for bad in ("abc", "ab!d", "é", text[:-3] + "!!!"):
        with pytest.raises(APIError) as err:
            _b64(bad, "x")
        assert err.value.status == 400 and err.value.code == "invalid_base64"


def test_a_file_path_as_media_url_is_named_as_such_and_never_read(tmp_path):
    """A path or file name where a URL belongs (a common mistake with a local server) gets a 400
    that says the server does not read files, and the file is not opened; raw base64 that starts
    like a path (a JPEG's "/9j/") still decodes; other text is refused as base64."""
    import base64
    import io

    from PIL import Image

    from server.errors import APIError
    from server.media import split_data

    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes())
    for path in (str(photo), photo.as_uri(), "~/photo.png", "./photo.png", "photo.JPG", "C:\\Users\\me\\photo.png",
                 "C:/Users/me/photo.png", "\\\\host\\share\\a.png"):
        with pytest.raises(APIError) as err:
            split_data(path, "messages[0].content[1]")
        assert (err.value.status, err.value.code) == (400, "invalid_url"), path
        assert "file path" in err.value.message and err.value.param == "messages[0].content[1]", path
    buf = io.BytesIO()
    Image.effect_noise((96, 96), 80).convert("RGB").save(buf, "JPEG", quality=95)  # a photo, not a path, long
    raw = base64.b64encode(buf.getvalue()).decode()
    assert raw.startswith("/9j/") and len(raw) > 4096 and split_data(raw, "x") == ("", buf.getvalue())
    with pytest.raises(APIError) as err:  # a damaged photo's base64 that starts like a path
        split_data(raw[:-2] + "!", "x")
    assert err.value.code == "invalid_base64"
    with pytest.raises(APIError) as err:
        split_data("hello there", "x")
    assert err.value.code == "invalid_base64" and "data:image/png;base64," in err.value.message
    # What common encoders get wrong is named: the URL-safe alphabet, the padding left off.
    url_safe = base64.urlsafe_b64encode(bytes(range(250, 256)) * 10).decode()
    assert "-" in url_safe or "_" in url_safe
    unpadded = base64.b64encode(b"abcd").decode().rstrip("=")
    for data, cause in ((url_safe, "URL-safe alphabet"), (unpadded, "padding")):
        with pytest.raises(APIError) as err:
            split_data("data:image/jpeg;base64," + data, "x")
        assert err.value.code == "invalid_base64" and cause in err.value.message, (cause, err.value.message)
    with pytest.raises(APIError) as err:
        split_data("data:image/jpeg;base64,ab!d", "x")
    assert err.value.message == "the media data is not valid base64"


def test_decoding_a_new_image_does_not_block_the_event_loop(tmp_path, monkeypatch):
    """While one request's photo is decoded and checked (slow for a 12 MP JPEG), the loop keeps
    serving: the check here only finishes once a coroutine on the loop has run meanwhile, which
    cannot happen if the check holds the loop."""
    import asyncio
    import base64
    import threading

    from server.media import MediaStore

    store = MediaStore(ServerConfig(), tmp_path / "media")
    check = store._decode
    started, loop_ran = threading.Event(), threading.Event()

    def check_needing_the_loop(data, param):
        started.set()
        assert loop_ran.wait(10), "the event loop did not run while the image was decoded"
        return check(data, param)
    monkeypatch.setattr(store, "_decode", check_needing_the_loop)
    uri = "data:image/png;base64," + base64.b64encode(png_bytes(color=(8, 8, 8))).decode()

    async def scenario():
        async def other_request():
            while not started.is_set():  # runs on the loop during the check, or never
                await asyncio.sleep(0.001)
            loop_ran.set()
        task = asyncio.create_task(other_request())
        path = await store.image(uri, "x")
        await task
        return path
    assert os.path.exists(asyncio.run(scenario()))


@pytest.mark.parametrize("side", [10_000, 100_000], ids=["over our limit", "over Pillow's too"])
def test_an_image_over_the_pixel_limit_is_said_one_way(tmp_path, side, recwarn):
    """Over --max-image-pixels, whether or not Pillow itself refuses to open it: one wording, our
    limit (not Pillow's), and no DecompressionBombWarning on the server's output."""
    import asyncio
    import base64
    import struct
    import zlib

    from server.errors import APIError
    from server.media import MediaStore

    data = bytearray(png_bytes())
    data[16:24] = struct.pack(">II", side, side)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as err:
        asyncio.run(store.image("data:image/png;base64," + base64.b64encode(bytes(data)).decode(), "x"))
    assert err.value.status == 413 and err.value.code == "image_too_large"
    assert err.value.message.startswith(f"the image has {side * side} pixels")
    assert err.value.message.endswith(f", more than the limit of {ServerConfig().max_image_pixels}: downscale it "
                                      "before sending")
    assert not [w for w in recwarn if "DecompressionBomb" in type(w.message).__name__]


def test_a_truncated_image_is_said_plainly(tmp_path):
    import asyncio
    import base64

    from server.errors import APIError
    from server.media import MediaStore

    data = png_bytes(noise=True)
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as err:
        asyncio.run(store.image("data:image/png;base64," + base64.b64encode(data[:len(data) // 2]).decode(), "x"))
    assert err.value.status == 400 and err.value.code == "invalid_image"
    assert err.value.message == "the image cannot be decoded: its data is truncated or corrupt"


def test_an_image_too_large_for_pillow_to_open_is_a_413(tmp_path):
    """A header claiming 100000 x 100000 pixels: Pillow refuses to open it (a decompression bomb)
    before the server's own pixel check; it is still the documented 413, not a 400."""
    import asyncio
    import base64
    import struct
    import zlib

    from server.errors import APIError
    from server.media import MediaStore

    data = bytearray(png_bytes())  # a real PNG whose IHDR (bytes 12-28, CRC after) now says 100000 x 100000
    data[16:24] = struct.pack(">II", 100_000, 100_000)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    data = bytes(data)
    store = MediaStore(ServerConfig(), tmp_path / "media")
    with pytest.raises(APIError) as err:
        asyncio.run(store.image("data:image/png;base64," + base64.b64encode(data).decode(), "x"))
    assert err.value.status == 413 and err.value.code == "image_too_large"
    assert err.value.message == f"the image has {100_000 * 100_000} pixels, more than the limit of " \
                                f"{ServerConfig().max_image_pixels}: downscale it before sending"


def test_port_0_serves_on_the_free_port_it_prints(tiny_checkpoint):
    import re

    from tests.server.helpers import ServerProcess, wait_ready

    proc = ServerProcess(tiny_checkpoint, "--port", "0")  # the last --port wins
    try:
        deadline = time.monotonic() + 60
        while not re.search(r"http://127\.0\.0\.1:(\d+)/v1", proc.output()) and time.monotonic() < deadline:
            assert proc.proc.poll() is None, proc.output()
            time.sleep(0.1)
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/v1", proc.output()).group(1))
        assert port != 0
        wait_ready(f"http://127.0.0.1:{port}", proc=proc.proc)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    finally:
        proc.stop()


def test_docs_load_without_internet_and_without_the_key():
    """/docs is Swagger UI from the fastapi-swagger package (no CDN), open like /openapi.json."""
    srv, _ = serve(api_key="s3cret")
    try:
        # A forged Host does not make the page load its script from elsewhere: root-relative links.
        page = httpx.get(f"{srv.url}/docs", headers={"Host": "evil.example"}, timeout=30)
        assert page.status_code == 200 and 'src="/docs/swagger-ui-bundle.js"' in page.text
        assert "cdn." not in page.text and "://" not in page.text.split("<body>")[-1]
        for path, kind in (("/docs/swagger-ui-bundle.js", "javascript"), ("/docs/swagger-ui.css", "css")):
            asset = httpx.get(f"{srv.url}{path}", timeout=30)
            assert asset.status_code == 200 and kind in asset.headers["content-type"] and len(asset.content) > 10_000
        schema = httpx.get(f"{srv.url}/openapi.json", timeout=30).json()
        assert schema["paths"]["/v1/chat/completions"]
        # With a key, the schema names it: Swagger UI's "Authorize" sends it with "Try it out".
        assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
        assert schema["paths"]["/v1/chat/completions"]["post"]["security"] == [{"apiKey": []}]
        assert "security" not in schema["paths"]["/health"]["get"]  # it answers without the key
        # A request that does not validate is a 400 with OpenAI's error object, as the schema says
        # (trial 66: it declared FastAPI's 422, never sent).
        declared = schema["paths"]["/v1/chat/completions"]["post"]["responses"]
        assert set(declared) == {"200", "400"} and "422" not in json.dumps(schema)
        error = schema["components"]["schemas"]["Error"]["properties"]["error"]
        sent = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": 1}, timeout=30,
                          headers={"Authorization": "Bearer s3cret"})
        assert sent.status_code == 400 and set(sent.json()["error"]) == set(error["required"])
        assert httpx.get(f"{srv.url}/docs/nothing.js", timeout=30).status_code == 404
    finally:
        srv.stop()


def test_metrics_count_what_the_guard_and_the_router_refuse():
    """401 (no key), 413 (too large by Content-Length), 404, 405 and a 200 of a GET route: each counted
    once, by its route's template; unknown paths under one "other" series."""
    srv, _ = serve(api_key="s3cret", max_body_bytes=1000)
    key = {"Authorization": "Bearer s3cret"}
    try:
        assert httpx.post(f"{srv.url}/v1/chat/completions", json={}, timeout=30).status_code == 401
        assert httpx.post(f"{srv.url}/v1/chat/completions", content=b"x" * 2000, headers=key,
                          timeout=30).status_code == 413
        for path in ("/v1/nothing", "/v1/other-nothing"):
            assert httpx.get(f"{srv.url}{path}", headers=key, timeout=30).status_code == 404
        assert httpx.get(f"{srv.url}/v1/chat/completions", headers=key, timeout=30).status_code == 405
        assert httpx.get(f"{srv.url}/v1/models", headers=key, timeout=30).status_code == 200
        assert httpx.get(f"{srv.url}/v1/models/gpt-4o", headers=key, timeout=30).status_code == 404
        assert httpx.options(f"{srv.url}/v1/models", timeout=30).status_code == 405  # no CORS: counted too
        text = httpx.get(f"{srv.url}/metrics", headers=key, timeout=30).text
        for endpoint, status, count in (("/v1/chat/completions", "401", 1), ("/v1/chat/completions", "413", 1),
                                        ("other", "404", 2), ("/v1/chat/completions", "405", 1),
                                        ("/v1/models", "200", 1), ("/v1/models/{model}", "404", 1),
                                        ("/v1/models", "405", 1)):
            line = f'smolchat_requests_total{{endpoint="{endpoint}",status="{status}"}} {count:.1f}'
            assert line in text, (line, [x for x in text.splitlines() if x.startswith("smolchat_requests_total")])
    finally:
        srv.stop()


def test_a_loopback_server_without_a_key_refuses_other_host_names():
    """DNS rebinding: a page on evil.example re-points its name at 127.0.0.1 and its script calls the
    API; the browser sends Host: evil.example. Loopback names (with or without a port) pass."""
    srv, _ = serve()
    try:
        for host, status in (("evil.example", 403), ("evil.example:8080", 403), ("localhost", 200),
                             ("127.0.0.1:1234", 200), ("[::1]:8080", 200), ("LOCALHOST:9", 200),
                             ("localhost.:9", 200), ("127.0.0.1:80@evil.example", 403),
                             ("localhost.evil.example", 403), ("[::ffff:127.0.0.1]", 403)):
            r = httpx.get(f"{srv.url}/v1/models", headers={"Host": host}, timeout=30)
            assert r.status_code == status, (host, r.text)
            if status == 403:
                assert r.json()["error"]["code"] == "host_not_allowed"
    finally:
        srv.stop()
    keyed, _ = serve(api_key="s3cret")  # with a key the script cannot authenticate anyway: any name
    try:
        r = httpx.get(f"{keyed.url}/v1/models", headers={"Host": "my-box.lan", "Authorization": "Bearer s3cret"},
                      timeout=30)
        assert r.status_code == 200
    finally:
        keyed.stop()


def test_https_media_is_fetched_from_the_checked_address_with_the_names_certificate(tls_media_host, monkeypatch):
    """The connection goes to the address that was checked, not the name, so TLS must still send the
    name (SNI) and check the certificate against it: a certificate for ``localhost`` is taken at
    https://localhost (whichever of its addresses answers), refused when the CA is not trusted, and
    refused for https://127.0.0.1 (the same server, but not the name on its certificate)."""
    import certifi

    port, ca_file = tls_media_host
    srv, session = serve(allow_remote_media=True, allow_private_media_hosts=True, remote_timeout_s=5)
    try:
        untrusted = chat_with_image(srv.url, f"https://localhost:{port}/photo.png")
        assert untrusted.status_code == 400 and untrusted.json()["error"]["code"] == "media_fetch_failed"
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.json()["error"]["message"]  # the reason, not just ConnectError
        monkeypatch.setattr(certifi, "where", lambda: ca_file)  # httpx's default trust store, now with the test CA
        MediaHandler.hosts.clear()
        fetched = chat_with_image(srv.url, f"https://localhost:{port}/photo.png")
        assert fetched.status_code == 200, fetched.text
        assert MediaHandler.hosts == [f"localhost:{port}"] and session.sent[-1][1][0].endswith(".png")
        wrong_name = chat_with_image(srv.url, f"https://127.0.0.1:{port}/photo.png")
        assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == "media_fetch_failed"
        assert "IP address mismatch" in wrong_name.json()["error"]["message"], wrong_name.json()
    finally:
        srv.stop()


def test_a_base_url_without_v1_or_a_trailing_slash_reaches_its_route():
    """Trial 66 F10: /chat/completions was a bare "Not Found" and /v1/chat/completions/ a 307 with an
    empty body; llama-server answers both. The key is still asked for, and unknown paths stay 404."""
    srv, _ = serve(api_key="s3cret")
    key = {"Authorization": "Bearer s3cret"}
    body = {"model": "fake", "max_tokens": 3, "messages": [{"role": "user", "content": "one two three"}]}
    try:
        want = httpx.post(f"{srv.url}/v1/chat/completions", json=body, headers=key, timeout=30).json()
        for path in ("/chat/completions", "/v1/chat/completions/", "/chat/completions/"):
            assert httpx.post(f"{srv.url}{path}", json=body, timeout=30).status_code == 401
            got = httpx.post(f"{srv.url}{path}", json=body, headers=key, timeout=30)
            assert got.status_code == 200, (path, got.text)
            assert got.json()["choices"] == want["choices"]
        assert [m["id"] for m in httpx.get(f"{srv.url}/models", headers=key, timeout=30).json()["data"]] == ["fake"]
        assert httpx.get(f"{srv.url}/models/fake", headers=key, timeout=30).json()["id"] == "fake"
        assert httpx.get(f"{srv.url}/health/", timeout=30).json() == {"status": "ok"}  # open, as /health
        for path in ("/v1/models/", "/models/"):  # the list (trial 67: /v1/models/ asked for model "")
            assert httpx.get(f"{srv.url}{path}", headers=key, timeout=30).json()["data"][0]["id"] == "fake"
        assert httpx.get(f"{srv.url}/v1/models/fake/", headers=key, timeout=30).json()["id"] == "fake"
        for path in ("/nothing", "/v1/nothing/", "/v1/v1/models"):
            missing = httpx.get(f"{srv.url}{path}", headers=key, timeout=30)
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        metrics = httpx.get(f"{srv.url}/metrics", headers=key, timeout=30).text
        assert 'smolchat_requests_total{endpoint="/v1/chat/completions",status="200"} 4.0' in metrics
    finally:
        srv.stop()
