"""Markdown export, read as text: videos under readable names in their own folder, a user's line breaks kept."""

from __future__ import annotations

import pytest

from app.export import export_markdown, plain_markdown


def test_videos_get_readable_names_in_a_videos_folder(store, tmp_path):
    first, second = tmp_path / "slideshow.mp4", tmp_path / "clip.webm"
    first.write_bytes(b"first video's bytes")
    second.write_bytes(b"second video's bytes")
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"a picture")
    videos = [store.store_image(first), store.store_image(second)]
    image = store.store_image(photo)
    conv = store.create_conversation("Clips").id
    store.add_message(conv, "user", "What happens?", [videos[0], image])
    store.add_message(conv, "assistant", "A slideshow.")
    store.add_message(conv, "user", "And in these?", [videos[1], videos[0]])  # the first one again
    out = tmp_path / "out"
    out.mkdir()
    (out / "chat_videos").mkdir()
    (out / "chat_videos" / "video-1.mp4").write_bytes(b"an older export's video")

    text = export_markdown(store, conv, out / "chat.md").read_text()

    image_name = image.rsplit("/", 1)[1]
    assert text == (
        "# Clips\n\n"
        "## You\n\n"
        "[video: video-1.mp4](chat_videos/video-1.mp4)\n\n"
        f"![image](chat_images/{image_name})\n\n"
        "What happens?\n\n"
        "## Assistant\n\n"
        "A slideshow.\n\n"
        "## You\n\n"
        "[video: video-2.webm](chat_videos/video-2.webm)\n\n"
        "[video: video-1.mp4](chat_videos/video-1.mp4)\n\n"
        "And in these?\n")
    assert sorted(p.name for p in (out / "chat_videos").iterdir()) == ["video-1.mp4", "video-2.webm"]
    assert (out / "chat_videos" / "video-1.mp4").read_bytes() == b"first video's bytes"  # replaced, not kept
    assert (out / "chat_videos" / "video-2.webm").read_bytes() == b"second video's bytes"
    assert [p.name for p in (out / "chat_images").iterdir()] == [image_name]


def test_a_users_single_line_breaks_are_kept_as_hard_breaks(store, tmp_path):
    conv = store.create_conversation("Lines").id
    store.add_message(conv, "user", "Line one\nLine two\n\nNew paragraph\n```\ncode line\nmore code\n```\nAfter")
    store.add_message(conv, "assistant", "Model markdown\nstays as written.")

    text = export_markdown(store, conv, tmp_path / "chat.md").read_text()

    assert text == ("# Lines\n\n## You\n\n"
                    "Line one  \nLine two\n\nNew paragraph\n```\ncode line\nmore code\n```\nAfter\n\n"
                    "## Assistant\n\nModel markdown\nstays as written.\n")


@pytest.mark.parametrize("text,expected", [
    ("Line one\nLine two", "Line one  \nLine two"),
    ("a\nb\nc", "a  \nb  \nc"),
    ("already  \nbroken", "already  \nbroken"),
    ("one line", "one line"),
    ("x\n~~~~\n```\ninside\n~~~~\ny\nz", "x\n~~~~\n```\ninside\n~~~~\ny  \nz"),  # ``` does not close ~~~~
    ("    indented\nnext", "    indented  \nnext"),
    # What Markdown would take as structure reads as typed (the app shows a user's text as written).
    ("# not a heading", "\\# not a heading"),
    ("> not a quote\nsecond", "\\> not a quote  \nsecond"),
    ("Title\n=====", "Title  \n\\====="),
    ("Title\n---", "Title  \n\\---"),
    ("  * * *", "  \\* * *"),
    ("<details>open</details> a<b", "\\<details>open\\</details> a\\<b"),
    ("`<b>` stays code, <b> does not", "`<b>` stays code, \\<b> does not"),
    ("#hashtag, 3 > 2, - a list\n- item", "#hashtag, 3 > 2, - a list  \n- item"),
    ("```\n# a comment in code\n```", "```\n# a comment in code\n```"),
])
def test_plain_markdown(text, expected):
    assert plain_markdown(text) == expected
