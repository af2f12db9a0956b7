import Hummingbird
import Logging
import Synchronization

/// A remote service's stand-in (Apple's, Stripe's, Google's API, a webhook receiver) on loopback.
public enum LocalHTTPServer {
    /// Runs `router` on a free port of 127.0.0.1 while `body` runs with that port, then stops it.
    public static func serve<T: Sendable>(
        _ router: Router<BasicRequestContext>, label: String = "stand-in", _ body: @escaping @Sendable (Int) async throws -> T
    ) async throws -> T {
        let port = Mutex<Int?>(nil)
        // Cancelled at the end of each test: Hummingbird logs that as an error, which says nothing here.
        var quiet = Logger(label: label)
        quiet.logLevel = .critical
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } }, logger: quiet)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await app.runService(gracefulShutdownSignals: [])
                return nil
            }
            while port.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(10)) }
            let result = try await body(port.withLock { $0 }!)
            group.cancelAll()
            return result
        }
    }
}
