import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// The product catalog: every PUT adds a revision; reads see the latest one.
public struct CatalogStore: Sendable {
    let database: Database

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    static let columns = """
        product_id, revision, array_to_json(entitlements)::text, kind, period, duration, price_minor, currency,
        commission_rate::text, recorded_at
        """

    /// Stores a new revision of the product and returns it as stored.
    public func put(_ product: Product) async throws -> Product {
        let logger = database.logger
        return try await database.transaction { connection in
            // One writer per product at a time, so revisions are consecutive.
            try await connection.query("SELECT pg_advisory_xact_lock(hashtext(\(product.productID)))", logger: logger)
            let rows = try await connection.query(
                """
                INSERT INTO products (product_id, revision, entitlements, kind, period, duration, price_minor, currency, commission_rate)
                SELECT \(product.productID), coalesce(max(revision), 0) + 1, \(product.entitlements)::text[], \(product.kind.rawValue),
                       \(product.period?.text), \(product.duration?.text), \(product.priceMinor), \(product.currency),
                       \(product.commissionRate.canonical)::numeric
                FROM products WHERE product_id = \(product.productID)
                RETURNING \(unescaped: Self.columns)
                """, logger: logger)
            return try await Self.decode(rows)[0]
        }
    }

    /// The latest revision of each product named (absent ones are simply missing).
    public func latest(_ ids: Set<String>) async throws -> [String: Product] {
        guard !ids.isEmpty else { return [:] }
        let logger = database.logger
        return try await database.withConnection { connection in
            try await Self.latest(ids, on: connection, logger: logger)
        }
    }

    /// The latest revision of each product named, on a connection (a store message's transaction).
    static func latest(_ ids: Set<String>, on connection: PostgresConnection, logger: Logger) async throws -> [String: Product] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            SELECT DISTINCT ON (product_id) \(unescaped: Self.columns) FROM products
            WHERE product_id = ANY(\(Array(ids))::text[]) ORDER BY product_id, revision DESC
            """, logger: logger)
        return Dictionary(uniqueKeysWithValues: try await Self.decode(rows).map { ($0.productID, $0) })
    }

    /// The latest revision of every product.
    public func list() async throws -> [Product] {
        let logger = database.logger
        return try await database.withConnection { connection in
            try await Self.decode(
                try await connection.query(
                    "SELECT DISTINCT ON (product_id) \(unescaped: Self.columns) FROM products ORDER BY product_id, revision DESC",
                    logger: logger))
        }
    }

    /// Every revision of one product, oldest first.
    public func history(_ id: String) async throws -> [Product] {
        let logger = database.logger
        return try await database.withConnection { connection in
            try await Self.decode(
                try await connection.query(
                    "SELECT \(unescaped: Self.columns) FROM products WHERE product_id = \(id) ORDER BY revision", logger: logger))
        }
    }

    private static func decode(_ rows: PostgresRowSequence) async throws -> [Product] {
        var out: [Product] = []
        for try await row in rows.decode((String, Int, String, String, String?, String?, Int64, String, String, Timestamp).self) {
            out.append(try product(row))
        }
        return out
    }

    /// A product from the columns of `columns`, in their order.
    static func product(
        _ row: (String, Int, String, String, String?, String?, Int64, String, String, Timestamp)
    ) throws -> Product {
        let (id, revision, entitlements, kind, period, duration, price, currency, rate, recorded) = row
        return Product(
            productID: id, revision: revision,
            entitlements: try JSONParser.parse(entitlements).arrayValue?.compactMap(\.stringValue) ?? [],
            kind: EventDataValidator.Kind(rawValue: kind) ?? .autoRenewable, period: period.flatMap(ISODuration.init),
            duration: duration.flatMap(ISODuration.init), priceMinor: price, currency: currency,
            commissionRate: JSONNumber(jsonText: Substring(rate)) ?? JSONNumber(0),
            recordedAt: recorded)
    }
}
