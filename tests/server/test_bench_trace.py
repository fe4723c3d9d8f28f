"""The server benches' arithmetic and inputs: bench/server_trace.py's HTTP share (which phases it sums
and what it divides by), bench/server.py's fresh photos (new bytes every run and side) and its
in-process side run through the server's own engine service."""

import hashlib
from types import SimpleNamespace

import pytest

from bench.server import fresh_photo, service_turns
from bench.server_trace import http_share, image_split


def _http(t0: float, encode: float | None) -> dict:
    """Stamps (s) of one traced HTTP turn: 1 ms in each of the six HTTP phases, 51 ms of media and
    engine work between them that the share must leave out."""
    r = {"client_sent": t0, "asgi_in": t0 + 0.001, "body_done": t0 + 0.002, "turns_start": t0 + 0.003,
         "turns_end": t0 + 0.030, "hist_start": t0 + 0.031, "first_token": t0 + 0.055,
         "first_written": t0 + 0.056, "client_first": t0 + 0.057}
    if encode is not None:
        r["client_encoded"] = t0 + encode
    return r


def test_http_share_sums_the_http_phases_against_the_paired_in_process_ttft():
    http = [_http(10.0, 0.0004), _http(20.0, 0.0004), _http(30.0, 0.0004)]
    local = [{"sent": 0.0, "first": 0.100}, {"sent": 1.0, "first": 1.200}, {"sent": 2.0, "first": 2.150}]
    # 6 ms of HTTP against 100, 200 and 150 ms: 6%, 3%, 4% -> median 4%; without the 0.4 ms of JSON
    # 5.6 ms: 5.6%, 2.8%, 3.73% -> 3.7%.
    assert http_share(http, local) == (
        "HTTP 6.00 ms, 4.0% of the same run's in-process TTFT (medians of the runs' shares; that TTFT's "
        "median 150.0 ms); without the client's JSON encoding (0.40 ms) 5.60 ms, 3.7%")


def test_http_share_without_an_encoding_stamp_counts_no_encoding():
    # A trace written before the encoding was stamped apart (bench/results before session 23).
    share = http_share([_http(10.0, None)], [{"sent": 0.0, "first": 0.120}])
    assert share == ("HTTP 6.00 ms, 5.0% of the same run's in-process TTFT (medians of the runs' shares; that "
                     "TTFT's median 120.0 ms); without the client's JSON encoding (0.00 ms) 6.00 ms, 5.0%")


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_every_run_and_side_gets_a_photo_of_its_own(shared_dir, fmt):
    """A first turn must bring a photo neither side has seen, or the server's media store and the
    engine's caches serve it: JPEG's quantization erased a one-pixel change, and 17 runs sent 4-5
    distinct photos, the in-process side's the same as the server's."""
    args = SimpleNamespace(same_photo=False, image=str(shared_dir / "images" / "coffee.png"), photo_format=fmt)
    digests = {hashlib.sha256(fresh_photo(args, run, side)).hexdigest() for run in range(17) for side in (0, 1)}
    assert len(digests) == 34


def test_image_split_shows_the_decode_going_on_past_to_turns():
    http = [{**_http(10.0, 0.0004), "turns_end": 10.006, "check_start": 10.004, "check_end": 10.024,
             "hist_end": 10.008, "tiles_start": 10.025, "tiles_end": 10.040}]
    local = [{"sent": 0.0, "tiles_start": 0.022, "tiles_end": 0.038, "first": 0.100}]
    # to_turns starts the 20 ms decode 1 ms in and returns 3 ms in; the engine, synced 5 ms in,
    # waits 17 ms for the pixels and tiles for 15 (16 in process).
    assert image_split(http, local) == [
        "image work of the first turn (median, ms): through HTTP",
        "  to_turns -> the decode begins                  1.00",
        "  decode (a decoder thread)                     20.00",
        "  the decode's part after to_turns              18.00",
        "  engine: sync -> the pixels (waits for them)    17.00",
        "  engine: resize and tile                       15.00",
        "in process",
        "  engine: read, digest, decode                  22.00",
        "  engine: resize and tile                       16.00"]


def test_service_turns_asks_a_new_chat_and_its_follow_up_through_the_engine_service(tmp_path, shared_dir):
    """bench/server.py's in-process side (``--reference server``) on a scripted engine: a new chat
    with the photo and the system prompt, then the follow-up in the same chat, timed from ``send``."""
    from engine.service import EngineService
    from tests.server.fakes import FakeSession, fake_loader

    session = FakeSession(delay=0.01)
    service = EngineService(fake_loader(session))
    loaded = []
    service.load("fake", {}, lambda info, error: loaded.append(error))
    service.set_history([], "old chat")
    photo = str(shared_dir / "images" / "coffee.png")
    try:
        out = service_turns(service, {"image": photo, "text": "Describe this photo now.", "follow": "And colours?",
                                      "system": "Benchmark run 1, side 0.", "max_tokens": 8, "detail": "high"})
    finally:
        service.shutdown(1.0)
    assert loaded == [None]
    assert session.sent == [("Describe this photo now.", [photo]), ("And colours?", [])]
    assert session.system_prompt == "Benchmark run 1, side 0."
    assert set(out) == {"ttft", "follow_ttft", "tok_s", "cpu"} and out["ttft"] > 0 and out["follow_ttft"] > 0
    # Four words, each after a 10 ms sleep: three gaps of >= 10 ms after the first token, so at most
    # 100 tok/s however loaded the machine; counting the first token too would give up to 133.
    assert 0 < out["tok_s"] <= 100


def test_service_turns_raises_the_engines_error(shared_dir):
    from engine.service import EngineService
    from tests.server.fakes import FakeSession, fake_loader

    service = EngineService(fake_loader(FakeSession()))
    service.load("fake", {}, lambda info, error: None)
    try:
        with pytest.raises(RuntimeError, match="the in-process answer failed"):
            service_turns(service, {"image": str(shared_dir / "images" / "coffee.png"), "text": "fail at the third word",
                                    "follow": "x", "system": "s", "max_tokens": 8, "detail": "low"})
    finally:
        service.shutdown(1.0)


def test_socket_client_reads_the_same_stream_as_httpx_and_raises_an_error_status():
    """bench/server.py's SocketClient against the real app (a scripted engine): the payloads httpx
    reads, two requests on one keep-alive connection, a refused request as RuntimeError with its body."""
    import json

    import httpx

    from bench.server import SocketClient, sse_payloads
    from server.app import create_app
    from server.config import ServerConfig
    from tests.server.fakes import FakeSession, fake_loader
    from tests.server.helpers import ThreadServer, wait_ready

    srv = ThreadServer(create_app(ServerConfig(model="fake"), loader=fake_loader(FakeSession())))
    sender = None
    try:
        wait_ready(srv.url)
        body = {"model": "fake", "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "three little words"}]}
        request = {"content": json.dumps(body).encode(), "headers": {"content-type": "application/json"}}

        def summary(payloads: list[str]) -> tuple:
            """(role, text, finish reason, usage, the last payload): how tokens group into chunks
            depends on timing, what they say does not."""
            chunks = [json.loads(p) for p in payloads[:-1]]
            choices = [c for chunk in chunks for c in chunk["choices"]]
            return (choices[0]["delta"].get("role"), "".join(c["delta"].get("content", "") for c in choices),
                    choices[-1]["finish_reason"], chunks[-1]["usage"], payloads[-1])
        with httpx.Client() as client:
            expected = summary(list(sse_payloads(client, f"{srv.url}/v1", request)))
        assert expected == ("assistant", "three little words ", "stop",
                            {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                             "prompt_tokens_details": {"cached_tokens": 0}}, "[DONE]")
        sender = SocketClient("127.0.0.1", srv.port)
        for _ in range(2):  # the second on the same connection: the first was read to its end
            assert summary(list(sse_payloads(sender, f"{srv.url}/v1", request))) == expected
        with pytest.raises(RuntimeError, match=r"HTTP 404: .*model_not_found"):
            list(sender.post_events("/v1/chat/completions", json.dumps({**body, "model": "other"}).encode()))
    finally:
        if sender is not None:
            sender.close()
        srv.stop()


def test_median_ci_brackets_the_median_and_narrows_with_more_runs():
    from bench.server import median_ci

    assert median_ci([0.05] * 30) == (0.05, 0.05, 0.05)
    small = median_ci([float(v) for v in range(101)])  # 0..100: median 50, n = 101
    large = median_ci([v / 10 for v in range(1001)])  # the same spread, n = 1001
    assert small[0] == 50.0 and large[0] == 50.0
    # The median's standard error for a uniform spread of width 100: 100 / (2 sqrt(n)): about 5 at
    # n = 101 and 1.6 at n = 1001, so the 95% intervals are ~ +-10 and ~ +-3.1.
    assert 37 < small[1] < 45 and 55 < small[2] < 63
    assert 45.5 < large[1] < 48.5 and 51.5 < large[2] < 54.5
    assert median_ci([float(v) for v in range(101)]) == small  # seeded
