/// A small seeded random generator (SplitMix64): the same seed gives the same sequence on every platform,
/// which generated ledgers (tests, simulations) need to be reproducible.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    public var state: UInt64

    public init(seed: UInt64) {
        self.state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform integer in `range` (modulo bias is negligible for the small ranges generators use).
    public mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.count))
    }

    public mutating func pick<T>(_ xs: [T]) -> T { xs[int(0...xs.count - 1)] }

    /// A uniform integer in `0..<n`.
    public mutating func below(_ n: Int) -> Int { int(0...n - 1) }
}
