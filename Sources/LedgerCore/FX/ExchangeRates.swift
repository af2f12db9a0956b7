/// Exchange rates as reference data (docs/reports.md, "Reporting currency"): units of a currency per 1 EUR on
/// a UTC date, as the European Central Bank publishes them. Pure: parsing, limits, look-up and conversion;
/// PostgreSQL keeps the versions (LedgerStore/FX/FXStore.swift).

/// A civil date as days since 1970-01-01 (UTC).
public struct FXDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var days: Int

    public init(days: Int) { self.days = days }

    /// `YYYY-MM-DD`, a real calendar date; nil otherwise.
    public init?(iso text: some StringProtocol) {
        let u = Array(text.utf8)
        guard u.count == 10, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-") else { return nil }
        func number(_ r: Range<Int>) -> Int? {
            var n = 0
            for i in r {
                guard u[i] >= UInt8(ascii: "0"), u[i] <= UInt8(ascii: "9") else { return nil }
                n = n * 10 + Int(u[i] - UInt8(ascii: "0"))
            }
            return n
        }
        guard let y = number(0..<4), let m = number(5..<7), let d = number(8..<10), (1...12).contains(m),
            d >= 1, d <= CivilDateTime.daysInMonth(year: y, month: m)
        else { return nil }
        days = CivilDateTime.daysFromCivil(year: y, month: m, day: d)
    }

    /// The UTC date of an instant.
    public init(_ t: Timestamp) {
        let perDay: Int64 = 86_400_000_000
        let (q, r) = t.microseconds.quotientAndRemainder(dividingBy: perDay)
        days = Int(r < 0 ? q - 1 : q)
    }

    /// Midnight UTC starting this date.
    public var start: Timestamp { Timestamp(microseconds: Int64(days) * 86_400_000_000) }

    public var description: String {
        let (y, m, d) = CivilDateTime.civilFromDays(days)
        func pad(_ n: Int, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))"
    }

    public static func < (l: FXDay, r: FXDay) -> Bool { l.days < r.days }
}

/// A positive decimal rate `units / 10^decimals` (units of a currency per 1 EUR).
public struct FXRate: Sendable, Hashable, CustomStringConvertible {
    public var units: Int64
    public var decimals: Int

    /// A decimal text such as `"1.0821"` or `"162.5"`, held to `FXLimits`; nil otherwise.
    public init?(_ text: some StringProtocol) {
        var units: Int64 = 0
        var decimals = 0
        var dot = false
        var digits = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: ".") {
                guard !dot else { return nil }
                dot = true
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                if dot { decimals += 1 }
                digits += 1
                guard decimals <= FXLimits.maxDecimals, digits <= 18 else { return nil }
                units = units * 10 + Int64(byte - UInt8(ascii: "0"))
            } else {
                return nil
            }
        }
        guard digits > 0, units > 0 else { return nil }
        // Trailing zeros say nothing: 1.10 and 1.1 are one rate.
        while decimals > 0, units % 10 == 0 {
            units /= 10
            decimals -= 1
        }
        self.units = units
        self.decimals = decimals
        guard units <= FXLimits.maxRate * Self.power(decimals) else { return nil }
    }

    public init(units: Int64, decimals: Int) {
        self.units = units
        self.decimals = decimals
    }

    static func power(_ n: Int) -> Int64 {
        var p: Int64 = 1
        for _ in 0..<n { p *= 10 }
        return p
    }

    public var description: String {
        guard decimals > 0 else { return String(units) }
        let p = Self.power(decimals)
        let fraction = String(units % p)
        return "\(units / p).\(String(repeating: "0", count: decimals - fraction.count))\(fraction)"
    }
}

/// The ledger's ceilings on rate input (docs/limits.md).
public enum FXLimits {
    /// Rate cells per upload (`PUT /v1/fx/rates`, `subledger fx import`): ECB's whole history since 1999 is
    /// about 200,000 cells, so a full history goes in two or three files.
    public static let maxRowsPerUpload = 100_000
    /// Currencies per upload (ECB's history has 41 columns).
    public static let maxCurrenciesPerUpload = 64
    /// Dates accepted: 1999-01-01 (the euro's first day) to 2100-12-31.
    public static let firstDay = FXDay(iso: "1999-01-01")!
    public static let lastDay = FXDay(iso: "2100-12-31")!
    /// At most six decimals and at most 10^7 units per euro (the Turkish lira before 2005 was 2 × 10^6).
    public static let maxDecimals = 6
    public static let maxRate: Int64 = 10_000_000
    /// A transaction uses the latest rate on or before its date, at most this many days older.
    public static let maxAgeDays = 7
}

/// One rate of an upload.
public struct FXRateRow: Sendable, Hashable {
    public var day: FXDay
    public var currency: String
    public var rate: FXRate

    public init(day: FXDay, currency: String, rate: FXRate) {
        self.day = day
        self.currency = currency
        self.rate = rate
    }
}

/// Why an upload was refused: the line (CSV) or index (JSON) and what was wrong with it.
public struct FXInputError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Parsing of the two upload shapes.
public enum FXUpload {
    /// The European Central Bank's history layout (`eurofxref-hist.csv`): a header `Date,USD,JPY,…`, then one
    /// line per date with units of each currency per 1 EUR; `N/A` or an empty cell is no rate; trailing
    /// commas (ECB ends every line with one) and a final newline or CRLF are accepted.
    public static func ecbCSV(_ bytes: some Collection<UInt8>) throws(FXInputError) -> [FXRateRow] {
        var lines: [[Substring]] = []
        guard let text = String(validating: bytes, as: UTF8.self) else { throw FXInputError("the CSV is not UTF-8") }
        let body = text.hasPrefix("\u{FEFF}") ? Substring(text.dropFirst()) : Substring(text)
        // "\r\n" is one Character in Swift: both line ends are separators.
        for line in body.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lines.append(line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingSpaces })
        }
        while let last = lines.last, last.allSatisfy(\.isEmpty) { lines.removeLast() }
        guard let header = lines.first, header.first?.lowercased() == "date" else {
            throw FXInputError("line 1: the header must start with 'Date' (the ECB layout: Date,USD,JPY,…)")
        }
        var currencies: [String] = []
        for (i, name) in header.enumerated().dropFirst() {
            if name.isEmpty, i == header.count - 1 { continue }  // the trailing comma
            let code = String(name)
            guard Identifiers.isValidCurrency(code), code != "EUR" else {
                throw FXInputError("line 1, column \(i + 1): '\(name.prefix(40))' is not a currency code other than EUR")
            }
            guard !currencies.contains(code) else { throw FXInputError("line 1: currency \(code) appears twice") }
            currencies.append(code)
        }
        guard !currencies.isEmpty else { throw FXInputError("line 1: no currency columns") }
        guard currencies.count <= FXLimits.maxCurrenciesPerUpload else {
            throw FXInputError("line 1: \(currencies.count) currencies; at most \(FXLimits.maxCurrenciesPerUpload) per upload")
        }
        var rows: [FXRateRow] = []
        var seen = Set<FXDay>()
        for (n, cells) in lines.enumerated().dropFirst() {
            let number = n + 1
            if cells.allSatisfy(\.isEmpty) { continue }
            guard let day = FXDay(iso: cells[0]) else {
                throw FXInputError("line \(number): '\(cells[0].prefix(40))' is not a date YYYY-MM-DD")
            }
            try check(day, "line \(number)")
            guard seen.insert(day).inserted else { throw FXInputError("line \(number): \(day) appears twice") }
            let extra = cells.count - 1 - currencies.count
            guard extra == 0 || (extra == 1 && cells.last!.isEmpty) || (extra == -1 && header.last!.isEmpty) else {
                throw FXInputError("line \(number): \(cells.count) cells for a header of \(header.count)")
            }
            for (k, code) in currencies.enumerated() where k + 1 < cells.count {
                let cell = cells[k + 1]
                if cell.isEmpty || cell == "N/A" { continue }
                guard let rate = FXRate(cell) else {
                    throw FXInputError(
                        "line \(number), \(code): '\(cell.prefix(40))' is not a rate (a positive decimal, at most "
                            + "\(FXLimits.maxDecimals) decimals and \(FXLimits.maxRate) per euro)")
                }
                rows.append(FXRateRow(day: day, currency: code, rate: rate))
                guard rows.count <= FXLimits.maxRowsPerUpload else {
                    throw FXInputError("line \(number): more than \(FXLimits.maxRowsPerUpload) rates in one upload")
                }
            }
        }
        guard !rows.isEmpty else { throw FXInputError("the CSV holds no rate") }
        return rows
    }

    /// `{"base": "EUR", "rates": [{"date": "2026-03-02", "currency": "USD", "rate": "1.0821"}, …]}`; a rate
    /// is a decimal string or a JSON number; `base` may be left out (it can only be EUR).
    public static func json(_ value: JSONValue) throws(FXInputError) -> [FXRateRow] {
        guard case .object(let members) = value else { throw FXInputError("the body must be a JSON object {\"base\", \"rates\"}") }
        for key in members.keys where key != "base" && key != "rates" {
            throw FXInputError("unknown member '\(key.prefix(40))' (expected base and rates)")
        }
        switch members["base"] {
        case nil, .string("EUR")?: break
        default: throw FXInputError("base: rates are units per 1 EUR, so base must be \"EUR\"")
        }
        guard case .array(let items)? = members["rates"] else { throw FXInputError("rates: must be an array") }
        guard !items.isEmpty else { throw FXInputError("rates: holds no rate") }
        guard items.count <= FXLimits.maxRowsPerUpload else {
            throw FXInputError("rates: \(items.count) rates; at most \(FXLimits.maxRowsPerUpload) per upload")
        }
        var rows: [FXRateRow] = []
        var seen = Set<String>()
        var currencies = Set<String>()
        for (i, item) in items.enumerated() {
            let at = "rates[\(i)]"
            guard case .object(let m) = item else { throw FXInputError("\(at): must be an object {date, currency, rate}") }
            for key in m.keys where !["date", "currency", "rate"].contains(key) {
                throw FXInputError("\(at): unknown member '\(key.prefix(40))'")
            }
            guard case .string(let date)? = m["date"], let day = FXDay(iso: date) else {
                throw FXInputError("\(at).date: must be a date YYYY-MM-DD")
            }
            try check(day, "\(at).date")
            guard case .string(let currency)? = m["currency"], Identifiers.isValidCurrency(currency), currency != "EUR" else {
                throw FXInputError("\(at).currency: must be an ISO 4217 code other than EUR, such as \"USD\"")
            }
            let text: String
            switch m["rate"] {
            case .string(let s)?: text = s
            case .number(let n)?: text = n.canonical
            default: throw FXInputError("\(at).rate: must be a decimal (string or number)")
            }
            guard let rate = FXRate(text) else {
                throw FXInputError(
                    "\(at).rate: '\(text.prefix(40))' is not a positive decimal of at most \(FXLimits.maxDecimals) decimals and "
                        + "\(FXLimits.maxRate) per euro")
            }
            guard seen.insert("\(day.days) \(currency)").inserted else { throw FXInputError("\(at): \(currency) on \(day) appears twice") }
            currencies.insert(currency)
            guard currencies.count <= FXLimits.maxCurrenciesPerUpload else {
                throw FXInputError("\(at): more than \(FXLimits.maxCurrenciesPerUpload) currencies in one upload")
            }
            rows.append(FXRateRow(day: day, currency: currency, rate: rate))
        }
        return rows
    }

    static func check(_ day: FXDay, _ at: String) throws(FXInputError) {
        guard day >= FXLimits.firstDay, day <= FXLimits.lastDay else {
            throw FXInputError("\(at): \(day) is outside \(FXLimits.firstDay)…\(FXLimits.lastDay)")
        }
    }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}

/// A report refused because a transaction's date has no rate (422 `missing_fx_rate`).
public struct MissingFXRate: Error, Sendable, Hashable, CustomStringConvertible {
    public var currency: String
    public var day: FXDay
    public init(currency: String, day: FXDay) {
        self.currency = currency
        self.day = day
    }
    public var description: String {
        "no exchange rate for \(currency) on \(day) or in the \(FXLimits.maxAgeDays) days before it"
    }
}

/// An exact conversion factor between minor units of two currencies: `numerator / denominator`.
public struct FXFactor: Sendable, Hashable {
    public var numerator: Int128
    public var denominator: Int128

    public static let one = FXFactor(numerator: 1, denominator: 1)

    public init(numerator: Int128, denominator: Int128) {
        let g = Money.gcd(numerator, denominator)
        self.numerator = g > 1 ? numerator / g : numerator
        self.denominator = g > 1 ? denominator / g : denominator
    }

    /// `round_half_up(amount × numerator / denominator)`, or `ReportOverflow` (never a trap).
    public func apply(_ amount: Int128) throws(ReportOverflow) -> Int128 {
        if numerator == denominator { return amount }
        let (product, overflow) = amount.multipliedReportingOverflow(by: numerator)
        guard !overflow else { throw ReportOverflow(what: "a converted amount") }
        return Money.roundHalfUp(product, denominator)
    }
}

/// The rates of one version set, by currency, and the conversions they give into one reporting currency.
public struct FXTable: Sendable {
    /// Per currency, rates by date ascending.
    var series: [String: [(day: FXDay, rate: FXRate)]] = [:]

    public init() {}

    public mutating func add(currency: String, day: FXDay, rate: FXRate) {
        series[currency, default: []].append((day, rate))
    }

    /// Call once after the adds (they may come in any order).
    public mutating func sort() {
        for key in series.keys { series[key]!.sort { $0.day < $1.day } }
    }

    /// The latest rate of `currency` on or before `day`, at most `FXLimits.maxAgeDays` older (EUR is 1).
    public func rate(_ currency: String, on day: FXDay) throws(MissingFXRate) -> FXRate {
        if currency == "EUR" { return FXRate(units: 1, decimals: 0) }
        guard let s = series[currency] else { throw MissingFXRate(currency: currency, day: day) }
        var (lo, hi) = (0, s.count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if s[mid].day <= day { lo = mid + 1 } else { hi = mid }
        }
        guard lo > 0, s[lo - 1].day.days >= day.days - FXLimits.maxAgeDays else { throw MissingFXRate(currency: currency, day: day) }
        return s[lo - 1].rate
    }

    /// The days on which some currency's rate (as `rate(_:on:)` finds it, falling back to earlier days) differs
    /// between the two tables, or is known in one only: the days whose transactions convert differently.
    public func daysDiffering(from other: FXTable) -> [FXDay] {
        var days = Set<Int>()
        for currency in Set(series.keys).union(other.series.keys) {
            let known = (series[currency] ?? []).map(\.day.days) + (other.series[currency] ?? []).map(\.day.days)
            guard let lo = known.min(), let hi = known.max() else { continue }
            for d in lo...(hi + FXLimits.maxAgeDays) {
                let day = FXDay(days: d)
                if (try? rate(currency, on: day)) != (try? other.rate(currency, on: day)) { days.insert(d) }
            }
        }
        return days.sorted().map(FXDay.init(days:))
    }

    /// The factor turning minor units of `source` on `day` into minor units of `target`: the EUR cross rate
    /// `target per EUR / source per EUR`, times `10^(exponent(target) − exponent(source))`.
    public func factor(from source: String, to target: String, on day: FXDay) throws(MissingFXRate) -> FXFactor {
        if source == target { return .one }
        let s = try rate(source, on: day)
        let t = try rate(target, on: day)
        var numerator = Int128(t.units) * Int128(FXRate.power(s.decimals))
        var denominator = Int128(s.units) * Int128(FXRate.power(t.decimals))
        let shift = CurrencyExponent.of(target) - CurrencyExponent.of(source)
        for _ in 0..<max(0, shift) { numerator *= 10 }
        for _ in 0..<max(0, -shift) { denominator *= 10 }
        return FXFactor(numerator: numerator, denominator: denominator)
    }
}

/// ISO 4217 minor units (the exponent of a currency's minor unit), for converting minor units exactly.
public enum CurrencyExponent {
    static let zero: Set<String> = [
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF",
        "TRL",
    ]
    static let three: Set<String> = ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"]
    static let four: Set<String> = ["CLF", "UYW"]
    /// Current ISO 4217 codes and the euro area's and ECB's former ones (CYP, EEK, HRK, LTL, LVL, MTL, ROL, SIT,
    /// SKK, TRL), so ECB's whole history can be loaded.
    static let known: Set<String> = [
        "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BHD", "BIF", "BMD",
        "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHE", "CHF", "CHW", "CLF", "CLP", "CNY",
        "COP", "COU", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP",
        "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK",
        "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL",
        "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD",
        "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB",
        "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB",
        "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "USN", "UYI", "UYU", "UYW", "UZS", "VED",
        "VES", "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
        "CYP", "EEK", "HRK", "LTL", "LVL", "MTL", "ROL", "SIT", "SKK", "TRL",
    ]

    /// Whether `code` is a currency the ledger can report in.
    public static func isKnown(_ code: String) -> Bool { known.contains(code) }

    /// The exponent: 0 for JPY, 3 for KWD, 2 for most (and for a code the table does not know).
    public static func of(_ code: String) -> Int {
        if zero.contains(code) { return 0 }
        if three.contains(code) { return 3 }
        if four.contains(code) { return 4 }
        return 2
    }
}
