import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerStore
import NIOCore
import NIOHTTP1
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Sends one signed message to one URL and says what came of it. Never follows redirects (a redirect could
/// lead anywhere the destination policy forbids); 2xx is delivered, 410 is gone, anything else (and every
/// network failure or timeout) is a failure to retry.
struct WebhookSender: Sendable {
    let client: HTTPClient
    let policy: WebhookDestinationPolicy

    static let userAgent = "subledger-webhooks/1"
    /// Bytes of a response body read (to reuse the connection) and of it kept in an error message.
    static let maxResponseBytes = 64 * 1024

    struct Result: Sendable {
        var outcome: WebhookDelivery.Outcome
        var httpStatus: Int?
        var error: String?
        var latencyMilliseconds: Int
    }

    /// Sends the message, giving up after `timeout` (connecting included).
    func send(url: String, message: WebhookMessage, secrets: [WebhookSecret], timeout: Duration) async -> Result {
        let clock = ContinuousClock()
        let started = clock.now
        func elapsed() -> Int {
            let d = clock.now - started
            return Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
        }
        let deadline = NIODeadline.now() + .nanoseconds(timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
        if let refusal = await destinationProblem(url, within: timeout) {
            return Result(outcome: .failed, httpStatus: nil, error: refusal, latencyMilliseconds: elapsed())
        }
        let timestamp = Int64(Date().timeIntervalSince1970)
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: Self.userAgent)
        request.headers.add(name: "webhook-id", value: message.id)
        request.headers.add(name: "webhook-timestamp", value: String(timestamp))
        request.headers.add(
            name: "webhook-signature",
            value: WebhookSignature.header(id: message.id, timestamp: timestamp, body: message.body, secrets: secrets))
        request.body = .bytes(ByteBuffer(bytes: message.body))
        do {
            let response = try await client.execute(request, deadline: deadline)
            // A body known to be empty ends at once: read without the deadline's timer (a task and a timer per
            // message otherwise).
            let empty = response.status == .noContent || response.headers.first(name: "content-length") == "0"
            let body =
                empty
                ? (try? await response.body.collect(upTo: Self.maxResponseBytes)) ?? ByteBuffer()
                : (try? await Self.collect(response.body, before: deadline)) ?? ByteBuffer()
            let code = Int(response.status.code)
            switch code {
            case 200..<300:
                return Result(outcome: .delivered, httpStatus: code, error: nil, latencyMilliseconds: elapsed())
            case 410:
                return Result(outcome: .gone, httpStatus: code, error: "410 Gone: the endpoint asked to stop", latencyMilliseconds: elapsed())
            default:
                let text = Self.printable(body)
                return Result(
                    outcome: .failed, httpStatus: code,
                    error: "HTTP \(code)" + (text.isEmpty ? "" : ": \(text)"), latencyMilliseconds: elapsed())
            }
        } catch {
            return Result(outcome: .failed, httpStatus: nil, error: Self.describe(error), latencyMilliseconds: elapsed())
        }
    }

    /// Reads up to `maxResponseBytes` of a response body, abandoning it at the deadline (a body that trickles
    /// must not hold the endpoint past its lease).
    static func collect(_ body: HTTPClientResponse.Body, before deadline: NIODeadline) async throws -> ByteBuffer {
        try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask { try await body.collect(upTo: maxResponseBytes) }
            group.addTask {
                let left = deadline - NIODeadline.now()
                if left > .zero { try await Task.sleep(nanoseconds: UInt64(left.nanoseconds)) }
                return nil
            }
            defer { group.cancelAll() }
            return (try await group.next() ?? nil) ?? ByteBuffer()
        }
    }

    /// Why the URL may not be reached now, if it may not: the policy again (it may have changed since the
    /// URL was registered) and, for names, every address they resolve to. AsyncHTTPClient resolves the name
    /// again when it connects; docs/webhooks.md says what that leaves open.
    func destinationProblem(_ url: String, within timeout: Duration) async -> String? {
        let target: WebhookDestinationPolicy.Target
        switch policy.parse(url) {
        case .refused(let why): return "the URL is refused: it \(why)"
        case .accepted(let t): target = t
        }
        guard !policy.allowPrivate, target.literal == nil else { return nil }
        guard let addresses = await Self.resolve(target.host, within: timeout) else { return "resolving \(target.host) timed out" }
        guard !addresses.isEmpty else { return "cannot resolve \(target.host)" }
        return policy.check(resolved: addresses)
    }

    /// The host's addresses (4 or 16 bytes each), resolved on a thread of its own (getaddrinfo blocks); nil
    /// if that takes longer than `timeout` (the attempt's time, which its lease bounds).
    static func resolve(_ host: String, within timeout: Duration) async -> [[UInt8]]? {
        await withCheckedContinuation { (continuation: CheckedContinuation<[[UInt8]]?, Never>) in
            let once = Mutex(false)
            let finish = { @Sendable (value: [[UInt8]]?) in
                if once.withLock({ done in
                    defer { done = true }
                    return !done
                }) {
                    continuation.resume(returning: value)
                }
            }
            Thread { finish(lookUp(host)) }.start()
            let ms = Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) { finish(nil) }
        }
    }

    private static func lookUp(_ host: String) -> [[UInt8]] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
            hints.ai_socktype = SOCK_STREAM
        #endif
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else { return [] }
        defer { freeaddrinfo(first) }
        var out: [[UInt8]] = []
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let info = node {
            if let address = info.pointee.ai_addr {
                switch Int32(info.pointee.ai_family) {
                case AF_INET:
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                        var a = sin.pointee.sin_addr
                        out.append(withUnsafeBytes(of: &a) { Array($0) })
                    }
                case AF_INET6:
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                        var a = sin6.pointee.sin6_addr
                        out.append(withUnsafeBytes(of: &a) { Array($0) })
                    }
                default:
                    break
                }
            }
            node = info.pointee.ai_next
        }
        return out
    }

    /// A failure for the deliveries log: what happened, never the request's headers.
    static func describe(_ error: any Error) -> String {
        if let e = error as? HTTPClientError {
            switch e {
            case .connectTimeout: return "connect timed out"
            case .readTimeout, .deadlineExceeded: return "timed out waiting for the response"
            case .remoteConnectionClosed: return "the connection was closed before a response"
            case .cancelled: return "cancelled (the server is stopping)"
            default: return "HTTP client error: \(e)"
            }
        }
        if error is CancellationError { return "cancelled (the server is stopping)" }
        return String(String(describing: error).prefix(300))
    }

    /// The first 200 printable ASCII characters of a response body.
    static func printable(_ body: ByteBuffer) -> String {
        let bytes = body.readableBytesView.prefix(200).map { (0x20...0x7E).contains($0) ? $0 : UInt8(ascii: "?") }
        return String(decoding: bytes, as: UTF8.self)
    }
}
