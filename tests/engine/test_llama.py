"""The text-only Llama architecture (model_type ``llama``, SmolLM2-135M-Instruct's config and
tokenizer) against transformers' ``LlamaForCausalLM`` on the same random weights, and through the
whole runtime: registry, ChatSession, CLI, validation.

Tolerances: all-position logits 1e-4 (fp32); greedy continuations identical token for token.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from engine.api.errors import EngineError, UnsupportedModelError, UnsupportedOperation
from engine.api.events import DoneEvent, GenerationParams
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.models.llama import LlamaModel
from engine.registry import load_components, parse_metadata, read_metadata, supported_model_types
from engine.sources import LocalDirSource
from engine.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Name a color."}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Count to five, please."}],
]


def load_pair(folder):
    ref = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    return ref, LlamaModel.load(LocalDirSource(folder), torch.device("cpu"), torch.float32)


def greedy(model, ids, n, cache_kind):
    cache = model.create_kv_cache(CacheConfig(kind=cache_kind, max_tokens=ids.shape[1] + n + 8))
    logits = model.prefill(model.embed(ids), cache, range(0, ids.shape[1]))
    out = [int(logits.argmax(-1))]
    for _ in range(n - 1):
        out.append(int(model.decode(model.embed(torch.tensor([[out[-1]]])), cache).argmax(-1)))
    return out


def assert_parity(ref, ours, tokenizer, chat, n, cache_kinds=("paged", "contiguous")):
    """Through each cache: greedy tokens identical for ``n`` tokens, every position's logits within 1e-4
    (transformers runs once per prompt: at the real shape its generate is most of the time)."""
    ids = torch.tensor([tokenizer.encode_chat(chat, add_generation_prompt=True).input_ids])
    with torch.no_grad():
        ref_logits = ref(input_ids=ids).logits
        gen = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False)
    for cache_kind in cache_kinds:
        cache = ours.create_kv_cache(CacheConfig(kind=cache_kind, max_tokens=ids.shape[1]))
        logits = ours.prefill_all_logits(ours.embed(ids), cache, range(0, ids.shape[1]))
        assert logits.shape == ref_logits.shape
        assert (logits - ref_logits).abs().max() < 1e-4, cache_kind
        assert greedy(ours, ids, n, cache_kind) == gen[0, ids.shape[1]:].tolist(), cache_kind


@pytest.fixture(scope="module")
def pair(llama_tiny_checkpoint):
    return load_pair(llama_tiny_checkpoint)


@pytest.fixture(scope="module")
def tokenizer(llama_tiny_checkpoint):
    return Tokenizer.from_pretrained(llama_tiny_checkpoint)


# -- registry, metadata, checkpoint --------------------------------------------------------------

def test_registry_lists_llama_and_names_every_supported_type():
    assert "llama" in supported_model_types()
    with pytest.raises(UnsupportedModelError) as err:
        parse_metadata({"model_type": "mamba"})
    for model_type in supported_model_types():
        assert repr(model_type) in str(err.value) or model_type in str(err.value)


def test_tiny_checkpoint_metadata_and_tied_head(llama_tiny_checkpoint):
    meta = read_metadata(llama_tiny_checkpoint)
    assert meta.model_type == "llama" and meta.text.num_hidden_layers == 2 and meta.text.vocab_size == 49152
    assert meta.image_token_id is None and not meta.takes_images
    assert meta.eos_token_ids == (2,)  # generation_config.json: <|im_end|>
    assert meta.tie_word_embeddings and meta.text.rope_theta == 100000.0
    names = LocalDirSource(llama_tiny_checkpoint).tensor_names()
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names  # tied, as HF stores it
    model = LlamaModel.load(LocalDirSource(llama_tiny_checkpoint), torch.device("cpu"), torch.float32)
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_check_checkpoint_is_ok_without_a_processor(llama_tiny_checkpoint):
    from engine.validate import check_checkpoint

    report = check_checkpoint(str(llama_tiny_checkpoint))
    assert report.ok, report.problems
    assert "vision" not in report.info and report.info["capabilities"]["vision"] is False
    _, tokenizer, processor = load_components(llama_tiny_checkpoint, device="cpu")
    assert processor is None


# -- parity with transformers ---------------------------------------------------------------------

@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_tiny_greedy_32_tokens_and_all_logits_match_transformers(pair, tokenizer, chat):
    assert_parity(*pair, tokenizer, CHATS[chat], 32)


@pytest.mark.slow
def test_real_shape_greedy_and_all_logits_match_transformers(llama_real_checkpoint):
    """SmolLM2-135M's real shape (30 layers, 9/3 heads, tied embeddings), random fp32 weights."""
    ref, ours = load_pair(llama_real_checkpoint)
    tokenizer = Tokenizer.from_pretrained(llama_real_checkpoint)
    assert_parity(ref, ours, tokenizer, CHATS[2], 32)


def test_text_only_model_rejects_images(pair):
    _, ours = pair
    caps = ours.capabilities()
    assert caps.vision is False and caps.video is False and caps.embeddings and caps.speculative
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(UnsupportedOperation, match="text-only model: it takes no images"):
        ours.embed_multimodal(ids, [torch.zeros(1, 3, 512, 512)])
    assert torch.equal(ours.embed_multimodal(ids, []), ours.embed(ids))


# -- ChatSession ----------------------------------------------------------------------------------

def run(session, text, n=8, images=()):
    events = list(session.send(text, images=images, params=GenerationParams(max_new_tokens=n, ignore_eos=True)))
    assert isinstance(events[-1], DoneEvent) and events[-1].finish_reason == "length", events[-1]
    return [e.token_id for e in events[:-1] if e.token_id >= 0], events[-1]


def test_chat_session_multi_turn_reuses_cache_and_regenerates(llama_tiny_checkpoint, pair):
    session = ChatSession.load(str(llama_tiny_checkpoint), device="cpu", dtype="float32")
    assert session.processor is None
    first, done1 = run(session, "Hi")
    assert done1.stats.cached_tokens == 0
    second, done2 = run(session, "Tell me more.")
    assert 0 < done2.stats.cached_tokens < done2.stats.prompt_tokens
    # The second answer, prefilled on top of the cached first turn, equals transformers' greedy answer
    # to the whole prompt from scratch (the cache's keys are the prompt's ids: no images).
    ref, _ = pair
    ids = torch.tensor([session._cached_keys[:done2.stats.prompt_tokens]])
    with torch.no_grad():
        gen = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                           min_new_tokens=8, do_sample=False)
    assert second == gen[0, ids.shape[1]:].tolist()
    events = list(session.regenerate(GenerationParams(max_new_tokens=8, ignore_eos=True)))
    assert events[-1].stats.cached_tokens == events[-1].stats.prompt_tokens - 1
    assert [e.token_id for e in events[:-1] if e.token_id >= 0] == second  # greedy: the same answer


def test_chat_session_refuses_images_before_any_work(llama_tiny_checkpoint, images_dir):
    session = ChatSession.load(str(llama_tiny_checkpoint), device="cpu")
    run(session, "Hi", n=2)
    turns, cached = list(session.turns), session.cache.seq_len
    with pytest.raises(UnsupportedOperation, match="text-only model") as err:
        session.send("What is this?", images=[images_dir / "coffee.png"])
    assert isinstance(err.value, EngineError)
    assert session.turns == turns and session.cache.seq_len == cached


def test_chat_session_stops_on_im_end(llama_tiny_checkpoint, monkeypatch):
    """generation_config.json's eos_token_id (<|im_end|>, 2) stops the answer and is never streamed."""
    session = ChatSession.load(str(llama_tiny_checkpoint), device="cpu")
    original = session.model.decode

    def decode_then_im_end(x, cache):
        logits = original(x, cache).clone()
        logits[:, 2] = 1e4
        return logits

    monkeypatch.setattr(session.model, "decode", decode_then_im_end)
    events = list(session.send("Hi", params=GenerationParams(max_new_tokens=10, speculative=False)))
    assert events[-1].finish_reason == "stop" and events[-1].stats.generated_tokens == 1
    assert all(e.token_id != 2 and "<|im_end|>" not in e.text for e in events[:-1])


# -- CLI --------------------------------------------------------------------------------------------

def cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_cli_generate_and_image_refusal(llama_tiny_checkpoint, images_dir):
    proc = cli("generate", "--model", llama_tiny_checkpoint, "--prompt", "Hi", "--max-new-tokens", 4,
               "--ignore-eos", "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "done" and lines[-1]["generated_tokens"] == 4
    proc = cli("generate", "--model", llama_tiny_checkpoint, "--image", images_dir / "coffee.png",
               "--prompt", "What is this?")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "text-only model" in proc.stderr


def test_cli_info_embed_perplexity(llama_tiny_checkpoint, tmp_path):
    proc = cli("info", "--model", llama_tiny_checkpoint, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["model_type"] == "llama" and info["capabilities"]["vision"] is False
    assert "vision" not in info and info["eos_token_ids"] == [2]
    proc = cli("info", "--model", llama_tiny_checkpoint)
    assert proc.returncode == 0 and "tokens per tile" not in proc.stdout  # no vision section
    assert "vision               no" in proc.stdout
    proc = cli("embed", "--model", llama_tiny_checkpoint, "--text", "a red bicycle", "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    vec = json.loads(proc.stdout)
    assert vec["dim"] == 64 and abs(sum(x * x for x in vec["embedding"]) - 1) < 1e-4
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 8, encoding="utf-8")
    proc = cli("perplexity", "--model", llama_tiny_checkpoint, "--file", text, "--context", 32, "--json",
               "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["perplexity"] > 1
