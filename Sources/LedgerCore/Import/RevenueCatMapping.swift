/// The ledger events one RevenueCat export row stands for (docs/semantics.md section 7; the mapping table is
/// in docs/switching.md). Pure: no I/O and no clock; `asOf` is when the export's knowledge stands (the row's
/// `updated_at` when the export has it, else the time the import was started), which only decides whether a
/// subscription whose period ended has lapsed.
///
/// Every event's idempotency key is derived from the store's own ids, so that importing a row again, or the
/// same row updated in a later delivery, adds only the facts that are new (a refund, auto-renew turned off),
/// and App Store and Google Play purchases and refunds carry the keys those stores' own adapters use: the same
/// fact arriving later by a notification is stored once.
public enum RevenueCatMapping {
    public static func events(for row: RevenueCatRow, asOf: Timestamp) throws(RevenueCatRowError) -> [NewEvent] {
        let source = row.store.source
        let environment: LedgerEnvironment = row.isSandbox ? .sandbox : .production
        // Stripe rows can repeat a transaction id across renewals: the renewal number tells them apart.
        let transaction = row.store == .stripe ? "\(row.transactionID):\(row.renewalNumber)" : row.transactionID
        let rcKey = "revenuecat:\(row.store.name)"
        var events: [NewEvent] = []
        func event(_ type: EventType, _ at: Timestamp, key: String, _ data: [String: JSONValue]) -> NewEvent {
            NewEvent(
                subscriberID: row.appUserID, type: type, occurredAt: at, source: source, environment: environment,
                idempotencyKey: key, data: data, metadata: metadata(row))
        }

        // What no window stands for: a consumable, or a product that unlocks no entitlement.
        if row.entitlements.isEmpty {
            var detail: [String: JSONValue] = [
                EventDataKey.productID: .string(row.productID), EventDataKey.priceMinor: .number(JSONNumber(row.priceMinor)),
                "start_time": .string(row.start.rfc3339), "renewal_number": .number(JSONNumber(Int64(row.renewalNumber))),
            ]
            if let currency = row.currency { detail[EventDataKey.currency] = .string(currency) }
            if let end = row.end { detail["end_time"] = .string(end.rfc3339) }
            let notice = EventData.StoreNotice(store: source, kind: "revenuecat_transaction", transactionID: transaction, detail: detail)
            events.append(event(.storeNotice, row.start, key: "\(rcKey):transaction:\(transaction)", notice.object))
            return events
        }

        // A promotional grant (RevenueCat's own, no store, no money) is a credit, or free access for ever.
        if row.store == .promotional {
            for entitlement in row.entitlements {
                if let end = row.end {
                    guard end > row.start else { throw fail(row, "end_time", "must be after start_time") }
                    let credit = EventData.Credit(
                        entitlement: entitlement, windowStart: row.start, windowEnd: end, reason: "revenuecat_promotional", grantedBy: "revenuecat")
                    events.append(event(.credit, row.start, key: "\(rcKey):\(transaction):\(entitlement)", credit.object))
                }
            }
            if row.end == nil {
                let free = EventData.Transaction(
                    productID: row.productID, entitlements: row.entitlements, transactionID: transaction, kind: .free, priceMinor: 0)
                events.append(event(.purchase, row.start, key: "\(rcKey):\(transaction)", free.object))
            }
            return events
        }

        // The transaction itself: its own period and money.
        let autoRenewable = row.isAutoRenewable ?? (row.end != nil)
        var data = EventData.Transaction(productID: row.productID, entitlements: row.entitlements, transactionID: transaction)
        if row.originalTransactionID != row.transactionID || row.store == .stripe {
            data.originalTransactionID = row.originalTransactionID
        }
        let type: EventType
        if autoRenewable {
            guard let end = row.end else { throw fail(row, "end_time", "is required for an auto-renewable subscription") }
            type = row.renewalNumber > 1 ? .renewal : .purchase
            data.kind = .autoRenewable
            data.periodStart = row.start
            data.periodEnd = end
            data.period = row.productDuration?.text ?? billingPeriod(from: row.start, to: end)
        } else if let end = row.end {
            type = .purchase
            guard end > row.start else { throw fail(row, "end_time", "must be after start_time") }
            data.kind = .nonRenewing
            data.periodStart = row.start
            data.periodEnd = end
        } else {
            type = .purchase
            data.kind = .lifetime
        }
        if row.isTrial {
            data.offer = .trial
        } else if row.isIntro {
            data.offer = .intro
        }
        guard row.currency != nil || row.priceMinor == 0 else { throw fail(row, "purchased_currency", "is required") }
        // A trial's row may name no currency; its price is 0 in any.
        let currency = row.currency ?? "USD"
        data.priceMinor = row.priceMinor
        data.currency = currency
        if row.priceMinor > 0, let rate = row.commissionRate { data.commissionRate = rate }
        // RevenueCat's `country` is the store's country of the purchase (ISO 3166-1 alpha-2): a report dimension.
        // A re-import keeps the events stored before (`ReplayPolicy.keepStored`).
        if let country = row.country, Countries.isValidAlpha2(country) { data.country = country }
        let transactionKey: String
        let refundKey: String
        switch row.store {
        case .appStore, .macAppStore:
            transactionKey = "apple:txn:\(transaction)"
            refundKey = "apple:refund:\(transaction)"
        case .playStore:
            transactionKey = "google:order:\(transaction)"
            refundKey = "google:refund:\(transaction)"
        default:
            transactionKey = "\(rcKey):txn:\(transaction)"
            refundKey = "\(rcKey):refund:\(transaction)"
        }
        events.append(event(type, row.start, key: transactionKey, data.object))

        if let refunded = row.refundedAt {
            let refund = EventData.Refund(transactionID: transaction, amountMinor: row.priceMinor, currency: currency, reason: "store_refund")
            events.append(event(.refund, refunded, key: refundKey, refund.object))
        }
        guard autoRenewable, let end = row.end else { return events }

        if let off = row.unsubscribeDetectedAt {
            let change = EventData.AutoRenewChanged(enabled: false, productID: row.productID, entitlements: row.entitlements)
            events.append(
                event(.autoRenewChanged, off, key: "\(rcKey):auto_renew_off:\(row.originalTransactionID):\(off.rfc3339)", change.object))
        }
        if let issue = row.billingIssueDetectedAt {
            var d = EventData.BillingIssue(productID: row.productID, entitlements: row.entitlements)
            if let grace = row.graceEnd, grace > issue { d.graceUntil = grace }
            events.append(event(.billingIssue, issue, key: "\(rcKey):billing_issue:\(transaction):\(issue.rfc3339)", d.object))
        }
        // The subscription lapsed: its period (and grace) ended with auto-renew off or a billing issue, and the
        // export knew it by then. A refunded transaction ended at its refund instead.
        let lapse = row.effectiveEnd ?? max(end, row.graceEnd ?? end)
        let known = row.updatedAt ?? asOf
        if row.refundedAt == nil, row.unsubscribeDetectedAt != nil || row.billingIssueDetectedAt != nil, lapse <= known {
            let d = EventData.Expiration(
                productID: row.productID, entitlements: row.entitlements, reason: row.unsubscribeDetectedAt != nil ? "voluntary" : "billing")
            events.append(event(.expiration, lapse, key: "\(rcKey):expiration:\(transaction)", d.object))
        }
        return events
    }

    /// The row's ids as the store and RevenueCat gave them: only what never changes for a transaction, so
    /// that a later delivery of the updated row maps to the same events.
    static func metadata(_ row: RevenueCatRow) -> [String: JSONValue] {
        var rc: [String: JSONValue] = [
            "store": .string(row.store.name), "store_transaction_id": .string(row.transactionID),
            "original_store_transaction_id": .string(row.originalTransactionID),
            "renewal_number": .number(JSONNumber(Int64(row.renewalNumber))),
        ]
        if let country = row.country { rc["country"] = .string(country) }
        if let ownership = row.ownershipType { rc["ownership_type"] = .string(ownership) }
        return ["revenuecat": .object(rc)]
    }

    /// A billing period for a row without `product_duration`: the nearest of the stores' periods.
    static func billingPeriod(from start: Timestamp, to end: Timestamp) -> String {
        let days = Double(end.microseconds - start.microseconds) / 86_400_000_000
        switch days {
        case ..<6.5: return "P\(max(1, Int(days.rounded())))D"
        case ..<10: return "P1W"
        case ..<20: return "P2W"
        case ..<45: return "P1M"
        case ..<75: return "P2M"
        case ..<135: return "P3M"
        case ..<270: return "P6M"
        default: return "P1Y"
        }
    }

    static func fail(_ row: RevenueCatRow, _ field: String, _ reason: String) -> RevenueCatRowError {
        RevenueCatRowError(line: row.line, column: nil, field: field, reason: reason)
    }
}
