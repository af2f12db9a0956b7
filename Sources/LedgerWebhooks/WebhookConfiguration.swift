import LedgerCore

/// How `subledger serve` delivers webhooks (docs/webhooks.md).
public struct WebhookConfiguration: Sendable {
    /// Which URLs may be registered and reached.
    public var policy: WebhookDestinationPolicy
    /// Requests in flight at once across every endpoint of this instance.
    public var concurrency: Int
    public var connectTimeout: Duration
    /// The longest a delivery waits for the whole response.
    public var responseTimeout: Duration
    public var retrySchedule: WebhookRetrySchedule
    /// How long a lease lasts without renewal: how soon another instance takes over a killed one's endpoints.
    public var leaseDuration: Duration
    /// How often leases are renewed and free endpoints taken.
    public var leaseInterval: Duration
    /// How often the feed's last position is read to wake idle endpoints.
    public var pollInterval: Duration
    /// Deliveries log rows older than this are deleted.
    public var deliveriesRetention: Duration

    public init(
        policy: WebhookDestinationPolicy = WebhookDestinationPolicy(), concurrency: Int = 16,
        connectTimeout: Duration = .seconds(5), responseTimeout: Duration = .seconds(10),
        retrySchedule: WebhookRetrySchedule = .standard, leaseDuration: Duration = .seconds(15),
        leaseInterval: Duration = .seconds(2), pollInterval: Duration = .milliseconds(200),
        deliveriesRetention: Duration = .seconds(7 * 86_400)
    ) {
        self.policy = policy
        self.concurrency = concurrency
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
        self.retrySchedule = retrySchedule
        self.leaseDuration = leaseDuration
        self.leaseInterval = leaseInterval
        self.pollInterval = pollInterval
        self.deliveriesRetention = deliveriesRetention
    }
}
