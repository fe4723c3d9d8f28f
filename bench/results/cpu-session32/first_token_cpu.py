import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
from engine.chat import ChatSession
from engine.api.events import GenerationParams, TokenEvent
t_imp = time.perf_counter()
s = ChatSession.load(sys.argv[1], device="cpu")
t_load = time.perf_counter()
first = None
t = time.perf_counter()
for e in s.send("What is the capital of France?", params=GenerationParams(max_new_tokens=4, ignore_eos=True)):
    if isinstance(e, TokenEvent) and first is None:
        first = time.perf_counter() - t
print(json.dumps({"tree": sys.argv[2], "load_s": round(t_load - t_imp, 3), "ttft_s": round(first, 3)}))
