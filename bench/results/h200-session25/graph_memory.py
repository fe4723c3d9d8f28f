"""Where a captured step's memory goes (session 25): every CUDA graph capture's allocated memory before,
after its eager warm-up run and after the capture, with the warm-up's and the capture's own peaks, for
a process whose short-prefill step has PREFILL_ROWS rows (32, the engine's, or e.g. 1024 as in
prefill_rows.py), through load (warm-up) and one new 13-tile photo's answer with the long prefill
routed through that step as prefill_rows.py does.

    python graph_memory.py CKPT PHOTO ROWS
"""
import sys
sys.path.insert(0, ".")
import torch
import engine.models.cuda_graph as cg
import engine.models.llama.static_decode as sd
from engine.models.llama import lm as lm_mod

ck, image, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
sd.PREFILL_ROWS = rows
mib = lambda b: b / 2**20
orig_capture = cg.capture
def capture(run, stream, pool):
    torch.cuda.synchronize(); a0 = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
    graph, warm, out = orig_capture(run, stream, pool)
    torch.cuda.synchronize()
    print(f"  capture: allocated {mib(a0):.1f} -> {mib(torch.cuda.memory_allocated()):.1f} MiB "
          f"(+{mib(torch.cuda.memory_allocated() - a0):.1f}), peak during it +{mib(torch.cuda.max_memory_allocated() - a0):.1f}", flush=True)
    return graph, warm, out
cg.capture = capture
sd.capture = capture
if rows > 32:
    orig_prefill = lm_mod.LlamaLM.prefill
    @torch.inference_mode()
    def prefill(self, input, cache, pos):
        static = self._static_decoder()
        if static is not None and static.supports(cache, input) and input.shape[1] > 0:
            return static.prefill(input.to(device=self.device, dtype=self.dtype), cache)
        return orig_prefill(self, input, cache, pos)
    lm_mod.LlamaLM.prefill = prefill
from engine.api import GenerationParams
from engine.service import default_loader
from server.media import DETAILS
print(f"rows {rows}: loading", flush=True)
session = default_loader(ck, {})
st = session.model._static
if st is not None:
    st.rows_triton = False if rows > 32 else st.rows_triton
torch.cuda.synchronize()
print(f"rows {rows}: after load allocated {mib(torch.cuda.memory_allocated()):.1f} MiB, peak {mib(torch.cuda.max_memory_allocated()):.1f}; "
      f"graphs {sorted(str(k[0]) for k in st.graphs)}", flush=True)
torch.cuda.reset_peak_memory_stats()
a0 = torch.cuda.memory_allocated()
params = GenerationParams(max_new_tokens=4, ignore_eos=True, image_detail=DETAILS["high"])
for i in range(2):
    session.reset(); session.system_prompt = f"run {i}"
    list(session.send("Describe this photo.", images=[image], params=params))
    torch.cuda.synchronize()
    print(f"rows {rows}: after photo {i} allocated {mib(torch.cuda.memory_allocated()):.1f} MiB "
          f"(+{mib(torch.cuda.memory_allocated() - a0):.1f} since load), peak since load +{mib(torch.cuda.max_memory_allocated() - a0):.1f}; "
          f"graphs {sorted(str(k[0]) for k in st.graphs)}", flush=True)
