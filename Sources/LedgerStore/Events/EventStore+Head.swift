extension EventStore {
    /// The highest position visible now: events an append answers above it are new, those at or below it
    /// were already stored (an import's count of what it added, whatever else appends meanwhile).
    public func head() async throws -> Int64 {
        try await ReadRouter.head(of: database)
    }
}
