/// The member names of an event's `data` (docs/api.md, docs/semantics.md), spelled once: the typed model
/// (`EventPayload`, `TransactionData`), catalog fill, draft completion and the store adapters name a member
/// through these (issue 34, item 3; `tools/check-data-keys` counts the spellings left outside LedgerCore/Events).
public enum EventDataKey {
    public static let productID = "product_id"
    public static let entitlements = "entitlements"
    public static let entitlement = "entitlement"
    public static let transactionID = "transaction_id"
    public static let originalTransactionID = "original_transaction_id"
    public static let kind = "kind"
    public static let offer = "offer"
    public static let periodStart = "period_start"
    public static let periodEnd = "period_end"
    public static let period = "period"
    public static let duration = "duration"
    public static let priceMinor = "price_minor"
    public static let currency = "currency"
    public static let commissionRate = "commission_rate"
    /// The buyer's ISO 3166-1 alpha-2 country, where the store says it (ledger-semantics section 2).
    public static let country = "country"
    /// Tax included in `price_minor`, where the store says it (absent: not known, 0).
    public static let taxMinor = "tax_minor"
    public static let amountMinor = "amount_minor"
    public static let reason = "reason"
    public static let cut = "cut"
    public static let windowStart = "window_start"
    public static let windowEnd = "window_end"
    public static let creditEventID = "credit_event_id"
    public static let enabled = "enabled"
    public static let graceUntil = "grace_until"
    public static let store = "store"
    public static let purchaseID = "purchase_id"
    public static let toSubscriber = "to_subscriber"
    public static let fromSubscriber = "from_subscriber"
    public static let windows = "windows"
    public static let transactions = "transactions"
    public static let into = "into"
    /// The catalog revision a filled event was completed from.
    public static let catalogRevision = "catalog_revision"
    /// Who granted a credit (`apple`, `google`, `stripe`, `revenuecat`).
    public static let grantedBy = "granted_by"
    /// A `store_notice`'s store-specific account of the fact.
    public static let detail = "detail"
}
