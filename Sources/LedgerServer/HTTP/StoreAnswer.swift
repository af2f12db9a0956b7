import Hummingbird
import LedgerCore
import LedgerStore

/// A store message's outcome as its HTTP answer, for every store's route: `{"status": …, "<id key>": …}`,
/// with the subscriber and its events when applied. 202 when only recorded (resolved in the background).
/// `Ledger-Position`: the applied events' highest; the primary's head when the message appended nothing
/// itself, or its links applied waiting messages too (their events are not listed, the head includes them).
enum StoreAnswer {
    static func response(
        _ result: StoreIntake.Result, id: (key: String, value: String), router: ReadRouter, extra: [String: JSONValue] = [:]
    ) async throws -> Response {
        var answer: [String: JSONValue] = ["status": .string(result.outcome.name), id.key: .string(id.value)]
        answer.merge(extra) { _, new in new }
        switch result.outcome {
        case .applied(let subscriber, let events):
            answer["subscriber_id"] = .string(subscriber)
            answer["events"] = .array(events.map(\.json))
            let position = result.replayed > 0 ? try await router.primaryHead() : events.map(\.position).max() ?? 0
            return Response.json(.object(answer)).ledgerPosition(position)
        case .received:
            return Response.json(.object(answer), status: .accepted).ledgerPosition(try await router.primaryHead())
        default:
            return Response.json(.object(answer)).ledgerPosition(try await router.primaryHead())
        }
    }
}
