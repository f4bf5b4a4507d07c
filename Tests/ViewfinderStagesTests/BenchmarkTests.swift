import Testing
import Foundation
import Viewfinder
@testable import ViewfinderStages

@Suite("Stabilisation at 1080p on the sim (VF_STAGE_BENCH=1, release build)", .serialized)
struct StabiliseBenchmarkTests {
    /// The sim's 1080p YUYV stream with hand-shake through the stabiliser: residual jitter against
    /// the truth and the stage's time per frame (printed; the time is not asserted).
    @Test("1080p sim: residual jitter and time per frame", .enabled(if: ProcessInfo.processInfo.environment["VF_STAGE_BENCH"] != nil))
    func sim1080p() throws {
        var sx: [Double] = [], sy: [Double] = [], cx: [Double] = [], cy: [Double] = []
        let log = TimeLog()
        let stage = StabiliseStage(options: StabiliseOptions())
        try runSim("sim:paced=false,shake=3,seed=9", format: .yuyv, width: 1920, height: 1080, frames: 150, stages: [stage], times: log) { _, f in
            let t = f.metadata.truth!, c = f.metadata.correction!
            sx.append(t.shakeX); sy.append(t.shakeY); cx.append(c.dx); cy.append(c.dy)
        }
        let r = (highFrequencyRMS(zip(sx, cx).map { $0 + $1 }) + highFrequencyRMS(zip(sy, cy).map { $0 + $1 })) / (highFrequencyRMS(sx) + highFrequencyRMS(sy))
        let times = log.milliseconds.sorted()
        print("[stage-bench] stabilise on the sim, 1920x1080 YUYV, look-ahead 15: residual HF jitter \(r * 100) %, stage CPU time median \(times[times.count / 2]) ms, p90 \(times[times.count * 9 / 10]) ms")
        #expect(r <= 0.08)
    }
}
