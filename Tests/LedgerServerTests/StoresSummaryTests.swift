import AppleStore
import GoogleStore
import LedgerServer
import StripeStore
import Testing

@Suite("Start-up line: which stores are on")
struct StoresSummaryTests {
    static func summary(_ c: ServerConfiguration) -> [String: String] {
        Dictionary(uniqueKeysWithValues: c.storesSummary.map { ($0.store, $0.summary) })
    }

    @Test("by default Apple is on and Google Play and Stripe are off, each naming the flags that turn it on")
    func defaults() {
        let s = Self.summary(ServerConfiguration(google: GooglePlayConfiguration(reconcileInterval: nil)))
        #expect(s.keys.sorted() == ["apple", "google", "stripe"])
        #expect(s["apple"]?.hasPrefix("on: notifications signed under Apple Root CA - G3") == true)
        #expect(s["google"]?.hasPrefix("off (--google-package-name") == true)
        #expect(s["stripe"] == "off (--stripe-webhook-secret)")
    }

    @Test("configured stores say what they do: Google's pushes without a service account wait, Stripe's secrets are counted, never shown")
    func configured() {
        let s = Self.summary(
            ServerConfiguration(
                apple: AppleConfiguration(bundleID: "com.example.app"),
                google: GooglePlayConfiguration(
                    packageNames: ["com.example.app"], pubsubAudience: "aud", pubsubServiceAccount: "push@example.iam.gserviceaccount.com",
                    reconcileInterval: nil),
                stripe: StripeConfiguration(webhookSecrets: ["whsec_one", "whsec_two"])))
        #expect(s["apple"]?.contains("bundle com.example.app") == true)
        #expect(s["google"]?.hasPrefix("on: packages com.example.app; pushes verified for push@example.iam.gserviceaccount.com") == true)
        #expect(s["google"]?.contains("no service account") == true)
        #expect(s["stripe"] == "on: webhooks (2 secrets)")
        #expect(!s.values.contains { $0.contains("whsec_") })
    }
}
