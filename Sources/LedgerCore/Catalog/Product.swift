/// A catalog product: what a store product id unlocks and costs. Kept with every revision.
public struct Product: Sendable, Hashable {
    public var productID: String
    public var revision: Int
    public var entitlements: [String]
    public var kind: EventDataValidator.Kind
    /// Billing period of an auto-renewable product.
    public var period: ISODuration?
    /// Length of a non-renewing product.
    public var duration: ISODuration?
    public var priceMinor: Int64
    public var currency: String
    /// Canonical decimal text, e.g. `0.3`.
    public var commissionRate: JSONNumber
    public var recordedAt: Timestamp?

    public init(
        productID: String, revision: Int = 0, entitlements: [String], kind: EventDataValidator.Kind,
        period: ISODuration? = nil, duration: ISODuration? = nil, priceMinor: Int64, currency: String,
        commissionRate: JSONNumber, recordedAt: Timestamp? = nil
    ) {
        self.productID = productID
        self.revision = revision
        self.entitlements = entitlements
        self.kind = kind
        self.period = period
        self.duration = duration
        self.priceMinor = priceMinor
        self.currency = currency
        self.commissionRate = commissionRate
        self.recordedAt = recordedAt
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "product_id": .string(productID),
            "revision": .number(JSONNumber(Int64(revision))),
            "entitlements": .array(entitlements.map(JSONValue.string)),
            "kind": .string(kind.rawValue),
            "price_minor": .number(JSONNumber(priceMinor)),
            "currency": .string(currency),
            "commission_rate": .string(commissionRate.canonical),
            "period": period.map { .string($0.text) } ?? .null,
            "duration": duration.map { .string($0.text) } ?? .null,
        ]
        if let recordedAt { o["recorded_at"] = .string(recordedAt.rfc3339) }
        return .object(o)
    }

    /// Reads the body of `PUT /v1/catalog/products/{product_id}`.
    public static func decode(productID: String, _ value: JSONValue) throws(EventValidationError) -> Product {
        if let problem = Identifiers.problem(productID) { throw EventValidationError(field: "product_id", reason: problem) }
        guard case .object(let members) = value else {
            throw EventValidationError(field: "$", reason: "must be a product object, not \(value.typeName)")
        }
        var r = FieldReader(path: "", members: members)
        if let id = try r.string("product_id"), id != productID {
            throw r.fail("product_id", "differs from the product id in the path")
        }
        guard let entitlements = try r.stringArray("entitlements"), !entitlements.isEmpty else {
            throw r.fail("entitlements", "is required (at least one entitlement)")
        }
        guard let kind = try r.oneOf("kind", EventDataValidator.Kind.self) else { throw r.fail("kind", "is required") }
        let period = try r.string("period").map { (s: String) throws(EventValidationError) -> ISODuration in
            guard let d = ISODuration(s) else { throw r.fail("period", "must be an ISO 8601 duration such as \"P1M\"") }
            return d
        }
        let duration = try r.string("duration").map { (s: String) throws(EventValidationError) -> ISODuration in
            guard let d = ISODuration(s) else { throw r.fail("duration", "must be an ISO 8601 duration such as \"P3M\"") }
            return d
        }
        switch kind {
        case .autoRenewable:
            guard period != nil else { throw r.fail("period", "is required for an auto-renewable product") }
            guard duration == nil else { throw r.fail("duration", "is for non-renewing products; use period") }
        case .nonRenewing:
            guard duration != nil else { throw r.fail("duration", "is required for a non-renewing product") }
            guard period == nil else { throw r.fail("period", "is for auto-renewable products; use duration") }
        case .free, .lifetime:
            guard period == nil, duration == nil else {
                throw r.fail(period != nil ? "period" : "duration", "does not apply to a \(kind.rawValue) product")
            }
        }
        guard let price = try r.integer("price_minor", maximum: Limits.maxMoneyMinor) else { throw r.fail("price_minor", "is required") }
        guard let currency = try r.string("currency") else { throw r.fail("currency", "is required") }
        guard Identifiers.isValidCurrency(currency) else { throw r.fail("currency", "must be an ISO 4217 code such as \"USD\"") }
        let rate: JSONNumber
        switch r.value("commission_rate") {
        case nil: rate = JSONNumber(0)
        case .string(let s)?:
            guard let n = JSONNumber(jsonText: Substring(s)), Self.isRate(n) else {
                throw r.fail("commission_rate", "must be a decimal between 0 and 1, such as \"0.30\"")
            }
            rate = n
        case .number(let n)?:
            guard Self.isRate(n) else { throw r.fail("commission_rate", "must be a decimal between 0 and 1, such as \"0.30\"") }
            rate = n
        default:
            throw r.fail("commission_rate", "must be a decimal between 0 and 1, such as \"0.30\"")
        }
        if kind == .free, price != 0 { throw r.fail("price_minor", "must be 0 for a free product") }
        _ = r.value("revision")
        _ = r.value("recorded_at")
        try r.rejectUnknown()
        return Product(
            productID: productID, entitlements: entitlements, kind: kind, period: period, duration: duration,
            priceMinor: price, currency: currency, commissionRate: rate)
    }

    static func isRate(_ n: JSONNumber) -> Bool {
        !n.canonical.hasPrefix("-") && (n.canonical == "0" || n.canonical == "1" || n.canonical.hasPrefix("0."))
    }
}
