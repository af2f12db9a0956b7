import Foundation
import LedgerStore
import Synchronization

/// Remembers which presented secrets were valid keys for a few seconds, so a request does not cost a
/// database round trip just to learn its role.
///
/// Keys are revoked by the CLI in another process, so the cache cannot be told: a revoked key keeps working
/// for at most `ttl` after the revocation commits (SECURITY.md). Only successes are cached: an unknown
/// secret is looked up every time (a new key works at once, and random guesses cannot fill the memory).
/// Entries are keyed by the secret's SHA-256, never the secret, and the cache is bounded.
///
/// A key in use never expires under its requests: in the last quarter of an entry's life, one request
/// checks the key again while the others go on with the entry, which is still within the bound. Without
/// this, every expiry sent each request arriving until the first answer to the database (a burst of
/// look-ups every `ttl` for a busy key).
final class APIKeyCache: Sendable {
    private struct Entry {
        var key: APIKey
        var expires: ContinuousClock.Instant
        /// A request is checking the key again ahead of `expires`.
        var refreshing = false
    }

    let ttl: Duration
    let capacity: Int
    private let entries = Mutex<[[UInt8]: Entry]>([:])

    init(ttl: Duration, capacity: Int = 10_000) {
        self.ttl = ttl
        self.capacity = capacity
    }

    /// The key for `secret`: from the cache while fresh, else from `keys` (and cached if active).
    func authenticate(_ secret: String, keys: APIKeyStore) async throws -> APIKey? {
        guard ttl > .zero else { return try await keys.authenticate(secret) }
        let digest = APIKeyStore.hash(secret)
        let now = ContinuousClock.now
        let (hit, refresh) = entries.withLock { entries -> (APIKey?, Bool) in
            guard var entry = entries[digest], entry.expires > now else { return (nil, false) }
            guard !entry.refreshing, entry.expires - now <= ttl / 4 else { return (entry.key, false) }
            entry.refreshing = true
            entries[digest] = entry
            return (entry.key, true)
        }
        if let hit, !refresh { return hit }
        let key: APIKey?
        do {
            key = try await keys.authenticate(secret)
        } catch {
            // A failed early check keeps the entry, still valid, for the next request to try again.
            guard let hit else { throw error }
            entries.withLock { entries in entries[digest]?.refreshing = false }
            return hit
        }
        guard let key else {
            entries.withLock { _ = $0.removeValue(forKey: digest) }
            return nil
        }
        let expires = now.advanced(by: ttl)
        entries.withLock { entries in
            if entries.count >= capacity && entries[digest] == nil { entries.removeAll(keepingCapacity: true) }
            entries[digest] = Entry(key: key, expires: expires)
        }
        return key
    }
}
