import Hummingbird
import LedgerCore
import LedgerStore

/// `GET /v1/compat/revenuecat/subscribers/{app_user_id}` (role reader): a subscriber in the shape of RevenueCat's
/// REST API v1 customer info, so that a backend that called RevenueCat switches by changing its base URL and
/// key (docs/switching.md). Computed from the subscriber's events, folded here: the entitlements are the ones
/// `GET /v1/subscribers/{id}/entitlements` answers at the same moment.
struct RevenueCatCompatRoutes {
    let store: EventStore
    let router: ReadRouter
    var clock: WallClock = .system
    /// Events read per query while collecting a stream (a stream holds at most `Limits` events).
    static let page = 1000

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.get("compat/revenuecat/subscribers/:subscriber_id", use: cancelledOnDisconnect(customer))
    }

    @Sendable func customer(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.readEntitlements)
        let subscriber = try SubscriberPath.id(context)
        let minimum = try LedgerPosition.minimum(request)
        let (events, position) = try await router.read(atLeast: minimum) { [store] source in
            var all: [RecordedEvent] = []
            while true {
                let page = try await store.stream(
                    subscriberID: subscriber, afterVersion: all.last?.version ?? 0, limit: Self.page, on: source)
                all += page
                if page.count < Self.page { return all }
            }
        }
        let now = clock.now()
        let info = RevenueCatCustomerInfo(subscriberID: subscriber, events: events, ledger: Fold.fold(events), at: now)
        return Response.json(info.json).ledgerPosition(max(position, events.map(\.position).max() ?? 0))
    }
}

extension RevenueCatCustomerInfo {
    /// RevenueCat's field names and date format (RFC 3339 in UTC to the second, `2026-03-01T10:00:00Z`).
    var json: JSONValue {
        func date(_ t: Timestamp?) -> JSONValue { t.map { .string(Self.seconds($0)) } ?? .null }
        var entitlementsJSON: [String: JSONValue] = [:]
        for e in entitlements {
            entitlementsJSON[e.name] = .object([
                "expires_date": date(e.expiresDate), "grace_period_expires_date": date(e.gracePeriodExpiresDate),
                "product_identifier": .string(e.productIdentifier), "purchase_date": date(e.purchaseDate),
            ])
        }
        var subscriptionsJSON: [String: JSONValue] = [:]
        for (product, s) in subscriptions {
            subscriptionsJSON[product] = .object([
                "expires_date": date(s.expiresDate), "purchase_date": date(s.purchaseDate),
                "original_purchase_date": date(s.originalPurchaseDate), "period_type": .string(s.periodType),
                "store": .string(s.store), "is_sandbox": .bool(s.isSandbox),
                "unsubscribe_detected_at": date(s.unsubscribeDetectedAt),
                "billing_issues_detected_at": date(s.billingIssuesDetectedAt),
                "grace_period_expires_date": date(s.gracePeriodExpiresDate), "refunded_at": date(s.refundedAt),
                "ownership_type": .string(s.ownershipType), "auto_resume_date": .null,
                "store_transaction_id": s.storeTransactionID.map(JSONValue.string) ?? .null,
            ])
        }
        var nonSubscriptionsJSON: [String: JSONValue] = [:]
        for (product, purchases) in nonSubscriptions {
            nonSubscriptionsJSON[product] = .array(
                purchases.sorted { $0.purchaseDate < $1.purchaseDate }.map { p in
                    .object([
                        "id": .string(p.id), "purchase_date": date(p.purchaseDate), "original_purchase_date": date(p.originalPurchaseDate),
                        "store": .string(p.store), "is_sandbox": .bool(p.isSandbox),
                        "store_transaction_id": p.storeTransactionID.map(JSONValue.string) ?? .null,
                    ])
                })
        }
        return .object([
            "request_date": .string(Self.seconds(requestDate)),
            "request_date_ms": .number(JSONNumber(requestDate.microseconds / 1000)),
            "subscriber": .object([
                "original_app_user_id": .string(originalAppUserID),
                "original_application_version": .null,
                "original_purchase_date": .null,
                "first_seen": .string(Self.seconds(firstSeen)),
                "last_seen": .string(Self.seconds(lastSeen)),
                "management_url": managementURL.map(JSONValue.string) ?? .null,
                "entitlements": .object(entitlementsJSON),
                "subscriptions": .object(subscriptionsJSON),
                "non_subscriptions": .object(nonSubscriptionsJSON),
                "other_purchases": .object([:]),
                "subscriber_attributes": .object([:]),
            ]),
        ])
    }

    /// `2026-03-01T10:00:00Z`: fractions of a second dropped, as RevenueCat writes its dates.
    static func seconds(_ t: Timestamp) -> String { String(t.rfc3339.prefix(19)) + "Z" }
}
