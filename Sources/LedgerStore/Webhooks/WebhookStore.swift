import Foundation
import LedgerCore
import Logging
import PostgresNIO

/// Webhook endpoints, their cursors over the global feed, their leases and their deliveries log.
///
/// The feed is gapless and commits in position order (docs/event-store.md), so an endpoint's delivery state
/// is one number, `delivered_through`, and the messages it holds for a retry (`webhook_held`, each
/// subscriber's in order: a failure delays only its own subscriber). Every write the delivery service makes is fenced by its lease
/// (`leased_by`, `lease_until` on PostgreSQL's clock) and by the endpoint's `generation`, which admin edits
/// bump: a delivery that was in flight while its lease passed to another instance, or while an admin replayed
/// the endpoint, cannot move the cursor afterwards.
public struct WebhookStore: Sendable {
    static let createLockKey: Int64 = 0x5355_424C_5748_4B43
    /// At most this many endpoints exist at once (hostile input: each one is a delivery loop).
    public static let maxEndpoints = 1000
    /// How long the previous secret keeps signing after a rotation.
    public static let rotationOverlap: Duration = .seconds(86_400)

    let database: Database
    var logger: Logger { database.logger }

    public init(database: Database) {
        self.database = database
    }

    public init(client: PostgresClient, logger: Logger) {
        self.init(database: Database(client: client, logger: logger))
    }

    /// At most this many messages wait in `webhook_held` per endpoint (failed ones and those queued behind
    /// them); beyond it the cursor waits for the held ones, as it did for every failure before.
    public static let maxHeldPerEndpoint = 5000
    /// The deliveries log keeps at most this many attempts per endpoint (the newest), besides its age limit.
    public static let maxLoggedPerEndpoint = 10_000

    /// The endpoint as admins see it. Retry state is the held messages': the most attempts any has had, the
    /// oldest first failure, the next retry; lag reaches back to the oldest held message.
    static let columns = """
        e.endpoint_id, e.url, e.description, e.event_types, e.entitlements, e.status, e.status_reason,
        e.delivered_through, coalesce(hs.failed, 0)::int4,
        hs.since, hs.next, e.last_error,
        CASE WHEN e.previous_secret_until > clock_timestamp() THEN e.previous_secret_until END,
        e.created_at, e.updated_at,
        greatest(h.head - least(e.delivered_through, coalesce(hs.oldest - 1, e.delivered_through)), 0)::int8,
        coalesce((SELECT greatest(extract(epoch FROM clock_timestamp() - v.recorded_at), 0)::float8
                  FROM events v WHERE v.position = least(e.delivered_through + 1, coalesce(hs.oldest, e.delivered_through + 1))), 0)::float8,
        coalesce(hs.held, 0)::int8
        """
    static let from = """
        webhook_endpoints e
        CROSS JOIN (SELECT coalesce(max(position), 0)::int8 AS head FROM events) h
        CROSS JOIN LATERAL (
            SELECT count(*) AS held, max(x.failed_attempts) AS failed, min(x.failing_since) AS since,
                   min(x.next_attempt_at) AS next, min(x.position) AS oldest
            FROM webhook_held x WHERE x.endpoint_id = e.endpoint_id) hs
        """

    // MARK: - Admin

    /// Creates an endpoint whose cursor starts at the end of the feed: it receives what is appended from now
    /// on (a replay reaches back).
    public func create(
        url: String, description: String?, eventTypes: [String]?, entitlements: [String]?, secret: WebhookSecret
    ) async throws -> WebhookEndpoint {
        let id = UUID()
        let logger = self.logger
        return try await StoreError.mapping {
            try await database.transaction { c in
                // Serializes creations, so the limit holds under concurrent requests (deliveries are not blocked).
                try await c.query("SELECT pg_advisory_xact_lock(\(Self.createLockKey))", logger: logger)
                let count =
                    try await c.query("SELECT count(*)::int8 FROM webhook_endpoints", logger: logger)
                    .collect().first?.decode(Int64.self) ?? 0
                guard count < Self.maxEndpoints else { throw WebhookStoreError.tooManyEndpoints(limit: Self.maxEndpoints) }
                try await c.query(
                    """
                    INSERT INTO webhook_endpoints (endpoint_id, url, description, event_types, entitlements, secret, delivered_through)
                    SELECT \(id), \(url), \(description), \(eventTypes)::text[], \(entitlements)::text[], \(secret.text),
                           coalesce(max(position), 0) FROM events
                    """, logger: logger)
                guard let endpoint = try await Self.fetch(id, on: c, logger: logger) else { throw WebhookStoreError.notFound(id) }
                return endpoint
            }
        }
    }

    /// Every endpoint, oldest first.
    public func list() async throws -> [WebhookEndpoint] {
        let logger = self.logger
        return try await database.withConnection { c in
            try await Self.decode(
                try await c.query(
                    "SELECT \(unescaped: Self.columns) FROM \(unescaped: Self.from) ORDER BY e.created_at, e.endpoint_id",
                    logger: logger))
        }
    }

    public func get(_ id: UUID) async throws -> WebhookEndpoint {
        let logger = self.logger
        return try await database.withConnection { c in
            guard let endpoint = try await Self.fetch(id, on: c, logger: logger) else { throw WebhookStoreError.notFound(id) }
            return endpoint
        }
    }

    /// Applies a PATCH. Enabling a failing or disabled endpoint resumes it from its cursor with a fresh retry
    /// schedule; a new URL also starts a fresh schedule.
    public func update(_ id: UUID, _ patch: WebhookEndpointPatch) async throws -> WebhookEndpoint {
        let logger = self.logger
        let clearTypes = patch.eventTypes?.isEmpty ?? false
        let clearEntitlements = patch.entitlements?.isEmpty ?? false
        let status: String? = patch.enabled.map { $0 ? "active" : "disabled" }
        let reason: String? = patch.enabled == false ? "disabled by an admin" : nil
        let resetRetries = patch.enabled == true || patch.url != nil
        // What changes deliveries fences the attempts in flight; a new description does not.
        let delivery = patch.url != nil || patch.eventTypes != nil || patch.entitlements != nil || patch.enabled != nil
        return try await StoreError.mapping {
            try await database.transaction { c in
                let rows = try await c.query(
                    """
                    UPDATE webhook_endpoints SET
                        url = coalesce(\(patch.url), url),
                        description = coalesce(\(patch.description), description),
                        event_types = CASE WHEN \(clearTypes) THEN NULL ELSE coalesce(\(patch.eventTypes)::text[], event_types) END,
                        entitlements = CASE WHEN \(clearEntitlements) THEN NULL ELSE coalesce(\(patch.entitlements)::text[], entitlements) END,
                        status_reason = CASE WHEN \(status)::text IS NULL THEN status_reason ELSE \(reason) END,
                        status = coalesce(\(status), status),
                        failed_attempts = CASE WHEN \(resetRetries) THEN 0 ELSE failed_attempts END,
                        failing_since = CASE WHEN \(resetRetries) THEN NULL ELSE failing_since END,
                        next_attempt_at = CASE WHEN \(resetRetries) THEN NULL ELSE next_attempt_at END,
                        generation = generation + CASE WHEN \(delivery) THEN 1 ELSE 0 END,
                        updated_at = clock_timestamp()
                    WHERE endpoint_id = \(id)
                    RETURNING 1
                    """, logger: logger
                ).collect()
                guard !rows.isEmpty else { throw WebhookStoreError.notFound(id) }
                if resetRetries {
                    // Each subscriber's held queue starts again at its head, now, with a fresh schedule.
                    try await c.query(
                        """
                        UPDATE webhook_held SET failed_attempts = 0, failing_since = NULL, next_attempt_at = clock_timestamp()
                        WHERE endpoint_id = \(id) AND next_attempt_at IS NOT NULL
                        """, logger: logger)
                }
                guard let endpoint = try await Self.fetch(id, on: c, logger: logger) else { throw WebhookStoreError.notFound(id) }
                return endpoint
            }
        }
    }

    /// Deletes the endpoint and its deliveries log; false if there was none.
    public func delete(_ id: UUID) async throws -> Bool {
        let logger = self.logger
        return try await database.withConnection { c in
            let rows = try await c.query("DELETE FROM webhook_endpoints WHERE endpoint_id = \(id) RETURNING 1", logger: logger).collect()
            return !rows.isEmpty
        }
    }

    /// Makes `secret` the signing secret; the one it replaces keeps signing beside it for `rotationOverlap`.
    public func rotateSecret(_ id: UUID, to secret: WebhookSecret) async throws -> WebhookEndpoint {
        let logger = self.logger
        let overlap = Self.milliseconds(Self.rotationOverlap)
        return try await StoreError.mapping {
            try await database.transaction { c in
                let rows = try await c.query(
                    """
                    UPDATE webhook_endpoints SET
                        previous_secret = secret,
                        previous_secret_until = clock_timestamp() + \(overlap) * interval '1 millisecond',
                        secret = \(secret.text),
                        updated_at = clock_timestamp()
                    WHERE endpoint_id = \(id)
                    RETURNING 1
                    """, logger: logger
                ).collect()
                guard !rows.isEmpty else { throw WebhookStoreError.notFound(id) }
                guard let endpoint = try await Self.fetch(id, on: c, logger: logger) else { throw WebhookStoreError.notFound(id) }
                return endpoint
            }
        }
    }

    /// Moves the cursor so that delivery starts again at `fromPosition` (back or forward), resumes a failing
    /// or disabled endpoint, and drops the messages held for a retry.
    public func replay(_ id: UUID, from fromPosition: Int64) async throws -> WebhookEndpoint {
        let logger = self.logger
        return try await StoreError.mapping {
            try await database.transaction { c in
                let head =
                    try await c.query("SELECT coalesce(max(position), 0)::int8 FROM events", logger: logger)
                    .collect().first?.decode(Int64.self) ?? 0
                guard fromPosition <= head + 1 else { throw WebhookStoreError.replayBeyondHead(from: fromPosition, head: head) }
                let rows = try await c.query(
                    """
                    UPDATE webhook_endpoints SET
                        delivered_through = \(fromPosition - 1), status = 'active', status_reason = NULL,
                        failed_attempts = 0, failing_since = NULL, next_attempt_at = NULL, last_error = NULL,
                        generation = generation + 1, updated_at = clock_timestamp()
                    WHERE endpoint_id = \(id)
                    RETURNING 1
                    """, logger: logger
                ).collect()
                guard !rows.isEmpty else { throw WebhookStoreError.notFound(id) }
                // Held messages are dropped: those at or after the new start are sent again by the walk, and
                // those before it are what a replay from a later position skips.
                try await c.query("DELETE FROM webhook_held WHERE endpoint_id = \(id)", logger: logger)
                guard let endpoint = try await Self.fetch(id, on: c, logger: logger) else { throw WebhookStoreError.notFound(id) }
                return endpoint
            }
        }
    }

    /// The endpoint's attempts, newest first, before the delivery id `before` (paging).
    public func deliveries(_ id: UUID, before: Int64?, limit: Int) async throws -> [WebhookDelivery] {
        let logger = self.logger
        return try await database.withConnection { c in
            let exists = try await c.query("SELECT 1 FROM webhook_endpoints WHERE endpoint_id = \(id)", logger: logger).collect()
            guard !exists.isEmpty else { throw WebhookStoreError.notFound(id) }
            var out: [WebhookDelivery] = []
            let rows = try await c.query(
                """
                SELECT delivery_id, position, event_id, webhook_id, attempt, outcome, http_status, latency_ms, error,
                       next_retry_at, attempted_at
                FROM webhook_deliveries
                WHERE endpoint_id = \(id) AND delivery_id < \(before ?? Int64.max)
                ORDER BY delivery_id DESC LIMIT \(Int64(limit))
                """, logger: logger)
            for try await (deliveryID, position, eventID, webhookID, attempt, outcome, status, latency, error, next, at) in rows.decode(
                (Int64, Int64, UUID, String, Int32, String, Int32?, Int32, String?, Timestamp?, Timestamp).self)
            {
                out.append(
                    WebhookDelivery(
                        id: deliveryID, position: position, eventID: eventID, webhookID: webhookID, attempt: Int(attempt),
                        outcome: WebhookDelivery.Outcome(rawValue: outcome) ?? .failed, httpStatus: status.map(Int.init),
                        latencyMilliseconds: Int(latency), error: error, nextRetryAt: next, attemptedAt: at))
            }
            return out
        }
    }

    // MARK: - Delivery service

    /// Makes the statement's own transaction commit without waiting for its WAL flush (`synchronous_commit`
    /// for this transaction only). The delivery service's writes may be lost in a crash of PostgreSQL itself
    /// (at most the WAL writer's last fraction of a second): the cursor then stands a little earlier and those
    /// events are delivered again, which at-least-once allows. Waiting for a disk flush per delivered event
    /// was what bounded throughput (measured: about 15 deliveries a second per endpoint on this disk).
    static let relaxedCommit = "set_config('synchronous_commit', 'off', true)"

    /// Renews this instance's leases and takes free or expired ones of active endpoints, up to `limit` in
    /// all; answers the endpoints it now holds. Rows another instance is taking at the same moment are
    /// skipped, not waited for.
    public func acquireLeases(instance: String, duration: Duration, limit: Int) async throws -> [UUID] {
        let logger = self.logger
        let ms = Self.milliseconds(duration)
        return try await database.withConnection { c in
            var out: [UUID] = []
            let rows = try await c.query(
                """
                UPDATE webhook_endpoints SET leased_by = \(instance), lease_until = clock_timestamp() + \(ms) * interval '1 millisecond'
                WHERE endpoint_id IN (
                    SELECT endpoint_id FROM webhook_endpoints
                    WHERE status = 'active' AND (leased_by = \(instance) OR leased_by IS NULL OR lease_until < clock_timestamp())
                    ORDER BY leased_by = \(instance) DESC NULLS LAST, created_at
                    LIMIT \(Int64(limit))
                    FOR UPDATE SKIP LOCKED)
                RETURNING endpoint_id
                """, logger: logger)
            for try await id in rows.decode(UUID.self) { out.append(id) }
            return out
        }
    }

    /// Gives up this instance's leases (graceful shutdown), so another instance takes over at once.
    public func releaseLeases(instance: String) async throws {
        let logger = self.logger
        try await database.withConnection { c in
            try await c.query(
                "UPDATE webhook_endpoints SET leased_by = NULL, lease_until = NULL WHERE leased_by = \(instance)", logger: logger)
        }
    }

    /// The endpoint's delivery state with its signing secrets, if `instance` holds its lease and it is active.
    public func deliveryState(_ id: UUID, instance: String) async throws -> WebhookDeliveryState? {
        let logger = self.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT \(unescaped: Self.columns), e.secret,
                       CASE WHEN e.previous_secret_until > clock_timestamp() THEN e.previous_secret END,
                       e.generation,
                       CASE WHEN hs.next IS NOT NULL THEN greatest(extract(epoch FROM hs.next - clock_timestamp()) * 1000, 0)::int8 END
                FROM \(unescaped: Self.from)
                WHERE e.endpoint_id = \(id) AND e.status = 'active' AND e.leased_by = \(instance) AND e.lease_until > clock_timestamp()
                """, logger: logger
            ).collect()
            guard let row = rows.first else { return nil }
            var cells = Cells(row)
            let endpoint = try Self.decode(&cells)
            let current = try cells.next(String.self)
            let previous = try cells.next(String?.self)
            let generation = try cells.next(Int64.self)
            let retryIn = try cells.next(Int64?.self)
            let secrets = [current, previous].compactMap { $0.flatMap(WebhookSecret.init) }
            return WebhookDeliveryState(endpoint: endpoint, secrets: secrets, generation: generation, nextHeldInMilliseconds: retryIn)
        }
    }

    /// Moves the cursor past events the endpoint's filters pass over. False if the lease or generation is no
    /// longer this instance's.
    public func skip(_ id: UUID, through position: Int64, instance: String, generation: Int64) async throws -> Bool {
        let logger = self.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                UPDATE webhook_endpoints SET delivered_through = \(position)
                WHERE endpoint_id = \(id) AND generation = \(generation) AND status = 'active'
                  AND leased_by = \(instance) AND lease_until > clock_timestamp() AND delivered_through < \(position)
                RETURNING \(unescaped: Self.relaxedCommit)
                """, logger: logger
            ).collect()
            return !rows.isEmpty
        }
    }

    /// What recording an attempt did.
    public enum Recorded: Sendable, Equatable {
        /// The endpoint's state moved as the outcome says.
        case applied(nextRetryAt: Timestamp?, paused: Bool)
        /// The lease or generation changed meanwhile (or the endpoint was deleted): the attempt is logged if the
        /// endpoint still exists, its state is left alone, and the caller reads the state again.
        case stale
    }

    /// Logs an attempt at an event of the walk (not a held one) and moves the endpoint in one statement.
    /// Failed holds the message (`subscriberID`, `body`) for a retry `retryDelay` from now: later messages of
    /// its subscriber queue behind it, the others go on. Delivered and failed move the cursor to `through`,
    /// the end of what the walk has settled from the cursor on: with several requests in flight that may stop
    /// below this event, at one still unanswered. Gone disables the endpoint and keeps the cursor.
    public func record(
        _ id: UUID, _ attempt: WebhookAttempt, subscriberID: String, body: [UInt8], through: Int64, instance: String,
        generation: Int64, retryDelay: Duration, giveUpAfter: Duration
    ) async throws -> Recorded {
        let logger = self.logger
        let delay = Self.milliseconds(min(retryDelay, giveUpAfter))
        let outcome = attempt.outcome.rawValue
        let error = attempt.error.map { String($0.prefix(500)) }
        let status = attempt.httpStatus.map(Int32.init)
        let latency = Int32(clamping: attempt.latencyMilliseconds)
        let position = attempt.position
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit)), target AS (
                    SELECT endpoint_id, (generation = \(generation) AND status = 'active' AND leased_by = \(instance)
                                         AND lease_until > clock_timestamp()) AS mine
                    FROM webhook_endpoints WHERE endpoint_id = \(id) FOR UPDATE
                ), plan AS (
                    SELECT endpoint_id, mine,
                           CASE WHEN \(outcome) = 'failed' THEN clock_timestamp() + \(delay) * interval '1 millisecond' END AS next
                    FROM target
                ), moved AS (
                    UPDATE webhook_endpoints e SET
                        delivered_through = CASE WHEN \(outcome) = 'gone' THEN e.delivered_through
                                                 ELSE greatest(e.delivered_through, \(through)) END,
                        last_error = CASE
                            WHEN \(outcome) <> 'delivered' THEN \(error)
                            WHEN EXISTS (SELECT 1 FROM webhook_held x WHERE x.endpoint_id = e.endpoint_id) THEN e.last_error END,
                        status = CASE WHEN \(outcome) = 'gone' THEN 'disabled' ELSE e.status END,
                        status_reason = CASE WHEN \(outcome) = 'gone' THEN 'the endpoint answered 410 Gone' ELSE e.status_reason END,
                        updated_at = CASE WHEN \(outcome) = 'delivered' THEN e.updated_at ELSE clock_timestamp() END
                    FROM plan p WHERE e.endpoint_id = p.endpoint_id AND p.mine
                    RETURNING p.next
                ), held AS (
                    INSERT INTO webhook_held
                        (endpoint_id, position, subscriber_id, event_id, body, failed_attempts, failing_since, next_attempt_at, last_error)
                    SELECT p.endpoint_id, \(position), \(subscriberID), \(attempt.eventID), \(ByteBuffer(bytes: body)), 1, clock_timestamp(), p.next, \(error)
                    FROM plan p WHERE p.mine AND \(outcome) = 'failed'
                    ON CONFLICT DO NOTHING
                ), logged AS (
                    INSERT INTO webhook_deliveries
                        (endpoint_id, position, event_id, webhook_id, attempt, outcome, http_status, latency_ms, error, next_retry_at, instance)
                    SELECT p.endpoint_id, \(position), \(attempt.eventID), \(attempt.webhookID), 1, \(outcome),
                           \(status), \(latency), \(error), CASE WHEN p.mine THEN p.next END, \(instance)
                    FROM plan p
                )
                SELECT next FROM moved, relaxed
                """, logger: logger
            ).collect()
            guard let row = rows.first else { return .stale }
            return .applied(nextRetryAt: try row.decode(Timestamp?.self), paused: false)
        }
    }

    /// Logs several delivered attempts of the walk and moves the cursor to `through` in one statement: the
    /// delivery loop records its successes in batches, so a delivery costs a fraction of a statement. `through`
    /// is the end of what is settled from the cursor on; attempts after it (answered while an earlier message
    /// was still in flight) are logged, and the cursor waits below that message. A crash before the cursor
    /// passes them sends them again, which at-least-once delivery allows.
    public func recordDelivered(
        _ id: UUID, _ attempts: [WebhookAttempt], through: Int64, instance: String, generation: Int64
    ) async throws -> Recorded {
        guard !attempts.isEmpty else { return .applied(nextRetryAt: nil, paused: false) }
        let logger = self.logger
        let positions = attempts.map(\.position)
        let events = attempts.map(\.eventID)
        let webhookIDs = attempts.map(\.webhookID)
        let statuses = attempts.map { Int32(clamping: $0.httpStatus ?? 0) }
        let latencies = attempts.map { Int32(clamping: $0.latencyMilliseconds) }
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit)), target AS (
                    SELECT endpoint_id, (generation = \(generation) AND status = 'active' AND leased_by = \(instance)
                                         AND lease_until > clock_timestamp()) AS mine
                    FROM webhook_endpoints WHERE endpoint_id = \(id) FOR UPDATE
                ), moved AS (
                    UPDATE webhook_endpoints e SET
                        delivered_through = greatest(e.delivered_through, \(through)),
                        last_error = CASE WHEN EXISTS (SELECT 1 FROM webhook_held x WHERE x.endpoint_id = e.endpoint_id)
                                          THEN e.last_error END
                    FROM target t WHERE e.endpoint_id = t.endpoint_id AND t.mine
                    RETURNING 1
                ), logged AS (
                    INSERT INTO webhook_deliveries
                        (endpoint_id, position, event_id, webhook_id, attempt, outcome, http_status, latency_ms, error, next_retry_at, instance)
                    SELECT t.endpoint_id, a.position, a.event_id, a.webhook_id, 1, 'delivered', nullif(a.status, 0), a.latency, NULL, NULL, \(instance)
                    FROM target t,
                         unnest(\(positions)::int8[], \(events)::uuid[], \(webhookIDs)::text[], \(statuses)::int4[], \(latencies)::int4[])
                             WITH ORDINALITY AS a(position, event_id, webhook_id, status, latency, n)
                    ORDER BY a.n
                )
                SELECT 1 FROM moved, relaxed
                """, logger: logger
            ).collect()
            return rows.isEmpty ? .stale : .applied(nextRetryAt: nil, paused: false)
        }
    }

    /// Queues an event's message behind its subscriber's held messages and moves the cursor to `through` (as
    /// `record`). Should the subscriber have none held before it, the message is due at once rather than
    /// waiting behind nothing, and any held after it wait behind it: the cursor may stand below a held
    /// message, so after a crash or a takeover the walk can meet earlier messages of its subscriber again.
    public func hold(
        _ id: UUID, position: Int64, eventID: UUID, subscriberID: String, body: [UInt8], through: Int64, instance: String,
        generation: Int64
    ) async throws -> Bool {
        let logger = self.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit)), target AS (
                    SELECT endpoint_id, (generation = \(generation) AND status = 'active' AND leased_by = \(instance)
                                         AND lease_until > clock_timestamp()) AS mine
                    FROM webhook_endpoints WHERE endpoint_id = \(id) FOR UPDATE
                ), moved AS (
                    UPDATE webhook_endpoints e SET delivered_through = greatest(e.delivered_through, \(through))
                    FROM target t WHERE e.endpoint_id = t.endpoint_id AND t.mine
                    RETURNING 1
                ), queue AS (
                    SELECT t.endpoint_id,
                           EXISTS (SELECT 1 FROM webhook_held x WHERE x.endpoint_id = t.endpoint_id
                                   AND x.subscriber_id = \(subscriberID) AND x.position < \(position)) AS behind
                    FROM target t WHERE t.mine
                ), held AS (
                    INSERT INTO webhook_held (endpoint_id, position, subscriber_id, event_id, body, next_attempt_at)
                    SELECT q.endpoint_id, \(position), \(subscriberID), \(eventID), \(ByteBuffer(bytes: body)),
                           CASE WHEN q.behind THEN NULL ELSE clock_timestamp() END
                    FROM queue q
                    ON CONFLICT DO NOTHING
                    RETURNING 1
                ), demoted AS (
                    UPDATE webhook_held h SET next_attempt_at = NULL
                    FROM queue q
                    WHERE EXISTS (SELECT 1 FROM held) AND NOT q.behind AND h.endpoint_id = q.endpoint_id
                      AND h.subscriber_id = \(subscriberID) AND h.position > \(position)
                )
                SELECT 1 FROM moved, relaxed
                """, logger: logger
            ).collect()
            return !rows.isEmpty
        }
    }

    /// The subscribers with messages held on the endpoint, and how many messages are held.
    public func held(_ id: UUID) async throws -> (subscribers: Set<String>, count: Int) {
        let logger = self.logger
        return try await database.withConnection { c in
            var subscribers: Set<String> = []
            var count = 0
            let rows = try await c.query(
                "SELECT subscriber_id, count(*)::int8 FROM webhook_held WHERE endpoint_id = \(id) GROUP BY subscriber_id",
                logger: logger)
            for try await (subscriber, n) in rows.decode((String, Int64).self) {
                subscribers.insert(subscriber)
                count += Int(n)
            }
            return (subscribers, count)
        }
    }

    /// Held messages due now (each the head of its subscriber's queue), earliest first.
    public func dueHeld(_ id: UUID, limit: Int) async throws -> [HeldMessage] {
        let logger = self.logger
        return try await database.withConnection { c in
            var out: [HeldMessage] = []
            let rows = try await c.query(
                """
                SELECT position, subscriber_id, event_id, body, failed_attempts FROM webhook_held
                WHERE endpoint_id = \(id) AND next_attempt_at <= clock_timestamp()
                ORDER BY next_attempt_at, position LIMIT \(Int64(limit))
                """, logger: logger)
            for try await (position, subscriber, eventID, body, failed) in rows.decode((Int64, String, UUID, ByteBuffer, Int32).self) {
                out.append(
                    HeldMessage(
                        position: position, subscriberID: subscriber, eventID: eventID, body: Array(body.readableBytesView),
                        failedAttempts: Int(failed)))
            }
            return out
        }
    }

    /// What recording an attempt at a held message did.
    public enum HeldRecorded: Sendable, Equatable {
        /// Delivered and removed; `queued` says whether its subscriber still has held messages (the next one
        /// is due now).
        case delivered(queued: Bool)
        /// Failed; tried again then.
        case retry(at: Timestamp)
        /// Failed for longer than the schedule allows: the endpoint is paused as `failing`, messages kept.
        case paused
        /// 410 Gone: the endpoint is disabled, the message kept.
        case disabled
        /// The lease or generation changed, or the message is no longer held: nothing moved.
        case stale
    }

    /// Logs an attempt at a held message and moves it in one statement: delivered removes it and makes its
    /// subscriber's next held message due now; failed schedules its next retry (no later than
    /// `giveUpAfter` after its first failure), or pauses the endpoint once that much time has passed; gone
    /// disables the endpoint.
    public func recordHeld(
        _ id: UUID, _ attempt: WebhookAttempt, instance: String, generation: Int64, retryDelay: Duration, giveUpAfter: Duration
    ) async throws -> HeldRecorded {
        let logger = self.logger
        let delay = Self.milliseconds(retryDelay)
        let giveUp = Self.milliseconds(giveUpAfter)
        let outcome = attempt.outcome.rawValue
        let error = attempt.error.map { String($0.prefix(500)) }
        let status = attempt.httpStatus.map(Int32.init)
        let latency = Int32(clamping: attempt.latencyMilliseconds)
        let position = attempt.position
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                WITH relaxed AS (SELECT \(unescaped: Self.relaxedCommit)), target AS (
                    SELECT e.endpoint_id, h.subscriber_id, h.failed_attempts + 1 AS attempt,
                           coalesce(h.failing_since, clock_timestamp()) AS since
                    FROM webhook_endpoints e JOIN webhook_held h ON h.endpoint_id = e.endpoint_id AND h.position = \(position)
                    WHERE e.endpoint_id = \(id) AND e.generation = \(generation) AND e.status = 'active'
                      AND e.leased_by = \(instance) AND e.lease_until > clock_timestamp()
                    FOR UPDATE OF e, h
                ), plan AS (
                    SELECT endpoint_id, subscriber_id, attempt, since,
                           (\(outcome) = 'failed' AND clock_timestamp() >= since + \(giveUp) * interval '1 millisecond') AS pause,
                           least(clock_timestamp() + \(delay) * interval '1 millisecond', since + \(giveUp) * interval '1 millisecond') AS next
                    FROM target
                ), removed AS (
                    DELETE FROM webhook_held h USING plan p
                    WHERE \(outcome) = 'delivered' AND h.endpoint_id = p.endpoint_id AND h.position = \(position)
                    RETURNING h.position
                ), following AS (
                    SELECT min(x.position) AS position FROM webhook_held x, plan p
                    WHERE \(outcome) = 'delivered' AND x.endpoint_id = p.endpoint_id AND x.subscriber_id = p.subscriber_id
                      AND x.position > \(position)
                ), promoted AS (
                    UPDATE webhook_held h SET next_attempt_at = clock_timestamp()
                    FROM plan p, following f
                    WHERE h.endpoint_id = p.endpoint_id AND h.position = f.position
                    RETURNING 1
                ), retried AS (
                    UPDATE webhook_held h SET
                        failed_attempts = p.attempt, failing_since = p.since, last_error = \(error),
                        next_attempt_at = CASE WHEN p.pause THEN h.next_attempt_at ELSE p.next END
                    FROM plan p
                    WHERE \(outcome) <> 'delivered' AND h.endpoint_id = p.endpoint_id AND h.position = \(position)
                    RETURNING 1
                ), moved AS (
                    UPDATE webhook_endpoints e SET
                        last_error = CASE
                            WHEN \(outcome) <> 'delivered' THEN \(error)
                            WHEN EXISTS (SELECT 1 FROM webhook_held x WHERE x.endpoint_id = e.endpoint_id AND x.position <> \(position))
                            THEN e.last_error END,
                        status = CASE WHEN \(outcome) = 'gone' THEN 'disabled' WHEN p.pause THEN 'failing' ELSE e.status END,
                        status_reason = CASE
                            WHEN \(outcome) = 'gone' THEN 'the endpoint answered 410 Gone'
                            WHEN p.pause THEN 'deliveries failed for longer than the retry schedule allows; enable it to resume from its held messages and cursor'
                            ELSE e.status_reason END,
                        updated_at = CASE WHEN \(outcome) = 'delivered' THEN e.updated_at ELSE clock_timestamp() END
                    FROM plan p WHERE e.endpoint_id = p.endpoint_id
                    RETURNING p.pause, p.next, p.attempt
                ), logged AS (
                    INSERT INTO webhook_deliveries
                        (endpoint_id, position, event_id, webhook_id, attempt, outcome, http_status, latency_ms, error, next_retry_at, instance)
                    SELECT p.endpoint_id, \(position), \(attempt.eventID), \(attempt.webhookID), p.attempt, \(outcome),
                           \(status), \(latency), \(error),
                           CASE WHEN \(outcome) = 'failed' AND NOT p.pause THEN p.next END, \(instance)
                    FROM plan p
                )
                SELECT m.pause, m.next, (SELECT count(*) FROM following f WHERE f.position IS NOT NULL) > 0
                FROM moved m, relaxed
                """, logger: logger
            ).collect()
            guard let row = rows.first else { return .stale }
            let (pause, next, queued) = try row.decode((Bool, Timestamp, Bool).self)
            switch attempt.outcome {
            case .delivered: return .delivered(queued: queued)
            case .gone: return .disabled
            case .failed: return pause ? .paused : .retry(at: next)
            }
        }
    }

    /// Per endpoint, for metrics: status and lag.
    public func statistics() async throws -> [WebhookEndpoint] {
        try await list()
    }

    /// Deletes deliveries log rows older than `age`, and beyond the newest `maxLoggedPerEndpoint` of each
    /// endpoint (a failing endpoint logs a row per retry; this keeps its log bounded between prunes).
    public func prune(olderThan age: Duration, keepPerEndpoint: Int = WebhookStore.maxLoggedPerEndpoint) async throws {
        let logger = self.logger
        let ms = Self.milliseconds(age)
        let keep = Int64(keepPerEndpoint)
        try await database.withConnection { c in
            try await c.query(
                "DELETE FROM webhook_deliveries WHERE attempted_at < clock_timestamp() - \(ms) * interval '1 millisecond'",
                logger: logger)
            try await c.query(
                """
                DELETE FROM webhook_deliveries d USING (
                    SELECT e.endpoint_id,
                           (SELECT x.delivery_id FROM webhook_deliveries x WHERE x.endpoint_id = e.endpoint_id
                            ORDER BY x.delivery_id DESC OFFSET \(keep) LIMIT 1) AS oldest_dropped
                    FROM webhook_endpoints e) b
                WHERE d.endpoint_id = b.endpoint_id AND d.delivery_id <= b.oldest_dropped
                """, logger: logger)
        }
    }

    /// The last position of the feed (0 when empty) and a number that changes whenever an endpoint is
    /// created, edited, replayed, deleted or given a new secret: what wakes delivery loops to read their
    /// endpoint again.
    public func pulse() async throws -> (head: Int64, edits: Int64) {
        let logger = self.logger
        return try await database.withConnection { c in
            let rows = try await c.query(
                """
                SELECT (SELECT coalesce(max(position), 0) FROM events)::int8,
                       (SELECT coalesce(sum(generation), 0) + count(*)
                               + coalesce(sum(extract(epoch FROM previous_secret_until)::int8), 0) FROM webhook_endpoints)::int8
                """, logger: logger
            ).collect()
            return try rows.first?.decode((Int64, Int64).self) ?? (0, 0)
        }
    }

    /// A page of the global feed after `position`, whole envelopes, in position order.
    public func feed(after position: Int64, limit: Int) async throws -> [RecordedEvent] {
        let logger = self.logger
        return try await database.withConnection { c in
            var out: [RecordedEvent] = []
            for try await row in try await c.query(
                """
                SELECT \(unescaped: EventRow.columns) FROM events
                WHERE position > \(position) ORDER BY position LIMIT \(Int64(limit))
                """, logger: logger)
            {
                out.append(try EventRow.decode(row))
            }
            return out
        }
    }

    /// The streams of `subscribers` up to `position` (inclusive), with what the fold reads, oldest first.
    public func streams(_ subscribers: Set<String>, through position: Int64) async throws -> [String: [FoldEvent]] {
        guard !subscribers.isEmpty else { return [:] }
        let logger = self.logger
        return try await database.withConnection { c in
            var out: [String: [FoldEvent]] = [:]
            for try await row in try await c.query(
                """
                SELECT \(unescaped: EventRow.foldColumns) FROM events
                WHERE subscriber_id = ANY(\(Array(subscribers))::text[]) AND position <= \(position)
                ORDER BY subscriber_id, version
                """, logger: logger)
            {
                let event = try EventRow.decodeForFold(row)
                out[event.subscriberID, default: []].append(event)
            }
            return out
        }
    }

    // MARK: - Rows

    private static func fetch(_ id: UUID, on c: PostgresConnection, logger: Logger) async throws -> WebhookEndpoint? {
        try await decode(
            try await c.query("SELECT \(unescaped: columns) FROM \(unescaped: from) WHERE e.endpoint_id = \(id)", logger: logger)
        ).first
    }

    private static func decode(_ rows: PostgresRowSequence) async throws -> [WebhookEndpoint] {
        var out: [WebhookEndpoint] = []
        for try await row in rows {
            var cells = Cells(row)
            out.append(try decode(&cells))
        }
        return out
    }

    /// An endpoint from the next cells of a row (the `columns` select list).
    private static func decode(_ c: inout Cells) throws -> WebhookEndpoint {
        let id = try c.next(UUID.self)
        let url = try c.next(String.self)
        let description = try c.next(String?.self)
        let types = try c.next([String]?.self)
        let entitlements = try c.next([String]?.self)
        let status = try c.next(String.self)
        let reason = try c.next(String?.self)
        let through = try c.next(Int64.self)
        let failed = try c.next(Int32.self)
        let since = try c.next(Timestamp?.self)
        let next = try c.next(Timestamp?.self)
        let error = try c.next(String?.self)
        let previousUntil = try c.next(Timestamp?.self)
        let created = try c.next(Timestamp.self)
        let updated = try c.next(Timestamp.self)
        let lag = try c.next(Int64.self)
        let lagSeconds = try c.next(Double.self)
        let held = try c.next(Int64.self)
        return WebhookEndpoint(
            id: id, url: url, description: description, eventTypes: types, entitlements: entitlements,
            status: WebhookEndpoint.Status(rawValue: status) ?? .disabled, statusReason: reason, deliveredThrough: through,
            failedAttempts: Int(failed), failingSince: since, nextAttemptAt: next, lastError: error,
            previousSecretUntil: previousUntil, createdAt: created, updatedAt: updated, lagPositions: lag, lagSeconds: lagSeconds,
            heldMessages: Int(held))
    }

    /// Reads a row's cells in order, each with its own type.
    struct Cells {
        var iterator: PostgresRow.Iterator
        init(_ row: PostgresRow) { iterator = row.makeIterator() }

        mutating func next<T: PostgresDecodable>(_ type: T.Type) throws -> T {
            guard let cell = iterator.next() else { throw BinaryCells.Unexpected(column: "past the last") }
            return try cell.decode(T.self)
        }
    }

    static func milliseconds(_ d: Duration) -> Int64 {
        d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
    }
}
