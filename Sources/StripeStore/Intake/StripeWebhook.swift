import LedgerCore
import Logging
import Metrics
import StoreAdapters

/// A webhook request as Stripe sends it, read into a verified, mapped `StripeStore.Message`: the signature
/// (`Stripe-Signature`, the endpoint's rotating secrets), the JSON body, the event's shape and the pure mapping;
/// counted and logged here, so the route only decodes and calls the intake.
public enum StripeWebhook {
    /// Why a request is not a Stripe event the ledger can take: the route's answer.
    public enum Refusal: Error, Sendable {
        /// 400 `invalid_signature`.
        case signature(String)
        /// 400 `invalid_request`: the body is not a JSON object.
        case body(String)
        /// 422 `invalid_request`: the event is not what Stripe documents.
        case mapping(StoreMappingError)
    }

    /// `accounts`: the Connect accounts served (an event of another is recorded as ignored); `unknownVersion`
    /// hears an API version the mapper does not know.
    public static func read(
        header: String?, body bytes: [UInt8], verifier: StripeSignatureVerifier, now: Int64, accounts: [String],
        options: StripeMappingOptions, logger: Logger, unknownVersion: (String) -> Void
    ) throws(Refusal) -> StripeStore.Message {
        do throws(StripeSignatureVerifier.Failure) {
            try verifier.verify(header: header, body: bytes, now: now)
        } catch {
            throw .signature(error.description)
        }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes[...])
        } catch {
            throw .body("the body is not valid JSON: \(error)")
        }
        guard case .object(let payload) = value else { throw .body("the body must be a JSON object") }
        let event: StripeEvent
        let mapping: StripeMapping
        do throws(StoreMappingError) {
            event = try StripeEvent(payload: payload)
            mapping = try StripeEventMapper.interpret(event, options: options)
        } catch {
            throw .mapping(error)
        }
        logger.info(
            "stripe event",
            metadata: ["stripe.event_id": "\(event.id)", "stripe.type": "\(event.type)", "stripe.api_version": "\(event.apiVersion ?? "none")"])
        if !StripeAPIVersion.isKnown(event.apiVersion) {
            let version = event.apiVersion ?? "none"
            unknownVersion(version)
            Counter(label: "subledger_stripe_events_unknown_api_version_total", dimensions: [("api_version", String(version.prefix(40)))]).increment()
            logger.warning(
                "stripe event in an API version the ledger does not know: mapped as the nearest known shape; check docs/stripe.md",
                metadata: ["stripe.event_id": "\(event.id)", "stripe.api_version": "\(version)"])
        }
        var message = StripeStore.Message(event: event, payload: payload, raw: String(decoding: bytes, as: UTF8.self), mapping: mapping)
        if let account = event.account, !accounts.contains(account) {
            // A Connect event of an account the ledger does not serve: answered 200 so Stripe does not retry it.
            Counter(label: "subledger_stripe_events_other_account_total", dimensions: [("type", event.type)]).increment()
            logger.warning(
                "stripe event of another account ignored (serve --stripe-account accepts one)",
                metadata: ["stripe.event_id": "\(event.id)", "stripe.account": "\(account)"])
            message.otherAccount = true
        } else if mapping.ignored {
            Counter(label: "subledger_stripe_events_ignored_total", dimensions: [("type", event.type)]).increment()
        }
        return message
    }
}

extension StripeStore.Message {
    /// What the answer adds: why an event of another Connect account was ignored.
    public var answerExtra: [String: JSONValue] {
        guard otherAccount, let account = event.account else { return [:] }
        return ["reason": .string("the event is of Stripe account \(account), which this ledger does not serve (serve --stripe-account)")]
    }
}
