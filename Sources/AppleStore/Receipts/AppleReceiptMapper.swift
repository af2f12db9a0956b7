import LedgerCore
import StoreAdapters

/// What a verifyReceipt response amounts to in the ledger: drafts for the catalog to complete.
public struct AppleReceiptMapping: Sendable, Hashable {
    public var environment: LedgerEnvironment
    /// In the order to append them: by occurrence time, a transaction before what follows from it, then
    /// by idempotency key (which embeds the transaction id).
    public var drafts: [EventDraft]
    /// The subscription chains the receipt's transactions belong to (sorted, unique).
    public var originalTransactionIDs: [String]

    public init(environment: LedgerEnvironment, drafts: [EventDraft], originalTransactionIDs: [String]) {
        self.environment = environment
        self.drafts = drafts
        self.originalTransactionIDs = originalTransactionIDs
    }
}

/// Why a verifyReceipt response cannot be mapped (`field` is a JSON path such as
/// `latest_receipt_info[2].expires_date_ms`): the error every store mapping throws.
public typealias AppleReceiptError = StoreMappingError

/// Translates Apple's legacy `verifyReceipt` JSON responses into ledger event drafts, without I/O.
///
/// Both shapes are read: the iOS 6 one (`receipt` is itself a transaction, `latest_receipt_info` one
/// object, dates as `Etc/GMT` strings) and the iOS 7+ one (`receipt.in_app`, `latest_receipt_info` an
/// unordered array, `*_ms` dates, `pending_renewal_info`).
public enum AppleReceiptMapper {
    public static func map(_ body: JSONValue) throws(AppleReceiptError) -> AppleReceiptMapping {
        guard case .object(let members) = body else {
            throw AppleReceiptError(field: "$", reason: "must be a verifyReceipt response object, not \(body.typeName)")
        }
        let response = ReceiptObject(path: "", members: members)
        let modern = isModern(members)
        try checkStatus(response, modern: modern)
        let receipt = try response.object("receipt")
        let environment = try environment(response, receipt: receipt)

        let transactions = try transactionObjects(response, receipt: receipt).map {
            (o) throws(AppleReceiptError) in try AppleTransaction(o, modern: modern)
        }
        var drafts: [EventDraft] = []
        for t in transactions {
            drafts.append(t.transactionDraft(environment))
            if let refund = t.refundDraft(environment) { drafts.append(refund) }
        }
        drafts += try pendingRenewalDrafts(response, transactions: transactions, environment: environment, modern: modern)
        drafts.sort(by: appendOrder)
        return AppleReceiptMapping(
            environment: environment, drafts: drafts,
            originalTransactionIDs: Set(transactions.map(\.originalTransactionID)).sorted())
    }

    /// iOS 7+ responses are recognised by any member the iOS 6 shape never has.
    private static func isModern(_ members: [String: JSONValue]) -> Bool {
        if case .array = members["latest_receipt_info"] { return true }
        return members["receipt"]?.objectValue?["in_app"] != nil || members["pending_renewal_info"] != nil
            || members["environment"] != nil
    }

    /// 21006 (subscription expired) still carries the decoded receipt in the iOS 6 shape, so it is data
    /// there; iOS 7+ responses report expired subscriptions with status 0, so 21006 is an error for them.
    private static func checkStatus(_ response: ReceiptObject, modern: Bool) throws(AppleReceiptError) {
        guard let status = try response.integer("status") else {
            throw AppleReceiptError(field: "status", reason: "is missing: this is not a verifyReceipt response")
        }
        if status == 0 { return }
        if status == 21006, !modern {
            let m = response.members
            let carriesData =
                m["receipt"]?.objectValue?["transaction_id"] != nil
                || m["latest_receipt_info"]?.objectValue != nil || m["latest_expired_receipt_info"]?.objectValue != nil
            if carriesData { return }
        }
        throw AppleReceiptError(field: "status", reason: AppleReceiptStatus.explain(status))
    }

    /// The top-level `environment` (iOS 7+), else the iOS 6 `receipt.environment`, else production: the
    /// iOS 6 production endpoint did not name itself.
    private static func environment(
        _ response: ReceiptObject, receipt: ReceiptObject?
    ) throws(AppleReceiptError) -> LedgerEnvironment {
        let source: ReceiptObject
        if response.members["environment"] != nil {
            source = response
        } else if let receipt, receipt.members["environment"] != nil {
            source = receipt
        } else {
            return .production
        }
        guard let name = try source.string("environment") else { return .production }
        switch name {
        case "Production": return .production
        case "Sandbox", "Xcode", "LocalTesting": return .sandbox
        default:
            throw AppleReceiptError(
                field: source.path("environment"), reason: "must be Production, Sandbox, Xcode or LocalTesting, not \"\(name)\"")
        }
    }

    /// Every transaction object once, by `transaction_id`: the renewal history (`latest_receipt_info`) wins
    /// over the receipt's own copy, which may be older. Duplicates are not read further, so a stale copy
    /// cannot fail the mapping.
    private static func transactionObjects(
        _ response: ReceiptObject, receipt: ReceiptObject?
    ) throws(AppleReceiptError) -> [ReceiptObject] {
        var candidates = try response.objects("latest_receipt_info")
        candidates += try response.objects("latest_expired_receipt_info")
        if let receipt {
            candidates += try receipt.objects("in_app")
            if receipt.members["transaction_id"] != nil { candidates.append(receipt) }
        }
        var seen = Set<String>()
        var unique: [ReceiptObject] = []
        for c in candidates {
            if seen.insert(try c.requiredID("transaction_id")).inserted { unique.append(c) }
        }
        return unique
    }

    /// `pending_renewal_info` states what will happen at the next renewal, with no time of its own.
    ///
    /// Its drafts are dated by the chain's latest transaction (purchase date for the renewal status, expiry
    /// for a billing problem) and keyed by that transaction: the same receipt verified again yields the same
    /// drafts, and a status seen again after a new renewal is a new fact in the new period. An entry whose
    /// chain has no transaction in the response has nothing to date it by and is left out.
    private static func pendingRenewalDrafts(
        _ response: ReceiptObject, transactions: [AppleTransaction], environment: LedgerEnvironment, modern: Bool
    ) throws(AppleReceiptError) -> [EventDraft] {
        var drafts: [EventDraft] = []
        for info in try response.objects("pending_renewal_info") {
            let original = try info.requiredID("original_transaction_id")
            guard let latest = transactions.filter({ $0.originalTransactionID == original }).max(by: chronological) else {
                continue
            }
            let renewingProductID = try info.string("auto_renew_product_id")
            let productID = try info.string("product_id") ?? renewingProductID ?? latest.productID
            let metadata = AppleTransaction.metadata(raw: .object(info.members))

            if let enabled = try info.flag("auto_renew_status") {
                drafts.append(
                    EventDraft(
                        type: .autoRenewChanged, occurredAt: latest.purchasedAt, environment: environment,
                        idempotencyKey: "apple:auto_renew:\(original):\(enabled ? 1 : 0):\(latest.transactionID)",
                        productID: productID, originalTransactionID: original,
                        data: EventData.AutoRenewChanged(enabled: enabled, productID: productID).object, metadata: metadata))
            }

            let graceUntil = try info.date("grace_period_expires_date", modern: modern)
            let inRetry = try info.flag("is_in_billing_retry_period") ?? false
            guard let expiredAt = latest.expiresAt, graceUntil != nil || inRetry else { continue }
            var data = EventData.BillingIssue(productID: productID)
            if let graceUntil {
                guard graceUntil > expiredAt else { continue }
                data.graceUntil = graceUntil
            }
            drafts.append(
                EventDraft(
                    type: .billingIssue, occurredAt: expiredAt, environment: environment,
                    idempotencyKey: "apple:billing:\(original):\(latest.transactionID)",
                    productID: productID, originalTransactionID: original, data: data.object, metadata: metadata))
        }
        return drafts
    }

    private static func chronological(_ a: AppleTransaction, _ b: AppleTransaction) -> Bool {
        (a.purchasedAt, a.transactionID) < (b.purchasedAt, b.transactionID)
    }

    /// Time first; at the same instant a transaction precedes what follows from it (its refund, the
    /// renewal status and billing state read beside it); the idempotency key, which embeds the transaction
    /// id, settles the rest.
    private static func appendOrder(_ a: EventDraft, _ b: EventDraft) -> Bool {
        func rank(_ t: EventType) -> Int {
            switch t {
            case .purchase, .renewal: 0
            case .refund: 1
            case .autoRenewChanged: 2
            default: 3
            }
        }
        return (a.occurredAt, rank(a.type), a.idempotencyKey) < (b.occurredAt, rank(b.type), b.idempotencyKey)
    }
}
