import Foundation

/// Where webhooks may be sent. The ledger's server sits inside a private network; a URL pointing back into
/// it (loopback, RFC 1918, link-local cloud metadata) would let an admin key probe that network, so such
/// destinations are refused unless the operator allows them.
public struct WebhookDestinationPolicy: Sendable, Hashable {
    public static let maxURLBytes = 2048

    /// `http://` as well as `https://` (`serve --webhooks-allow-http`).
    public var allowHTTP: Bool
    /// Loopback, private, link-local and other non-public addresses (`serve --webhooks-allow-private`).
    public var allowPrivate: Bool

    public init(allowHTTP: Bool = false, allowPrivate: Bool = false) {
        self.allowHTTP = allowHTTP
        self.allowPrivate = allowPrivate
    }

    /// A URL as parsed for delivery.
    public struct Target: Sendable, Hashable {
        public var url: String
        public var scheme: String
        /// Lower-case, without brackets or a trailing dot.
        public var host: String
        /// The address when the host is an IP literal (4 or 16 bytes), else nil (a name, resolved at delivery).
        public var literal: [UInt8]?
    }

    /// Checks a URL's form and, for IP literals and `localhost` names, its destination; nil if acceptable,
    /// else why not. Names are resolved and checked again at every delivery (`check(resolved:)`).
    public func problem(_ url: String) -> String? {
        switch parse(url) {
        case .refused(let why): why
        case .accepted: nil
        }
    }

    /// A URL accepted for delivery, or why not.
    public enum Parsed: Sendable, Hashable {
        case accepted(Target)
        case refused(String)
    }

    public func parse(_ url: String) -> Parsed {
        if url.utf8.count > Self.maxURLBytes { return .refused("must be at most \(Self.maxURLBytes) bytes") }
        if url.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F || $0.value > 0x7E }) {
            return .refused("must be an absolute URL of printable ASCII without spaces (percent-encode the rest)")
        }
        guard let components = URLComponents(string: url), let rawScheme = components.scheme else {
            return .refused("must be an absolute https:// URL")
        }
        let scheme = rawScheme.lowercased()
        guard scheme == "https" || (scheme == "http" && allowHTTP) else {
            return .refused(
                scheme == "http"
                    ? "must use https (http:// needs serve --webhooks-allow-http)" : "must be an https:// URL, not \(rawScheme)://")
        }
        if components.user != nil || components.password != nil {
            return .refused("must not carry credentials (user:password@)")
        }
        if components.fragment != nil { return .refused("must not have a #fragment") }
        guard var host = components.host?.lowercased(), !host.isEmpty else { return .refused("must name a host") }
        if components.percentEncodedHost?.contains("%") == true {
            return .refused("must not percent-encode its host (or name an IPv6 zone)")
        }
        let bracketed = host.hasPrefix("[") && host.hasSuffix("]")
        if bracketed { host = String(host.dropFirst().dropLast()) }
        while host.hasSuffix(".") { host.removeLast() }
        guard !host.isEmpty else { return .refused("must name a host") }
        if let port = components.port, !(1...65535).contains(port) { return .refused("has an invalid port") }
        if !bracketed, let why = Self.ambiguousNumericHost(host) { return .refused(why) }
        let literal = bracketed ? Self.ipv6Literal(host) : Self.ipv4Literal(host)
        if bracketed, literal == nil { return .refused("has a bracketed host that is not an IPv6 address") }
        if !allowPrivate {
            if let literal, let kind = Self.nonPublic(literal) {
                return .refused("points to a \(kind) address (allowed only with serve --webhooks-allow-private)")
            }
            if literal == nil, host == "localhost" || host.hasSuffix(".localhost") {
                return .refused("points to a loopback name (allowed only with serve --webhooks-allow-private)")
            }
        }
        if literal == nil,
            !host.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "." || $0 == "_" })
        {
            return .refused("has a host that is neither a name nor an IP address")
        }
        return .accepted(Target(url: url, scheme: scheme, host: host, literal: literal))
    }

    /// Whether every address a name resolved to may be reached; nil if so, else why not.
    public func check(resolved addresses: [[UInt8]]) -> String? {
        guard !allowPrivate else { return nil }
        for address in addresses {
            if let kind = Self.nonPublic(address) {
                return "the destination resolves to a \(kind) address (allowed only with serve --webhooks-allow-private)"
            }
        }
        return nil
    }

    /// What kind of non-public address this is (4 or 16 bytes), or nil for a public one. IPv6 follows IANA's
    /// special-purpose registry; forms that carry an IPv4 address (mapped, SIIT, NAT64, 6to4) are judged by it.
    public static func nonPublic(_ a: [UInt8]) -> String? {
        if a.count == 4 {
            switch (a[0], a[1]) {
            case (0, _): return "\"this network\""
            case (10, _), (172, 16...31), (192, 168): return "private"
            case (100, 64...127): return "shared (carrier-grade NAT)"
            case (127, _): return "loopback"
            case (169, 254): return "link-local"
            case (192, 0) where a[2] == 0 || a[2] == 2: return "reserved"
            case (192, 88) where a[2] == 99: return "reserved (6to4 relay)"
            case (198, 18...19): return "benchmarking"
            case (198, 51) where a[2] == 100, (203, 0) where a[2] == 113: return "documentation"
            case (224...239, _): return "multicast"
            case (240...255, _): return "reserved"
            default: return nil
            }
        }
        guard a.count == 16 else { return "malformed" }
        let w = (0..<8).map { UInt16(a[2 * $0]) << 8 | UInt16(a[2 * $0 + 1]) }
        func zero(_ r: Range<Int>) -> Bool { w[r].allSatisfy { $0 == 0 } }
        if zero(0..<8) { return "unspecified" }
        if zero(0..<7) && w[7] == 1 { return "loopback" }
        // ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (SIIT), 64:ff9b::a.b.c.d (NAT64) reach that IPv4 address.
        if zero(0..<5) && w[5] == 0xFFFF { return nonPublic(Array(a[12..<16])) }
        if zero(0..<4) && w[4] == 0xFFFF && w[5] == 0 { return nonPublic(Array(a[12..<16])) }
        if w[0] == 0x64 && w[1] == 0xFF9B && zero(2..<6) { return nonPublic(Array(a[12..<16])) }
        // 6to4 reaches the IPv4 address in its second and third groups.
        if w[0] == 0x2002 { return nonPublic(Array(a[2..<6])) }
        if zero(0..<6) { return "IPv4-compatible (deprecated)" }
        if w[0] == 0x64 && w[1] == 0xFF9B && w[2] == 1 { return "local-use IPv4/IPv6 translation" }
        if w[0] == 0x100 && zero(1..<4) { return "discard-only" }
        if w[0] == 0x2001 && w[1] == 0 { return "Teredo" }
        if w[0] == 0x2001 && w[1] == 0x0DB8 { return "documentation" }
        if w[0] == 0x2001 && w[1] < 0x200 { return "special-purpose (IETF protocol assignments)" }
        if w[0] == 0x3FFF && w[1] < 0x1000 { return "documentation" }
        if w[0] == 0x5F00 { return "segment-routing" }
        if a[0] & 0xFE == 0xFC { return "unique local" }
        if a[0] == 0xFE && a[1] & 0xC0 == 0x80 { return "link-local" }
        if a[0] == 0xFE && a[1] & 0xC0 == 0xC0 { return "site-local" }
        if a[0] == 0xFF { return "multicast" }
        // Only 2000::/3 is allocated for global unicast; the rest is reserved.
        if a[0] & 0xE0 != 0x20 { return "reserved" }
        return nil
    }

    /// Why a host that ends in a number is refused, unless it is an IPv4 address written as four decimal
    /// numbers without leading zeros. `inet_aton` (and so the resolver) also reads `127.1`, `0x7f000001`,
    /// `0177.0.0.1` and `0000000000000177.0.0.1` as loopback, while other parsers read some of them as
    /// other addresses or as names; no public destination needs those spellings, so they are refused under
    /// every policy rather than guessed at. A name cannot end in a number (a top-level domain is never numeric).
    public static func ambiguousNumericHost(_ host: String) -> String? {
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        guard let last = labels.last, isNumeric(last) else { return nil }
        let dotted =
            labels.count == 4
            && labels.allSatisfy { l in
                (1...3).contains(l.count) && l.allSatisfy { ("0"..."9").contains($0) } && (l == "0" || l.first != "0")
                    && Int(l)! <= 255
            }
        if dotted { return nil }
        let reading = ipv4Literal(host).map { " (the resolver reads it as \($0.map(String.init).joined(separator: ".")))" } ?? ""
        return "has a numeric host that is not an IPv4 address as four decimal numbers 0-255 without leading zeros\(reading)"
    }

    /// Decimal digits, or `0x` and hex digits: what `inet_aton` reads as a number.
    private static func isNumeric(_ label: Substring) -> Bool {
        let l = label.lowercased()
        if l.hasPrefix("0x") { return l.dropFirst(2).allSatisfy(\.isHexDigit) }
        return !l.isEmpty && l.allSatisfy { ("0"..."9").contains($0) }
    }

    /// An IPv4 literal in any form `inet_aton` (and so the resolver) accepts: one to four parts, each
    /// decimal, octal (leading 0, any number of them) or hex (0x): `127.1` and `0x7f000001` are loopback too.
    public static func ipv4Literal(_ host: String) -> [UInt8]? {
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(parts.count) else { return nil }
        var values: [UInt64] = []
        for part in parts {
            let p = part.lowercased()
            let value: UInt64?
            func significant(_ digits: Substring) -> Substring {
                let s = digits.drop { $0 == "0" }
                return s.isEmpty && !digits.isEmpty ? "0" : s
            }
            if p.hasPrefix("0x") {
                let digits = significant(p.dropFirst(2))
                value = p.count == 2 ? 0 : digits.count <= 12 ? UInt64(digits, radix: 16) : nil
            } else if p.hasPrefix("0") && p.count > 1 {
                let digits = significant(p.dropFirst())
                value = digits.count <= 16 ? UInt64(digits, radix: 8) : nil
            } else {
                value = p.count <= 12 ? UInt64(p, radix: 10) : nil
            }
            guard let value else { return nil }
            values.append(value)
        }
        let last = values.removeLast()
        guard values.allSatisfy({ $0 <= 255 }), last < (UInt64(1) << (8 * (4 - values.count))) else { return nil }
        var total = last
        for (i, v) in values.enumerated() { total |= v << (8 * (3 - i)) }
        return [UInt8(total >> 24 & 0xFF), UInt8(total >> 16 & 0xFF), UInt8(total >> 8 & 0xFF), UInt8(total & 0xFF)]
    }

    /// An IPv6 literal (RFC 4291 text, a trailing dotted IPv4 allowed, no zone), as 16 bytes.
    public static func ipv6Literal(_ host: String) -> [UInt8]? {
        guard host.contains(":"), !host.contains("%") else { return nil }
        var text = Substring(host)
        var tail: [UInt8] = []
        if let lastColon = text.lastIndex(of: ":"), text[text.index(after: lastColon)...].contains(".") {
            guard let v4 = ipv4Dotted(String(text[text.index(after: lastColon)...])) else { return nil }
            tail = v4
            text = text[...lastColon]
            if text.hasSuffix("::") == false { text = text.dropLast() }
        }
        let halves = text.components(separatedBy: "::")
        guard halves.count <= 2 else { return nil }
        func groups(_ s: String) -> [UInt16]? {
            if s.isEmpty { return [] }
            var out: [UInt16] = []
            for g in s.split(separator: ":", omittingEmptySubsequences: false) {
                guard (1...4).contains(g.count), let v = UInt16(g, radix: 16) else { return nil }
                out.append(v)
            }
            return out
        }
        guard let head = groups(halves[0]) else { return nil }
        let rest = halves.count == 2 ? groups(halves[1]) : []
        guard let rest else { return nil }
        let total = 8 - tail.count / 2
        var words: [UInt16]
        if halves.count == 2 {
            guard head.count + rest.count < total else { return nil }
            words = head + Array(repeating: 0, count: total - head.count - rest.count) + rest
        } else {
            guard head.count == total else { return nil }
            words = head
        }
        return words.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } + tail
    }

    private static func ipv4Dotted(_ s: String) -> [UInt8]? {
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var out: [UInt8] = []
        for p in parts {
            guard (1...3).contains(p.count), p.allSatisfy({ ("0"..."9").contains($0) }), p == "0" || p.first != "0", let v = UInt8(p)
            else { return nil }
            out.append(v)
        }
        return out
    }
}
