import LedgerCore

/// What the developer states about refund requests (`--apple-consumption-policy`, a JSON file): the fields
/// of Apple's ConsumptionRequest the ledger cannot know. `customerConsented` must be stated `true`: the
/// ledger never invents consent, and without it nothing is sent.
public struct AppleConsumptionPolicy: Sendable, Equatable {
    public var customerConsented: Bool
    public var platform: Int
    public var sampleContentProvided: Bool
    public var playTime: Int
    public var userStatus: Int
    public var refundPreference: Int
    public var deliveryStatus: Int

    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Parses the policy file; every member is checked against Apple's documented values.
    public init(json text: String) throws {
        guard let o = (try? JSONParser.parse(text))?.objectValue else { throw Invalid(description: "not a JSON object") }
        let known: Set = ["customerConsented", "platform", "sampleContentProvided", "playTime", "userStatus", "refundPreference", "deliveryStatus"]
        if let unknown = o.keys.sorted().first(where: { !known.contains($0) }) { throw Invalid(description: "\(unknown): unknown member") }
        func bool(_ k: String, default d: Bool? = nil) throws -> Bool {
            guard let v = o[k] else {
                if let d { return d }
                throw Invalid(description: "\(k): is required (true or false)")
            }
            guard let b = v.boolValue else { throw Invalid(description: "\(k): must be true or false") }
            return b
        }
        func int(_ k: String, _ range: ClosedRange<Int>) throws -> Int {
            guard let v = o[k] else { return 0 }
            guard let n = v.numberValue?.int64Value, range.contains(Int(n)) else {
                throw Invalid(description: "\(k): must be an integer from \(range.lowerBound) to \(range.upperBound)")
            }
            return Int(n)
        }
        customerConsented = try bool("customerConsented")
        platform = try int("platform", 0...2)
        sampleContentProvided = try bool("sampleContentProvided", default: false)
        playTime = try int("playTime", 0...7)
        userStatus = try int("userStatus", 0...4)
        refundPreference = try int("refundPreference", 0...3)
        deliveryStatus = try int("deliveryStatus", 0...5)
    }
}

/// What the ledger knows about the subscriber who asked for a refund.
public struct AppleConsumptionFacts: Sendable, Equatable {
    /// The subscriber's first production event.
    public var firstSeen: Timestamp?
    /// Lifetime production billings and refunds in USD cents (Apple's buckets are in dollars).
    public var purchasedUSDCents: Int64
    public var refundedUSDCents: Int64
    /// Whether the subscriber has paid in other currencies too (the dollar buckets are then undeclared).
    public var otherCurrencies: Bool

    public init(firstSeen: Timestamp?, purchasedUSDCents: Int64, refundedUSDCents: Int64, otherCurrencies: Bool) {
        self.firstSeen = firstSeen
        self.purchasedUSDCents = purchasedUSDCents
        self.refundedUSDCents = refundedUSDCents
        self.otherCurrencies = otherCurrencies
    }
}

/// Apple's ConsumptionRequest computed from the ledger and the policy (pure: the caller passes the time).
public enum AppleConsumptionInfo {
    /// The body of Send Consumption Information, or nil when the policy does not state consent.
    public static func request(
        policy: AppleConsumptionPolicy, facts: AppleConsumptionFacts, transaction: [String: JSONValue], now: Timestamp
    ) -> JSONValue? {
        guard policy.customerConsented else { return nil }
        let dollars: (Int64) -> Int = { facts.otherCurrencies ? 0 : dollarBucket($0) }
        return .object([
            "customerConsented": true,
            "consumptionStatus": .number(JSONNumber(Int64(consumptionStatus(transaction, now: now)))),
            "platform": .number(JSONNumber(Int64(policy.platform))),
            "sampleContentProvided": .bool(policy.sampleContentProvided),
            "deliveryStatus": .number(JSONNumber(Int64(policy.deliveryStatus))),
            "appAccountToken": .string(transaction["appAccountToken"]?.stringValue ?? ""),
            "accountTenure": .number(JSONNumber(Int64(tenureBucket(from: facts.firstSeen, to: now)))),
            "playTime": .number(JSONNumber(Int64(policy.playTime))),
            "lifetimeDollarsRefunded": .number(JSONNumber(Int64(dollars(facts.refundedUSDCents)))),
            "lifetimeDollarsPurchased": .number(JSONNumber(Int64(dollars(facts.purchasedUSDCents)))),
            "userStatus": .number(JSONNumber(Int64(policy.userStatus))),
            "refundPreference": .number(JSONNumber(Int64(policy.refundPreference))),
        ])
    }

    /// 1 not consumed, 2 partially, 3 fully: how much of the transaction's period has passed; 0 (undeclared)
    /// for what has no period.
    static func consumptionStatus(_ t: [String: JSONValue], now: Timestamp) -> Int {
        guard let start = appleMillis(t["purchaseDate"]), let end = appleMillis(t["expiresDate"]) else { return 0 }
        if now.microseconds >= end { return 3 }
        return now.microseconds > start ? 2 : 1
    }

    static func appleMillis(_ v: JSONValue?) -> Int64? {
        guard let ms = v?.numberValue?.int64Value else { return nil }
        let (us, overflow) = ms.multipliedReportingOverflow(by: 1000)
        return overflow ? nil : us
    }

    /// Apple's account tenure buckets: 0–3, 3–10, 10–30, 30–90, 90–180, 180–365 days, over 365.
    static func tenureBucket(from first: Timestamp?, to now: Timestamp) -> Int {
        guard let first, now >= first else { return 0 }
        let (elapsed, overflow) = now.microseconds.subtractingReportingOverflow(first.microseconds)
        guard !overflow else { return 0 }
        let days = elapsed / 86_400_000_000
        switch days {
        case ..<3: return 1
        case ..<10: return 2
        case ..<30: return 3
        case ..<90: return 4
        case ..<180: return 5
        case ..<365: return 6
        default: return 7
        }
    }

    /// Apple's dollar buckets: 0, 0.01–49.99, 50–99.99, 100–499.99, 500–999.99, 1000–1999.99, over 2000.
    static func dollarBucket(_ cents: Int64) -> Int {
        switch cents {
        case ..<1: return 1
        case ..<5_000: return 2
        case ..<10_000: return 3
        case ..<50_000: return 4
        case ..<100_000: return 5
        case ..<200_000: return 6
        default: return 7
        }
    }
}
