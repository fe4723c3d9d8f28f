"""GGUF checkpoints as a ModelSource (engine/gguf.py, engine/gguf_files.py).

Oracles: the real SmolLM2-135M Q4_1 GGUF against the shared SmolLM2 config/tokenizer files and
transformers' own GGUF loader; a tiny random SmolVLM converted by llama.cpp's convert_hf_to_gguf.py
(text model + mmproj) against the safetensors checkpoint it came from.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer as HfTokenizer

from engine.api.errors import ModelLoadError
from engine.cache import CacheConfig
from engine.gguf import (
    CACHE_ENV,
    SUPPORTED_TYPES,
    GGUFArchitectureError,
    GGUFFormatError,
    GGUFMissingTextModelError,
    GGUFSource,
    GGUFTensorTypeError,
    llama_hf_name,
)
from engine.models.smolvlm.processing import ImageProcessor
from engine.registry import load_model, read_metadata
from engine.sources import resolve_source
from engine.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[2]
ARCH_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "rms_norm_eps", "vocab_size", "tie_word_embeddings",
               "max_position_embeddings", "bos_token_id", "eos_token_id", "hidden_act", "attention_bias",
               "mlp_bias", "model_type")
TEXTS = [
    "Hello world!",
    "The capital of France is Paris.",
    "  leading spaces, trailing tabs\t\t\nand\r\nnew lines\n\n",
    "Numbers: 3.14159, 2024-12-01, 1234567890, 10**6 and $99.99",
    "Unicode: éàüß Straße, Ελληνικά, русский, 中文字符, 日本語のテキスト, 한국어, emoji 🙂🚀👍🏽",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # O(2^n)\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>x<file_sep>y<filename>z<gh_stars>",
]


@pytest.fixture(scope="module", autouse=True)
def gguf_cache(tmp_path_factory):
    """Derived folders go to a private cache (subprocesses inherit it), never the user's."""
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("gguf-cache"))
    yield Path(os.environ[CACHE_ENV])
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf) -> GGUFSource:
    return GGUFSource(smollm2_gguf)


@pytest.fixture(scope="module")
def shared_smollm2(shared_dir) -> Path:
    return shared_dir / "models" / "SmolLM2-135M-Instruct"


# -- the real SmolLM2 GGUF -------------------------------------------------------------------------


def test_llama_config_equals_shared_config(smollm2, shared_smollm2):
    ours = json.loads((smollm2.folder / "config.json").read_text())
    ref = json.loads((shared_smollm2 / "config.json").read_text())
    assert {k: ours[k] for k in ARCH_FIELDS} == {k: ref[k] for k in ARCH_FIELDS}
    assert ours["rope_parameters"] == ref["rope_parameters"] == {"rope_theta": 100000.0, "rope_type": "default"}
    assert ours["rope_theta"] == 100000.0 and ours["pad_token_id"] == ref["pad_token_id"] == 2
    gen = json.loads((smollm2.folder / "generation_config.json").read_text())
    assert gen == json.loads((shared_smollm2 / "generation_config.json").read_text())


def test_tokenizer_encodes_like_shared_tokenizer(smollm2, shared_smollm2):
    ours = HfTokenizer.from_file(str(smollm2.folder / "tokenizer.json"))
    ref = HfTokenizer.from_file(str(shared_smollm2 / "tokenizer.json"))
    for text in TEXTS:
        assert ours.encode(text).ids == ref.encode(text).ids, text
        assert ours.decode(ours.encode(text).ids, skip_special_tokens=False) == text
    assert ours.encode(TEXTS[6]).ids[:3] == [1, 9690, 198]  # <|im_start|> system \n
    assert ours.get_vocab(with_added_tokens=True) == ref.get_vocab(with_added_tokens=True)
    # Same JSON as transformers writes, but for the pre-tokenizer: llama.cpp's "smollm" splits digits
    # one by one (as SmolLM2's own tokenizer.json does); transformers does not know that name.
    a, b = json.loads(ours.to_str()), json.loads(ref.to_str())
    assert [k for k in b if a[k] != b[k]] == ["pre_tokenizer"]
    assert a["pre_tokenizer"]["pretokenizers"][0] == {"type": "Digits", "individual_digits": True}


def test_chat_template_and_special_tokens_equal_shared(smollm2, shared_smollm2):
    cfg = json.loads((smollm2.folder / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == (shared_smollm2 / "chat_template.jinja").read_text()
    ref = json.loads((shared_smollm2 / "tokenizer_config.json").read_text())
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        assert cfg[key] == ref[key]
    assert cfg["add_bos_token"] is False


@pytest.mark.slow
def test_every_tensor_equals_transformers_gguf_loader(smollm2, smollm2_gguf):
    """Names, Q/K un-permutation and dequantization (Q4_1, Q8_0, F32) against transformers, exactly."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = transformers.AutoConfig.from_pretrained(smollm2.folder)
    with torch.device("meta"):
        hf_model = transformers.LlamaForCausalLM(config)
    ref = load_gguf_checkpoint(str(smollm2_gguf), return_tensors=True, model_to_load=hf_model)["tensors"]
    ours = dict(smollm2.tensors())
    assert len(ours) == 272 and set(ours) == set(ref)
    assert "model.layers.29.self_attn.q_proj.weight" in ours and "lm_head.weight" not in ours  # tied
    for name, tensor in ours.items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, ref[name]), name
    assert smollm2.tensor_shapes() == {k: tuple(v.shape) for k, v in ours.items()}
    assert smollm2.tensor_names() == list(ours)


def test_resolve_source_takes_gguf_file_and_folder(smollm2_gguf, tmp_path):
    a, b = resolve_source(smollm2_gguf), resolve_source(smollm2_gguf.parent)
    assert isinstance(a, GGUFSource) and isinstance(b, GGUFSource)
    assert a.folder == b.folder  # one cache entry per file (path, size, mtime)
    with pytest.raises(ModelLoadError, match="model file not found"):
        resolve_source(tmp_path / "missing.gguf")


def test_cache_key_follows_the_file(smollm2_gguf, tmp_path):
    copy = tmp_path / smollm2_gguf.name
    shutil.copy(smollm2_gguf, copy)  # a copy, not a link: the shared file's mtime must not move
    first = GGUFSource(copy).folder
    assert GGUFSource(copy).folder == first
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 10**9))
    assert GGUFSource(copy).folder != first


# -- SmolVLM pair converted by llama.cpp -----------------------------------------------------------


def test_smolvlm_pair_tensors_equal_safetensors(smolvlm_gguf_pair, tiny_checkpoint):
    source = GGUFSource(smolvlm_gguf_pair)
    assert source.mmproj is not None
    ours, ref = dict(source.tensors()), load_file(tiny_checkpoint / "model.safetensors")
    assert set(ours) == set(ref)
    for name in ref:
        assert torch.equal(ours[name], ref[name]), name  # F32 GGUF: exact, Q/K rows un-permuted


def test_smolvlm_pair_config_equals_original(smolvlm_gguf_pair, tiny_checkpoint):
    source = GGUFSource(smolvlm_gguf_pair)
    ours, ref = read_metadata(source.folder), read_metadata(tiny_checkpoint)
    assert ours.model_type == "idefics3" and ours.vision == ref.vision
    # text_config.eos_token_id: the GGUF's eos is <end_of_utterance> (49279), the id generation stops
    # on in both (generation_config.json); rope_parameters is the transformers 5 spelling of rope_theta.
    skip = {"eos_token_id", "rope_parameters"}
    for f in dataclasses.fields(ref.text):
        if f.name not in skip:
            assert getattr(ours.text, f.name) == getattr(ref.text, f.name), f.name
    for key in ("scale_factor", "image_token_id", "tie_word_embeddings", "eos_token_ids", "image_seq_len"):
        assert getattr(ours, key) == getattr(ref, key), key
    assert ours.eos_token_ids == (49279,) and ours.image_token_id == 49190
    assert vars(ImageProcessor.from_pretrained(source.folder)) == vars(ImageProcessor.from_pretrained(tiny_checkpoint))


def test_smolvlm_pair_tokenizer_equals_original(smolvlm_gguf_pair, tiny_checkpoint):
    ours = Tokenizer.from_pretrained(GGUFSource(smolvlm_gguf_pair).folder)
    ref = Tokenizer.from_pretrained(tiny_checkpoint)
    assert ours.chat_template == ref.chat_template
    for text in TEXTS + ["<image><fake_token_around_image><global-img><row_1_col_2><end_of_utterance>"]:
        assert ours.encode(text) == ref.encode(text), text
        assert ours.encode(text, allow_special=True) == ref.encode(text, allow_special=True), text
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in 2 images?"}]}]
    assert ours.apply_chat_template(messages) == ref.apply_chat_template(messages)
    for token in ("<image>", "<end_of_utterance>", "<global-img>"):
        assert ours.token_to_id(token) == ref.token_to_id(token) is not None, token


def test_smolvlm_pair_loads_into_smolvlm_model_with_equal_logits(smolvlm_gguf_pair, tiny_checkpoint):
    def logits(model):
        cache = model.create_kv_cache(CacheConfig(kind="contiguous", max_tokens=16))
        ids = torch.tensor([[1, 4093, 42, 1159, 49190, 49279]])
        return model.prefill(model.embed(ids), cache, range(6))

    gguf_model = load_model(smolvlm_gguf_pair, device="cpu", dtype="float32")
    assert type(gguf_model).__name__ == "SmolVlmModel"
    assert torch.equal(logits(gguf_model), logits(load_model(tiny_checkpoint, device="cpu", dtype="float32")))


@pytest.mark.parametrize("outtype", ["f16", "bf16", "q8_0"])
def test_converter_outtypes_round_like_gguf_quantize(outtype, smolvlm_gguf_pair, tiny_checkpoint, convert_to_gguf,
                                                     tmp_path):
    """The text model converted to F16/BF16/Q8_0: every tensor is exactly the original rounded to the
    type the converter chose (Q/K rows are permuted before quantizing, but blocks never straddle rows)."""
    import gguf

    path = tmp_path / f"SmolVLM-tiny-{outtype}.gguf"
    convert_to_gguf(tiny_checkpoint, path, outtype=outtype)
    source = GGUFSource(path, mmproj=next(smolvlm_gguf_pair.glob("mmproj-*.gguf")))
    types = {llama_hf_name(t.name, "model.text_model."): t.tensor_type for t in source.text.reader.tensors}
    assert gguf.GGMLQuantizationType[outtype.upper()] in types.values()
    ref = load_file(tiny_checkpoint / "model.safetensors")
    ours = dict(source.tensors())
    for name, qtype in types.items():
        w = ref[name].numpy()
        expected = gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype).reshape(w.shape)
        assert torch.equal(ours[name], torch.from_numpy(np.asarray(expected, dtype=np.float32))), (name, qtype.name)


def test_tokenizer_files_beside_the_gguf_are_used(smolvlm_gguf_pair, tiny_checkpoint, tmp_path):
    folder = tmp_path / "pair"
    shutil.copytree(smolvlm_gguf_pair, folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.json"):
        shutil.copy(tiny_checkpoint / name, folder / name)
    derived = GGUFSource(folder).folder
    assert (derived / "tokenizer.json").read_bytes() == (tiny_checkpoint / "tokenizer.json").read_bytes()
    assert (derived / "chat_template.json").read_bytes() == (tiny_checkpoint / "chat_template.json").read_bytes()


def test_cli_info_on_gguf_pair(smolvlm_gguf_pair):
    proc = _cli("info", "--json", "--model", str(smolvlm_gguf_pair))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["model_type"] == "idefics3" and info["tensors"] == 59 and info["eos_token_ids"] == [49279]
    assert info["name"] == "SmolVLM-tiny-F32"  # the file's name, not the cache folder's key


# -- every supported tensor type -------------------------------------------------------------------

# 256-wide rows so the K-quants' 256-element super-blocks fit.
_TYPE_OF = {"token_embd": "Q4_K", "output": "Q6_K", "attn_q": "Q5_K", "attn_k": "Q4_0", "attn_v": "Q4_1",
            "attn_output": "Q8_0", "ffn_gate": "BF16", "ffn_up": "F16", "ffn_down": "Q6_K"}
# The fallback types of llama.cpp's K-quant mixes for rows that are not a multiple of 256.
_MORE_TYPES = {"attn_k": "Q5_0", "attn_v": "Q5_1"}


def _write_llama_gguf(path: Path, arch: str = "llama", types: dict[str, str] | None = None, seed: int = 0) -> Path:
    """A one-block llama GGUF (hidden 256, 2 heads of 128, 1 KV head) with random data of ``types``."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    hidden, ffn, vocab = 256, 256, 512
    w.add_block_count(1)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    tokens = [chr(c) for c in range(0x21, 0x7F)] + [f"<t{i}>" for i in range(vocab - 94)]
    w.add_token_list(tokens)
    w.add_token_types([1] * vocab)
    w.add_eos_token_id(0)
    shapes = {"token_embd": (vocab, hidden), "output": (vocab, hidden), "attn_q": (hidden, hidden),
              "attn_k": (128, hidden), "attn_v": (128, hidden), "attn_output": (hidden, hidden),
              "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden), "ffn_down": (hidden, ffn)}
    for part, shape in shapes.items():
        name = f"{part}.weight" if part in ("token_embd", "output") else f"blk.0.{part}.weight"
        qtype = gguf.GGMLQuantizationType[(types or {}).get(part, "F32")]
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, rng.standard_normal(shape, dtype=np.float32))
        else:  # raw blocks; random fp16 scales may be inf/NaN, compared with equal_nan
            raw = rng.integers(0, 256, size=gguf.quant_shape_to_byte_shape(shape, qtype), dtype=np.uint8)
            w.add_tensor(name, raw, raw_dtype=qtype)
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, rng.standard_normal(hidden, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # random inf/NaN scales
@pytest.mark.parametrize("types", [_TYPE_OF, _TYPE_OF | _MORE_TYPES])
def test_every_supported_type_dequantizes_like_transformers(types, tmp_path):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = _write_llama_gguf(tmp_path / "types.gguf", types=types)
    source = GGUFSource(path)
    assert set(_TYPE_OF.values()) | set(_MORE_TYPES.values()) | {"F32"} == set(SUPPORTED_TYPES)
    config = transformers.AutoConfig.from_pretrained(source.folder)
    assert config.tie_word_embeddings is False and config.head_dim == 128
    with torch.device("meta"):
        hf_model = transformers.LlamaForCausalLM(config)
    ref = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=hf_model)["tensors"]
    ours = dict(source.tensors())
    assert set(ours) == set(ref) and "lm_head.weight" in ours
    for name, tensor in ours.items():
        torch.testing.assert_close(tensor, ref[name], rtol=0, atol=0, equal_nan=True, msg=name)


# -- bad input: one line, a ModelLoadError, nothing loaded -----------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], check=False, capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _truncated(tmp_path, smollm2_gguf):
    out = tmp_path / "truncated.gguf"
    with open(smollm2_gguf, "rb") as src:
        out.write_bytes(src.read(smollm2_gguf.stat().st_size // 2))
    return out


def _mamba(tmp_path, _):
    return _write_llama_gguf(tmp_path / "mamba.gguf", arch="mamba")


def _iq2(tmp_path, _):
    return _write_llama_gguf(tmp_path / "iq2.gguf", types={"attn_q": "IQ2_XXS"})


def _mmproj_alone(tmp_path, _, pair=None):
    folder = tmp_path / "projector-only"
    folder.mkdir()
    shutil.copy(next(pair.glob("mmproj-*.gguf")), folder)
    return folder


BAD = {
    "truncated": (_truncated, GGUFFormatError,  # 98362432 bytes whole
                  r"truncated\.gguf: the GGUF file is cut short \(49181216 bytes; its header describes more\): "
                  r"download or copy it again$"),
    "mamba": (_mamba, GGUFArchitectureError,
              r"mamba\.gguf: architecture 'mamba' is not supported \(supported: llama, "),
    "iq2_xxs": (_iq2, GGUFTensorTypeError,
                r"iq2\.gguf: tensor 'blk\.0\.attn_q\.weight' has type IQ2_XXS, which is not supported"),
    "mmproj_alone": (_mmproj_alone, GGUFMissingTextModelError,
                     r"projector-only: holds a vision projector .* but no text model"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_gguf_raises_one_line_and_cli_exits_2(case, tmp_path, request):
    make, error, pattern = BAD[case]
    smollm2_path = request.getfixturevalue("smollm2_gguf") if case == "truncated" else None
    if case == "mmproj_alone":
        path = make(tmp_path, None, request.getfixturevalue("smolvlm_gguf_pair"))
    else:
        path = make(tmp_path, smollm2_path)
    cache = Path(os.environ[CACHE_ENV])
    before = set(cache.iterdir()) if cache.exists() else set()
    with pytest.raises(error, match=pattern) as info:
        resolve_source(path)
    assert isinstance(info.value, ModelLoadError) and "\n" not in str(info.value)
    assert (set(cache.iterdir()) if cache.exists() else set()) == before  # nothing half-written
    proc = _cli("info", "--model", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path.name) in lines[0], proc.stderr
    from engine.validate import check_checkpoint

    report = check_checkpoint(str(path))  # the model manager's check: a file is called a file
    assert report.summary == ("Not a usable model folder." if path.is_dir() else "Not a usable model file.")
    assert len(report.problems) == 1 and re.search(pattern, report.problems[0]), report.problems


@pytest.mark.parametrize(("size", "shortfall"), [(1 << 20, "1048576 bytes; its header describes more"),
                                                (8, "8 bytes; its header describes more"), (0, "0 bytes: it is empty")])
def test_a_gguf_cut_short_says_so_without_numpys_words(smollm2_gguf, tmp_path, size, shortfall):
    """Found by a trial: a GGUF cut to 1 MB or to its 8 first bytes was "not a readable GGUF file, or
    truncated" with numpy's words after it ("When changing to a larger dtype...", "not enough values
    to unpack (expected 2, got 0)"); cut in its metadata or its tensors, it is cut short, said plainly."""
    path = tmp_path / "cut.gguf"
    with open(smollm2_gguf, "rb") as src:
        path.write_bytes(src.read(size))
    with pytest.raises(GGUFFormatError) as info:
        GGUFSource(path)
    assert str(info.value) == f"{path}: the GGUF file is cut short ({shortfall}): download or copy it again"


def test_info_says_the_weights_values_are_not_checked(smollm2_gguf, tmp_path):
    """Found by a trial: a GGUF whose tensor data was overwritten with 0xFF bytes (NaN scales) passed
    with "every tensor's name and shape: all right", and the README said info "checks every file and
    tensor". Reading every value is too costly for big models: the check says what it covers."""
    path = tmp_path / "nan.gguf"
    data_start = GGUFSource(smollm2_gguf).text.reader.data_offset
    with open(smollm2_gguf, "rb") as src:
        path.write_bytes(src.read(data_start) + b"\xff" * (smollm2_gguf.stat().st_size - data_start))
    proc = _cli("info", "--model", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == ("  check         config, tokenizer, processor, every tensor's name and "
                                            "shape, weights files complete: all right (the weights' values are not "
                                            "read)")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert ("info --model DIR_OR_REPO_OR_GGUF [--json]   # also checks config, tokenizer, processor, every tensor's "
            "name and shape, weights files complete (not the weights' values): exit 1 with the problems") in readme


def test_a_file_that_is_no_gguf_is_called_damaged(tmp_path):
    path = tmp_path / "page.gguf"  # what a failed download saves: the server's error page
    path.write_text("<html><body>Not found</body></html>" * 10)
    with pytest.raises(GGUFFormatError) as info:
        GGUFSource(path)
    assert str(info.value) == f"{path}: the file is damaged: not a readable GGUF file (it does not start with GGUF)"


def test_mmproj_file_given_as_the_model(smolvlm_gguf_pair):
    with pytest.raises(GGUFMissingTextModelError, match=r"mmproj-SmolVLM-tiny-F32\.gguf: is a vision projector"):
        GGUFSource(next(smolvlm_gguf_pair.glob("mmproj-*.gguf")))
