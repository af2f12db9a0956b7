import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// Accountants' routes: checkpoints, verification and streamed CSV exports (auditor role).
struct AuditRoutes {
    let store: EventStore
    /// Where the exports are read (a replica that has the position asked for, else the primary).
    let router: ReadRouter
    let checkpoints: CheckpointStore
    let verifier: ChainVerifier

    static let pageSize = 1000

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.post("audit/checkpoints", use: seal)
        group.get("audit/checkpoints", use: cancelledOnDisconnect(list))
        group.get("audit/verify", use: cancelledOnDisconnect(verify))
        group.get("exports/events.csv", use: cancelledOnDisconnect(eventsCSV))
        group.get("exports/windows.csv", use: cancelledOnDisconnect(windowsCSV))
    }

    @Sendable func seal(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        return .json(try await checkpoints.seal().json, status: .created)
    }

    @Sendable func list(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        return .json(.object(["checkpoints": .array(try await checkpoints.list().map(\.json))]))
    }

    /// Recomputes every chain and every checkpoint; names the first broken event.
    @Sendable func verify(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let chains = try await verifier.verify()
        let sealed = try await checkpoints.verify()
        let first: JSONValue =
            chains.firstBroken.map { b in
                .object([
                    "event_id": .string(b.eventID.lowercasedString), "subscriber_id": .string(b.subscriberID),
                    "version": .number(JSONNumber(b.version)), "position": .number(JSONNumber(b.position)), "reason": .string(b.reason),
                ])
            } ?? .null
        return .json([
            "ok": .bool(chains.ok && sealed.broken.isEmpty),
            "events_checked": .number(JSONNumber(Int64(chains.eventsChecked))),
            "streams_checked": .number(JSONNumber(Int64(chains.streamsChecked))),
            "broken_events": .number(JSONNumber(Int64(chains.breaks.count))),
            "event_id": first.objectValue?["event_id"] ?? .null,
            "first_broken": first,
            "checkpoints_checked": .number(JSONNumber(Int64(sealed.checked))),
            "broken_checkpoints": .array(sealed.broken.map { .number(JSONNumber($0)) }),
        ])
    }

    /// Every event recorded in `[from, to)` (RFC 3339, both optional), position order, streamed page by page.
    @Sendable func eventsCSV(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let query = QueryParameters(request: request)
        let from = try query.timestamp("from")
        let to = try query.timestamp("to")
        let store = self.store
        // One source for the whole export; the header's position is where it stood before the first page.
        let route = try await router.route(atLeast: try LedgerPosition.minimum(request))
        let source = route.database
        let body = ResponseBody { writer in
            try await writer.write(
                CSV.line([
                    "position", "event_id", "subscriber_id", "version", "type", "occurred_at", "recorded_at", "source", "environment",
                    "idempotency_key", "data", "metadata", "prev_hash", "hash",
                ]))
            var after: Int64 = 0
            while true {
                let page = try await store.feed(
                    afterPosition: after, limit: Self.pageSize, recordedFrom: from, recordedTo: to, on: source)
                guard let last = page.last else { break }
                var buffer = ByteBuffer()
                for e in page {
                    buffer.writeImmutableBuffer(
                        CSV.line([
                            String(e.position), e.eventID.lowercasedString, e.subscriberID, String(e.version), e.type.rawValue,
                            e.occurredAt.rfc3339, e.recordedAt.rfc3339, e.source, e.environment.rawValue, e.idempotencyKey,
                            JSONValue.object(e.data).canonicalString(), JSONValue.object(e.metadata).canonicalString(),
                            Hex.encode(e.prevHash), Hex.encode(e.hash),
                        ]))
                }
                try await writer.write(buffer)
                after = last.position
            }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: CSV.headers(filename: "events.csv"), body: body).ledgerPosition(route.position)
    }

    /// Every window of every subscriber (void and cut ones included), streamed page by page.
    @Sendable func windowsCSV(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let route = try await router.route(atLeast: try LedgerPosition.minimum(request))
        let source = route.database
        let body = ResponseBody { writer in
            try await writer.write(
                CSV.line([
                    "subscriber_id", "entitlement", "start", "end", "kind", "product_id", "transaction_id", "source_event_id",
                    "environment", "cut_at", "cut_by", "cut_cause",
                ]))
            var cursor: (subscriber: String, seq: Int32)? = nil
            while true {
                let page = try await ProjectionReader.windowsPage(after: cursor, limit: Self.pageSize, on: source)
                guard let last = page.last else { break }
                var buffer = ByteBuffer()
                for (subscriber, _, w) in page {
                    let cut = w.effectiveCut
                    buffer.writeImmutableBuffer(
                        CSV.line([
                            subscriber, w.entitlement, w.start.rfc3339, w.end?.rfc3339 ?? "", w.kind.rawValue, w.productID ?? "",
                            w.transactionID ?? "", w.sourceEventID.lowercasedString, w.environment.rawValue,
                            cut?.at.rfc3339 ?? "", cut.map { $0.eventID.lowercasedString } ?? "", cut?.cause.rawValue ?? "",
                        ]))
                }
                try await writer.write(buffer)
                cursor = (last.0, last.1)
            }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: CSV.headers(filename: "windows.csv"), body: body).ledgerPosition(route.position)
    }
}
