/// RevenueCat's scheduled transactions export (data export versions 5, 6 and 7), read as typed rows.
///
/// One row is one store transaction (a purchase, a renewal, a trial, a promotional grant) as RevenueCat last
/// saw it; an incremental delivery repeats a row whenever it changed (a refund, auto-renew turned off).
/// Columns are found by name, so their order and any extra columns do not matter. docs/switching.md says
/// how each column is used.
public struct RevenueCatHeader: Sendable, Hashable {
    /// 5 or 6 (their headers are the same: version 6 only quotes JSON cells differently, and both quotings
    /// are read), or 7 (`experiments` replaces `experiment_id` and `experiment_variant`).
    public enum Version: String, Sendable, Hashable {
        case v5or6 = "5/6"
        case v7 = "7"
    }

    public var version: Version
    public var names: [String]
    var index: [String: Int]

    /// Columns a row cannot be mapped without.
    public static let required = [
        "rc_original_app_user_id", "product_identifier", "start_time", "end_time", "store", "is_trial_period",
        "is_sandbox", "store_transaction_id", "original_store_transaction_id", "refunded_at", "unsubscribe_detected_at",
        "billing_issues_detected_at", "purchased_currency", "price_in_purchased_currency", "entitlement_identifiers",
        "renewal_number",
    ]

    public struct Problem: Error, Sendable, Hashable, CustomStringConvertible {
        public var reason: String
        public var description: String { "line 1 (the header): \(reason)" }
    }

    public init(_ fields: [String]) throws(Problem) {
        // A UTF-8 byte order mark before the first name is not part of it.
        var names = fields.map { $0.trimmingASCIIWhitespace() }
        if let first = names.first, first.hasPrefix("\u{FEFF}") { names[0] = String(first.dropFirst()) }
        var index: [String: Int] = [:]
        for (i, name) in names.enumerated() where index[name] == nil { index[name] = i }
        let missing = Self.required.filter { index[$0] == nil }
        guard missing.isEmpty else {
            throw Problem(
                reason: "not a RevenueCat transactions export of version 5, 6 or 7: missing column(s) \(missing.joined(separator: ", "))")
        }
        if index["experiments"] != nil, index["experiment_id"] == nil {
            version = .v7
        } else if index["first_seen_time"] != nil || index["offer_type"] != nil || index["experiment_id"] != nil {
            version = .v5or6
        } else {
            throw Problem(
                reason:
                    "a RevenueCat export older than version 5 (no first_seen_time, offer_type or experiments column): switch the export to version 5, 6 or 7 in RevenueCat's dashboard"
            )
        }
        self.names = names
        self.index = index
    }

    public func column(_ name: String) -> Int? { index[name] }
}

/// A RevenueCat store name (`store` column).
public enum RevenueCatStore: Sendable, Hashable {
    case appStore, macAppStore, playStore, stripe, promotional
    case other(String)

    init(_ text: String) {
        switch text {
        case "app_store": self = .appStore
        case "mac_app_store": self = .macAppStore
        case "play_store": self = .playStore
        case "stripe": self = .stripe
        case "promotional": self = .promotional
        default: self = .other(text)
        }
    }

    /// The ledger's `source` for events of this store: the same names the stores' own adapters use, so that
    /// a fact imported from RevenueCat and the same fact from the store are one event.
    public var source: String {
        switch self {
        case .appStore, .macAppStore: "apple"
        case .playStore: "google"
        case .stripe: "stripe"
        case .promotional: "revenuecat"
        case .other(let name): name
        }
    }

    public var name: String {
        switch self {
        case .appStore: "app_store"
        case .macAppStore: "mac_app_store"
        case .playStore: "play_store"
        case .stripe: "stripe"
        case .promotional: "promotional"
        case .other(let name): name
        }
    }
}

/// One row of the export, typed.
public struct RevenueCatRow: Sendable, Hashable {
    public var line: Int
    public var appUserID: String
    public var productID: String
    public var start: Timestamp
    public var end: Timestamp?
    public var effectiveEnd: Timestamp?
    public var graceEnd: Timestamp?
    public var store: RevenueCatStore
    public var isAutoRenewable: Bool?
    public var isTrial: Bool
    public var isIntro: Bool
    public var isSandbox: Bool
    public var transactionID: String
    public var originalTransactionID: String
    public var refundedAt: Timestamp?
    public var unsubscribeDetectedAt: Timestamp?
    public var billingIssueDetectedAt: Timestamp?
    public var currency: String?
    /// The price paid in minor units of `currency`: `purchase_price_in_purchased_currency` when the export
    /// has it (RevenueCat sets `price_in_purchased_currency` to 0 once a transaction is refunded).
    public var priceMinor: Int64
    /// `commission_percentage` as a decimal share ("0.3").
    public var commissionRate: String?
    public var entitlements: [String]
    public var ownershipType: String?
    public var renewalNumber: Int
    /// `product_duration` (ISO 8601, "P1M") when the export has it.
    public var productDuration: ISODuration?
    public var country: String?
    public var updatedAt: Timestamp?
}

/// Why a row cannot be read: its line, its column (1-based) and the column's name.
public struct RevenueCatRowError: Error, Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var column: Int?
    public var field: String
    public var reason: String

    public init(line: Int, column: Int?, field: String, reason: String) {
        self.line = line
        self.column = column
        self.field = field
        self.reason = reason
    }

    public var description: String {
        if let column { return "line \(line), column \(column) (\(field)): \(reason)" }
        return "line \(line) (\(field)): \(reason)"
    }
}

extension RevenueCatRow {
    /// Reads one record's fields under `header`.
    public init(fields: [String], line: Int, header: RevenueCatHeader) throws(RevenueCatRowError) {
        var cells = Cells(fields: fields, line: line, header: header)
        guard fields.count == header.names.count else {
            throw RevenueCatRowError(
                line: line, column: min(fields.count, header.names.count) + 1, field: "row",
                reason: "has \(fields.count) fields, the header has \(header.names.count)")
        }
        self.line = line
        appUserID = try cells.required("rc_original_app_user_id")
        guard Identifiers.isValidSubscriberID(appUserID) else {
            throw cells.fail("rc_original_app_user_id", "is not a valid subscriber id (1–200 characters of A–Z a–z 0–9 . _ : @ $ -)")
        }
        productID = try cells.required("product_identifier")
        start = try cells.requiredTime("start_time")
        end = try cells.time("end_time")
        effectiveEnd = try cells.time("effective_end_time")
        graceEnd = try cells.time("grace_period_end_time")
        store = RevenueCatStore(try cells.required("store"))
        guard Identifiers.isValidSource(store.source) else { throw cells.fail("store", "is not a store name ([a-z0-9_.-]{1,64})") }
        isAutoRenewable = try cells.bool("is_auto_renewable")
        isTrial = try cells.bool("is_trial_period") ?? false
        isIntro = try cells.bool("is_in_intro_offer_period") ?? false
        isSandbox = try cells.bool("is_sandbox") ?? false
        transactionID = try cells.required("store_transaction_id")
        originalTransactionID = try cells.string("original_store_transaction_id") ?? transactionID
        refundedAt = try cells.time("refunded_at")
        unsubscribeDetectedAt = try cells.time("unsubscribe_detected_at")
        billingIssueDetectedAt = try cells.time("billing_issues_detected_at")
        currency = try cells.string("purchased_currency").map { $0.uppercased() }
        if let currency, !Identifiers.isValidCurrency(currency) {
            throw cells.fail("purchased_currency", "must be an ISO 4217 code such as USD")
        }
        let priceColumn =
            cells.string(present: "purchase_price_in_purchased_currency") ? "purchase_price_in_purchased_currency" : "price_in_purchased_currency"
        if let price = try cells.string(priceColumn) {
            guard let currency else { throw cells.fail("purchased_currency", "is required when a price is given") }
            guard let minor = RevenueCatRow.minorUnits(price, exponent: CurrencyExponents.of(currency)), minor <= Limits.maxMoneyMinor else {
                throw cells.fail(priceColumn, "must be a non-negative decimal amount such as 9.99")
            }
            priceMinor = minor
        } else {
            priceMinor = 0
        }
        if let commission = try cells.string("commission_percentage") {
            guard let rate = RevenueCatRow.share(commission) else {
                throw cells.fail("commission_percentage", "must be a share between 0 and 1 such as 0.3")
            }
            commissionRate = rate
        }
        entitlements = try cells.stringList("entitlement_identifiers")
        ownershipType = try cells.string("ownership_type")
        let renewal = try cells.required("renewal_number")
        guard let n = Int(renewal), n >= 0 else { throw cells.fail("renewal_number", "must be a whole number") }
        renewalNumber = n
        if let duration = try cells.string("product_duration") {
            guard let d = ISODuration(duration) else { throw cells.fail("product_duration", "must be an ISO 8601 duration such as P1M") }
            productDuration = d
        }
        country = try cells.string("country")
        updatedAt = try cells.time("updated_at")
        if let end, end <= start, !(isAutoRenewable == false) {
            throw cells.fail("end_time", "must be after start_time")
        }
    }

    /// "9.99" → 999 for an exponent of 2 (more digits are rounded half up: exports carry float noise such as
    /// 4.9900000000000002).
    static func minorUnits(_ text: String, exponent: Int) -> Int64? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 16, whole.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        let fraction = parts.count == 2 ? parts[1] : ""
        guard fraction.count <= 30, fraction.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        var value = Int64(whole)!
        var digits = Array(fraction.utf8.map { Int64($0 - 0x30) })
        while digits.count < exponent + 1 { digits.append(0) }
        for k in 0..<exponent {
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(digits[k])
            guard !o1, !o2 else { return nil }
            value = s
        }
        if digits[exponent] >= 5 {
            let (rounded, overflow) = value.addingReportingOverflow(1)
            guard !overflow else { return nil }
            value = rounded
        }
        return value
    }

    /// A share as a decimal text 0–1: "0.3" stays, "30" (a percentage) becomes "0.30".
    static func share(_ text: String) -> String? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 3, whole.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        let fraction = parts.count == 2 ? String(parts[1]) : ""
        guard fraction.count <= 12, fraction.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        let w = Int(whole)!
        let fractionIsZero = fraction.allSatisfy { $0 == "0" }
        if w == 0 { return fractionIsZero ? "0" : "0." + fraction }
        if w == 1, fractionIsZero { return "1" }
        // A percentage: move the point two places left.
        guard w <= 100, !(w == 100 && !fractionIsZero) else { return nil }
        if w == 100 { return "1" }
        let digits = String(repeating: "0", count: 3 - whole.count) + whole + fraction
        return "0." + digits.dropFirst()
    }
}

/// ISO 4217 minor-unit exponents that differ from 2.
enum CurrencyExponents {
    static let zero: Set<String> = [
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF",
    ]
    static let three: Set<String> = ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"]

    static func of(_ currency: String) -> Int { zero.contains(currency) ? 0 : three.contains(currency) ? 3 : 2 }
}

/// The cells of one record, read by column name; a failure names the line, column and field.
private struct Cells {
    let fields: [String]
    let line: Int
    let header: RevenueCatHeader

    func fail(_ name: String, _ reason: String) -> RevenueCatRowError {
        RevenueCatRowError(line: line, column: header.column(name).map { $0 + 1 }, field: name, reason: reason)
    }

    func string(present name: String) -> Bool { header.column(name) != nil }

    /// The cell, nil when the column is absent or the cell empty (or `null`/`NULL`/`\N`, as warehouses write it).
    func string(_ name: String) throws(RevenueCatRowError) -> String? {
        guard let i = header.column(name) else { return nil }
        let text = fields[i].trimmingASCIIWhitespace()
        if text.isEmpty || text == "null" || text == "NULL" || text == "\\N" { return nil }
        return text
    }

    func required(_ name: String) throws(RevenueCatRowError) -> String {
        guard let text = try string(name) else { throw fail(name, "is required") }
        return text
    }

    func bool(_ name: String) throws(RevenueCatRowError) -> Bool? {
        guard let text = try string(name) else { return nil }
        switch text.lowercased() {
        case "true", "t", "1": return true
        case "false", "f", "0": return false
        default: throw fail(name, "must be true or false")
        }
    }

    /// RevenueCat writes `2026-03-01 10:00:00` (UTC), sometimes with fractions or an offset; RFC 3339 too.
    func time(_ name: String) throws(RevenueCatRowError) -> Timestamp? {
        guard var text = try string(name) else { return nil }
        if text.utf8.count >= 11, Array(text.utf8)[10] == UInt8(ascii: " ") {
            var bytes = Array(text.utf8)
            bytes[10] = UInt8(ascii: "T")
            text = String(decoding: bytes, as: UTF8.self)
        }
        if text.hasSuffix(" UTC") { text = String(text.dropLast(4)) }
        let tail = text.utf8.count > 19 ? String(text.dropFirst(19)) : ""
        if !(tail.contains("Z") || tail.contains("+") || tail.contains("-")) { text += "Z" }
        if text.utf8.count == 10 { text += "T00:00:00Z" }
        do {
            return try Timestamp(rfc3339: text)
        } catch {
            throw fail(name, "must be a UTC date and time such as 2026-03-01 10:00:00")
        }
    }

    func requiredTime(_ name: String) throws(RevenueCatRowError) -> Timestamp {
        guard let t = try time(name) else { throw fail(name, "is required") }
        return t
    }

    /// A JSON array of strings (`["pro","plus"]`; version 5's `"[""pro""]"` is the same after CSV unquoting),
    /// or the older `{pro,plus}`, or empty.
    func stringList(_ name: String) throws(RevenueCatRowError) -> [String] {
        guard let text = try string(name) else { return [] }
        if text.hasPrefix("{"), text.hasSuffix("}") {
            return text.dropFirst().dropLast().split(separator: ",").map { String($0).trimmingASCIIWhitespace() }
                .map { $0.hasPrefix("\"") && $0.hasSuffix("\"") && $0.count >= 2 ? String($0.dropFirst().dropLast()) : $0 }
                .filter { !$0.isEmpty }
        }
        guard case .array(let items)? = try? JSONParser.parse(Array(text.utf8)) else {
            throw fail(name, "must be a JSON array of entitlement ids such as [\"pro\"]")
        }
        var out: [String] = []
        for item in items {
            guard case .string(let s) = item, Identifiers.problem(s) == nil else {
                throw fail(name, "must hold entitlement ids (strings)")
            }
            if !out.contains(s) { out.append(s) }
        }
        return out
    }
}

extension String {
    func trimmingASCIIWhitespace() -> String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return String(s)
    }
}
