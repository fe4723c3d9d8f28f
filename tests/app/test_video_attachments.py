"""Videos in the window (issue 13): drop, paste or pick one; a filmstrip chip with its duration and the
frames the model will see; the token budget; the max-frames setting; a model without video refuses
before sending; bad files give one line; a sent video is stored, shown, reopened and exported."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QFileDialog

from app.backends.fake import FakeBackend
from app.filmstrip import VideoChip, VideoThumbnail
from app.settings import load_settings, open_settings, save_settings
from tests.app.helpers import drop, file_mime
from tests.engine.videos import solid, write_audio_only, write_video

pytest.importorskip("av")


def _clip(path: Path, seconds: int, rate: int = 2, size=(48, 64), **kw) -> Path:
    """A clip whose frame i is grey level 4 i (so each sampled frame differs)."""
    h, w = size
    return write_video(path, (solid(h, w, (4 * i) % 256) for i in range(seconds * rate)), rate=rate, **kw)


@pytest.fixture
def video_model():
    return FakeBackend(tokens=["A", " square", "."], model_name="FakeVLM2-256M", video=True)


@pytest.fixture
def clip(tmp_path):
    return _clip(tmp_path / "walk.mp4", 12)


def _wait_strip(qtbot, chip):
    qtbot.waitUntil(lambda: chip.strip.loaded, timeout=20000)
    return chip.strip


def test_dropped_video_gets_a_filmstrip_chip_with_duration_frames_and_budget(qtbot, make_window, video_model, clip):
    win = make_window(video_model)
    assert win.composer.placeholderText() == "Ask about an image or a video…"
    assert drop(win.composer, file_mime(clip))
    chip = win.attachments.chip(str(clip.resolve()))
    assert isinstance(chip, VideoChip)
    assert chip.plan.caption == "0:12 · 12 frames"  # 1 fps over 12 s
    assert win.pending_label.text() == "1 video · 12 frames · 768 image tokens"  # 12 x 64 tokens per frame
    strip = _wait_strip(qtbot, chip)
    assert strip.error == ""
    # Three frames in the 168x64 chip: 54x64 cells with 2-px gaps, frames 0, 11 and 23 of the clip
    # (grey 4 i: 0, 44, 92; within YUV rounding).
    assert (strip._image.width(), strip._image.height()) == (3 * 54 + 2 * 2, 64)
    greys = [strip._image.pixelColor(27 + 56 * i, 32).red() for i in range(3)]
    assert greys == pytest.approx([0, 44, 92], abs=10) and greys[0] < greys[1] < greys[2]
    assert chip.problem == "" and win.banner.isHidden()


def test_picked_video_through_the_file_dialog(make_window, video_model, clip, monkeypatch):
    win = make_window(video_model)
    seen = {}

    def pick(parent, caption, folder, filters):
        seen["filters"] = filters
        return [str(clip)], filters.split(";;")[0]

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(pick))
    win.attach_button.click()
    assert win.attachments.paths() == [str(clip.resolve())]
    assert "*.mp4 *.webm *.mov *.mkv" in seen["filters"].split(";;")[0]


def test_pasted_video_file(make_window, video_model, clip):
    win = make_window(video_model)
    QApplication.clipboard().setMimeData(file_mime(clip))
    win.composer.paste()
    assert isinstance(win.attachments.chip(str(clip.resolve())), VideoChip)


def test_max_frames_setting_changes_the_budget_and_reaches_the_engine(qtbot, make_window, video_model, clip):
    win = make_window(video_model)
    drop(win, file_mime(clip))
    win._apply_settings(replace(win.settings, video_max_frames=5, video_fps=2.0))
    assert win.attachments.video_chips()[0].plan.caption == "0:12 · 5 frames"
    assert win.pending_label.text() == "1 video · 5 frames · 320 image tokens"
    qtbot.keyClicks(win.composer, "Where is it going?")
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    call = video_model.calls[-1]
    assert call["kinds"] == ["video"]
    assert (call["params"].video_max_frames, call["params"].video_fps) == (5, 2.0)


def test_max_frames_setting_is_validated_and_kept():
    """A value out of range or no number is said, as every other key's, and the default applies
    (found by a trial: 999 was clamped to 64 without a word)."""
    qs = open_settings()
    for raw, expected in ((999, 64), (0, 64), ("lots", 64), (12, 12), ("", 64)):
        qs.setValue("chat/video_max_frames", raw)
        loaded = load_settings(qs)
        assert loaded.video_max_frames == expected
        said = [p for p in loaded.problems if "video_max_frames" in p]
        assert said == ([] if raw in (12, "") else [f"Settings file {qs.fileName()}: values not used (their defaults "
                                                     f"apply instead): video_max_frames {str(raw)!r} (a whole number "
                                                     "from 1 to 64)."]), loaded.problems
    qs.setValue("chat/video_max_frames", 12)
    for raw, expected, fine in ((0.5, 0.5, True), (50, 1.0, False), ("nan", 1.0, False)):
        qs.setValue("chat/video_fps", raw)
        loaded = load_settings(qs)
        assert loaded.video_fps == expected and (not loaded.problems) == fine, loaded.problems
    qs.setValue("chat/video_fps", 1.0)
    settings = load_settings(qs)
    save_settings(replace(settings, video_max_frames=7, video_fps=0.5), qs)
    again = load_settings(qs)
    assert (again.video_max_frames, again.video_fps) == (7, 0.5)
    assert again.generation_params()["video_max_frames"] == 7


def test_settings_dialog_edits_max_frames_within_1_to_64(make_window, video_model):
    win = make_window(video_model)
    dialog = win.open_settings_dialog()
    assert (dialog.video_max_frames.minimum(), dialog.video_max_frames.maximum()) == (1, 64)
    assert dialog.video_max_frames.value() == 64
    dialog.video_max_frames.setValue(99)  # clamped by the spin box
    dialog.apply()
    assert win.settings.video_max_frames == 64
    dialog.video_max_frames.setValue(8)
    dialog.apply()
    assert win.settings.video_max_frames == 8 and load_settings(win.qsettings).video_max_frames == 8
    dialog.close()


def test_model_without_video_says_so_before_sending(qtbot, make_window, fake_session, clip):
    win = make_window(fake_session)  # FakeVLM-256M: images only
    qtbot.keyClicks(win.composer, "What happens?")
    drop(win.composer, file_mime(clip))
    chip = win.attachments.video_chips()[0]
    reason = "FakeVLM-256M cannot take videos: remove the video, or load a SmolVLM2 model to ask about it."
    assert chip.problem == reason and not chip.badge.isHidden()
    assert win.banner.message() == reason
    assert win.pending_label.text() == "1 video · this model takes no videos"
    win.banner.dismiss()
    win.send_message()
    assert win.banner.message() == reason  # said again, and nothing was sent or stored
    assert fake_session.calls == []
    assert win.store.conversations() == []
    assert win.composer.toPlainText() == "What happens?" and win.attachments.paths() == [str(clip.resolve())]
    # Loading a model that takes videos clears the mark.
    fake_session.video = True
    win.load_model("/models/fake2")
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/fake2", timeout=5000)
    assert chip.problem == "" and chip.badge.isHidden()
    assert win.pending_label.text() == "1 video · 12 frames · 768 image tokens"


def test_a_video_moved_since_it_was_attached_is_said_at_send(qtbot, make_window, video_model, clip):
    """Trial 69 F7: a video deleted after it was attached gave "Could not save the message: ... No such file
    or directory", as if the disk had failed, while its chip looked fine."""
    win = make_window(video_model)
    qtbot.keyClicks(win.composer, "What happens?")
    drop(win.composer, file_mime(clip))
    chip = win.attachments.video_chips()[0]
    _wait_strip(qtbot, chip)
    clip.unlink()
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    reason = ("walk.mp4 was moved or deleted since it was attached (a video is read from its file when sent, not "
              "copied before): attach it again, or remove it.")
    assert win.banner.message() == reason and chip.problem == reason and not chip.badge.isHidden()
    assert win.pending_label.text() == "1 video · unreadable"  # not its 12 frames and 768 tokens any more
    assert video_model.calls == [] and win.store.conversations() == []
    assert win.composer.toPlainText() == "What happens?"
    win.attachments.remove(str(clip.resolve()))
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)  # the rest is sent
    assert [m.text for m in win.store.messages(win.keeper.current_id)] == ["What happens?", "A square."]


def test_the_budget_line_leaves_an_unreadable_video_out_of_frames_and_tokens():
    from app.video_attachments import VideoPlan, pending_media_summary

    plan = VideoPlan(duration=12.0, frames=12, width=64, height=48)
    assert pending_media_summary([], [plan, None], 64) == "2 videos · 12 frames · 1 unreadable"
    assert pending_media_summary([], [plan, None], 64, video_counts=[954, -1]) == "2 videos · 12 frames · 1 unreadable"
    assert pending_media_summary([300], [None], 64) == "1 image · 1 video · unreadable"
    assert pending_media_summary([], [plan], 64) == "1 video · 12 frames · 768 image tokens"


def _gif(path: Path, frames: int = 6) -> Path:
    pictures = [Image.new("RGB", (40, 30), (40 * i, 0, 0)) for i in range(frames)]
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=500, loop=0)
    return path


def test_animated_gif_is_a_video_to_smolvlm2(qtbot, make_window, video_model, tmp_path):
    gif = _gif(tmp_path / "spin.gif")
    win = make_window(video_model)
    drop(win, file_mime(gif))
    chip = win.attachments.chip(str(gif.resolve()))
    assert isinstance(chip, VideoChip) and chip.plan.caption == "0:03 · 3 frames"
    assert _wait_strip(qtbot, chip).error == ""
    # Counted as the video it is sent as (trial 77 Q2: as its first frame, one image's tokens).
    assert win.pending_label.text() == "1 video · 3 frames · 192 image tokens"
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    assert video_model.calls[-1]["kinds"] == ["video"]


def test_an_animated_gif_attached_before_a_video_model_is_counted_at_the_video_settings(
        qtbot, make_window, fake_session, tmp_path, monkeypatch):
    """Trial 78 R2: a GIF attached while an image model was loaded, then sent to a video model (as a
    video), was counted at the default frame sampling, and its count kept after the settings changed."""
    gif = _gif(tmp_path / "spin.gif")
    win = make_window(fake_session)
    drop(win, file_mime(gif))
    assert not isinstance(win.attachments.chip(str(gif.resolve())), VideoChip)
    asked = []
    monkeypatch.setattr(win.controller, "count_tokens",
                        lambda path, detail, fps=None, max_frames=None: asked.append((fps, max_frames)) or 300)
    fake_session.video = True
    win.load_model("/models/fake2")
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/fake2", timeout=5000)
    assert asked[-1] == (win.settings.video_fps, win.settings.video_max_frames)
    win.settings.video_max_frames = 2
    win._count_pending_tokens()
    assert asked[-1] == (win.settings.video_fps, 2)  # counted again, at the new settings


def test_an_animated_gif_attached_under_one_model_goes_as_what_the_next_model_takes(
        qtbot, make_window, fake_session, tmp_path):
    """A GIF attached under an image model became a filmstrip when a video model loaded (it had stayed an
    image chip, with the image-detail menu, that was sent as a video), and back to its first frame when
    an image model loaded again (a video chip the model refused, though it reads the first frame)."""
    gif = _gif(tmp_path / "spin.gif")
    other = Image.new("RGB", (40, 30), (0, 90, 0))
    other.save(tmp_path / "still.png")
    win = make_window(fake_session)
    drop(win, file_mime(gif, tmp_path / "still.png"))
    path = str(gif.resolve())
    assert [type(c).__name__ for c in win.attachments.chips()] == ["AttachmentChip", "AttachmentChip"]
    note = ("Only the first frame of spin.gif is used: FakeVLM-256M takes no videos. "
            "Load a SmolVLM2 model to ask about the animation.")
    assert win.banner.message() == note

    fake_session.video = True
    win.load_model("/models/fake2")
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/fake2", timeout=5000)
    chip = win.attachments.chip(path)
    assert isinstance(chip, VideoChip) and chip.plan.caption == "0:03 · 3 frames" and chip.name == "spin.gif"
    assert win.attachments.paths()[0] == path  # in its place, before the still
    assert _wait_strip(qtbot, chip).error == ""
    assert note not in (win.banner.message() or "")  # not true of this model
    assert win.pending_label.text() == "1 image · 1 video · 3 frames · 1,280 image tokens (full)"
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    assert fake_session.calls[-1]["kinds"] == ["video", "image"]

    drop(win, file_mime(gif))
    assert isinstance(win.attachments.chip(path), VideoChip)
    fake_session.video = False
    win.load_model("/models/fake3")
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/fake3", timeout=5000)
    chip = win.attachments.chip(path)
    assert chip is not None and not isinstance(chip, VideoChip) and chip.name == "spin.gif"
    assert note.replace("FakeVLM-256M", win.model_info["model_name"]) in win.banner.message()
    assert not win.detail_combo.isHidden()
    win.composer.setPlainText("And now?")
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    assert "video" not in fake_session.calls[-1]["kinds"]


def test_an_animated_gif_deleted_after_it_was_attached_stays_attached_when_a_video_model_loads(
        qtbot, make_window, fake_session, tmp_path):
    """Trial 80 P3: its filmstrip read the deleted file, and the chip went with "Video file not found"."""
    gif = _gif(tmp_path / "gone.gif")
    win = make_window(fake_session)
    drop(win, file_mime(gif))
    gif.unlink()
    fake_session.video = True
    win.load_model("/models/fake2")
    qtbot.waitUntil(lambda: win.model_info.get("path") == "/models/fake2", timeout=5000)
    qtbot.wait(300)  # (a filmstrip's read fails on a worker thread)
    assert win.attachments.paths() == [str(gif.resolve())] and "not found" not in (win.banner.message() or "")
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    assert fake_session.calls[-1]["kinds"] == ["video"]  # its copy, as the video it is


def test_animated_gif_stays_an_image_for_an_image_model(qtbot, make_window, fake_session, tmp_path):
    gif = _gif(tmp_path / "spin.gif")
    win = make_window(fake_session)
    drop(win, file_mime(gif))
    assert not isinstance(win.attachments.chip(str(gif.resolve())), VideoChip)
    assert win.banner.message() == ("Only the first frame of spin.gif is used: FakeVLM-256M takes no videos. "
                                    "Load a SmolVLM2 model to ask about the animation.")
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    assert fake_session.calls[-1]["kinds"] == ["image"]


def _bad_files(tmp_path, clip):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp_path / "notes.mp4"
    text.write_text("not a video at all\n" * 50)
    audio = write_audio_only(tmp_path / "voice.mp4")
    cut = tmp_path / "cut.mp4"  # the index (moov) sits at the end: cut in half, nothing is left to read
    cut.write_bytes(clip.read_bytes()[: clip.stat().st_size // 2])
    return [(empty, "empty.mp4 is empty (0 bytes)"),
            (text, "notes.mp4 is not a video Smolchat can read (damaged, or not a video)"),
            (audio, "voice.mp4 has no video in it, only audio"),
            (cut, "cut.mp4 is not a video Smolchat can read (damaged, or not a video)")]


def test_bad_video_files_give_one_line_and_no_chip(qtbot, make_window, video_model, clip, tmp_path):
    win = make_window(video_model)
    qtbot.keyClicks(win.composer, "Keep this text")
    for path, message in _bad_files(tmp_path, clip):
        drop(win.composer, file_mime(path))
        assert win.attachments.paths() == []
        assert win.banner.message() == message
    assert win.composer.toPlainText() == "Keep this text"
    assert win.store.conversations() == []


def _frameless(tmp_path: Path) -> Path:
    """An mp4 whose index reads but whose frames' data is gone (cut where it starts)."""
    src = _clip(tmp_path / "fast.mp4", 4, container_options={"movflags": "faststart"})
    data = src.read_bytes()
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(data[:data.index(b"mdat") + 4])
    return broken


def test_header_fine_but_frames_unreadable_gives_one_line_and_no_chip(qtbot, make_window, video_model, tmp_path):
    """The index is read but every frame's data is gone: the filmstrip's decode (off the UI thread)
    finds it, and the chip goes (trial 53: it stayed, counted as frames in the budget, and Send only
    said the error again)."""
    broken = _frameless(tmp_path)
    win = make_window(video_model)
    qtbot.keyClicks(win.composer, "What happens?")
    drop(win, file_mime(broken))
    chip = win.attachments.video_chips()[0]
    _wait_strip(qtbot, chip)
    error = "No frame could be decoded from broken.mp4 (truncated or damaged)"
    qtbot.waitUntil(lambda: win.attachments.paths() == [], timeout=2000)
    assert win.banner.message() == error and win.pending_label.text() == ""
    assert win.composer.toPlainText() == "What happens?"
    drop(win, file_mime(broken))  # again: its decode is known, refused at once
    assert win.attachments.paths() == [] and win.banner.message() == error


def test_bad_photos_and_a_bad_video_in_one_drop_are_all_named(qtbot, make_window, video_model, tmp_path):
    """Trial 53: the video's error, found after the drop, replaced the photos' lines."""
    fake = tmp_path / "fake.png"
    fake.write_text("not a picture")
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 40)
    good = tmp_path / "good.png"
    Image.new("RGB", (40, 30), (10, 200, 90)).save(good)
    win = make_window(video_model)
    drop(win, file_mime(cut, fake, _frameless(tmp_path), good))
    qtbot.waitUntil(lambda: len(win.attachments.paths()) == 1, timeout=20000)
    lines = win.banner.message().split("\n")
    assert len(lines) == 3 and lines[-1] == "No frame could be decoded from broken.mp4 (truncated or damaged)"
    assert "cut.jpg" in lines[0] and "fake.png" in lines[1]
    assert [Path(p).name for p in win.attachments.paths()] == ["good.png"]
    assert "video" not in win.pending_label.text()


def test_8k_clip_previews_at_chip_size(qtbot, make_window, video_model, tmp_path):
    big = solid(4320, 7680, 90)
    path = write_video(tmp_path / "8k.mp4", [big, big], rate=1)
    win = make_window(video_model)
    drop(win, file_mime(path))
    chip = win.attachments.video_chips()[0]
    assert chip.plan.caption == "0:02 · 2 frames"
    strip = _wait_strip(qtbot, chip)
    assert strip.error == "" and (strip._image.width(), strip._image.height()) == (2 * 54 + 2, 64)


def test_three_hour_clip_plans_64_frames_and_previews_by_seeking(qtbot, make_window, video_model, tmp_path):
    total = 3 * 3600
    path = write_video(tmp_path / "long.mp4", (solid(16, 16, 7) for _ in range(total)), rate=1, gop=60)
    win = make_window(video_model)
    drop(win, file_mime(path))
    chip = win.attachments.video_chips()[0]
    assert chip.plan.caption == "3:00:00 · 64 frames"
    assert win.pending_label.text() == "1 video · 64 frames · 4,096 image tokens"
    from engine.api.videos import read_video

    preview = read_video(path, fps=4 / total, max_frames=4)  # what the filmstrip decodes
    assert len(preview.frames) == 4 and preview.decoded_frames <= 4 * 60  # keyframe runs, not 10,800 frames
    assert _wait_strip(qtbot, chip).error == ""


def test_rotated_phone_clip_previews_upright(qtbot, make_window, video_model, tmp_path):
    frame = solid(32, 64)
    frame[:8] = 255  # a white bar along the top of the stored (landscape) picture
    path = write_video(tmp_path / "phone.mp4", [frame] * 20, rate=10, rotation=90)
    win = make_window(video_model)
    drop(win, file_mime(path))
    strip = _wait_strip(qtbot, win.attachments.video_chips()[0])
    assert (strip._image.width(), strip._image.height()) == (3 * 54 + 2 * 2, 64)
    # Upright (turned 90 degrees counter-clockwise) the bar runs down the left edge of each 54x64 cell;
    # a frame left on its side would show it across the top instead.
    assert strip._image.pixelColor(3, 32).red() > 200 and strip._image.pixelColor(40, 32).red() < 50
    assert strip._image.pixelColor(27, 2).red() < 50


def test_sent_video_is_stored_shown_reopened_and_exported(qtbot, make_window, video_model, clip, tmp_path):
    from app.export import export_json, export_markdown
    from app.messages import UserMessage

    win = make_window(video_model)
    drop(win, file_mime(clip))
    qtbot.keyClicks(win.composer, "Describe the clip")
    win.send_message()
    qtbot.waitUntil(lambda: not win._busy, timeout=5000)
    stored = video_model.calls[-1]["images"][0]
    assert Path(stored).parent == win.store.images_dir and stored.endswith(".mp4")
    assert Path(stored).read_bytes() == clip.read_bytes()
    conv_id = win.keeper.current_id
    win.close()

    backend = FakeBackend(model_name="FakeVLM2-256M", video=True)
    again = make_window(backend)  # a restart
    again.open_conversation(conv_id)
    user = next(w for w in again.transcript.widgets() if isinstance(w, UserMessage))
    video = user.findChild(VideoThumbnail, "messageVideo")
    assert video is not None and video.path == stored and video.caption == "0:12"
    qtbot.waitUntil(lambda: video.loaded, timeout=20000)
    assert video.error == ""
    # Trial 52: named by its content hash and played only by a click. Named as attached, a Tab stop,
    # and Enter or Space plays it.
    assert video.accessibleName() == f"Play {clip.name}" and video.toolTip() == f"{clip.name} — click to play"
    assert video.focusPolicy() & Qt.FocusPolicy.TabFocus
    played = []
    real_play = video.play
    video.play = lambda: played.append(video.path)
    qtbot.keyClick(video, Qt.Key.Key_Return)
    qtbot.keyClick(video, Qt.Key.Key_Space)
    assert played == [stored, stored]
    video.play = real_play
    again.composer.setPlainText("And then?")
    again.send_message()
    qtbot.waitUntil(lambda: not again._busy, timeout=5000)
    history = backend.calls[-1]["history"]  # the reopened chat, as the engine gets it
    assert [(m.role, [(a.path, a.kind) for a in m.attachments]) for m in history] == [
        ("user", [(stored, "video")]), ("assistant", [])]

    # Editing that message puts the video back as a video chip, with its plan.
    again._on_message_action("edit", 0)
    chip = again.attachments.chip(stored)
    assert isinstance(chip, VideoChip) and chip.plan.caption == "0:12 · 12 frames"
    assert again.pending_label.text() == "1 video · 12 frames · 768 image tokens"
    again._cancel_edit()

    (tmp_path / "out").mkdir()  # an export's folder is the user's choice: it is not made for it
    md = export_markdown(again.store, conv_id, tmp_path / "out" / "chat.md")
    copied = tmp_path / "out" / "chat_videos" / "walk.mp4"  # the name it was attached as, kept across the restart
    assert "[video: walk.mp4](chat_videos/walk.mp4)" in md.read_text()
    assert copied.read_bytes() == clip.read_bytes()
    assert stored in export_json(again.store, conv_id, tmp_path / "out" / "chat.json").read_text()


def test_a_chat_started_with_only_a_video_is_titled_video():
    from app.conversations import title_from

    assert title_from("", ["/data/abc.mp4"]) == "Video"
    assert title_from("", ["/data/abc.mp4", "/data/def.webm"]) == "2 videos"
    assert title_from("", ["/data/abc.mp4", "/data/photo.png"]) == "2 images"


def test_a_notice_about_a_sent_video_names_the_users_file_not_its_stored_copy(qtbot, make_window, clip):
    """The engine names a video by the file it reads: the chat's copy, named by content hash. Found by a
    trial: "Only 4 of the 12 frames of 905034389f1451a1aa633de00c9d7fee.mp4 could be read"."""
    from engine.api import DoneEvent, GenerationStats

    class CutShort(FakeBackend):
        def _answer(self, kind, text, attachments, params, sink, system_prompt):
            name = Path(attachments[0].path).name
            sink(DoneEvent("stop", GenerationStats(notice=f"Only 4 of the 12 frames of {name} could be read.")))

    backend = CutShort(model_name="FakeVLM2-256M", video=True)
    win = make_window(backend)
    drop(win.composer, file_mime(clip))
    win.composer.setPlainText("What happens?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
    stored = win.store.messages(win.keeper.current_id)[0].images[0]
    assert Path(stored).name != "walk.mp4"  # the copy the engine read
    assert win.banner.message() == "Only 4 of the 12 frames of walk.mp4 could be read."


def test_attachments_longer_than_the_context_are_refused_before_sending(qtbot, make_window, video_model, tmp_path):
    """Three 48 s clips: 144 frames x 64 tokens, more than the fake model's 8,192-token context. The
    budget line says so and Send refuses with the reason, storing and sending nothing (the engine
    would have refused the prompt after the message was stored); one clip fewer fits and sends."""
    win = make_window(video_model)
    clips = [_clip(tmp_path / f"c{i}.mp4", 48, rate=1) for i in range(3)]
    qtbot.keyClicks(win.composer, "What changes?")
    for c in clips:
        drop(win.composer, file_mime(c))
    assert win.pending_label.text() == "3 videos · 144 frames · 9,216 image tokens · more than the 8,192-token context"
    win.send_message()
    assert win.banner.message() == ("These attachments take 9,216 tokens, more than the 8,192 the model's context "
                                    "holds. Remove some, or lower Settings ▸ Video frames (max).")
    assert video_model.calls == [] and win.store.conversations() == []
    assert win.composer.toPlainText() == "What changes?" and len(win.attachments.paths()) == 3
    win.attachments.remove(win.attachments.paths()[-1])
    assert win.pending_label.text().startswith("2 videos · 96 frames · 6,144 image tokens")
    assert "context" not in win.pending_label.text()
    win.send_message()
    qtbot.waitUntil(lambda: len(video_model.calls) == 1, timeout=5000)
    assert len(video_model.calls[0]["images"]) == 2
