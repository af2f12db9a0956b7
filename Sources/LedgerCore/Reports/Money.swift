/// A report figure that does not fit the 128-bit arithmetic reports use: that request is refused with a
/// clear error (422 `report_overflow`); the process never traps.
public struct ReportOverflow: Error, Sendable, Hashable, CustomStringConvertible {
    public var what: String
    public init(what: String) { self.what = what }
    public var description: String { "\(what) does not fit in 128-bit arithmetic" }
}

/// Exact integer arithmetic for money: every amount is minor units, rounded once, half up.
public enum Money {
    /// `round_half_up(numerator / denominator)` for a positive denominator.
    ///
    /// Written without `2 × numerator` so that it cannot overflow for any 128-bit numerator: floor
    /// division, then one more when the remainder is at least half the denominator.
    public static func roundHalfUp(_ numerator: Int128, _ denominator: Int128) -> Int128 {
        guard denominator > 0 else { return 0 }
        // Most figures fit in 64 bits, where one hardware division gives both parts (128-bit division is a
        // library call per part, and the rebuild divides once per transaction and day).
        if let n = Int64(exactly: numerator), let d = Int64(exactly: denominator) {
            var (q, r) = n.quotientAndRemainder(dividingBy: d)
            if r < 0 {
                q -= 1
                r += d
            }
            return Int128(r >= d - r ? q + 1 : q)
        }
        var q = numerator / denominator
        var r = numerator % denominator
        if r < 0 {
            q -= 1
            r += denominator
        }
        // r ≥ d − r ⇔ r ≥ d/2 (half up), without doubling r.
        return r >= denominator - r ? q + 1 : q
    }

    /// `round_half_up(amount × rate)` where `rate` is a decimal text such as `"0.30"` (a commission rate).
    /// Rates are read to 18 decimals, so `amount × units` stays below 2^63 × 10^18 < 2^127; a rate outside
    /// 0…1 (never accepted, but stored events are not re-validated) gives 0 rather than a wider product.
    public static func commission(_ amount: Int64, rate: String) -> Int64 {
        guard let (units, scale) = decimal(rate), units <= scale else { return 0 }
        return Int64(truncatingIfNeeded: roundHalfUp(Int128(amount) * units, scale))
    }

    /// A non-negative decimal text as `units / scale` (`"0.30"` → 30/100); nil if it is not one.
    static func decimal(_ text: String) -> (Int128, Int128)? {
        if let plain = plainDecimal(text) { return plain }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, let whole = Int128(parts[0]), whole >= 0 else { return nil }
        let fraction = parts.count == 2 ? parts[1] : ""
        guard whole <= 1_000_000_000_000_000_000, fraction.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        // Digits past the 18th are dropped: they move no amount below 2^63 by a whole minor unit's half.
        let kept = fraction.prefix(18)
        var scale: Int128 = 1
        for _ in kept { scale *= 10 }
        return (whole * scale + (Int128(kept) ?? 0), scale)
    }

    /// `digits[.digits]` with at most 18 digits on each side, read byte by byte (a commission rate per
    /// transaction in every fold); anything else goes to the general reading above.
    private static func plainDecimal(_ text: String) -> (Int128, Int128)? {
        var whole: Int64 = 0
        var fraction: Int64 = 0
        var scale: Int64 = 1
        var wholeDigits = 0
        var fractionDigits = 0
        var dot = false
        for byte in text.utf8 {
            if byte == UInt8(ascii: ".") {
                guard !dot else { return nil }
                dot = true
            } else if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                let digit = Int64(byte - UInt8(ascii: "0"))
                if dot {
                    fractionDigits += 1
                    guard fractionDigits <= 18 else { return nil }
                    fraction = fraction * 10 + digit
                    scale *= 10
                } else {
                    wholeDigits += 1
                    guard wholeDigits <= 18 else { return nil }
                    whole = whole * 10 + digit
                }
            } else {
                return nil
            }
        }
        guard wholeDigits > 0 else { return nil }
        return (Int128(whole) * Int128(scale) + Int128(fraction), Int128(scale))
    }

    static func gcd(_ a: Int128, _ b: Int128) -> Int128 {
        var (a, b) = (a.magnitude, b.magnitude)
        while b != 0 { (a, b) = (b, a % b) }
        return Int128(a)
    }
}

/// A price normalised to one month, kept as an exact fraction so that MRR sums it before rounding.
public struct MonthlyAmount: Sendable, Hashable {
    public var numerator: Int128
    public var denominator: Int128

    public init(numerator: Int128, denominator: Int128) {
        let g = Money.gcd(numerator, denominator)
        self.numerator = g > 1 ? numerator / g : numerator
        self.denominator = g > 1 ? denominator / g : denominator
    }

    /// `price` for one `period` (ISO 8601) as a monthly amount (docs/semantics.md section 5): `PnW`×52/(12n),
    /// `PnM`/n, `PnY`/(12n), `PnD`×30.4375/n; mixed durations add their parts in months the same way.
    public init?(price: Int64, period text: String) {
        if text.hasPrefix("P"), text.hasSuffix("W"), let n = Int(text.dropFirst().dropLast()), n > 0 {
            self.init(numerator: Int128(price) * 52, denominator: 12 * Int128(n))
            return
        }
        guard let d = ISODuration(text) else { return nil }
        // Months in the duration as a fraction over 487 × 86,400 (a day is 16/487 of a month: 30.4375 days).
        let scale: Int128 = 487 * 86_400
        let months = Int128(d.months) * scale + Int128(d.days) * 16 * 86_400 + Int128(d.seconds) * 16
        guard months > 0 else { return nil }
        self.init(numerator: Int128(price) * scale, denominator: months)
    }

    /// The exact sum of monthly amounts, rounded once (half up) to minor units.
    ///
    /// Checked throughout: hostile periods (`P999983D`, `P999979D`, …) have denominators whose least common
    /// multiple outgrows 128 bits; that sum is refused with `ReportOverflow`, never a trap.
    public static func roundedSum<S: Sequence>(_ amounts: S) throws(ReportOverflow) -> Int128 where S.Element == MonthlyAmount {
        var byDenominator: [Int128: Int128] = [:]
        for a in amounts {
            let (sum, overflow) = byDenominator[a.denominator, default: 0].addingReportingOverflow(a.numerator)
            guard !overflow else { throw ReportOverflow(what: "the sum of monthly amounts") }
            byDenominator[a.denominator] = sum
        }
        var total = MonthlyAmount(numerator: 0, denominator: 1)
        for den in byDenominator.keys.sorted() {
            total = try total.adding(MonthlyAmount(numerator: byDenominator[den]!, denominator: den))
        }
        return Money.roundHalfUp(total.numerator, total.denominator)
    }

    /// `l + r` over the least common denominator, or `ReportOverflow` when it does not fit in 128 bits.
    func adding(_ r: MonthlyAmount) throws(ReportOverflow) -> MonthlyAmount {
        let l = self
        let g = Money.gcd(l.denominator, r.denominator)
        let overflow = ReportOverflow(what: "the sum of monthly amounts over periods of incompatible lengths")
        let (lcm, o1) = (l.denominator / g).multipliedReportingOverflow(by: r.denominator)
        let (a, o2) = l.numerator.multipliedReportingOverflow(by: lcm / l.denominator)
        let (b, o3) = r.numerator.multipliedReportingOverflow(by: lcm / r.denominator)
        guard !o1, !o2, !o3 else { throw overflow }
        let (n, o4) = a.addingReportingOverflow(b)
        guard !o4 else { throw overflow }
        return MonthlyAmount(numerator: n, denominator: lcm)
    }
}
