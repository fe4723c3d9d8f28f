"""The fused Triton decode step (``engine.models.llama.triton_decode``) against the eager decode,
run under the Triton interpreter on the CPU (``TRITON_INTERPRET=1``, float32, tiny model): same
greedy tokens and logits within float32 rounding, for contiguous and paged caches, across a KV
bucket boundary (256) and paged block boundaries (16) with arena growth. Skipped without Triton."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

# triton.jit (and Triton's own jit-decorated library functions such as tl.zeros) read this when they
# decorate, so it must be set before Triton's first import in this process.
_TRITON_PREIMPORTED = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from engine.cache import CacheConfig  # noqa: E402
from engine.models.llama.static_decode import StaticDecoder, triton_wanted  # noqa: E402
from engine.models.llama.triton_decode import WIDE_CONFIG  # noqa: E402
from engine.models.smolvlm import SmolVlmModel  # noqa: E402
from engine.sources import LocalDirSource  # noqa: E402
from tests.engine.test_static_decode import run_greedy  # noqa: E402


@pytest.fixture(scope="module")
def kernels():
    """The kernel module, built in interpreter mode."""
    if _TRITON_PREIMPORTED or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton was imported before TRITON_INTERPRET=1 could be set; run with TRITON_INTERPRET=1")
    name = "engine.models.llama.triton_decode"
    return importlib.reload(sys.modules[name]) if name in sys.modules else importlib.import_module(name)


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return SmolVlmModel.load(LocalDirSource(tiny_checkpoint), torch.device("cpu"), torch.float32)


def greedy(model, ids, n, kind, triton_step, config=None, max_tokens=None):
    """Greedy decode of ``n`` tokens after ``ids``; decode steps run through a StaticDecoder with
    (``triton_step``) or without the Triton kernels, or the ordinary eager path (``None``)."""
    if triton_step is None:
        model.static_decode = False
    else:
        model.static_decode = True
        model._static = StaticDecoder(model, use_graph=False, use_triton=triton_step, triton_config=config)
    try:
        return run_greedy(model, ids, n, kind, max_tokens)
    finally:
        model._static = None
        model.static_decode = None


def token_loop(model, ids, n, **cache):
    """The pipelined greedy loop (``token_stream``, as ChatSession runs it) for ``n`` tokens after
    ``ids``, on a fresh paged cache (``cache``: CacheConfig overrides; 64 tokens by default)."""
    from engine.api.events import GenerationParams
    from engine.generate import token_stream
    from engine.sampling import make_sampler

    kv = model.create_kv_cache(CacheConfig(kind="paged", **{"max_tokens": 64, **cache}))
    logits = model.prefill(model.embed(ids), kv, range(0, ids.shape[1]))
    return list(token_stream(model, kv, make_sampler(GenerationParams()), ids[0].tolist(), logits, n, pipelined=True))


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_triton_step_matches_eager_across_bucket_and_block_boundaries(kernels, model, kind):
    # 246 prompt tokens + 20 decode steps: positions 246..265 cross the 256 bucket boundary
    # (the split-attention grid changes) and the block boundaries at 256 and 256+16.
    ids = torch.randint(0, 49000, (1, 246), generator=torch.Generator().manual_seed(0))
    ref_tokens, ref_logits, ref_cache = greedy(model, ids, 20, kind, None)
    tokens, logits, cache = greedy(model, ids, 20, kind, True)
    assert tokens == ref_tokens
    print(f"{kind}: max |logit diff| {(logits - ref_logits).abs().max().item():.2e}")
    assert (logits - ref_logits).abs().max() < 1e-3
    # The kernels wrote the same keys/values into the cache as the eager path.
    if kind == "contiguous":
        n = ref_cache.seq_len
        assert (cache.k[:, :, :, :n] - ref_cache.k[:, :, :, :n]).abs().max() < 1e-4
        assert (cache.v[:, :, :, :n] - ref_cache.v[:, :, :, :n]).abs().max() < 1e-4


@pytest.mark.parametrize("config", [
    {"attn_min_chunk": 16, "attn_block_t": 16},
    {"attn_min_chunk": 64, "attn_block_t": 16},
    {"attn_min_chunk": 16, "attn_block_t": 16, "early_loads": False},
    {"attn_min_chunk": 16, "attn_block_t": 16, "attn_merge_kernel": False},
    dict(WIDE_CONFIG[1]),
], ids=["chunks of one tile", "chunks of four tiles", "loads after the wait",
        "merged by the last chunk", "a wide decoder's launches (chunks and tiles of 32)"])
@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_triton_step_many_splits_mostly_empty(kernels, model, kind, config):
    """A short sequence in a 256 bucket cut into chunks of 16 (or 64 in four tiles, where the new
    position can sit in a later tile than the one read before the wait; or 32 in one tile, a wide
    decoder's): the chunks past ``pos``
    hold no position and must contribute nothing to the combine; chunks straddle block boundaries."""
    ids = torch.randint(0, 49000, (1, 30), generator=torch.Generator().manual_seed(2))
    ref_tokens, ref_logits, _ = greedy(model, ids, 8, kind, None, max_tokens=400)
    tokens, logits, _ = greedy(model, ids, 8, kind, True, config=config, max_tokens=400)
    assert tokens == ref_tokens
    assert (logits - ref_logits).abs().max() < 1e-3


def test_a_wide_decoder_gets_the_wide_launch_parameters(kernels):
    """From WIDE_CONFIG's width on (SmolVLM2-2.2B's 2048), its overrides replace the defaults tuned on
    the 256M; below it (the 256M's 576, the 500M's 960) the defaults stay."""
    width, wide = kernels.WIDE_CONFIG
    assert width == 2048 and wide
    for hidden in (576, 960, width - 1):
        assert kernels.default_config(hidden) == kernels.DEFAULT_CONFIG
    assert kernels.default_config(width) == {**kernels.DEFAULT_CONFIG, **wide}
    assert all(kernels.DEFAULT_CONFIG[k] != v for k, v in wide.items())


def test_the_step_takes_the_wide_launch_parameters_from_their_width_on(kernels, model, monkeypatch):
    """TritonStep chooses its defaults by the decoder's width: the tiny model is below 2048, so it gets
    the defaults; with WIDE_CONFIG's width set to its own, the overrides; a caller's config wins over both."""
    def launch(config=None):
        return StaticDecoder(model, use_graph=False, use_triton=True, triton_config=config).triton.cfg

    wide = kernels.WIDE_CONFIG[1]
    assert launch() == kernels.DEFAULT_CONFIG
    monkeypatch.setattr(kernels, "WIDE_CONFIG", (model.decoder.config.hidden_size, wide))
    assert launch() == {**kernels.DEFAULT_CONFIG, **wide}
    assert launch({"qkv_block_r": 8})["qkv_block_r"] == 8


def test_triton_step_single_split(kernels, model):
    """A cache of 16 positions is one bucket of one chunk: the kernel writes the output directly
    (no merge kernel runs)."""
    ids = torch.randint(0, 49000, (1, 9), generator=torch.Generator().manual_seed(3))
    ref_tokens, ref_logits, _ = greedy(model, ids, 7, "contiguous", None, max_tokens=16)
    step = StaticDecoder(model, use_graph=False, use_triton=True).triton
    assert step.splits(16)[0] == 1
    tokens, logits, _ = greedy(model, ids, 7, "contiguous", True, max_tokens=16)
    assert tokens == ref_tokens
    assert (logits - ref_logits).abs().max() < 1e-3


@pytest.mark.parametrize("config", [{"fused_head": False}, {}], ids=["argmax kernel", "fused head"])
def test_triton_token_step_gives_greedy_tokens(kernels, model, config):
    """decode_token through the Triton step (embedding, argmax and position advance on the device):
    the eager decode's greedy tokens, across the 256 bucket boundary; with ``fused_head`` the final
    norm, lm_head and argmax run as one kernel."""
    ids = torch.randint(0, 49000, (1, 250), generator=torch.Generator().manual_seed(6))
    ref_tokens, _, _ = greedy(model, ids, 12, "paged", None)
    model.static_decode = True
    model._static = StaticDecoder(model, use_graph=False, use_triton=True, triton_config=config)
    assert model._static.triton.fused_head == config.get("fused_head", True)
    try:
        tokens = token_loop(model, ids, 12, max_tokens=300, num_blocks=4)
        assert tokens == ref_tokens
    finally:
        model._static = None
        model.static_decode = None


@pytest.mark.parametrize("config", [{"fused_head": False}, {}], ids=["argmax kernel", "fused head"])
def test_token_loop_reads_the_token_the_step_stored_on_the_host(kernels, model, config, monkeypatch):
    """Where the token step also stores its token in host memory (``host_reported``, pinned on CUDA;
    a CPU tensor here), the pipelined loop reads it there instead of copying ``reported``: with every
    returned ``reported`` replaced by INVALID_TOKEN (which the copy path raises on), the answer is
    still the eager decode's greedy tokens, so each token came from the right element of the ring."""
    from engine.sampling import INVALID_TOKEN

    ids = torch.randint(0, 49000, (1, 40), generator=torch.Generator().manual_seed(10))
    ref_tokens, _, _ = greedy(model, ids, 12, "paged", None)
    model.static_decode = True
    model._static = StaticDecoder(model, use_graph=False, use_triton=True, triton_config=config)
    model._static.host_reported = torch.full((2,), -7, dtype=torch.long)
    real = type(model).decode_token
    poisoned = torch.tensor([INVALID_TOKEN])
    monkeypatch.setattr(type(model), "decode_token",
                        lambda self, token, cache: (*real(self, token, cache)[:2], poisoned))
    try:
        tokens = token_loop(model, ids, 12)
        assert tokens == ref_tokens
        assert model.token_report_host() is model._static.host_reported
    finally:
        model._static = None
        model.static_decode = None


def test_a_token_step_whose_host_store_fails_keeps_the_fused_step(kernels, model, monkeypatch):
    """A Triton that refuses the pointer to pinned host memory (simulated: the fused tail raises
    while ``host_reported`` is set): the step is retried without the host store, the Triton step
    stays, the loop copies the token, and the answer keeps the eager decode's greedy tokens."""
    from engine.models.llama.triton_decode import TritonStep

    ids = torch.randint(0, 49000, (1, 30), generator=torch.Generator().manual_seed(11))
    ref_tokens, _, _ = greedy(model, ids, 8, "paged", None)
    real = TritonStep.head_argmax
    refused = []

    def head_argmax(self):
        if self.dec.host_reported is not None:
            refused.append(1)
            raise ValueError("Pointer argument (at 11) cannot be accessed from Triton (cpu tensor?)")
        return real(self)

    monkeypatch.setattr(TritonStep, "head_argmax", head_argmax)
    model.static_decode = True
    model._static = StaticDecoder(model, use_graph=False, use_triton=True)
    model._static.use_graph = True  # the fallback runs only where graphs are used
    model._static.host_reported = torch.zeros(2, dtype=torch.long)
    monkeypatch.setattr(StaticDecoder, "_capture", lambda self, key, kv, bucket, step: step(kv, bucket))
    try:
        with pytest.warns(RuntimeWarning, match="retrying without it"):
            tokens = token_loop(model, ids, 8)
        assert tokens == ref_tokens and refused == [1]
        assert model._static.triton is not None and model.token_report_host() is None
    finally:
        model._static = None
        model.static_decode = None


def test_token_step_survives_a_failed_capture(kernels, model, monkeypatch):
    """A Triton step whose graph capture fails after its warm-up run (which already fed its argmax
    back and advanced the position): the step is redone with the PyTorch step from the same input,
    and the answer keeps the eager decode's greedy tokens. Captures are simulated (no CUDA here)."""
    ids = torch.randint(0, 49000, (1, 30), generator=torch.Generator().manual_seed(8))
    ref_tokens, _, _ = greedy(model, ids, 10, "paged", None)
    failures = []

    def capture(self, key, kv, bucket, step):
        out = step(kv, bucket)  # the warm-up run a real capture starts with
        if key[0][0] == "token" and self.triton is not None:
            failures.append(key)
            raise RuntimeError("simulated capture failure")
        return out  # no graph kept: the next call "captures" again

    monkeypatch.setattr(StaticDecoder, "_capture", capture)
    model.static_decode = True
    model._static = StaticDecoder(model, use_graph=False, use_triton=True)
    model._static.use_graph = True
    try:
        with pytest.warns(RuntimeWarning, match="Triton decode step failed"):
            tokens = token_loop(model, ids, 10)
        assert len(failures) == 1 and model._static.triton is None
        assert tokens == ref_tokens
    finally:
        model._static = None
        model.static_decode = None


def test_argmax_kernel_takes_the_first_maximum_and_flags_invalid_logits(kernels):
    """The token step's tail against torch.max: ties (the lower index wins, also across blocks and
    lanes), a NaN or +inf winner (reported invalid), every token masked to -inf (index 0, invalid)."""
    from engine.sampling import INVALID_TOKEN

    v = 10_000  # 3 blocks of 4096, the last one partial
    base = torch.randn(v, generator=torch.Generator().manual_seed(7))
    cases = {"plain": base.clone(), "tie across blocks": base.clone(), "tie in a block": base.clone(),
             "nan": base.clone(), "inf": base.clone(), "all masked": torch.full((v,), float("-inf"))}
    cases["tie across blocks"][[9_000, 100, 5_000]] = 50.0
    cases["tie in a block"][[4_097, 4_096 + 4_095]] = 50.0
    cases["nan"][321] = float("nan")
    cases["inf"][4_444] = float("inf")
    for i, (name, logits) in enumerate(cases.items()):
        token, argmax, reported, pos = (torch.zeros(1, dtype=torch.long) for _ in range(4))
        pos.fill_(41 + i)
        host = torch.full((2,), -7, dtype=torch.long)  # stands in for pinned memory
        kernels.argmax_kernel[(1,)](logits.view(1, v), token, argmax, reported, pos, host, V=v, BLOCK=4096,
                                    INVALID=INVALID_TOKEN, HOST=True, PDL=False)
        best, want = torch.max(logits, 0)
        assert int(token) == int(argmax) == int(want), name
        assert int(reported) == (int(want) if torch.isfinite(best) else INVALID_TOKEN), name
        assert int(pos) == 42 + i
        # The host copy at the step's position modulo 2, the other element untouched.
        assert host[(41 + i) % 2] == reported and host[(42 + i) % 2] == -7, name


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the +inf case, in numpy
def test_head_argmax_kernel_matches_norm_lm_head_and_torch_max(kernels):
    """The fused tail (final RMSNorm, lm_head GEMV, argmax over blocks merged by the last program)
    against F.rms_norm + F.linear and torch.max of its own logits: ties across and within blocks
    (the lower index wins), a NaN or +inf logit (it wins, reported invalid), a partial last block."""
    import torch.nn.functional as F

    from engine.sampling import INVALID_TOKEN

    v, hidden, bn = 1_000, 96, 16  # 63 programs, the last one 8 rows; 96 = 64 + a 32 tail
    g = torch.Generator().manual_seed(9)
    x, nw = torch.randn(hidden, generator=g), torch.rand(hidden, generator=g) + 0.5
    base = torch.randn(v, hidden, generator=g) / 10
    cases = {"plain": base.clone(), "tie across blocks": base.clone(), "tie in a block": base.clone(),
             "nan": base.clone(), "inf": base.clone()}
    for rows in ([900, 17, 500], [34, 37]):
        big = torch.sign(x) * 3.0  # a row far above the others, copied to the tied rows
        cases["tie across blocks" if len(rows) == 3 else "tie in a block"][rows] = big
    cases["nan"][321, 5] = float("nan")
    cases["inf"][999] = torch.sign(x) * 3e38
    programs = triton.cdiv(v, bn)
    for i, (name, w) in enumerate(cases.items()):
        logits = torch.zeros(1, v)
        pm, pi, cnt = torch.zeros(programs), torch.zeros(programs, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
        token, argmax, reported, pos = (torch.zeros(1, dtype=torch.long) for _ in range(4))
        pos.fill_(41 + i)
        host = torch.full((2,), -7, dtype=torch.long)
        km, kt = kernels.split_k(hidden)
        kernels.head_argmax_kernel[(programs,)](
            x, nw, w, w, logits, pm, pi, cnt, token, argmax, reported, pos, host, 1e-5, V=v, HIDDEN=hidden, KM=km,
            KT=kt, BLOCK_N=bn, P=programs, PP=triton.next_power_of_2(programs), INVALID=INVALID_TOKEN, HOST=True,
            SCALED=False, PDL=False)
        ref = F.linear(F.rms_norm(x, (hidden,), nw, 1e-5), w)
        finite = torch.isfinite(ref)
        assert torch.equal(finite, torch.isfinite(logits[0])), name
        torch.testing.assert_close(logits[0][finite], ref[finite], rtol=1e-5, atol=1e-5, msg=name)
        best, want = torch.max(logits[0], 0)
        assert int(token) == int(argmax) == int(want), name
        assert int(reported) == (int(want) if torch.isfinite(best) else INVALID_TOKEN), name
        assert int(pos) == 42 + i and int(cnt) == 0, name
        assert host[(41 + i) % 2] == reported and host[(42 + i) % 2] == -7, name
    assert int(want) == 999  # the +inf row won the last case


def test_split_sizes(kernels, model):
    step = StaticDecoder(model, use_graph=False, use_triton=True).triton
    for bucket in (1, 7, 256, 300, 512, 8192):
        n, chunk = step.splits(bucket)
        assert n * chunk >= bucket and (n - 1) * chunk < bucket
        assert n <= step.cfg["attn_max_splits"] and chunk % step.cfg["attn_block_t"] == 0
    # Chunks of 16 (one tile) up to the 512 bucket, then 32 chunks of growing length.
    assert [step.splits(b) for b in (256, 512, 1024, 2048)] == [(16, 16), (32, 16), (32, 32), (32, 64)]


def test_triton_is_off_on_cpu_and_by_env(monkeypatch):
    assert not triton_wanted(torch.device("cpu"))
    monkeypatch.setenv("SMOLCHAT_TRITON", "0")
    assert not triton_wanted(torch.device("cuda"))


@pytest.fixture(scope="module")
def wide_head_checkpoint(tmp_path_factory):
    """A 2-layer text-only Llama (SmolLM2's files) with head_dim 32, float32: the short-prefill
    kernels tile half a head in 16 columns (``tl.dot``'s least), which the tiny model's 16 is not."""
    import json
    import shutil

    from tests.engine.conftest import _llama_config_dir
    from tools.make_checkpoint import write_checkpoint

    src = _llama_config_dir()
    cfg_dir = tmp_path_factory.mktemp("wide-head-config")
    for f in src.iterdir():
        if f.is_file() and f.suffix in (".json", ".jinja"):
            shutil.copy(f, cfg_dir / f.name)
    config = json.loads((src / "config.json").read_text())
    config.update(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, head_dim=32)
    (cfg_dir / "config.json").write_text(json.dumps(config))
    out = tmp_path_factory.mktemp("wide-head")
    write_checkpoint(cfg_dir, out, dtype="float32", seed=4)
    return out


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
@pytest.mark.parametrize("past,follow_up,room,config", [
    (240, 1, 64, None), (240, 20, 64, None), (240, 45, 64, None), (8, 12, 0, None), (240, 20, 64, "wide")])
def test_triton_short_prefill_matches_eager(kernels, wide_head_checkpoint, kind, past, follow_up, room, config):
    """The Triton short-prefill step (its rows; padded rows repeat the last) against the eager
    prefill: the last position's logits, and the cache it leaves (read back by a decode step). After
    240 tokens: across the 256 bucket and paged block boundaries, in one chunk (1, 20) and two (45),
    its attention split in 10 chunks and merged; after 8, a 20-slot cache: one chunk, no merge.
    ``wide``: a wide decoder's launch parameters (WIDE_CONFIG) on the same shapes."""
    from engine.models.llama.static_decode import PREFILL_ROWS
    from engine.registry import load_model

    model = load_model(wide_head_checkpoint, device="cpu", dtype="float32")
    ids = torch.randint(0, 49000, (1, past + follow_up), generator=torch.Generator().manual_seed(6))
    results = []
    for static in (False, True):
        model.static_decode = static
        launch = kernels.WIDE_CONFIG[1] if config == "wide" else None
        model._static = StaticDecoder(model, use_graph=False, use_triton=True, triton_config=launch) if static else None
        calls = []
        if static:
            assert model._static.triton.rows_supported()
            rows = model._static.triton.rows
            model._static.triton.rows = lambda kv, bucket: calls.append(bucket) or rows(kv, bucket)
        cache = model.create_kv_cache(CacheConfig(kind=kind, max_tokens=past + follow_up + room, block_size=16))
        model.prefill(model.embed(ids[:, :past]), cache, range(0, past))
        logits = model.prefill(model.embed(ids[:, past:]), cache, range(past, past + follow_up))
        assert len(calls) == (-(-follow_up // PREFILL_ROWS) if static else 0)
        if room:
            after = model.decode(model.embed(ids[:, :1]), cache)  # reads every cached position
        else:  # a full cache: compare what it holds
            after = cache.k[:, :, :, :cache.seq_len] if kind == "contiguous" else cache.kv.clone()
        results.append((logits, after))
    model.static_decode, model._static = None, None
    print(f"{kind} {follow_up}: max |logit diff| {(results[1][0] - results[0][0]).abs().max().item():.2e}")
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def int8_model(model):
    """The tiny model with its text projections and lm_head as int8 weights (per-row scales); its
    eager decode without the native CPU step (whose int8 dot products quantize the activations)."""
    from engine.layers.linear import quantize_weights

    q = quantize_weights(model, "int8")
    q._native = False
    return q


@pytest.fixture
def dequantized_eager(monkeypatch):
    """Eager int8 linears multiply by their dequantized float32 weights for any number of rows (not
    ``_weight_int8pack_mm``'s bfloat16 activations below ``DEQUANT_ROWS``): the reference the
    kernels' int8 rows times the row's scale should meet within float32 rounding."""
    from engine.layers.linear import Int8Linear

    monkeypatch.setattr(Int8Linear, "DEQUANT_ROWS", 0)


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_int8_triton_step_matches_its_dequantized_weights(kernels, model, int8_model, dequantized_eager, kind):
    """The decode kernels reading int8 weights and their scales (CUDA's int8 path) against the eager
    decode of the same weights dequantized to float32: the same tokens and logits within float32
    rounding."""
    step = StaticDecoder(int8_model, use_graph=False, use_triton=True).triton
    assert all(scaled for layer in step.layers for _, _, scaled in layer[1:3] + layer[4:])
    ids = torch.randint(0, 49000, (1, 30), generator=torch.Generator().manual_seed(12))
    ref_tokens, ref_logits, _ = greedy(int8_model, ids, 12, kind, None)
    tokens, logits, _ = greedy(int8_model, ids, 12, kind, True)
    assert tokens == ref_tokens
    print(f"int8 {kind}: max |logit diff| {(logits - ref_logits).abs().max().item():.2e}")
    assert (logits - ref_logits).abs().max() < 1e-3
    # The float weights' logits are further off: what matched is the int8 weights' product.
    _, float_logits, _ = greedy(model, ids, 12, kind, None)
    assert (float_logits - ref_logits).abs().max() > 1e-2


# The fused head in programs of 256 rows: the interpreter runs each program in turn (16 rows took 2 min).
@pytest.mark.parametrize("config", [{"fused_head": False}, {"head_block_n": 256}], ids=["argmax kernel", "fused head"])
def test_int8_token_step_gives_the_dequantized_greedy_tokens(kernels, int8_model, dequantized_eager, config):
    """decode_token through the Triton step with int8 weights, the fused tail (final norm, int8
    lm_head, argmax in one kernel) included: the greedy tokens of the dequantized weights."""
    ids = torch.randint(0, 49000, (1, 40), generator=torch.Generator().manual_seed(13))
    ref_tokens, _, _ = greedy(int8_model, ids, 12, "paged", None)
    int8_model.static_decode = True
    int8_model._static = StaticDecoder(int8_model, use_graph=False, use_triton=True, triton_config=config)
    assert int8_model._static.triton.fused_head == config.get("fused_head", True)
    try:
        assert token_loop(int8_model, ids, 12) == ref_tokens
    finally:
        int8_model._static = None
        int8_model.static_decode = None


@pytest.mark.parametrize("kind", ["contiguous", "paged"])
def test_int8_short_prefill_matches_its_dequantized_weights(kernels, wide_head_checkpoint, dequantized_eager, kind):
    """The short-prefill kernels (``tl.dot`` over the rows) with int8 weights widened to the
    activation dtype and scaled per output column: a 20-token follow-up after 240 gives the logits
    and cache of the dequantized weights' eager prefill."""
    from engine.layers.linear import quantize_weights
    from engine.registry import load_model

    q = quantize_weights(load_model(wide_head_checkpoint, device="cpu", dtype="float32"), "int8")
    q._native = False  # its int8 dot products quantize the activations
    ids = torch.randint(0, 49000, (1, 260), generator=torch.Generator().manual_seed(14))
    results = []
    for static in (False, True):
        q.static_decode = static
        q._static = StaticDecoder(q, use_graph=False, use_triton=True) if static else None
        calls = []
        if static:
            rows = q._static.triton.rows
            q._static.triton.rows = lambda kv, bucket: calls.append(bucket) or rows(kv, bucket)
        cache = q.create_kv_cache(CacheConfig(kind=kind, max_tokens=324, block_size=16))
        q.prefill(q.embed(ids[:, :240]), cache, range(0, 240))
        logits = q.prefill(q.embed(ids[:, 240:]), cache, range(240, 260))
        assert len(calls) == (1 if static else 0)
        results.append((logits, q.decode(q.embed(ids[:, :1]), cache)))
    q.static_decode, q._static = None, None
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-4, atol=1e-4)
