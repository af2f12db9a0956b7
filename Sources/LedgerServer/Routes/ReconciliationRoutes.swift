import Foundation
import Hummingbird
import LedgerCore
import LedgerStore

/// `GET /v1/reconciliations` and `GET /v1/reconciliations/{id}` (admin, auditor): the record of
/// reconciliations against the stores (docs/switching.md "Reconcile"): what each run compared, each
/// difference, what it appended and what it could not repair.
struct ReconciliationRoutes {
    let records: ReconciliationStore

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.get("reconciliations", use: list)
        group.get("reconciliations/:id", use: show)
    }

    @Sendable func list(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let query = QueryParameters(request: request)
        let limit = Int(try query.int64("limit", default: 50, range: 1...500))
        let before = request.uri.queryParameters["before"] == nil ? nil : try query.int64("before", default: 0, range: 1...Int64.max)
        var store: String?
        if let text = request.uri.queryParameters["store"] {
            guard ReconciliationStore.stores.contains(String(text)) else {
                throw APIError.invalidRequest(
                    "query parameter 'store' must be one of \(ReconciliationStore.stores.joined(separator: ", ")), not '\(text.prefix(100))'")
            }
            store = String(text)
        }
        let runs = try await records.runs(store: store, beforeSeq: before, limit: limit)
        var body: [String: JSONValue] = ["runs": .array(runs.map(\.json))]
        if runs.count == limit, let last = runs.last { body["next_before"] = .string(String(last.seq)) }
        return .json(.object(body))
    }

    @Sendable func show(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let raw = context.parameters.get("id") ?? ""
        guard raw.utf8.count == 36, let id = UUID(uuidString: raw) else {
            throw APIError.invalidRequest("path parameter 'id' must be a reconciliation run id (a UUID)")
        }
        let query = QueryParameters(request: request)
        let limit = Int(try query.int64("limit", default: 500, range: 1...1000))
        let after = Int(try query.int64("after", default: 0, range: 0...Int64(Int32.max)))
        guard let run = try await records.run(id: id) else { throw APIError.notFound("no reconciliation run \(id.lowercasedString)") }
        let differences = try await records.differences(runID: id, afterOrdinal: after, limit: limit)
        guard case .object(var body) = run.json else { return .json(run.json) }
        body["differences"] = .array(differences.map(\.json))
        if differences.count == limit, let last = differences.last { body["next_after"] = .number(JSONNumber(Int64(last.ordinal))) }
        return .json(.object(body))
    }
}

extension ReconciliationStore.Run {
    var json: JSONValue {
        func n(_ v: Int) -> JSONValue { .number(JSONNumber(Int64(v))) }
        return .object([
            "id": .string(id.lowercasedString),
            "store": .string(store),
            "trigger": .string(trigger),
            "instance": .string(instance),
            "status": .string(status.rawValue),
            "error": error.map(JSONValue.string) ?? .null,
            "since": since.map { .string($0.rfc3339) } ?? .null,
            "voided_since": voidedSince.map { .string($0.rfc3339) } ?? .null,
            "started_at": .string(startedAt.rfc3339),
            "finished_at": finishedAt.map { .string($0.rfc3339) } ?? .null,
            "purchases_compared": n(purchases),
            "differences_found": n(differences),
            "repaired": n(repaired),
            "unrepaired": n(unrepaired),
            "events_appended": n(eventsAppended),
        ])
    }
}

extension ReconciliationStore.Difference {
    var json: JSONValue {
        .object([
            "ordinal": .number(JSONNumber(Int64(ordinal))),
            "subscriber_id": .string(subscriberID),
            "purchase_id": .string(purchaseID),
            "field": .string(field),
            "ledger_value": ledgerValue.map(JSONValue.string) ?? .null,
            "store_value": storeValue.map(JSONValue.string) ?? .null,
            "outcome": .string(repaired ? "repaired" : "unrepaired"),
            "event_ids": .array(eventIDs.map { .string($0.lowercasedString) }),
            "reason": reason.map(JSONValue.string) ?? .null,
        ])
    }
}
