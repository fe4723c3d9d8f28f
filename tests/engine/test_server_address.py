"""``engine.api.servers``: what the CLI's ``generate --server`` takes as a server's address."""

from __future__ import annotations

import pytest

from engine.api.servers import api_base, check_server_address, masked_url, split_password, with_password


@pytest.mark.parametrize("text", ["http://127.0.0.1:8080", "https://gpu-box/v1", "http://gpu-box:8000/v1/",
                                  "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "gpu-box:8000/v1",
                                  "http://bücher.example:8080", "http://my_box.local.:8000/v1",
                                  "http://a.b-c.d/v1"])
def test_addresses_are_taken_as_given(text):
    assert check_server_address(text) == text


@pytest.mark.parametrize("text", ["not-a-url", "gpu-box", "ftp://gpu-box:21", "http://", "https://", "",
                                  "localhost:http", "http://localhost:99999", "http://gpu box:8000", ":8080",
                                  "host:0", "http://localhost:0", "https://gpu-box:0/v1",  # 0: no port to connect to
                                  # Found by a trial: the first killed the test thread (IDNA codec), the
                                  # second failed only later, in DNS.
                                  "https://..../v1", "http://-bad-.com/v1", "http://a..b:80", "http://x" + "y" * 63 + ".z"])
def test_what_is_no_address_is_refused_in_words(text):
    with pytest.raises(ValueError) as refused:
        check_server_address(text)
    assert str(refused.value) == f"{text!r} is not a server address; give one like http://127.0.0.1:8080"


def test_an_address_without_a_scheme_is_http_as_the_app_reads_it():
    assert api_base("localhost:8080") == "http://localhost:8080/v1"
    assert api_base("https://gpu-box/v1/") == "https://gpu-box/v1"


def test_a_refused_address_shows_no_password():
    with pytest.raises(ValueError) as refused:
        check_server_address("http://user:pw@localhost:0")
    assert str(refused.value) == "'http://user:***@localhost:0' is not a server address; give one like http://127.0.0.1:8080"


@pytest.mark.parametrize("url, shown", [
    ("http://user:pw@localhost:9", "http://user:***@localhost:9"),
    ("https://me:s3cr:et@gpu-box/v1/models", "https://me:***@gpu-box/v1/models"),
    ("user:pw@gpu-box:8000", "user:***@gpu-box:8000"),  # no scheme, as the CLI and the app take it
    ("http://sk-token@gpu-box:8000/v1", "http://***@gpu-box:8000/v1"),  # a user name alone may be the key
    ("http://a@b:pw@gpu-box:1", "http://a@b:***@gpu-box:1"),  # the host follows the last @
    ("http://gpu-box:8000/v1?q=a@b", "http://gpu-box:8000/v1?q=a@b"),  # an @ after the host is no user
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("not a url", "not a url"),
    ("gpu: http://u:p@h:1/v1/models answered text/html, not JSON; see https://t@docs/x",  # a message holding URLs
     "gpu: http://u:***@h:1/v1/models answered text/html, not JSON; see https://***@docs/x"),
])
def test_masked_url_hides_what_is_before_the_host(url, shown):
    assert masked_url(url) == shown


@pytest.mark.parametrize("url, bare, password", [
    ("http://bob:pa55@host:8080/v1", "http://bob@host:8080/v1", "pa55"),
    ("https://me:s3cr:et@gpu-box/v1", "https://me@gpu-box/v1", "s3cr:et"),  # the password after the first :
    ("user:pw@gpu-box:8000", "user@gpu-box:8000", "pw"),  # no scheme
    ("http://a@b:pw@gpu-box:1", "http://a@b@gpu-box:1", "pw"),  # the host follows the last @, as masked_url reads it
    ("http://:pw@h", "http://@h", "pw"),
    ("http://bob@host", "http://bob@host", ""),  # a user alone: no password to take out
    ("http://bob:@host", "http://bob:@host", ""),
    ("http://gpu-box:8000/v1?q=a:b@c", "http://gpu-box:8000/v1?q=a:b@c", ""),  # an @ after the host is no user
])
def test_a_password_is_taken_out_of_a_url_and_put_back(url, bare, password):
    assert split_password(url) == (bare, password)
    assert with_password(bare, password) == (url if password else bare)


def test_a_password_goes_only_where_a_user_is():
    assert with_password("http://gpu-box:8000/v1", "pw") == "http://gpu-box:8000/v1"
    assert with_password("http://bob@gpu-box", "") == "http://bob@gpu-box"
