"""Session 31: where the persistent token step's time goes. For each configuration: the token
step's graph replay (CUDA events over 200 replays after a 58-token prompt), and with ``p_trace``
program 0's time after every barrier of one step, as each phase's median over the layers.

    python persistent_probe.py CHECKPOINT OUT.json [CONFIGS_JSON]
"""
import json
import statistics
import sys

import torch

sys.path.insert(0, ".")
from bench.common import load_ours  # noqa: E402
from engine.cache import CacheConfig  # noqa: E402
from engine.models.llama.static_decode import StaticDecoder  # noqa: E402


def phases(st) -> dict:
    """Every program's arrival at and passage of each barrier of the last step (TRACE == 2): per
    phase kind, medians over the layers of the median and slowest program's work (its arrival
    minus its passage of the previous barrier), the spread of arrivals, and how long after the last
    arrival the programs passed (median over programs)."""
    b = st._persistent
    nprog, nl = b["programs"], len(st.layers)
    tr = b["trace"].view(-1, nprog, 2).cpu().double() / 1000  # us
    bars = b["bars"]
    names = ["qkv", "attn", "merge", "o", "gate_up", "down"] if bars == 6 else ["qkv", "attn", "o", "gate_up", "down"]
    out = {n: {"work_med": [], "work_max": [], "arrive_spread": [], "pass_after_last": [], "slowest": []}
           for n in names}
    for layer in range(nl):
        for k, n in enumerate(names):
            j = layer * bars + k + 1
            work = tr[j, :, 0] - tr[j - 1, :, 1]
            last = tr[j, :, 0].max()
            o = out[n]
            o["work_med"].append(work.median().item())
            o["work_max"].append(work.max().item())
            o["arrive_spread"].append((last - tr[j, :, 0].min()).item())
            o["pass_after_last"].append((tr[j, :, 1] - last).median().item())
            o["slowest"].append(int(work.argmax()))
    summary = {n: {k: (round(statistics.median(v), 2) if k != "slowest" else v[:8]) for k, v in o.items()}
               for n, o in out.items()}
    end = nl * bars + 1
    head = tr[end, :, 0] - tr[end - 1, :, 1]
    return {"bars": bars, "phases": summary, "head_work_med": round(head.median().item(), 2),
            "head_work_max": round(head.max().item(), 2),
            "traced_us": round((tr[end, :, 0].max() - tr[0, :, 1].min()).item(), 1),
            "start_spread_us": round((tr[0, :, 1].max() - tr[0, :, 1].min()).item(), 2)}


def main():
    ck, out = sys.argv[1], sys.argv[2]
    configs = json.loads(sys.argv[3]) if len(sys.argv) > 3 else [{}]
    session = load_ours(ck, "cuda", torch.bfloat16)
    m = session.model
    prompt = torch.randint(0, 49000, (1, 58), generator=torch.Generator().manual_seed(0)).to(m.device)
    res = []
    with torch.inference_mode():
        for cfg in configs:
            r = {"config": cfg}
            try:
                m._static = StaticDecoder(m, triton_config=cfg)
                cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=600))
                logits = m.prefill(m.embed(prompt), cache, range(0, 58))
                m.decode_token(logits.argmax(-1).view(1), cache)
                for _ in range(20):
                    m.decode_token(None, cache)
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                times = []
                for _ in range(3):
                    a.record()
                    for _ in range(100):
                        m.decode_token(None, cache)
                    b.record()
                    torch.cuda.synchronize()
                    times.append(a.elapsed_time(b) * 10)  # us a step
                r["step_us"] = statistics.median(times)
                st = m._static.triton
                if st.persistent and cfg.get("p_trace") == 2:
                    r.update(phases(st))
                cache.release()
            except Exception as exc:  # noqa: BLE001
                r["error"] = repr(exc)[:500]
            print(json.dumps(r), flush=True)
            res.append(r)
            m._static = None
            torch.cuda.empty_cache()
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
