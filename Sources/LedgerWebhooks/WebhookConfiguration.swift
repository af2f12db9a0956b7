import LedgerCore

/// How `subledger serve` delivers webhooks (docs/webhooks.md).
public struct WebhookConfiguration: Sendable {
    /// Which URLs may be registered and reached.
    public var policy: WebhookDestinationPolicy
    /// Requests in flight at once across every endpoint of this instance.
    public var concurrency: Int
    /// Requests in flight at once to one endpoint, each of a different subscriber: one at a time caps an
    /// endpoint at its receiver's round trip, below a busy feed's append rate.
    public var endpointConcurrency: Int
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
    /// Database connections the delivery service may hold at once, all endpoints together: what it may take
    /// from the pool it shares with the API.
    public var databaseConnections: Int
    /// A request still waiting for its answer after this long gives its share of `concurrency` back: a slow
    /// receiver keeps one request in flight, but never the slots that other endpoints' requests need.
    public var slowRequestAfter: Duration

    public init(
        policy: WebhookDestinationPolicy = WebhookDestinationPolicy(), concurrency: Int = 16, endpointConcurrency: Int = 8,
        connectTimeout: Duration = .seconds(5), responseTimeout: Duration = .seconds(10),
        retrySchedule: WebhookRetrySchedule = .standard, leaseDuration: Duration = .seconds(15),
        leaseInterval: Duration = .seconds(2), pollInterval: Duration = .milliseconds(200),
        deliveriesRetention: Duration = .seconds(7 * 86_400), databaseConnections: Int = 2,
        slowRequestAfter: Duration = .milliseconds(500)
    ) {
        self.policy = policy
        self.concurrency = concurrency
        self.endpointConcurrency = max(1, endpointConcurrency)
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
        self.retrySchedule = retrySchedule
        self.leaseDuration = leaseDuration
        self.leaseInterval = leaseInterval
        self.pollInterval = pollInterval
        self.deliveriesRetention = deliveriesRetention
        self.databaseConnections = max(1, databaseConnections)
        self.slowRequestAfter = slowRequestAfter
    }
}
