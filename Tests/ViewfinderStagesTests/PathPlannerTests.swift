import Testing
import Foundation
@testable import ViewfinderStages

/// Motions of a hand-held camera at 640x360, 30 fps (pixels per frame), for the path planner.
enum TestMotion {
    /// AR(1) shake per frame: coefficient `a`, stationary deviation `sigma`.
    static func shake(_ n: Int, a: Double, sigma: Double, seed: UInt64) -> [Double] {
        var rng = TestRNG(seed)
        var v = 0.0
        let innov = sigma * (1 - a * a).squareRoot()
        return (0..<n).map { _ in v = a * v + innov * rng.gaussian(); return v }
    }
    /// Still for `still` frames, then up to `speed` px/frame over `ramp` frames, held for
    /// `hold` frames, down to rest over `ramp` frames.
    static func pan(_ n: Int, speed: Double, still: Int = 20, ramp: Int = 10, hold: Int = 10_000) -> [Double] {
        var x = 0.0
        return (0..<n).map { i in
            let t = i - still
            let v: Double
            if t < 0 { v = 0 } else if t < ramp { v = speed * Double(t) / Double(ramp) } else if t < ramp + hold { v = speed } else { v = speed * max(0, 1 - Double(t - ramp - hold) / Double(ramp)) }
            x += v
            return x
        }
    }
}

/// Runs the planner as the stage does: frame t is planned when frames up to t + lookahead are
/// known (fewer at the end), and shown as planned.
func plannedPath(_ camera: [Double], lookahead: Int, margin: Double, timeConstant: Double = 14, jerk: Double = 0, predict: Int = 10, trend: Int = 8) -> [Double] {
    var p = CameraPathPlanner(maxLookahead: lookahead, timeConstant: timeConstant, jerk: jerk, predictFrames: predict, trendFrames: trend)
    var out: [Double] = []
    for t in camera.indices {
        let known = min(lookahead, camera.count - 1 - t) + 1
        let v = p.plan(known: known, camera: { camera[t + $0] }, margin: { _ in margin }, past: t)
        p.record(shown: v)
        out.append(v)
    }
    return out
}

@Suite("Camera path planner")
struct PathPlannerTests {
    @Test("box QP: the exact optimum with bounds, from any start")
    func boxQP() {
        // min Σ (x_i − t_i)² + (x_{i+1} − x_i)² with 0 ≤ x ≤ 1: targets outside the box.
        var qp = BoxQP(capacity: 6)
        let t: [Double] = [-1, 2, 0.5, 0.5, 3, -2]
        qp.reset(6)
        for i in 0..<6 {
            qp.addDiagonal(i, weight: 1, target: t[i]); qp.lo[i] = 0; qp.hi[i] = 1; qp.x[i] = 0.5
        }
        for i in 0..<5 { qp.addSquare(weight: 1, first: i, [-1, 1], from: 0, constant: 0) }
        qp.solve(6, maxIterations: 30)
        // KKT: interior variables have zero gradient, bound ones a gradient pointing out.
        for i in 0..<6 {
            var g = 2 * (qp.x[i] - t[i])
            if i > 0 { g += 2 * (qp.x[i] - qp.x[i - 1]) }
            if i < 5 { g += 2 * (qp.x[i] - qp.x[i + 1]) }
            if qp.x[i] <= 1e-9 { #expect(g >= -1e-6, "x\(i) at 0, gradient \(g)") } else if qp.x[i] >= 1 - 1e-9 { #expect(g <= 1e-6, "x\(i) at 1, gradient \(g)") } else { #expect(abs(g) < 1e-6, "x\(i) = \(qp.x[i]) interior, gradient \(g)") }
            #expect(qp.x[i] >= 0 && qp.x[i] <= 1)
        }
    }

    @Test("tuning print")
    func tuning() {
        let n = 300
        let cases: [(String, [Double], Double)] = [
            ("still", TestMotion.shake(n, a: 0.55, sigma: 3, seed: 1), 32),
            ("pan 0.6", zip(TestMotion.pan(n, speed: 0.6), TestMotion.shake(n, a: 0.55, sigma: 3, seed: 2)).map(+), 32),
            ("pan 2", zip(TestMotion.pan(n, speed: 2), TestMotion.shake(n, a: 0.55, sigma: 3, seed: 3)).map(+), 32),
            ("pan 4", zip(TestMotion.pan(n, speed: 4), TestMotion.shake(n, a: 0.55, sigma: 3, seed: 4)).map(+), 32),
            ("tilt 2 y", zip(TestMotion.pan(n, speed: 2), TestMotion.shake(n, a: 0.55, sigma: 3, seed: 5)).map(+), 18),
            ("start/stop 3", zip(TestMotion.pan(n, speed: 3, still: 40, ramp: 15, hold: 60), TestMotion.shake(n, a: 0.55, sigma: 3, seed: 6)).map(+), 32),
            ("walk 1.8Hz y", zip((0..<n).map { 4 * sin(2 * Double.pi * 1.8 * Double($0) / 30) }, TestMotion.shake(n, a: 0.55, sigma: 2, seed: 7)).map(+), 18),
            ("slow decay", TestMotion.shake(n, a: 0.95, sigma: 5, seed: 8), 18),
            ("fast decay", TestMotion.shake(n, a: 0.2, sigma: 3, seed: 9), 18),
        ]
        let env = ProcessInfo.processInfo.environment
        let tcs = (env["PP_TC"] ?? "14").split(separator: ",").map { Double($0)! }
        let trends = (env["PP_TREND"] ?? "8").split(separator: ",").map { Int($0)! }
        let predicts = (env["PP_PREDICT"] ?? "10").split(separator: ",").map { Int($0)! }
        let jerks = (env["PP_JERK"] ?? "0").split(separator: ",").map { Double($0)! }
        for tc in tcs { for tr in trends { for pr in predicts { for jk in jerks {
            var sum = [0.0, 0.0, 0.0]
            for (name, c, m) in cases {
                var s = "tc \(tc) trend \(tr) predict \(pr) jerk \(jk) \(name):"
                for (li, L) in [0, 5, 15].enumerated() {
                    let p = plannedPath(c, lookahead: L, margin: m, timeConstant: tc, jerk: jk, predict: pr, trend: tr)
                    let r = highFrequencyRMS(p) / highFrequencyRMS(c) * 100
                    let worst = zip(p, c).map { abs($0 - $1) }.max()!
                    s += String(format: " L%d %.1f%% (edge %.1f)", L, r, worst)
                    sum[li] += r
                }
                if env["PP_QUIET"] == nil { print(s) }
            }
            print(String(format: "tc %.0f trend %d predict %d jerk %.1f MEAN L0 %.1f L5 %.1f L15 %.1f", tc, tr, pr, jk, sum[0] / Double(cases.count), sum[1] / Double(cases.count), sum[2] / Double(cases.count)))
        } } } }
    }
}
