import Hummingbird
import HummingbirdCore
import NIOCore
import Synchronization

/// One HTTP connection, as far as its requests need to know whether the client is still there.
///
/// A client that closes its side of the connection (or whose connection drops) while a request runs will
/// never read the answer; the request's work is cancelled (`cancelledOnDisconnect`), which ends its
/// database query (`Database` closes the connection of cancelled work, and the server's
/// `client_connection_check_interval` makes PostgreSQL abandon the query). This is Go's `net/http` rule: the
/// end of the client's input while a request runs means the client is gone.
public final class ClientConnection: Sendable {
    private struct State {
        var gone = false
        var onGone: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    /// Calls `cancel` when the client goes away before `disarm`; false (and `cancel` is not kept) when it
    /// is gone already.
    func arm(_ cancel: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { s in
            guard !s.gone else { return false }
            s.onGone = cancel
            return true
        }
    }

    func disarm() {
        state.withLock { $0.onGone = nil }
    }

    var isGone: Bool { state.withLock { $0.gone } }

    fileprivate func gone() {
        let cancel = state.withLock { s -> (@Sendable () -> Void)? in
            s.gone = true
            defer { s.onGone = nil }
            return s.onGone
        }
        cancel?()
    }

    /// The open connections by channel, so a request's context can find its own.
    fileprivate static let open = Mutex<[ObjectIdentifier: ClientConnection]>([:])

    /// The connection a request arrived on, when the server watches it (`ClientDisconnectHandler`).
    static func of(_ channel: any Channel) -> ClientConnection? {
        open.withLock { $0[ObjectIdentifier(channel)] }
    }
}

/// Watches a connection's channel for the client going away: the end of its input (half-close), the
/// channel closing, or an error. Added to every HTTP connection's pipeline.
final class ClientDisconnectHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let connection = ClientConnection()
    private var key: ObjectIdentifier?

    func handlerAdded(context: ChannelHandlerContext) {
        let key = ObjectIdentifier(context.channel)
        self.key = key
        let connection = self.connection
        ClientConnection.open.withLock { $0[key] = connection }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        forget()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .inputClosed? = event as? ChannelEvent { connection.gone() }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.gone()
        forget()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        connection.gone()
        context.fireErrorCaught(error)
    }

    private func forget() {
        guard let key else { return }
        self.key = nil
        ClientConnection.open.withLock { _ = $0.removeValue(forKey: key) }
    }
}

/// A route handler that runs in a task of its own, cancelled when the client goes away, so a long read (a
/// report, an export, a feed, a verify) stops instead of running to its statement timeout for nobody.
///
/// Such a request answers 499 (nginx's "client closed request"), for the logs and metrics only: nobody
/// reads it. Used on the read routes whose work grows with the ledger; an entitlement read (one indexed row,
/// or the cache) is not worth a task of its own.
func cancelledOnDisconnect(
    _ handler: @escaping @Sendable (Request, LedgerRequestContext) async throws -> Response
) -> @Sendable (Request, LedgerRequestContext) async throws -> Response {
    { request, context in
        guard let client = context.client else { return try await handler(request, context) }
        let task = Task { try await handler(request, context) }
        guard client.arm({ task.cancel() }) else {
            task.cancel()
            throw clientClosedRequest
        }
        defer { client.disarm() }
        do {
            return try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch  where client.isGone {
            throw clientClosedRequest
        }
    }
}

/// `cancelledOnDisconnect` for the requests `applies` picks; the others run as they are. An entitlement read
/// now is one indexed row (or the cache), not worth a task; as of an earlier point it folds the whole stream.
func cancelledOnDisconnect(
    when applies: @escaping @Sendable (Request) -> Bool,
    _ handler: @escaping @Sendable (Request, LedgerRequestContext) async throws -> Response
) -> @Sendable (Request, LedgerRequestContext) async throws -> Response {
    let cancelled = cancelledOnDisconnect(handler)
    return { request, context in
        try await (applies(request) ? cancelled : handler)(request, context)
    }
}

let clientClosedRequest = APIError(
    HTTPResponse.Status(code: 499, reasonPhrase: "Client Closed Request"), code: "client_closed_request",
    message: "the client closed the connection before the answer; the request's work was cancelled")

/// A body the client stopped sending (it hung up, or cut a chunked body short): its fault, not the server's.
/// Logged and counted as 499 like a cancelled read; nothing was stored.
let clientClosedBody = APIError(
    HTTPResponse.Status(code: 499, reasonPhrase: "Client Closed Request"), code: "client_closed_request",
    message: "the client closed the connection before the whole request body arrived; nothing was stored")
