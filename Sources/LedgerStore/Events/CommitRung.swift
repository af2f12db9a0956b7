import PostgresNIO

/// The ways a group of appends is committed, tried in this order until one gives every job its outcome
/// (`EventStore.commit`). Each step down is decided by `step(after:_:jobs:)` alone, so the ladder is tested
/// rung by rung without a database (`CommitLadderTests`).
enum CommitRung: Equatable, Sendable {
    /// From what this process believes (`AppendMemory`), in one statement (`subledger_append`).
    case oneTrip
    /// A transaction that reads the tail under the append lock; idempotency keys are not looked up.
    case general
    /// The same, looking every idempotency key up first: a key was reused, or a version check failed (which
    /// may be the retry of an append that already succeeded).
    case keyLookup
    /// Each job alone (from `oneTrip` again), so that only the job that causes an error fails.
    case oneByOne

    /// How a rung ended, when it did not write.
    enum Outcome: Equatable, Sendable {
        /// Nothing believed, or the database refused the belief: nothing was written.
        case refused
        /// A reused idempotency key (the unique index said so) or a failed version check.
        case needsKeyLookup
        /// PostgreSQL refused a statement for another reason (a row it does not take): the group rolled back.
        case statementFailed
        /// A subscriber's stream would grow past `Limits` (a validation failure of one job).
        case streamTooLarge
        /// A lost connection, no connection, a failed commit: the outcome is unknown.
        case outage

        init(_ error: any Error) {
            if let error = error as? PSQLError, error.isUniqueViolation(of: "events_idempotency_key") {
                self = .needsKeyLookup
            } else if error is AppendWriter.NeedsKeyLookup {
                self = .needsKeyLookup
            } else if error is AppendWriter.StreamTooLarge {
                self = .streamTooLarge
            } else if let error = StoreError.classify(error) as? PSQLError, error.code == .server {
                self = .statementFailed
            } else {
                self = .outage
            }
        }
    }

    /// What follows a rung's outcome.
    struct Step: Equatable, Sendable {
        /// The next rung, or nil: every job of the group fails with the rung's error.
        var next: CommitRung?
        /// The belief may be wrong now (the group's outcome is unknown, or it rolled back after being proposed).
        var forgetsBelief: Bool
    }

    /// The next rung after `outcome` on `rung`, for a group of `jobs` jobs.
    static func step(after rung: CommitRung, _ outcome: Outcome, jobs: Int) -> Step {
        switch (rung, outcome) {
        case (.oneTrip, .refused):
            return Step(next: .general, forgetsBelief: false)
        case (.oneTrip, .needsKeyLookup), (.general, .needsKeyLookup):
            return Step(next: .keyLookup, forgetsBelief: false)
        case (_, .outage):
            return Step(next: nil, forgetsBelief: true)
        case (_, .streamTooLarge):
            return Step(next: jobs > 1 ? .oneByOne : nil, forgetsBelief: false)
        case (_, .statementFailed), (.keyLookup, .needsKeyLookup), (_, .refused), (.oneByOne, .needsKeyLookup):
            // With keys looked up a unique violation is a statement error like any other (a concurrent writer
            // outside the lock); the general rungs never refuse. A lone job fails with its own error.
            return Step(next: jobs > 1 ? .oneByOne : nil, forgetsBelief: true)
        }
    }
}
