"""Session 21 probe (issue 17): where the pipelined greedy loop's time per token goes beyond the
token step's replay, and what a zero-copy report and k steps per graph would give.

    python .device-in/loop_probe.py CHECKPOINT OUT.json

All on one cache after a 58-token prompt, bucket 256 (positions stay below it). Timings are CUDA
events over N iterations (no host sync inside) unless said otherwise."""

import json
import statistics
import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench.common import load_ours  # noqa: E402
from engine.api.events import GenerationParams  # noqa: E402
from engine.cache import CacheConfig  # noqa: E402
from engine.generate import token_stream  # noqa: E402
from engine.sampling import make_sampler  # noqa: E402


@triton.jit
def put_kernel(src_ptr, dst_ptr, pos_ptr, RING: tl.constexpr):
    p = tl.load(pos_ptr)
    tl.store(dst_ptr + (p % RING), tl.load(src_ptr))


def main():
    ck, out = sys.argv[1], sys.argv[2]
    res = {}
    s = load_ours(ck, "cuda", torch.bfloat16)
    m = s.model
    # 1. Can a Triton kernel store into pinned host memory, eagerly and inside a CUDA graph?
    host = torch.zeros(8, dtype=torch.long, pin_memory=True)
    src = torch.tensor([1234], device="cuda")
    posd = torch.tensor([3], device="cuda")
    try:
        put_kernel[(1,)](src, host, posd, RING=2)
        torch.cuda.synchronize()
        res["zero_copy_eager"] = host.tolist()
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            g.capture_begin()
            put_kernel[(1,)](src, host, posd, RING=2)
            g.capture_end()
        torch.cuda.current_stream().wait_stream(side)
        src.fill_(99)
        posd.fill_(4)
        g.replay()
        torch.cuda.synchronize()
        res["zero_copy_graph"] = host.tolist()
    except Exception as exc:  # noqa: BLE001
        res["zero_copy_error"] = repr(exc)[:800]
    print(json.dumps(res), flush=True)

    with torch.inference_mode():
        prompt = torch.randint(0, 49000, (1, 58), generator=torch.Generator().manual_seed(0)).cuda()
        cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=58 + 4096))
        logits = m.prefill(m.embed(prompt), cache, range(0, 58))
        tok = logits[0].float().argmax().view(1)
        m.decode_token(tok, cache)
        for _ in range(3):
            m.decode_token(None, cache)
        st = m._static
        key = [k for k in st.graphs if k[0][0] == "token"][-1]
        graph, (lg, am, rep) = st.graphs[key]
        bucket = key[0][1]
        start = cache.seq_len
        res["bucket"], res["start"] = bucket, start
        pinned = torch.empty(1, dtype=torch.long, pin_memory=True)
        ev = torch.cuda.Event()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        N = 150

        def timed(fn, n=N, per=1):
            st.pos.fill_(start)
            for _ in range(4):
                fn()
            torch.cuda.synchronize()
            st.pos.fill_(start)
            e0.record()
            for _ in range(n // per):
                fn()
            e1.record()
            e1.synchronize()
            return round(e0.elapsed_time(e1) / (n // per * per) * 1e3, 1)

        def a():
            graph.replay()

        def b():
            graph.replay()
            pinned.copy_(rep, non_blocking=True)

        def c():
            graph.replay()
            ev.record()

        def d():
            graph.replay()
            pinned.copy_(rep, non_blocking=True)
            ev.record()

        def d_sync():  # not pipelined: the host waits for each token
            graph.replay()
            pinned.copy_(rep, non_blocking=True)
            ev.record()
            ev.synchronize()
            int(pinned[0])

        rounds = {}
        for r in range(3):
            for name, fn in (("replay", a), ("replay+copy", b), ("replay+event", c), ("replay+copy+event", d),
                             ("replay+copy+event+sync", d_sync)):
                rounds.setdefault(name, []).append(timed(fn))
        res["us_per_token"] = {k: [statistics.median(v), v] for k, v in rounds.items()}
        print(json.dumps(res["us_per_token"]), flush=True)

        # Host cost of decode_token(None) alone (launch side; the GPU queue absorbs 150 replays).
        torch.cuda.synchronize()
        m.decode_token(None, cache)  # follows
        t0 = time.perf_counter()
        for _ in range(100):
            m.decode_token(None, cache)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        res["decode_token_host_us"] = round((t1 - t0) / 100 * 1e6, 1)

        # 2. k token steps (+ a zero-copy put each) in one graph, pipelined with host reads.
        kv = (cache.kv,)
        ring = torch.zeros(64, dtype=torch.long, pin_memory=True)

        def capture(k, put):
            side = st.capture_stream
            st.pos.fill_(start)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(k):
                    st._token_step(kv, bucket)
                    if put:
                        put_kernel[(1,)](st.reported, ring, st.pos, RING=64)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side):
                g.capture_begin(pool=st.pool)
                for _ in range(k):
                    st._token_step(kv, bucket)
                    if put:
                        put_kernel[(1,)](st.reported, ring, st.pos, RING=64)
                g.capture_end()
            torch.cuda.synchronize()
            return g

        def host_loop(g, k, put, n=144):
            """Pipelined: launch graph j, then wait for graph j-1's tokens; returns us per token (wall)."""
            st.pos.fill_(start)
            evs = [torch.cuda.Event(), torch.cuda.Event()]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = []
            for j in range(n // k):
                if not put:
                    pass
                g.replay()
                if not put:
                    pinned.copy_(st.reported, non_blocking=True)
                evs[j % 2].record()
                if j:
                    evs[(j - 1) % 2].synchronize()
                    if put:
                        base = start + (j - 1) * k + 1
                        got.extend(int(ring[(base + i) % 64]) for i in range(k))
                    else:
                        got.append(int(pinned[0]))
            evs[(n // k - 1) % 2].synchronize()
            t1 = time.perf_counter()
            return round((t1 - t0) / (n // k * k) * 1e6, 1)

        multi = {}
        for k in (1, 2, 4, 8):
            for put in (False, True):
                try:
                    g = capture(k, put)
                    ev_us = [timed(g.replay, n=144, per=k) for _ in range(3)]
                    loop_us = [host_loop(g, k, put) for _ in range(3)]
                    multi[f"k{k}{'-put' if put else ''}"] = {"replay_us_per_token": ev_us, "loop_us_per_token": loop_us}
                    print(k, put, ev_us, loop_us, flush=True)
                    del g
                except Exception as exc:  # noqa: BLE001
                    multi[f"k{k}{'-put' if put else ''}"] = {"error": repr(exc)[:500]}
                    print(k, put, repr(exc)[:300], flush=True)
        res["multi_step"] = multi
        cache.release()

        # 3. The shipped loop (token_stream, pipelined), 144 tokens after the same prompt.
        rates = []
        for _ in range(4):
            c2 = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=58 + 200))
            lg2 = m.prefill(m.embed(prompt), c2, range(0, 58))
            stamps = []
            for _t in token_stream(m, c2, make_sampler(GenerationParams()), prompt[0].tolist(), lg2, 145,
                                   pipelined=True):
                stamps.append(time.perf_counter())
            c2.release()
            gaps = [(b - a) * 1e6 for a, b in zip(stamps, stamps[1:])]
            rates.append({"us_per_token": round((stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e6, 1),
                          "p10": round(sorted(gaps)[len(gaps) // 10], 1), "p50": round(statistics.median(gaps), 1),
                          "p90": round(sorted(gaps)[len(gaps) * 9 // 10], 1), "max": round(max(gaps), 1)})
        res["token_stream"] = rates
        print(json.dumps(rates), flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
