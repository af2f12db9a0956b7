"""CPU per store message: the server's and PostgreSQL's CPU time (/proc/PID/stat) over 8 s of wrk at 8 clients,
divided by the messages answered, for plain appends, App Store notifications and Stripe webhooks (issue 38).
Environment: BENCH_BIN (a release subledger), DATABASE_URL, NAMES (default plain,apple,stripe), PERF=1 to also
record `perf record -g` of the server into .bench/perf-NAME.data."""
import os, sys, time, uuid, subprocess
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as R
R.BIN = os.environ["BENCH_BIN"]
os.makedirs(R.SCRATCH, exist_ok=True)

def cpu_of(pids):
    t = 0
    for p in pids:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            t += int(f[11]) + int(f[12])
        except Exception:
            pass
    return t / os.sysconf("SC_CLK_TCK")

def pg_pids():
    out = subprocess.run(["pgrep", "-u", "postgres"], capture_output=True, text=True).stdout.split()
    return out

NAMES = os.environ.get("NAMES", "plain,apple,stripe").split(",")
url = R.fresh_db("subledger_cpu_stores")
writer, admin = R.key(url, "writer"), R.key(url, "admin")
folder = os.path.join(R.SCRATCH, "storescpu"); os.makedirs(folder, exist_ok=True)
ca = os.path.join(folder, "apple-ca")
R.store_bodies("apple", 1, writer, ca, None)
server = R.Server(url, extra=["--apple-root-cert", os.path.join(ca, "root.der"), "--stripe-webhook-secret", "whsec_bench"])
try:
    R.call(server, "PUT", "/v1/catalog/products/pro.monthly", admin,
           {"entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 999, "currency": "USD", "commission_rate": "0.30"})
    for name in NAMES:
        if name == "plain":
            script, env = "bench.lua", {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": "1", "BENCH_TAG": uuid.uuid4().hex[:8]}
        else:
            bodies = R.store_bodies(name, 15000, writer, ca, None)
            script, env = "bodies.lua", {"BENCH_BODIES": bodies, "BENCH_THREADS": "2"}
        pg = pg_pids()
        s0, p0, t0 = cpu_of([server.proc.pid]), cpu_of(pg), time.time()
        perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(server.proc.pid), "-o", os.path.join(R.SCRATCH, f"perf-{name}.data"), "--", "sleep", "7"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if os.environ.get("PERF") else None
        r = R.wrk(server, script, 8, env, seconds=8)
        if perf: perf.wait()
        s1, p1, t1 = cpu_of([server.proc.pid]), cpu_of(pg_pids()), time.time()
        n = r["requests"]
        print(f"{name}: {r['rps']:.0f}/s  server {1000*(s1-s0)/n:.2f} ms CPU/msg  postgres {1000*(p1-p0)/n:.2f} ms CPU/msg  wall {t1-t0:.1f}s", flush=True)
finally:
    server.close()
