#!/usr/bin/env python3
"""Issue 19's measurements, side by side in one run (driven by tools/bench-scaling): entitlement reads with one
and two instances (nginx round-robin) and with a read replica, with and without the entitlement cache; appends on
the primary with its synchronous standby (the write ceiling of one primary) through one and two instances; and
where the CPU went. Writes tools/bench.d/scaling.md and the section between the scaling markers of BENCHMARKS.md.

Environment: BENCH_BIN (subledger), BENCH_URL (multi-host primary URL), BENCH_REPLICA (the standby's URL),
BENCH_NODE_DIRS (data folders of the two nodes, comma-separated), BENCH_SUBSCRIBERS (simulated subscribers,
imported by tools/bench-scaling), RUNS (3), SECONDS_PER_RUN (5), BENCH_CONNECTIONS (wrk connections, 32)."""
import json, os, re, socket, statistics, subprocess, sys, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN, URL, REPLICA = os.environ["BENCH_BIN"], os.environ["BENCH_URL"], os.environ["BENCH_REPLICA"]
NODE_DIRS = os.environ["BENCH_NODE_DIRS"].split(",")
SUBSCRIBERS = int(os.environ.get("BENCH_SUBSCRIBERS", "10000"))
RUNS, SECONDS = int(os.environ.get("RUNS", "3")), int(os.environ.get("SECONDS_PER_RUN", "5"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "32"))
READER, WRITER = os.environ["BENCH_READER"], os.environ["BENCH_WRITER"]
LUA = os.path.join(ROOT, "tools", "bench.d", "bench.lua")
SCRATCH = os.path.join(ROOT, ".bench", "scaling")
os.makedirs(SCRATCH, exist_ok=True)


def say(*m):
    print("bench-scaling:", *m, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def get(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r: return r.status, r.read().decode()
    except Exception:
        return None, ""


def cpu_seconds(pids, reaped=()):
    """CPU seconds of live processes, plus what `reaped` parents have collected from children that ended
    (PostgreSQL backends come and go during a run)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f: fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            if pid in reaped: total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            pass
    return total


def postmasters():
    out = []
    for d in NODE_DIRS:
        try:
            with open(os.path.join(d, "postmaster.pid")) as f: out.append(int(f.readline()))
        except (OSError, ValueError):
            pass
    return out


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def postgres_pids():
    pids = []
    for d in NODE_DIRS:
        try:
            with open(os.path.join(d, "postmaster.pid")) as f: pm = int(f.readline())
            pids += [pm] + children(pm)
        except (OSError, ValueError):
            pass
    return pids


def warm(port):
    import http.client, threading

    def reader(first):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(first, SUBSCRIBERS, 4):
            c.request("GET", f"/v1/subscribers/sim1-{i:06d}/entitlements", headers={"Authorization": f"Bearer {READER}"})
            c.getresponse().read()
        c.close()

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()


class Setup:
    """`instances` servers (with `cache` MiB and optional replica), behind nginx when `nginx`."""

    def __init__(self, instances, cache, replica, nginx):
        self.procs, self.ports = [], []
        for _ in range(instances):
            port = free_port()
            args = [BIN, "serve", "--database-url", URL, "--port", str(port), "--log-level", "error",
                    "--entitlement-cache-mib", str(cache)]
            if replica: args += ["--read-database-url", REPLICA]
            self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.ports.append(port)
        self.nginx = None
        self.front = self.ports[0]
        if nginx:
            self.front = free_port()
            d = os.path.join(SCRATCH, f"nginx-{self.front}")
            os.makedirs(d, exist_ok=True)
            conf = subprocess.run([os.path.join(ROOT, "tools", "nginx-conf"), d, str(self.front)] + [str(p) for p in self.ports],
                                  capture_output=True, text=True, check=True).stdout
            with open(os.path.join(d, "nginx.conf"), "w") as f: f.write(conf)
            self.nginx = subprocess.Popen(["nginx", "-p", d, "-c", os.path.join(d, "nginx.conf"), "-g", "daemon off;"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for port in self.ports + [self.front]:
            for _ in range(400):
                if get(f"http://127.0.0.1:{port}/ready")[0] == 200: break
                time.sleep(0.05)
            else:
                raise SystemExit(f"bench-scaling: port {port} did not become ready")
        if cache:
            for port in self.ports:
                for _ in range(200):
                    if "subledger_entitlement_cache_enabled 1" in get(f"http://127.0.0.1:{port}/metrics")[1]: break
                    time.sleep(0.05)
            # A server that has been up for a while holds its active subscribers: each instance reads every
            # simulated subscriber once before the runs (wrk's random reads would still be warming up).
            for port in self.ports: warm(port)

    def pids(self):
        servers = [p.pid for p in self.procs]
        nginx = ([self.nginx.pid] + children(self.nginx.pid)) if self.nginx else []
        return servers, nginx

    def metric(self, name):
        total = 0.0
        for port in self.ports:
            m = re.search(rf"^{name} ([0-9.e+]+)$", get(f"http://127.0.0.1:{port}/metrics")[1], re.M)
            total += float(m.group(1)) if m else 0
        return total

    def stop(self):
        for p in self.procs + ([self.nginx] if self.nginx else []):
            p.terminate()
        for p in self.procs + ([self.nginx] if self.nginx else []):
            try: p.wait(timeout=30)
            except subprocess.TimeoutExpired: p.kill()


def wrk(port, mode, seconds, key, connections=CONNECTIONS, tag="run"):
    env = dict(os.environ, BENCH_MODE=mode, BENCH_KEY=key, BENCH_SUBSCRIBERS=str(SUBSCRIBERS), BENCH_PREFIX="sim1-",
               BENCH_TAG=tag)
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", LUA, f"http://127.0.0.1:{port}"],
                         capture_output=True, text=True, env=env).stdout
    m = re.search(r"^WRK (\{.*\})$", out, re.M)
    if not m: raise SystemExit("bench-scaling: wrk printed no summary:\n" + out)
    return json.loads(m.group(1))


def measure(name, setup, mode="read", key=None, connections=CONNECTIONS, path=None):
    key = key or READER
    if path: os.environ["BENCH_PATH"] = path
    else: os.environ.pop("BENCH_PATH", None)
    wrk(setup.front, mode, 2, key, connections, tag=f"warm-{time.time_ns()}")  # warm-up: caches, pools
    rates, p50s, p99s, errors, cpu = [], [], [], 0, []
    hits0, misses0 = setup.metric("subledger_entitlement_cache_hits"), setup.metric("subledger_entitlement_cache_misses")
    for run in range(RUNS):
        servers, nginx = setup.pids()
        pms = set(postmasters())
        before = (cpu_seconds(servers), cpu_seconds(nginx), cpu_seconds(postgres_pids(), pms), time.monotonic())
        r = wrk(setup.front, mode, SECONDS, key, connections, tag=f"{name}-{run}-{time.time_ns()}")
        after = (cpu_seconds(servers), cpu_seconds(nginx), cpu_seconds(postgres_pids(), pms), time.monotonic())
        wall = after[3] - before[3]
        cpu.append(tuple((a - b) / wall for a, b in zip(after[:3], before[:3])))
        rates.append(r["requests"] / r["seconds"]); p50s.append(r["p50_ms"]); p99s.append(r["p99_ms"]); errors += r["errors"]
    hits = setup.metric("subledger_entitlement_cache_hits") - hits0
    misses = setup.metric("subledger_entitlement_cache_misses") - misses0
    i = rates.index(statistics.median(rates)) if RUNS % 2 else 0
    row = {"name": name, "rate": statistics.median(rates), "p50": statistics.median(p50s), "p99": statistics.median(p99s),
           "errors": errors, "cpu_servers": cpu[i][0], "cpu_nginx": cpu[i][1], "cpu_pg": cpu[i][2],
           "hit_rate": hits / (hits + misses) if hits + misses else None, "replica_share": None}
    say(f"{name}: {row['rate']:,.0f}/s p50 {row['p50']:.2f} ms p99 {row['p99']:.2f} ms, errors {errors}, "
        f"CPU servers {row['cpu_servers']:.2f} nginx {row['cpu_nginx']:.2f} postgres {row['cpu_pg']:.2f}")
    return row


results = {"reads": [], "appends": [], "meta": {}}
SAVED = os.path.join(SCRATCH, "results.json")
# BENCH_RESUME=1 keeps the scenarios a previous, interrupted run finished (a shared machine's other work
# sometimes ends a long run) and measures the rest.
if os.environ.get("BENCH_RESUME") == "1" and os.path.exists(SAVED):
    results = json.load(open(SAVED))
done = {r["name"] for r in results["reads"] + results["appends"]}


def save():
    with open(SAVED, "w") as f: json.dump(results, f, indent=1)

plans = [
    ("1 instance, cache on", 1, 256, False, False),
    ("1 instance behind nginx, cache on", 1, 256, False, True),
    ("2 instances behind nginx, cache on", 2, 256, False, True),
    ("1 instance, cache off: primary", 1, 0, False, False),
    ("1 instance, cache off: + 1 replica", 1, 0, True, False),
    ("2 instances behind nginx, cache off: primary", 2, 0, False, True),
    ("2 instances behind nginx, cache off: + 1 replica", 2, 0, True, True),
]
for name, n, cache, replica, nginx in plans:
    if name in done: continue
    setup = Setup(n, cache, replica, nginx)
    try:
        row = measure(name, setup)
        if replica:
            # Reads answered by the replica, out of all reads of the runs (the rest: the primary).
            row["replica_share"] = setup.metric("subledger_reads_replica") / max(1.0, setup.metric("subledger_reads_replica") + setup.metric("subledger_reads_primary"))
        else:
            row["replica_share"] = None
        results["reads"].append(row)
        save()
    finally:
        setup.stop()
for name, n in (("/health, 1 instance", 1), ("/health, 2 instances behind nginx", 2)):
    if name in done: continue
    setup = Setup(n, 256, False, n > 1)
    try:
        results["reads"].append(measure(name, setup, path="/health"))
        save()
    finally:
        setup.stop()
for name, n, conns in (("appends, 1 instance, 32 clients", 1, 32), ("appends, 2 instances behind nginx, 32 clients", 2, 32),
                       ("appends, 1 instance, 64 clients", 1, 64)):
    if name in done: continue
    setup = Setup(n, 256, False, n > 1)
    try:
        results["appends"].append(measure(name, setup, mode="append", key=WRITER, connections=conns))
        save()
    finally:
        setup.stop()

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
binkind = "release" if "/release/" in BIN else "debug"
failover = os.environ.get("BENCH_FAILOVER", "")
lines = [
    "## Scaling (issue 19)",
    "",
    f"Produced by `tools/bench-scaling` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: RUNS={RUNS}, "
    f"SECONDS_PER_RUN={SECONDS}, wrk with {CONNECTIONS} connections (2 threads), {SUBSCRIBERS:,} simulated subscribers "
    f"(entitlement reads of random ones). {binkind.capitalize()} build; PostgreSQL 15 as a pg_auto_failover pair on "
    f"loopback (`tools/pg ha`): the primary with its synchronous standby, which is also the read replica. "
    f"{os.cpu_count()} cores ({cpu}) shared by everything: wrk, nginx, the servers, both PostgreSQL nodes and the monitor. "
    "CPU columns are cores used (CPU seconds per second) by the servers, nginx and both PostgreSQL nodes during the median run.",
    "",
    "### Entitlement reads",
    "",
    "| setup | reads/s | p50 ms | p99 ms | errors | cache hit rate | reads on the replica | CPU servers | CPU nginx | CPU PostgreSQL |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for r in results["reads"]:
    hit = f"{r['hit_rate']:.0%}" if r["hit_rate"] is not None else "–"
    rep = f"{r['replica_share']:.0%}" if r.get("replica_share") is not None else "–"
    lines.append(f"| {r['name']} | {r['rate']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']} | {hit} | {rep} | "
                 f"{r['cpu_servers']:.2f} | {r['cpu_nginx']:.2f} | {r['cpu_pg']:.2f} |")
lines += ["", "### Appends on the primary with its synchronous standby (the write ceiling of one primary)", "",
          "| setup | events/s | p50 ms | p99 ms | errors | CPU servers | CPU nginx | CPU PostgreSQL |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
for r in results["appends"]:
    lines.append(f"| {r['name']} | {r['rate']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']} | "
                 f"{r['cpu_servers']:.2f} | {r['cpu_nginx']:.2f} | {r['cpu_pg']:.2f} |")
if failover:
    lines += ["", f"### Failover", "", failover]
lines += ["", "What these numbers mean, and what they do not, is in [docs/scaling.md](docs/scaling.md).", ""]
text = "\n".join(lines)
with open(os.path.join(ROOT, "tools", "bench.d", "scaling.md"), "w") as f: f.write(text)
bench = os.path.join(ROOT, "BENCHMARKS.md")
current = open(bench).read()
begin, end = "<!-- scaling:begin -->", "<!-- scaling:end -->"
block = f"{begin}\n{text}{end}\n"
if begin in current:
    current = current[:current.index(begin)] + block + current[current.index(end) + len(end) + 1:]
else:
    current = current.rstrip("\n") + "\n\n" + block
with open(bench, "w") as f: f.write(current)
save()
say("wrote tools/bench.d/scaling.md and its section of BENCHMARKS.md")
