"""Run 95 (probe89 on the zig-zag order and run 94's best): hardware counters of the s kernel and of cuBLAS, by CUPTI's PM sampling (device-wide
counters sampled every INTERVAL ns while a workload runs), and cuBLAS's kernel as torch's
profiler sees it (name, grid, block, registers). Workloads: the shipped s default at 4096^3
(transpose pass + xgemm + fixup), variants of it, and torch.matmul (TF32 off). Each is
repeated back to back for about 60 ms; a metric is reported as its sum over the samples inside
the run (first and last sample dropped), and per xgemm launch where that makes sense."""
import json, os, time, warnings
import numpy as np
warnings.simplefilter("ignore")
OUT = os.environ.get("OUT", "/tmp")
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
from cupti import pm_sampling, profiler_host
import cupti.cupti as cc
import pyopencl as cl
from gemmtune.device import open_device
from gemmtune.kernels import GemmOperation
from gemmtune.precision import get_precision
from gemmtune.space import Config, load_space

col = pm_sampling.Collector(device_index=0)
col.enable()
chip = col._chip_name
print("chip", chip, flush=True)
host = profiler_host.ProfilerHost(chip, cc.ProfilerType.PM_SAMPLING)
host.initialize()
with open(os.path.join(OUT, "metrics95.txt"), "w") as f:
    for mt in (cc.MetricType.COUNTER, cc.MetricType.RATIO, cc.MetricType.THROUGHPUT):
        try:
            for m in host.get_base_metrics(mt):
                f.write(f"{mt.name} {m}\n")
        except Exception as e:  # noqa: BLE001
            f.write(f"{mt.name} error {e}\n")
    try:
        for s in profiler_host.get_single_pass_sets(chip):
            f.write(f"SET {s}: {' '.join(profiler_host.get_metrics_in_single_pass_set(chip, s))}\n")
    except Exception as e:  # noqa: BLE001
        f.write(f"SETS error {e}\n")
base = set()
for line in open(os.path.join(OUT, "metrics95.txt")):
    p = line.split()
    if len(p) == 2:
        base.add(p[1])
host.deinitialize()

WANT = [
    "sm__cycles_active.sum", "sm__cycles_elapsed.sum", "smsp__inst_executed.sum", "smsp__issue_active.sum",
    "smsp__inst_executed_pipe_fma.sum", "sm__pipe_fma_cycles_active.sum", "smsp__inst_executed_pipe_lsu.sum",
    "smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "smsp__warps_active.sum", "smsp__warps_issue_stalled_barrier.sum", "smsp__warps_issue_stalled_mio_throttle.sum",
    "smsp__warps_issue_stalled_short_scoreboard.sum", "smsp__warps_issue_stalled_long_scoreboard.sum",
    "smsp__warps_issue_stalled_math_pipe_throttle.sum", "smsp__warps_issue_stalled_not_selected.sum",
    "smsp__warps_issue_stalled_selected.sum", "smsp__warps_issue_stalled_wait.sum",
    "smsp__warps_issue_stalled_dispatch_stall.sum", "smsp__warps_issue_stalled_no_instruction.sum",
    "smsp__warps_issue_stalled_lg_throttle.sum", "smsp__warps_issue_stalled_tex_throttle.sum",
    "smsp__warps_issue_stalled_drain.sum", "smsp__warps_issue_stalled_membar.sum", "smsp__warps_issue_stalled_branch_resolving.sum",
    "smsp__warps_issue_stalled_misc.sum", "smsp__warps_issue_stalled_sleeping.sum", "smsp__warps_issue_stalled_imc_miss.sum",
    "dram__bytes_read.sum", "dram__bytes_write.sum", "gpc__cycles_elapsed.max", "sys__cycles_elapsed.max",
]
STALLS = ["barrier", "mio_throttle", "short_scoreboard", "long_scoreboard", "math_pipe_throttle", "not_selected",
          "selected", "wait", "dispatch_stall", "no_instruction", "lg_throttle", "membar", "branch_resolving", "misc"]
for st in STALLS:
    WANT += [f"smsp__warp_issue_stalled_{st}_per_warp_active.pct", f"smsp__average_warps_issue_stalled_{st}_per_issue_active.ratio",
             f"smsp__warps_issue_stalled_{st}.avg"]
WANT += ["smsp__warps_active.avg", "smsp__average_warps_active_per_issue_active.ratio", "sm__pipe_shared_cycles_active.sum",
         "sm__inst_executed_pipe_lsu_mem_shared_cmd_read.sum", "sm__mio_inst_issued.sum", "smsp__inst_issued.sum",
         "l1tex__data_pipe_lsu_wavefronts.sum", "sm__average_inst_latency_pipe_lsu_mem_shared_cmd_read.ratio",
         "l1tex__data_bank_reads.sum", "l1tex__data_bank_writes.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum", "sm__mio_pq_read_cycles_active_pipe_lsu.sum",
         "smsp__pipe_shared_cycles_active.sum"]
INTERVAL = int(os.environ.get("INTERVAL", "20000"))
HW = 256 << 20
ok = []
for m in WANT:
    if m.rsplit(".", 1)[0] not in base:
        continue
    try:
        col.configure(metrics=[m], sampling_interval=INTERVAL, hardware_buffer_size=HW)
        ok.append(m)
    except Exception:  # noqa: BLE001
        pass
print("samplable:", ok, flush=True)
G, cur = [], []
for m in ok:
    try:
        col.configure(metrics=cur + [m], sampling_interval=INTERVAL, hardware_buffer_size=HW)
        cur.append(m)
    except Exception:  # noqa: BLE001
        G.append(cur); cur = [m]
if cur:
    G.append(cur)
col.disable()
print("groups:", G, flush=True)

info, dev = open_device(0)
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
space = load_space(); fs = space.family("xgemm_rt")
prec = get_precision("s")
S = dict(MWG=128, NWG=128, KWG=8, MDIMC=16, NDIMC=16, VWG=4, VLM=2, VLN=4, PIPE=6, PADL=0, UNROLL=8, WARPM=8, BKFAST=0,
         STAGE=1, MMA=0, STREAMK=2, TRANSPOSEX=32, TRANSPOSEY=8, TRANSPOSEW=4)
VARIANTS = {"rows": {}, "zigzag": {}, "best94": dict(MWG=64, NWG=64, MDIMC=8, NDIMC=8, VLM=4, WARPM=4)}
ZZ = """        const int j = i % 2 ? jj : WPTN - 1 - jj; \\"""
assert ZZ in fs.source
SRCS = {"rows": fs.source.replace(ZZ, """        const int j = jj; \\""")}
N = 4096
rng = np.random.default_rng(0)
ha = rng.standard_normal((N, N)).astype(np.float32); hb = rng.standard_normal((N, N)).astype(np.float32)
mf = cl.mem_flags
a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=ha)
b = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=hb)
c = cl.Buffer(ctx, mf.READ_WRITE, 4 * N * N)
cols = rng.choice(N, 8, replace=False)
ref = hb[cols].astype(np.float64) @ ha.astype(np.float64)
ops = {}
for name, extra in VARIANTS.items():
    op = GemmOperation(q, Config.of("xgemm_rt", {**fs.defaults, **S, **extra}), SRCS.get(name, fs.source), prec, N, N, N)
    out = np.full((N, N), np.nan, np.float32); cl.enqueue_copy(q, c, out)
    op.enqueue(a, b, c)[-1].wait(); cl.enqueue_copy(q, out, c)
    err = float(np.max(np.abs(out[cols] - ref)) / np.max(np.abs(ref)))
    ops[name] = op
    print(f"{name}: err {err:.1e}", flush=True)
ta = torch.randn(N, N, device="cuda"); tb = torch.randn(N, N, device="cuda")
REPS = int(os.environ.get("REPS", "20"))


def run_cl(op):
    def go():
        ev = None
        for _ in range(REPS):
            ev = op.enqueue(a, b, c)
        ev[-1].wait()
        return ev
    return go


def run_torch():
    for _ in range(REPS):
        torch.matmul(tb, ta)
    torch.cuda.synchronize()


work = {"torch": run_torch, **{n: run_cl(op) for n, op in ops.items()}}
for w in work.values():
    w()   # warm
results = {}
for gi, g in enumerate(G):
    col = pm_sampling.Collector(device_index=0)
    col.enable()
    col.configure(metrics=g, sampling_interval=INTERVAL, hardware_buffer_size=HW)
    for name, w in work.items():
        time.sleep(0.02)
        try:
            col.start()
            w()
            col.stop()
            data = col.decode()
            vals = np.array([s_.metric_values for s_ in data], float)
        except Exception as e:  # noqa: BLE001
            print(f"group {gi} {name}: {type(e).__name__} {e}", flush=True)
            continue
        n = len(vals)
        sel = vals[1:-1] if n > 4 else vals
        if "sm__cycles_active.sum" in g:
            busy = sel[:, g.index("sm__cycles_active.sum")]
            sel = sel[busy > 0.5 * busy.max()]
        r = results.setdefault(name, {})
        for i, m in enumerate(g):
            v = sel[:, i]
            r[m] = float(v.sum() if m.endswith(".sum") else v.mean())
        r.setdefault("_samples", []).append(int(len(sel)))
    col.disable()
    print(f"group {gi} done", flush=True)
json.dump(results, open(os.path.join(OUT, "pm95.json"), "w"), indent=1)

# Ratios that answer the questions: wavefronts per shared load, stall shares, pipe use.
def ratio(r, a_, b_):
    return r[a_] / r[b_] if a_ in r and b_ in r and r[b_] else float("nan")
print(f"{'metric':58s}" + "".join(f"{n:>12s}" for n in work))
keys = sorted({k for r in results.values() for k in r if not k.startswith("_")})
for k in keys:
    print(f"{k:58s}" + "".join(f"{results.get(n, {}).get(k, float('nan')):12.4g}" for n in work))
for lab, a_, b_ in [("wavefronts per shared ld", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "smsp__inst_executed_op_shared_ld.sum"),
                    ("wavefronts per shared read inst", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "sm__inst_executed_pipe_lsu_mem_shared_cmd_read.sum"),
                    ("fma inst per shared read inst", "smsp__inst_executed_pipe_fma.sum", "sm__inst_executed_pipe_lsu_mem_shared_cmd_read.sum"),
                    ("fma inst per cycle active (of 4)", "smsp__inst_executed_pipe_fma.sum", "sm__cycles_active.sum"),
                    ("issue active / cycles active", "smsp__issue_active.sum", "sm__cycles_active.sum"),
                    ("shared wavefronts / cycles active", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "sm__cycles_active.sum")]:
    print(f"{lab:58s}" + "".join(f"{ratio(results.get(n, {}), a_, b_):12.4g}" for n in work))

