import Foundation
import LedgerCore
import Testing

@Suite("Webhook signing (Standard Webhooks)")
struct WebhookSigningTests {
    static let secret = WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")!
    static let body = Array(#"{"test": 2432232314}"#.utf8)

    /// The specification's example, recomputed by the `standardwebhooks` Python package (1.1.0) and by
    /// Python's own hmac: `v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=`.
    @Test("the specification's example vector")
    func vector() {
        let header = WebhookSignature.header(
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Self.body, secrets: [Self.secret])
        #expect(header == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test("during a rotation both secrets sign, new first, space-separated; either verifies")
    func rotation() {
        var g = SystemRandomNumberGenerator()
        let new = WebhookSecret.generate(using: &g)
        let header = WebhookSignature.header(id: "msg_1", timestamp: 1_700_000_000, body: Self.body, secrets: [new, Self.secret])
        let parts = header.split(separator: " ")
        #expect(parts.count == 2 && parts.allSatisfy { $0.hasPrefix("v1,") })
        #expect(WebhookSignature.verify(header: header, id: "msg_1", timestamp: 1_700_000_000, body: Self.body, secret: new))
        #expect(WebhookSignature.verify(header: header, id: "msg_1", timestamp: 1_700_000_000, body: Self.body, secret: Self.secret))
        #expect(!WebhookSignature.verify(header: header, id: "msg_2", timestamp: 1_700_000_000, body: Self.body, secret: new))
        #expect(!WebhookSignature.verify(header: header, id: "msg_1", timestamp: 1_700_000_001, body: Self.body, secret: new))
        #expect(!WebhookSignature.verify(header: header, id: "msg_1", timestamp: 1_700_000_000, body: Self.body + [0x20], secret: new))
    }

    @Test("secrets are whsec_ and 32 random bytes in base64, and parse back")
    func secretFormat() {
        var g = SystemRandomNumberGenerator()
        let s = WebhookSecret.generate(using: &g)
        #expect(s.text.hasPrefix("whsec_"))
        #expect(s.key.count == 32)
        #expect(WebhookSecret(s.text) == s)
        #expect(WebhookSecret("whsec_") == nil)
        #expect(WebhookSecret("whsec_not base64!") == nil)
        #expect(WebhookSecret.generate(using: &g) != s)
    }

    @Test("webhook ids are stable per endpoint and event, and differ between endpoints")
    func ids() {
        let e1 = UUID()
        let e2 = UUID()
        let event = UUID()
        let a = WebhookMessage.id(endpointID: e1, eventID: event)
        #expect(a == WebhookMessage.id(endpointID: e1, eventID: event))
        #expect(a != WebhookMessage.id(endpointID: e2, eventID: event))
        #expect(a.hasPrefix("msg_") && a.count == 36)
    }

    @Test("retry delays follow the schedule, the last step repeating, within the jitter")
    func schedule() {
        let s = WebhookRetrySchedule.standard
        #expect(s.delay(afterFailures: 1, random: 0.5) == .seconds(1))
        #expect(s.delay(afterFailures: 3, random: 0.5) == .seconds(5))
        #expect(s.delay(afterFailures: 6, random: 0.5) == .seconds(60))
        #expect(s.delay(afterFailures: 9, random: 0.5) == .seconds(7200))
        #expect(s.delay(afterFailures: 40, random: 0.5) == .seconds(36_000))
        #expect(s.delay(afterFailures: 3, random: 0) == .seconds(4))
        #expect(s.delay(afterFailures: 3, random: 0.999_999) <= .seconds(6))
        #expect(WebhookRetrySchedule.durations(WebhookRetrySchedule.standardText) == s.delays)
        #expect(
            WebhookRetrySchedule.durations("500ms,5s,2m,1h,3d") == [
                .milliseconds(500), .seconds(5), .seconds(120), .seconds(3600), .seconds(259_200),
            ])
        #expect(WebhookRetrySchedule.durations("5x") == nil)
        #expect(WebhookRetrySchedule.durations("0s") == nil)
    }
}

@Suite("Webhook destinations: https only, no private addresses by default")
struct WebhookDestinationTests {
    let strict = WebhookDestinationPolicy()
    let lax = WebhookDestinationPolicy(allowHTTP: true, allowPrivate: true)

    @Test("public https URLs are accepted; names are left to the delivery-time check")
    func accepted() {
        for url in ["https://example.com/hooks", "https://hooks.example.com:8443/a?b=c", "https://93.184.216.34/x", "https://[2606:4700::1]/"] {
            #expect(strict.problem(url) == nil, "\(url)")
        }
    }

    @Test("http, other schemes, credentials, fragments and junk are refused")
    func refusedForms() {
        for url in [
            "http://example.com/", "ftp://example.com/", "example.com", "https://", "https://user:pw@example.com/",
            "https://example.com/#x", "https://exa mple.com/", "https://example.com/\u{7F}", "", "javascript:alert(1)",
        ] {
            #expect(strict.problem(url) != nil, "\(url)")
        }
        #expect(WebhookDestinationPolicy(allowHTTP: true).problem("http://example.com/") == nil)
        #expect(strict.problem("https://example.com/" + String(repeating: "a", count: 3000)) != nil)
    }

    @Test("loopback, private, link-local and look-alike literals are refused unless allowed")
    func refusedAddresses() {
        let urls = [
            "https://127.0.0.1/", "https://10.1.2.3/", "https://172.16.0.1/", "https://192.168.1.1/", "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/", "https://0.0.0.0/", "https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://[fd00::1]/",
            "https://[fe80::1]/", "https://localhost/", "https://api.localhost/", "https://LOCALHOST./", "https://[::]/",
        ]
        for url in urls {
            #expect(strict.problem(url) != nil, "\(url)")
            #expect(lax.problem(url) == nil, "\(url)")
        }
    }

    @Test(
        "IPv6 forms that carry a non-public IPv4 address, and IANA's special-purpose IPv6 blocks, are refused unless allowed",
        arguments: [
            "https://[::ffff:0:127.0.0.1]/", "https://[::ffff:0:7f00:1]/", "https://[::ffff:127.0.0.1]/", "https://[::ffff:a00:1]/",
            "https://[::ffff:169.254.169.254]/", "https://[::127.0.0.1]/", "https://[::93.184.216.34]/", "https://[64:ff9b::127.0.0.1]/",
            "https://[64:ff9b::a9fe:a9fe]/", "https://[64:ff9b:1::7f00:1]/", "https://[64:ff9b:1::5db8:d822]/",
            "https://[2002:7f00:1::1]/", "https://[2002:a00:1::]/", "https://[2002:c0a8:101::1]/", "https://[100::1]/",
            "https://[100::ffff:ffff:ffff:ffff]/", "https://[2001::1]/", "https://[2001:0:5db8:d822::1]/", "https://[2001:2::1]/",
            "https://[2001:10::1]/", "https://[2001:db8::1]/", "https://[3fff::1]/", "https://[5f00::1]/", "https://[fec0::1]/",
            "https://[ff02::1]/", "https://[4000::1]/", "https://[::2]/",
        ])
    func refusedIPv6(url: String) {
        #expect(strict.problem(url) != nil, "\(url)")
        #expect(lax.problem(url) == nil, "\(url)")
    }

    @Test("IPv6 forms that carry a public IPv4 address, and global unicast, are accepted")
    func acceptedIPv6() {
        for url in [
            "https://[::ffff:93.184.216.34]/", "https://[::ffff:0:93.184.216.34]/", "https://[64:ff9b::93.184.216.34]/",
            "https://[2002:5db8:d822::1]/", "https://[2001:4860:4860::8888]/", "https://[2a00:1450::1]/",
        ] {
            #expect(strict.problem(url) == nil, "\(url)")
        }
    }

    @Test(
        "numeric hosts other than four decimal numbers are refused under every policy",
        arguments: [
            "https://127.1/", "https://2130706433/", "https://0x7f000001/", "https://0177.0.0.1/", "https://0000000000000177.0.0.1/",
            "https://127.000.000.001/", "https://0x7f.0.0.1/", "https://127.0.1/", "https://1.2.3.4.5/", "https://93.184.216.034/",
            "https://1559815202/", "https://0x5db8d822/", "https://093.184.216.34/", "https://127.0.0.1.1/", "https://127..0.1/",
            "https://example.123/", "https://example.0x1/", "https://0x/", "https://00000000000000000000000000000000000000000177.1/",
        ])
    func ambiguousNumericHosts(url: String) {
        #expect(strict.problem(url) != nil, "\(url)")
        #expect(lax.problem(url) != nil, "\(url)")
    }

    @Test("the message says what the resolver would read; names with numeric labels are still names")
    func numericMessages() {
        #expect(strict.problem("https://0000000000000177.0.0.1/")?.contains("reads it as 127.0.0.1") == true)
        #expect(strict.problem("https://0x7f000001/")?.contains("reads it as 127.0.0.1") == true)
        for url in ["https://123.example.com/", "https://0x7f.example.com/", "https://93.184.216.34./"] {
            #expect(strict.problem(url) == nil, "\(url)")
        }
    }

    @Test("bracketed non-IPv6 hosts, percent-encoded hosts and leading zeros in an embedded IPv4 are refused")
    func oddHosts() {
        for url in [
            "https://[example.com]/", "https://[127.0.0.1]/", "https://%31%32%37.0.0.1/", "https://exa%2Dmple.com/",
            "https://[fe80::1%25eth0]/", "https://[::ffff:0177.0.0.1]/", "https://[::ffff:127.0.0.01]/",
        ] {
            #expect(strict.problem(url) != nil, "\(url)")
            #expect(lax.problem(url) != nil, "\(url)")
        }
    }

    @Test("resolved addresses are checked the same way")
    func resolved() {
        #expect(strict.check(resolved: [[93, 184, 216, 34]]) == nil)
        #expect(strict.check(resolved: [[93, 184, 216, 34], [127, 0, 0, 1]]) != nil)
        #expect(lax.check(resolved: [[127, 0, 0, 1]]) == nil)
        #expect(WebhookDestinationPolicy.ipv6Literal("::ffff:10.0.0.1").flatMap(WebhookDestinationPolicy.nonPublic) == "private")
        #expect(WebhookDestinationPolicy.ipv6Literal("64:ff9b::7f00:1").flatMap(WebhookDestinationPolicy.nonPublic) == "loopback")
        #expect(WebhookDestinationPolicy.ipv6Literal("2001:db8::1:2:3:4:5:6:7") == nil)
        #expect(WebhookDestinationPolicy.ipv6Literal("1:2:3:4:5:6:7:8") != nil)
        #expect(WebhookDestinationPolicy.ipv4Literal("256.1.1.1") == nil)
        #expect(WebhookDestinationPolicy.ipv4Literal("1.2.3.4.5") == nil)
        #expect(WebhookDestinationPolicy.ipv4Literal("example") == nil)
        #expect(WebhookDestinationPolicy.ipv4Literal("0000000000000177.0.0.1") == [127, 0, 0, 1])
        #expect(WebhookDestinationPolicy.ipv4Literal("0x00000000007f.1") == [127, 0, 0, 1])
        #expect(strict.check(resolved: [WebhookDestinationPolicy.ipv6Literal("2002:a00:1::1")!]) != nil)
        #expect(strict.check(resolved: [WebhookDestinationPolicy.ipv6Literal("64:ff9b:1::5db8:d822")!]) != nil)
        #expect(strict.check(resolved: [WebhookDestinationPolicy.ipv6Literal("2606:4700::1")!]) == nil)
    }
}
