#!/usr/bin/env python3
"""The dashboard in a real headless Chromium against a served ledger filled by tools/simulate (driven by
tools/browser-test; Selenium and chromedriver from Debian, tools/browser.py). Enters the key through the page's form, opens every page,
fails on any console error or uncaught exception, compares the numbers the charts carry (data-* attributes)
with the API's own answers to the same requests (per currency, in EUR from ECB's sample rates, and filtered by
store through the filter bar; a currency without rates said in words), moves the subscriber lookup's as-of slider, lists a failing
webhook endpoint and replays it, counts the stores' waiting messages, compares the reconciliation runs with the API's, checks the 401/403 messages, and writes a PNG screenshot of each page."""
import argparse, datetime, http.client, http.server, json, os, socket, subprocess, sys, tempfile, threading, time, urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import Browser, DriverUnreachable, WebDriverException  # noqa: E402

A = argparse.ArgumentParser()
A.add_argument("--bin", required=True); A.add_argument("--url", required=True)
A.add_argument("--chromium", required=True); A.add_argument("--out", required=True)
A.add_argument("--chromedriver", default="/usr/bin/chromedriver")
for role in ("admin", "analyst", "auditor"): A.add_argument(f"--{role}", required=True)
args = A.parse_args()


def say(*m):
    print("browser-test:", *m, file=sys.stderr, flush=True)


class Failed(Exception):
    pass


def check(condition, message):
    if not condition: raise Failed(message)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRIPE_SECRET = "whsec_browser_try"
GOOGLE_TRY_DIR = tempfile.mkdtemp(prefix="browser-google-try-")
NOTES = []  # soft findings: reported, not failed


def api(path, key=args.admin):
    """The API's own answer to a path the page used (the test's independent read of the same numbers)."""
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    c.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    r = c.getresponse(); body = r.read(); c.close()
    check(r.status == 200, f"GET {path} answered {r.status}: {body[:300]!r}")
    return json.loads(body)


def minor_digits(currency):
    """Digits of a currency's minor unit (ISO 4217), as the dashboard's format.js shows amounts."""
    return 0 if currency in ZERO_DECIMAL else 3 if currency in THREE_DECIMAL else 2


ZERO_DECIMAL = {"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"}
THREE_DECIMAL = {"BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"}


def same(a, b):
    """Numbers as the page carries them (strings of JS numbers) against the API's JSON values."""
    if a in ("null", None) or b is None: return a in ("null", None) and b is None
    return float(a) == float(b)


class Console:
    """Console errors, uncaught exceptions and failed loads the browser reported since the last look."""

    def __init__(self, browser):
        self.browser, self.seen = browser, 0

    def problems(self, allow_statuses=()):
        out = []
        for e in self.browser.events[self.seen:]:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"uncaught exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                text = p["entry"].get("text", "")
                if p["entry"].get("source") == "network" and any(f"status of {s}" in text for s in allow_statuses): continue
                out.append(f"log ({p['entry'].get('source')}): {text} {p['entry'].get('url', '')}")
        self.seen = len(self.browser.events)
        return out

    def assert_clean(self, where, allow_statuses=()):
        self.browser.pump()
        problems = self.problems(allow_statuses)
        check(not problems, f"{where}: " + "; ".join(problems))


def requests_made(browser):
    return [e["params"]["request"] for e in browser.events if e["method"] == "Network.requestWillBeSent"]


def go(b, page, timeout=90):
    b.eval(f"location.hash = {json.dumps('#' + page)}")
    b.wait(f"document.body.dataset.page === {json.dumps(page.split('/')[0])}", what=f"page {page}")
    state = b.wait(f"(() => {{ const s = document.getElementById('page-{page.split('/')[0]}').dataset.state; "
                   "return s && s !== 'loading' ? s : null; })()", timeout=timeout, what=f"page {page} to load")
    return state


def status_text(b, page):
    return b.eval(f"document.querySelector('#page-{page} [data-status]').innerText")


def enter_key(b, key):
    b.wait("document.readyState === 'complete' && !document.getElementById('login').hidden", what="the key form")
    b.type_into("#key-input", key)
    b.key("Enter", vk=13, text="\r")
    b.wait("document.getElementById('login').hidden", what="the key form to close")


def forget(b):
    """"Forget key" reloads the page: wait for the new document, with the key gone."""
    b.eval("window.beforeForget = true")
    b.click("#forget-key")
    b.wait("!window.beforeForget && document.readyState === 'complete' && sessionStorage.length === 0", what="the reload after Forget key")


def shot(b, name):
    b.pump(0.3)
    b.screenshot(os.path.join(args.out, f"{name}.png"))
    b.screenshot(os.path.join(args.out, f"{name}-full.png"), full=True)


def check_overview(b):
    tiles = b.eval("[...document.querySelectorAll('#overview-tiles .tile')].map(t => ({id: t.dataset.tile, value: t.dataset.value, "
                   "source: t.dataset.source, shown: t.querySelector('.tile-value').innerText, spark: JSON.parse(t.querySelector('svg').dataset.values), "
                   "sources: JSON.parse(t.querySelector('svg').dataset.sources)}))")
    ids = [t["id"] for t in tiles]
    check("active_paid" in ids and "churn_rate" in ids and "conversion_rate" in ids and any(i.startswith("mrr_") for i in ids),
          f"overview tiles: {ids}")
    for t in tiles:
        check(len(t["spark"]) == 12, f"{t['id']}: sparkline of {len(t['spark'])} points, expected 12")
        if t["id"] == "active_paid" or t["id"].startswith("mrr_"):
            cur = t["id"][4:]
            pick = (lambda m: sum(c["active_paid"] for c in m["currencies"])) if t["id"] == "active_paid" else \
                (lambda m: next((c["mrr_minor"] for c in m["currencies"] if c["currency"] == cur), 0))
            now = pick(api(t["source"]))
            check(same(t["value"], now), f"{t['id']}: page {t['value']}, API {now}")
            expected = [pick(api(s)) for s in t["sources"]]
            check(t["spark"] == expected, f"{t['id']} sparkline: page {t['spark']}, API {expected}")
            if t["id"] == "active_paid":
                check(t["shown"] == f"{now:,}", f"active_paid shows {t['shown']!r}, API {now}")
            else:
                digits = minor_digits(cur)
                check(f"{now / 10 ** digits:,.{digits}f}" in t["shown"], f"{t['id']} shows {t['shown']!r}, API {now} minor units")
        else:
            rows = api(t["source"])["periods"]
            field = t["id"]
            check(len(rows) == 12, f"{t['source']}: {len(rows)} periods, expected 12")
            expected = [r[field] for r in rows]
            check(all(same(p, e) for p, e in zip(t["spark"], expected)), f"{field} sparkline: page {t['spark']}, API {expected}")
            check(same(t["value"], rows[-1][field]), f"{field}: page {t['value']}, API {rows[-1][field]}")
    active = next(t for t in tiles if t["id"] == "active_paid")
    check(int(active["value"]) > 0, "no active paid subscriber on the overview: the simulated ledger should have some")
    return len(tiles)


def compare_periods(b, chart, numbers, rows, series, what):
    """A chart of one row per period (no currency): every mark in `chart` (a selector) is one of `series` and
    equals the API row's member of its period, and every cell of the table in `numbers` too. Answers the marks."""
    marks = b.eval(f"[...document.querySelectorAll('{chart} [data-series]')].map(e => [e.dataset.series, e.dataset.period, e.dataset.value])")
    by = {(r["period_start"], k): r[k] for r in rows for k in r}
    check(len(marks) == len(rows) * len(series), f"{what} chart: {len(marks)} marks for {len(rows)} periods and {sorted(series)}")
    for s, period, value in marks:
        check(s in series and same(value, by[(period, s)]), f"{what} chart {s} {period}: page {value}, API {by.get((period, s))}")
    cells = b.eval(f"[...document.querySelectorAll('{numbers} td[data-key]')].map(e => [e.dataset.key, e.dataset.value, e.closest('tr').firstChild.dataset.value])")
    for k, value, period in cells:
        if k != "period_start": check(same(value, by[(period, k)]), f"{what} table {k} {period}: page {value}, API {by[(period, k)]}")
    return len(marks)


def check_churn(b):
    source = b.eval("document.getElementById('churn-chart').dataset.source")
    rows = api(source)["periods"]
    series = {"new", "reactivated", "churned_voluntary", "churned_involuntary", "churned_refund", "churned_other", "churn_rate"}
    compare_periods(b, "#churn-chart", "#churn-table", rows, series, "churn")
    check(sum(r["churned"] + r["new"] for r in rows) > 0, "the churn chart is empty on a simulated ledger")
    return source, len(rows)


def check_retention(b):
    source = b.eval("document.getElementById('retention-table').dataset.source")
    rows = api(source)["periods"]
    cells = b.eval("[...document.querySelectorAll('#retention-table td[data-month]')].map(e => [e.dataset.cohort, +e.dataset.month, e.dataset.subscribers, e.dataset.ratio])")
    expected = {(r["period_start"], x["month"]): x for r in rows for x in r["retained"]}
    check(len(cells) == len(expected) and len(cells) > 0, f"retention: {len(cells)} cells on the page, {len(expected)} in the API")
    for cohort, month, subs, ratio in cells:
        x = expected[(cohort, month)]
        check(same(subs, x["subscribers"]) and same(ratio, x["ratio"]), f"retention {cohort} M{month}: page {subs}/{ratio}, API {x}")
    sizes = b.eval("[...document.querySelectorAll('#retention-table td[data-key=cohort_size]')].map(e => +e.dataset.value)")
    check(sizes == [r["cohort_size"] for r in rows], f"cohort sizes: page {sizes}, API {[r['cohort_size'] for r in rows]}")
    return len(rows)


def compare_blocks(b, box, series, what):
    """The per-currency blocks of a box (revenue, refunds, MRR movement): each plotted mark and table cell equals
    the API's member of its currency, period and name, in the answer to the path the box names (data-source).
    `series` are the marks a period must have. Answers the API's rows and the number of marks compared."""
    source = b.eval(f"document.getElementById('{box}').dataset.source")
    rows = api(source)["periods"]
    by = {(r["currency"], r["period_start"], k): r[k] for r in rows for k in r}
    blocks = b.eval(f"[...document.querySelectorAll('#{box} .currency-block')].map(c => ({{currency: c.dataset.currency, "
                    "marks: [...c.querySelectorAll('svg [data-series]')].map(e => [e.dataset.series, e.dataset.period, e.dataset.value]), "
                    "cells: [...c.querySelectorAll('td[data-key]')].map(e => [e.dataset.key, e.dataset.value, e.closest('tr').firstChild.dataset.value])}))")
    currencies = sorted({r["currency"] for r in rows})
    check([x["currency"] for x in blocks] == currencies, f"{what} currencies: page {[x['currency'] for x in blocks]}, API {currencies}")
    n = 0
    for block in blocks:
        cur = block["currency"]
        check(len(block["marks"]) == len(series) * sum(1 for r in rows if r["currency"] == cur), f"{what} {cur}: {len(block['marks'])} marks")
        for s, period, value in block["marks"]:
            check(s in series and same(value, by[(cur, period, s)]), f"{what} {cur} {s} {period}: page {value}, API {by.get((cur, period, s))}")
            n += 1
        for k, value, period in block["cells"]:
            if k != "period_start": check(same(value, by[(cur, period, k)]), f"{what} table {cur} {k} {period}: page {value}")
    return source, rows, n


def check_revenue(b):
    _, rows, n = compare_blocks(b, "revenue-body", {"billings", "recognized", "refunds", "deferred_end"}, "revenue")
    check(n > 0 and sum(r["billings"] for r in rows) > 0, "the revenue page shows no billings on a simulated ledger")
    _, refunds, n = compare_blocks(b, "refunds-body", {"amount", "refund_rate"}, "refunds")
    check(n > 0 and sum(r["refunds"] for r in refunds) > 0, "the refunds chart shows no refund on a simulated ledger")
    return sorted({r["currency"] for r in rows})


MOVEMENT = {"new", "reactivation", "expansion", "transferred_in", "contraction", "churned", "transferred_out", "mrr_start", "mrr_end"}


def check_growth(b):
    """MRR movement (per currency or converted) and conversion to paying, as the API answers the same paths."""
    state = b.eval("document.getElementById('movement-body').dataset.state")
    movement = 0
    if state == "ready":
        _, rows, movement = compare_blocks(b, "movement-body", MOVEMENT, "MRR movement")
        check(not rows or sum(r["new"] for r in rows) > 0 or "store=" in b.eval("location.hash"), "MRR movement: nothing new on a simulated ledger")
    source = b.eval("document.getElementById('conversion-body').dataset.source")
    report = api(source)
    rows = report["periods"]
    series = {"subscribers"} | {f"conversion_rate_{d}d" for d in report["days"]}
    marks = compare_periods(b, "#conversion-body svg", "#conversion-body", rows, series, "conversion")
    check(sum(r["subscribers"] for r in rows) > 0, "the conversion chart is empty on a simulated ledger")
    return movement, marks


def check_ltv(b):
    """The LTV heat map: every cell's four figures and every cohort's size equal the API's, one table per currency."""
    source = b.eval("document.getElementById('ltv-table').dataset.source")
    answer = api(source)
    expected = {(r["period_start"], r["currency"], m["month"]): m for r in answer["periods"] for m in r["months"]}
    cells = b.eval("[...document.querySelectorAll('#ltv-table td[data-month]')].map(e => [e.dataset.cohort, e.dataset.currency, +e.dataset.month, "
                   "e.dataset.ltvGross, e.dataset.ltvProceeds, e.dataset.realizedGross, e.dataset.realizedProceeds, e.style.backgroundColor])")
    check(len(cells) == len(expected) and cells, f"LTV: {len(cells)} cells on the page, {len(expected)} in the API ({source})")
    for cohort, cur, month, *figures, colour in cells:
        m = expected[(cohort, cur, month)]
        check(all(same(f, m[k]) for f, k in zip(figures, ("ltv_gross", "ltv_proceeds", "realized_gross", "realized_proceeds"))),
              f"LTV {cohort} {cur} M{month}: page {figures}, API {m}")
        check(colour, f"LTV {cohort} {cur} M{month} has no heat colour")
    sizes = b.eval("[...document.querySelectorAll('#ltv-table tr[data-cohort]')].map(r => [r.dataset.cohort, r.dataset.currency, "
                   "+r.querySelector('td[data-key=cohort_size]').dataset.value])")
    expected_sizes = sorted([[r["period_start"], r["currency"], r["cohort_size"]] for r in answer["periods"]])
    check(sorted(sizes) == expected_sizes, f"LTV cohort sizes: page {sizes}, API {expected_sizes}")
    return source, len(cells)


def reload_page(b, hash_, setup=""):
    """Sets the fragment (and runs `setup`, e.g. filling the page's form and submitting it) and waits for the
    page's new load, not the state an earlier one left."""
    page = hash_.split("?")[0].split("/")[0]
    b.eval(f"document.getElementById('page-{page}').dataset.state = 'stale'")
    b.eval(f"location.hash = {json.dumps('#' + hash_)}; {setup}")
    return b.wait(f"(() => {{ const s = document.getElementById('page-{page}').dataset.state; "
                  "return s && s !== 'loading' && s !== 'stale' ? s : null; })()", timeout=120, what=f"page {hash_} to load")


def check_filters(b, console):
    """The filter bar: the currencies of the rate table, the stores, countries and products of the MRR report
    grouped by each; a currency without rates for the range said in words (422, no console error); one
    converted request (refunds of months the sample rates cover, in EUR) and the store filter on every
    report page, each compared with the API's answer to the same path."""
    check(go(b, "retention") == "ready", f"retention: {status_text(b, 'retention')}")
    b.wait("document.getElementById('filters').dataset.ready === 'true' && !document.getElementById('filters').hidden", what="the filter bar")
    offered = b.eval("Object.fromEntries([...document.querySelectorAll('#filters select')].map(s => [s.name, [...s.options].map(o => o.value).filter(Boolean)]))")
    rates = api("/v1/fx/rates")
    currencies = sorted({r["currency"] for r in rates["rates"]} | {"EUR"})
    check(offered["currency"] == currencies, f"currencies offered {offered['currency']}, rate table {currencies}")
    for dim in ("store", "country", "product_id"):
        values = sorted({c[dim] for c in api(f"/v1/reports/mrr?group_by={dim}")["currencies"] if c[dim] is not None})
        check(offered[dim] == values and values, f"{dim} values offered {offered[dim]}, MRR grouped {values}")

    # In EUR: the overview asks MRR now, which no sample rate covers: a readable message, not a console error.
    check(reload_page(b, "overview?currency=EUR") == "error", "the overview in EUR loaded without rates for now")
    text = status_text(b, "overview")
    check("cannot be shown in EUR" in text and "no exchange rate for" in text, f"the overview in EUR says {text!r}")
    # The Growth page draws its conversion chart and says why MRR movement cannot be shown in EUR.
    check(reload_page(b, "growth?currency=EUR") == "ready", f"growth in EUR: {status_text(b, 'growth')}")
    check(b.eval("document.getElementById('movement-body').dataset.state") == "error"
          and "cannot be shown in EUR" in b.eval("document.getElementById('movement-body').innerText"),
          "MRR movement in EUR without rates: no message")
    check_growth(b)
    console.assert_clean("a currency without rates", allow_statuses=(422,))
    shot(b, "14-growth-eur-missing-rate")

    # One converted request the sample rates answer: the refunds of February to April 2025, in EUR. Revenue over
    # the same months needs the rates of December 2024 (yearly plans bought then still recognise): said in words.
    setup = ("const f = document.querySelector('#page-revenue form[data-controls]'); f.elements.count.value = '3'; "
             "f.elements.ending.value = '2025-04-15'; f.requestSubmit();")
    reload_page(b, "revenue?currency=EUR", setup)
    b.wait("document.getElementById('page-revenue').dataset.state === 'ready' && "
           "document.getElementById('refunds-body').dataset.source.includes('from=2025-02-01')", what="the refunds in EUR")
    source, rows, n = compare_blocks(b, "refunds-body", {"amount", "refund_rate"}, "refunds in EUR")
    check("currency=EUR" in source and rows and {r["currency"] for r in rows} == {"EUR"} and n > 0, f"refunds in EUR: {source} answered {rows[:1]}")
    revenue = b.eval("document.getElementById('revenue-body').dataset.state")
    if revenue == "ready":
        compare_blocks(b, "revenue-body", {"billings", "recognized", "refunds", "deferred_end"}, "revenue in EUR")
    else:
        check("cannot be shown in EUR" in b.eval("document.getElementById('revenue-body').innerText"), "revenue in EUR: no message")
    console.assert_clean("revenue and refunds in EUR", allow_statuses=(422,))
    shot(b, "15-revenue-eur")
    b.eval("(() => { const f = document.querySelector('#page-revenue form[data-controls]'); f.elements.count.value = '12'; f.elements.ending.value = ''; })()")

    # The store filter, chosen in the bar, kept in the fragment and carried by the nav links to every report page.
    check(reload_page(b, "churn") == "ready", f"churn: {status_text(b, 'churn')}")
    b.wait("document.getElementById('filters').dataset.ready === 'true'", what="the filter bar")
    b.eval("document.getElementById('page-churn').dataset.state = 'stale'")
    b.eval("(() => { const s = document.querySelector('#filters select[name=store]'); s.value = 'google'; s.dispatchEvent(new Event('change')); })()")
    b.wait("location.hash === '#churn?store=google' && document.getElementById('page-churn').dataset.state === 'ready'", what="churn filtered by store")
    check("store=google" in b.eval("document.getElementById('churn-chart').dataset.source"), "churn: the store filter was not sent")
    check_churn(b)
    pages = []
    for page, compare in (("overview", check_overview), ("retention", lambda b: (check_retention(b), check_ltv(b))),
                          ("revenue", check_revenue), ("growth", check_growth)):
        href = b.eval(f"document.querySelector('#nav a[data-page={page}]').getAttribute('href')")
        check(href == f"#{page}?store=google", f"the nav link to {page} is {href!r}")
        b.eval(f"document.getElementById('page-{page}').dataset.state = 'stale'")
        b.click(f"#nav a[data-page={page}]")
        state = b.wait(f"(() => {{ const s = document.getElementById('page-{page}').dataset.state; return s && s !== 'loading' && s !== 'stale' ? s : null; }})()",
                       timeout=120, what=f"{page} filtered by store")
        check(state == "ready", f"{page} filtered by store: {status_text(b, page)}")
        sources = b.eval(f"[...document.querySelectorAll('#page-{page} [data-source]')].map(e => e.dataset.source)")
        check(sources and all("store=google" in s for s in sources), f"{page}: not every report was asked with store=google: {sources}")
        compare(b)
        pages.append(page)
    shot(b, "16-growth-store-google")
    b.eval("location.hash = '#overview'")
    return {"currencies": len(currencies), "refund_marks_in_eur": n, "filtered": pages}


def interesting_subscriber():
    """A production subscriber with a refund (a cut window) and, if possible, a credit and a billing issue."""
    streams, after = {}, 0
    while True:
        page = api(f"/v1/events?after_position={after}&limit=1000")
        for e in page["events"]:
            streams.setdefault(e["subscriber_id"], []).append(e)
        if len(page["events"]) < 1000: break
        after = page["next_after_position"]

    def score(events):  # and a history short enough to read in a screenshot
        types = {e["type"] for e in events}
        return (("refund" in types) * 100 + ("credit" in types) * 40 + ("billing_issue" in types) * 30
                + (events[0]["environment"] == "production") * 10 + (8 <= len(events) <= 20) * 20)
    sid = max(sorted(streams), key=lambda s: score(streams[s]))
    return sid, streams[sid], streams


def windows_key(ws):
    return sorted((w["entitlement"], w["start"], w["end"] or "", w["kind"], w["cut_at"] or "") for w in ws)


def page_windows(b):
    return sorted(tuple(x) for x in b.eval("[...document.querySelectorAll('#timeline g.window')].map(g => [g.dataset.entitlement, "
                                            "g.dataset.start, g.dataset.end, g.dataset.kind, g.dataset.cutAt])"))


def check_subscriber(b, sid, events):
    lookup(b, sid, "the subscriber lookup")
    positions = sorted(e["position"] for e in events)
    latest = api(f"/v1/subscribers/{urllib.parse.quote(sid)}/windows?as_of={positions[-1]}")["windows"]
    check(page_windows(b) == windows_key(latest), f"timeline windows differ from the API's: {page_windows(b)} vs {windows_key(latest)}")
    check(b.eval("document.querySelectorAll('#history tbody tr').length") == len(events), "the history does not list every event")
    check(b.eval("document.querySelectorAll('#timeline line.cut').length") > 0 or not any(w["cut_at"] for w in latest),
          "a cut window is not drawn cut")
    check(int(b.eval("document.getElementById('asof-slider').max")) == len(positions) - 1, "the slider does not range over the events")
    shot(b, "05-subscriber")

    # Back along the slider with the keyboard to just before the first refund: the ledger did not know it yet.
    refund = min(e["position"] for e in events if e["type"] == "refund") if any(e["type"] == "refund" for e in events) else positions[-1]
    target = max(0, positions.index(refund) - 1)
    b.eval("document.getElementById('asof-slider').focus()")
    for _ in range(len(positions) - 1 - target):
        b.key("ArrowLeft", vk=37)
    pos = positions[target]
    b.wait(f"document.getElementById('timeline').dataset.asOf === '{pos}' && document.getElementById('page-subscriber').dataset.state === 'ready'",
           what=f"the timeline as of position {pos}")
    earlier = api(f"/v1/subscribers/{urllib.parse.quote(sid)}/windows?as_of={pos}")["windows"]
    check(page_windows(b) == windows_key(earlier), f"as of {pos}: page {page_windows(b)}, API {windows_key(earlier)}")
    future = b.eval("[...document.querySelectorAll('#history tr.future')].map(r => +r.dataset.position)")
    check(future == [p for p in positions if p > pos], f"events after position {pos} are not greyed out: {future}")
    ents_path = b.eval("document.getElementById('entitlements').dataset.source")
    check(f"as_of={pos}" in ents_path, f"entitlements not read as of {pos}: {ents_path}")
    shot(b, "06-subscriber-as-of")

    # "What did they have on <date>": the at input, answered by /entitlements?at=.
    first_paid = min((e for e in events if e["type"] in ("purchase", "renewal")), key=lambda e: e["occurred_at"], default=events[0])
    day = first_paid["occurred_at"][:10]
    b.eval(f"(() => {{ const i = document.getElementById('at-input'); i.value = '{day}'; i.dispatchEvent(new Event('change')); }})()")
    b.wait(f"document.getElementById('entitlements').dataset.source.includes('at={day}') && "
           "document.getElementById('page-subscriber').dataset.state === 'ready'", what="the entitlements at a date")
    ents_path = b.eval("document.getElementById('entitlements').dataset.source")
    answer = api(ents_path)
    shown = b.eval("Object.fromEntries([...document.querySelectorAll('#entitlements tr[data-entitlement]')].map(r => [r.dataset.entitlement, r.dataset.active === 'true']))")
    check(shown == {e["entitlement"]: e["active"] for e in answer["entitlements"]}, f"entitlements at {day}: page {shown}, API {answer}")
    return len(events), pos


def check_stores(b, streams):
    """A Google Play subscriber's timeline beside an App Store one's: each window says the store it came from."""
    shown = []
    for store in ("google", "apple"):
        candidates = sorted(s for s, es in streams.items()
                            if es[0]["environment"] == "production" and {e["source"] for e in es} == {store}
                            and any(e["type"] in ("purchase", "renewal") for e in es) and len(es) <= 20)
        check(candidates, f"the simulated ledger has no {store} subscriber")
        sid = candidates[0]
        lookup(b, sid, f"the {store} subscriber")
        sources = b.eval("[...document.querySelectorAll('#timeline g.window')].map(g => g.dataset.eventSource)")
        check(sources and set(sources) == {store}, f"{store} subscriber {sid}: windows say they came from {sources}")
        shot(b, f"05-subscriber-{store}")
        shown.append(f"{store} {sid} ({len(sources)} windows)")
    return shown


def ts(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def lookup(b, sid, what):
    """A subscriber typed into the lookup form, as a newcomer does."""
    b.eval("location.hash = '#subscriber'")
    b.wait("document.body.dataset.page === 'subscriber'")
    b.eval("document.getElementById('lookup-id').value = ''")  # the previous lookup's id is still there
    b.type_into("#lookup-id", sid)
    b.key("Enter", vk=13, text="\r")
    b.wait(f"document.getElementById('timeline').dataset.source?.includes({json.dumps(urllib.parse.quote(sid))}) && "
           "document.getElementById('page-subscriber').dataset.state === 'ready'", timeout=60, what=what)


def check_demo_subscriber(b, streams):
    """The newcomer's path after the key and the overview: the subscriber tools/run --demo's banner names, opened by
    its link (#subscriber/<id>); what the timeline and the entitlements show must agree with what was bought."""
    with open(os.path.join(ROOT, "tools", "demo-subscriber.sql")) as f:
        query = f.read()
    sid = subprocess.run(["psql", "-X", "-A", "-t", "-q", args.url, "-c", query], capture_output=True, text=True, timeout=60,
                         check=True).stdout.strip()
    check(sid in streams, f"tools/demo-subscriber.sql names {sid!r}, not a subscriber of the simulated ledger")
    b.eval(f"location.hash = {json.dumps('#subscriber/' + urllib.parse.quote(sid))}")
    b.wait(f"document.getElementById('timeline').dataset.source?.includes({json.dumps(urllib.parse.quote(sid))}) && "
           "document.getElementById('page-subscriber').dataset.state === 'ready'", timeout=60, what="the demo banner's subscriber")
    events = streams[sid]
    bought = {e["data"].get("product_id") for e in events if e["type"] in ("purchase", "renewal")}
    shown = set(b.eval("[...document.querySelectorAll('#timeline g.window')].map(g => g.dataset.product).filter(p => p)"))
    check(shown <= bought, f"{sid}: the timeline shows products never bought: {sorted(shown - bought)} (bought {sorted(bought)})")
    rows = b.eval("[...document.querySelectorAll('#entitlements tr[data-entitlement]')].map(r => ({entitlement: r.dataset.entitlement, "
                  "active: r.dataset.active, renew: r.dataset.willRenew, product: r.dataset.product}))")
    check(rows, f"{sid}: no entitlement on the page")
    listed = {r["product"] for r in rows if r["product"]}
    check(listed <= bought, f"{sid}: the entitlements name products never bought: {sorted(listed - bought)}")
    stale = [r["entitlement"] for r in rows if r["active"] == "false" and r["renew"] == "true"]
    if stale:  # will_renew on lapsed entitlements is being fixed on another branch: noted, not failed
        NOTES.append(f"{sid}: 'will renew: yes' on inactive entitlement(s) {', '.join(stale)}")
    check(b.eval("document.querySelectorAll('#timeline line.cut').length") > 0, f"{sid}: the banner promises a refund cut; none is drawn")
    shot(b, "05-subscriber-demo")
    return sid


def check_timeline_range(b, streams):
    """A history that ended long ago fills the timeline's width; "show until today" stretches it to today."""
    now = time.time()
    old = sorted(s for s, es in streams.items() if len(es) <= 20 and now - max(ts(e["occurred_at"]) for e in es) > 300 * 86400)
    sid = next((s for s in old[:20] if all(w["end"] and now - ts(w["end"]) > 300 * 86400
                                             for w in api(f"/v1/subscribers/{urllib.parse.quote(s)}/windows")["windows"])), None)
    check(sid, "the simulated ledger has no subscriber whose history ended 300 days ago")
    lookup(b, sid, "a subscriber of long ago")
    svg = "document.querySelector('#timeline svg').dataset"
    zoomed = b.eval(f"({{range: {svg}.range, t0: {svg}.t0, t1: {svg}.t1, beyond: {svg}.atBeyond}})")
    last = max([ts(e["occurred_at"]) for e in streams[sid]])
    check(zoomed["range"] == "history" and zoomed["beyond"] == "true", f"{sid}: the timeline is not zoomed to the history: {zoomed}")
    span = ts(zoomed["t1"]) - ts(zoomed["t0"])
    check(ts(zoomed["t1"]) < now - 60 * 86400 and (last - ts(zoomed["t0"])) / span > 0.5,
          f"{sid}: the history (last event {time.strftime('%Y-%m-%d', time.gmtime(last))}) does not fill the timeline {zoomed}")
    b.click("#until-today")
    b.wait(f"document.querySelector('#timeline svg')?.dataset.range === 'today' && "
           "document.getElementById('page-subscriber').dataset.state === 'ready'", what="the timeline until today")
    today = b.eval(f"({{t1: {svg}.t1, beyond: {svg}.atBeyond}})")
    check(ts(today["t1"]) >= now - 86400 and today["beyond"] == "false", f"{sid}: 'show until today' does not reach today: {today}")
    shot(b, "05-subscriber-until-today")
    b.click("#until-today")  # back to the history for the lookups that follow
    b.wait("document.querySelector('#timeline svg')?.dataset.range === 'history'", what="the timeline zoomed again")
    return sid


def check_definitions(b):
    """Both report pages' number tables start open, and the terms that need one have a definition on screen."""
    check(go(b, "revenue") == "ready", f"revenue: {status_text(b, 'revenue')}")
    closed = b.eval("[...document.querySelectorAll('#page-revenue details, #page-churn details')].filter(d => !d.open).length")
    check(closed == 0, f"{closed} number table(s) start closed")
    terms = b.eval("[...document.querySelectorAll('#revenue-body dl.definitions dt')].map(d => d.dataset.term)")
    check({"refunded_unrecognized", "refunds_recognized"} <= set(terms), f"revenue definitions: {terms}")
    titled = b.eval("[...document.querySelectorAll('#revenue-body th[title]')].map(t => t.innerText)")
    check("refunded unrecognized" in titled and "refunds recognized" in titled, f"revenue column tooltips: {titled}")
    check(go(b, "churn") == "ready", f"churn: {status_text(b, 'churn')}")
    check(b.eval("!!document.querySelector('#churn-table dl.definitions dt[data-term=churned_other]')"), "churn: no definition of churned: other")
    check(b.eval("!!document.querySelector('#churn-legend .legend-item[title]')"), "churn: the legend's 'churned: other' has no tooltip")


def post_unlinked_stripe_event():
    """A signed Stripe invoice.paid whose customer names no subscriber (tools/stripe-sign's body without
    subscription_details.metadata.subscriber_id): the ledger keeps it waiting in the inbox."""
    printed = subprocess.run([os.path.join(ROOT, "tools", "stripe-sign"), "--secret", STRIPE_SECRET, "--url", BASE, "--price", "try.monthly",
                              "--print"], capture_output=True, text=True, timeout=60, check=True).stdout
    event = json.loads(printed.split("\n", 1)[1])
    event["data"]["object"]["subscription_details"]["metadata"] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(event, f)
    try:
        r = subprocess.run([os.path.join(ROOT, "tools", "stripe-sign"), "--secret", STRIPE_SECRET, "--url", BASE, "--body", f.name],
                           capture_output=True, text=True, timeout=60)
    finally:
        os.remove(f.name)
    check(r.returncode == 0 and '"pending"' in r.stdout, f"an unlinked Stripe event was not kept pending: {r.stdout.strip()} {r.stderr.strip()[-300:]}")
    return event["data"]["object"]["customer"]


def check_inbox(b):
    """The stores page: per store, the number of waiting messages and their top reasons are the API's; the
    store's link lists its messages as the API does, newest first."""
    customers = [post_unlinked_stripe_event() for _ in range(2)]
    check(go(b, "stores") == "ready", f"stores: {status_text(b, 'stores')}")
    lines = b.eval("[...document.querySelectorAll('#stores-lines [data-store]')].map(l => ({store: l.dataset.store, waiting: l.dataset.waiting, "
                   "shown: l.querySelector('.waiting-count').innerText, href: l.querySelector('a').getAttribute('href'), "
                   "reasons: [...l.querySelectorAll('[data-reason]')].map(r => [r.dataset.status, r.dataset.reason, +r.dataset.count])}))")
    check([x["store"] for x in lines] == ["apple", "google", "stripe"], f"store lines: {[x['store'] for x in lines]}")
    for x in lines:
        answer = api(f"/v1/stores/{x['store']}/inbox?limit=1")
        total = answer["waiting"]["total"]
        check(same(x["waiting"], total) and x["shown"] == f"{total:,}", f"{x['store']}: page says {x['shown']!r} ({x['waiting']}) waiting, API {total}")
        expected = [[r["status"], r["reason"], r["messages"]] for r in answer["top_reasons"]]
        check(x["reasons"] == expected, f"{x['store']} reasons: page {x['reasons']}, API {expected}")
        check(x["href"] == f"#stores/{x['store']}", f"{x['store']}: the line links to {x['href']!r}")
    stripe = next(x for x in lines if x["store"] == "stripe")
    check(int(stripe["waiting"]) >= 2, f"the two unlinked Stripe events are not counted: {stripe}")
    check(any(r[0] == "pending" and r[1].startswith("customer … names no subscriber") and r[2] >= 2 for r in stripe["reasons"]),
          f"the Stripe line does not say why its events wait: {stripe['reasons']}")
    b.click("#stores-lines [data-store=stripe] a")
    b.wait("document.getElementById('stores-list').dataset.store === 'stripe' && document.getElementById('page-stores').dataset.state === 'ready'",
           what="the Stripe inbox list")
    source = b.eval("document.getElementById('stores-list').dataset.source")
    listed = api(source)["messages"]
    rows = b.eval("[...document.querySelectorAll('#stores-list tr[data-message]')].map(r => [r.dataset.message, r.dataset.status, "
                  "r.querySelector('td.reason').innerText])")
    check(rows == [[m["message_id"], m["status"], m["reason"] or "—"] for m in listed], f"Stripe inbox rows: page {rows}, API {listed}")
    check(any(c in r[2] for r in rows for c in customers), f"no row names its customer: {rows}")
    shot(b, "11-stores")
    return f"stripe {stripe['waiting']} waiting"


def run_reconciliations():
    """Two recorded runs: the App Store against the demo data (its purchases carry simulated ids, which the App
    Store cannot know: each is recorded as not comparable, before any request), and Stripe (no Stripe purchase
    in the demo: a run that compares nothing)."""
    key = os.path.join(GOOGLE_TRY_DIR, "apple-key.p8")
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
                   check=True, capture_output=True, timeout=60)
    since = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=45)).strftime("%Y-%m-%d")
    closed = f"http://127.0.0.1:{free_port()}"
    r = subprocess.run([args.bin, "reconcile", "apple", "--database-url", args.url, "--since", since, "--apple-issuer-id",
                        "57246542-96fe-1a63-e053-0824d011072a", "--apple-key-id", "2X9R4HXF34", "--apple-private-key", key,
                        "--apple-bundle-id", "com.example.app", "--apple-api-base-url", closed],
                       capture_output=True, text=True, timeout=600)
    check(r.returncode == 0 and "reconciliation" in r.stdout, f"reconcile apple: {r.stdout[-300:]} {r.stderr[-500:]}")
    r = subprocess.run([args.bin, "reconcile", "stripe", "--database-url", args.url, "--stripe-api-key", "sk_test_browser",
                        "--stripe-api-base-url", closed], capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"reconcile stripe: {r.stdout[-300:]} {r.stderr[-500:]}")


def check_reconciliations(b):
    """The reconciliations page: each run's numbers are the API's; a run's differences are the API's, in order."""
    run_reconciliations()
    check(go(b, "reconciliations") == "ready", f"reconciliations: {status_text(b, 'reconciliations')}")
    listed = api("/v1/reconciliations?limit=50")["runs"]
    rows = b.eval("[...document.querySelectorAll('#reconciliations-runs tr[data-run]')].map(r => ({id: r.dataset.run, status: r.dataset.status, "
                  "n: Object.fromEntries([...r.querySelectorAll('[data-field]')].map(c => [c.dataset.field, c.innerText]))}))")
    check([x["id"] for x in rows] == [x["id"] for x in listed], f"runs: page {[x['id'] for x in rows]}, API {[x['id'] for x in listed]}")
    fields = ["purchases_compared", "differences_found", "repaired", "unrepaired", "events_appended"]
    for shown, run in zip(rows, listed):
        check(shown["status"] == run["status"], f"run {run['id']}: page says {shown['status']}, API {run['status']}")
        for f in fields:
            check(shown["n"].get(f) == f"{run[f]:,}", f"run {run['id']} {f}: page {shown['n'].get(f)!r}, API {run[f]}")
    apple = next(x for x in listed if x["store"] == "apple")
    check(apple["differences_found"] > 0 and apple["unrepaired"] == apple["differences_found"], f"the App Store run found nothing: {apple}")
    check(go(b, f"reconciliations/{apple['id']}") == "ready", f"a run: {status_text(b, 'reconciliations')}")
    b.wait(f"!!document.querySelector('#reconciliations-differences [data-run=\"{apple['id']}\"]')", what="the run's differences")
    detail = api(f"/v1/reconciliations/{apple['id']}?limit=1000")
    shown = b.eval("[...document.querySelectorAll('#reconciliations-differences tr[data-ordinal]')].map(r => [+r.dataset.ordinal, r.dataset.outcome, "
                   "r.querySelector('td.reason').innerText])")
    expected = [[d["ordinal"], d["outcome"], d["reason"] or "—"] for d in detail["differences"]]
    check(shown == expected, f"differences: page {shown[:3]}…, API {expected[:3]}…")
    check(len(shown) == min(apple["differences_found"], 1000), f"{len(shown)} differences shown, the run found {apple['differences_found']}")
    shot(b, "12-reconciliations")
    return f"{len(listed)} runs, {len(shown)} differences"


def check_try_it():
    """docs/stripe.md's and docs/google.md's "Try it in five minutes" with their tools against this server (no
    browser needed): a catalog entry, a signed Stripe event and a signed Google push, each subscriber entitled."""
    admin_call("PUT", "/v1/catalog/products/try.monthly", {"entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M",
                                                          "price_minor": 999, "currency": "USD", "commission_rate": "0.15"})
    runs = [("stripe", "try-stripe", [os.path.join(ROOT, "tools", "stripe-sign"), "--secret", STRIPE_SECRET, "--url", BASE,
                                      "--subscriber", "try-stripe", "--price", "try.monthly"]),
            ("google", "try-google", [os.path.join(ROOT, "tools", "google-push"), "--subscriber", "try-google", "--product", "try.monthly"])]
    for store, sid, command in runs:
        r = subprocess.run(command, capture_output=True, text=True, timeout=90, env={**os.environ, "SUBLEDGER_GOOGLE_TRY_DIR": GOOGLE_TRY_DIR})
        # Stripe answers "applied"; a Google push is answered once recorded ("received", 202) and the tool waits
        # for the ledger to resolve it in the background.
        check(r.returncode == 0 and ('"applied"' in r.stdout or '"received"' in r.stdout), f"{store} try-it: {r.stdout.strip()} {r.stderr.strip()[-600:]}")
        ents = api(f"/v1/subscribers/{sid}/entitlements")["entitlements"]
        check(any(e["entitlement"] == "pro" and e["active"] for e in ents), f"{store} try-it: {sid} is not entitled: {ents}")
    return [s for s, _, _ in runs]


def check_audit(b):
    checkpoints = api("/v1/audit/checkpoints")["checkpoints"]
    shown = b.eval("document.getElementById('checkpoint').dataset.checkpointId")
    check(shown == (str(checkpoints[-1]["checkpoint_id"]) if checkpoints else ""), f"latest checkpoint: page {shown!r}")
    b.click("#verify-now")
    b.wait("['ready', 'error'].includes(document.getElementById('verify-result').dataset.state)", timeout=120, what="verify")
    check(b.eval("document.getElementById('verify-result').dataset.state") == "ready", "verify failed on the page")
    ok = b.eval("document.getElementById('verify-result').dataset.ok")
    check(ok == "true" and api("/v1/audit/verify")["ok"], f"verify: page ok={ok}")
    shot(b, "07-audit")


class Refusing(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that answers every delivery 500, so the page has failed attempts to list."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(500); self.send_header("Content-Length", "0"); self.end_headers()


def admin_call(method, path, body):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.request(method, path, body=json.dumps(body), headers={"Authorization": f"Bearer {args.admin}"})
    r = c.getresponse(); out = r.read(); c.close()
    check(r.status in (200, 201), f"{method} {path} answered {r.status}: {out[:300]!r}")
    return json.loads(out)


def check_webhooks(b):
    """Endpoints with their status and lag as the API reports them, a failing endpoint's attempts, and a replay."""
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = admin_call("POST", "/v1/webhooks", {"url": f"http://127.0.0.1:{receiver.server_address[1]}/hook", "description": "refuses everything"})
    head = api("/v1/events?after_position=0&limit=1")["events"][0]
    admin_call("POST", "/v1/events", {**{k: head[k] for k in ("subscriber_id", "occurred_at", "environment")},
               "type": "credit", "source": "browser-test", "idempotency_key": "browser-test-webhook",
               "data": {"entitlement": "pro", "duration": "P1D", "reason": "webhook page", "granted_by": "browser-test"}})
    deadline = time.time() + 30
    while not api(f"/v1/webhooks/{hook['id']}/deliveries")["deliveries"]:
        check(time.time() < deadline, "no delivery attempt was logged"); time.sleep(0.2)
    check(go(b, "webhooks") == "ready", f"webhooks: {status_text(b, 'webhooks')}")
    listed = api("/v1/webhooks")["webhooks"]
    rows = b.eval("[...document.querySelectorAll('#webhooks-table tr[data-endpoint]')].map(r => ({id: r.dataset.endpoint, status: r.dataset.status}))")
    check([r["id"] for r in rows] == [e["id"] for e in listed], f"webhook rows {rows} vs API {[e['id'] for e in listed]}")
    failures = b.eval("document.querySelectorAll('#webhooks-failures tr[data-delivery]').length")
    check(failures >= 1, "the page shows no failed attempt of an endpoint that answers 500")
    shot(b, "10-webhooks")
    # Disabled by an admin: the page says why (status_reason) and how many messages are held, as the API does.
    admin_call("PATCH", f"/v1/webhooks/{hook['id']}", {"enabled": False})
    b.eval("document.getElementById('webhooks-refresh').requestSubmit()")
    row = f"document.querySelector('#webhooks-table tr[data-endpoint=\"{hook['id']}\"]')"
    b.wait(f"{row}?.dataset.status === 'disabled' && document.getElementById('page-webhooks').dataset.state === 'ready'",
           what="the disabled endpoint")
    endpoint = api(f"/v1/webhooks/{hook['id']}")
    reason = b.eval(f"{row}.querySelector('.status-reason')?.innerText")
    check(endpoint["status_reason"] and reason == endpoint["status_reason"], f"status_reason: page {reason!r}, API {endpoint['status_reason']!r}")
    held = b.eval(f"{row}.querySelector('[data-held]').dataset.held")
    check(same(held, endpoint["held_messages"]), f"held_messages: page {held}, API {endpoint['held_messages']}")
    b.eval("window.confirm = () => true")
    b.eval(f"document.querySelector('form.replay[data-endpoint=\"{hook['id']}\"] input').value = '1'")
    b.eval(f"document.querySelector('form.replay[data-endpoint=\"{hook['id']}\"] button').click()")
    b.wait(f"(() => {{ const r = document.querySelector('#webhooks-table tr[data-endpoint=\"{hook['id']}\"]'); "
           "return r && document.getElementById('page-webhooks').dataset.state === 'ready' && Number(r.dataset.lag) > 1; })()",
           what="the replayed endpoint's lag")
    # The walk restarted at position 1: the worker may already have tried, held and passed message 1 by now (the
    # receiver refuses everything), so the proof is an attempt at position 1, which only the replay can cause.
    deadline = time.time() + 30
    while not any(d["position"] == 1 for d in api(f"/v1/webhooks/{hook['id']}/deliveries")["deliveries"]):
        check(time.time() < deadline, "the replay did not restart delivery at position 1"); time.sleep(0.2)
    receiver.shutdown()
    return len(listed)


def check_roles(b, console):
    """401 and 403 in words, not blank charts."""
    forget(b)
    enter_key(b, args.analyst)
    check(go(b, "audit") == "error", "an analyst key read the audit page")
    text = status_text(b, "audit")
    check("role cannot read event history" in text, f"audit with an analyst key says {text!r}")
    check(not b.eval("document.getElementById('checkpoint').innerText.trim()"), "the admin key's checkpoint is still on the page")
    shot(b, "08-audit-403-analyst")
    check(go(b, "overview") == "ready", "an analyst key could not read the overview")
    check(go(b, "stores") == "error", "an analyst key read the stores' inboxes")
    text = status_text(b, "stores")
    check("role cannot read the stores' inboxes" in text, f"stores with an analyst key says {text!r}")
    forget(b)
    enter_key(b, args.auditor)
    check(go(b, "churn") == "error", "an auditor key read the churn report")
    text = status_text(b, "churn")
    check("role cannot read reports" in text, f"churn with an auditor key says {text!r}")
    forget(b)
    b.eval("location.hash = '#revenue'")
    b.type_into("#key-input", "slk_" + "0" * 64)
    b.key("Enter", vk=13, text="\r")
    b.wait("!document.getElementById('login').hidden && !!document.querySelector('#login .status')", what="the key form after a 401")
    text = b.eval("document.querySelector('#login .status').innerText")
    check("refused" in text, f"after a 401 the page says {text!r}")
    check(b.eval("sessionStorage.length") == 0, "a refused key stayed in sessionStorage")
    shot(b, "09-unknown-key")
    console.assert_clean("role checks", allow_statuses=(401, 403))


def main():
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.endswith(".png"): os.remove(os.path.join(args.out, f))
    google_flags = subprocess.run([os.path.join(ROOT, "tools", "google-push"), "flags", "--url", BASE, "--stand-in-port", str(free_port())],
                                  capture_output=True, text=True, timeout=120, check=True,
                                  env={**os.environ, "SUBLEDGER_GOOGLE_TRY_DIR": GOOGLE_TRY_DIR}).stdout.split()
    # The Google stand-in holds its port from now on (the try-it push hands it the purchase, as docs/google.md's
    # second terminal does): picked free here but bound only when the push ran, minutes later, the port had once been
    # taken meanwhile by a listener of the browser's, and the push failed.
    stand_in = subprocess.Popen([os.path.join(ROOT, "tools", "google-push"), "stand-in"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "SUBLEDGER_GOOGLE_TRY_DIR": GOOGLE_TRY_DIR})
    with open(os.path.join(GOOGLE_TRY_DIR, "config.json")) as f:
        stand_in_port = json.load(f)["stand_in_port"]
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", stand_in_port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    server = subprocess.Popen([args.bin, "serve", "--database-url", args.url, "--port", str(PORT), "--log-level", "error",
                               "--webhooks-allow-http", "--webhooks-allow-private", "--stripe-webhook-secret", STRIPE_SECRET, *google_flags],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    b = None
    started = time.time()
    try:
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1); c.request("GET", "/ready")
                if c.getresponse().status == 200: break
            except OSError:
                pass
            time.sleep(0.05)
        b = Browser(args.chromium, driver=args.chromedriver)
        console = Console(b)
        b.navigate(f"{BASE}/dashboard")
        check(b.eval("document.title") == "subledger dashboard", "the dashboard did not load")
        enter_key(b, args.admin)
        check(args.admin not in b.eval("location.href"), "the key is in the page's URL")
        check(b.eval("sessionStorage.getItem('subledger.dashboard.key')") == args.admin, "the key is not kept in sessionStorage")
        check(go(b, "overview") == "ready", f"overview: {status_text(b, 'overview')}")
        tiles = check_overview(b)
        shot(b, "01-overview")
        check(go(b, "churn") == "ready", f"churn: {status_text(b, 'churn')}")
        source, periods = check_churn(b)
        shot(b, "02-churn")
        b.eval("(() => { const s = document.querySelector('#page-churn select[name=interval]'); s.value = 'week'; s.dispatchEvent(new Event('change')); })()")
        b.wait("document.getElementById('churn-chart').dataset.source.includes('interval=week') && "
               "document.getElementById('page-churn').dataset.state === 'ready'", what="the weekly churn chart")
        _, weeks = check_churn(b)
        b.eval("document.querySelector('#page-churn input[name=entitlement]').value = ''")
        b.type_into("#page-churn input[name=entitlement]", "pro")
        b.key("Enter", vk=13, text="\r")
        b.wait("document.getElementById('churn-chart').dataset.source.includes('entitlement=pro') && "
               "document.getElementById('page-churn').dataset.state === 'ready'", what="the churn chart of one entitlement")
        check_churn(b)
        check(go(b, "retention") == "ready", f"retention: {status_text(b, 'retention')}")
        cohorts = check_retention(b)
        _, ltv_cells = check_ltv(b)
        shot(b, "03-retention")
        check(go(b, "revenue") == "ready", f"revenue: {status_text(b, 'revenue')}")
        currencies = check_revenue(b)
        shot(b, "04-revenue")
        check(go(b, "growth") == "ready", f"growth: {status_text(b, 'growth')}")
        movement, conversion = check_growth(b)
        shot(b, "13-growth")
        filters = check_filters(b, console)
        check_definitions(b)
        sid, events, streams = interesting_subscriber()
        demo = check_demo_subscriber(b, streams)
        n_events, asof = check_subscriber(b, sid, events)
        stores = check_stores(b, streams)
        old_sid = check_timeline_range(b, streams)
        check(go(b, "audit") == "ready", f"audit: {status_text(b, 'audit')}")
        check_audit(b)
        hooks = check_webhooks(b)
        tried = check_try_it()
        inbox = check_inbox(b)
        recon = check_reconciliations(b)
        console.assert_clean("admin pages")
        api_calls = [r for r in requests_made(b) if "/v1/" in r["url"]]
        check(api_calls, "chromedriver's performance log shows no API request: the URL and header checks would see nothing")
        leaked = [r["url"] for r in requests_made(b) if args.admin in r["url"]]
        check(not leaked, f"the key appeared in a URL: {leaked}")
        unauth = [r["url"] for r in api_calls if "Authorization" not in r.get("headers", {})]
        check(not unauth, f"API calls without the key: {unauth[:3]}")
        check_roles(b, console)
        say(f"ok in {time.time() - started:.0f}s: overview ({tiles} tiles), churn ({periods} months, {weeks} weeks, entitlement pro), "
            f"retention ({cohorts} cohorts, LTV {ltv_cells} cells), revenue and refunds ({', '.join(currencies)}), "
            f"growth ({movement} MRR movement marks, {conversion} conversion marks), filters ({filters}), subscriber {sid} ({n_events} events, "
            f"as of {asof}), demo banner's subscriber {demo}, stores ({'; '.join(stores)}), timeline zoomed to {old_sid}'s history, "
            f"definitions, audit, webhooks ({hooks} endpoint, failures, replay), try it ({', '.join(tried)}), inboxes ({inbox}), reconciliations ({recon}), 401/403 messages; "
            f"screenshots in {args.out}")
        for n in NOTES: say("note (not a failure):", n)
    except (Failed, TimeoutError, RuntimeError, ConnectionError, WebDriverException, DriverUnreachable) as e:
        say("FAILED:", e)
        if b:
            try: b.screenshot(os.path.join(args.out, "failure.png")); say(f"screenshot of the failure: {args.out}/failure.png")
            except Exception: pass
            try: b.pump(0)  # what the browser reported up to the failure
            except Exception: pass
            for p in Console(b).problems(): say("  browser:", p)
        sys.exit(1)
    finally:
        if b: b.close()
        server.terminate()
        server.wait(timeout=15)
        stand_in.terminate()
        stand_in.wait(timeout=15)


main()
