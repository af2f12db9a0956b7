import LedgerCore

/// A JSON object of a verifyReceipt response and where it sits, so that errors name the exact path.
///
/// Apple writes numbers and booleans as strings in most places but not all; readers accept both, and a
/// JSON `null` counts as absent.
struct ReceiptObject {
    /// JSON path of the object itself; empty for the top level.
    let location: String
    let members: [String: JSONValue]

    init(path: String, members: [String: JSONValue]) {
        self.location = path
        self.members = members
    }

    func path(_ name: String) -> String { location.isEmpty ? name : "\(location).\(name)" }

    func fail(_ name: String, _ reason: String) -> AppleReceiptError {
        AppleReceiptError(field: path(name), reason: reason)
    }

    func value(_ name: String) -> JSONValue? {
        guard let v = members[name], v != .null else { return nil }
        return v
    }

    func object(_ name: String) throws(AppleReceiptError) -> ReceiptObject? {
        guard let v = value(name) else { return nil }
        guard case .object(let o) = v else { throw fail(name, "must be an object, not \(v.typeName)") }
        return ReceiptObject(path: path(name), members: o)
    }

    /// An array of objects, or a single object (the iOS 6 `latest_receipt_info`).
    func objects(_ name: String) throws(AppleReceiptError) -> [ReceiptObject] {
        switch value(name) {
        case nil:
            return []
        case .object(let o):
            return [ReceiptObject(path: path(name), members: o)]
        case .array(let elements):
            var out: [ReceiptObject] = []
            for (i, e) in elements.enumerated() {
                guard case .object(let o) = e else {
                    throw AppleReceiptError(field: "\(path(name))[\(i)]", reason: "must be an object, not \(e.typeName)")
                }
                out.append(ReceiptObject(path: "\(path(name))[\(i)]", members: o))
            }
            return out
        case let v?:
            throw fail(name, "must be an array of objects, not \(v.typeName)")
        }
    }

    /// Text, or a number's exact text (ids are digits and may come either way).
    func string(_ name: String) throws(AppleReceiptError) -> String? {
        switch value(name) {
        case nil: nil
        case .string(let s): s
        case .number(let n): n.canonical
        case let v?: throw fail(name, "must be a string, not \(v.typeName)")
        }
    }

    func requiredID(_ name: String) throws(AppleReceiptError) -> String {
        guard let s = try string(name) else { throw fail(name, "is required") }
        guard !s.isEmpty else { throw fail(name, "must not be empty") }
        return s
    }

    func integer(_ name: String) throws(AppleReceiptError) -> Int? {
        guard let s = try string(name) else { return nil }
        guard let n = Int(s) else { throw fail(name, "must be an integer, not \"\(s)\"") }
        return n
    }

    /// `"true"`/`"false"` (transactions) or `"1"`/`"0"` (renewal info), as strings, numbers or booleans.
    func flag(_ name: String) throws(AppleReceiptError) -> Bool? {
        switch value(name) {
        case nil: return nil
        case .bool(let b): return b
        case .string("true"), .string("1"), .number(JSONNumber(1)): return true
        case .string("false"), .string("0"), .number(JSONNumber(0)): return false
        case let v?: throw fail(name, "must be \"true\"/\"false\" or \"1\"/\"0\", not \(v.canonicalString())")
        }
    }

    /// A date given as `<base>_ms` (milliseconds since 1970), `<base>` (a `yyyy-MM-dd HH:mm:ss Etc/GMT`
    /// text, or milliseconds in the iOS 6 `expires_date`) or the iOS 6 `<base>_formatted`, read in that order.
    ///
    /// The `*_pst` variants are not read: turning `America/Los_Angeles` into UTC needs zone rules, and Apple
    /// always sends a GMT or milliseconds form beside them. A response that has only a `_pst` form is refused
    /// rather than read as if the date were absent.
    func date(_ base: String, modern: Bool) throws(AppleReceiptError) -> Timestamp? {
        if let v = value("\(base)_ms") {
            guard let t = AppleDateText.milliseconds(v) else {
                throw fail(
                    "\(base)_ms", "must be milliseconds since 1970-01-01 such as \"1700000000000\", not \(v.canonicalString())")
            }
            return t
        }
        for name in [base, "\(base)_formatted"] {
            guard let v = value(name) else { continue }
            if let t = AppleDateText.milliseconds(v) ?? v.stringValue.flatMap(AppleDateText.gmt) { return t }
            throw fail(
                name, "must be a date such as \"2011-10-29 20:30:07 Etc/GMT\" or milliseconds since 1970, not \(v.canonicalString())")
        }
        for name in ["\(base)_pst", "\(base)_formatted_pst"] where value(name) != nil {
            throw fail(
                modern ? "\(base)_ms" : base,
                "is missing; only \(name) (America/Los_Angeles time) is given, which is not read")
        }
        return nil
    }

    /// Like `date`, but missing is an error naming the field the response's shape should have had.
    func requiredDate(_ base: String, modern: Bool) throws(AppleReceiptError) -> Timestamp {
        guard let t = try date(base, modern: modern) else {
            throw fail(modern ? "\(base)_ms" : base, "is required")
        }
        return t
    }
}

/// Apple's two date spellings, parsed without Foundation.
enum AppleDateText {
    /// Integer milliseconds since 1970, as a JSON number or a string of digits.
    static func milliseconds(_ v: JSONValue) -> Timestamp? {
        let text: String
        switch v {
        case .string(let s): text = s
        case .number(let n): text = n.canonical
        default: return nil
        }
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let ms = Int64(text) else { return nil }
        let (micros, overflow) = ms.multipliedReportingOverflow(by: 1000)
        guard !overflow, micros <= Timestamp.maximum.microseconds else { return nil }
        return Timestamp(microseconds: micros)
    }

    /// `2011-10-29 20:30:07 Etc/GMT` (also `GMT`, `UTC`, `Etc/UTC`).
    static func gmt(_ text: String) -> Timestamp? {
        let utf8 = Array(text.utf8)
        guard utf8.count > 20, utf8[19] == UInt8(ascii: " ") else { return nil }
        let zone = String(decoding: utf8[20...], as: UTF8.self)
        guard ["Etc/GMT", "GMT", "Etc/UTC", "UTC"].contains(zone) else { return nil }
        return try? Timestamp(rfc3339: String(decoding: utf8[..<19], as: UTF8.self) + "Z")
    }
}
