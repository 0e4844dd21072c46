import re, sys, collections
text = open(sys.argv[1]).read()
# the xgemm function only
m = re.search(r"\.text\.xgemm:\n(.*?)(?=\n\s*\.section|\Z)", text, re.S)
body = m.group(1) if m else text
lines = body.splitlines()
ins = []   # (addr, opcode, text)
labels = {}
for l in lines:
    lm = re.match(r"\s*\.(L_x_\d+):", l)
    if lm: labels[lm.group(1)] = len(ins); continue
    im = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
    if im:
        t = im.group(2).strip()
        op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0]
        ins.append((int(im.group(1), 16), op, t))
# loops: backward branches
loops = []
for i, (a, op, t) in enumerate(ins):
    if op == "BRA":
        tm = re.search(r"\(\.(L_x_\d+)\)", t)
        if tm and labels.get(tm.group(1), 1e9) <= i:
            loops.append((labels[tm.group(1)], i))
print("instructions", len(ins), "loops", [(s, e, e - s + 1) for s, e in loops])
for s, e in loops:
    c = collections.Counter(op.split(".")[0] for _, op, _ in ins[s:e+1])
    print(f"loop {s}-{e} ({e-s+1} instr, {(e-s+1)*16} bytes):", dict(c.most_common(14)))
    full = collections.Counter(op for _, op, _ in ins[s:e+1] if op.startswith(("LDS", "LDL", "STL", "LDGSTS", "BAR", "DEPBAR")))
    print("   ", dict(full))
