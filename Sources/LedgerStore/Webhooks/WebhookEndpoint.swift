import Foundation
import LedgerCore

/// A webhook endpoint as admins see it: never its secrets.
public struct WebhookEndpoint: Sendable, Hashable {
    public enum Status: String, Sendable, Hashable, CaseIterable {
        /// Delivering (or waiting to retry).
        case active
        /// Retries exhausted: paused with its cursor kept until an admin enables it again.
        case failing
        /// Disabled by an admin, or by the endpoint answering 410 Gone.
        case disabled
    }

    public var id: UUID
    public var url: String
    public var description: String?
    /// Nil: every event type.
    public var eventTypes: [String]?
    /// Nil: every entitlement.
    public var entitlements: [String]?
    public var status: Status
    public var statusReason: String?
    /// The last position this endpoint is done with (delivered, or passed over by its filters).
    public var deliveredThrough: Int64
    /// The most failed attempts of any message held for a retry (0 when none is held).
    public var failedAttempts: Int
    /// The first failure of the oldest failing held message.
    public var failingSince: Timestamp?
    /// The next retry of a held message.
    public var nextAttemptAt: Timestamp?
    public var lastError: String?
    /// While the previous secret still signs beside the current one: until when.
    public var previousSecretUntil: Timestamp?
    public var createdAt: Timestamp
    public var updatedAt: Timestamp
    /// Positions of the feed after the cursor.
    public var lagPositions: Int64
    /// How long ago the oldest event not yet delivered (held, or after the cursor) was recorded (0 when caught up).
    public var lagSeconds: Double
    /// Messages waiting in `webhook_held`: failed ones and their subscribers' later ones queued behind them.
    public var heldMessages: Int = 0

    public var filter: WebhookFilter {
        WebhookFilter(
            eventTypes: eventTypes.map { Set($0.compactMap(EventType.init(rawValue:))) },
            entitlements: entitlements.map(Set.init))
    }
}

/// What the delivery service needs of an endpoint it holds the lease of, secrets included.
public struct WebhookDeliveryState: Sendable {
    public var endpoint: WebhookEndpoint
    /// The current secret first, then the previous one while its rotation overlap lasts.
    public var secrets: [WebhookSecret]
    public var generation: Int64
    /// Milliseconds until the next held message is due (0: now; nil: none has a time), by PostgreSQL's clock.
    public var nextHeldInMilliseconds: Int64?
}

/// A message waiting for a retry, with the body it was first sent with.
public struct HeldMessage: Sendable, Equatable {
    public var position: Int64
    public var subscriberID: String
    public var eventID: UUID
    public var body: [UInt8]
    public var failedAttempts: Int
}

/// One delivery attempt, as the deliveries log keeps it.
public struct WebhookDelivery: Sendable, Hashable {
    public enum Outcome: String, Sendable, Hashable {
        case delivered, failed, gone
    }

    public var id: Int64
    public var position: Int64
    public var eventID: UUID
    public var webhookID: String
    public var attempt: Int
    public var outcome: Outcome
    public var httpStatus: Int?
    public var latencyMilliseconds: Int
    public var error: String?
    public var nextRetryAt: Timestamp?
    public var attemptedAt: Timestamp
}

/// What an attempt came to, for `WebhookStore.record`.
public struct WebhookAttempt: Sendable {
    public var position: Int64
    public var eventID: UUID
    public var webhookID: String
    public var outcome: WebhookDelivery.Outcome
    public var httpStatus: Int?
    public var latencyMilliseconds: Int
    public var error: String?

    public init(
        position: Int64, eventID: UUID, webhookID: String, outcome: WebhookDelivery.Outcome, httpStatus: Int?,
        latencyMilliseconds: Int, error: String?
    ) {
        self.position = position
        self.eventID = eventID
        self.webhookID = webhookID
        self.outcome = outcome
        self.httpStatus = httpStatus
        self.latencyMilliseconds = latencyMilliseconds
        self.error = error
    }
}

/// What changes in a PATCH; nil members stay as they are. An empty filter list removes the filter.
public struct WebhookEndpointPatch: Sendable {
    public var url: String?
    public var description: String?
    public var eventTypes: [String]?
    public var entitlements: [String]?
    public var enabled: Bool?

    public init(url: String? = nil, description: String? = nil, eventTypes: [String]? = nil, entitlements: [String]? = nil, enabled: Bool? = nil) {
        self.url = url
        self.description = description
        self.eventTypes = eventTypes
        self.entitlements = entitlements
        self.enabled = enabled
    }
}

/// Refusals of the webhook store, mapped to the contract's errors at the HTTP edge.
public enum WebhookStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound(UUID)
    case tooManyEndpoints(limit: Int)
    /// A replay may start at most one past the feed's last position.
    case replayBeyondHead(from: Int64, head: Int64)

    public var description: String {
        switch self {
        case .notFound(let id): "no webhook endpoint \(id.lowercasedString)"
        case .tooManyEndpoints(let limit): "at most \(limit) webhook endpoints may exist; delete one first"
        case .replayBeyondHead(let from, let head):
            "from_position \(from) is beyond the feed: the last position is \(head), so at most \(head + 1)"
        }
    }
}
