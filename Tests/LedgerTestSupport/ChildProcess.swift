import Foundation

/// Runs an executable (the built `subledger`, as a user runs it) with `arguments` and extra environment;
/// returns its exit status and its output (stdout and stderr together).
///
/// The output is read and the exit awaited on a thread of its own: blocking calls in tasks held Swift's
/// cooperative threads (two on a two-core machine), so two such tests at once left none for the stand-in
/// server in the test process that the child talks to, and the child timed out.
public func runChildProcess(_ executable: URL, _ arguments: [String], environment: [String: String]) async throws -> (Int32, String) {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let out = Pipe()
    process.standardOutput = out
    process.standardError = out
    try process.run()
    let data = await withCheckedContinuation { (done: CheckedContinuation<Data, Never>) in
        Thread {
            let data = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            done.resume(returning: data)
        }.start()
    }
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}
