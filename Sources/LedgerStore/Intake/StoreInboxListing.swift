import LedgerCore
import PostgresNIO

/// What an operator reads of a store's inbox (`GET /v1/stores/{store}/inbox`, the dashboard, the gauge): which
/// messages wait and why. Never the raw payload: a line saying what the message is about.
extension StoreInbox {
    /// The stores whose messages enter through the inbox.
    public static let stores = ["apple", "google", "stripe"]
    /// The statuses of messages still waiting for something (a link, a store's API, an operator).
    public static let waiting: [Status] = [.received, .pending, .failed]

    /// One message as listed.
    public struct Entry: Sendable {
        public var store: String
        public var messageID: String
        public var kind: String
        public var subtype: String?
        public var environment: String
        public var accountID: String?
        public var subscriberID: String?
        public var status: Status
        /// Why it waits (or why it was set aside), worded for whoever can act on it; nil once applied.
        public var reason: String?
        public var attempts: Int
        public var nextAttemptAt: Timestamp?
        public var receivedAt: Timestamp
        public var updatedAt: Timestamp
        /// What the message is about, from its payload (a Stripe object, a Google product, an App Store product).
        public var summary: String?
    }

    /// Where a page ended: the last entry's receipt time and id (the list is newest first).
    public struct Cursor: Sendable, Equatable {
        public var receivedAt: Timestamp
        public var messageID: String

        public init(receivedAt: Timestamp, messageID: String) {
            self.receivedAt = receivedAt
            self.messageID = messageID
        }
    }

    /// Messages of a store with one of `statuses`, newest first, after `cursor`.
    public func list(store: String, statuses: [Status], after cursor: Cursor?, limit: Int) async throws -> [Entry] {
        let logger = database.logger
        let names = statuses.map(\.rawValue)
        let at = cursor?.receivedAt ?? Timestamp(microseconds: 0)
        let id = cursor?.messageID ?? ""
        return try await database.withConnection { c in
            var out: [Entry] = []
            let rows = try await c.query(
                """
                SELECT store, message_id, kind, subtype, environment, account_id, subscriber_id, status,
                    coalesce(reason, last_error), attempts, next_attempt_at, received_at, coalesce(updated_at, received_at),
                    nullif(concat_ws(' ', \(unescaped: Self.summarySQL)), '')
                FROM store_inbox
                WHERE store = \(store) AND status = ANY(\(names)::text[])
                    AND (\(cursor == nil) OR (received_at, message_id) < (\(at), \(id)))
                ORDER BY received_at DESC, message_id DESC LIMIT \(Int64(limit))
                """, logger: logger)
            for try await r in rows.decode(
                (
                    String, String, String, String?, String, String?, String?, String, String?, Int32, Timestamp?, Timestamp, Timestamp,
                    String?
                ).self)
            {
                let status = Status(rawValue: r.7) ?? .received
                out.append(
                    Entry(
                        store: r.0, messageID: r.1, kind: r.2, subtype: r.3, environment: r.4, accountID: r.5, subscriberID: r.6,
                        status: status, reason: r.8 ?? Self.statusReason(store: r.0, kind: r.2, accountID: r.5, status: status),
                        attempts: Int(r.9), nextAttemptAt: r.10, receivedAt: r.11, updatedAt: r.12, summary: r.13))
            }
            return out
        }
    }

    /// How many messages wait, per store and waiting status (zeros included), from the listing index alone.
    public func waitingCounts() async throws -> [String: [Status: Int]] {
        let logger = database.logger
        let names = Self.waiting.map(\.rawValue)
        return try await database.withConnection { c in
            var counts: [String: [Status: Int]] = [:]
            for store in Self.stores { counts[store] = Dictionary(uniqueKeysWithValues: Self.waiting.map { ($0, 0) }) }
            for try await (store, status, n) in try await c.query(
                """
                SELECT store, status, count(*) FROM store_inbox
                WHERE store = ANY(\(Self.stores)::text[]) AND status = ANY(\(names)::text[])
                GROUP BY store, status
                """, logger: logger
            ).decode((String, String, Int64).self) {
                guard let s = Status(rawValue: status) else { continue }
                counts[store, default: [:]][s] = Int(n)
            }
            return counts
        }
    }

    /// The commonest reasons a store's messages wait, most messages first; the account a reason names is
    /// left out ("customer cus_… names no subscriber"), so that one cause shared by many accounts is one line.
    public func topReasons(store: String, limit: Int) async throws -> [(status: Status, reason: String, messages: Int)] {
        let logger = database.logger
        let names = Self.waiting.map(\.rawValue)
        let groups = try await database.withConnection { c in
            var out: [(Status, String?, Int)] = []
            for try await (status, reason, n) in try await c.query(
                """
                SELECT status, coalesce(replace(coalesce(reason, last_error), account_id, '…'), coalesce(reason, last_error)) AS why,
                    count(*) FROM store_inbox
                WHERE store = \(store) AND status = ANY(\(names)::text[])
                GROUP BY status, why ORDER BY count(*) DESC LIMIT 100
                """, logger: logger
            ).decode((String, String?, Int64).self) {
                guard let s = Status(rawValue: status) else { continue }
                out.append((s, reason, Int(n)))
            }
            return out
        }
        // Rows older than the reason column say it through their status, worded as the newer rows' masked reasons.
        var merged: [(status: Status, reason: String, messages: Int)] = []
        for (status, reason, n) in groups {
            let why =
                reason
                ?? Self.statusReason(store: store, kind: "", accountID: store == "stripe" ? "cus_…" : "…", status: status)
                ?? status.rawValue
            if let i = merged.firstIndex(where: { $0.status == status && $0.reason == why }) {
                merged[i].messages += n
            } else {
                merged.append((status, why, n))
            }
        }
        merged.sort { ($0.messages, $1.status.rawValue, $1.reason) > ($1.messages, $0.status.rawValue, $0.reason) }
        return Array(merged.prefix(limit))
    }

    /// What a message is about, read from its payload in SQL (the payload itself never leaves the database):
    /// Stripe's object type and id, Google's package and product or order, the App Store's product.
    static let summarySQL = """
        CASE store
            WHEN 'stripe' THEN concat_ws(' ', payload #>> '{data,object,object}', payload #>> '{data,object,id}')
            WHEN 'google' THEN concat_ws(' ', payload ->> 'packageName',
                coalesce(payload #>> '{subscriptionNotification,subscriptionId}', payload #>> '{oneTimeProductNotification,sku}',
                    'order ' || (payload #>> '{voidedPurchaseNotification,orderId}')))
            WHEN 'apple' THEN concat_ws(' ', coalesce(payload #>> '{data,bundleId}', payload #>> '{summary,bundleId}'),
                payload #>> '{data,signedTransactionInfo,productId}')
        END
        """

    /// Why a message a store kept waits, worded for whoever can link it: what would name its subscriber.
    public static func unlinkedReason(store: String, accountID: String?) -> String {
        switch (store, accountID) {
        case ("stripe", let a?) where a.hasPrefix("cus_"):
            "customer \(a) names no subscriber: set metadata.subscriber_id on it, or send checkout.session.completed with client_reference_id"
        case ("stripe", let a?):
            "payment \(a) is linked to no subscriber: it is applied once the payment it concerns is (an invoice.paid or "
                + "payment_intent.succeeded whose customer names one)"
        case ("stripe", nil):
            "the event names no customer and no subscriber"
        case ("apple", let a?):
            "original transaction \(a) is linked to no subscriber: the app sets appAccountToken, or POST /v1/stores/apple/receipts names it"
        case ("google", _):
            // Not the purchase token itself: it is long, and listed beside the reason (account_id).
            "the purchase token is linked to no subscriber: the app sets obfuscatedExternalAccountId, or submits the token with "
                + "POST /v1/stores/google/purchases"
        case (_, let a):
            "\(store) account \(a ?? "(none)") is linked to no subscriber"
        }
    }

    /// What a status alone says, for a message that recorded no reason (rows older than the column, or
    /// statuses whose meaning is the reason).
    static func statusReason(store: String, kind: String, accountID: String?, status: Status) -> String? {
        switch status {
        case .applied: nil
        case .pending: unlinkedReason(store: store, accountID: accountID)
        case .received:
            store == "google"
                ? "not resolved yet: Google Play's API is asked first (retried in the background)"
                : "recorded, but its events are not stored yet: the store's retry applies it"
        case .failed: "gave up after its retries: for an operator"
        case .notice: "nothing to append: kept as a notice"
        case .ignored:
            switch store {
            case "stripe": "the ledger does not map Stripe events of type \(kind)"
            case "google": "for a package this server is not configured for (--google-package-name)"
            default: "verified, but not for this ledger (another app)"
            }
        }
    }
}
