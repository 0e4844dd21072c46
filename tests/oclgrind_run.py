"""Run GEMM cases on device 0 and report each on stdout: the process tests/test_oclgrind.py
starts under Oclgrind, one per family and precision, since every process pays its start-up.

Reads a JSON list of cases on stdin, each ``{"id", "kernel", "precision", "config", "m", "n",
"k", "ops", "pad", "offsets", "alpha", "beta", "source"?, "batch"?, "shared"?}``; ``batch`` problems
lie one after another in each buffer (a batch's strided form), but for the operands ``shared``
names ("A", "B"), stored once with a batch stride of 0; ``source`` is a kernel file to build
instead of the family's own (a planted fault). Column-major operands, as the kernels see them:
each with ``pad`` extra rows past its own (a leading dimension above the rows) and ``offsets``
elements before it in its buffer, for the families that read views. C is poisoned with NaN
where beta is 0, and so is everything outside the operands' views. Before each case a line
``@@case ID`` goes to stderr, so that what the simulator writes there is charged to the case
that caused it; each case's outcome is one JSON line on stdout.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.characterize

from gemmtune.devices.opencl import open_device
from gemmtune.launch.operation import GemmOperation
from gemmtune.launch.plan import Problem
from gemmtune.precision import get_precision
from gemmtune.space import check_config, make_config, shipped_families
from gemmtune.measure.verify import Reference, compare, random_matrix

MARK = "@@case "


def stored(rows: int, cols: int, op: str) -> tuple[int, int]:
    return (rows, cols) if op == "N" else (cols, rows)


def run(queue: cl.CommandQueue, info, case: dict) -> dict:
    prec = get_precision(case["precision"])
    m, n, k, (ta, tb) = case["m"], case["n"], case["k"], case["ops"]
    alpha, beta, pad, offsets = case["alpha"], case["beta"], case["pad"], case["offsets"]
    batch = case.get("batch", 1)   # problems one after another in each buffer, strided
    shared = case.get("shared", "")   # "A" and/or "B": stored once, a batch stride of 0
    rng = np.random.default_rng([m, n, k, ord(ta), ord(tb)])
    shapes = {"A": stored(m, k, ta), "B": stored(k, n, tb), "C": (m, n)}
    views, whole, bufs, spans = {}, {}, {}, []
    for (name, (rows, cols)), extra, off in zip(shapes.items(), pad, offsets):
        ld = rows + extra
        copies = 1 if name in shared else batch
        spans.append(0 if name in shared else ld * cols)   # the batch stride
        # NaN around the views: a read outside them poisons the result, a write outside them shows
        full = np.full(off + copies * ld * cols + extra, prec.nan, dtype=prec.dtype)
        views[name] = [full[off + z * ld * cols:off + (z + 1) * ld * cols].reshape(cols, ld).T[:rows]
                       for z in range(copies)] * (batch // copies)
        for view in views[name][:copies]:
            view[...] = np.nan if name == "C" and beta == 0 else random_matrix(prec, (rows, cols), rng)
        whole[name] = full
        bufs[name] = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=full)
    expected = [Reference.compute(prec, a, b, None if beta == 0 else c.copy(), alpha, beta, ta, tb)
                for a, b, c in zip(views["A"], views["B"], views["C"])]
    family = shipped_families().family(case["kernel"])
    source = Path(case["source"]).read_text() if case.get("source") else family.source
    problem = Problem(m, n, k, ta, tb, shapes["A"][0] + pad[0], shapes["B"][0] + pad[1], m + pad[2],
                      views=any(offsets), batch=batch, strides=tuple(spans))
    config = make_config(shipped_families(), case["kernel"], case["config"])
    check_config(config, info, prec)   # valid on the simulated device, as a search would have it
    op = GemmOperation(queue, config, source, prec, m, n, k, problem=problem)
    op.enqueue(bufs["A"], bufs["B"], bufs["C"], alpha, beta, offsets=tuple(offsets))[-1].wait()
    out = np.empty_like(whole["C"])
    cl.enqueue_copy(queue, out, bufs["C"])
    outside = out.copy()
    checks = []
    for z, reference in enumerate(expected):
        start = offsets[2] + z * spans[2]
        checks.append(compare(out[start:start + spans[2]].reshape(n, m + pad[2]).T[:m], reference, prec))
        outside[start:start + spans[2]].reshape(n, m + pad[2]).T[:m] = prec.nan
    return {"id": case["id"], "passed": all(c.passed for c in checks),
            "error": max(c.componentwise_error for c in checks),
            "outside_written": int(np.count_nonzero(~np.isnan(outside))),
            "launches": [launch.kernel for launch in op.plan.launches],
            "global_sizes": [list(launch.global_size) for launch in op.plan.launches]}


def main() -> None:
    # pyopencl asks every device for NVIDIA's compute capability whenever it builds a program or
    # makes a kernel, and takes the refusal as "not NVIDIA"; the simulator, checking API calls,
    # reports each refusal. Answered here as it would be, so that every report left is ours.
    pyopencl.characterize.nv_compute_capability = lambda device: None
    cases = json.load(sys.stdin)
    info, device = open_device(0)
    if device.platform.name != "Oclgrind":   # not started by oclgrind: nothing would be checked
        sys.exit(f"device 0 is {device.name!r} of {device.platform.name!r}, not Oclgrind's simulator")
    queue = cl.CommandQueue(cl.Context([device]))
    for case in cases:
        print(MARK + case["id"], file=sys.stderr, flush=True)
        try:
            outcome = run(queue, info, case)
        except Exception as e:   # one case's failure (a build the simulator refuses) is its outcome
            outcome = {"id": case["id"], "exception": f"{type(e).__name__}: {e}",
                       "log": getattr(e, "log", "") or traceback.format_exc()}
        print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
