import GooglePlayClient

extension ServerConfiguration {
    /// What each store's routes will do with this configuration, one line per store, for the start-up line:
    /// a newcomer who forgot a flag reads it there rather than from a 404 `not_configured` later.
    public var storesSummary: [(store: String, summary: String)] {
        var apple = ["on: notifications signed under \(appleRootsDER.isEmpty ? "Apple Root CA - G3" : "\(appleRootsDER.count) configured root(s)")"]
        if let appleBundleID { apple.append("bundle \(appleBundleID)") }
        if let appleBackfill { apple.append("history backfill every \(appleBackfill.interval)") }
        if appleConsumption != nil { apple.append("consumption requests answered") }

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
        if stripeWebhookSecrets.isEmpty {
            stripe = "off (--stripe-webhook-secret)"
        } else {
            let secrets = stripeWebhookSecrets.count == 1 ? "1 secret" : "\(stripeWebhookSecrets.count) secrets"
            stripe = "on: webhooks (\(secrets))" + (stripeAPIKey == nil ? "" : "; customers looked up at \(stripeAPIBaseURL)")
        }
        return [("apple", apple.joined(separator: "; ")), ("google", play), ("stripe", stripe)]
    }
}
