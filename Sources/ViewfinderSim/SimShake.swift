import Viewfinder
#if canImport(Glibc)
import Glibc
#endif

/// Hand-shake as band-limited jitter: per axis, a sum of sinusoids between 0.3 and 6 Hz with random
/// phases and amplitudes falling as 1/f (slow drift dominates, tremor on top), deterministic from
/// the seed and evaluated at the frame's nominal time, so a frame's shake never depends on timing.
/// Translation is scaled to an RMS of `amplitude` pixels per axis; rotation to `amplitude` x 0.0004 rad.
public struct SimShakePath: Sendable, Equatable {
    struct Wave: Sendable, Equatable { var amplitude: Double; var omega: Double; var phase: Double }
    var x: [Wave] = []
    var y: [Wave] = []
    var angle: [Wave] = []
    /// Largest translation the path can reach on either axis, pixels.
    public private(set) var translationBound: Double = 0
    /// Largest rotation the path can reach, radians.
    public private(set) var angleBound: Double = 0

    public init(amplitude: Double, seed: UInt64) {
        guard amplitude > 0 else { return }
        var rng = SplitMix64(seed: seed ^ 0x5AA4E)
        func waves(rms: Double) -> [Wave] {
            var w: [Wave] = []
            for _ in 0..<6 {
                let f = 0.3 * pow(20, rng.unit()) // 0.3 ... 6 Hz, log-uniform
                w.append(Wave(amplitude: (0.5 + rng.unit()) / f, omega: 2 * Double.pi * f, phase: 2 * Double.pi * rng.unit()))
            }
            let current = (w.reduce(0) { $0 + $1.amplitude * $1.amplitude } / 2).squareRoot()
            for i in w.indices { w[i].amplitude *= rms / current }
            return w
        }
        x = waves(rms: amplitude)
        y = waves(rms: amplitude)
        angle = waves(rms: amplitude * 0.0004)
        translationBound = max(x.reduce(0) { $0 + abs($1.amplitude) }, y.reduce(0) { $0 + abs($1.amplitude) })
        angleBound = angle.reduce(0) { $0 + abs($1.amplitude) }
    }

    static func eval(_ w: [Wave], _ t: Double) -> Double { w.reduce(0) { $0 + $1.amplitude * sin($1.omega * t + $1.phase) } }

    /// Shake at time `t` seconds: translation (pixels, positive = content moved right/down) and
    /// rotation (radians, positive = counter-clockwise as seen).
    public func at(_ t: Double) -> (dx: Double, dy: Double, angle: Double) {
        (SimShakePath.eval(x, t), SimShakePath.eval(y, t), SimShakePath.eval(angle, t))
    }
}
