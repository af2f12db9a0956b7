import ArgumentParser
import Foundation

/// Every `SUBLEDGER_*` fallback of the command line, read in one place: a flag given wins, else its
/// environment variable, else the option's default (docs/cli.md lists each pair). A variable that is unset
/// or blank counts as absent; one that does not parse fails validation naming the variable.
struct EnvironmentFallback {
    var variables: [String: String]

    init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    /// The variable, trimmed; nil when unset or blank.
    func text(_ name: String) -> String? {
        guard let value = variables[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        return value
    }

    /// A text option: the flag (unless empty), else the variable.
    func string(_ flag: String?, _ name: String) -> String? {
        if let flag, !flag.isEmpty { return flag }
        return text(name)
    }

    /// A repeatable option: the flags, else the variable's comma-separated items.
    func list(_ flags: [String], _ name: String) -> [String] {
        guard flags.isEmpty else { return flags }
        return (variables[name] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// A switch: the flag, or the variable set to `1`.
    func flag(_ flag: Bool, _ name: String) -> Bool {
        flag || variables[name] == "1"
    }

    /// A typed option: the flag's value, else the variable parsed as the flag would be.
    func value<T: ExpressibleByArgument>(_ flag: T?, _ name: String, option: String) throws -> T? {
        if let flag { return flag }
        guard let text = text(name) else { return nil }
        guard let value = T(argument: text) else { throw ValidationError("\(name)=\(text) is not a valid --\(option)") }
        return value
    }
}

/// A duration argument: a whole number with a unit, `500ms`, `10s`, `5m`, `2h`, `3d`, or a bare number of
/// seconds. Malformed text is a usage error when parsing; each option checks its range in `validate()`.
struct DurationArgument: ExpressibleByArgument, Comparable, Sendable, CustomStringConvertible {
    var duration: Duration
    private var text: String

    init?(argument: String) {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        let (digits, ms) = units.first { argument.hasSuffix($0.0) }.map { (argument.dropLast($0.0.count), $0.1) } ?? (Substring(argument), 1000)
        // At most 10,000 days in any unit.
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let n = Int64(digits), n >= 0, n <= 864_000_000_000 / ms else { return nil }
        self.duration = .milliseconds(n * ms)
        self.text = argument
    }

    var description: String { text }
    var defaultValueDescription: String { text }

    static func < (a: Self, b: Self) -> Bool { a.duration < b.duration }
    static func == (a: Self, b: Self) -> Bool { a.duration == b.duration }

    /// Whether it lies in `range`; else a validation error naming the option and the range's words.
    func check(_ range: ClosedRange<Duration>, option: String, expected: String) throws {
        guard range.contains(duration) else { throw ValidationError("--\(option) must be \(expected), not '\(text)'") }
    }

    /// The duration in whole seconds (rounded down).
    var seconds: Int64 { duration.components.seconds }
}

extension Duration {
    /// Days, for ranges of duration options.
    static func days(_ n: Int64) -> Duration { .seconds(n * 86_400) }
}
