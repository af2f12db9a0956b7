import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// The App Store inbox: every verified notification (deduplicated by its UUID, kept even when no
/// subscriber is known yet) and the links from original transaction ids to subscribers.
public struct AppleInbox: Sendable {
    public enum Status: String, Sendable {
        case applied, pending, notice
    }

    /// A pending notification to apply once its subscriber is known.
    public struct Pending: Sendable {
        public var notificationUUID: UUID
        public var payload: [String: JSONValue]
    }

    /// An original transaction already belongs to another subscriber.
    public struct LinkConflict: Error, Sendable, CustomStringConvertible {
        public var originalTransactionID: String
        public var subscriberID: String
        public var description: String {
            "original transaction \(originalTransactionID) already belongs to subscriber \(subscriberID)"
        }
    }

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    public func status(of notificationUUID: UUID) async throws -> Status? {
        let logger = database.logger
        return try await database.withConnection { c in
            for try await s in try await c.query(
                "SELECT status FROM apple_notifications WHERE notification_uuid = \(notificationUUID)", logger: logger
            ).decode(String.self) {
                return Status(rawValue: s)
            }
            return nil
        }
    }

    /// Records a notification (or moves it to a new status); the first receipt's payload is kept.
    public func record(
        notificationUUID: UUID, type: String, subtype: String?, environment: LedgerEnvironment,
        originalTransactionID: String?, subscriberID: String?, status: Status, signedPayload: String,
        payload: [String: JSONValue]
    ) async throws {
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query(
                """
                INSERT INTO apple_notifications (notification_uuid, notification_type, subtype, environment,
                    original_transaction_id, subscriber_id, status, signed_payload, payload)
                VALUES (\(notificationUUID), \(type), \(subtype), \(environment.rawValue), \(originalTransactionID),
                        \(subscriberID), \(status.rawValue), \(signedPayload), \(JSONValue.object(payload).canonicalString())::jsonb)
                ON CONFLICT (notification_uuid) DO UPDATE SET status = excluded.status,
                    subscriber_id = coalesce(excluded.subscriber_id, apple_notifications.subscriber_id)
                """, logger: logger)
        }
    }

    /// Links an original transaction to a subscriber; returns false if it was already linked to them.
    /// A link to another subscriber is a `LinkConflict`.
    @discardableResult
    public func link(_ originalTransactionIDs: [String], to subscriberID: String, by origin: String) async throws -> Bool {
        guard !originalTransactionIDs.isEmpty else { return false }
        let logger = database.logger
        return try await database.transaction { c in
            try await c.query(
                """
                INSERT INTO apple_links (original_transaction_id, subscriber_id, linked_by)
                SELECT o, \(subscriberID), \(origin) FROM unnest(\(originalTransactionIDs)::text[]) AS o
                ON CONFLICT (original_transaction_id) DO NOTHING
                """, logger: logger)
            for try await (original, owner) in try await c.query(
                "SELECT original_transaction_id, subscriber_id FROM apple_links WHERE original_transaction_id = ANY(\(originalTransactionIDs)::text[]) AND subscriber_id <> \(subscriberID)",
                logger: logger
            ).decode((String, String).self) {
                throw LinkConflict(originalTransactionID: original, subscriberID: owner)
            }
            return true
        }
    }

    public func subscriber(forOriginalTransaction id: String) async throws -> String? {
        let logger = database.logger
        return try await database.withConnection { c in
            for try await s in try await c.query(
                "SELECT subscriber_id FROM apple_links WHERE original_transaction_id = \(id)", logger: logger
            ).decode(String.self) {
                return s
            }
            return nil
        }
    }

    /// Pending notifications of these original transactions, oldest first.
    public func pending(originalTransactionIDs: [String]) async throws -> [Pending] {
        guard !originalTransactionIDs.isEmpty else { return [] }
        let logger = database.logger
        return try await database.withConnection { c in
            var out: [Pending] = []
            for try await (id, payload) in try await c.query(
                """
                SELECT notification_uuid, payload::text FROM apple_notifications
                WHERE status = 'pending' AND original_transaction_id = ANY(\(originalTransactionIDs)::text[])
                ORDER BY received_at
                """, logger: logger
            ).decode((UUID, String).self) {
                if case .object(let o) = try JSONParser.parse(payload, maxDepth: 1000) {
                    out.append(Pending(notificationUUID: id, payload: o))
                }
            }
            return out
        }
    }

    public func markApplied(_ notificationUUID: UUID, subscriberID: String) async throws {
        let logger = database.logger
        try await database.withConnection { c in
            try await c.query(
                "UPDATE apple_notifications SET status = 'applied', subscriber_id = \(subscriberID) WHERE notification_uuid = \(notificationUUID)",
                logger: logger)
        }
    }
}
