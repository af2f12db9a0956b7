import LedgerCore
import Testing

/// One broken payload: the type's valid data with members set or removed, and the error expected.
struct DataCase: Sendable, CustomTestStringConvertible {
    var type: EventType
    var set: [String: JSONValue] = [:]
    var remove: [String] = []
    var field: String
    var reason: String

    init(_ type: EventType, set: [String: JSONValue] = [:], remove: [String] = [], _ field: String, _ reason: String) {
        self.type = type
        self.set = set
        self.remove = remove
        self.field = field
        self.reason = reason
    }

    var testDescription: String {
        let changes = set.keys.sorted().map { "\($0)=\(set[$0]!.canonicalString().prefix(40))" } + remove.map { "-\($0)" }
        return "\(type.rawValue) \(changes.joined(separator: " ")) → \(field)"
    }

    func members() -> [String: JSONValue] { Fixtures.event(type, settingData: set, removingData: remove) }
}

/// A payload that must be accepted.
struct ValidDataCase: Sendable, CustomTestStringConvertible {
    var type: EventType
    var set: [String: JSONValue] = [:]
    var remove: [String] = []
    var testDescription: String

    init(_ description: String, _ type: EventType, set: [String: JSONValue] = [:], remove: [String] = []) {
        self.type = type
        self.set = set
        self.remove = remove
        self.testDescription = description
    }
}

private let autoRenewableBounds = ["period_start", "period_end", "period"]

@Suite("Event decoding: the payload of each type")
struct EventDataValidatorTests {
    static let invalid: [DataCase] = [
        // purchase: the transaction fields
        DataCase(.purchase, remove: ["product_id"], "data.product_id", "is required"),
        DataCase(.purchase, set: ["product_id": ""], "data.product_id", "must not be empty"),
        DataCase(.purchase, set: ["product_id": 5], "data.product_id", "must be a string, not number"),
        DataCase(.purchase, remove: ["entitlements"], "data.entitlements", "is required"),
        DataCase(.purchase, set: ["entitlements": []], "data.entitlements", "at least one"),
        DataCase(.purchase, set: ["entitlements": "pro"], "data.entitlements", "array of strings, not string"),
        DataCase(.purchase, set: ["entitlements": ["pro", 1]], "data.entitlements[1]", "non-empty string"),
        DataCase(.purchase, set: ["entitlements": ["pro", ""]], "data.entitlements[1]", "non-empty string"),
        DataCase(.purchase, set: ["entitlements": ["pro", "plus", "pro"]], "data.entitlements[2]", #"repeats "pro""#),
        DataCase(.purchase, remove: ["transaction_id"], "data.transaction_id", "is required"),
        DataCase(.purchase, set: ["transaction_id": 123], "data.transaction_id", "must be a string, not number"),
        DataCase(.purchase, set: ["transaction_id": ""], "data.transaction_id", "must not be empty"),
        DataCase(.purchase, set: ["original_transaction_id": 5], "data.original_transaction_id", "must be a string"),
        DataCase(.purchase, remove: ["kind"], "data.kind", "is required"),
        DataCase(.purchase, set: ["kind": "monthly"], "data.kind", #"not "monthly""#),
        DataCase(.purchase, set: ["kind": "auto-renewable"], "data.kind", #""auto_renewable", "non_renewing""#),
        DataCase(.purchase, set: ["offer": "discount"], "data.offer", #"must be one of "none", "trial""#),
        DataCase(.purchase, set: ["period_start": "soon"], "data.period_start", "RFC 3339"),
        DataCase(.purchase, set: ["period_end": "2026-04-31T10:00:00Z"], "data.period_end", "valid date"),
        DataCase(.purchase, remove: ["period_start"], "data.period_start", "required for an auto-renewable"),
        DataCase(.purchase, remove: ["period_end"], "data.period_end", "required for an auto-renewable"),
        DataCase(.purchase, set: ["period_end": "2026-03-01T10:00:00Z"], "data.period_end", "after period_start"),
        DataCase(.purchase, set: ["period_end": "2026-02-01T10:00:00Z"], "data.period_end", "after period_start"),
        DataCase(.purchase, set: ["period_end": "2026-03-01T12:00:00+02:00"], "data.period_end", "after period_start"),
        DataCase(.purchase, remove: ["period"], "data.period", "is required"),
        DataCase(.purchase, set: ["period": "1 month"], "data.period", #"ISO 8601 duration such as "P1M", not "1 month""#),
        DataCase(.purchase, set: ["period": "P0D"], "data.period", "ISO 8601 duration"),
        DataCase(.purchase, set: ["period": 30], "data.period", "must be a string, not number"),
        DataCase(.purchase, set: ["duration": "P1M"], "data.duration", "use period"),
        DataCase(.purchase, remove: ["price_minor"], "data.price_minor", "is required"),
        DataCase(.purchase, set: ["price_minor": -1], "data.price_minor", "at least 0"),
        DataCase(.purchase, set: ["price_minor": Fixtures.number("9.99")], "data.price_minor", "integer"),
        DataCase(.purchase, set: ["price_minor": "999"], "data.price_minor", "must be an integer, not string"),
        DataCase(.purchase, remove: ["currency"], "data.currency", "is required"),
        DataCase(.purchase, set: ["currency": nil], "data.currency", "is required"),
        DataCase(.purchase, set: ["currency": "usd"], "data.currency", "ISO 4217"),
        DataCase(.purchase, set: ["currency": "US"], "data.currency", "ISO 4217"),
        DataCase(.purchase, set: ["currency": "USDX"], "data.currency", "ISO 4217"),
        DataCase(.purchase, set: ["currency": "US1"], "data.currency", "ISO 4217"),
        DataCase(.purchase, set: ["currency": "ÜSD"], "data.currency", "ISO 4217"),
        DataCase(.purchase, set: ["currency": 840], "data.currency", "must be a string, not number"),
        DataCase(.purchase, set: ["commission_rate": "1.5"], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": "1.0001"], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": "-0.1"], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": "30%"], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": ""], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": " 0.3"], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": ".3"], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": 2], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": Fixtures.number("-0.3")], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": true], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["commission_rate": ["0.3"]], "data.commission_rate", "between 0 and 1"),
        DataCase(.purchase, set: ["store_payload": ["x": 1]], "data.store_payload", "is not a known field"),
        DataCase(.purchase, set: ["entitlement": "pro"], "data.entitlement", "is not a known field"),
        // purchase: kind rules
        DataCase(
            .purchase, set: ["kind": "non_renewing"], remove: autoRenewableBounds, "data.duration",
            "required for a non-renewing"),
        DataCase(
            .purchase, set: ["kind": "non_renewing"], remove: ["period_end", "period"], "data.duration",
            "required for a non-renewing"),
        DataCase(.purchase, set: ["kind": "non_renewing", "duration": "P3M"], "data.duration", "not both"),
        DataCase(
            .purchase, set: ["kind": "non_renewing", "duration": "P3M"], remove: ["period_end"], "data.duration",
            "not both"),
        DataCase(
            .purchase, set: ["kind": "non_renewing", "period_end": "2026-01-01T00:00:00Z"], "data.period_end",
            "after period_start"),
        DataCase(
            .purchase, set: ["kind": "non_renewing", "duration": "3 months"], remove: autoRenewableBounds,
            "data.duration", "ISO 8601 duration"),
        DataCase(.purchase, set: ["kind": "free", "price_minor": 100], "data.price_minor", "must be 0 for a free product"),
        DataCase(.purchase, set: ["kind": "free", "currency": "eur"], "data.currency", "ISO 4217"),
        DataCase(.purchase, set: ["kind": "lifetime"], remove: ["price_minor"], "data.price_minor", "is required"),
        DataCase(.purchase, set: ["kind": "lifetime"], remove: ["currency"], "data.currency", "is required"),
        // renewal
        DataCase(
            .renewal, set: ["kind": "non_renewing", "duration": "P1M"], remove: autoRenewableBounds, "data.kind",
            #"must be "auto_renewable" for a renewal"#),
        DataCase(.renewal, set: ["kind": "free"], "data.kind", #"must be "auto_renewable" for a renewal"#),
        DataCase(.renewal, set: ["kind": "lifetime"], "data.kind", #"must be "auto_renewable" for a renewal"#),
        DataCase(.renewal, remove: ["period"], "data.period", "is required"),
        DataCase(.renewal, remove: ["transaction_id"], "data.transaction_id", "is required"),
        // refund
        DataCase(.refund, remove: ["transaction_id"], "data.transaction_id", "is required"),
        DataCase(.refund, remove: ["amount_minor"], "data.amount_minor", "is required"),
        DataCase(.refund, set: ["amount_minor": -5], "data.amount_minor", "at least 0"),
        DataCase(.refund, set: ["amount_minor": "9.99"], "data.amount_minor", "must be an integer"),
        DataCase(.refund, remove: ["currency"], "data.currency", "is required"),
        DataCase(.refund, set: ["currency": "EURO"], "data.currency", "ISO 4217"),
        DataCase(.refund, set: ["reason": 5], "data.reason", "must be a string"),
        DataCase(.refund, set: ["window": "x"], "data.window", "is not a known field"),
        // refund_reversal
        DataCase(.refundReversal, remove: ["transaction_id"], "data.transaction_id", "is required"),
        DataCase(.refundReversal, set: ["amount_minor": 999], "data.amount_minor", "is not a known field"),
        // cancellation
        DataCase(.cancellation, remove: ["reason"], "data.reason", "is required"),
        DataCase(.cancellation, set: ["reason": "fraud"], "data.reason", #""family_revoked", "chargeback""#),
        DataCase(.cancellation, set: ["entitlements": "pro"], "data.entitlements", "array of strings"),
        DataCase(.cancellation, set: ["entitlements": [""]], "data.entitlements[0]", "non-empty string"),
        DataCase(.cancellation, set: ["product_id": "pro.monthly"], "data.product_id", "is not a known field"),
        // credit
        DataCase(.credit, remove: ["entitlement"], "data.entitlement", "is required"),
        DataCase(.credit, set: ["entitlement": ["pro"]], "data.entitlement", "must be a string, not array"),
        DataCase(.credit, remove: ["duration"], "data.window_start", "is required (or give duration)"),
        DataCase(
            .credit, set: ["window_start": "2026-03-01T00:00:00Z", "window_end": "2026-03-08T00:00:00Z"], "data.duration",
            "not both"),
        DataCase(.credit, set: ["window_start": "2026-03-01T00:00:00Z"], "data.duration", "not both"),
        DataCase(.credit, set: ["window_end": "2026-03-08T00:00:00Z"], "data.duration", "not both"),
        DataCase(
            .credit, set: ["window_start": "2026-03-01T00:00:00Z"], remove: ["duration"], "data.window_end",
            "is required (or give duration)"),
        DataCase(
            .credit, set: ["window_end": "2026-03-08T00:00:00Z"], remove: ["duration"], "data.window_start",
            "is required (or give duration)"),
        DataCase(
            .credit, set: ["window_start": "2026-03-08T00:00:00Z", "window_end": "2026-03-08T00:00:00Z"],
            remove: ["duration"], "data.window_end", "after window_start"),
        DataCase(
            .credit, set: ["window_start": "2026-03-08T00:00:00Z", "window_end": "2026-03-01T00:00:00Z"],
            remove: ["duration"], "data.window_end", "after window_start"),
        DataCase(
            .credit, set: ["window_start": "soon", "window_end": "2026-03-08T00:00:00Z"], remove: ["duration"],
            "data.window_start", "RFC 3339"),
        DataCase(.credit, set: ["duration": "P1.5D"], "data.duration", "ISO 8601 duration"),
        DataCase(.credit, set: ["duration": "7 days"], "data.duration", "ISO 8601 duration"),
        DataCase(.credit, remove: ["reason"], "data.reason", "is required"),
        DataCase(.credit, remove: ["granted_by"], "data.granted_by", "is required"),
        DataCase(.credit, set: ["granted_by": ""], "data.granted_by", "must not be empty"),
        DataCase(.credit, set: ["entitlements": ["pro"]], "data.entitlements", "is not a known field"),
        // credit_reversal
        DataCase(.creditReversal, remove: ["credit_event_id"], "data.credit_event_id", "is required"),
        DataCase(.creditReversal, set: ["credit_event_id": "not-a-uuid"], "data.credit_event_id", "UUID"),
        DataCase(.creditReversal, set: ["credit_event_id": "0b5e6c1a4f2d4c7e9a3b1c2d3e4f5a6b"], "data.credit_event_id", "UUID"),
        DataCase(
            .creditReversal, set: ["credit_event_id": "{0b5e6c1a-4f2d-4c7e-9a3b-1c2d3e4f5a6b}"],
            "data.credit_event_id", "UUID"),
        DataCase(.creditReversal, set: ["credit_event_id": "0b5e6c1a-4f2d-4c7e-9a3b-1c2d3e4f5a6g"], "data.credit_event_id", "UUID"),
        DataCase(.creditReversal, set: ["credit_event_id": "0b5e6c1a-4f2d-4c7e-9a3b-1c2d3e4f5a6"], "data.credit_event_id", "UUID"),
        DataCase(.creditReversal, set: ["credit_event_id": "0b5e6c1a-4f2d-4c7e-9a3b-1c2d3e4f5a6bb"], "data.credit_event_id", "UUID"),
        DataCase(.creditReversal, set: ["credit_event_id": "0b5e6c1a-4f2d-4c7e9-a3b-1c2d3e4f5a6b"], "data.credit_event_id", "UUID"),
        DataCase(.creditReversal, set: ["credit_event_id": 42], "data.credit_event_id", "must be a string"),
        // auto_renew_changed
        DataCase(.autoRenewChanged, remove: ["enabled"], "data.enabled", "is required"),
        DataCase(.autoRenewChanged, set: ["enabled": "false"], "data.enabled", "must be true or false, not string"),
        DataCase(.autoRenewChanged, set: ["enabled": 0], "data.enabled", "must be true or false, not number"),
        DataCase(.autoRenewChanged, remove: ["product_id"], "data.product_id", "is required"),
        DataCase(.autoRenewChanged, remove: ["entitlements"], "data.entitlements", "is required"),
        DataCase(.autoRenewChanged, set: ["entitlements": []], "data.entitlements", "at least one"),
        // billing_issue
        DataCase(.billingIssue, set: ["grace_until": "2026-03-01T10:00:00Z"], "data.grace_until", "after occurred_at"),
        DataCase(.billingIssue, set: ["grace_until": "2026-03-01T12:00:00+02:00"], "data.grace_until", "after occurred_at"),
        DataCase(.billingIssue, set: ["grace_until": "2026-02-20T10:00:00Z"], "data.grace_until", "after occurred_at"),
        DataCase(.billingIssue, set: ["grace_until": "tomorrow"], "data.grace_until", "RFC 3339"),
        DataCase(.billingIssue, remove: ["product_id"], "data.product_id", "is required"),
        DataCase(.billingIssue, remove: ["entitlements"], "data.entitlements", "is required"),
        // expiration
        DataCase(.expiration, remove: ["reason"], "data.reason", "is required"),
        DataCase(.expiration, set: ["reason": "expired"], "data.reason", #""voluntary", "billing", "price_increase""#),
        DataCase(.expiration, remove: ["product_id"], "data.product_id", "is required"),
        DataCase(.expiration, set: ["entitlements": ["pro", "pro"]], "data.entitlements[1]", "repeats"),
    ]

    @Test("a broken payload names the field and says why", arguments: invalid)
    func invalidPayload(c: DataCase) throws {
        let error = try #require(Fixtures.decodeError(c.members()), "accepted")
        #expect(error.field == c.field)
        #expect(error.reason.contains(c.reason), "reason: \(error.reason)")
    }

    static let valid: [ValidDataCase] = [
        ValidDataCase(
            "non-renewing with a duration", .purchase,
            set: ["kind": "non_renewing", "duration": "P3M"], remove: autoRenewableBounds),
        ValidDataCase("non-renewing with bounds", .purchase, set: ["kind": "non_renewing"], remove: ["period"]),
        ValidDataCase("non-renewing with bounds and a period", .purchase, set: ["kind": "non_renewing"]),
        ValidDataCase(
            "free without price or currency", .purchase, set: ["kind": "free"],
            remove: autoRenewableBounds + ["price_minor", "currency", "commission_rate"]),
        ValidDataCase("free with price 0", .purchase, set: ["kind": "free", "price_minor": 0]),
        ValidDataCase(
            "free with a null currency", .purchase, set: ["kind": "free", "currency": nil],
            remove: ["price_minor"]),
        ValidDataCase("lifetime", .purchase, set: ["kind": "lifetime", "price_minor": 4999], remove: autoRenewableBounds),
        ValidDataCase("trial at price 0", .purchase, set: ["offer": "trial", "price_minor": 0]),
        ValidDataCase("every offer: intro", .purchase, set: ["offer": "intro"]),
        ValidDataCase("every offer: promo", .purchase, set: ["offer": "promo"]),
        ValidDataCase("optional fields absent", .purchase, remove: ["original_transaction_id", "offer", "commission_rate"]),
        ValidDataCase(
            "optional fields null", .purchase,
            set: ["original_transaction_id": nil, "offer": nil, "commission_rate": nil, "duration": nil]),
        ValidDataCase("commission_rate as a number", .purchase, set: ["commission_rate": Fixtures.number("0.3")]),
        ValidDataCase("commission_rate \"0\"", .purchase, set: ["commission_rate": "0"]),
        ValidDataCase("commission_rate \"1\"", .purchase, set: ["commission_rate": "1"]),
        ValidDataCase("commission_rate \"1.0\"", .purchase, set: ["commission_rate": "1.0"]),
        ValidDataCase("commission_rate 0", .purchase, set: ["commission_rate": 0]),
        ValidDataCase("commission_rate 1", .purchase, set: ["commission_rate": 1]),
        ValidDataCase("commission_rate \"3e-1\"", .purchase, set: ["commission_rate": "3e-1"]),
        ValidDataCase("commission_rate \"0.15\"", .purchase, set: ["commission_rate": "0.15"]),
        ValidDataCase("price written as 9.99e2", .purchase, set: ["price_minor": Fixtures.number("9.99e2")]),
        ValidDataCase("several entitlements", .purchase, set: ["entitlements": ["pro", "plus", "cloud"]]),
        ValidDataCase("period with an offset", .purchase, set: ["period_end": "2026-04-01T12:00:00+02:00"]),
        ValidDataCase("yearly period", .purchase, set: ["period": "P1Y", "period_end": "2027-03-01T10:00:00Z"]),
        ValidDataCase("renewal", .renewal),
        ValidDataCase("renewal with another product", .renewal, set: ["product_id": "pro.yearly", "period": "P1Y"]),
        ValidDataCase("refund without a reason", .refund, remove: ["reason"]),
        ValidDataCase("refund of 0", .refund, set: ["amount_minor": 0]),
        ValidDataCase("cancellation of all entitlements (empty list)", .cancellation, set: ["entitlements": []]),
        ValidDataCase("cancellation without entitlements", .cancellation, remove: ["entitlements"]),
        ValidDataCase("cancellation, every reason: family_revoked", .cancellation, set: ["reason": "family_revoked"]),
        ValidDataCase("cancellation, every reason: developer", .cancellation, set: ["reason": "developer"]),
        ValidDataCase("cancellation, every reason: other", .cancellation, set: ["reason": "other"]),
        ValidDataCase(
            "credit with bounds", .credit,
            set: ["window_start": "2026-03-01T00:00:00Z", "window_end": "2026-03-08T00:00:00Z"], remove: ["duration"]),
        ValidDataCase("credit with hours", .credit, set: ["duration": "PT36H"]),
        ValidDataCase(
            "credit_reversal with an upper-case UUID", .creditReversal,
            set: ["credit_event_id": "0B5E6C1A-4F2D-4C7E-9A3B-1C2D3E4F5A6B"]),
        ValidDataCase("auto-renew on", .autoRenewChanged, set: ["enabled": true]),
        ValidDataCase("billing issue without grace", .billingIssue, remove: ["grace_until"]),
        ValidDataCase("billing issue with 1 µs of grace", .billingIssue, set: ["grace_until": "2026-03-01T10:00:00.000001Z"]),
        ValidDataCase("expiration, reason price_increase", .expiration, set: ["reason": "price_increase"]),
        ValidDataCase("expiration, reason product_unavailable", .expiration, set: ["reason": "product_unavailable"]),
        ValidDataCase("expiration, reason voluntary", .expiration, set: ["reason": "voluntary"]),
        ValidDataCase("expiration, reason other", .expiration, set: ["reason": "other"]),
    ]

    @Test("valid payloads are accepted and kept as sent", arguments: valid)
    func validPayload(c: ValidDataCase) throws {
        let members = Fixtures.event(c.type, settingData: c.set, removingData: c.remove)
        let event = try EventDecoder.decode(members, path: "")
        #expect(event.type == c.type)
        #expect(JSONValue.object(event.data) == members["data"])
    }

    @Test("every event type has a validator that refuses unknown members", arguments: EventType.allCases)
    func unknownMemberPerType(type: EventType) throws {
        let error = try #require(Fixtures.decodeError(Fixtures.event(type, settingData: ["typo_field": 1])))
        #expect(error.field == "data.typo_field")
        #expect(error.reason == "is not a known field")
    }

    @Test(
        "every event type refuses an empty payload, naming a required field",
        arguments: EventType.allCases.filter {
            $0 != .cancellation
        })
    func emptyPayload(type: EventType) throws {
        let error = try #require(Fixtures.decodeError(Fixtures.event(type, data: [:])))
        #expect(error.field.hasPrefix("data."))
        #expect(error.reason.contains("required"))
    }

    @Test("a cancellation needs only its reason")
    func minimalCancellation() throws {
        #expect(Fixtures.decodeError(Fixtures.event(.cancellation, data: [:]))?.field == "data.reason")
        #expect(Fixtures.decodeError(Fixtures.event(.cancellation, data: ["reason": "developer"])) == nil)
    }

    @Test("catalog_revision: a positive integer on the types the catalog fills in, unknown elsewhere")
    func catalogRevision() throws {
        for type in [EventType.purchase, .renewal, .autoRenewChanged, .billingIssue, .expiration] {
            #expect(Fixtures.decodeError(Fixtures.event(type, settingData: ["catalog_revision": 3])) == nil, "\(type)")
            let zero = Fixtures.decodeError(Fixtures.event(type, settingData: ["catalog_revision": 0]))
            #expect(zero?.field == "data.catalog_revision")
            #expect(zero?.reason.contains("at least 1") == true)
            #expect(
                Fixtures.decodeError(Fixtures.event(type, settingData: ["catalog_revision": "3"]))?.field
                    == "data.catalog_revision")
        }
        for type in [EventType.refund, .refundReversal, .cancellation, .credit, .creditReversal] {
            let error = Fixtures.decodeError(Fixtures.event(type, settingData: ["catalog_revision": 3]))
            #expect(error?.field == "data.catalog_revision")
            #expect(error?.reason == "is not a known field")
        }
    }
}
