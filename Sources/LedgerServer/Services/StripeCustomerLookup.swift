import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle
import StoreAdapters

/// Background look-up of Stripe customers whose events wait in the inbox (`pending`): a customer whose
/// `metadata.subscriber_id` names a subscriber is linked to it and its events are applied. Runs only with
/// `serve --stripe-api-key`; while Stripe is unreachable the events simply stay pending and the next pass
/// asks again (docs/stripe.md).
struct StripeCustomerLookup: Service {
    let client: StripeAPIClient
    let intake: EventIntake
    let interval: Duration
    let logger: Logger
    /// Customers asked per pass.
    static let batch = 100

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    _ = try await resolvePending()
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("stripe customer look-up pass failed", metadata: ["error.message": "\(error)"])
                }
                try await Task.sleep(for: interval)
            }
        }
    }

    /// One pass over the customers pending events wait for; returns how many events were applied.
    func resolvePending() async throws -> Int {
        var applied = 0
        for account in try await intake.inbox.pendingAccounts(store: StripeStoreRoutes.store, limit: Self.batch) where account.hasPrefix("cus_") {
            let subscriber: String?
            do {
                subscriber = try await client.customerSubscriberID(account)
            } catch {
                logger.warning("stripe customer look-up failed", metadata: ["stripe.customer": "\(account)", "error.message": "\(error)"])
                if case .unreachable = error { return applied }
                continue
            }
            guard let subscriber, Identifiers.isValidSubscriberID(subscriber) else { continue }
            do {
                let n = try await intake.link(
                    store: StripeStoreRoutes.store, accountIDs: [account], to: subscriber, by: "stripe_api", logger: logger,
                    drafts: StripeStoreRoutes.remap)
                applied += n
                logger.info("stripe customer linked by API look-up", metadata: ["stripe.customer": "\(account)", "stripe.applied": "\(n)"])
            } catch let conflict as StoreLinks.Conflict {
                logger.warning("stripe customer already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
            }
        }
        return applied
    }
}
