import Foundation
import LedgerCore
import LedgerStore
import Logging
import PostgresNIO
import ServiceLifecycle

/// `serve --apple-consumption-policy`: answers each `CONSUMPTION_REQUEST` (a refund request, recorded as a
/// `store_notice`) within Apple's 12-hour window with Send Consumption Information, computed from the
/// ledger and the developer's policy. Each request is answered once (`apple_consumption_answers`), by
/// whichever instance gets there first.
public struct AppleConsumptionResponder: Service {
    let client: AppStoreServerAPIClient
    /// Apple's sandbox host, for requests about sandbox transactions (nil: `client` answers them too).
    let sandboxClient: AppStoreServerAPIClient?
    let policy: AppleConsumptionPolicy
    let database: Database
    let interval: Duration
    let logger: Logger
    let clock: @Sendable () -> Timestamp

    public init(
        client: AppStoreServerAPIClient, sandboxClient: AppStoreServerAPIClient? = nil, policy: AppleConsumptionPolicy,
        database: Database, interval: Duration = .seconds(60),
        logger: Logger,
        clock: @escaping @Sendable () -> Timestamp = { Timestamp(microseconds: Int64(Date().timeIntervalSince1970 * 1_000_000)) }
    ) {
        self.client = client
        self.sandboxClient = sandboxClient
        self.policy = policy
        self.database = database
        self.interval = interval
        self.logger = logger
        self.clock = clock
    }

    public func run() async throws {
        await runPeriodically(every: interval, logger: logger, what: "apple consumption answers") { try await runOnce() }
    }

    struct Request {
        var notificationUUID: String
        var subscriberID: String
        var transaction: [String: JSONValue]
        var sandbox: Bool
    }

    /// Answers every request received in the last 12 hours and not answered yet; returns how many were sent.
    @discardableResult
    public func runOnce() async throws -> Int {
        let logger = database.logger
        let due: [Request] = try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT message_id, subscriber_id, payload, environment = 'sandbox' FROM store_inbox i
                WHERE store = 'apple' AND kind = 'CONSUMPTION_REQUEST' AND status = 'applied' AND subscriber_id IS NOT NULL
                  AND received_at > clock_timestamp() - interval '12 hours'
                  AND NOT EXISTS (SELECT 1 FROM apple_consumption_answers a WHERE a.notification_uuid = i.message_id)
                ORDER BY received_at LIMIT 100
                """, logger: logger)
            var out: [Request] = []
            for try await (uuid, subscriber, payload, sandbox) in rows.decode((String, String, String, Bool).self) {
                let p = try? JSONParser.parse(payload).objectValue
                guard let t = p?["data"]?.objectValue?["signedTransactionInfo"]?.objectValue else { continue }
                out.append(Request(notificationUUID: uuid, subscriberID: subscriber, transaction: t, sandbox: sandbox))
            }
            return out
        }
        var sent = 0
        for request in due {
            guard let transactionID = request.transaction["transactionId"]?.stringValue else { continue }
            let facts = try await self.facts(request.subscriberID)
            guard let body = AppleConsumptionInfo.request(policy: policy, facts: facts, transaction: request.transaction, now: clock()) else {
                logger.info("consumption request not answered: the policy does not state the customer's consent")
                return 0
            }
            let host = request.sandbox ? sandboxClient ?? client : client
            try await host.sendConsumptionInformation(transactionID: transactionID, request: body)
            try await database.withConnection { c in
                try await c.query(
                    """
                    INSERT INTO apple_consumption_answers (notification_uuid, transaction_id, subscriber_id, http_status, request)
                    VALUES (\(request.notificationUUID), \(transactionID), \(request.subscriberID), 202, \(body.canonicalString())::jsonb)
                    ON CONFLICT (notification_uuid) DO NOTHING
                    """, logger: logger)
            }
            self.logger.info(
                "apple consumption information sent",
                metadata: ["apple.notification_uuid": "\(request.notificationUUID)", "apple.transaction_id": "\(transactionID)"])
            sent += 1
        }
        return sent
    }

    /// The subscriber's tenure and lifetime amounts, from production events and the revenue facts.
    func facts(_ subscriber: String) async throws -> AppleConsumptionFacts {
        let logger = database.logger
        // The revenue facts trail the log by the rollup worker's delay: brought to its end first.
        try await ReportRollupWorker.catchUpIfBehind(database)
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT (SELECT min(occurred_at) FROM events
                        WHERE subscriber_id = \(subscriber) AND environment = 'production'),
                       coalesce((SELECT sum(gross) FROM report_transactions WHERE subscriber_id = \(subscriber) AND currency = 'USD'), 0)::int8,
                       coalesce((SELECT sum(r) FROM report_transactions, unnest(refund_amount) AS r
                                 WHERE subscriber_id = \(subscriber) AND currency = 'USD'), 0)::int8,
                       EXISTS (SELECT 1 FROM report_transactions WHERE subscriber_id = \(subscriber) AND currency <> 'USD')
                """, logger: logger)
            for try await (first, purchased, refunded, other) in rows.decode((Timestamp?, Int64, Int64, Bool).self) {
                return AppleConsumptionFacts(
                    firstSeen: first, purchasedUSDCents: purchased, refundedUSDCents: refunded,
                    otherCurrencies: other)
            }
            return AppleConsumptionFacts(firstSeen: nil, purchasedUSDCents: 0, refundedUSDCents: 0, otherCurrencies: false)
        }
    }
}
