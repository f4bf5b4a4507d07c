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
func plannedPath(_ camera: [Double], lookahead: Int, margin: Double, timeConstant: Double = 30, jerk: Double = 0, predict: Int = 30, trend: Int = 24, terminal: Double = 0.05) -> [Double] {
    var p = CameraPathPlanner(maxLookahead: lookahead, timeConstant: timeConstant, jerk: jerk, predictFrames: predict, trendFrames: trend, terminal: terminal)
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

    /// One motion: the intended path (what the viewer wants to see), the shake on top, the margin.
    struct Motion: CustomTestStringConvertible, Sendable {
        var name: String
        var intended: [Double]
        var shake: [Double]
        var margin: Double
        /// Whether the intended motion itself is unwanted (walking bounce): judged as jitter.
        var intendedIsJitter = false
        /// Most jitter left with look-ahead 15 (% of the input's).
        var limit15: Double
        var testDescription: String { name }
        var camera: [Double] { zip(intended, shake).map(+) }
    }

    static let n = 300
    static let motions: [Motion] = [
        Motion(name: "hand-held, still", intended: [Double](repeating: 0, count: n), shake: TestMotion.shake(n, a: 0.55, sigma: 3, seed: 1), margin: 32, limit15: 6),
        Motion(name: "slow pan 0.6 px/frame", intended: TestMotion.pan(n, speed: 0.6), shake: TestMotion.shake(n, a: 0.55, sigma: 3, seed: 2), margin: 32, limit15: 6),
        Motion(name: "pan 2 px/frame", intended: TestMotion.pan(n, speed: 2), shake: TestMotion.shake(n, a: 0.55, sigma: 3, seed: 3), margin: 32, limit15: 8),
        Motion(name: "fast pan 4 px/frame", intended: TestMotion.pan(n, speed: 4), shake: TestMotion.shake(n, a: 0.55, sigma: 3, seed: 4), margin: 32, limit15: 8),
        Motion(name: "tilt 2 px/frame (vertical margin)", intended: TestMotion.pan(n, speed: 2), shake: TestMotion.shake(n, a: 0.55, sigma: 3, seed: 5), margin: 18, limit15: 8),
        Motion(name: "pan that starts and stops", intended: TestMotion.pan(n, speed: 3, still: 40, ramp: 15, hold: 60), shake: TestMotion.shake(n, a: 0.55, sigma: 3, seed: 6), margin: 32, limit15: 8),
        Motion(name: "walking bounce 1.8 Hz, 4 px", intended: (0..<n).map { 4 * sin(2 * Double.pi * 1.8 * Double($0) / 30) }, shake: TestMotion.shake(n, a: 0.55, sigma: 2, seed: 7), margin: 18, intendedIsJitter: true, limit15: 6),
        Motion(name: "walking bounce 1.5 Hz, 6 px", intended: (0..<n).map { 6 * sin(2 * Double.pi * 1.5 * Double($0) / 30 + 1) }, shake: TestMotion.shake(n, a: 0.55, sigma: 2, seed: 10), margin: 18, intendedIsJitter: true, limit15: 6),
        Motion(name: "slowly decaying shake (AR 0.95)", intended: [Double](repeating: 0, count: n), shake: TestMotion.shake(n, a: 0.95, sigma: 5, seed: 8), margin: 18, limit15: 12),
        Motion(name: "quickly decaying shake (AR 0.2)", intended: [Double](repeating: 0, count: n), shake: TestMotion.shake(n, a: 0.2, sigma: 3, seed: 9), margin: 18, limit15: 5),
    ]

    /// The shake that gets through: the plan on the shaken camera minus the plan on the intended
    /// motion alone (a pan's own start and stop are not jitter), over the shake; for a walking
    /// bounce, where the intended motion is itself unwanted, the plan's jitter over the camera's.
    static func jitterLeft(_ m: Motion, lookahead: Int) -> (percent: Double, worstOffset: Double) {
        let c = m.camera
        let p = plannedPath(c, lookahead: lookahead, margin: m.margin)
        let worst = zip(p, c).map { abs($0 - $1) }.max()!
        if m.intendedIsJitter { return (highFrequencyRMS(p) / highFrequencyRMS(c) * 100, worst) }
        let clean = plannedPath(m.intended, lookahead: lookahead, margin: m.margin)
        return (highFrequencyRMS(zip(p, clean).map(-)) / highFrequencyRMS(m.shake) * 100, worst)
    }

    @Test("pans, tilts, start/stop, walking bounce, slow and fast shake: jitter removed, crop never exceeded, look-ahead 0 never worse", arguments: motions)
    func motion(_ m: Motion) {
        var line = m.name + ":"
        var left: [Int: Double] = [:]
        for lookahead in [0, 5, 15] {
            let (pct, worst) = Self.jitterLeft(m, lookahead: lookahead)
            left[lookahead] = pct
            line += String(format: " look-ahead %d %.1f %% (largest correction %.1f of %.0f px)", lookahead, pct, worst, m.margin)
            // The crop window is a hard limit of the plan.
            #expect(worst <= m.margin + 1e-6, "\(m.name), look-ahead \(lookahead): correction \(worst) beyond the margin \(m.margin)")
            // Even with no delay the output is never shakier than the input.
            #expect(pct < 100, "\(m.name), look-ahead \(lookahead): \(pct) % of the jitter left")
        }
        print(line)
        #expect(left[15]! <= m.limit15, "\(m.name): \(left[15]!) % left with look-ahead 15 (limit \(m.limit15) %)")
        // More look-ahead does not make it worse (small slack for the different windows).
        #expect(left[15]! <= left[0]! + 1, "\(m.name): look-ahead 15 \(left[15]!) % vs 0 \(left[0]!) %")
    }

    /// The issue's own measure on the planner alone: the planned path minus its 15-frame moving
    /// average, over the camera's (a pan's ramps count on both sides).
    ///
    /// A pan's own start and stop count as jitter here, so even a path that follows the intended
    /// pan exactly leaves some (fast pan 4 px/frame with a 10-frame ramp: 21.5 %; a pan that starts
    /// and stops: 21.1 %); a path that removes them must start turning before the pan does, which
    /// look-ahead 15 allows only in part. So: shake, bounce and drift ≤ 8 % at look-ahead 15, and
    /// every pan below what following the intended motion exactly would leave.
    @Test("the issue's measure (path minus its 15-frame moving average): shake ≤ 8 %, pans below following the intention exactly", arguments: motions)
    func issueMeasure(_ m: Motion) {
        let c = m.camera
        let camera = highFrequencyRMS(c)
        let followingIntention = m.intendedIsJitter ? 100 : highFrequencyRMS(m.intended) / camera * 100
        var line = m.name + String(format: ": following the intention exactly %.1f %%;", followingIntention)
        var left: [Int: Double] = [:]
        for lookahead in [0, 5, 15] {
            let p = plannedPath(c, lookahead: lookahead, margin: m.margin)
            left[lookahead] = highFrequencyRMS(p) / camera * 100
            line += String(format: " look-ahead %d %.1f %%", lookahead, left[lookahead]!)
            #expect(left[lookahead]! < 100, "\(m.name), look-ahead \(lookahead): worse than the camera")
        }
        print(line)
        if followingIntention < 1 || m.intendedIsJitter {
            #expect(left[15]! <= 8, "\(m.name): \(left[15]!) % left at look-ahead 15")
        } else {
            #expect(left[15]! < followingIntention, "\(m.name): \(left[15]!) % left at look-ahead 15, following the intention exactly leaves \(followingIntention) %")
        }
    }

    /// At look-ahead 15 a fast pan's start is seen only 15 frames ahead, and whether it goes on is
    /// not (`scripts/stabilise_planner_whatif.py`: given the camera beyond the look-ahead, the same
    /// planner leaves 7 % on these pans). With 45 frames of look-ahead (a 1.5 s delay, for
    /// recording) it knows: on this one-axis measure over 300 frames the fast pan falls from
    /// 15.6 to 3.2 % and the pan that starts and stops from 17.5 to 8.9 % (it is shown below 8 % on
    /// both axes, as the report measures, in the README); no motion gets worse than at 15.
    @Test("look-ahead 45: the fast pans' jitter halved, no motion worse than at 15", arguments: motions)
    func longLookahead(_ m: Motion) {
        let c = m.camera
        let camera = highFrequencyRMS(c)
        let p15 = plannedPath(c, lookahead: 15, margin: m.margin), p45 = plannedPath(c, lookahead: 45, margin: m.margin)
        let left15 = highFrequencyRMS(p15) / camera * 100, left45 = highFrequencyRMS(p45) / camera * 100
        let worst = zip(p45, c).map { abs($0 - $1) }.max()!
        print(m.name + String(format: ": look-ahead 15 %.1f %%, 45 %.1f %% (largest correction %.1f of %.0f px)", left15, left45, worst, m.margin))
        #expect(worst <= m.margin + 1e-6, "\(m.name): correction \(worst) beyond the margin \(m.margin)")
        #expect(left45 <= left15 + 0.5, "\(m.name): look-ahead 45 leaves \(left45) %, 15 leaves \(left15) %")
        if m.name.contains("4 px/frame") || m.name.contains("starts and stops") {
            #expect(left45 <= 0.6 * left15, "\(m.name): \(left45) % left at look-ahead 45, \(left15) % at 15")
        }
    }

    @Test("a steady pan is followed without lag: the plan's offset from the camera stays small once under way")
    func steadyPanNoLag() {
        // The pull toward the camera has a time constant of 30 frames (the stage's default
        // `smoothing`): a pan that started from rest is caught up within about four of them.
        let c = TestMotion.pan(240, speed: 5, still: 0, ramp: 1)
        for lookahead in [0, 15] {
            let p = plannedPath(c, lookahead: lookahead, margin: 32)
            let lag = zip(p, c).dropFirst(120).map { abs($0 - $1) }.max()!
            #expect(lag < 1, "look-ahead \(lookahead): lag \(lag) px on a 5 px/frame pan")
        }
    }

    @Test("the plan joins the path already shown: no jump when the crop cut a frame's correction")
    func joinsShownPath() {
        var p = CameraPathPlanner(maxLookahead: 5, timeConstant: 14)
        var shown: [Double] = []
        for t in 0..<40 {
            let v = p.plan(known: 6, camera: { Double(t + $0) * 0.0 }, margin: { _ in 10 }, past: t)
            // Frames 10–12 were cut to 3 px off the plan by the caller's own check.
            let s = (10...12).contains(t) ? v + 3 : v
            p.record(shown: s)
            shown.append(s)
        }
        // Afterwards the path carries on from what was shown (its speed, 3 px/frame, included) and
        // eases back: no step larger than the cut's own, and it never leaves the box.
        // (Frame 13 is where the caller stopped cutting: that step is its own.)
        let steps = zip(shown.dropFirst(14), shown.dropFirst(13)).map { abs($0 - $1) }
        #expect(steps.max()! <= 3 + 1e-9, "steps after the cut: \(steps)")
        #expect(shown.dropFirst(13).allSatisfy { abs($0) <= 10 + 1e-9 })
        // Consecutive steps change gently (no kink where the plan takes over again).
        let kinks = zip(steps.dropFirst(), steps).map { abs($0 - $1) }
        #expect(kinks.max()! < 1, "changes of step: \(kinks)")
    }
}
