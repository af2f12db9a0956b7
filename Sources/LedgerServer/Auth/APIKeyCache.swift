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
final class APIKeyCache: Sendable {
    private struct Entry {
        var key: APIKey
        var expires: ContinuousClock.Instant
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
        if let hit = entries.withLock({ $0[digest] }), hit.expires > now { return hit.key }
        guard let key = try await keys.authenticate(secret) else {
            entries.withLock { _ = $0.removeValue(forKey: digest) }
            return nil
        }
        let expires = now.advanced(by: ttl)
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[digest] = Entry(key: key, expires: expires)
        }
        return key
    }
}
