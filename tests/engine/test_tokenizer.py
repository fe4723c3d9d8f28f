"""engine.tokenizer against transformers' Idefics3Processor (apply_chat_template + __call__) as oracle.

Quirk found on the way: transformers' processor renders string ``content`` with the raw template,
which iterates the string's characters and silently drops the text (``'<|im_start|>User: <end_of_utterance>'``).
Our tokenizer normalizes strings to ``[{"type": "text", ...}]`` first, so the oracle is always
given list content.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine.api.errors import ConfigError
from engine.models.smolvlm.processing import ImageProcessor, load_image
from engine.tokenizer import EncodedRun, StreamingDetokenizer, Tokenizer

# SmolVLM's special ids: the tokenizer itself knows no image or stop token (those belong to the
# processor and to generation_config.json).
IMAGE_ID, FAKE_ID, GLOBAL_ID, EOU_ID = 49190, 49189, 49152, 49279
REFERENCE_PROMPT = "<|im_start|>User:<image>Can you describe this image?<end_of_utterance>\nAssistant:"


@pytest.fixture(scope="module")
def tokenizer(model_config_dir) -> Tokenizer:
    return Tokenizer.from_pretrained(model_config_dir)


@pytest.fixture(scope="module")
def processor(model_config_dir) -> ImageProcessor:
    return ImageProcessor.from_pretrained(model_config_dir)


def _as_lists(messages):
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]}
        for m in messages
    ]


def _hf_encode(hf_processor, messages, images):
    text = hf_processor.apply_chat_template(_as_lists(messages), add_generation_prompt=True)
    out = hf_processor(text=text, images=images or None, return_tensors="np")
    ids = out["input_ids"][0].tolist()
    return text, ids, hf_processor.tokenizer.decode(ids), out.get("pixel_values")


def _assert_parity(tokenizer, processor, hf_processor, messages, images):
    processed = [processor.preprocess(image) for image in images]
    encoded = tokenizer.encode_chat(messages, processed)
    template_text, ref_ids, ref_text, ref_pixels = _hf_encode(hf_processor, messages, images)
    assert tokenizer.apply_chat_template(messages) == template_text
    assert encoded.input_ids == ref_ids
    assert encoded.text == ref_text
    assert encoded.num_image_tokens == ref_ids.count(IMAGE_ID)
    assert encoded.input_ids.count(IMAGE_ID) == sum(p.num_image_tokens for p in processed)
    if images:
        tiles = np.concatenate([p.tiles for p in processed])
        assert tiles.shape == ref_pixels[0].shape
        assert np.abs(tiles - ref_pixels[0]).max() <= 1e-6
    return encoded


def test_special_token_ids(tokenizer):
    assert tokenizer.token_to_id("<image>") == IMAGE_ID
    assert tokenizer.token_to_id("<fake_token_around_image>") == FAKE_ID
    assert tokenizer.token_to_id("<global-img>") == GLOBAL_ID
    assert tokenizer.token_to_id("<end_of_utterance>") == EOU_ID
    assert tokenizer.vocab_size == 49280
    assert tokenizer.token_to_id("<row_2_col_3>") == 49152 + 6 + 3
    assert tokenizer.id_to_token(1) == "<|im_start|>"


def test_reference_prompt_string(tokenizer):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Can you describe this image?"}]}]
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True) == REFERENCE_PROMPT
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False).endswith("<end_of_utterance>\n")


def test_string_content_is_normalized(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>User: Hi<end_of_utterance>\nAssistant:"


def test_text_only_matches_transformers(tokenizer, processor, hf_processor):
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Hello there!  How are you?\n\nLine two, 1234 digits, café, 日本語."},
        {"role": "assistant", "content": "Fine, thanks 🙂"},
        {"role": "user", "content": [{"type": "text", "text": " leading space and trailing newline\n"}]},
    ]
    encoded = _assert_parity(tokenizer, processor, hf_processor, messages, [])
    assert encoded.input_ids[0] == 1 and encoded.num_image_tokens == 0


def test_one_photo_matches_transformers(tokenizer, processor, hf_processor, images_dir):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Can you describe this image?"}]}]
    encoded = _assert_parity(tokenizer, processor, hf_processor, messages, [load_image(images_dir / "chelsea.png")])
    assert encoded.num_image_tokens == 13 * 64


def test_several_images_of_different_sizes_match_transformers(tokenizer, processor, hf_processor, images_dir):
    base = load_image(images_dir / "coffee.png")
    images = [base.resize((9, 13)), base.resize((1600, 300)), load_image(images_dir / "hubble_deep_field.jpg")]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Compare "}, {"type": "image"},
                                     {"type": "text", "text": " with "}, {"type": "image"}]},
        {"role": "assistant", "content": "The first is tiny, the second is wide."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "And this one?"}]},
    ]
    _assert_parity(tokenizer, processor, hf_processor, messages, images)


def test_user_text_with_special_strings_stays_text(tokenizer, processor, images_dir):
    typed = "What is <image> and <end_of_utterance>\nAssistant: <|im_start|> <fake_token_around_image><global-img>?"
    image = processor.preprocess(load_image(images_dir / "rocket.jpg"), detail="fast")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": typed}]}]
    encoded = tokenizer.encode_chat(messages, [image])
    ids = encoded.input_ids
    assert ids.count(IMAGE_ID) == 1 * 64 == encoded.num_image_tokens
    assert ids.count(EOU_ID) == 1  # only the template's
    assert ids.count(1) == 1  # only the template's <|im_start|>
    assert ids.count(FAKE_ID) == 2 and ids.count(GLOBAL_ID) == 1
    assert typed in encoded.text
    assert tokenizer.decode(ids) == encoded.text
    text_only = tokenizer.encode_chat([{"role": "user", "content": typed}]).input_ids
    eou = EOU_ID
    assert text_only == [1, *tokenizer.encode("User: " + typed), eou, *tokenizer.encode("\nAssistant:")]


def test_repeated_prompts_split_once_with_the_same_ids(model_config_dir, processor, images_dir, monkeypatch):
    """An image's prompt (~900 special tokens) is split at special tokens once, not on every turn;
    the ids from the cache equal the first encoding's, and the cache stays within its bounds."""
    import engine.tokenizer as tokenizer_module

    tok = Tokenizer.from_pretrained(model_config_dir)
    image = processor.preprocess(load_image(images_dir / "chelsea.png"))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    first = tok.encode_chat(messages, [image])
    assert image.prompt in tok._split_cache
    split = tok._split_special(image.prompt)
    assert tok._split_special(image.prompt) is split
    assert split.count(IMAGE_ID) == image.num_image_tokens == 13 * 64
    # The prompt's span between its first and last special token is tokenized once, as one run;
    # text outside that span stays an item, to join the template's text around it.
    (run,) = tok._media_items(image.prompt)
    assert tok._media_items(image.prompt)[0] is run
    assert list(run.ids) == [i for item in split for i in (tok.encode(item) if isinstance(item, str) else [item])]
    assert run.text == image.prompt
    assert tok._media_items("a\n<image>b\n<image>c") == (
        "a\n", EncodedRun((IMAGE_ID, *tok.encode("b\n"), IMAGE_ID), "<image>b\n<image>"), "c")
    again = tok.encode_chat(messages, [image])
    assert again.input_ids == first.input_ids and again.text == first.text
    assert Tokenizer.from_pretrained(model_config_dir).encode_chat(messages, [image]).input_ids == first.input_ids

    monkeypatch.setattr(tokenizer_module, "SPLIT_CACHE_ENTRIES", 3)
    texts = [f"<image>{i}<end_of_utterance>" for i in range(6)]
    for text in texts:
        assert tok._split_special(text) == (IMAGE_ID, str(texts.index(text)), EOU_ID)
    assert list(tok._split_cache) == texts[-3:]  # least recently used dropped first
    tok._split_special(texts[3])  # used again: now the most recent
    tok._split_special("<image>new")
    assert list(tok._split_cache) == [texts[5], texts[3], "<image>new"]
    monkeypatch.setattr(tokenizer_module, "SPLIT_CACHE_TEXT_CHARS", 10)
    long = "<image>" + "x" * 20
    assert tok._split_special(long) == (IMAGE_ID, "x" * 20) and long not in tok._split_cache


def test_a_follow_up_encodes_only_its_new_chunks_within_a_character_budget(model_config_dir, monkeypatch):
    """Every turn encodes the whole conversation again: the chunks of earlier messages come from the
    tokenizer's memo (same ids as a fresh tokenizer's), and the memo keeps to its character budget."""
    import engine.tokenizer as tokenizer_module

    tok = Tokenizer.from_pretrained(model_config_dir)
    encoded = []
    real = tok.encode
    monkeypatch.setattr(tok, "encode", lambda text, allow_special=False: encoded.append(text) or real(text, allow_special))
    chat = [{"role": "user", "content": "What is it?"}, {"role": "assistant", "content": "A cat."},
            {"role": "user", "content": "What colour is it?"}]
    tok.encode_chat(chat[:1])
    before = len(encoded)
    follow_up = tok.encode_chat(chat).input_ids
    new = encoded[before:]
    assert len(new) == 2 and "A cat." in new[0] and "What colour is it?" in new[1]  # the answer, the question
    assert follow_up == Tokenizer.from_pretrained(model_config_dir).encode_chat(chat).input_ids
    assert tok.encode_chat(chat).input_ids == follow_up and len(encoded) == before + 2

    monkeypatch.setattr(tokenizer_module, "SPLIT_CACHE_CHARS", 40)
    tok.encode_chat([{"role": "user", "content": "x" * 30}])
    kept = [k if isinstance(k, str) else k[-1] for k in tok._split_cache]
    assert tok._split_chars == sum(map(len, kept)) <= 40
    assert list(tok._split_cache)[-1] == ("ids", "\nAssistant:")  # the most recent stays


def test_typed_image_string_is_not_an_image_slot(tokenizer, processor, images_dir):
    image = processor.preprocess(load_image(images_dir / "rocket.jpg"), detail="fast")
    with pytest.raises(ValueError, match="0 image parts but 1 images"):
        tokenizer.encode_chat([{"role": "user", "content": "<image>"}], [image])
    with pytest.raises(ValueError, match="2 image parts but 1 images"):
        tokenizer.encode_chat([{"role": "user", "content": [{"type": "image"}, {"type": "image"}]}], [image])


def test_encode_adds_no_bos_and_decode_matches_transformers(tokenizer, hf_processor):
    text = "Hello <image> world\n\n  x"
    assert tokenizer.encode(text, allow_special=True) == hf_processor.tokenizer(text)["input_ids"]
    plain = tokenizer.encode(text)
    assert IMAGE_ID not in plain and plain[0] != 1
    ids = tokenizer.encode(REFERENCE_PROMPT, allow_special=True)
    assert tokenizer.decode(ids) == hf_processor.tokenizer.decode(ids) == REFERENCE_PROMPT
    assert tokenizer.decode(ids, skip_special_tokens=True) == hf_processor.tokenizer.decode(ids, skip_special_tokens=True)


def _multilingual_text(seed: int, length: int = 400) -> str:
    pools = [
        "abcdefghijklmnopqrstuvwxyz ABC 0123456789 .,!?\n",
        "éèàçñøåßœ", "привет мир", "γειά σου", "中文字符测试漢字", "ひらがなカタカナ", "한국어문장",
        "مرحبا بالعالم", "नमस्ते", "🚀🙂🧑‍🚀👍🏽🇯🇵❤️", "e\u0301a\u0308",
    ]
    rng = random.Random(seed)
    return "".join(rng.choice(rng.choice(pools)) for _ in range(length))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streaming_detokenizer_equals_full_decode(tokenizer, seed):
    text = _multilingual_text(seed)
    ids = tokenizer.encode(text)
    eou = EOU_ID
    stream = StreamingDetokenizer(tokenizer, skip_special_ids={eou})
    pieces = []
    held_back = 0
    for i, token in enumerate(ids):
        piece = stream.add(token)
        held_back += piece == ""
        assert "\ufffd" not in piece
        pieces.append(piece)
        if i % 17 == 0:
            assert stream.add(eou) == ""  # stop tokens are never emitted
    pieces.append(stream.flush())
    assert "".join(pieces) == tokenizer.decode(ids) == text
    assert held_back > 0  # some characters really were split across tokens


def test_streaming_random_ids_equal_full_decode(tokenizer):
    # Random ids include lone UTF-8 continuation bytes: U+FFFD must then appear exactly as in decode().
    rng = random.Random(0)
    ids = [rng.randrange(tokenizer.vocab_size) for _ in range(3000)]
    stream = StreamingDetokenizer(tokenizer)
    assert "".join(stream.add(t) for t in ids) + stream.flush() == tokenizer.decode(ids)


def test_streaming_every_id_equals_full_decode(tokenizer):
    # The whole vocabulary once, in order and shuffled: every id's bytes are checked.
    ids = list(range(tokenizer.vocab_size))
    for order in (ids, random.Random(1).sample(ids, len(ids))):
        stream = StreamingDetokenizer(tokenizer)
        assert "".join(stream.add(t) for t in order) + stream.flush() == tokenizer.decode(order)


def test_streaming_detokenizer_holds_partial_character(tokenizer):
    ids = tokenizer.encode("🚀")
    assert len(ids) > 1  # byte-level BPE spells this emoji with several tokens
    stream = StreamingDetokenizer(tokenizer)
    assert [stream.add(t) for t in ids[:-1]] == [""] * (len(ids) - 1)
    assert stream.add(ids[-1]) == "🚀"
    assert stream.flush() == ""


@pytest.mark.parametrize("text", ["Hola 🌍🌍🌍 adiós", "Привет, 世界! ñ", "a😊b"])
def test_a_stream_held_mid_character_and_continued_from_its_ids_equals_the_whole_decode(tokenizer, text):
    """Trial 60: an answer cut by its token limit inside an emoji ended in U+FFFD, and its continuation
    began with one U+FFFD for each remaining byte ("���"). Cut after every token: the held part plus
    the primed continuation is the text of all the ids, and neither part shows U+FFFD."""
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    cuts_inside = 0
    for cut in range(1, len(ids)):
        first = StreamingDetokenizer(tokenizer)
        head = "".join(first.add(t) for t in ids[:cut])
        held = first.hold()
        cuts_inside += held > 0
        assert held == 0 or tokenizer.decode(ids[:cut]).endswith("\ufffd")
        second = StreamingDetokenizer(tokenizer)
        second.prime(ids[:cut])
        rest = "".join(second.add(t) for t in ids[cut:]) + second.flush()
        assert head + rest == text and "\ufffd" not in head + rest
    assert cuts_inside > 0  # the text's tokens really split a character somewhere


def test_priming_after_whole_characters_changes_nothing(tokenizer):
    stream = StreamingDetokenizer(tokenizer)
    stream.prime(tokenizer.encode("done 🌍"))
    assert stream.add(tokenizer.encode("x")[0]) == "x"
    assert stream.flush() == ""
    stream.prime([])
    assert stream.flush() == ""


def test_streaming_detokenizer_emits_specials_not_in_skip_set(tokenizer):
    stream = StreamingDetokenizer(tokenizer, skip_special_ids={EOU_ID})
    assert stream.add(IMAGE_ID) == "<image>"
    assert stream.add(EOU_ID) == ""


def test_missing_tokenizer_json_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path)


def test_missing_chat_template_raises_config_error(tmp_path, model_config_dir):
    (tmp_path / "tokenizer.json").write_bytes((model_config_dir / "tokenizer.json").read_bytes())
    tokenizer = Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="chat template"):
        tokenizer.encode_chat([{"role": "user", "content": "hi"}])


# -- any model family: template files, special tokens, a string-content (ChatML) template ----------

SMOLLM2_CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And times 3? Ünïcode ✓ 🚀"}],
]


@pytest.fixture(scope="module")
def smollm2_dir(shared_dir):
    return shared_dir / "models" / "SmolLM2-135M-Instruct"


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", range(len(SMOLLM2_CONVERSATIONS)))
def test_smollm2_prompt_and_ids_match_transformers(smollm2_dir, conversation, add_generation_prompt):
    """SmolLM2's ChatML template (default system prompt when none is given, string content) gives
    transformers' exact prompt string and ids."""
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoTokenizer.from_pretrained(smollm2_dir)
    ours = Tokenizer.from_pretrained(smollm2_dir)
    messages = SMOLLM2_CONVERSATIONS[conversation]
    text = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    ids = ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert ours.content_as_list is False
    assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == text
    encoded = ours.encode_chat(messages, add_generation_prompt=add_generation_prompt)
    assert encoded.input_ids == ids and encoded.text == text
    if messages[0]["role"] != "system":
        assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_smollm2_special_tokens_come_from_tokenizer_config(smollm2_dir):
    tok = Tokenizer.from_pretrained(smollm2_dir)
    assert tok.special_tokens_map["bos_token"] == "<|im_start|>"
    assert tok.special_tokens_map["eos_token"] == "<|im_end|>"
    assert tok.token_to_id("<|im_end|>") == 2
    with pytest.raises(ValueError, match="text only"):  # a ChatML template has no image slot
        tok.apply_chat_template([{"role": "user", "content": [{"type": "image"}]}])


def _template_folder(tmp_path, model_config_dir, files: dict[str, str]):
    (tmp_path / "tokenizer.json").write_bytes((model_config_dir / "tokenizer.json").read_bytes())
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return Tokenizer.from_pretrained(tmp_path)


def test_chat_template_lookup_order(tmp_path, model_config_dir):
    """chat_template.json > chat_template.jinja > tokenizer_config.json, and ``bos_token`` /
    ``eos_token`` reach the template (from tokenizer_config.json, else special_tokens_map.json)."""
    import json

    messages = [{"role": "user", "content": "hi"}]
    config = json.dumps({"chat_template": "C{{ bos_token }}{{ eos_token }}", "bos_token": "<|im_start|>"})
    smap = json.dumps({"eos_token": {"content": "<end_of_utterance>"}, "bos_token": "ignored"})
    files = {"tokenizer_config.json": config, "special_tokens_map.json": smap}
    assert _template_folder(tmp_path, model_config_dir, files).apply_chat_template(messages) == \
        "C<|im_start|><end_of_utterance>"
    files["chat_template.jinja"] = "J{{ messages[0]['content'] }}"
    assert _template_folder(tmp_path, model_config_dir, files).apply_chat_template(messages) == "Jhi"
    files["chat_template.json"] = json.dumps({"chat_template": "S{{ messages[0]['content'][0]['type'] }}"})
    assert _template_folder(tmp_path, model_config_dir, files).apply_chat_template(messages) == "Stext"


def _library_text(hf, ids) -> str:
    return hf.decode(ids, skip_special_tokens=False)


def test_token_bytes_of_the_whole_vocabulary(model_config_dir):
    """Each id's bytes decode as tokenizers decodes the id alone (lossy UTF-8 of a lone byte
    included); computed when first asked for and kept (streams of the whole vocabulary:
    test_streaming_every_id_equals_full_decode)."""
    from tokenizers import Tokenizer as HfTokenizer

    tok = Tokenizer.from_pretrained(model_config_dir)
    hf = HfTokenizer.from_file(str(model_config_dir / "tokenizer.json"))  # an independent reference
    assert tok._token_bytes == {}  # nothing computed at load
    assert hf.get_vocab_size(with_added_tokens=True) == tok.vocab_size
    for i in range(tok.vocab_size):
        assert tok.token_bytes(i).decode("utf-8", errors="replace") == _library_text(hf, [i]), i
    assert tok.token_bytes(198) == b"\n" and tok.token_bytes(tok.token_to_id("<image>")) == b"<image>"
    assert tok.token_bytes(tok.token_to_id("Ġthe")) == b" the"
    assert tok.token_bytes(tok.token_to_id("Ã")) == b"\xc3"  # half a character: a byte, not "Ã"
    assert tok.token_bytes(1234) is tok.token_bytes(1234)  # kept
    for bad in (-1, tok.vocab_size):
        with pytest.raises(IndexError, match="outside the vocabulary"):
            tok.token_bytes(bad)


# Added tokens go through tokenizers' ByteLevel decoder like any other: read as bytes when every
# character is in GPT-2's byte table, as their own UTF-8 when one is not.
ADDED_TOKENS = {
    "日本語": "日本語".encode(),
    "naïve€": "naïve€".encode(),  # "€" is outside the table, so "ï" stays "ï"
    "çé": b"\xe7\xe9",  # both in the table: two bytes that are not UTF-8
    "ĉtab": b"\ttab",
    "Ġhello": b" hello",
    "a b": b"a b",  # the space is outside the table
    "a\u00adb": "a\u00adb".encode(),  # so are U+00AD and U+00A0, though latin-1 has them
    "é\u00a0": "é\u00a0".encode(),
}
SPECIAL_TOKENS = {"<|spé€ial|>": "<|spé€ial|>".encode(), "<|Ġsp|>": b"<| sp|>"}


def test_token_bytes_of_added_and_special_tokens_as_tokenizers_decodes_them(model_config_dir):
    from tokenizers import Tokenizer as HfTokenizer

    hf = HfTokenizer.from_file(str(model_config_dir / "tokenizer.json"))
    hf.add_tokens(list(ADDED_TOKENS))
    hf.add_special_tokens(list(SPECIAL_TOKENS))
    reference = HfTokenizer.from_str(hf.to_str())
    tok = Tokenizer(hf, None)
    for token, expected in {**ADDED_TOKENS, **SPECIAL_TOKENS}.items():
        i = tok.token_to_id(token)
        assert (i in tok.special_ids) == (token in SPECIAL_TOKENS), token
        assert tok.token_bytes(i) == expected, token
        assert expected.decode("utf-8", errors="replace") == _library_text(reference, [i]), token
    text = "x 日本語 naïve€ y<|spé€ial|>ĉtab çé Ġhello<|Ġsp|>"
    ids = tok.encode(text, allow_special=True)
    assert all(tok.token_to_id(t) in ids for t in (*ADDED_TOKENS, *SPECIAL_TOKENS) if t in text)
    stream = StreamingDetokenizer(tok)
    streamed = "".join(stream.add(t) for t in ids) + stream.flush()
    assert streamed == tok.decode(ids) == _library_text(reference, ids)
    assert "\ttab" in streamed and "<| sp|>" in streamed and "naïve€" in streamed


@pytest.mark.parametrize("text", [
    _multilingual_text(3, 4000), " " * 20000, "\n" * 5000, "a" * 20000, "<|im_start|><image><end_of_utterance>" * 300,
    "e\u0301" * 4000, "https://example.com/" + "x" * 5000, "1234567890" * 2000,
], ids=["multilingual", "spaces", "newlines", "one letter", "special strings", "combining", "url", "digits"])
def test_least_tokens_is_a_lower_bound(tokenizer, text):
    """What a request far beyond the context is refused by before it is encoded must never refuse
    one that fits: the tokens of any text are at least ``least_tokens`` of its characters."""
    for allow_special in (False, True):
        assert len(tokenizer.encode(text, allow_special=allow_special)) >= tokenizer.least_tokens(len(text)) > 0
