import AsyncHTTPClient

/// What the store clients (App Store Server API, Play Developer API, Stripe) may say about a request that
/// failed, and the checks that keep a hostile or broken remote side from making them leak or loop.
public enum OutboundHTTP {
    /// A failure's text for logs and stored errors. AsyncHTTPClient's description of a refused header lists
    /// the header's value, an `Authorization` header's bearer token included; its short description names
    /// the refusal only.
    public static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError { return "HTTPClientError: \(error.shortDescription)" }
        return "\(error)"
    }

    /// Whether AsyncHTTPClient refused the request's headers (nothing was sent).
    public static func isRefusedHeader(_ error: any Error) -> Bool {
        guard let error = error as? HTTPClientError else { return false }
        return error.shortDescription == HTTPClientError.invalidHeaderFieldValues([]).shortDescription
            || error.shortDescription == HTTPClientError.invalidHeaderFieldNames([]).shortDescription
    }

    /// Longest bearer token accepted from a token endpoint (Google's are about 200–2,000 bytes).
    public static let maxBearerTokenBytes = 4096

    /// Whether `token` can go in `Authorization: Bearer` as is: RFC 6750's `b64token` (letters, digits,
    /// `-._~+/`, then `=` padding), at most `maxBearerTokenBytes`. Anything else (a CR or LF above all)
    /// would make an invalid header, or a different request.
    public static func isBearerToken(_ token: String) -> Bool {
        let bytes = Array(token.utf8)
        guard !bytes.isEmpty, bytes.count <= maxBearerTokenBytes else { return false }
        let body = bytes.prefix { $0 != UInt8(ascii: "=") }
        guard !body.isEmpty, bytes.dropFirst(body.count).allSatisfy({ $0 == UInt8(ascii: "=") }) else { return false }
        return body.allSatisfy { b in
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"), UInt8(ascii: "/"): true
            default: false
            }
        }
    }
}
