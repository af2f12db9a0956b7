/// An event that breaks the contract: which field (a JSON path such as `events[3].data.transaction_id`) and why.
public struct EventValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var field: String
    public var reason: String

    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }

    public var description: String { "\(field): \(reason)" }
}

/// Reads the members of one JSON object, remembering which were consumed so the rest can be refused by name.
struct FieldReader {
    let path: String
    let members: [String: JSONValue]
    private(set) var consumed: Set<String> = []

    init(path: String, members: [String: JSONValue]) {
        self.path = path
        self.members = members
    }

    func field(_ name: String) -> String { path.isEmpty ? name : "\(path).\(name)" }

    func fail(_ name: String, _ reason: String) -> EventValidationError {
        EventValidationError(field: field(name), reason: reason)
    }

    /// The member, or nil when absent or JSON `null`.
    mutating func value(_ name: String) -> JSONValue? {
        consumed.insert(name)
        guard let v = members[name], v != .null else { return nil }
        return v
    }

    func has(_ name: String) -> Bool {
        if let v = members[name], v != .null { return true }
        return false
    }

    /// A string member: at most `Limits.maxTextBytes`, never U+0000 (which PostgreSQL cannot store).
    mutating func string(_ name: String) throws(EventValidationError) -> String? {
        guard let v = value(name) else { return nil }
        guard case .string(let s) = v else { throw fail(name, "must be a string, not \(v.typeName)") }
        guard s.utf8.count <= Limits.maxTextBytes else {
            throw fail(name, "must be at most \(Limits.maxTextBytes) bytes of UTF-8, not \(s.utf8.count)")
        }
        guard !s.utf8.contains(0) else { throw fail(name, "must not contain the character U+0000") }
        return s
    }

    /// An identifier member (`Identifiers.problem`): product, transaction and entitlement ids, keys.
    mutating func identifier(_ name: String, maxBytes: Int = Identifiers.maxIdentifierBytes) throws(EventValidationError) -> String? {
        guard let v = value(name) else { return nil }
        guard case .string(let s) = v else { throw fail(name, "must be a string, not \(v.typeName)") }
        if let problem = Identifiers.problem(s, maxBytes: maxBytes) { throw fail(name, problem) }
        return s
    }

    mutating func requiredIdentifier(_ name: String, maxBytes: Int = Identifiers.maxIdentifierBytes) throws(EventValidationError) -> String {
        guard let s = try identifier(name, maxBytes: maxBytes) else { throw fail(name, "is required") }
        return s
    }

    mutating func requiredString(_ name: String) throws(EventValidationError) -> String {
        guard let s = try string(name) else { throw fail(name, "is required") }
        guard !s.isEmpty else { throw fail(name, "must not be empty") }
        return s
    }

    mutating func requiredTimestamp(_ name: String) throws(EventValidationError) -> Timestamp {
        guard let t = try timestamp(name) else { throw fail(name, "is required") }
        return t
    }

    mutating func timestamp(_ name: String) throws(EventValidationError) -> Timestamp? {
        guard let s = try string(name) else { return nil }
        do {
            return try Timestamp(rfc3339: s)
        } catch {
            throw fail(name, "\(error)")
        }
    }

    /// An integer member within `minimum...maximum` (by default at most `Limits.maxInteger`, 10^15).
    mutating func integer(_ name: String, minimum: Int64 = 0, maximum: Int64 = Limits.maxInteger) throws(EventValidationError) -> Int64? {
        guard let v = value(name) else { return nil }
        guard case .number(let n) = v else { throw fail(name, "must be an integer, not \(v.typeName)") }
        guard let i = n.int64Value else {
            if n.canonical.contains(".") { throw fail(name, "must be an integer, not \(n)") }
            throw fail(name, "must be at most \(maximum), not \(n)")
        }
        guard i >= minimum else { throw fail(name, "must be at least \(minimum)") }
        guard i <= maximum else { throw fail(name, "must be at most \(maximum), not \(i)") }
        return i
    }

    mutating func bool(_ name: String) throws(EventValidationError) -> Bool? {
        guard let v = value(name) else { return nil }
        guard case .bool(let b) = v else { throw fail(name, "must be true or false, not \(v.typeName)") }
        return b
    }

    mutating func object(_ name: String) throws(EventValidationError) -> [String: JSONValue]? {
        guard let v = value(name) else { return nil }
        guard case .object(let o) = v else { throw fail(name, "must be an object, not \(v.typeName)") }
        return o
    }

    /// An array of distinct identifiers (entitlements), at most `Limits.maxEntitlements` of them.
    mutating func stringArray(_ name: String) throws(EventValidationError) -> [String]? {
        guard let v = value(name) else { return nil }
        guard case .array(let a) = v else { throw fail(name, "must be an array of strings, not \(v.typeName)") }
        guard a.count <= Limits.maxEntitlements else {
            throw fail(name, "must name at most \(Limits.maxEntitlements) entitlements, not \(a.count)")
        }
        var out: [String] = []
        var seen: Set<String> = []
        for (i, e) in a.enumerated() {
            guard case .string(let s) = e, !s.isEmpty else {
                throw EventValidationError(field: "\(field(name))[\(i)]", reason: "must be a non-empty string")
            }
            if let problem = Identifiers.problem(s) {
                throw EventValidationError(field: "\(field(name))[\(i)]", reason: problem)
            }
            guard seen.insert(s).inserted else {
                throw EventValidationError(field: "\(field(name))[\(i)]", reason: "repeats \"\(s)\"")
            }
            out.append(s)
        }
        return out
    }

    mutating func oneOf<T: RawRepresentable>(_ name: String, _: T.Type) throws(EventValidationError) -> T?
    where T.RawValue == String, T: CaseIterable {
        guard let s = try string(name) else { return nil }
        guard let t = T(rawValue: s) else {
            throw fail(name, "must be one of \(T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")), not \"\(s)\"")
        }
        return t
    }

    /// Refuses members nobody read: a typo like `ocurred_at` must not be stored silently.
    func rejectUnknown() throws(EventValidationError) {
        if let unknown = members.keys.filter({ !consumed.contains($0) }).sorted().first {
            throw fail(unknown, "is not a known field")
        }
    }
}
