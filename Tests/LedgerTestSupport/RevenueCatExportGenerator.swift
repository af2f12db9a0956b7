import Foundation
import LedgerCore

/// A seeded, made-up population in the shape of RevenueCat's scheduled transactions export (data export
/// versions 5–7, columns as RevenueCat documents them): App Store, Play Store and Stripe subscribers with
/// trials, monthly and yearly renewals, refunds, auto-renew turned off, billing issues with grace,
/// expirations, sandbox rows, several currencies, anonymous `$RCAnonymousID:` users, and JSON in cells
/// (with commas, quotes and a line break) to exercise RFC 4180 quoting. No real customer data.
public struct RevenueCatExportGenerator: Sendable {
    public struct Row: Sendable, Hashable {
        public var appUserID: String
        public var productID: String
        public var duration: String
        public var start: Timestamp
        public var end: Timestamp
        public var graceEnd: Timestamp?
        public var store: String
        public var isTrial: Bool
        public var isIntro: Bool
        public var isSandbox: Bool
        public var transactionID: String
        public var originalTransactionID: String
        public var refundedAt: Timestamp?
        public var unsubscribeDetectedAt: Timestamp?
        public var billingIssueDetectedAt: Timestamp?
        public var currency: String
        /// The price as RevenueCat writes it ("9.99", "1200" for JPY).
        public var price: String
        public var priceMinor: Int64
        public var entitlements: [String]
        public var renewalNumber: Int
        public var country: String
        public var updatedAt: Timestamp

        public var effectiveEnd: Timestamp { max(end, graceEnd ?? end) }
        /// The transaction id the ledger keeps (Stripe's repeat across renewals).
        public var ledgerTransactionID: String { store == "stripe" ? "\(transactionID):\(renewalNumber)" : transactionID }
        public var source: String { store == "app_store" ? "apple" : store == "play_store" ? "google" : store }
    }

    public enum Version: Sendable { case v5, v6, v7 }

    public var rows: [Row]
    /// When the export was taken: every lapse in it is before this.
    public let exportTime: Timestamp
    private var random: SplitMix64
    private var counter = 0

    public init(seed: UInt64, subscribers: Int, exportTime: Timestamp = try! Timestamp(rfc3339: "2026-06-01T00:00:00Z")) {
        random = SplitMix64(seed: seed)
        self.exportTime = exportTime
        rows = []
        for s in 0..<subscribers { generate(subscriber: s) }
    }

    private static let plans: [(product: String, duration: String, prices: [String: String])] = [
        ("pro.monthly", "P1M", ["USD": "9.99", "EUR": "9.49", "GBP": "8.99", "JPY": "1200", "BRL": "49.90", "KWD": "2.990"]),
        ("pro.yearly", "P1Y", ["USD": "79.99", "EUR": "74.99", "GBP": "69.99", "JPY": "9800", "BRL": "399.90", "KWD": "24.500"]),
        ("pro.weekly", "P1W", ["USD": "2.99", "EUR": "2.79", "GBP": "2.49", "JPY": "400", "BRL": "14.90", "KWD": "0.900"]),
    ]

    private mutating func id() -> Int {
        counter += 1
        return counter
    }

    private mutating func generate(subscriber s: Int) {
        let r = random.int(0...99)
        let store = r < 45 ? "app_store" : r < 80 ? "play_store" : "stripe"
        let user = random.int(0...9) == 0 ? "$RCAnonymousID:\(String(UInt64(s) &* 0x9E37_79B9_7F4A_7C15, radix: 16))" : "rc-user-\(s)"
        let plan = Self.plans[random.int(0...9) < 6 ? 0 : random.int(0...9) < 7 ? 1 : 2]
        let currency = random.pick(["USD", "USD", "USD", "EUR", "EUR", "GBP", "JPY", "BRL", "KWD"])
        let entitlements = random.int(0...4) == 0 ? ["pro", "plus"] : ["pro"]
        let sandbox = random.int(0...29) == 0
        let country = random.pick(["US", "DE", "GB", "JP", "BR", "KW", "FR"])
        let period = ISODuration(plan.duration)!
        // Start in the 18 months before the export.
        var start = Timestamp(
            microseconds: exportTime.microseconds - Int64(random.int(1...540)) * 86_400_000_000 - Int64(random.int(0...86_399)) * 1_000_000)
        let base = id()
        let original: String
        switch store {
        case "app_store": original = "20000\(String(base).leftPadded(to: 10))"
        case "play_store":
            original =
                "GPA.3\(String(base).leftPadded(to: 3)).\(String(base * 7919 % 10000).leftPadded(to: 4))-\(String(base * 104_729 % 100000).leftPadded(to: 5))"
        default: original = "sub_1R\(String(base, radix: 36).leftPadded(to: 12))"
        }
        var renewal = 1
        var made: [Row] = []
        func transaction(_ n: Int) -> String {
            switch store {
            case "app_store": return n == 1 ? original : "20000\(String(base).leftPadded(to: 7))\(String(n).leftPadded(to: 3))"
            case "play_store": return n == 1 ? original : "\(original)..\(n - 2)"
            default: return original
            }
        }
        func row(start: Timestamp, end: Timestamp, trial: Bool, price: String) -> Row {
            Row(
                appUserID: user, productID: plan.product, duration: trial ? "P1W" : plan.duration, start: start, end: end, graceEnd: nil,
                store: store, isTrial: trial, isIntro: false, isSandbox: sandbox, transactionID: transaction(renewal),
                originalTransactionID: original, refundedAt: nil, unsubscribeDetectedAt: nil, billingIssueDetectedAt: nil,
                currency: currency, price: price, priceMinor: Self.minor(price, currency), entitlements: entitlements,
                renewalNumber: renewal, country: country, updatedAt: start)
        }
        if random.int(0...9) < 3 {
            let end = ISODuration("P7D")!.added(to: start)
            made.append(row(start: start, end: end, trial: true, price: "0"))
            start = end
            renewal += 1
        }
        // Paid periods until the export, or until the story ends.
        let ending = random.int(0...9)  // 0–3 active, 4–5 voluntary, 6–7 billing, 8–9 refund
        let periods = random.int(1...12)
        // A trial still running at the export has no paid period yet.
        while made.isEmpty || start < exportTime {
            let end = period.added(to: start)
            made.append(row(start: start, end: end, trial: false, price: plan.prices[currency]!))
            renewal += 1
            if end > exportTime || renewal > periods + 1 && ending >= 4 { break }
            start = end
        }
        var last = made[made.count - 1]
        let lastIndex = made.count - 1
        switch ending {
        case 4, 5:
            // Auto-renew turned off during the last period; it lapses at its end (if that is before the export).
            let off = Timestamp(microseconds: last.start.microseconds + (last.end.microseconds - last.start.microseconds) / 2)
            if off < exportTime {
                last.unsubscribeDetectedAt = off
                last.updatedAt = last.end < exportTime ? last.end : off
            }
        case 6, 7:
            // The renewal after it failed: a billing issue at its end, 16 days of grace, then the lapse.
            if last.end < exportTime {
                last.billingIssueDetectedAt = last.end
                let grace = ISODuration("P16D")!.added(to: last.end)
                last.graceEnd = grace
                last.updatedAt = grace < exportTime ? grace : last.end
            }
        case 8, 9:
            if !last.isTrial {
                let refund = ISODuration("P3D")!.added(to: last.start)
                if refund < exportTime {
                    last.refundedAt = refund
                    last.updatedAt = refund
                }
            }
        default: break
        }
        made[lastIndex] = last
        rows += made
    }

    /// Changes `count` rows as a later delivery of updated rows would show them (a refund, auto-renew turned
    /// off, a billing issue), and answers those rows: the incremental file.
    public mutating func update(count: Int, at time: Timestamp) -> [Row] {
        var changed: [Row] = []
        var i = 0
        var step = 0
        while changed.count < count, i < rows.count {
            defer { i += 1 }
            var row = rows[i]
            guard row.refundedAt == nil, row.unsubscribeDetectedAt == nil, row.billingIssueDetectedAt == nil, !row.isTrial,
                i + 1 == rows.count || rows[i + 1].originalTransactionID != row.originalTransactionID
            else { continue }
            step += 1
            switch step % 3 {
            case 0:
                row.refundedAt = max(time, ISODuration("P1D")!.added(to: row.start))
            case 1:
                row.unsubscribeDetectedAt = max(time, ISODuration("P1D")!.added(to: row.start))
            default:
                // Only a period that has ended can fail to renew.
                guard row.end < time else {
                    row.refundedAt = max(time, ISODuration("P1D")!.added(to: row.start))
                    break
                }
                row.billingIssueDetectedAt = row.end
                row.graceEnd = ISODuration("P16D")!.added(to: row.end)
            }
            row.updatedAt = time
            rows[i] = row
            changed.append(row)
        }
        return changed
    }

    static func minor(_ price: String, _ currency: String) -> Int64 {
        let exponent = ["JPY": 0, "KWD": 3][currency] ?? 2
        let parts = price.split(separator: ".")
        var fraction = parts.count > 1 ? String(parts[1]) : ""
        while fraction.count < exponent { fraction += "0" }
        return Int64(String(parts[0]) + fraction.prefix(exponent))!
    }

    // MARK: the file

    static let columns5 = [
        "rc_original_app_user_id", "rc_last_seen_app_user_id_alias", "country", "country_source", "product_identifier",
        "product_display_name", "product_duration", "start_time", "end_time", "store", "is_auto_renewable", "is_trial_period",
        "is_in_intro_offer_period", "is_sandbox", "price_in_usd", "takehome_percentage", "store_transaction_id",
        "original_store_transaction_id", "refunded_at", "unsubscribe_detected_at", "billing_issues_detected_at",
        "purchased_currency", "price_in_purchased_currency", "entitlement_identifiers", "renewal_number", "is_trial_conversion",
        "presented_offering", "reserved_subscriber_attributes", "custom_subscriber_attributes", "platform", "ownership_type",
        "effective_end_time", "grace_period_end_time", "tax_percentage", "commission_percentage", "purchase_price_in_usd",
        "purchase_price_in_purchased_currency", "first_seen_time", "offer", "offer_type", "auto_resume_time",
    ]

    public static func header(_ version: Version, updatedAt: Bool) -> [String] {
        var columns = columns5 + (version == .v7 ? ["experiments"] : ["experiment_id", "experiment_variant"])
        if updatedAt { columns.append("updated_at") }
        return columns
    }

    /// The rows as RevenueCat writes them: `,`-separated (or `;`), RFC 4180 quoting, `YYYY-MM-DD HH:MM:SS` UTC.
    public static func csv(_ rows: [Row], version: Version, updatedAt: Bool = true, delimiter: String = ",") -> String {
        func time(_ t: Timestamp?) -> String {
            guard let t else { return "" }
            let s = t.rfc3339
            return String(s.prefix(10)) + " " + String(s.dropFirst(11).prefix(8))
        }
        func quoted(_ s: String) -> String {
            s.contains(delimiter) || s.contains("\"") || s.contains("\n") ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
        }
        var out = header(version, updatedAt: updatedAt).joined(separator: delimiter) + "\r\n"
        for (n, r) in rows.enumerated() {
            let refunded = r.refundedAt != nil
            let usd = refunded ? "0" : r.price
            let entitlements = "[" + r.entitlements.map { "\"\($0)\"" }.joined(separator: ",") + "]"
            let attributes = "{\"$email\":{\"value\":\"user\(n)@example.com\",\"updated_at_ms\":1700000000000}}"
            let custom = n % 17 == 0 ? "{\"note\":{\"value\":\"line one\nline \\\"two\\\", with a comma\"}}" : "{}"
            var cells: [String] = [
                r.appUserID, r.appUserID, r.country, "from_sdk", r.productID, "Pro", r.duration, time(r.start), time(r.end), r.store,
                "true", r.isTrial ? "true" : "false", r.isIntro ? "true" : "false", r.isSandbox ? "true" : "false", usd, "0.7",
                r.transactionID, r.originalTransactionID, time(r.refundedAt), time(r.unsubscribeDetectedAt),
                time(r.billingIssueDetectedAt), r.currency, refunded ? "0" : r.price, entitlements, String(r.renewalNumber),
                r.renewalNumber == 2 ? "true" : "false", "default", attributes, custom, r.store == "stripe" ? "web" : "iOS",
                "PURCHASED", time(r.effectiveEnd), time(r.graceEnd), "0.1", r.store == "stripe" ? "0.029" : "0.15", r.price,
                r.price, time(r.start), "", "", "",
            ]
            cells += version == .v7 ? ["{\"default\":{\"experiment_id\":\"prexp1\",\"variant\":\"a\"}}"] : ["", ""]
            if updatedAt { cells.append(time(r.updatedAt)) }
            out += cells.map(quoted).joined(separator: delimiter) + "\r\n"
        }
        return out
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
