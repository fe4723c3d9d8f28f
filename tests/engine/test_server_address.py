"""``engine.api.servers``: what the CLI's ``generate --server`` takes as a server's address."""

from __future__ import annotations

import pytest

from engine.api.servers import api_base, check_server_address


@pytest.mark.parametrize("text", ["http://127.0.0.1:8080", "https://gpu-box/v1", "http://gpu-box:8000/v1/",
                                  "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "gpu-box:8000/v1"])
def test_addresses_are_taken_as_given(text):
    assert check_server_address(text) == text


@pytest.mark.parametrize("text", ["not-a-url", "gpu-box", "ftp://gpu-box:21", "http://", "https://", "",
                                  "localhost:http", "http://localhost:99999", "http://gpu box:8000", ":8080"])
def test_what_is_no_address_is_refused_in_words(text):
    with pytest.raises(ValueError) as refused:
        check_server_address(text)
    assert str(refused.value) == f"{text!r} is not a server address; give one like http://127.0.0.1:8080"


def test_an_address_without_a_scheme_is_http_as_the_app_reads_it():
    assert api_base("localhost:8080") == "http://localhost:8080/v1"
    assert api_base("https://gpu-box/v1/") == "https://gpu-box/v1"
