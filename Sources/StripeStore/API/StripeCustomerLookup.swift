import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle
import StoreAdapters

/// Background look-up of Stripe customers whose events wait in the inbox (`pending`): a customer whose
/// `metadata.subscriber_id` names a subscriber is linked to it and its events are applied. Runs only with
/// `serve --stripe-api-key`; while Stripe is unreachable the events simply stay pending and the next pass
/// asks again (docs/stripe.md).
public struct StripeCustomerLookup: Service {
    let client: StripeAPIClient
    let intake: EventIntake
    let interval: Duration
    let options: StripeMappingOptions
    let logger: Logger
    /// Customers asked per pass.
    static let batch = 100
    /// A customer Stripe knows no subscriber for is asked again after this, doubling up to `longestWait`.
    static let firstWait: Duration = .seconds(60)
    static let longestWait: Duration = .seconds(6 * 3600)

    /// When each customer without a subscriber may be asked again, and the wait after that.
    struct Backoff {
        var until: [String: (ContinuousClock.Instant, Duration)] = [:]

        func isWaiting(_ account: String, now: ContinuousClock.Instant) -> Bool { until[account].map { now < $0.0 } ?? false }

        mutating func unknown(_ account: String, now: ContinuousClock.Instant) {
            let wait = until[account].map { min($0.1 * 2, StripeCustomerLookup.longestWait) } ?? StripeCustomerLookup.firstWait
            until[account] = (now + wait, wait)
        }

        /// Forgets customers no longer pending, so the table stays as small as the inbox's pending set.
        mutating func keep(only accounts: Set<String>) { until = until.filter { accounts.contains($0.key) } }
    }

    public init(client: StripeAPIClient, intake: EventIntake, interval: Duration, options: StripeMappingOptions, logger: Logger) {
        (self.client, self.intake, self.interval, self.options, self.logger) = (client, intake, interval, options, logger)
    }

    public func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var backoff = Backoff()
            while !Task.isCancelled {
                do {
                    _ = try await resolvePending(&backoff)
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("stripe customer look-up pass failed", metadata: ["error.message": "\(error)"])
                }
                try await Task.sleep(for: interval)
            }
        }
    }

    /// One pass over the customers pending events wait for (those not backing off, at most `batch`);
    /// returns how many events were applied.
    func resolvePending(_ backoff: inout Backoff) async throws -> Int {
        let pending = try await intake.inbox.pendingAccounts(store: StripeStore.store, limit: 10 * Self.batch).filter { $0.hasPrefix("cus_") }
        backoff.keep(only: Set(pending))
        let now = ContinuousClock.now
        let due = pending.filter { !backoff.isWaiting($0, now: now) }.prefix(Self.batch)
        var applied = 0
        for account in due {
            let subscriber: String?
            do {
                subscriber = try await client.customerSubscriberID(account)
            } catch {
                logger.warning("stripe customer look-up failed", metadata: ["stripe.customer": "\(account)", "error.message": "\(error)"])
                if case .unreachable = error { return applied }
                continue
            }
            guard let subscriber, Identifiers.isValidSubscriberID(subscriber) else {
                backoff.unknown(account, now: now)
                continue
            }
            do {
                let n = try await intake.stores.link(
                    StripeStore(options: options), accounts: [account], to: subscriber, by: "stripe_api", logger: logger)
                applied += n
                logger.info("stripe customer linked by API look-up", metadata: ["stripe.customer": "\(account)", "stripe.applied": "\(n)"])
            } catch let conflict as StoreLinks.Conflict {
                backoff.unknown(account, now: now)
                logger.warning("stripe customer already linked to another subscriber", metadata: ["error.message": "\(conflict)"])
            }
        }
        return applied
    }
}
