/// The write side of an event's `data`: what the store mappers and the RevenueCat import build, one value per
/// event type, each encoded to the `[String: JSONValue]` object (`object`) in one place, which is then
/// canonicalised and stored as before (issue 34 item 3).
///
/// Beside the read model (`EventPayload`, `TransactionData`), not in it: the read model fills in the
/// contract's defaults (a refund's `cut` true, `kind` `auto_renewable`, `commission_rate` "0", no
/// entitlements), so it cannot tell a member a mapper left out, for the catalog to complete, from one it
/// wrote with the default value; the stored bytes, and so fingerprints and the hash chain, depend on that.
/// Here every member is optional: nil writes no key, a value writes it, default or not. Client
/// `POST /v1/events` bodies never pass through these: they are stored as sent.
public enum EventData {
    /// A `purchase` or `renewal`.
    public struct Transaction: Sendable, Hashable {
        public var productID: String?
        public var entitlements: [String]?
        public var transactionID: String?
        public var originalTransactionID: String?
        public var kind: EventDataValidator.Kind?
        public var offer: EventDataValidator.Offer?
        public var periodStart: Timestamp?
        public var periodEnd: Timestamp?
        /// The billing period as the store or export spells it (`P1W` stays `P1W`).
        public var period: String?
        public var priceMinor: Int64?
        public var currency: String?
        /// Decimal text, as the mapper computed it (`"0.059167"`).
        public var commissionRate: String?
        /// ISO 3166-1 alpha-2.
        public var country: String?
        public var taxMinor: Int64?

        public init(
            productID: String? = nil, entitlements: [String]? = nil, transactionID: String? = nil, originalTransactionID: String? = nil,
            kind: EventDataValidator.Kind? = nil, offer: EventDataValidator.Offer? = nil, periodStart: Timestamp? = nil,
            periodEnd: Timestamp? = nil, period: String? = nil, priceMinor: Int64? = nil, currency: String? = nil,
            commissionRate: String? = nil, country: String? = nil, taxMinor: Int64? = nil
        ) {
            self.productID = productID
            self.entitlements = entitlements
            self.transactionID = transactionID
            self.originalTransactionID = originalTransactionID
            self.kind = kind
            self.offer = offer
            self.periodStart = periodStart
            self.periodEnd = periodEnd
            self.period = period
            self.priceMinor = priceMinor
            self.currency = currency
            self.commissionRate = commissionRate
            self.country = country
            self.taxMinor = taxMinor
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [:]
            o.put(EventDataKey.productID, productID)
            o.put(EventDataKey.entitlements, entitlements)
            o.put(EventDataKey.transactionID, transactionID)
            o.put(EventDataKey.originalTransactionID, originalTransactionID)
            o.put(EventDataKey.kind, kind?.rawValue)
            o.put(EventDataKey.offer, offer?.rawValue)
            o.put(EventDataKey.periodStart, periodStart)
            o.put(EventDataKey.periodEnd, periodEnd)
            o.put(EventDataKey.period, period)
            o.put(EventDataKey.priceMinor, priceMinor)
            o.put(EventDataKey.currency, currency)
            o.put(EventDataKey.commissionRate, commissionRate)
            o.put(EventDataKey.country, country)
            o.put(EventDataKey.taxMinor, taxMinor)
            return o
        }
    }

    /// A `refund`. `amountMinor` and `currency` nil: the catalog's price (draft completion).
    public struct Refund: Sendable, Hashable {
        public var transactionID: String?
        public var amountMinor: Int64?
        public var currency: String?
        public var reason: String?
        /// False: money back, access continues; nil writes nothing (read as true).
        public var cut: Bool?

        public init(transactionID: String? = nil, amountMinor: Int64? = nil, currency: String? = nil, reason: String? = nil, cut: Bool? = nil) {
            self.transactionID = transactionID
            self.amountMinor = amountMinor
            self.currency = currency
            self.reason = reason
            self.cut = cut
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [:]
            o.put(EventDataKey.transactionID, transactionID)
            o.put(EventDataKey.amountMinor, amountMinor)
            o.put(EventDataKey.currency, currency)
            o.put(EventDataKey.reason, reason)
            o.put(EventDataKey.cut, cut)
            return o
        }
    }

    /// A `refund_reversal`.
    public struct RefundReversal: Sendable, Hashable {
        public var transactionID: String

        public init(transactionID: String) { self.transactionID = transactionID }

        public var object: [String: JSONValue] { [EventDataKey.transactionID: .string(transactionID)] }
    }

    /// A `cancellation`: no entitlements named, the draft's product's (draft completion), else every one.
    public struct Cancellation: Sendable, Hashable {
        public var reason: String?
        public var productID: String?
        public var entitlements: [String]?

        public init(reason: String? = nil, productID: String? = nil, entitlements: [String]? = nil) {
            self.reason = reason
            self.productID = productID
            self.entitlements = entitlements
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [:]
            o.put(EventDataKey.reason, reason)
            o.put(EventDataKey.productID, productID)
            o.put(EventDataKey.entitlements, entitlements)
            return o
        }
    }

    /// A `credit` over an explicit window; `entitlement` nil: the draft's product's (draft completion).
    public struct Credit: Sendable, Hashable {
        public var entitlement: String?
        public var windowStart: Timestamp
        public var windowEnd: Timestamp
        public var reason: String?
        /// Who granted it (`apple`, `google`, `stripe`, `revenuecat`).
        public var grantedBy: String?

        public init(entitlement: String? = nil, windowStart: Timestamp, windowEnd: Timestamp, reason: String? = nil, grantedBy: String? = nil) {
            self.entitlement = entitlement
            self.windowStart = windowStart
            self.windowEnd = windowEnd
            self.reason = reason
            self.grantedBy = grantedBy
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [:]
            o.put(EventDataKey.entitlement, entitlement)
            o.put(EventDataKey.windowStart, windowStart)
            o.put(EventDataKey.windowEnd, windowEnd)
            o.put(EventDataKey.reason, reason)
            o.put(EventDataKey.grantedBy, grantedBy)
            return o
        }
    }

    /// An `auto_renew_changed`.
    public struct AutoRenewChanged: Sendable, Hashable {
        public var enabled: Bool
        public var productID: String?
        public var entitlements: [String]?

        public init(enabled: Bool, productID: String? = nil, entitlements: [String]? = nil) {
            self.enabled = enabled
            self.productID = productID
            self.entitlements = entitlements
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [EventDataKey.enabled: .bool(enabled)]
            o.put(EventDataKey.productID, productID)
            o.put(EventDataKey.entitlements, entitlements)
            return o
        }
    }

    /// A `billing_issue`, with grace until `graceUntil` when given.
    public struct BillingIssue: Sendable, Hashable {
        public var productID: String?
        public var entitlements: [String]?
        public var graceUntil: Timestamp?

        public init(productID: String? = nil, entitlements: [String]? = nil, graceUntil: Timestamp? = nil) {
            self.productID = productID
            self.entitlements = entitlements
            self.graceUntil = graceUntil
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [:]
            o.put(EventDataKey.productID, productID)
            o.put(EventDataKey.entitlements, entitlements)
            o.put(EventDataKey.graceUntil, graceUntil)
            return o
        }
    }

    /// An `expiration`.
    public struct Expiration: Sendable, Hashable {
        public var productID: String?
        public var entitlements: [String]?
        /// `voluntary`, `billing`, `price_increase`, `paused`, `other`, … (`EventDataValidator.ExpirationReason`).
        public var reason: String?

        public init(productID: String? = nil, entitlements: [String]? = nil, reason: String? = nil) {
            self.productID = productID
            self.entitlements = entitlements
            self.reason = reason
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [:]
            o.put(EventDataKey.productID, productID)
            o.put(EventDataKey.entitlements, entitlements)
            o.put(EventDataKey.reason, reason)
            return o
        }
    }

    /// A `store_notice`: a store's fact of record that changes no window. `detail` is the store's own
    /// account of it, kept as the mapper wrote it.
    public struct StoreNotice: Sendable, Hashable {
        public var store: String
        public var kind: String
        public var transactionID: String?
        public var detail: [String: JSONValue]

        public init(store: String, kind: String, transactionID: String? = nil, detail: [String: JSONValue]) {
            self.store = store
            self.kind = kind
            self.transactionID = transactionID
            self.detail = detail
        }

        public var object: [String: JSONValue] {
            var o: [String: JSONValue] = [
                EventDataKey.store: .string(store), EventDataKey.kind: .string(kind), EventDataKey.detail: .object(detail),
            ]
            o.put(EventDataKey.transactionID, transactionID)
            return o
        }
    }
}

extension [String: JSONValue] {
    /// Writes a member only when it has a value: the one place the write model spells its values.
    fileprivate mutating func put(_ key: String, _ value: String?) { if let value { self[key] = .string(value) } }
    fileprivate mutating func put(_ key: String, _ value: Int64?) { if let value { self[key] = .number(JSONNumber(value)) } }
    fileprivate mutating func put(_ key: String, _ value: Bool?) { if let value { self[key] = .bool(value) } }
    fileprivate mutating func put(_ key: String, _ value: Timestamp?) { if let value { self[key] = .string(value.rfc3339) } }
    fileprivate mutating func put(_ key: String, _ value: [String]?) { if let value { self[key] = .array(value.map(JSONValue.string)) } }
}
