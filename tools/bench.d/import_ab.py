#!/usr/bin/env python3
"""Import and rebuild of release binaries side by side (issue 38), each next to PostgreSQL's COPY in the same run.

For each run and each binary (their order alternating between runs): a fresh database, `subledger import` of the
simulated ledger (timed), then `COPY events FROM` a file of the same rows into a copy of `events` with the same
indexes (timed), then `subledger rebuild` (timed) next to `COPY (SELECT … FROM events) TO /dev/null` (timed).
The ratios are taken within a run, then their medians printed, as tools/bench does.

Environment: AB_BINS (comma-separated name=path pairs), DATABASE_URL (a role that may create databases), RUNS
(default 3), AB_EVENTS (default 200,000; the ledger tools/simulate writes), AB_DIR (scratch, default .bench).
"""
import os, statistics, subprocess, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(os.path.dirname(HERE))
BASE = os.environ["DATABASE_URL"]
RUNS = int(os.environ.get("RUNS", "3"))
EVENTS = int(os.environ.get("AB_EVENTS", "200000"))
SCRATCH = os.environ.get("AB_DIR", os.path.join(ROOT, ".bench"))
BINS = [tuple(pair.split("=", 1)) for pair in os.environ["AB_BINS"].split(",")]
COLUMNS = ("subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source, environment, "
           "idempotency_key, data, metadata, fingerprint, prev_hash, hash")


def log(msg):
    print(f"import-ab: {msg}", file=sys.stderr, flush=True)


def psql(url, *args, capture=False):
    cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, *args]
    env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip() if capture else None


def fresh_db(name, binary):
    psql(BASE, "-c", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(BASE, "-c", f"CREATE DATABASE {name}")
    url = BASE.rsplit("/", 1)[0] + "/" + name
    subprocess.run([binary, "migrate", "--database-url", url], check=True, capture_output=True)
    return url


TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(database, seen):
    """Adds the CPU seconds so far of each PostgreSQL backend serving `database` to `seen` (pid -> seconds)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read()
            if not title.startswith(b"postgres: ") or f" {database} ".encode() not in title:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            seen[pid] = (int(fields[11]) + int(fields[12])) / TICK
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass


def timed(cmd, database="subledger_import_ab"):
    """Wall seconds, the command's CPU seconds and its database's backends' CPU seconds (sampled every 50 ms)."""
    seen, done = {}, threading.Event()

    def sample():
        while not done.is_set():
            backend_cpu(database, seen)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    if status != 0:
        raise RuntimeError(f"{cmd[:2]} failed ({status})")
    return wall, usage.ru_utime + usage.ru_stime, sum(seen.values())


def simulated():
    subscribers = int(EVENTS / 9.4)
    path = os.path.join(SCRATCH, f"sim-{subscribers}.jsonl")
    if not os.path.exists(path):
        log(f"simulating {subscribers} subscribers (tools/simulate)")
        os.makedirs(SCRATCH, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "simulate"), "--subscribers", str(subscribers),
                            "--months", "24", "--seed", "1"], stdout=f, check=True)
        os.rename(path + ".tmp", path)
    return path


def main():
    source = simulated()
    copy_file = os.path.join(SCRATCH, "ab-events.copy")
    rows = {name: [] for name, _ in BINS}
    for run in range(RUNS):
        order = BINS if run % 2 == 0 else list(reversed(BINS))
        for name, binary in order:
            url = fresh_db("subledger_import_ab", binary)
            imported, import_cpu, import_pg = timed([binary, "import", "--database-url", url, source])
            events = int(psql(url, "-At", "-c", "SELECT count(*) FROM events", capture=True))
            psql(url, "-c", f"\\copy (SELECT {COLUMNS} FROM events ORDER BY position) TO '{copy_file}'")
            psql(url, "-c", "CREATE TABLE copy_target (LIKE events INCLUDING ALL)")
            started = time.monotonic()
            psql(url, "-c", f"\\copy copy_target ({COLUMNS}) FROM '{copy_file}'")
            copy_in = time.monotonic() - started
            psql(url, "-c", "DROP TABLE copy_target")
            psql(url, "-c", "VACUUM ANALYZE events")
            rebuilt, rebuild_cpu, rebuild_pg = timed([binary, "rebuild", "--database-url", url])
            started = time.monotonic()
            psql(url, "-c", f"\\copy (SELECT {COLUMNS} FROM events) TO '/dev/null'")
            copy_out = time.monotonic() - started
            r = dict(events=events, import_s=imported, copy_in_s=copy_in, rebuild_s=rebuilt, copy_out_s=copy_out,
                     import_cpu=import_cpu, import_pg=import_pg, rebuild_cpu=rebuild_cpu, rebuild_pg=rebuild_pg,
                     import_ratio=copy_in / imported, rebuild_ratio=copy_out / rebuilt)
            rows[name].append(r)
            log(f"run {run + 1}/{RUNS} {name}: import {imported:.1f} s (COPY {copy_in:.1f} s, {r['import_ratio']:.0%}), "
                f"rebuild {rebuilt:.1f} s (COPY-out {copy_out:.1f} s, {r['rebuild_ratio']:.0%}); CPU s CLI/PostgreSQL: "
                f"import {import_cpu:.1f}/{import_pg:.1f}, rebuild {rebuild_cpu:.1f}/{rebuild_pg:.1f}")
    os.unlink(copy_file)
    psql(BASE, "-c", "DROP DATABASE IF EXISTS subledger_import_ab WITH (FORCE)")
    print("| binary | events | import s | import events/s | COPY rows/s | import / COPY | rebuild s | rebuild events/s "
          "| COPY-out rows/s | rebuild / COPY-out |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in BINS:
        m = lambda k: statistics.median(r[k] for r in rows[name])
        ev = rows[name][0]["events"]
        print(f"| {name} | {ev:,} | {m('import_s'):.1f} | {statistics.median(r['events'] / r['import_s'] for r in rows[name]):,.0f} "
              f"| {statistics.median(r['events'] / r['copy_in_s'] for r in rows[name]):,.0f} | {m('import_ratio'):.0%} "
              f"| {m('rebuild_s'):.1f} | {statistics.median(r['events'] / r['rebuild_s'] for r in rows[name]):,.0f} "
              f"| {statistics.median(r['events'] / r['copy_out_s'] for r in rows[name]):,.0f} | {m('rebuild_ratio'):.0%} |")
    print()
    print("| binary | import CPU s: CLI | PostgreSQL | rebuild CPU s: CLI | PostgreSQL |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in BINS:
        m = lambda k: statistics.median(r[k] for r in rows[name])
        print(f"| {name} | {m('import_cpu'):.1f} | {m('import_pg'):.1f} | {m('rebuild_cpu'):.1f} | {m('rebuild_pg'):.1f} |")
    print("runs (import / COPY, rebuild / COPY-out): " + "; ".join(f"{name}: " + ", ".join(f"{r['import_ratio']:.0%}/{r['rebuild_ratio']:.0%}" for r in rows[name])
                                for name, _ in BINS))


if __name__ == "__main__":
    main()
