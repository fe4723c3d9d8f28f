"""Session 21: one replay of the 2.2B token step's graph, for ncu (per-kernel DRAM throughput)."""
import sys
sys.path.insert(0, ".")
import torch
from bench.common import load_ours
from engine.cache import CacheConfig
s = load_ours(sys.argv[1], "cuda", torch.bfloat16)
m = s.model
with torch.inference_mode():
    prompt = torch.randint(0, 49000, (1, 58), generator=torch.Generator().manual_seed(0)).cuda()
    cache = m.create_kv_cache(CacheConfig(kind="paged", max_tokens=58 + 256))
    logits = m.prefill(m.embed(prompt), cache, range(0, 58))
    m.decode_token(logits[0].float().argmax().view(1), cache)
    for _ in range(3):
        m.decode_token(None, cache)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    m.decode_token(None, cache)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
print("done")
