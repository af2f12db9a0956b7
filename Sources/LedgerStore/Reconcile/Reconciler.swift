import Foundation
import LedgerCore
import Logging

/// What a store's API says of one purchase, and the events that would bring the ledger to it.
public struct StoreVerdict: Sendable {
    /// The store's state, in the terms compared (docs/switching.md "Reconcile").
    public var state: PurchaseState
    /// For each member, the store's facts (mapped as its notifications are, with the store's own times and
    /// idempotency keys) that repair a difference on it; appended only when the member differs.
    public var repairs: [PurchaseDifference.Field: [EventDraft]]
    /// Why a member cannot be repaired when it differs (the store does not say when, events are never edited…).
    public var reasons: [PurchaseDifference.Field: String]

    public init(
        state: PurchaseState, repairs: [PurchaseDifference.Field: [EventDraft]] = [:], reasons: [PurchaseDifference.Field: String] = [:]
    ) {
        self.state = state
        self.repairs = repairs
        self.reasons = reasons
    }
}

/// A store cannot answer for one purchase (it does not know it, the ledger lacks what the store needs to be
/// asked): recorded as an unrepaired difference on `purchase`; the run goes on. Any other error of the store
/// (unreachable, credentials refused) fails the run.
public struct PurchaseNotComparable: Error, CustomStringConvertible, Sendable {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

extension PurchaseNotComparable {
    /// Runs one purchase's comparison; an error `why` explains (a store payload that does not verify or cannot be
    /// mapped) concerns that purchase alone and becomes a `PurchaseNotComparable`. Others go on (they fail the run).
    public static func scoping<T>(why: (any Error) -> String?, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            guard !(error is PurchaseNotComparable), let reason = why(error) else { throw error }
            throw PurchaseNotComparable(reason)
        }
    }
}

/// One store's side of a reconciliation: its API, asked per purchase.
public protocol StoreReconciliation: Sendable {
    /// `apple`, `google`, `stripe`: the events' `source`.
    var store: String { get }
    /// The environment of the purchases it can be asked about.
    var environment: LedgerEnvironment { get }
    /// Before the purchases: what the store lists for the whole run (Google's voided purchases). Returns the
    /// start of what it read, recorded on the run (`voided_since`).
    func prepare(now: Timestamp) async throws -> Timestamp?
    /// The store's answer for one purchase the ledger knows.
    func check(_ purchase: ReconciliationStore.KnownPurchase, ledger: LedgerPurchase, now: Timestamp) async throws -> StoreVerdict
    /// After a run that succeeded (Google moves its voided-purchases mark).
    func finished(now: Timestamp) async throws
}

extension StoreReconciliation {
    public func prepare(now: Timestamp) async throws -> Timestamp? { nil }
    public func finished(now: Timestamp) async throws {}
}

/// Runs a reconciliation of one store: for every purchase the ledger knows from it, compares the ledger's
/// state with the store's, appends through the intake what the store knows and the ledger lacks (events with
/// the store's own times, never edits), and records the run, each difference and what became of it.
public struct Reconciler: Sendable {
    let intake: EventIntake
    let records: ReconciliationStore
    let logger: Logger
    /// This process, in leases and runs.
    let instance: String
    let leaseDuration: Duration
    let clock: @Sendable () -> Timestamp

    public init(
        intake: EventIntake, records: ReconciliationStore, logger: Logger, instance: String = Reconciler.defaultInstance,
        leaseDuration: Duration = .seconds(600), clock: @escaping @Sendable () -> Timestamp = { EventIntake.now() }
    ) {
        self.intake = intake
        self.records = records
        self.logger = logger
        self.instance = instance
        self.leaseDuration = leaseDuration
        self.clock = clock
    }

    public static let defaultInstance: String = {
        "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier):\(UUID().uuidString.prefix(8).lowercased())"
    }()

    /// Most events of one subscriber read for a comparison (pages of 1,000).
    public static let maxEventsPerSubscriber = 100_000

    /// Runs once and answers the recorded run. `Busy` (nothing recorded) when another instance holds the
    /// store's lease; a store that fails is a `failed` run, recorded and answered (not thrown).
    public func run(_ store: some StoreReconciliation, since: Timestamp?, trigger: ReconciliationStore.Trigger) async throws
        -> ReconciliationStore.Run
    {
        let id = UUID()
        try await records.acquire(store: store.store, holder: instance, runID: id, duration: leaseDuration)
        do {
            let run = try await held(store, id: id, since: since, trigger: trigger)
            try? await records.release(store: store.store, holder: instance)
            return run
        } catch {
            try? await records.release(store: store.store, holder: instance)
            throw error
        }
    }

    func held(_ store: some StoreReconciliation, id: UUID, since: Timestamp?, trigger: ReconciliationStore.Trigger) async throws
        -> ReconciliationStore.Run
    {
        let started = clock()
        var status = ReconciliationStore.Status.succeeded
        var failure: String?
        var voidedSince: Timestamp?
        do {
            voidedSince = try await store.prepare(now: started)
        } catch {
            (status, failure) = (.failed, "\(error)")
        }
        try await records.begin(
            ReconciliationStore.Run(
                id: id, seq: 0, store: store.store, trigger: trigger.rawValue, instance: instance, since: since, voidedSince: voidedSince,
                status: .running, error: nil, startedAt: started, finishedAt: nil, purchases: 0, differences: 0, repaired: 0, unrepaired: 0,
                eventsAppended: 0))
        if status == .succeeded {
            do {
                try await compareAll(store, runID: id, since: since)
                try await store.finished(now: started)
            } catch {
                (status, failure) = (.failed, "\(error)")
            }
        }
        try await records.finish(runID: id, status: status, error: failure, at: clock())
        let run = try await records.run(id: id)!
        logger.log(
            level: status == .failed ? .warning : (run.differences > 0 ? .info : .debug), "reconciliation",
            metadata: [
                "reconcile.store": "\(store.store)", "reconcile.run_id": "\(id.lowercasedString)", "reconcile.status": "\(status.rawValue)",
                "reconcile.purchases": "\(run.purchases)", "reconcile.differences": "\(run.differences)",
                "reconcile.repaired": "\(run.repaired)", "reconcile.unrepaired": "\(run.unrepaired)",
                "reconcile.events_appended": "\(run.eventsAppended)", "error.message": "\(failure ?? "")",
            ])
        return run
    }

    func compareAll(_ store: some StoreReconciliation, runID: UUID, since: Timestamp?) async throws {
        let purchases = try await records.purchases(store: store.store, environment: store.environment, since: since)
        var renewed = ContinuousClock.now
        for p in purchases {
            if ContinuousClock.now - renewed > leaseDuration / 3 {
                try await records.acquire(store: store.store, holder: instance, runID: runID, duration: leaseDuration)
                renewed = .now
            }
            try Task.checkCancellation()
            let (differences, appended) = try await compare(store, p)
            try await records.record(runID: runID, compared: 1, differences: differences, appended: appended)
        }
    }

    /// One purchase: its differences (each repaired or not, and why) and how many events were appended.
    func compare(_ store: some StoreReconciliation, _ p: ReconciliationStore.KnownPurchase) async throws
        -> ([ReconciliationStore.Difference], Int)
    {
        let now = clock()
        let events = try await stream(p.subscriberID)
        guard let before = PurchaseReconciliation.ledger(events, store: store.store, purchaseID: p.purchaseID, now: now) else { return ([], 0) }
        func row(_ field: String, ledger: String?, store: String?, repaired: Bool, ids: [UUID] = [], reason: String?)
            -> ReconciliationStore.Difference
        {
            .init(
                subscriberID: p.subscriberID, purchaseID: p.purchaseID, field: field, ledgerValue: ledger, storeValue: store, repaired: repaired,
                eventIDs: ids, reason: reason)
        }
        let verdict: StoreVerdict
        do {
            verdict = try await store.check(p, ledger: before, now: now)
        } catch let refused as PurchaseNotComparable {
            return ([row(PurchaseDifference.Field.purchase.rawValue, ledger: "known", store: nil, repaired: false, reason: refused.reason)], 0)
        }
        let differences = PurchaseReconciliation.differences(ledger: before.state, store: verdict.state)
        guard !differences.isEmpty else { return ([], 0) }

        // The repairs of every differing member, each fact once (one may repair several members).
        var drafts: [EventDraft] = []
        var keysOf: [PurchaseDifference.Field: [String]] = [:]
        for d in differences {
            for draft in verdict.repairs[d.field] ?? [] {
                keysOf[d.field, default: []].append(draft.idempotencyKey)
                if !drafts.contains(where: { $0.idempotencyKey == draft.idempotencyKey }) { drafts.append(draft) }
            }
        }
        var created: [String: UUID] = [:]
        var appendFailure: String?
        if !drafts.isEmpty {
            do {
                let result = try await intake.append(drafts: drafts, subscriber: p.subscriberID, source: store.store)
                let known = Set(events.map(\.eventID))
                for e in result.events where !known.contains(e.eventID) { created[e.idempotencyKey] = e.eventID }
            } catch let error as EventValidationError {
                appendFailure = "the store's facts were refused: \(error)"
            } catch let error as IdentityError {
                appendFailure = "\(error)"
            }
        }
        // What the ledger says now decides what was repaired.
        let after: PurchaseState
        if created.isEmpty {
            after = before.state
        } else {
            let events = try await stream(p.subscriberID)
            after = PurchaseReconciliation.ledger(events, store: store.store, purchaseID: p.purchaseID, now: now)?.state ?? before.state
        }
        let left = Set(PurchaseReconciliation.differences(ledger: after, store: verdict.state).map(\.field))
        var rows: [ReconciliationStore.Difference] = []
        for d in differences {
            let ids = (keysOf[d.field] ?? []).compactMap { created[$0] }
            let repaired = !left.contains(d.field)
            let reason: String? =
                repaired
                ? nil
                : appendFailure ?? verdict.reasons[d.field]
                    ?? (ids.isEmpty ? "no store fact repairs it" : "the appended events did not bring the ledger to the store's value")
            rows.append(row(d.field.rawValue, ledger: d.ledger, store: d.store, repaired: repaired, ids: ids, reason: reason))
        }
        return (rows, created.count)
    }

    /// A subscriber's whole stream, oldest first.
    func stream(_ subscriber: String) async throws -> [RecordedEvent] {
        var out: [RecordedEvent] = []
        while out.count < Self.maxEventsPerSubscriber {
            let page = try await intake.store.stream(subscriberID: subscriber, afterVersion: out.last?.version ?? 0, limit: 1_000)
            out += page
            if page.count < 1_000 { break }
        }
        return out
    }
}
