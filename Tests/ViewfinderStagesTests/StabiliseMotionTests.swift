import Testing
import ViewfinderTestSupport
import Foundation
import Viewfinder
@testable import ViewfinderStages

/// The stage on rendered frames with the camera motions the planner is for: the frames carry the
/// truth, the corrections are checked against it, and the pictures themselves are measured.
@Suite("Stabilisation: camera motions on pictures")
struct StabiliseMotionTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        /// Intended motion per frame (x, y) in pixels at 320x240.
        var intended: @Sendable (Int) -> (Double, Double)
        var lowTexture = false
        var limit: Double
        /// The stage's look-ahead.
        var lookahead = 15
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "pan 1 px/frame that starts and stops", intended: { i in (TestMotion.pan(i + 1, speed: 1, still: 20, ramp: 15, hold: 50).last!, 0) }, limit: 10),
        Case(name: "tilt 0.6 px/frame", intended: { i in (0, TestMotion.pan(i + 1, speed: 0.6, still: 10, ramp: 15).last!) }, limit: 10),
        Case(name: "walking bounce 1.8 Hz, 2 px", intended: { i in (0, 2 * sin(2 * Double.pi * 1.8 * Double(i) / 30)) }, limit: 10),
        Case(name: "low texture (sky, cables, horizon) while panning 0.5 px/frame", intended: { i in (TestMotion.pan(i + 1, speed: 0.5, still: 10, ramp: 15).last!, 0) }, lowTexture: true, limit: 12),
        // A fast pan (2 px/frame at 320x240 is 4 px/frame at 640x360) starting after 20 frames:
        // at look-ahead 15 its start leaves 13.2 %; 45 frames see the pan go on, and the path
        // eases into it (4.0 %), as a plan that knew the future would.
        Case(name: "fast pan 2 px/frame, look-ahead 15", intended: { i in (TestMotion.pan(i + 1, speed: 2, still: 20, ramp: 10).last!, 0) }, limit: 16),
        Case(name: "fast pan 2 px/frame, look-ahead 45 (frames held for 1.5 s)", intended: { i in (TestMotion.pan(i + 1, speed: 2, still: 20, ramp: 10).last!, 0) }, limit: 8, lookahead: 45),
    ]

    /// A sky with three thin cables and a soft horizon (the low-texture scene of the estimator's test).
    static func sky(_ x: Double, _ y: Double) -> Double {
        var v = 150 + 0.04 * x - 0.03 * y
        for (a, b, c) in [(0.45, 0.89, -230.0), (-0.8, 0.6, 60.0), (0.99, -0.14, -380.0)] {
            let d = a * x + b * y + c
            v -= 70 * exp(-d * d / (2 * 1.3 * 1.3))
        }
        return v + 35 * tanh((y - 290) / 2)
    }

    @Test("the stage follows intended motion and removes the shake, no border ever shows", arguments: cases)
    func motion(_ c: Case) throws {
        let f = FrameFormat(.grey, width: 320, height: 240)
        let n = 100
        let tex = TestTexture(width: 520, height: 340, seed: 31)
        let shakeX = TestMotion.shake(n, a: 0.55, sigma: 1.5, seed: 41), shakeY = TestMotion.shake(n, a: 0.55, sigma: 1.5, seed: 42)
        var rng = TestRNG(7)
        var frames: [Frame] = [], tx: [Double] = [], ty: [Double] = [], ix: [Double] = [], iy: [Double] = []
        for i in 0..<n {
            let (px, py) = c.intended(i)
            // The scene moves opposite to the camera; the sky scene is placed off-centre so the
            // cables cross the view.
            let x = -px + shakeX[i], y = -py + shakeY[i]
            tx.append(x); ty.append(y); ix.append(-px); iy.append(-py)
            let fr = Frame(capacity: f.maxByteCount, format: f)
            if c.lowTexture {
                var r = rng
                fill(fr) { u, v in UInt8(max(0, min(255, (Self.sky(Double(u) - x + 60, Double(v) - y + 120) + 1.5 * r.gaussian()).rounded()))) }
                rng = r
            } else {
                render(tex, into: fr, dx: x, dy: y, noise: 1, rng: &rng)
            }
            fr.sequence = UInt64(i)
            fr.retain()
            frames.append(fr)
        }
        var o = StabiliseOptions()
        o.lookahead = c.lookahead
        let stage = StabiliseStage(options: o)
        try stage.prepare(format: f, context: StageContext(format: f))
        let out = runHolding(stage, frames)
        #expect(out.count == n)
        // Books: truth + correction is the path shown.
        let rx = out.map { tx[Int($0.sequence)] + $0.metadata.correction!.dx }
        let ry = out.map { ty[Int($0.sequence)] + $0.metadata.correction!.dy }
        // Jitter of the shown path over the camera's (for a pan, its own start and stop count in
        // both; for walking bounce the bounce is jitter to remove).
        let left = (highFrequencyRMS(rx) + highFrequencyRMS(ry)) / (highFrequencyRMS(tx) + highFrequencyRMS(ty))
        print("\(c.name): \(String(format: "%.1f", left * 100)) % of the jitter left; corrections cut by the crop check: \(stage.coverageCuts)")
        #expect(left * 100 <= c.limit, "\(c.name): \(left * 100) %")
        // The plan keeps the crop inside the picture by itself.
        #expect(stage.coverageCuts <= 2, "\(stage.coverageCuts) frames needed the crop check")
        // The intended motion is followed: over the clip, the shown path stays within the margin
        // of the intended one (no hold that drifts away).
        let marginX = 320 * 0.05, marginY = 240 * 0.05
        for (k, fr) in out.enumerated() where k > 20 {
            let i = Int(fr.sequence)
            #expect(abs(rx[k] - ix[i]) <= marginX + 4 && abs(ry[k] - iy[i]) <= marginY + 4)
        }
        for fr in out { fr.release() }
    }
}
