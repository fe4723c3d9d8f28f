"""Pure helpers: data folder, resources, status text, entry-point arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.formatting import error_words, finish_footer, model_summary, pending_summary, stats_summary
from app.images import InvalidImageError, validate_image
from app.main import create_app, parse_args
from app.paths import data_dir, pasted_images_dir, resource, resources_dir


def test_data_dir_honours_env(data_dir):
    from app import paths

    assert paths.data_dir() == data_dir and data_dir.is_dir()
    assert pasted_images_dir() == data_dir / "pasted"


def test_data_dir_default_is_platform_user_data_dir(monkeypatch):
    import platformdirs

    monkeypatch.delenv("SMOLCHAT_DATA_DIR")
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda name, appauthor=None: f"/tmp/smolchat-test-{name}")
    assert data_dir() == Path("/tmp/smolchat-test-Smolchat")


def test_resources_exist():
    assert resources_dir() == Path(__file__).resolve().parents[2] / "resources"
    for name in ("smolchat.svg", "style.qss", "smolchat.desktop", "icons/send.svg", "icons/stop.svg", "icons/attach.svg"):
        assert resource(name).is_file(), name
    desktop = resource("smolchat.desktop").read_text()
    assert "Exec=smolchat" in desktop and "Name=Smolchat" in desktop


def test_create_app_applies_style_sheet(qapp):
    app = create_app([])
    assert app is qapp
    assert "#sendButton" in app.styleSheet()
    assert not app.windowIcon().isNull()


def test_parse_args():
    args = parse_args(["--model", "HuggingFaceTB/SmolVLM-256M-Instruct", "--device", "cpu", "--dtype", "float32"])
    assert (args.model, args.device, args.dtype) == ("HuggingFaceTB/SmolVLM-256M-Instruct", "cpu", "float32")
    assert parse_args([]).model is None
    with pytest.raises(SystemExit):
        parse_args(["--device", "tpu"])
    # Found by a trial: --dtype int3 opened the window only to fail there; "auto" was not accepted.
    with pytest.raises(SystemExit):
        parse_args(["--dtype", "int3"])
    assert (parse_args(["--device", "auto", "--dtype", "BF16"]).device, parse_args(["--dtype", "BF16"]).dtype) == \
        ("auto", "bf16")


def test_version(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit) as exited:
        parse_args(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"smolchat {metadata.version('smolchat')}"


def test_summaries():
    info = {"model_name": "SmolVLM-256M", "device": "cuda", "dtype": "bfloat16"}
    assert model_summary(info) == "SmolVLM-256M · cuda · bfloat16"
    assert model_summary({**info, "weights": "int8"}) == "SmolVLM-256M · cuda · bfloat16 · int8"
    assert model_summary({**info, "weights": "int4"}) == "SmolVLM-256M · cuda · bfloat16 · int4"
    result = {"finish_reason": "stop", "prompt_tokens": 1141, "generated_tokens": 64, "ttft_s": 0.041,
              "decode_tokens_per_s": 212.34, "cached_tokens": 0}
    assert stats_summary(result) == "TTFT 0.04 s · 212.3 tok/s · 1141 prompt / 0 cached / 64 generated tokens"
    assert pending_summary([]) == ""
    assert pending_summary([1088, 64]) == "2 images · 1,152 image tokens"
    assert pending_summary([None]) == "1 image · counting image tokens…"
    assert stats_summary({"finish_reason": "error", "error": "x"}) == ""
    # Refused before the prefill (a prompt longer than the context): no row of zeros under the error.
    assert stats_summary({"finish_reason": "error", "error": "x", "prompt_tokens": 0, "generated_tokens": 0,
                          "ttft_s": 0.0, "decode_tokens_per_s": 0.0, "cached_tokens": 0}) == ""
    # dropped_turns counts messages (the engine drops whole exchanges: a question and its answer).
    assert stats_summary({**result, "dropped_turns": 4}) == (
        "TTFT 0.04 s · 212.3 tok/s · 1141 prompt / 0 cached / 64 generated tokens · "
        "4 old messages dropped to fit the context")
    assert stats_summary({**result, "dropped_turns": 1}).endswith(" · 1 old message dropped to fit the context")
    # Under an answer whose note says it already, once (trial 56: said twice in one line).
    from app.formatting import footer_text

    noted = {**result, "finish_reason": "stop", "dropped_turns": 282,
             "notice": "The conversation no longer fits the context of m on llama: the 282 oldest messages were left out."}
    assert footer_text(noted) == (noted["notice"] + " · TTFT 0.04 s · 212.3 tok/s · 1141 prompt / 0 cached / 64 "
                                  "generated tokens")
    assert footer_text({**noted, "notice": ""}).endswith(" · 282 old messages dropped to fit the context")
    # A server's answer stopped before its usage came (trial 44: "0 prompt / 0 cached / 109 generated").
    assert stats_summary({**result, "prompt_tokens": 0, "generated_tokens": 109}) == (
        "TTFT 0.04 s · 212.3 tok/s · 109 generated tokens")
    # Stopped before the first token: no TTFT or speed was measured, so none is shown (was
    # "TTFT 0.00 s · 0.0 tok/s · ..."); one token has a TTFT but no decode rate.
    assert stats_summary({"finish_reason": "cancelled", "prompt_tokens": 1141, "generated_tokens": 0, "ttft_s": 0.0,
                          "decode_tokens_per_s": 0.0, "cached_tokens": 0}) == "1141 prompt / 0 cached / 0 generated tokens"
    assert stats_summary({**result, "generated_tokens": 1, "decode_tokens_per_s": 0.0}) == \
        "TTFT 0.04 s · 1141 prompt / 0 cached / 1 generated token"
    assert finish_footer({"finish_reason": "cancelled"}) == "stopped by you (cancelled)"
    assert finish_footer({"finish_reason": "error", "error": "boom"}) == "failed (error): boom"
    assert finish_footer(result) == ""


def test_validate_image(png, tmp_path):
    assert validate_image(png) == png.resolve()
    with pytest.raises(InvalidImageError, match="Image file not found"):
        validate_image(tmp_path / "missing.png")


def test_model_argument_remembers_local_folders_as_absolute_paths(tmp_path, monkeypatch):
    from app.main import parse_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints" / "tiny").mkdir(parents=True)
    assert parse_args(["--model", "checkpoints/tiny"]).model == str(tmp_path / "checkpoints" / "tiny")
    assert parse_args(["--model", "HuggingFaceTB/SmolVLM-256M-Instruct"]).model == "HuggingFaceTB/SmolVLM-256M-Instruct"


def test_huge_image_is_called_too_large_not_broken(tmp_path, monkeypatch):
    from PIL import Image

    big = tmp_path / "big.png"
    Image.new("L", (3000, 2000)).save(big)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2_000_000)  # bomb error above 4 MP
    with pytest.raises(InvalidImageError) as info:
        validate_image(big)
    assert str(info.value) == "Image is too large to open safely: big.png (6.0 megapixels)"


def test_validate_image_names_a_pipe_or_a_folder_for_what_it_is(tmp_path):
    """Issue 18: a named pipe or a folder given as an image is said to be one (not "not found")."""
    import os

    pipe = tmp_path / "photo.png"
    os.mkfifo(pipe)
    with pytest.raises(InvalidImageError, match=r"photo.png is not a regular file \(a pipe or a device\), not an image"):
        validate_image(pipe)
    with pytest.raises(InvalidImageError, match=r"is a folder, not an image file"):
        validate_image(tmp_path)


@pytest.mark.parametrize("error_type, message, words", [
    # The engine's own words (the local engine).
    ("PromptTooLongError", "the prompt has 9000 tokens but the context holds 8192",
     "Too long for the model's context: this message makes a prompt of 9000 tokens but the context holds 8192. "
     "Shorten it or send it in parts (a long chat keeps only the earlier messages that fit)."),
    ("PromptTooLongError", "the prompt has 8300 tokens but the context holds 8192; the system prompt alone has "
     "5000 tokens: shorten it in Settings",
     "The prompt has 8300 tokens but the context holds 8192; the system prompt alone has 5000 tokens: "
     "shorten it in Settings."),
    # A Smolchat server's (app.backends.remote prefixes the verdict; the server adds its advice).
    ("Remote:context", "home: The conversation is longer than the model's context: the prompt has 9012 tokens (8640 of "
     "them for images) but the context holds 8192: shorten the prompt or the conversation, or send fewer images",
     "home: Too long for the model's context: this message makes a prompt of 9012 tokens (8640 of them for images) but "
     "the context holds 8192. Attach fewer images or pick a lower image detail, shorten it, or send it in parts "
     "(a long chat keeps only the earlier messages that fit)."),
    ("Remote:context", "The conversation is longer than the model's context: the prompt has 8300 tokens but the "
     "context holds 8192; the system prompt alone has 5000 tokens: shorten the system message",
     "The prompt has 8300 tokens but the context holds 8192; the system prompt alone has 5000 tokens: "
     "shorten it in Settings."),
    # llama-server's words.
    ("Remote:context", "laptop: The conversation is longer than the model's context: the request exceeds the available "
     "context size, try increasing it",
     "laptop: Too long for the model's context: the server refused this message even without the earlier ones (“the "
     "request exceeds the available context size, try increasing it”). Shorten it or send it in parts."),
    ("Remote:closed", "The server closed the connection", "The server closed the connection"),
])
def test_error_words_say_what_to_do_about_a_message_beyond_the_context(error_type, message, words):
    assert error_words(error_type, message) == words


def test_message_times_say_the_day_only_when_it_is_not_today():
    import datetime as dt

    from app.formatting import message_time

    now = dt.datetime(2026, 12, 5, 16, 47).timestamp()
    at = lambda *args: dt.datetime(*args).timestamp()  # noqa: E731 - local times
    assert message_time(at(2026, 12, 5, 9, 5, 7), now) == ("09:05", "Sat 5 Dec 2026, 09:05:07")
    assert message_time(at(2026, 12, 4, 23, 59), now)[0] == "Yesterday 23:59"
    assert message_time(at(2026, 11, 28, 8, 0), now)[0] == "28 Nov 08:00"
    assert message_time(at(2025, 12, 31, 22, 0), now) == ("31 Dec 2025", "Wed 31 Dec 2025, 22:00:00")
    assert message_time(at(2026, 12, 6, 1, 0), now)[0] == "01:00"  # a clock set back: not "tomorrow"
    assert message_time(at(2099, 1, 1, 0, 1), now)[0] == "1 Jan 2099"  # far ahead: said whole (trial 56)
