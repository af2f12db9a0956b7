// Calendar periods and number formatting. Everything is UTC, like the ledger's reports: months start on
// the 1st, weeks on Monday, days at midnight UTC.

const DAY = 86400000;

/** The start of the period of `interval` that contains `date`. */
export function periodStart(date, interval) {
  const d = new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate()));
  if (interval === "month") return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
  if (interval === "week") return new Date(d.getTime() - ((d.getUTCDay() + 6) % 7) * DAY);
  return d;
}

/** `start` moved by `n` periods (n may be negative). */
export function addPeriods(start, interval, n) {
  if (interval === "month") return new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + n, 1));
  return new Date(start.getTime() + n * (interval === "week" ? 7 : 1) * DAY);
}

/** The `count` periods ending with the one that contains `ending`: `{from, to, starts}`, `to` exclusive. */
export function lastPeriods(interval, count, ending = new Date()) {
  const current = periodStart(ending, interval);
  const from = addPeriods(current, interval, -(count - 1));
  const starts = [];
  for (let i = 0; i < count; i++) starts.push(addPeriods(from, interval, i));
  return { from, to: addPeriods(current, interval, 1), starts };
}

/** `YYYY-MM-DD` of a date (UTC), as the reports take `from`/`to`. */
export function ymd(date) { return date.toISOString().slice(0, 10); }

/** RFC 3339 without milliseconds. */
export function rfc3339(date) { return date.toISOString().replace(/\.\d{3}Z$/, "Z"); }

/** A date input's value (or today) as a Date at 00:00 UTC. */
export function dateInput(value) {
  return value ? new Date(`${value}T00:00:00Z`) : new Date();
}

const monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** A short label for a period starting at `iso`: "Mar 2026", "W 2026-03-02", "2026-03-02". */
export function periodLabel(iso, interval) {
  const d = new Date(iso);
  if (interval === "month") return `${monthNames[d.getUTCMonth()]} ${d.getUTCFullYear()}`;
  return iso.slice(0, 10);
}

export function shortPeriodLabel(iso, interval) {
  const d = new Date(iso);
  if (interval === "month") return `${monthNames[d.getUTCMonth()]} ${String(d.getUTCFullYear()).slice(2)}`;
  return `${monthNames[d.getUTCMonth()]} ${d.getUTCDate()}`;
}

/** "2026-03-01 10:00:00Z" — compact, unambiguous, UTC. */
export function when(iso) {
  if (!iso) return "—";
  return iso.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** "2026-03-01 10:00" — to the minute, for dense tables (the exact time is in the cell's title). */
export function minute(iso) {
  return iso ? iso.replace("T", " ").slice(0, 16) : "—";
}

const integer = new Intl.NumberFormat("en-US");
export function count(n) { return n === null || n === undefined ? "—" : integer.format(n); }

export function percent(r, digits = 1) {
  return r === null || r === undefined ? "—" : `${(r * 100).toFixed(digits)}%`;
}

const fractionCache = new Map();
/** Digits after the decimal point of a currency's minor unit (2 for USD, 0 for JPY). */
export function minorDigits(currency) {
  if (!fractionCache.has(currency)) {
    let digits = 2;
    try {
      digits = new Intl.NumberFormat("en-US", { style: "currency", currency }).resolvedOptions().maximumFractionDigits;
    } catch { digits = 2; }
    fractionCache.set(currency, digits);
  }
  return fractionCache.get(currency);
}

/** Minor units (an integer from the API) shown as money: 123456 USD → "$1,234.56". */
export function money(minor, currency, compact = false) {
  if (minor === null || minor === undefined) return "—";
  const digits = minorDigits(currency);
  const major = minor / 10 ** digits;
  try {
    return new Intl.NumberFormat("en-US", {
      style: "currency", currency,
      notation: compact ? "compact" : "standard",
      maximumFractionDigits: compact ? 1 : digits, minimumFractionDigits: compact ? 0 : digits,
    }).format(major);
  } catch {
    return `${major.toFixed(digits)} ${currency}`;
  }
}

/** Adds an ISO 8601 duration (P1Y2M10DT2H30M, P3W) to a date, in UTC calendar arithmetic. */
export function addDuration(date, iso) {
  const m = /^P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$/.exec(iso ?? "");
  if (!m) return null;
  const [y, mo, w, d, h, mi, s] = m.slice(1).map((x) => Number(x ?? 0));
  const day = date.getUTCDate();
  const target = new Date(Date.UTC(date.getUTCFullYear() + y, date.getUTCMonth() + mo, 1,
    date.getUTCHours(), date.getUTCMinutes(), date.getUTCSeconds()));
  const last = new Date(Date.UTC(target.getUTCFullYear(), target.getUTCMonth() + 1, 0)).getUTCDate();
  target.setUTCDate(Math.min(day, last));
  return new Date(target.getTime() + ((w * 7 + d) * 86400 + h * 3600 + mi * 60 + s) * 1000);
}
