#!/usr/bin/env python3
"""Every history tools/simulate writes is one a subscriber could have had (run by tools/simulate-check).

For several seeds, sizes and "now"s (the one tools/run --demo uses among them), each subscriber's events are
read in the order they are written and checked:

  - events are written in the order they occurred, none dated after "now" (occurred_at, period_start) nor
    before the subscriber's first purchase;
  - a purchase or renewal's period ends after it starts, and starts when it occurred; a renewal continues an
    earlier transaction of the same product, and never one that has expired since (after a lapse comes a purchase);
  - every product an auto_renew_changed, billing_issue or expiration names was bought before by that subscriber;
    an expiration comes no earlier than the end of that product's last period, a billing issue's grace ends after it;
  - a refund names an earlier transaction of the subscriber, in its currency, and refunds never add up to more
    than its price; a refund with reason "upgrade" is followed at once, at the same time, by the purchase of
    another plan;
  - idempotency keys are unique, and a subscriber keeps one source and one environment.

Usage: tools/simulate_check.py [--subscribers N] [--seeds 1,2,3]   (exit 1 and the first problems on failure)
Standard library only.
"""
import argparse, collections, datetime as dt, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse(text):
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def check_subscriber(events, now, problems):
    sub = events[0]["subscriber_id"]

    def bad(e, why):
        problems.append(f"{sub}: {e['type']} at {e['occurred_at']}: {why}")

    first_purchase = next((e for e in events if e["type"] == "purchase"), None)
    if first_purchase is None:
        bad(events[0], "the subscriber has no purchase")
        return
    start = parse(first_purchase["occurred_at"])
    txns = {}  # transaction_id → (event, refunded so far)
    bought = {}  # product → the subscriber's latest purchase or renewal of it
    expired = set()  # products whose last transaction has expired since
    sources = {(e["source"], e["environment"]) for e in events}
    if len(sources) != 1:
        bad(events[0], f"several sources or environments: {sorted(sources)}")
    for i, e in enumerate(events):
        at, d, type_ = parse(e["occurred_at"]), e["data"], e["type"]
        if at > now:
            bad(e, f"dated after now ({iso(now)})")
        if i and e["occurred_at"] < events[i - 1]["occurred_at"]:
            bad(e, f"written after an event that occurred later ({events[i - 1]['type']} at {events[i - 1]['occurred_at']})")
        if at < start:
            bad(e, f"dated before the subscriber's first purchase ({iso(start)})")
        if type_ in ("purchase", "renewal"):
            product = d["product_id"]
            if d["kind"] == "auto_renewable":
                ps, pe = parse(d["period_start"]), parse(d["period_end"])
                if pe <= ps:
                    bad(e, f"period_end {d['period_end']} is not after period_start {d['period_start']}")
                if ps != at:
                    bad(e, f"period_start {d['period_start']} is not when it occurred")
                if ps > now:
                    bad(e, f"period starts after now ({iso(now)})")
            if type_ == "renewal":
                original = txns.get(d["original_transaction_id"])
                if product not in bought or original is None or original[0]["data"]["product_id"] != product:
                    bad(e, f"renews {product} (original {d['original_transaction_id']}) never bought before")
                elif product in expired:
                    bad(e, f"renews {product} after it expired (a lapsed subscriber buys again)")
                elif bought[product]["data"].get("period_end") and at < parse(bought[product]["data"]["period_end"]):
                    bad(e, f"renews {product} before its current period ends ({bought[product]['data']['period_end']})")
            if d["transaction_id"] in txns:
                bad(e, f"transaction {d['transaction_id']} recorded twice")
            txns[d["transaction_id"]] = [e, 0]
            bought[product] = e
            expired.discard(product)
        elif type_ in ("auto_renew_changed", "billing_issue", "expiration"):
            product = d["product_id"]
            if product not in bought:
                bad(e, f"names {product}, never bought before")
                continue
            last = bought[product]["data"]
            if type_ == "expiration":
                if product in expired:
                    bad(e, f"{product} expires twice")
                if last.get("period_end") and at < parse(last["period_end"]):
                    bad(e, f"{product} expires before its period ends ({last['period_end']})")
                expired.add(product)
            elif product in expired:
                bad(e, f"names {product}, which has expired")
            if type_ == "billing_issue" and parse(d["grace_until"]) <= at:
                bad(e, f"grace_until {d['grace_until']} is not after it")
        elif type_ == "refund":
            t = txns.get(d["transaction_id"])
            if t is None:
                bad(e, f"refunds {d['transaction_id']}, not an earlier transaction of this subscriber")
                continue
            bought_at, paid = parse(t[0]["occurred_at"]), t[0]["data"]
            if at < bought_at:
                bad(e, f"refunds {d['transaction_id']} before it was bought ({t[0]['occurred_at']})")
            if d["currency"] != paid["currency"]:
                bad(e, f"refunds in {d['currency']} what was paid in {paid['currency']}")
            t[1] += d["amount_minor"]
            if t[1] > paid["price_minor"]:
                bad(e, f"refunds {t[1]} in all of {d['transaction_id']}, which cost {paid['price_minor']}")
            if d.get("reason") == "upgrade":
                nxt = events[i + 1] if i + 1 < len(events) else None
                if nxt is None or nxt["type"] != "purchase" or nxt["occurred_at"] != e["occurred_at"]:
                    bad(e, f"an upgrade's refund not followed at once by a purchase (next: {nxt and nxt['type']} at {nxt and nxt['occurred_at']})")
                elif nxt["data"]["product_id"] == paid["product_id"]:
                    bad(e, f"an upgrade from {paid['product_id']} to the same plan")
        elif type_ == "credit":
            pass
        else:
            bad(e, "an event type tools/simulate does not write")


def run(subscribers, seed, start, months, now):
    cmd = [os.path.join(HERE, "simulate"), "--subscribers", str(subscribers), "--months", str(months), "--seed", str(seed), "--start", start]
    if now is not None:
        cmd += ["--now", iso(now)]
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    events = [json.loads(line) for line in out.splitlines()]
    # Without --now, "now" is when it ran: checked against the end of the run (a second's slack).
    limit = now if now is not None else dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    problems, keys, by_sub = [], collections.Counter(e["idempotency_key"] for e in events), collections.defaultdict(list)
    problems += [f"idempotency key {k} used {n} times" for k, n in keys.items() if n > 1]
    for e in events:
        by_sub[e["subscriber_id"]].append(e)
    for evs in by_sub.values():
        check_subscriber(evs, limit, problems)
    types = collections.Counter(e["type"] for e in events)
    upgrades = sum(1 for e in events if e["type"] == "refund" and e["data"].get("reason") == "upgrade")
    latest = max((e["occurred_at"] for e in events), default="-")
    label = f"seed {seed}, {subscribers} subscribers, {months} months from {start}, now {iso(now) if now else 'when run (' + iso(before) + ')'}"
    summary = (f"{len(events)} events of {len(by_sub)} subscribers ({types['purchase']} purchases, {types['renewal']} renewals, "
               f"{types['expiration']} expirations, {types['refund']} refunds of which {upgrades} upgrades), latest {latest}")
    return label, summary, problems


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subscribers", type=int, default=2000)
    p.add_argument("--seeds", default="1,2,3,7,11")
    a = p.parse_args()
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    month1 = now.replace(day=1, hour=0, minute=0, second=0)
    # tools/run --demo's population: 24 months from the first of the month 23 months ago, seen now.
    demo_start = month1
    for _ in range(23):
        demo_start = (demo_start - dt.timedelta(days=1)).replace(day=1)
    cases = [(a.subscribers, 1, demo_start.strftime("%Y-%m-%d"), 24, None)]
    for n, seed in enumerate(int(s) for s in a.seeds.split(",")):
        # A population seen in its middle, one seen after it ended, and one of the defaults seen now.
        cases.append((a.subscribers, seed, "2024-07-01", 24, dt.datetime(2025, 5, 17, 13, 5, 0, tzinfo=dt.timezone.utc) + dt.timedelta(days=37 * n)))
        cases.append((a.subscribers // 4, seed, "2023-01-01", 12, now))
        cases.append((a.subscribers // 4, seed, "2025-01-01", 36, None))
    failed = False
    for case in cases:
        label, summary, problems = run(*case)
        print(f"simulate-check: {label}: {summary}: {'ok' if not problems else f'{len(problems)} PROBLEMS'}")
        for line in problems[:20]:
            print(f"  {line}")
        failed = failed or bool(problems)
    if failed:
        sys.exit("simulate-check: FAILED: tools/simulate wrote histories no subscriber could have had")
    print(f"simulate-check: ok, {len(cases)} populations")


main()
