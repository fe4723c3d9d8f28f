"""Video frames (engine.models.smolvlm.video) and the video prompt, against transformers and the clips' facts.

Oracles: transformers 5's ``SmolVLMVideoProcessor.sample_frames`` (frame indices), ``VideoMetadata.timestamps``,
``SmolVLMProcessor.replace_video_token`` (the prompt text) and its tokenizer (ids); PyAV decoding every frame
plus Pillow's resize (pixels). The clips in ``shared/videos`` (README there) give the square's position and
which photo shows at a time.
"""

from __future__ import annotations

import functools
import re
import time
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from engine.api.errors import EngineError, VideoError
from engine.models.smolvlm.processing import ImageProcessor
from engine.models.smolvlm.prompt import video_prompt
from engine.models.smolvlm.video import ProcessedVideo, probe, read_video, resize_frame, sample_indices, tolerance
from tests.engine.oracle import hf_processor
from tests.engine.videos import solid, write_audio_only, write_video

av = pytest.importorskip("av")
transformers = pytest.importorskip("transformers")
from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor  # noqa: E402
from transformers.video_utils import VideoMetadata  # noqa: E402


@pytest.fixture(scope="module")
def videos_dir(shared_dir):
    return shared_dir / "videos"


@pytest.fixture(scope="module")
def video_config_dir(shared_dir):
    return shared_dir / "models" / "SmolVLM2-256M-Video-Instruct"


@pytest.fixture(scope="module")
def processor(video_config_dir) -> ImageProcessor:
    return ImageProcessor.from_pretrained(video_config_dir)


def hf_indices(total, fps, duration, sample_fps=1, max_frames=64):
    """transformers' SmolVLMVideoProcessor.sample_frames on the metadata read_video_pyav gives."""
    meta = VideoMetadata(total_num_frames=total, fps=fps, duration=duration)
    owner = SimpleNamespace(num_frames=max_frames, fps=sample_fps)
    return SmolVLMVideoProcessor.sample_frames(owner, meta, num_frames=max_frames, fps=sample_fps)


def hf_metadata(path):
    """What transformers' read_video_pyav reads from a file's headers."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        total, fps = stream.frames, stream.average_rate
        return int(total), float(fps), float(total / fps)


# -- sampling ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("total,fps,sample_fps,max_frames", [
    (60, 10.0, 1, 64), (288, 24.0, 1, 64), (10800, 1.0, 1, 64), (30 * 70, 30.0, 1, 64), (30 * 200, 30.0, 2, 64),
    (1, 25.0, 1, 64), (5, 30.0, 1, 64), (2400, 24.0, 0.5, 8), (29.97 * 66 // 1, 29.97, 1, 64),
])
def test_sample_indices_match_transformers(total, fps, sample_fps, max_frames):
    total = int(total)
    ours = sample_indices(total, fps, total / fps, sample_fps, max_frames)
    ref = hf_indices(total, fps, total / fps, sample_fps, max_frames)
    assert ours.tolist() == ref.tolist()


@pytest.mark.parametrize("name", ["moving_square.mp4", "slideshow.mp4"])
def test_metadata_and_timestamps_match_transformers(videos_dir, name):
    path = videos_dir / name
    total, fps, duration = hf_metadata(path)
    info = probe(path)
    assert (info.total_frames, info.fps, info.duration) == (total, fps, duration)
    video = read_video(path)
    ref = hf_indices(total, fps, duration)
    meta = VideoMetadata(total_num_frames=total, fps=fps, duration=duration, frames_indices=ref.tolist())
    assert video.indices == ref.tolist()
    assert video.timestamps == meta.timestamps
    # Constant frame rate: the frame shown at index / fps is frame `index` itself.
    assert np.allclose(video.frame_times, meta.timestamps, atol=1e-6)


def test_moving_square_sits_where_the_formula_puts_it(videos_dir):
    video = read_video(videos_dir / "moving_square.mp4")
    assert len(video.frames) == round(video.info.duration)  # 1 fps, no skip: a 6 s clip gives 6 frames
    for frame, t in zip(video.frames, video.timestamps):
        assert frame.shape == (240, 320, 3)
        red = (frame[..., 0] > 150) & (frame[..., 1] < 100) & (frame[..., 2] < 100)
        ys, xs = np.nonzero(red)
        assert abs(int(xs.min()) - (10 + 40 * t)) <= 4, (t, xs.min())
        assert abs(int(xs.max()) - (10 + 40 * t + 59)) <= 4
        assert abs(int(ys.min()) - 90) <= 4 and abs(int(ys.max()) - 149) <= 4


def _letterbox(photo: Image.Image, size=(480, 320)) -> np.ndarray:
    """The slideshow's frame for a photo: scaled to fit, centred, padded with black."""
    scale = min(size[0] / photo.width, size[1] / photo.height)
    w, h = round(photo.width * scale), round(photo.height * scale)
    canvas = Image.new("RGB", size)
    scaled = photo.convert("RGB").resize((w, h), Image.Resampling.LANCZOS)
    canvas.paste(scaled, ((size[0] - w) // 2, (size[1] - h) // 2))
    return np.asarray(canvas, dtype=np.float32)


def test_slideshow_frames_show_the_photo_of_their_time(videos_dir, images_dir):
    names = ["chelsea.png", "coffee.png", "rocket.jpg", "astronaut.png"]  # 0-3 s, 3-6 s, 6-9 s, 9-12 s
    refs = [_letterbox(Image.open(images_dir / n)) for n in names]
    video = read_video(videos_dir / "slideshow.mp4")
    assert len(video.frames) == 12
    shown = []
    for frame in video.frames:
        errors = [np.abs(frame.astype(np.float32) - ref).mean() for ref in refs]
        shown.append(int(np.argmin(errors)))
        assert min(errors) < 12 < sorted(errors)[1]  # a clear match, not a near tie
    assert shown == [int(t // 3) for t in video.timestamps]


def test_resized_frames_equal_pyav_plus_the_same_resize(videos_dir, processor):
    """Seeking gives the same pixels as decoding every frame; the resize is the processor's."""
    path = videos_dir / "slideshow.mp4"
    processed = processor.preprocess_video(path)
    with av.open(str(path)) as container:
        all_frames = [f.to_image() for f in container.decode(video=0)]
    edge = processor.video_sampling["video_size"]["longest_edge"]
    m = processor.max_image_size
    for tile, index in zip(processed.pixels, processed.indices):
        image = all_frames[index]
        w, h = image.size
        first = image.resize((edge, int(edge / (w / h)) + int(edge / (w / h)) % 2), Image.Resampling.LANCZOS)
        expected = np.asarray(first.resize((m, m), Image.Resampling.LANCZOS))
        assert np.array_equal(tile.transpose(1, 2, 0), expected)
    assert processed.tiles.shape == (len(processed.indices), 3, m, m)
    assert np.array_equal(processed.tiles, processor._reference_normalize(processed.pixels))


def test_processed_video_is_frames_as_global_tiles(videos_dir, processor):
    v = processor.preprocess_video(videos_dir / "moving_square.mp4")
    assert isinstance(v, ProcessedVideo)
    assert (v.rows, v.cols, v.num_frames) == (0, 0, len(v.timestamps))
    assert v.num_image_tokens == v.num_frames * processor.image_seq_len
    assert len(set(v.tile_digests)) == v.num_frames  # the square moves: every frame differs
    assert processor.preprocess_video(videos_dir / "moving_square.mp4", max_frames=3).num_frames == 3
    assert processor.preprocess_video(videos_dir / "moving_square.mp4", fps=2).num_frames == 12


def test_idefics3_checkpoint_takes_no_video(model_config_dir, videos_dir):
    p = ImageProcessor.from_pretrained(model_config_dir)
    assert not p.takes_video
    with pytest.raises(VideoError, match="takes no videos"):
        p.preprocess_video(videos_dir / "moving_square.mp4")


# -- prompt -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_smolvlm(video_config_dir):
    return hf_processor(video_config_dir)


def _hf_video_prompt(proc, video):
    meta = VideoMetadata(total_num_frames=video.info.total_frames, fps=video.info.fps,
                         duration=video.info.duration, frames_indices=list(video.indices))
    return proc.replace_video_token({"pixel_values": np.zeros((1, len(video.indices), 3, 1, 1)),
                                     "video_metadata": [meta]}, 0)


@pytest.mark.parametrize("name", ["moving_square.mp4", "slideshow.mp4"])
def test_video_prompt_matches_transformers(videos_dir, processor, hf_smolvlm, name):
    video = read_video(videos_dir / name)
    processed = processor.preprocess_video(videos_dir / name)
    expected = _hf_video_prompt(hf_smolvlm, video)
    assert processed.prompt == expected
    assert expected.startswith("You are provided the following series of")


def test_video_prompt_long_clip_minutes_and_hours(hf_smolvlm):
    # A 3 h 2 min 5 s clip at 30 fps sampled as transformers does: MM:SS past an hour, H:MM:SS duration.
    total, fps = 30 * (3 * 3600 + 125), 30.0
    indices = hf_indices(total, fps, total / fps)
    meta = VideoMetadata(total_num_frames=total, fps=fps, duration=total / fps, frames_indices=indices.tolist())
    video = SimpleNamespace(info=SimpleNamespace(total_frames=total, fps=fps, duration=total / fps),
                            indices=indices.tolist())
    ours = video_prompt(meta.timestamps, meta.duration, hf_smolvlm.image_seq_len)
    assert ours == _hf_video_prompt(hf_smolvlm, video)
    assert "sixty-four frames from a 3:02:05 [H:MM:SS]" in ours


# -- bad input: frames or a one-line error, never a hang or a crash ---------------------------------

def _one_line_error(exc: EngineError) -> None:
    assert isinstance(exc, EngineError) and "\n" not in str(exc) and str(exc)


def test_zero_length_missing_and_not_a_video(tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n" * 100)
    for path, message in [(empty, "empty"), (tmp_path / "missing.mp4", "not found")]:
        with pytest.raises(VideoError, match=message) as info:
            read_video(path)
        _one_line_error(info.value)
    # FFmpeg's own words ("[Errno 1094995529] Invalid data found when processing input: 'PATH'")
    # are no help and name the file a second time: one sentence naming it once.
    for read in (read_video, probe):
        with pytest.raises(VideoError) as info:
            read(text)
        assert str(info.value) == "notes.mp4 is not a video Smolchat can read (damaged, or not a video)"


def test_a_file_cut_inside_its_first_frame_is_said_in_plain_words(tmp_path):
    """Trial 53: "cannot be decoded: [Errno 1094995529] Invalid data found when processing input:
    'avcodec_receive_frame()'" in the app, the command line and the server."""
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(8)]
    whole = write_video(tmp_path / "whole.mp4", frames, rate=2, container_options={"movflags": "faststart"})
    data = whole.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[:data.index(b"mdat") + 1000])  # the index whole, the first frame's data not
    with pytest.raises(VideoError) as info:
        read_video(cut)
    assert str(info.value) == "cut.mp4 cannot be decoded: its data is damaged or cut short"


def test_audio_only_file(tmp_path):
    path = write_audio_only(tmp_path / "sound.mp4")
    for read in (read_video, probe):
        with pytest.raises(VideoError) as info:
            read(path)
        assert str(info.value) == "sound.mp4 has no video in it, only audio"


@pytest.mark.parametrize("faststart", [False, True])
def test_truncated_video(tmp_path, videos_dir, faststart):
    """Cut in half: without the index (moov at the end) it is not a video; with it first, the frames
    before the cut come back and the rest are dropped."""
    src = videos_dir / "moving_square.mp4"
    if faststart:
        with av.open(str(src)) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        src = write_video(tmp_path / "fast.mp4", frames, rate=10, container_options={"movflags": "faststart"})
    data = src.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    try:
        video = read_video(cut)
    except VideoError as exc:
        assert str(exc) == "cut.mp4 is not a video Smolchat can read (damaged, or not a video)"
        assert not faststart
        return
    assert faststart
    assert 1 <= len(video.frames) < 6
    assert video.indices == sample_indices(60, 10.0, 6.0)[: len(video.frames)].tolist()


def test_three_hour_clip_seeks_instead_of_decoding_everything(tmp_path, processor):
    total = 3 * 3600
    frame = solid(32, 32)
    path = write_video(tmp_path / "long.mp4", (frame for _ in range(total)), rate=1, gop=30)
    t0 = time.perf_counter()
    video = read_video(path, resize=functools.partial(resize_frame, longest_edge=512, square=512))
    assert time.perf_counter() - t0 < 10
    assert video.indices == hf_indices(total, 1.0, float(total)).tolist()
    assert len(video.frames) == 64 and video.frames[0].shape == (512, 512, 3)
    assert video.decoded_frames < total // 4  # ~64 keyframe-to-target runs of <= 30 frames
    assert video_prompt(video.timestamps, video.duration, 64).startswith(
        "You are provided the following series of sixty-four frames from a 3:00:00 [H:MM:SS] video.\n")


def test_8k_clip_gives_model_sized_frames(tmp_path, processor):
    big = solid(4320, 7680)
    big[1000:2000, 1000:3000] = 200
    path = write_video(tmp_path / "8k.mp4", [big, big], rate=1)
    v = processor.preprocess_video(path)
    m = processor.max_image_size
    assert v.pixels.shape == (2, 3, m, m)


def test_rotation_flag_gives_upright_frames(tmp_path):
    frame = solid(32, 64)
    frame[:, :8] = 255  # a white bar along the left edge of the stored picture
    path = write_video(tmp_path / "rot.mp4", [frame] * 10, rate=10, rotation=90)
    video = read_video(path)
    upright = video.frames[0]
    assert upright.shape == (64, 32, 3)  # turned a quarter: portrait
    # 90 degrees counter-clockwise: the stored left edge becomes the bottom edge.
    assert upright[-8:].mean() > 200 and upright[:-8].mean() < 50


def test_variable_frame_rate_takes_the_frame_shown_at_each_timestamp(tmp_path):
    times_ms = [0, 100, 150, 200, 700, 1200, 1250, 1300, 2000, 2900, 3000, 3900, 4000, 4100, 5500, 6000]
    frames = [solid(32, 32, 10 + 15 * i) for i in range(len(times_ms))]  # frame i has grey level 10 + 15 i
    path = write_video(tmp_path / "vfr.mp4", frames, rate=10, pts=times_ms, time_base=Fraction(1, 1000),
                       options={"bf": "0"})
    video = read_video(path)
    assert video.indices == hf_indices(*hf_metadata(path)).tolist()
    late = tolerance(video.info.fps)  # pts rounding
    for frame, target in zip(video.frames, video.timestamps):
        shown = int(round((float(frame.mean()) - 10) / 15))
        assert times_ms[shown] / 1000 <= target + late
        assert shown == len(times_ms) - 1 or times_ms[shown + 1] / 1000 > target + late


# -- chat and CLI -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smolvlm2_session(family_checkpoint):
    from engine.chat import ChatSession

    return ChatSession.load(family_checkpoint("SmolVLM2-256M-Video-Instruct"), device="cpu", dtype="float32")


def test_chat_video_turn_matches_transformers(smolvlm2_session, videos_dir, family_checkpoint):
    """A user turn with a video: prompt ids as transformers' processor builds them, greedy tokens as
    its model generates them; a second turn reuses the cached video."""
    from engine.api.events import DoneEvent, GenerationParams, TokenEvent
    from tests.engine.test_family import video_ids

    session = smolvlm2_session
    session.reset()
    path = videos_dir / "moving_square.mp4"
    question = "Where is the square?"
    params = GenerationParams(max_new_tokens=6, ignore_eos=True)
    events = list(session.send(question, params=params, videos=[path]))
    tokens = [e.token_id for e in events if isinstance(e, TokenEvent) and e.token_id >= 0]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "length"
    ref_ids = video_ids(family_checkpoint("SmolVLM2-256M-Video-Instruct"), read_video(path), question)
    prompt = session._prompt()
    ids, media = prompt.ids, prompt.images
    assert ids[: ref_ids.shape[1]] == ref_ids[0].tolist()  # then the answer and the next generation prompt
    assert done.stats.prompt_tokens == ref_ids.shape[1]
    frames = media[0].num_frames
    assert done.stats.video_frames == frames and done.stats.image_tokens == frames * media[0].image_seq_len
    ref = transformers.AutoModelForImageTextToText.from_pretrained(
        family_checkpoint("SmolVLM2-256M-Video-Instruct"), dtype="float32", attn_implementation="eager").eval()
    import torch

    with torch.no_grad():
        gen = ref.generate(input_ids=ref_ids, pixel_values=torch.from_numpy(media[0].tiles)[None],
                           attention_mask=torch.ones_like(ref_ids), max_new_tokens=6, min_new_tokens=6,
                           do_sample=False)
    assert tokens == gen[0, ref_ids.shape[1]:].tolist()
    again = list(session.send("And now?", params=params))[-1]
    assert again.stats.cached_tokens >= ref_ids.shape[1]  # the video's frames were not encoded again


def test_chat_rejects_bad_videos_without_a_half_saved_turn(smolvlm2_session, tmp_path):
    session = smolvlm2_session
    session.reset()
    before = list(session.turns)
    with pytest.raises(VideoError):
        session.send("What is this?", videos=[write_audio_only(tmp_path / "a.mp4")])
    assert session.turns == before


def test_idefics3_session_refuses_videos(family_checkpoint, videos_dir):
    from engine.api.errors import UnsupportedOperation
    from engine.chat import ChatSession

    session = ChatSession.load(family_checkpoint("SmolVLM-256M-Instruct"), device="cpu", dtype="float32")
    assert not session.model.capabilities().video
    name = session.model.metadata.name
    # Named as the refusal of images names a text-only model (trial 59: "x.gguf ... (model_type llama)").
    with pytest.raises(UnsupportedOperation, match=rf"^{re.escape(name)} \(idefics3\) takes no videos; load a SmolVLM2"):
        session.send("What moves?", videos=[videos_dir / "moving_square.mp4"])
    assert session.turns == []


def test_cli_generate_video_json_reports_frames(family_checkpoint, videos_dir, capsys):
    import json

    from engine.__main__ import main

    ck = str(family_checkpoint("SmolVLM2-256M-Video-Instruct"))
    path = videos_dir / "slideshow.mp4"
    rc = main(["generate", "--model", ck, "--video", str(path), "--prompt", "Which photos?", "--max-new-tokens", "3",
               "--ignore-eos", "--json", "--max-frames", "5", "--fps", "2", "--dtype", "float32"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0
    done = lines[-1]
    expected = hf_indices(*hf_metadata(path), sample_fps=2, max_frames=5)
    assert done["type"] == "done" and done["frames"] == len(expected) == 5
    assert done["generated_tokens"] == 3 and sum(1 for line in lines if line["type"] == "token") == 3


@pytest.mark.parametrize("kind", ["audio", "text", "empty"])
def test_cli_bad_video_is_a_one_line_error_before_loading(tmp_path, capsys, kind):
    from engine.__main__ import main

    path = tmp_path / "clip.mp4"
    if kind == "audio":
        write_audio_only(path)
    elif kind == "text":
        path.write_text("not a video")
    else:
        path.write_bytes(b"")
    rc = main(["generate", "--model", str(tmp_path / "no-such-model"), "--video", str(path), "--prompt", "hi"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: ") and "\n" not in err
    assert err == {"audio": "error: clip.mp4 has no video in it, only audio",
                   "text": "error: clip.mp4 is not a video Smolchat can read (damaged, or not a video)",
                   "empty": "error: clip.mp4 is empty (0 bytes)"}[kind]


def test_typed_video_token_stays_text(video_config_dir, videos_dir, processor):
    from engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(video_config_dir)
    video = processor.preprocess_video(videos_dir / "moving_square.mp4", max_frames=2)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Is <video> a tag?"}]}]
    enc = tok.encode_chat(messages, videos=[video])
    assert enc.text.count("You are provided the following series of two frames") == 1
    assert "Is <video> a tag?" in enc.text
    slots = enc.input_ids.count(tok.token_to_id(video.image_token))
    assert enc.num_image_tokens == 2 * processor.image_seq_len == slots
    with pytest.raises(ValueError, match="the chat has 1 video parts but 2 videos were given"):
        tok.encode_chat(messages, videos=[video, video])


def test_a_template_without_a_video_branch_is_refused(model_config_dir, videos_dir, processor):
    """SmolVLM (Idefics3) chat templates write nothing for a video part: say so, never drop the video."""
    from engine.tokenizer import Tokenizer

    video = processor.preprocess_video(videos_dir / "moving_square.mp4", max_frames=2)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What moves?"}]}]
    with pytest.raises(ValueError, match="the chat template wrote 0 video tokens but 1 videos were given"):
        Tokenizer.from_pretrained(model_config_dir).encode_chat(messages, videos=[video])


@pytest.mark.parametrize("suffix,codec", [(".mkv", "libx264"), (".webm", "libvpx-vp9"), (".h264", "libx264")])
def test_containers_without_a_frame_count(tmp_path, suffix, codec):
    """Matroska/WebM headers carry no frame count (it comes from the duration); a raw H.264 stream has
    neither and cannot seek (its packets are counted, then it is decoded from the start)."""
    frames = [solid(32, 48, (i * 7) % 250) for i in range(150)]  # frame i has grey level 7 i mod 250
    path = write_video(tmp_path / f"clip{suffix}", frames, rate=25, codec=codec)
    video = read_video(path)
    assert (video.info.total_frames, video.info.fps) == (150, 25.0)
    assert video.indices == hf_indices(150, 25.0, 6.0).tolist()
    for frame, index in zip(video.frames, video.indices):
        assert abs(float(frame.mean()) - (index * 7) % 250) <= 3


def test_text_only_session_refuses_videos(llama_tiny_checkpoint, videos_dir):
    from engine.api.errors import UnsupportedOperation
    from engine.chat import ChatSession

    session = ChatSession.load(llama_tiny_checkpoint, device="cpu", dtype="float32")
    with pytest.raises(UnsupportedOperation, match="takes no videos"):
        session.send("What moves?", videos=[videos_dir / "moving_square.mp4"])
    assert session.turns == []


def test_count_video_tokens_from_headers_matches_the_prompt(smolvlm2_session, videos_dir):
    """The count the app shows before sending is the tokens the video adds to the prompt, within one
    token (the BPE may merge the outro's newlines with the text that follows)."""
    from engine.api.events import GenerationParams

    session = smolvlm2_session
    session.reset()
    for path, params in [(videos_dir / "slideshow.mp4", None),
                         (videos_dir / "moving_square.mp4", GenerationParams(video_fps=2, video_max_frames=7))]:
        counted = session.count_video_tokens(path, params)
        session.reset()
        without = len(session.tokenizer.encode_chat([{"role": "user", "content": "Hi"}]).input_ids)
        clip = session.preprocess_videos([path], params)[0]
        messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Hi"}]}]
        with_video = len(session.tokenizer.encode_chat(messages, videos=[clip]).input_ids)
        assert abs(counted - (with_video - without)) <= 1
        assert counted > clip.num_image_tokens


def test_a_video_the_system_will_not_open_is_not_called_damaged(tmp_path, monkeypatch):
    import av

    path = write_video(tmp_path / "locked.mp4", [solid(16, 16)] * 2)

    def refuse(*args, **kwargs):
        raise av.PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(av, "open", refuse)
    with pytest.raises(VideoError) as info:
        probe(path)
    assert str(info.value) == "locked.mp4 cannot be opened: Permission denied"
