"""Sliding-window perplexity through ``prefill_all_logits`` against transformers' loss on the same windows."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from engine.cache import CacheConfig
from engine.models.smolvlm import SmolVlmModel
from engine.perplexity import perplexity, token_nll, windows
from engine.sources import LocalDirSource
from engine.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

TEXT = ("Speculative decoding drafts tokens cheaply and verifies them with one forward pass. "
        "The quick brown fox jumps over the lazy dog, again and again, while the dog sleeps. ") * 6


def reference_perplexity(ref, ids, context, stride):
    """The transformers guide's loop, with each window's mean loss weighted by its exact scored count."""
    ids = torch.tensor([ids])
    nll_sum, n_tokens = 0.0, 0
    prev_end, n = 0, ids.shape[1]
    for begin in range(0, n, stride):
        end = min(begin + context, n)
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        target = input_ids.clone()
        target[:, :-trg_len] = -100
        with torch.no_grad():
            loss = ref(input_ids=input_ids, labels=target).loss
        scored = int((target[:, 1:] != -100).sum())  # labels shift by one inside the loss
        nll_sum += float(loss) * scored
        n_tokens += scored
        prev_end = end
        if end == n:
            break
    return math.exp(nll_sum / n_tokens), n_tokens


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    ref = transformers.Idefics3ForConditionalGeneration.from_pretrained(
        tiny_checkpoint, dtype=torch.float32, attn_implementation="eager").eval()
    ours = SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)
    ids = Tokenizer.from_pretrained(tiny_checkpoint).encode(TEXT)
    return ref, ours, ids


def test_windows_follow_the_guide():
    assert windows(10, 4, 2) == [(0, 4, 4), (2, 6, 2), (4, 8, 2), (6, 10, 2)]
    assert windows(5, 8, 4) == [(0, 5, 5)]
    assert windows(9, 4, 4) == [(0, 4, 4), (4, 8, 4), (8, 9, 1)]
    with pytest.raises(ValueError):
        windows(10, 4, 5)


@pytest.mark.parametrize("context,stride", [(64, 32), (100, 100), (128, 17), (4096, 512)])
def test_perplexity_equals_transformers(models, context, stride):
    ref, ours, ids = models
    assert len(ids) > 200
    expected, n_tokens = reference_perplexity(ref, ids, context, stride)
    got = perplexity(ours, ids, context, stride, chunk=48)  # chunks smaller than the windows
    # Overlapping windows score every token but the first; disjoint ones also skip each window's first.
    assert got.tokens == n_tokens == len(ids) - (1 if stride < context else got.windows)
    assert abs(got.perplexity - expected) / expected < 1e-4


def test_token_nll_matches_full_logits(models):
    _, ours, ids = models
    ids = ids[:90]
    cache = ours.create_kv_cache(CacheConfig(kind="paged", max_tokens=128))
    logits = ours.prefill_all_logits(ours.embed(torch.tensor([ids])), cache, range(0, 90))
    assert logits.shape == (1, 90, ours.metadata.text.vocab_size) and cache.seq_len == 90
    full = -torch.log_softmax(logits[0, :-1].float(), -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    assert torch.allclose(token_nll(ours, ids, 0, chunk=16), full, atol=1e-4)
    assert torch.allclose(token_nll(ours, ids, 50, chunk=16), full[49:], atol=1e-4)
    with pytest.raises(ValueError, match="pos.start == 0 but cache.seq_len == 90"):
        ours.prefill_all_logits(ours.embed(torch.tensor([ids[:2]])), cache, range(0, 2))


def test_cli_perplexity_json(tiny_checkpoint, tmp_path, models):
    ref, _, ids = models
    f = tmp_path / "text.txt"
    f.write_text(TEXT, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine", "perplexity", "--model", str(tiny_checkpoint),
                           "--file", str(f), "--context", "64", "--stride", "32", "--json", "--device", "cpu",
                           "--dtype", "float32"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    expected, n_tokens = reference_perplexity(ref, ids, 64, 32)
    assert out["tokens"] == n_tokens and abs(out["perplexity"] - expected) / expected < 1e-4


def test_cli_perplexity_of_a_short_text_says_it_measures_little(tiny_checkpoint, tmp_path):
    """Found by a trial: a two-token text printed "over 1 tokens" and a figure that means nothing."""
    f = tmp_path / "short.txt"
    f.write_text("Hello world", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine", "perplexity", "--model", str(tiny_checkpoint),
                           "--file", str(f), "--device", "cpu", "--dtype", "float32"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("nats over 1 token, 1 window)"), proc.stdout
    assert proc.stderr.strip().endswith("note: 1 scored token is too few for a meaningful perplexity; use a "
                                        "longer text"), proc.stderr


@pytest.mark.parametrize("context,stride,why", [
    ("16", "32", "1 <= stride <= context, got context=16, stride=32"),
    ("64", "0", "1 <= stride <= context, got context=64, stride=0"),  # ran with stride 64 (0 read as "not given")
    ("0", None, "need context >= 2"),
    ("100000", None, "context 100000 is longer than the model's context of "),  # ran at the model's context
])
def test_cli_perplexity_bad_windows_exit_2(tiny_checkpoint, tmp_path, context, stride, why):
    f = tmp_path / "text.txt"
    f.write_text(TEXT, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine", "perplexity", "--model", str(tiny_checkpoint),
                           "--file", str(f), "--context", context, *(["--stride", stride] if stride else [])],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and why in proc.stderr, proc.stderr
