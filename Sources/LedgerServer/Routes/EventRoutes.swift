import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import NIOCore

/// `POST /v1/events` and the two audit feeds.
struct EventRoutes {
    let intake: EventIntake
    var store: EventStore { intake.store }
    /// Where the feeds are read (a replica that has the position a read needs, else the primary).
    let router: ReadRouter
    let maxBodyBytes: Int

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.post("events", use: append)
        group.get("events", use: cancelledOnDisconnect(feed))
        group.get("subscribers/:subscriber_id/events", use: cancelledOnDisconnect(stream))
    }

    @Sendable func append(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.append)
        let body = try await RequestBody.collect(request, limit: maxBodyBytes)
        let appendRequest: AppendRequest
        do {
            appendRequest = try AppendRequest.decode(body.readableBytesView, validateData: false)
        } catch {
            switch error {
            case .malformed(let parse): throw APIError.invalidRequest("the body is not valid JSON: \(parse)")
            case .invalid(let invalid): throw APIError.invalidEvent(invalid)
            }
        }
        let result = try await intake.append(appendRequest.events, path: appendRequest.path)
        context.logger.debug(
            "appended", metadata: ["ledger.events.created": "\(result.createdCount)", "ledger.events.total": "\(result.events.count)"])
        var answer = CanonicalObject(capacity: 700 * result.events.count)
        answer.member("events", objects: result.events) { $0.write(to: &$1) }
        // The highest position reached: a read with it as `min_position` sees every event of this answer.
        return Response.json(canonical: answer.finish(), status: result.isReplay ? .ok : .created)
            .ledgerPosition(result.events.map(\.position).max() ?? 0)
    }

    @Sendable func feed(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let query = QueryParameters(request: request)
        let after = try query.int64("after_position", default: 0, range: 0...Int64.max)
        let limit = try query.int64("limit", default: 100, range: 1...1000)
        let minimum = try LedgerPosition.minimum(request)
        let (events, position) = try await router.read(atLeast: minimum) { [store] source in
            try await store.feed(afterPosition: after, limit: Int(limit), on: source)
        }
        var body = CanonicalObject(capacity: 700 * events.count + 64)
        body.member("events", objects: events) { $0.write(to: &$1) }
        body.member("next_after_position", integer: events.last?.position ?? after)
        return Response.json(canonical: body.finish()).ledgerPosition(max(position, events.last?.position ?? 0))
    }

    @Sendable func stream(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.audit)
        let subscriber = try SubscriberPath.id(context)
        let query = QueryParameters(request: request)
        let after = try query.int64("after", default: 0, range: 0...Int64.max)
        let limit = try query.int64("limit", default: 100, range: 1...1000)
        let minimum = try LedgerPosition.minimum(request)
        let (events, position) = try await router.read(atLeast: minimum) { [store] source in
            try await store.stream(subscriberID: subscriber, afterVersion: after, limit: Int(limit), on: source)
        }
        var body = CanonicalObject(capacity: 700 * events.count + 64)
        body.member("events", objects: events) { $0.write(to: &$1) }
        body.member("next_after", integer: events.last?.version ?? after)
        body.member("subscriber_id", string: subscriber)
        return Response.json(canonical: body.finish()).ledgerPosition(max(position, events.map(\.position).max() ?? 0))
    }
}

/// The `{subscriber_id}` path parameter, percent-decoded and checked against the contract's alphabet.
enum SubscriberPath {
    static func id(_ context: LedgerRequestContext) throws -> String {
        let raw = context.parameters.get("subscriber_id") ?? ""
        let id = raw.percentDecoded
        guard Identifiers.isValidSubscriberID(id) else {
            throw APIError.invalidRequest("subscriber id \(Identifiers.subscriberIDRule)")
        }
        return id
    }
}

/// Reads a request body up to a limit (413 beyond it), refusing early on a declared oversize length.
enum RequestBody {
    static func collect(_ request: Request, limit: Int) async throws -> ByteBuffer {
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit {
            throw APIError(
                .contentTooLarge, code: "payload_too_large",
                message: "the request body is \(declared) bytes; the limit is \(limit)")
        }
        do {
            return try await request.body.collect(upTo: limit)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw APIError(.contentTooLarge, code: "payload_too_large", message: "the request body exceeds \(limit) bytes")
        } catch let error as NIOTooManyBytesError {
            throw error
        } catch let error as CancellationError {
            throw error
        } catch {
            throw Interrupted(underlying: error)
        }
    }

    /// Reading the body failed: the connection ended before its end, or its framing (chunked encoding) is
    /// broken. The client's doing; `ErrorMiddleware` answers 400, or 499 when the client is gone.
    struct Interrupted: Error, CustomStringConvertible {
        var underlying: any Error
        var description: String { "the request body was cut short or malformed (\(underlying))" }
    }
}
