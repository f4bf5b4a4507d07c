#if canImport(Glibc)
import Glibc
#endif

/// Gains applied to a camera's red, green and blue channels to make a grey surface grey
/// (AVFoundation's `AVCaptureDevice.WhiteBalanceGains`). Each gain is at least 1 once
/// ``normalized`` and at most ``WhiteBalanceModel/maxGain``.
public struct WhiteBalanceGains: Sendable, Equatable, Codable, CustomStringConvertible {
    public var redGain: Double
    public var greenGain: Double
    public var blueGain: Double
    public init(redGain: Double, greenGain: Double, blueGain: Double) {
        self.redGain = redGain; self.greenGain = greenGain; self.blueGain = blueGain
    }
    /// The same colour correction with the smallest gain at 1 (AVFoundation's convention: gains
    /// below 1 are not allowed).
    public var normalized: WhiteBalanceGains {
        let m = Swift.min(redGain, greenGain, blueGain)
        guard m > 0 else { return self }
        return WhiteBalanceGains(redGain: redGain / m, greenGain: greenGain / m, blueGain: blueGain / m)
    }
    /// Whether every gain is in 1 ... `maxGain`.
    public func isValid(maxGain: Double = WhiteBalanceModel.maxGain) -> Bool {
        [redGain, greenGain, blueGain].allSatisfy { $0 >= 1 && $0 <= maxGain && $0.isFinite }
    }
    public var description: String { "r \(format3(redGain)) g \(format3(greenGain)) b \(format3(blueGain))" }
}

/// A light's colour as a correlated colour temperature and a tint (AVFoundation's
/// `AVCaptureDevice.WhiteBalanceTemperatureAndTintValues`).
public struct WhiteBalanceTemperatureAndTintValues: Sendable, Equatable, Codable {
    /// Correlated colour temperature, kelvin.
    public var temperature: Double
    /// Shift off the black-body locus, -150 (magenta) ... +150 (green), as AVFoundation's tint.
    public var tint: Double
    public init(temperature: Double, tint: Double = 0) { self.temperature = temperature; self.tint = tint }
}

/// How colour temperature, picture cast and white-balance gains relate — one model shared by the
/// sim camera (which renders a light of `colortemp` kelvin through it) and the `white_balance`
/// stage (which estimates the light and corrects with it), so the two agree by construction.
///
/// A light of temperature `T` seen by a camera balanced for `W` leaves a cast along the black-body
/// locus of `Δ = 10⁶/W − 10⁶/T` mired: in 8-bit YCbCr, each pixel's chroma moves by
/// `Cb += κ·Δ·Y`, `Cr −= κ·Δ·Y` with ``chromaPerMired`` `κ` = 0.0006 (a light 141 mired warmer
/// than the balance — 3000 K under a 5200 K balance — gives a grey of luma 128 a Cb of 117 and a
/// Cr of 139). Tint moves both chroma channels the same way (green: both down).
///
/// Gains are the linear-RGB form of that correction, referred to the sensor's native white
/// ``nativeTemperature`` (gains 1, 1, 1): for a light `T`, `ln(r/g) = −Δn·κ/0.713`,
/// `ln(b/g) = Δn·κ/0.564` with `Δn = 10⁶/T − 10⁶/nativeTemperature` (0.564 and 0.713 are BT.601's
/// Cb and Cr scales, so a small gain change gives the same chroma shift as the cast above), and
/// tint scales green by `exp(−tint·tintPerUnit)`. The map is exact both ways.
public enum WhiteBalanceModel {
    /// Chroma shift per mired of cast, as a fraction of luma (see the type's description).
    public static let chromaPerMired = 0.0006
    /// Green gain change per unit of tint, natural log.
    public static let tintPerUnit = 0.001
    /// The temperature at which the sensor needs no gains (the sim camera's default light), K.
    public static let nativeTemperature = 5200.0
    /// Largest gain (AVFoundation's `maxWhiteBalanceGain`).
    public static let maxGain = 4.0
    /// Temperatures the model covers, K.
    public static let temperatureRange: ClosedRange<Double> = 1500...15000

    /// The cast, mired, a light of `light` K leaves on a picture balanced for `balance` K.
    @inlinable
    public static func castMired(light: Double, balance: Double) -> Double { 1e6 / balance - 1e6 / light }

    /// The light's temperature, K, from the cast (mired) of a picture balanced for `balance` K.
    @inlinable
    public static func light(castMired: Double, balance: Double) -> Double {
        let m = 1e6 / balance - castMired
        return m > 1e6 / temperatureRange.upperBound ? 1e6 / m : temperatureRange.upperBound
    }

    /// The gains that neutralise a light of the given temperature and tint (normalised: the
    /// smallest is 1).
    public static func gains(for v: WhiteBalanceTemperatureAndTintValues) -> WhiteBalanceGains {
        let dn = 1e6 / v.temperature - 1e6 / nativeTemperature
        let lr = -dn * chromaPerMired / 0.713, lb = dn * chromaPerMired / 0.564
        let lg = -v.tint * tintPerUnit
        return WhiteBalanceGains(redGain: exp(lr), greenGain: exp(lg), blueGain: exp(lb)).normalized
    }

    /// The temperature and tint whose light the gains neutralise (the inverse of ``gains(for:)``).
    public static func temperatureAndTint(for g: WhiteBalanceGains) -> WhiteBalanceTemperatureAndTintValues {
        // ln(r/g) = -a·dn + t·k, ln(b/g) = b·dn + t·k  (a = κ/0.713, b = κ/0.564, k = tintPerUnit).
        let a = chromaPerMired / 0.713, b = chromaPerMired / 0.564
        let x = log(g.redGain / g.greenGain), y = log(g.blueGain / g.greenGain)
        let dn = (y - x) / (a + b)
        let tint = (x + a * dn) / tintPerUnit
        let m = 1e6 / nativeTemperature + dn
        return WhiteBalanceTemperatureAndTintValues(temperature: m > 0 ? 1e6 / m : temperatureRange.upperBound, tint: tint)
    }
}
