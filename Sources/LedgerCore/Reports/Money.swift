/// Exact integer arithmetic for money: every amount is minor units, rounded once, half up.
public enum Money {
    /// `round_half_up(numerator / denominator)` for a positive denominator.
    public static func roundHalfUp(_ numerator: Int128, _ denominator: Int128) -> Int128 {
        precondition(denominator > 0)
        let twice = 2 * numerator + denominator
        let q = twice / (2 * denominator)
        return (twice % (2 * denominator) < 0) ? q - 1 : q
    }

    /// `round_half_up(amount × rate)` where `rate` is a decimal text such as `"0.30"` (a commission rate).
    public static func commission(_ amount: Int64, rate: String) -> Int64 {
        guard let (units, scale) = decimal(rate) else { return 0 }
        return Int64(roundHalfUp(Int128(amount) * units, scale))
    }

    /// A non-negative decimal text as `units / scale` (`"0.30"` → 30/100); nil if it is not one.
    static func decimal(_ text: String) -> (Int128, Int128)? {
        if let plain = plainDecimal(text) { return plain }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, let whole = Int128(parts[0]), whole >= 0 else { return nil }
        let fraction = parts.count == 2 ? parts[1] : ""
        guard fraction.count <= 30, fraction.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        var scale: Int128 = 1
        for _ in fraction { scale *= 10 }
        return (whole * scale + (Int128(fraction) ?? 0), scale)
    }

    /// `digits[.digits]` with at most 18 digits on each side, read byte by byte (a commission rate per
    /// transaction in every fold); anything else goes to the general reading above.
    private static func plainDecimal(_ text: String) -> (Int128, Int128)? {
        var whole: Int64 = 0, fraction: Int64 = 0, scale: Int64 = 1
        var wholeDigits = 0, fractionDigits = 0, dot = false
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
    public static func roundedSum<S: Sequence>(_ amounts: S) -> Int64 where S.Element == MonthlyAmount {
        var byDenominator: [Int128: Int128] = [:]
        for a in amounts { byDenominator[a.denominator, default: 0] += a.numerator }
        var total = MonthlyAmount(numerator: 0, denominator: 1)
        for (den, num) in byDenominator { total = total + MonthlyAmount(numerator: num, denominator: den) }
        return Int64(Money.roundHalfUp(total.numerator, total.denominator))
    }

    static func + (l: MonthlyAmount, r: MonthlyAmount) -> MonthlyAmount {
        let g = Money.gcd(l.denominator, r.denominator)
        let lcm = l.denominator / g * r.denominator
        return MonthlyAmount(numerator: l.numerator * (lcm / l.denominator) + r.numerator * (lcm / r.denominator), denominator: lcm)
    }
}
