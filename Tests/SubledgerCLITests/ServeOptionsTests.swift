import ArgumentParser
import Foundation
import LedgerServer
import Testing

@testable import subledger

@Suite("serve's options")
struct ServeOptionsTests {
    @Test("durations: a whole number with a unit, or bare seconds; anything else is refused while parsing")
    func durations() {
        let cases: [(String, Duration?)] = [
            ("500ms", .milliseconds(500)), ("10s", .seconds(10)), ("5m", .seconds(300)), ("2h", .seconds(7200)),
            ("3d", .seconds(259_200)), ("0", .zero), ("90", .seconds(90)), ("", nil), ("5x", nil), ("-1s", nil), ("1.5h", nil),
            ("s", nil), ("99999999d", nil),
        ]
        for (text, expected) in cases {
            #expect(DurationArgument(argument: text)?.duration == expected, "\(text)")
        }
    }

    @Test("a flag wins over its variable; a blank variable is absent; a variable that does not parse names itself")
    func environmentFallback() throws {
        let env = EnvironmentFallback(["A": "from-env", "BLANK": "  ", "LIST": "x, y,,z", "ON": "1", "D": "2m", "BAD": "2x"])
        #expect(env.string("flag", "A") == "flag")
        #expect(env.string(nil, "A") == "from-env")
        #expect(env.string(nil, "BLANK") == nil)
        #expect(env.list([], "LIST") == ["x", "y", "z"])
        #expect(env.list(["f"], "LIST") == ["f"])
        #expect(env.flag(false, "ON") && !env.flag(false, "A") && env.flag(true, "NONE"))
        #expect(try env.value(nil as DurationArgument?, "D", option: "d")?.duration == .seconds(120))
        #expect(try env.value(nil as DurationArgument?, "NONE", option: "d") == nil)
        #expect(throws: ValidationError.self) { try env.value(nil as DurationArgument?, "BAD", option: "d") }
    }

    @Test("--reconcile-interval: off by default, at least 60s, and at most 29 days while Google Play is configured")
    func reconcileInterval() throws {
        let base = ["--database-url", "postgres://u@h/d"]
        let six = try Serve.parse(base + ["--reconcile-interval", "6h"])
        #expect(try six.reconcile.interval(googleConfigured: true) == .seconds(6 * 3600))
        let long = try Serve.parse(base + ["--reconcile-interval", "40d"])
        #expect(try long.reconcile.interval(googleConfigured: false) == .seconds(40 * 86_400))
        #expect(throws: ValidationError.self) { try long.reconcile.interval(googleConfigured: true) }
        do {
            _ = try long.reconcile.interval(googleConfigured: true)
        } catch {
            #expect("\(error)".contains("30 days"), "the refusal says why: \(error)")
        }
        #expect(throws: (any Error).self) { try Serve.parse(base + ["--reconcile-interval", "30s"]) }
    }

    @Test("every documented flag parses into its group, and ranges are checked in validate()")
    func flags() throws {
        let serve = try Serve.parse([
            "--database-url", "postgres://u@h/d", "--statement-timeout", "5s", "--replica-wait", "100ms",
            "--apple-bundle-id", "com.example", "--apple-max-age-days", "30", "--apple-backfill-interval", "1h",
            "--google-package-name", "p", "--stripe-webhook-secret", "whsec_a", "--stripe-webhook-secret", "whsec_b",
            "--stripe-account", "acct_1", "--stripe-grace-max", "7d", "--stripe-signature-tolerance", "60",
            "--webhooks-allow-http", "--webhook-timeout", "2s", "--webhook-give-up-after", "1d", "--webhook-lease-seconds", "10",
            "--webhook-endpoint-concurrency", "4", "--reporting-currencies", "GBP, EUR",
        ])
        #expect(try serve.reportingCurrencyList() == ["GBP", "EUR"])
        #expect(serve.statementTimeout?.duration == .seconds(5))
        #expect(serve.replicaWait.duration == .milliseconds(100))
        #expect(serve.apple.bundleID == "com.example" && serve.apple.backfillInterval?.duration == .seconds(3600))
        let stripe = try serve.stripe.configuration()
        #expect(stripe.webhookSecrets == ["whsec_a", "whsec_b"] && stripe.signatureTolerance == 60)
        #expect(stripe.settings.accounts == ["acct_1"] && stripe.settings.mapping.graceMaxSeconds == 7 * 86_400)
        let webhooks = try serve.webhooks.configuration()
        #expect(webhooks.responseTimeout == .seconds(2) && webhooks.policy.allowHTTP && webhooks.endpointConcurrency == 4)

        for bad in [
            ["--statement-timeout", "2d"], ["--replica-wait", "5x"], ["--apple-backfill-interval", "30s"], ["--stripe-grace-max", "10m"],
            ["--webhook-timeout", "2m"], ["--webhook-lease-seconds", "5"], ["--webhook-endpoint-concurrency", "0"], ["--port", "70000"],
            ["--reporting-currencies", "EUR,euro"], ["--reporting-currencies", "eur"],
        ] {
            #expect(throws: (any Error).self, "\(bad)") { try Serve.parse(["--database-url", "postgres://u@h/d"] + bad) }
        }
    }

    @Test("--reporting-currencies: none keeps none; without it the database's list stands")
    func reportingCurrencies() throws {
        #expect(try Serve.parse(["--database-url", "postgres://u@h/d", "--reporting-currencies", "none"]).reportingCurrencyList() == [])
        // At most 16 (docs/limits.md): the 16th is kept, a 17th refused naming the option.
        let codes = ["EUR", "USD", "GBP", "JPY", "CHF", "AUD", "CAD", "BRL", "INR", "KRW", "SEK", "NOK", "DKK", "PLN", "CZK", "HUF", "MXN"]
        let sixteen = try Serve.parse(["--database-url", "postgres://u@h/d", "--reporting-currencies", codes.prefix(16).joined(separator: ",")])
        #expect(try sixteen.reportingCurrencyList()?.count == 16)
        #expect {
            try Serve.parse(["--database-url", "postgres://u@h/d", "--reporting-currencies", codes.joined(separator: ",")])
        } throws: { "\($0)".contains("--reporting-currencies") }
        if ProcessInfo.processInfo.environment["SUBLEDGER_REPORTING_CURRENCIES"] == nil {
            #expect(try Serve.parse(["--database-url", "postgres://u@h/d"]).reportingCurrencyList() == nil)
        }
    }

    @Test("apple test-notification is in the apple group; the old top-level spelling still parses")
    func testNotificationSpellings() throws {
        let arguments = [
            "--ca-dir", "/tmp/x", "--type", "TEST", "--transaction-id", "1", "--product-id", "p", "--purchase-date", "2026-01-01T00:00:00Z",
        ]
        #expect(try Subledger.parseAsRoot(["apple", "test-notification"] + arguments) is AppleTestNotification)
        #expect(try Subledger.parseAsRoot(["apple-test-notification"] + arguments) is DeprecatedAppleTestNotification)
    }
}
