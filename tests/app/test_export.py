"""Markdown export, read as text: files under the names they were attached as (or readable ones) in
their own folders, a user's line breaks kept; JSON with those names."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app.export import MAX_NAME_BYTES, export_json, export_markdown, plain_markdown, safe_file_name, suggested_name


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
        "[video: video-1 (2).mp4](<chat_videos/video-1 (2).mp4>)\n\n"  # a file already there is never replaced
        f"![image](chat_images/{image_name})\n\n"
        "What happens?\n\n"
        "## Assistant\n\n"
        "A slideshow.\n\n"
        "## You\n\n"
        "[video: video-2.webm](chat_videos/video-2.webm)\n\n"
        "[video: video-1 (2).mp4](<chat_videos/video-1 (2).mp4>)\n\n"
        "And in these?\n")
    assert sorted(p.name for p in (out / "chat_videos").iterdir()) == ["video-1 (2).mp4", "video-1.mp4", "video-2.webm"]
    assert (out / "chat_videos" / "video-1 (2).mp4").read_bytes() == b"first video's bytes"
    assert (out / "chat_videos" / "video-1.mp4").read_bytes() == b"an older export's video"  # kept (trial 63)
    assert (out / "chat_videos" / "video-2.webm").read_bytes() == b"second video's bytes"
    assert [p.name for p in (out / "chat_images").iterdir()] == [image_name]


def _file(folder, name: str, data: bytes):
    path = folder / name
    path.write_bytes(data)
    return path


def test_files_are_exported_under_the_names_they_were_attached_as(store, tmp_path):
    stored = {key: store.store_image(_file(tmp_path, f"{key}{suffix}", key.encode() * 3)) for key, suffix in [
        ("cat1", ".mp4"), ("cat2", ".mp4"), ("old", ".webm"), ("photo1", ".png"), ("photo2", ".png"),
        ("snap", ".png"), ("plain", ".jpg")]}
    conv = store.create_conversation("Pets").id
    store.add_message(conv, "user", "Two cats?", [stored["cat1"], stored["cat2"], stored["photo1"], stored["photo2"]],
                      names=["cat.mp4", "cat.mp4", "photo.png", "PHOTO.png"])  # same names, other files
    store.add_message(conv, "assistant", "Yes.")
    store.add_message(conv, "user", "Again, and these", [stored["cat1"], stored["old"], stored["snap"], stored["plain"]],
                      names=["renamed.mp4", "", "my_pet & me.png", ""])  # the first cat again; two unknown names
    out = tmp_path / "out"
    (out / "chat_images").mkdir(parents=True)
    (out / "chat_images" / "photo.png").write_bytes(b"an older export's picture")

    text = export_markdown(store, conv, out / "chat.md").read_text()

    plain = stored["plain"].rsplit("/", 1)[1]  # unknown name: the stored one, as before
    assert text == (
        "# Pets\n\n"
        "## You\n\n"
        "[video: cat.mp4](chat_videos/cat.mp4)\n\n"
        "[video: cat.mp4](<chat_videos/cat (2).mp4>)\n\n"  # the text is the name attached; the file's is numbered
        "![photo.png](<chat_images/photo (2).png>)\n\n"  # an older export's photo.png is there: kept
        "![PHOTO.png](<chat_images/PHOTO (3).png>)\n\n"  # names differing in case only are one name on Windows and macOS
        "Two cats?\n\n"
        "## Assistant\n\n"
        "Yes.\n\n"
        "## You\n\n"
        "[video: renamed.mp4](chat_videos/cat.mp4)\n\n"  # exported once, under its first name
        "[video: video-3.webm](chat_videos/video-3.webm)\n\n"  # unknown name: the third video of the export
        "![my\\_pet \\& me.png](<chat_images/my_pet %26 me.png>)\n\n"
        f"![image](chat_images/{plain})\n\n"
        "Again, and these\n")
    assert sorted(p.name for p in (out / "chat_videos").iterdir()) == ["cat (2).mp4", "cat.mp4", "video-3.webm"]
    assert sorted(p.name for p in (out / "chat_images").iterdir()) == sorted(["PHOTO (3).png", "my_pet & me.png",
                                                                             "photo (2).png", "photo.png", plain])
    for folder, name, key in [("chat_videos", "cat.mp4", "cat1"), ("chat_videos", "cat (2).mp4", "cat2"),
                              ("chat_videos", "video-3.webm", "old"), ("chat_images", "photo (2).png", "photo1"),
                              ("chat_images", "PHOTO (3).png", "photo2"), ("chat_images", "my_pet & me.png", "snap")]:
        assert (out / folder / name).read_bytes() == key.encode() * 3, name
    assert (out / "chat_images" / "photo.png").read_bytes() == b"an older export's picture"  # never replaced (trial 63)
    again = export_markdown(store, conv, out / "chat.md").read_text()  # the same export again: the same files
    assert again == text and len(list((out / "chat_images").iterdir())) == 5


def test_the_data_folder_is_told_by_path_by_link_and_by_its_inode(tmp_path, monkeypatch):
    """Trial 70 N1: the data folder reached through a bind mount (another path, no link to resolve) was
    not told apart, and an export there replaced the database."""
    import os

    import app.export
    from app.export import data_folder_holding

    data, mount, other = tmp_path / "data", tmp_path / "mnt", tmp_path / "elsewhere"
    for folder in (data, mount, other):
        folder.mkdir()
    (tmp_path / "link").symlink_to(data)
    assert data_folder_holding(data / "smolchat.sqlite3", data) == data.resolve()
    assert data_folder_holding(tmp_path / "link" / "x.md", data) == data.resolve()
    assert data_folder_holding(data / ".." / "elsewhere" / "x.md", data) is None
    real_stat = os.stat
    monkeypatch.setattr(app.export.os, "stat", lambda p, *a, **k: real_stat(data if Path(p) == mount else p, *a, **k))
    assert data_folder_holding(mount / "smolchat.sqlite3", data) == data.resolve()  # (mount: data's device and inode)
    assert data_folder_holding(other / "x.md", data) is None


def test_a_nul_in_a_message_is_written_as_the_replacement_character(store, tmp_path):
    """Trial 69 F11: a raw NUL made grep and git take the Markdown export for a binary file."""
    conv = store.create_conversation("c").id
    store.add_message(conv, "user", "before\x00after")
    data = export_markdown(store, conv, tmp_path / "chat.md").read_bytes()
    assert b"\x00" not in data and "before\ufffdafter" in data.decode()


def test_a_video_name_is_link_text_that_reads_as_typed(store, tmp_path):
    video = store.store_image(_file(tmp_path, "v.mp4", b"v"))
    conv = store.create_conversation("c").id
    store.add_message(conv, "user", "", [video], names=["[my]_*clip*`~.mp4"])
    text = export_markdown(store, conv, tmp_path / "chat.md").read_text()
    # The file's name has no * (reserved on Windows); the text is the name as attached.
    assert "[video: \\[my\\]\\_\\*clip\\*\\`\\~.mp4](chat_videos/[my]__clip_`~.mp4)" in text
    assert (tmp_path / "chat_videos" / "[my]__clip_`~.mp4").read_bytes() == b"v"


def test_long_pdf_page_names_keep_their_page_numbers_and_link_text_is_the_attached_name(store, tmp_path):
    """The file on disk is the safe name, cut at its front; what a reader sees is the name attached."""
    pages = [store.store_image(_file(tmp_path, f"p{i}.png", b"page %d" % i)) for i in (1, 2)]
    weird = store.store_image(_file(tmp_path, "w.png", b"weird"))
    video = store.store_image(_file(tmp_path, "v.mp4", b"video"))
    long = "a" * 200
    conv = store.create_conversation("c").id
    store.add_message(conv, "user", "", [*pages, weird, video, weird],
                      names=[f"{long} page 1.png", f"{long} page 2.png", "weird`name*.png", "clip<1>.mp4", "again.png"])
    text = export_markdown(store, conv, tmp_path / "chat.md").read_text()
    cut = "a" * (MAX_NAME_BYTES - 11)
    assert text == (
        "# c\n\n## You\n\n"
        f"![{long} page 1.png](<chat_images/{cut} page 1.png>)\n\n"
        f"![{long} page 2.png](<chat_images/{cut} page 2.png>)\n\n"
        "![weird\\`name\\*.png](chat_images/weird`name_.png)\n\n"
        "[video: clip\\<1\\>.mp4](chat_videos/clip_1_.mp4)\n\n"
        "![again.png](chat_images/weird`name_.png)\n")  # the same file, exported once
    assert sorted(p.name for p in (tmp_path / "chat_images").iterdir()) == [
        f"{cut} page 1.png", f"{cut} page 2.png", "weird`name_.png"]


def test_a_line_break_or_bidi_override_in_a_name_stays_out_of_its_alt_text(store, tmp_path):
    image = store.store_image(_file(tmp_path, "i.png", b"i"))
    conv = store.create_conversation("c").id
    store.add_message(conv, "user", "", [image], names=["two\nlines\u202egnp.exe.png"])
    text = export_markdown(store, conv, tmp_path / "chat.md").read_text()
    assert text == "# c\n\n## You\n\n![two\\_lines\\_gnp.exe.png](chat_images/two_lines_gnp.exe.png)\n"


def test_hostile_stored_names_are_made_safe_and_stay_in_the_export_folders(store, tmp_path, data_dir):
    files = [store.store_image(_file(tmp_path, f"f{i}{suffix}", b"x%d" % i))
             for i, suffix in enumerate([".mp4", ".png", ".mp4", ".jpg", ".png", ".png", ".png"])]
    conv = store.create_conversation("c").id
    message = store.add_message(conv, "user", "", files)
    hostile = ["../evil.mp4", "a/b.png", "CON.mp4", "x:y.jpg", "é" * 200 + ".png", "...", ".bashrc"]
    db = sqlite3.connect(data_dir / "smolchat.sqlite3")  # written by hand: add_message would keep base names only
    db.execute("UPDATE messages SET attached_names = ? WHERE id = ?", (json.dumps(hostile), message.id))
    db.commit()
    db.close()
    out = tmp_path / "out"
    out.mkdir()

    export_markdown(store, conv, out / "chat.md")

    assert sorted(p.name for p in out.iterdir()) == ["chat.md", "chat_images", "chat_videos"]
    assert sorted(p.name for p in (out / "chat_videos").iterdir()) == ["_CON.mp4", "_evil.mp4"]
    images = sorted(p.name for p in (out / "chat_images").iterdir())
    long = "é" * ((MAX_NAME_BYTES - 4) // 2) + ".png"
    assert images == sorted(["a_b.png", "x_y.jpg", long, files[5].rsplit("/", 1)[1], "bashrc.png"])
    assert len(long.encode()) <= MAX_NAME_BYTES


@pytest.mark.parametrize("name,safe", [
    ("holiday.jpg", "holiday.jpg"),
    ("../evil.mp4", "_evil.mp4"),
    ("a/b.png", "a_b.png"),
    ("a\\b.png", "a_b.png"),
    ("x:y.jpg", "x_y.jpg"),
    ('q?"<>|*.png', "q______.png"),
    ("CON.mp4", "_CON.mp4"),
    ("nul", "_nul"),
    ("com1.tar.gz", "_com1.tar.gz"),
    ("CONSOLE.mp4", "CONSOLE.mp4"),
    (".hidden.png", "hidden.png"),
    ("  spaced . ", "spaced"),
    ("line\nbreak\x00.png", "line_break_.png"),
    ("cat\u202egnp.exe", "cat_gnp.exe"),  # a right-to-left override would show "catexe.png"
    ("bad\udcff.png", "bad_.png"),  # a name that was not UTF-8 on disk
    ("...", ""),
    ("", ""),
    ("a" * 300 + ".mp4", "a" * (MAX_NAME_BYTES - 4) + ".mp4"),
    ("x." + "y" * 300, "x." + "y" * (MAX_NAME_BYTES - 2)),  # no suffix: a dot in a long name
    # The end tells a PDF's pages apart: the front is cut instead.
    ("a" * 200 + " page 12.png", "a" * (MAX_NAME_BYTES - 12) + " page 12.png"),
    ("a" * 300 + " page 3.png", "a" * (MAX_NAME_BYTES - 11) + " page 3.png"),
    ("é" * 100 + " page 1.png", "é" * ((MAX_NAME_BYTES - 11) // 2) + " page 1.png"),
])
def test_safe_file_name(name, safe):
    assert safe_file_name(name) == safe


@pytest.mark.parametrize("title,name", [
    ("What is the capital of France?", "What is the capital of France.json"),  # not "France_" (trial 62)
    ("Why? Because!!! ...", "Why_ Because.json"),
    ("Show me a Python code block that prints hello w…", "Show me a Python code block that prints hello w.json"),
    ("C# and C++ (draft)", "C# and C++ (draft).json"),
    # A long title is cut at a word, within 60 characters and 100 bytes (trial 62: 339 characters, no Save).
    (("word " * 80).strip(), " ".join(["word"] * 12) + ".json"),
    ("x" * 339, "x" * 60 + ".json"),
    ("é" * 200, "é" * 50 + ".json"),
    ("Liste des capitales européennes et leurs populations, triées par taille, avec notes!",
     "Liste des capitales européennes et leurs populations, triées.json"),
    ("two\nlines\u202e gnp.exe", "two lines gnp.exe.json"),
    ("a/b: c?", "a_b_ c.json"),
    ("CON", "_CON.json"),
    ("???", "conversation.json"),
    ("", "conversation.json"),
])
def test_suggested_name(title, name):
    assert suggested_name(title, "json") == name


def test_json_export_gives_the_names_files_were_attached_as(store, tmp_path):
    image = store.store_image(_file(tmp_path, "p.png", b"p"))
    conv = store.create_conversation("c").id
    store.add_message(conv, "user", "old", [image])
    store.add_message(conv, "user", "new", [image, image], names=["holiday.png", ""])
    data = json.loads(export_json(store, conv, tmp_path / "chat.json").read_text())
    assert data["format"] == "smolchat-conversation" and data["version"] == 4
    assert [(m["text"], m["images"], m["attached_names"]) for m in data["messages"]] == [
        ("old", [image], [""]), ("new", [image, image], ["holiday.png", ""])]
    assert [m["attached_names"] for m in data["all_messages"]] == [[""], ["holiday.png", ""]]


def test_a_users_single_line_breaks_are_kept_as_hard_breaks(store, tmp_path):
    """(An answer's too, as the app shows them since trial 50.)"""
    conv = store.create_conversation("Lines").id
    store.add_message(conv, "user", "Line one\nLine two\n\nNew paragraph\n```\ncode line\nmore code\n```\nAfter")
    store.add_message(conv, "assistant", "Model markdown\nstays as written.")

    text = export_markdown(store, conv, tmp_path / "chat.md").read_text()

    assert text == ("# Lines\n\n## You\n\n"
                    "Line one  \nLine two\n\nNew paragraph\n```\ncode line\nmore code\n```\nAfter\n\n"
                    "## Assistant\n\nModel markdown  \nstays as written.\n")


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
    # A fence left open is closed at the end: in an export it would make every later message code.
    ("```python\nprint(1)", "```python\nprint(1)\n```"),
    ("~~~~\ncode\n~~~", "~~~~\ncode\n~~~\n~~~~"),  # ~~~ is shorter: it does not close ~~~~
    # A backtick in a backtick fence's info string makes it text (CommonMark 0.31), nothing to close.
    ("```a`b\nnot code", "```a`b  \nnot code"),
])
def test_plain_markdown(text, expected):
    assert plain_markdown(text) == expected


def test_a_title_system_prompt_open_fence_and_odd_file_name_stay_in_their_place(store, tmp_path):
    """Found by a trial: the title went out as raw HTML (a first message of ``<script>``), an open
    fence in a question made the answer and every later turn code, and an image named with ``#``
    did not show (a reader takes ``#`` as the start of a URL's fragment)."""
    photo = store.store_image(_file(tmp_path, "shot.png", b"png bytes"))
    conv = store.create_conversation("<script>alert(1)</script> *about* C#").id
    store.update_conversation(conv, settings={"system_prompt": "Be brief.\n# Rules\nNo <b>HTML</b>."})
    store.add_message(conv, "user", "Why does this fail?\n```python\nimport os", [photo], names=["50% #1?.png"])
    store.add_message(conv, "assistant", "Try this:\n~~~\nimport sys", stats={"model_name": "smol*vlm*_v2"})
    store.add_message(conv, "user", "Thanks", [store.store_image(_file(tmp_path, "x.png", b"x"))], names=["a&amp;b.png"])

    text = export_markdown(store, conv, tmp_path / "chat.md").read_text()

    assert text == (
        "# \\<script\\>alert(1)\\</script\\> \\*about\\* C\\#\n\n"
        "> System prompt: Be brief.  \n> \\# Rules  \n> No \\<b>HTML\\</b>.\n\n"
        "## You\n\n"
        "![50% #1?.png](<chat_images/50%25 %231_.png>)\n\n"  # ? is no file name character on Windows: in the file's
        "Why does this fail?\n```python\nimport os\n```\n\n"
        "## smol\\*vlm\\*\\_v2\n\n"  # the model's name as it is, not emphasis
        "Try this:\n~~~\nimport sys\n~~~\n\n"  # stopped in the middle of its code: closed
        "## You\n\n"
        "![a\\&amp;b.png](chat_images/a%26amp;b.png)\n\n"  # & encoded: a reader would decode &amp; to &
        "Thanks\n")
    assert (tmp_path / "chat_images" / "50% #1_.png").read_bytes() == b"png bytes"


def test_a_stored_file_gone_from_the_data_folder_is_named_in_its_place(store, tmp_path):
    """Found by a trial: one image deleted from the data folder made every Markdown export fail
    ("[Errno 2] No such file or directory: .../images/596aa...png") and left the images folder made
    so far; now the export is written, the file named where it was, and listed as missing."""
    cat, rocket = _file(tmp_path, "cat photo.png", b"cat"), _file(tmp_path, "rocket.jpg", b"rocket")
    stored = [store.store_image(cat), store.store_image(rocket)]
    conv = store.create_conversation("Two photos").id
    store.add_message(conv, "user", "Compare them.", stored, names=["cat photo.png", "rocket.jpg"])
    store.add_message(conv, "assistant", "One is a cat.")
    Path(stored[0]).unlink()
    missing: list[str] = []
    out = tmp_path / "out"
    out.mkdir()
    text = export_markdown(store, conv, out / "chat.md", missing).read_text()
    assert text == (
        "# Two photos\n\n"
        "## You\n\n"
        "*(image missing: cat photo.png, gone from Smolchat's data folder)*\n\n"
        "![rocket.jpg](chat_images/rocket.jpg)\n\n"
        "Compare them.\n\n"
        "## Assistant\n\n"
        "One is a cat.\n")
    assert missing == ["cat photo.png"]
    assert [p.name for p in (out / "chat_images").iterdir()] == ["rocket.jpg"]


def test_a_failed_export_removes_the_files_and_folders_it_made(store, tmp_path, monkeypatch):
    """Found by a trial: the images were copied before the .md was written, so each failed try left a
    ``<name>_images`` folder. An older export's folder and files stay."""
    from app import safe_files

    photos = [store.store_image(_file(tmp_path, f"p{i}.png", bytes([i]) * 8)) for i in range(2)]
    conv = store.create_conversation("Photos").id
    store.add_message(conv, "user", "Look.", photos, names=["p0.png", "p1.png"])
    out = tmp_path / "out"
    out.mkdir()
    real_write = safe_files.write_text

    def full(path, text, encoding="utf-8"):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(safe_files, "write_text", full)
    with pytest.raises(OSError):
        export_markdown(store, conv, out / "chat.md")
    assert list(out.iterdir()) == []
    (out / "older_images").mkdir()
    (out / "older_images" / "p0.png").write_bytes(b"an older export's p0")
    (out / "older_images" / "notes.txt").write_bytes(b"the user's")
    with pytest.raises(OSError):
        export_markdown(store, conv, out / "older.md")
    assert sorted(p.name for p in (out / "older_images").iterdir()) == ["notes.txt", "p0.png"]
    monkeypatch.setattr(safe_files, "write_text", real_write)
    assert export_markdown(store, conv, out / "older.md").read_text().count("older_images/") == 2


def test_an_export_onto_a_folder_says_so_before_copying_anything(store, tmp_path):
    photo = store.store_image(_file(tmp_path, "p.png", b"png"))
    conv = store.create_conversation("Photo").id
    store.add_message(conv, "user", "Look.", [photo], names=["p.png"])
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(IsADirectoryError) as caught:
        export_markdown(store, conv, tmp_path / "dir.md")
    assert str(caught.value) == f"[Errno 21] a folder of that name is there: '{tmp_path / 'dir.md'}'"
    assert not (tmp_path / "dir_images").exists()
    with pytest.raises(IsADirectoryError) as caught:  # JSON: the rename's error, naming the chosen path
        export_json(store, conv, tmp_path / "dir.md")
    assert str(caught.value) == f"[Errno 21] Is a directory: '{tmp_path / 'dir.md'}'"


def test_a_file_in_the_way_of_the_images_folder_is_named_as_such(qtbot, window, tmp_path, monkeypatch):
    """Trial 62 F9: a file named ``conflict_images`` beside the chosen ``conflict.md`` gave only "File exists"."""
    from PySide6.QtWidgets import QFileDialog

    photo, clip = (window.store.store_image(_file(tmp_path, name, name.encode())) for name in ("p.png", "v.mp4"))
    conv = window.store.create_conversation("Photo").id
    window.store.add_message(conv, "user", "Look.", [photo, clip], names=["p.png", "v.mp4"])
    window.open_conversation(conv)
    out = tmp_path / "out"
    out.mkdir()
    (out / "conflict_images").write_text("the user's")
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out / "conflict.md"), ""))
    window.actions["export_md"].trigger()
    assert window.banner.message() == (
        "Could not export the chat: Smolchat puts the photos in a folder named “conflict_images” beside conflict.md, "
        "and a file of that name is in the way (move or rename it, or export under another name).")
    (out / "conflict_images").unlink()
    (out / "conflict_videos").write_text("the user's")
    window.actions["export_md"].trigger()
    assert window.banner.message() == (
        "Could not export the chat: Smolchat puts the videos in a folder named “conflict_videos” beside conflict.md, "
        "and a file of that name is in the way (move or rename it, or export under another name).")
    assert sorted(p.name for p in out.iterdir()) == ["conflict_videos"]  # nothing left behind, the file kept
    assert (out / "conflict_videos").read_text() == "the user's"


def test_an_answers_line_breaks_are_exported_as_markdown_hard_breaks(store, tmp_path):
    """Trial 51: the app shows a poem line by line; the exported Markdown ran it into one paragraph in
    any viewer. Code keeps its lines as they are."""
    from app.export import export_markdown

    chat = store.create_conversation("Poem")
    store.add_message(chat.id, "user", "A poem, then code")
    store.add_message(chat.id, "assistant", "Roses are red,\nViolets are blue.\n\n```py\nx = 1\ny = 2\n```\n- a\n- b")
    text = export_markdown(store, chat.id, tmp_path / "poem.md").read_text()
    assert "Roses are red,  \nViolets are blue.\n\n```py\nx = 1\ny = 2\n```\n- a\n- b" in text


def test_an_export_says_its_progress_file_by_file_and_a_cancel_leaves_nothing(store, tmp_path):
    """The export copies (Markdown) or reads (JSON) every photo and video: a chat of many takes seconds,
    shown file by file and cancelled from its dialog."""
    from app.export import ExportCancelled

    stored = [store.store_image(_file(tmp_path, f"p{i}.png", bytes([i]) * 10)) for i in range(3)]
    conv = store.create_conversation("Photos").id
    store.add_message(conv, "user", "These?", stored[:2], names=["a.png", "b.png"])
    store.add_message(conv, "assistant", "Yes.")
    store.add_message(conv, "user", "And again", [stored[0], stored[2]], names=["a.png", "c.png"])  # a shown twice
    out = tmp_path / "out"
    out.mkdir()
    for export, name, steps in ((export_markdown, "chat.md", [(1, 3), (2, 3), (3, 3)]),
                                (export_json, "chat.json", [(10, 30), (20, 30), (30, 30)])):  # files; bytes
        said = []
        export(store, conv, out / name, progress=lambda done, total: said.append((done, total)))
        assert said == steps
    for export, name in ((export_markdown, "stopped.md"), (export_json, "stopped.json")):
        with pytest.raises(ExportCancelled):
            export(store, conv, out / name, progress=lambda done, total: done < 2)
    assert sorted(p.name for p in out.iterdir()) == ["chat.json", "chat.md", "chat_images"]
    assert sorted(p.name for p in (out / "chat_images").iterdir()) == ["a.png", "b.png", "c.png"]


def test_a_json_export_writes_a_file_piece_by_piece_and_says_its_progress_between(store, tmp_path, monkeypatch):
    """Encoding a 256 MB video into the JSON at once held the window still for seconds: it is written
    in pieces, the progress dialog (and its Cancel) taking clicks between them."""
    import base64

    from app import export

    monkeypatch.setattr(export, "JSON_PIECE", 3)
    content = bytes(range(10))
    stored = store.store_image(_file(tmp_path, "v.png", content))
    conv = store.create_conversation("Piece").id
    store.add_message(conv, "user", "This?", [stored], names=["v.png"])
    said = []
    path = export_json(store, conv, tmp_path / "piece.json", progress=lambda done, total: said.append((done, total)))
    assert said == [(3, 10), (6, 10), (9, 10), (10, 10)]
    data = json.loads(path.read_text())
    assert data["files"] == {Path(stored).name: base64.b64encode(content).decode()}
    assert data["messages"][0]["text"] == "This?" and list(data)[-1] == "files"

    def disk_full(done, total):  # a write failing part-way (the disk filled) as the pieces go
        if done > 3:
            raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        export_json(store, conv, path, progress=disk_full)
    assert json.loads(path.read_text())["files"] == data["files"]  # the export there before: untouched
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_a_link_where_the_photos_folder_goes_is_not_followed(store, tmp_path):
    """Trial 63: a `<name>_images` link put the chat's photos into the folder it leads to."""
    photo = store.store_image(_file(tmp_path, "cat.png", b"a cat"))
    conv = store.create_conversation("Cat").id
    store.add_message(conv, "user", "Cat?", [photo], names=["cat.png"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "chat_images").symlink_to(elsewhere)
    with pytest.raises(FileExistsError) as refused:
        export_markdown(store, conv, out / "chat.md")
    assert refused.value.strerror == ("Smolchat puts the photos in a folder named “chat_images” beside chat.md, and a "
                                      "link of that name is in the way (move or rename it, or export under another name)")
    assert list(elsewhere.iterdir()) == [] and not (out / "chat.md").exists()
