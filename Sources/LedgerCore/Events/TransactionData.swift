/// A `purchase` or `renewal`'s `data`, typed: what the fold and the report facts read of it, in one place,
/// so that the window a transaction grants and the revenue it books can never disagree on its kind.
///
/// Built from data the validator accepted when the event was appended; a member it does not find (an
/// event stored before a field existed) takes the contract's default.
public struct TransactionData: Sendable, Hashable {
    public var productID: String?
    public var entitlements: [String]
    public var transactionID: String?
    /// The purchase the transaction belongs to (docs/identity.md): Apple's original transaction id, a Google
    /// purchase's first order, a Stripe subscription.
    public var originalTransactionID: String?
    public var kind: EventDataValidator.Kind
    public var offer: EventDataValidator.Offer
    public var periodStart: Timestamp?
    public var periodEnd: Timestamp?
    /// The billing period (auto-renewable) or the duration (non-renewing), as written.
    public var period: String?
    public var duration: ISODuration?
    public var priceMinor: Int64?
    public var currency: String?
    /// Decimal text (`"0.30"`); `"0"` when absent.
    public var commissionRate: String
    /// The buyer's country (ISO 3166-1 alpha-2), where the store said it.
    public var country: String?
    /// Tax included in the price; 0 when not known (ledger-semantics section 6).
    public var taxMinor: Int64

    public init(_ data: [String: JSONValue]) {
        let d = DataMembers(data)
        productID = d.string(EventDataKey.productID)
        entitlements = d.strings(EventDataKey.entitlements)
        transactionID = d.string(EventDataKey.transactionID)
        originalTransactionID = d.string(EventDataKey.originalTransactionID)
        kind = d.string(EventDataKey.kind).flatMap(EventDataValidator.Kind.init(rawValue:)) ?? .autoRenewable
        offer = d.string(EventDataKey.offer).flatMap(EventDataValidator.Offer.init(rawValue:)) ?? .none
        periodStart = d.timestamp(EventDataKey.periodStart)
        periodEnd = d.timestamp(EventDataKey.periodEnd)
        period = d.string(EventDataKey.period) ?? d.string(EventDataKey.duration)
        duration = d.duration(EventDataKey.duration)
        priceMinor = d.int64(EventDataKey.priceMinor)
        currency = d.string(EventDataKey.currency)
        commissionRate = data[EventDataKey.commissionRate].flatMap { $0.stringValue ?? $0.numberValue?.canonical } ?? "0"
        country = d.string(EventDataKey.country)
        taxMinor = d.int64(EventDataKey.taxMinor) ?? 0
    }

    /// The kind of window it grants (docs/semantics.md 3.1): its offer (`trial`, `intro`, `promo`), else
    /// `free` or `lifetime` for those products, else `paid`.
    public var windowKind: Window.Kind {
        switch offer {
        case .trial: .trial
        case .intro: .intro
        case .promo: .promo
        case .none:
            switch kind {
            case .free: .free
            case .lifetime: .lifetime
            case .autoRenewable, .nonRenewing: .paid
            }
        }
    }

    /// The purchase it belongs to: its `original_transaction_id`, else its own `transaction_id`.
    public var purchaseID: String? { originalTransactionID ?? transactionID }

    /// Whether it is paid revenue (docs/semantics.md 6): a price above zero, not free, not a trial.
    public var isPaid: Bool { (priceMinor ?? 0) > 0 && currency != nil && kind != .free && offer != .trial }
}
