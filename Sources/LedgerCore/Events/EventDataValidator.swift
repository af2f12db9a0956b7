/// Checks an event's `data` against its type's payload (docs/semantics.md section 2).
///
/// Events are self-describing: everything the fold and the reports need must be in `data` when it is
/// stored. Unknown members are refused (raw store payloads belong in `metadata`).
public enum EventDataValidator {
    public enum Kind: String, Sendable, CaseIterable {
        case autoRenewable = "auto_renewable"
        case nonRenewing = "non_renewing"
        case free, lifetime
    }
    public enum Offer: String, Sendable, CaseIterable { case none, trial, intro, promo }
    public enum CancellationReason: String, Sendable, CaseIterable {
        case familyRevoked = "family_revoked"
        case chargeback, developer, other
    }
    public enum ExpirationReason: String, Sendable, CaseIterable {
        case voluntary, billing
        case priceIncrease = "price_increase"
        case productUnavailable = "product_unavailable"
        case paused, other
    }

    /// Validates `data` and returns it typed. Callers that only need the verdict use `validate`, which
    /// skips building the value (an import validates every line).
    public static func payload(
        type: EventType, data: [String: JSONValue], occurredAt: Timestamp, path: String
    ) throws(EventValidationError) -> EventPayload {
        try validate(type: type, data: data, occurredAt: occurredAt, path: path)
        return EventPayload(type: type, data: data)
    }

    public static func validate(
        type: EventType, data: [String: JSONValue], occurredAt: Timestamp, path: String
    ) throws(EventValidationError) {
        var r = FieldReader(path: path, members: data)
        if [.purchase, .renewal, .autoRenewChanged, .billingIssue, .expiration].contains(type) {
            _ = try r.integer("catalog_revision", minimum: 1)
        }
        switch type {
        case .purchase, .renewal:
            try transaction(&r, type: type)
        case .refund:
            _ = try r.requiredIdentifier("transaction_id")
            guard try r.integer("amount_minor", maximum: Limits.maxMoneyMinor) != nil else { throw r.fail("amount_minor", "is required") }
            try currency(&r)
            _ = try r.string("reason")
            _ = try r.bool("cut")  // false: money back, access continues (a partial or goodwill refund)
        case .refundReversal:
            _ = try r.requiredIdentifier("transaction_id")
        case .cancellation:
            _ = try r.stringArray("entitlements")
            guard try r.oneOf("reason", CancellationReason.self) != nil else { throw r.fail("reason", "is required") }
        case .credit:
            _ = try r.requiredIdentifier("entitlement")
            let duration = try isoDuration(&r, "duration")
            let start = try r.timestamp("window_start")
            let end = try r.timestamp("window_end")
            switch (duration, start, end) {
            case (.some, nil, nil): break
            case (nil, .some(let s), .some(let e)):
                guard e > s else { throw r.fail("window_end", "must be after window_start") }
            case (.some, _, _): throw r.fail("duration", "give either duration or window_start and window_end, not both")
            default: throw r.fail(start == nil ? "window_start" : "window_end", "is required (or give duration)")
            }
            _ = try r.requiredString("reason")
            _ = try r.requiredString("granted_by")
        case .creditReversal:
            let id = try r.requiredString("credit_event_id")
            guard isUUID(id) else { throw r.fail("credit_event_id", "must be an event_id (UUID)") }
        case .autoRenewChanged:
            guard try r.bool("enabled") != nil else { throw r.fail("enabled", "is required") }
            _ = try r.requiredIdentifier("product_id")
            try entitlements(&r)
        case .billingIssue:
            _ = try r.requiredIdentifier("product_id")
            try entitlements(&r)
            if let grace = try r.timestamp("grace_until"), grace <= occurredAt {
                throw r.fail("grace_until", "must be after occurred_at")
            }
        case .expiration:
            _ = try r.requiredIdentifier("product_id")
            try entitlements(&r)
            guard try r.oneOf("reason", ExpirationReason.self) != nil else { throw r.fail("reason", "is required") }
        case .storeNotice:
            _ = try r.requiredIdentifier("store")
            _ = try r.requiredIdentifier("kind")
            _ = try r.identifier("transaction_id")
            if let detail = try r.object("detail") { try Limits.checkMetadata(detail, field: r.field("detail")) }
        case .transferOut:
            try transferEnds(&r, other: "to_subscriber")
        case .transferIn:
            try transferEnds(&r, other: "from_subscriber")
            guard case .array(let list)? = r.value("windows") else { throw r.fail("windows", "is required (an array, possibly empty)") }
            guard list.count <= Limits.maxTransferredWindows else {
                throw r.fail("windows", "must carry at most \(Limits.maxTransferredWindows) windows, not \(list.count)")
            }
            for (i, item) in list.enumerated() {
                guard case .object(let o) = item else { throw r.fail("windows[\(i)]", "must be an object") }
                var w = FieldReader(path: r.field("windows[\(i)]"), members: o)
                _ = try w.requiredIdentifier("entitlement")
                guard try w.oneOf("kind", Window.Kind.self) != nil else { throw w.fail("kind", "is required") }
                _ = try w.identifier("product_id")
                _ = try w.identifier("transaction_id")
                let start = try w.requiredTimestamp("start")
                if let end = try w.timestamp("end"), end <= start { throw w.fail("end", "must be after start") }
                _ = try w.bool("auto_renewable")
                try w.rejectUnknown()
            }
            if let carried = r.value("transactions") {
                guard case .array(let list) = carried, list.count <= Limits.maxTransferredWindows else {
                    throw r.fail("transactions", "must be an array of at most \(Limits.maxTransferredWindows) transactions")
                }
                for (i, item) in list.enumerated() {
                    guard case .object(let o) = item else { throw r.fail("transactions[\(i)]", "must be an object") }
                    try carriedTransaction(FieldReader(path: r.field("transactions[\(i)]"), members: o))
                }
            }
        case .merged:
            guard let into = try r.string("into") else { throw r.fail("into", "is required (the subscriber merged into)") }
            guard Identifiers.isValidSubscriberID(into) else { throw r.fail("into", Identifiers.subscriberIDRule) }
        }
        try r.rejectUnknown()
    }

    /// One paid transaction a `transfer_in` carries, with its terms (docs/identity.md).
    private static func carriedTransaction(_ reader: FieldReader) throws(EventValidationError) {
        var t = reader
        _ = try t.requiredIdentifier("transaction_id")
        _ = try t.stringArray("entitlements")
        guard let kind = try t.oneOf("kind", Window.Kind.self) else { throw t.fail("kind", "is required") }
        guard kind.isPaid || kind == .lifetime else { throw t.fail("kind", "must be paid, intro, promo or lifetime") }
        try currency(&t)
        guard try t.integer("price_minor", maximum: Limits.maxMoneyMinor) != nil else { throw t.fail("price_minor", "is required") }
        guard let commission = try t.integer("commission_minor", maximum: Limits.maxMoneyMinor) else {
            throw t.fail("commission_minor", "is required")
        }
        _ = commission
        _ = try t.requiredTimestamp("occurred_at")
        let start = try t.requiredTimestamp("start")
        if let end = try t.timestamp("end"), end < start { throw t.fail("end", "must not be before start") }
        _ = try t.timestamp("stop")
        _ = try isoDuration(&t, "period")
        let carriedPrice = try t.integer("price_minor", maximum: Limits.maxMoneyMinor) ?? 0
        if let tax = try t.integer(EventDataKey.taxMinor, maximum: Limits.maxMoneyMinor), tax > carriedPrice {
            throw t.fail(EventDataKey.taxMinor, "must not exceed price_minor")
        }
        if let c = try t.string(EventDataKey.country), !Countries.isValidAlpha2(c) {
            throw t.fail(EventDataKey.country, "must be an ISO 3166-1 alpha-2 country code in upper case")
        }
        _ = try t.identifier(EventDataKey.store)
        _ = try t.identifier(EventDataKey.productID)
        guard case .array(let refunds)? = t.value("refunds") else { throw t.fail("refunds", "is required (an array, possibly empty)") }
        guard refunds.count <= Limits.maxTransferredWindows else { throw t.fail("refunds", "must list at most \(Limits.maxTransferredWindows)") }
        for (i, item) in refunds.enumerated() {
            guard case .object(let o) = item else { throw t.fail("refunds[\(i)]", "must be an object") }
            var r = FieldReader(path: t.field("refunds[\(i)]"), members: o)
            _ = try r.requiredTimestamp("at")
            guard try r.integer("amount_minor", maximum: Limits.maxMoneyMinor) != nil else { throw r.fail("amount_minor", "is required") }
            _ = try r.bool("cut")
            try r.rejectUnknown()
        }
        try t.rejectUnknown()
    }

    /// The members both halves of a transfer carry: the purchase, the other subscriber and why.
    private static func transferEnds(_ r: inout FieldReader, other: String) throws(EventValidationError) {
        _ = try r.requiredIdentifier("store")
        _ = try r.requiredIdentifier("purchase_id")
        guard let s = try r.string(other) else { throw r.fail(other, "is required") }
        guard Identifiers.isValidSubscriberID(s) else { throw r.fail(other, Identifiers.subscriberIDRule) }
        guard try r.oneOf("reason", TransferReason.self) != nil else { throw r.fail("reason", "is required") }
    }

    private static func transaction(_ r: inout FieldReader, type: EventType) throws(EventValidationError) {
        _ = try r.requiredIdentifier("product_id")
        try entitlements(&r)
        _ = try r.requiredIdentifier("transaction_id")
        _ = try r.identifier("original_transaction_id")
        let kind = try r.oneOf("kind", Kind.self)
        guard let kind else { throw r.fail("kind", "is required") }
        if type == .renewal, kind != .autoRenewable {
            throw r.fail("kind", "must be \"auto_renewable\" for a renewal")
        }
        _ = try r.oneOf("offer", Offer.self)
        let start = try r.timestamp("period_start")
        let end = try r.timestamp("period_end")
        let period = try isoDuration(&r, "period")
        let duration = try isoDuration(&r, "duration")
        switch kind {
        case .autoRenewable:
            guard let start else { throw r.fail("period_start", "is required for an auto-renewable subscription") }
            guard let end else { throw r.fail("period_end", "is required for an auto-renewable subscription") }
            guard end > start else { throw r.fail("period_end", "must be after period_start") }
            guard period != nil else { throw r.fail("period", "is required for an auto-renewable subscription (e.g. \"P1M\")") }
            guard duration == nil else { throw r.fail("duration", "is for non-renewing purchases; use period") }
        case .nonRenewing:
            if duration == nil {
                guard let start, let end else {
                    throw r.fail("duration", "is required for a non-renewing purchase (e.g. \"P3M\")")
                }
                guard end > start else { throw r.fail("period_end", "must be after period_start") }
            } else if start != nil || end != nil {
                throw r.fail("duration", "give either duration or period_start and period_end, not both")
            }
        case .free, .lifetime:
            break
        }
        let price = try r.integer("price_minor", maximum: Limits.maxMoneyMinor)
        let hasCurrency = r.value("currency") != nil  // consumes it: `"currency": null` is absent, not unknown
        if hasCurrency { try currency(&r) }
        if kind != .free {
            guard price != nil else { throw r.fail("price_minor", "is required (integer minor units, e.g. 999)") }
            guard hasCurrency else { throw r.fail("currency", "is required (ISO 4217, e.g. \"USD\")") }
        } else if (price ?? 0) > 0 {
            throw r.fail("price_minor", "must be 0 for a free product")
        }
        try countryAndTax(&r, price: price)
        if let rate = r.value("commission_rate") {
            let text: String
            switch rate {
            case .string(let s): text = s
            case .number(let n): text = n.canonical
            default: throw r.fail("commission_rate", "must be a decimal between 0 and 1, such as \"0.30\"")
            }
            guard let n = JSONNumber(jsonText: Substring(text)), !n.canonical.hasPrefix("-"),
                n.canonical == "0" || n.canonical == "1" || n.canonical.hasPrefix("0.")
            else { throw r.fail("commission_rate", "must be a decimal between 0 and 1, such as \"0.30\"") }
        }
    }

    /// `country` (ISO 3166-1 alpha-2, upper case) and `tax_minor` (tax included in the price, so at most it).
    private static func countryAndTax(_ r: inout FieldReader, price: Int64?) throws(EventValidationError) {
        if let c = try r.string(EventDataKey.country), !Countries.isValidAlpha2(c) {
            throw r.fail(EventDataKey.country, "must be an ISO 3166-1 alpha-2 country code in upper case such as \"DE\", not \"\(c.prefix(20))\"")
        }
        if let tax = try r.integer(EventDataKey.taxMinor, maximum: Limits.maxMoneyMinor), tax > (price ?? 0) {
            throw r.fail(EventDataKey.taxMinor, "must not exceed price_minor (\(price ?? 0)): it is the tax included in the price")
        }
    }

    private static func entitlements(_ r: inout FieldReader) throws(EventValidationError) {
        guard let list = try r.stringArray("entitlements") else { throw r.fail("entitlements", "is required") }
        guard !list.isEmpty else { throw r.fail("entitlements", "must name at least one entitlement") }
    }

    private static func currency(_ r: inout FieldReader) throws(EventValidationError) {
        guard let c = try r.string("currency") else { throw r.fail("currency", "is required") }
        guard Identifiers.isValidCurrency(c) else { throw r.fail("currency", "must be an ISO 4217 code such as \"USD\"") }
    }

    private static func isoDuration(_ r: inout FieldReader, _ name: String) throws(EventValidationError) -> ISODuration? {
        guard let s = try r.string(name) else { return nil }
        guard let d = ISODuration(s) else { throw r.fail(name, "must be an ISO 8601 duration such as \"P1M\", not \"\(s)\"") }
        return d
    }

    static func isUUID(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count == 36 else { return false }
        for (i, c) in u.enumerated() {
            if [8, 13, 18, 23].contains(i) {
                guard c == UInt8(ascii: "-") else { return false }
            } else {
                guard (0x30...0x39).contains(c) || (0x61...0x66).contains(c) || (0x41...0x46).contains(c) else { return false }
            }
        }
        return true
    }
}
