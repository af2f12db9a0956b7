import Crypto
import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// An API key as stored: never the key itself, only its SHA-256.
public struct APIKey: Sendable, Hashable {
    public var keyID: UUID
    public var name: String
    public var role: APIRole
    public var createdAt: Timestamp
    public var revokedAt: Timestamp?
}

/// Creates, checks and revokes API keys.
///
/// Keys are 256-bit random secrets, so a plain SHA-256 is enough to store them (no password stretching
/// needed: they cannot be guessed from a dictionary).
public struct APIKeyStore: Sendable {
    public static let prefix = "slk_"

    let database: Database
    var logger: Logger { database.logger }

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// Stores a new key and returns it with its secret, which is shown once and never kept.
    public func create(role: APIRole, name: String) async throws -> (key: APIKey, secret: String) {
        var rng = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let secret = Self.prefix + Hex.encode(bytes)
        let id = UUID()
        let created = try await database.withConnection { connection in
            try await connection.query(
                """
                INSERT INTO api_keys (key_id, name, role, key_hash) VALUES (\(id), \(name), \(role.rawValue), \(ByteBuffer(bytes: Self.hash(secret))))
                RETURNING created_at
                """, logger: logger
            ).collect()[0].decode(Timestamp.self)
        }
        return (APIKey(keyID: id, name: name, role: role, createdAt: created, revokedAt: nil), secret)
    }

    /// The active key for a presented secret, or nil (unknown, malformed or revoked).
    public func authenticate(_ secret: String) async throws -> APIKey? {
        guard secret.hasPrefix(Self.prefix), secret.utf8.count == Self.prefix.utf8.count + 64 else { return nil }
        return try await database.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT key_id, name, role, created_at FROM api_keys
                WHERE key_hash = \(ByteBuffer(bytes: Self.hash(secret))) AND revoked_at IS NULL
                """, logger: logger)
            for try await (id, name, role, created) in rows.decode((UUID, String, String, Timestamp).self) {
                guard let role = APIRole(rawValue: role) else { return nil }
                return APIKey(keyID: id, name: name, role: role, createdAt: created, revokedAt: nil)
            }
            return nil
        }
    }

    public func list() async throws -> [APIKey] {
        try await database.withConnection { connection in
            var keys: [APIKey] = []
            let rows = try await connection.query(
                """
                SELECT key_id, name, role, created_at, revoked_at
                FROM api_keys ORDER BY created_at, key_id
                """, logger: logger)
            for try await (id, name, role, created, revoked) in rows.decode((UUID, String, String, Timestamp, Timestamp?).self) {
                keys.append(
                    APIKey(
                        keyID: id, name: name, role: APIRole(rawValue: role) ?? .reader,
                        createdAt: created, revokedAt: revoked))
            }
            return keys
        }
    }

    /// Revokes a key by id; returns false if no active key has that id.
    public func revoke(keyID: UUID) async throws -> Bool {
        try await database.withConnection { connection in
            let rows = try await connection.query(
                "UPDATE api_keys SET revoked_at = now() WHERE key_id = \(keyID) AND revoked_at IS NULL RETURNING key_id",
                logger: logger
            ).collect()
            return !rows.isEmpty
        }
    }

    /// The stored form of a secret (and the key of the server's auth cache).
    public static func hash(_ secret: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(secret.utf8)))
    }
}
