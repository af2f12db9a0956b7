#!/usr/bin/env python3
"""Fault and concurrency tests with real processes (issue 6): kill -9 of the server in the middle of a stream of
batch appends with client retries; PostgreSQL stopped under a running server; a bounded concurrency soak.
Driven by tools/faults; standard library only. Exits non-zero on the first broken guarantee."""
import argparse, atexit, http.client, json, os, random, signal, socket, subprocess, sys, threading, time

A = argparse.ArgumentParser()
A.add_argument("--bin", required=True); A.add_argument("--url", required=True)
A.add_argument("--writer", required=True); A.add_argument("--auditor", required=True)
A.add_argument("--pg", required=True); A.add_argument("--soak-seconds", type=float, default=60)
args = A.parse_args()


def say(*m):
    print("faults:", *m, file=sys.stderr, flush=True)


def fail(m):
    say("FAILED:", m)
    sys.exit(1)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


PORT = free_port()


class Server:
    def __init__(self):
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([args.bin, "serve", "--database-url", args.url, "--port", str(PORT),
                                      "--log-level", "error", "--db-timeout", "1"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if request("GET", "/health", timeout=1)[0] == 200:
                return
            time.sleep(0.05)
        fail("server did not start")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL); self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate(); self.proc.wait(timeout=15)


def request(method, path, body=None, key=None, timeout=10):
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if key: h["Authorization"] = f"Bearer {key}"
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse(); data = r.read(); c.close()
        return r.status, (json.loads(data) if data else None)
    except (OSError, http.client.HTTPException, json.JSONDecodeError):
        return None, None


def event(sub, key, expected=None):
    e = {"subscriber_id": sub, "type": "credit", "occurred_at": "2026-03-01T10:00:00Z", "source": "faults",
         "environment": "production", "idempotency_key": key,
         "data": {"entitlement": "pro", "duration": "P1D", "reason": "faults", "granted_by": "faults"}}
    if expected is not None: e["expected_version"] = expected
    return e


def purchase(sub, key, i):
    """A paid monthly purchase: it makes report cells (revenue, MRR, churn), which a credit does not."""
    start = f"2026-0{1 + i % 6}-{1 + i % 27:02d}T10:00:00Z"
    end = f"2026-0{2 + i % 6}-{1 + i % 27:02d}T10:00:00Z"
    return {"subscriber_id": sub, "type": "purchase", "occurred_at": start, "source": "faults", "environment": "production",
            "idempotency_key": key,
            "data": {"product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": key, "kind": "auto_renewable",
                     "period_start": start, "period_end": end, "period": "P1M", "price_minor": 999 + i % 3,
                     "currency": ["USD", "EUR"][i % 2], "commission_rate": "0.30"}}


def psql(sql):
    return subprocess.run(["psql", "-X", "-A", "-t", args.url, "-c", sql], capture_output=True, text=True, check=True).stdout.strip()


def check_ledger(expected_keys):
    """Every acknowledged key stored exactly once, versions gap-free, feed complete and in order, chains verify."""
    stored = psql("SELECT count(*), count(DISTINCT idempotency_key) FROM events WHERE source = 'faults'").split("|")
    if int(stored[0]) != len(expected_keys) or int(stored[1]) != len(expected_keys):
        fail(f"expected {len(expected_keys)} events once each, found {stored[0]} rows / {stored[1]} keys")
    gaps = psql("SELECT count(*) FROM (SELECT subscriber_id FROM events GROUP BY 1 HAVING max(version) <> count(*)) g")
    if gaps != "0": fail(f"{gaps} streams have version gaps")
    after, seen = 0, []
    while True:
        st, body = request("GET", f"/v1/events?after_position={after}&limit=1000", key=args.auditor)
        if st != 200: fail(f"feed answered {st}")
        page = body["events"]
        if not page: break
        seen += [e["position"] for e in page]; after = page[-1]["position"]
    if seen != list(range(1, len(seen) + 1)) or len(seen) != int(psql("SELECT count(*) FROM events")):
        fail("the feed is not complete and in position order")
    v = subprocess.run([args.bin, "verify", "--database-url", args.url], capture_output=True, text=True)
    if v.returncode != 0: fail("verify: " + v.stdout + v.stderr)


server = Server()
# A failed check exits at once: the server must not outlive it (its pool would keep connections to a dropped database).
atexit.register(lambda: server.proc and server.proc.poll() is None and server.kill9())
server.start()

T0 = time.monotonic()
# 1. kill -9 in the middle of batch appends; the client retries every unacknowledged batch with the same keys.
say("kill -9 during batch appends")
batches = [[purchase(f"k9-{(b * 7 + i) % 40}", f"k9-{b}-{i}", b * 25 + i) if i % 5 == 0
             else event(f"k9-{(b * 7 + i) % 40}", f"k9-{b}-{i}") for i in range(25)] for b in range(120)]
pending, acked, lock = list(range(len(batches))), set(), threading.Lock()
killed = threading.Event()


def appender():
    while True:
        with lock:
            if not pending: return
            b = pending.pop(0)
        st, _ = request("POST", "/v1/events", {"events": batches[b]}, key=args.writer, timeout=5)
        with lock:
            if st in (200, 201): acked.add(b)
            elif st is None or st >= 500: pending.append(b)
            else: fail(f"batch {b} answered {st}")
        if st is None or (st is not None and st >= 500): time.sleep(0.05)


def killer():
    while len(acked) < 30: time.sleep(0.01)
    server.kill9(); killed.set()
    say(f"killed the server with {len(acked)} batches acknowledged; restarting")
    time.sleep(0.3)
    server.start()


threads = [threading.Thread(target=appender) for _ in range(4)] + [threading.Thread(target=killer)]
for t in threads: t.start()
for t in threads: t.join()
if not killed.is_set(): fail("the server was never killed")
# Replaying an acknowledged batch returns the original events (200).
st, body = request("POST", "/v1/events", {"events": batches[0]}, key=args.writer)
if st != 200: fail(f"replay of an acknowledged batch answered {st}")
check_ledger({e["idempotency_key"] for b in batches for e in b})
ROLLUP_TABLES = ["report_revenue_months", "report_trial_days", "report_run_days", "report_churn_periods",
                 "report_retention_cells", "report_mrr_days", "report_paid_days", "report_revenue_days", "report_mrr_hours",
                 "report_paid_hours", "report_refund_days", "report_refund_repeats", "report_conversion_days", "report_ltv_cells",
                 "report_mrr_movement", "report_revenue_month_dims", "report_trial_day_dims",
                 "report_churn_active_days", "report_churn_moves", "report_mrr_rate_days", "report_paid_any_days",
                 "report_mrr_dimension_days", "report_paid_dimension_days", "report_conversion_holders",
                 "report_mrr_rate_hours", "report_paid_any_hours"]


def rollup_cells():
    """The report rollups' non-zero cells (appends may leave cells that cancelled out; a rebuild writes none)."""
    cells = []
    for table in ROLLUP_TABLES:
        keys = set(psql(f"SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "
                        f"WHERE i.indrelid = '{table}'::regclass AND i.indisprimary").split())
        for line in psql(f"SELECT row_to_json(t) FROM {table} t").splitlines():
            row = json.loads(line)
            if any(float(v) != 0 for k, v in row.items() if k not in keys):
                cells.append(f"{table} {json.dumps(row, sort_keys=True)}")
    return sorted(cells)


def queues_empty(limit=20):
    """Waits until the server's workers have followed the log to its end (report facts and cells), applied every
    queued revenue move, and the reporting
    currency cells (own currencies, EUR and USD: schema 0031) are computed and have taken every move, and the
    reporting currency LTV cells (schema 0038) hold the whole log."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if psql("SELECT (SELECT coalesce(max(position), 0) FROM events) - (SELECT applied_position FROM report_rollup_state) "
                "+ (SELECT count(*) FROM report_rollup_queue) + (SELECT count(*) FROM report_revenue_pending) "
                "+ (SELECT count(*) FROM report_fx_pending) + (SELECT count(*) FROM report_fx_cells WHERE NOT complete) "
                # The LTV cells (schema 0038): one complete row per kept currency, at the log's end.
                "+ (SELECT count(*) FROM report_fx_cells WHERE reporting_currency <> '') "
                "- (SELECT count(*) FROM report_fx_ltv_state WHERE complete "
                "   AND position = (SELECT coalesce(max(position), 0) FROM events))") == "0":
            return
        time.sleep(0.1)
    fail(f"the report rollup queues were not emptied within {limit}s")


def currency_cells():
    """The reporting currency cells' non-zero rows (revenue, LTV and MRR movement) and what was counted without a rate."""
    # ',' between the columns: psql's output is stripped, and the own currencies' reporting currency is ''.
    rows = psql("SELECT concat_ws(',', reporting_currency, entitlement, day_us, currency, store, country, product_id, transactions, "
                "billings, commission, refunds, refunded_unrecognized, refunds_recognized, recognized, settled_deferred, handover, tax) "
                "FROM report_fx_revenue_days WHERE transactions <> 0 OR billings <> 0 OR commission <> 0 OR refunds <> 0 "
                "OR refunded_unrecognized <> 0 OR refunds_recognized <> 0 OR recognized <> 0 OR settled_deferred <> 0 "
                "OR handover <> 0 OR tax <> 0").splitlines()
    rows += psql("SELECT concat_ws(',', 'missing', reporting_currency, currency, first_day_us, settled_day_us, transactions) "
                 "FROM report_fx_missing WHERE transactions <> 0").splitlines()
    rows += psql("SELECT concat_ws(',', 'ltv', reporting_currency, entitlement, cohort_us, store, country, product_id, month_us, "
                 "members, gross, proceeds) FROM report_fx_ltv_cells WHERE members <> 0 OR gross <> 0 OR proceeds <> 0").splitlines()
    rows += psql("SELECT concat_ws(',', 'ltv missing', reporting_currency, cohort_us, currency, transactions) "
                 "FROM report_fx_ltv_missing WHERE transactions <> 0").splitlines()
    rows += psql("SELECT concat_ws(',', 'movement', reporting_currency, entitlement, dimension, period_interval, period_us, value, "
                 "factor_num, factor_den, part, denominator, amount) FROM report_fx_movement WHERE amount <> 0").splitlines()
    rows += psql("SELECT concat_ws(',', 'movement missing', reporting_currency, currency, start_us, end_us, services) "
                 "FROM report_fx_movement_missing WHERE services <> 0").splitlines()
    return sorted(rows)


# The report cells the killed server's rollup worker had queued or was applying: each applied once, by the
# restarted one; a rebuild (from the log alone) writes the same cells.
queues_empty()
applied = rollup_cells()
if not applied: fail("the appends left no report cells")
converted = currency_cells()
if not converted: fail("the appends left no reporting currency cells")
r = subprocess.run([args.bin, "rebuild", "--database-url", args.url], capture_output=True, text=True)
if r.returncode != 0: fail("rebuild: " + r.stdout + r.stderr)
if rollup_cells() != applied: fail("the rollups the worker applied differ from the rebuild's")
# The rebuild leaves the reporting currency cells to be computed afresh (the running server's worker does it): the
# same cells as the killed and restarted workers' moves gave.
queues_empty()
afresh = currency_cells()
if afresh != converted:
    moved_only, afresh_only = sorted(set(converted) - set(afresh)), sorted(set(afresh) - set(converted))
    fail("the reporting currency cells the workers moved differ from a computation afresh: moved only "
         f"{moved_only[:5]} ({len(moved_only)}), afresh only {afresh_only[:5]} ({len(afresh_only)})")
say(f"kill -9: ok (every batch stored exactly once, chains verify, {len(applied)} report cells as a rebuild writes them, "
    f"{len(converted)} reporting currency cells as a computation afresh writes them; "
    f"{time.monotonic() - T0:.0f}s)")

# 2. PostgreSQL stopped while the server runs: quick 503s, /ready 503, recovery without a restart.
say("PostgreSQL outage")
subprocess.run([args.pg, "stop"], check=True, stderr=subprocess.DEVNULL)
try:
    t0 = time.monotonic()
    st, body = request("POST", "/v1/events", event("outage", "outage-1"), key=args.writer, timeout=10)
    took = time.monotonic() - t0
    if st != 503 or body["error"]["code"] != "unavailable": fail(f"append during an outage answered {st} {body}")
    if took > 5: fail(f"append during an outage took {took:.1f}s")
    st, _ = request("GET", "/ready", timeout=10)
    if st != 503: fail(f"/ready during an outage answered {st}")
    if request("GET", "/health")[0] != 200: fail("/health during an outage")
finally:
    subprocess.run([args.pg, "start"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(300):
    if request("GET", "/ready", timeout=5)[0] == 200: break
    time.sleep(0.1)
else:
    fail("the server did not become ready again after PostgreSQL came back")
st, _ = request("POST", "/v1/events", event("outage", "outage-1"), key=args.writer)
if st != 201: fail(f"append after recovery answered {st}")
say(f"outage: ok (503 in {took:.2f}s, recovered without restart)")

# 3. Concurrency soak: many clients on the same and on different subscribers.
say(f"concurrency soak for {args.soak_seconds:.0f}s")
deadline = time.monotonic() + args.soak_seconds
soak_acked, errors, conflicts = set(), [], [0]


def soaker(n):
    rnd, i = random.Random(n), 0
    versions = {}
    while time.monotonic() < deadline:
        shared = rnd.random() < 0.5
        sub = f"soak-shared-{rnd.randrange(4)}" if shared else f"soak-{n}-{rnd.randrange(50)}"
        key = f"soak-{n}-{i}"; i += 1
        expected = versions.get(sub) if shared and rnd.random() < 0.5 else None
        evs = [event(sub, key, expected)] if rnd.random() < 0.7 else [event(sub, f"{key}-{k}") for k in range(rnd.randrange(2, 20))]
        st, body = request("POST", "/v1/events", evs[0] if len(evs) == 1 else {"events": evs}, key=args.writer)
        if st in (200, 201):
            with lock: soak_acked.update(e["idempotency_key"] for e in evs)
            versions[sub] = body["events"][-1]["version"]
        elif st == 409:
            conflicts[0] += 1; versions.pop(sub, None)
        else:
            errors.append(st)


threads = [threading.Thread(target=soaker, args=(n,)) for n in range(16)]
for t in threads: t.start()
for t in threads: t.join(timeout=args.soak_seconds + 60)
if any(t.is_alive() for t in threads): fail("soak clients hung (deadlock?)")
if errors: fail(f"soak saw {len(errors)} failed requests, e.g. {errors[:5]}")
got = int(psql("SELECT count(*) FROM events WHERE idempotency_key LIKE 'soak-%'"))
if got != len(soak_acked): fail(f"soak: {len(soak_acked)} acknowledged, {got} stored")
all_keys = {e["idempotency_key"] for b in batches for e in b} | soak_acked | {"outage-1"}
check_ledger(all_keys)
say(f"soak: ok ({len(soak_acked)} events from 16 clients, {conflicts[0]} version conflicts answered 409, no gaps, chains verify)")
server.stop()
