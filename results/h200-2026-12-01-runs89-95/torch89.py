import json, os, torch
OUT = os.environ.get("OUT", "/tmp")
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
N = 4096
ta = torch.randn(N, N, device="cuda"); tb = torch.randn(N, N, device="cuda")
torch.matmul(tb, ta); torch.cuda.synchronize()
# cuBLAS's kernel as torch's profiler sees it.
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        torch.matmul(tb, ta)
    torch.cuda.synchronize()
prof.export_chrome_trace(os.path.join(OUT, "torch89.json"))
for e in json.load(open(os.path.join(OUT, "torch89.json")))["traceEvents"]:
    if e.get("cat") == "kernel":
        print("cublas:", e["name"][:150], e["dur"], "us", {k: v for k, v in e.get("args", {}).items()
              if k in ("grid", "block", "registers per thread", "shared memory", "est. achieved occupancy %", "blocks per SM", "warps per SM")})
