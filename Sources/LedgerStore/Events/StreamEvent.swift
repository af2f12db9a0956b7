import LedgerCore

/// A stored event as an append reads and remembers it: typed for the fold, with the hash the stream's next
/// event chains from.
///
/// An append needs nothing else of the events already in a stream (replays are found by key, not in the
/// stream). Reading them as whole `RecordedEvent`s parsed their data and metadata into JSON trees that the
/// fold then read again to type them, and freed afterwards: a sixth of the server's work in batch appends.
struct StreamEvent: Sendable {
    var fold: FoldEvent
    var hash: [UInt8]

    var subscriberID: String { fold.subscriberID }
    var version: Int64 { fold.version }
    var position: Int64 { fold.position }

    init(fold: FoldEvent, hash: [UInt8]) {
        self.fold = fold
        self.hash = hash
    }

    /// An event this append is writing (its data typed here, once).
    init(_ event: RecordedEvent) {
        self.init(fold: FoldEvent(event), hash: event.hash)
    }
}
