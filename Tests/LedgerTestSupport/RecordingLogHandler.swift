import Logging
import Synchronization

/// Keeps every log line (message, metadata and the logger's own metadata, rendered), so that a test can
/// say what a log must never contain.
public final class LogRecorder: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    /// A logger that writes here, at every level.
    public func logger(label: String = "recorded") -> Logger {
        var logger = Logger(label: label) { _ in RecordingLogHandler(recorder: self) }
        logger.logLevel = .trace
        return logger
    }

    public var all: [String] { lines.withLock { $0 } }

    func append(_ line: String) { lines.withLock { $0.append(line) } }
}

struct RecordingLogHandler: LogHandler {
    let recorder: LogRecorder
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        let rendered = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        recorder.append("\(event.level) \(event.message) \(rendered)\(event.error.map { " error=\($0)" } ?? "")")
    }
}
