"""Top results of a database: python3 .gpu/top.py DB [N [PRECISION]]"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
p = sys.argv[3] if len(sys.argv) > 3 else "%"
print(db.execute("select precision, count(*), sum(status='ok'), round(max(gflops)) from results group by precision").fetchall())
for g, params in db.execute("select round(gflops), params from results where status='ok' and precision like ? order by gflops desc limit ?", (p, n)):
    print(int(g), params.replace('"', '').replace(' ', '').replace(',TRANSPOSEX:16,TRANSPOSEY:16', ''))
