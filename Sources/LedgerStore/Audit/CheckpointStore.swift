import Foundation
import LedgerCore
import Logging
import NIOCore
import PostgresNIO

/// A sealed checkpoint: the Merkle root over every stream head at a log position.
public struct Checkpoint: Sendable, Hashable {
    public var checkpointID: Int64
    public var position: Int64
    public var streams: Int64
    public var events: Int64
    public var merkleRoot: [UInt8]
    public var createdAt: Timestamp

    public var json: JSONValue {
        .object([
            "checkpoint_id": .number(JSONNumber(checkpointID)), "position": .number(JSONNumber(position)),
            "streams": .number(JSONNumber(streams)), "events": .number(JSONNumber(events)),
            "merkle_root": .string(Hex.encode(merkleRoot)), "created_at": .string(createdAt.rfc3339),
        ])
    }
}

/// Seals and re-checks checkpoints. Heads are read in one repeatable-read snapshot; positions are gapless
/// and commit in order, so "every head at position P" is exactly what any later reader sees for P.
public struct CheckpointStore: Sendable {
    static let sealLockKey: Int64 = 0x5355_424C_4348_4B50

    let database: Database

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    public func seal() async throws -> Checkpoint {
        let logger = database.logger
        return try await StoreError.mapping {
            try await database.transaction { c in
                try await c.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", logger: logger)
                try await c.query("SELECT pg_advisory_xact_lock(\(Self.sealLockKey))", logger: logger)
                let position = try await c.query("SELECT coalesce(max(position), 0) FROM events", logger: logger)
                    .collect()[0].decode(Int64.self)
                let (root, streams) = try await Self.root(at: position, on: c, logger: logger)
                let rows = try await c.query(
                    """
                    INSERT INTO checkpoints (checkpoint_id, position, streams, events, merkle_root)
                    SELECT coalesce(max(checkpoint_id), 0) + 1, \(position), \(streams), \(position), \(ByteBuffer(bytes: root))
                    FROM checkpoints
                    RETURNING checkpoint_id, created_at
                    """, logger: logger
                ).collect()
                let (id, created) = try rows[0].decode((Int64, Timestamp).self)
                return Checkpoint(
                    checkpointID: id, position: position, streams: streams, events: position, merkleRoot: root,
                    createdAt: created)
            }
        }
    }

    public func list() async throws -> [Checkpoint] {
        let logger = database.logger
        return try await database.withConnection { c in
            var out: [Checkpoint] = []
            for try await (id, position, streams, events, root, created) in try await c.query(
                """
                SELECT checkpoint_id, position, streams, events, merkle_root, created_at
                FROM checkpoints ORDER BY checkpoint_id
                """, logger: logger
            ).decode((Int64, Int64, Int64, Int64, ByteBuffer, Timestamp).self) {
                out.append(
                    Checkpoint(
                        checkpointID: id, position: position, streams: streams, events: events, merkleRoot: Array(buffer: root),
                        createdAt: created))
            }
            return out
        }
    }

    /// Recomputes every checkpoint's root from the stored heads; returns the ids that no longer match.
    public func verify() async throws -> (checked: Int, broken: [Int64]) {
        let checkpoints = try await list()
        let logger = database.logger
        var broken: [Int64] = []
        for checkpoint in checkpoints {
            let (root, streams) = try await database.withConnection { c in
                try await Self.root(at: checkpoint.position, on: c, logger: logger)
            }
            if root != checkpoint.merkleRoot || streams != checkpoint.streams { broken.append(checkpoint.checkpointID) }
        }
        return (checkpoints.count, broken)
    }

    /// The Merkle root over the heads of all streams at `position`, leaves ordered by subscriber id bytes.
    static func root(at position: Int64, on c: PostgresConnection, logger: Logger) async throws -> ([UInt8], Int64) {
        var leaves: [[UInt8]] = []
        for try await (subscriber, version, hash) in try await c.query(
            """
            SELECT DISTINCT ON (subscriber_id COLLATE "C") subscriber_id, version, hash FROM events
            WHERE position <= \(position) ORDER BY subscriber_id COLLATE "C", version DESC
            """, logger: logger
        ).decode((String, Int64, ByteBuffer).self) {
            leaves.append(MerkleTree.streamHeadLeaf(subscriberID: subscriber, version: version, hash: Array(buffer: hash)))
        }
        return (MerkleTree.root(leaves), Int64(leaves.count))
    }
}
