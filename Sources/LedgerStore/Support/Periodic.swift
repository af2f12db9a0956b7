import Logging
import ServiceLifecycle

/// Runs `body` now and then every `interval` until cancelled or a graceful shutdown; a failed run is
/// logged and the next interval tries again (the loop of the stores' background workers).
public func runPeriodically(every interval: Duration, logger: Logger, what: String, _ body: @escaping @Sendable () async throws -> Void) async {
    await cancelWhenGracefulShutdown {
        while !Task.isCancelled {
            do {
                try await body()
            } catch  where Task.isCancelled {
                return
            } catch {
                logger.warning("\(what) failed; retrying at the next interval", metadata: ["error.message": "\(error)"])
            }
            try? await Task.sleep(for: interval)
        }
    }
}
