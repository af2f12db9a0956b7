import GoogleStore

extension ServerConfiguration {
    /// What each store's routes will do with this configuration, one line per store, for the start-up line:
    /// a newcomer who forgot a flag reads it there rather than from a 404 `not_configured` later.
    public var storesSummary: [(store: String, summary: String)] {
        let roots = self.apple.rootsDER
        var apple = ["on: notifications signed under \(roots.isEmpty ? "Apple Root CA - G3" : "\(roots.count) configured root(s)")"]
        if let bundleID = self.apple.bundleID { apple.append("bundle \(bundleID)") }
        if let backfill = self.apple.backfill { apple.append("history backfill every \(backfill.interval)") }
        if self.apple.consumption != nil { apple.append("consumption requests answered") }

        let play: String
        if google.acceptsPushes || google.serviceAccount != nil {
            var parts = ["on: packages \(google.packageNames.sorted().joined(separator: ", "))"]
            parts.append(
                google.acceptsPushes
                    ? "pushes verified for \(google.pubsubServiceAccount ?? "")"
                    : "pushes refused (needs --google-package-name, --google-pubsub-audience, --google-pubsub-service-account)")
            parts.append(
                google.serviceAccount.map { "Play Developer API at \(google.apiBaseURL) as \($0.clientEmail)" }
                    ?? "no service account: pushes wait as received (--google-service-account-file)")
            play = parts.joined(separator: "; ")
        } else {
            play = "off (--google-package-name, --google-pubsub-audience, --google-pubsub-service-account, --google-service-account-file)"
        }

        let stripe: String
        let secrets = self.stripe.webhookSecrets
        if secrets.isEmpty {
            stripe = "off (--stripe-webhook-secret)"
        } else {
            let count = secrets.count == 1 ? "1 secret" : "\(secrets.count) secrets"
            stripe = "on: webhooks (\(count))" + (self.stripe.apiKey == nil ? "" : "; customers looked up at \(self.stripe.apiBaseURL)")
        }
        return [("apple", apple.joined(separator: "; ")), ("google", play), ("stripe", stripe)]
    }
}
