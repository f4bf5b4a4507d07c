import Testing
import Foundation
@testable import ViewfinderBench
@testable import ViewfinderSim
import ViewfinderKit

/// The statistics, the step-response analysis and the report formats, on inputs with known answers.
@Suite struct AnalysisTests {
    @Test func distributionQuantilesAreNearestRank() {
        let d = Distribution((1...100).map(Double.init))
        #expect(d.count == 100)
        #expect(d.p50 == 50)
        #expect(d.p90 == 90)
        #expect(d.p99 == 99)
        #expect(d.max == 100)
        #expect(d.min == 1)
        #expect(abs(d.mean - 50.5) < 1e-9)
        #expect(Distribution([]).count == 0)
    }

    @Test func histogramCountsEverySample() {
        let h = Histogram([1, 1, 2, 3, 3, 3, 10], bins: 9)
        #expect(h.counts.reduce(0, +) == 7)
        #expect(h.counts.first == 2)
        #expect(h.counts.last == 1)
        #expect(Histogram([5, 5, 5]).counts == [3])
    }

    @Test func lineFitResidualIsTheJitter() throws {
        // A 10 ms grid with alternating ±1 ms offsets: slope 10, residual RMS 1.
        let xs = (0..<100).map(Double.init)
        let ys = xs.map { $0 * 10 + (Int($0) % 2 == 0 ? 1 : -1) }
        let f = try #require(LineFit(xs: xs, ys: ys))
        #expect(abs(f.slope - 10) < 0.01)
        #expect(abs(f.residualRMS - 1) < 0.01)
        #expect(LineFit(xs: [1], ys: [1]) == nil)
    }

    @Test func threadStatParsesNamesWithSpacesAndParentheses() throws {
        let line = "1234 (vf-st (a) b) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0 100 0 0"
        let p = try #require(ThreadCPU.parse(stat: line))
        #expect(p.name == "vf-st (a) b")
        #expect(p.utime == 250)
        #expect(p.stime == 75)
        #expect(ThreadCPU.parse(stat: "garbage") == nil)
        #expect(!ThreadCPU.sample().isEmpty)
    }

    /// Samples with a measure that steps from `a` to `b` at `reference + latency`.
    func stepSamples(reference k: UInt64, latency: Int, a: Double, b: Double, noise: Double = 0, count: Int = 30) -> [FrameSample] {
        (0..<UInt64(count)).map { s in
            let v = (s >= k + UInt64(latency) ? b : a) + (s % 2 == 0 ? noise : -noise)
            return FrameSample(sequence: s, timestamp: s * 16_000_000, received: s * 16_000_000 + 1000, consumed: s * 16_000_000 + 2000, measure: v)
        }
    }

    @Test func stepResponseFindsTheFirstChangedFrame() {
        for latency in [1, 3, 5, 9] {
            let step = ControlStep(control: .exposure, name: "exposure_time_absolute", from: 100, to: 200, reference: 6)
            let r = ControlLatencyAnalysis.response(of: step, in: stepSamples(reference: 6, latency: latency, a: 80, b: 140, noise: 0.5), baselineFrames: 4, window: 14, minimumChange: 1)
            #expect(r.latencyFrames == latency, "latency \(latency)")
            #expect(abs(r.baseline - 80) < 0.6)
            #expect(abs(r.settled - 140) < 0.6)
            #expect(r.offsets.first == -3)
        }
        // A step down is found the same way.
        let down = ControlStep(control: .gain, name: "gain", from: 200, to: 100, reference: 6)
        #expect(ControlLatencyAnalysis.response(of: down, in: stepSamples(reference: 6, latency: 2, a: 140, b: 90), baselineFrames: 4, window: 14, minimumChange: 1).latencyFrames == 2)
    }

    @Test func stepResponseWithoutAVisibleChangeSaysSo() {
        let step = ControlStep(control: .exposure, name: "exposure_time_absolute", from: 100, to: 200, reference: 6)
        let r = ControlLatencyAnalysis.response(of: step, in: stepSamples(reference: 6, latency: 2, a: 80, b: 80.5, noise: 2), baselineFrames: 4, window: 14, minimumChange: 1)
        #expect(r.latencyFrames == nil)
        #expect(r.error?.hasPrefix("no visible change") == true)
        let unmade = ControlStep(control: .gain, name: "gain", from: 100, to: 200, reference: nil, error: "device said no")
        #expect(ControlLatencyAnalysis.response(of: unmade, in: [], baselineFrames: 4, window: 14, minimumChange: 1).error == "device said no")
        // Nonsense window sizes are clamped, not a crash.
        #expect(ControlLatencyAnalysis.response(of: step, in: stepSamples(reference: 6, latency: 1, a: 80, b: 120), baselineFrames: 0, window: 0, minimumChange: 1).latencyFrames == nil)
        let result = ControlLatencyAnalysis.result(control: .focus, name: nil, responses: [])
        #expect(result.latencyFrames == nil)
        #expect(result.error == "the device has no focus_absolute control")
    }

    @Test func aLostFrameBeforeTheChangeLeavesTheLatencyUnknown() {
        let step = ControlStep(control: .exposure, name: "exposure_time_absolute", from: 100, to: 200, reference: 6)
        // Frame 8 (+2) lost, the change shows on 9 (+3): it may have shown on 8 already.
        let lost = stepSamples(reference: 6, latency: 3, a: 80, b: 140).filter { $0.sequence != 8 }
        let r = ControlLatencyAnalysis.response(of: step, in: lost, baselineFrames: 4, window: 14, minimumChange: 1)
        #expect(r.latencyFrames == nil)
        #expect(r.error == "frames lost around the change: it shows on frame +3, frame +2 was lost")
        // A frame lost elsewhere does not matter.
        let elsewhere = stepSamples(reference: 6, latency: 3, a: 80, b: 140).filter { $0.sequence != 12 }
        #expect(ControlLatencyAnalysis.response(of: step, in: elsewhere, baselineFrames: 4, window: 14, minimumChange: 1).latencyFrames == 3)
        // The first frame after the reference lost: latency 2 cannot be told from 1.
        let first = stepSamples(reference: 6, latency: 2, a: 80, b: 140).filter { $0.sequence != 7 }
        #expect(ControlLatencyAnalysis.response(of: step, in: first, baselineFrames: 4, window: 14, minimumChange: 1).latencyFrames == nil)
    }

    @Test func framesOfTheNextStepAreNotRead() {
        // The recorder had frame 6 when it set, the capture thread had received 9 (the pipeline
        // runs behind); the stepper moved on 14 frames after 6, and from frame 21 the recorder
        // measures the next step's picture measure (another scale).
        var samples = stepSamples(reference: 9, latency: 5, a: 150, b: 189, count: 40)
        for i in samples.indices where samples[i].sequence > 20 { samples[i].measure = 441 }
        for i in samples.indices { samples[i].received = samples[i].sequence * 16_000_000 + 1000 }
        var step = ControlStep(control: .gain, name: "gain", from: 100, to: 200, reference: 6)
        step.setTime = 9 * 16_000_000 + 5000
        let r = ControlLatencyAnalysis.response(of: step, in: samples, baselineFrames: 4, window: 14, minimumChange: 1)
        #expect(r.referenceSequence == 9)
        #expect(r.latencyFrames == 5)
        #expect(abs(r.settled - 189) < 1e-9)
        #expect(r.offsets.last == 11)
    }

    @Test func aFrameArrivingWhileTheSetRanLeavesTheLatencyUnknown() {
        // Frames received at s × 16 ms + 1 µs; the change shows on frame 11.
        let samples = stepSamples(reference: 6, latency: 5, a: 80, b: 140, count: 30)
        // Stamped before and after the set (the device did not say when it took the value), and
        // frame 7 arrived in between: the reference is 6 or 7, the latency 5 or 4.
        var during = ControlStep(control: .exposure, name: "exposure_time_absolute", from: 100, to: 200, reference: 6)
        during.setStart = 6 * 16_000_000 + 5000
        during.setTime = 7 * 16_000_000 + 5000
        let r = ControlLatencyAnalysis.response(of: during, in: samples, baselineFrames: 4, window: 14, minimumChange: 1)
        #expect(r.latencyFrames == nil)
        #expect(r.referenceSequence == 7)
        #expect(r.error == "frame 7 arrived while the set ran: latency 4 to 5 frames")
        // Nothing arrived while it ran: counted from frame 6.
        var clear = during
        clear.setTime = 6 * 16_000_000 + 9000
        #expect(ControlLatencyAnalysis.response(of: clear, in: samples, baselineFrames: 4, window: 14, minimumChange: 1).latencyFrames == 5)
        // The device said when it took the value (no start stamp): counted from the newest frame
        // received before that moment, however long the set took to return.
        var stamped = during
        stamped.setStart = nil
        let s = ControlLatencyAnalysis.response(of: stamped, in: samples, baselineFrames: 4, window: 14, minimumChange: 1)
        #expect(s.referenceSequence == 7)
        #expect(s.latencyFrames == 4)
    }

    @Test func theSimSaysWhenItTookAValue() throws {
        let controls = SimControls(defaults: SimControlValues(), latency: 2)
        let before = monotonicNanoseconds()
        let taken = try #require(try controls.setReportingTime("gain", to: 400))
        #expect(taken >= before && taken <= monotonicNanoseconds())
        #expect(try controls.value(of: "gain") == 400)
        #expect(throws: DeviceError.self) { _ = try controls.setReportingTime("gain", to: 1_000_000) }
        #expect(throws: DeviceError.self) { _ = try controls.setReportingTime("no_such_control", to: 1) }
        #expect(try controls.value(of: "gain") == 400)
    }

    @Test func medianLatencyAndAgreement() {
        func resp(_ l: Int?) -> StepResponse {
            StepResponse(from: 0, to: 1, referenceSequence: 1, latencyFrames: l, baseline: 0, baselineSpread: 0, settled: 1, offsets: [], values: [], error: l == nil ? "no visible change" : nil)
        }
        let r = ControlLatencyAnalysis.result(control: .exposure, name: "exposure_time_absolute", responses: [resp(3), resp(4), resp(3)])
        #expect(r.latencyFrames == 3)
        #expect(r.agreeingSteps == 2)
    }

    @Test func stepTargetsStayInRangeAndOnTheStep() {
        let exp = ControlDescriptor(id: 1, name: "exposure_time_absolute", kind: .integer, minimum: 1, maximum: 10000, step: 1, defaultValue: 100, menu: [:], standard: .exposureTime)
        #expect(ControlStepper.stepTarget(exp, current: 100) == 200)
        #expect(ControlStepper.stepTarget(exp, current: 8000) == 4000)
        let focus = ControlDescriptor(id: 2, name: "focus_absolute", kind: .integer, minimum: 0, maximum: 1000, step: 5, defaultValue: 400, menu: [:], standard: .focusAbsolute)
        #expect(ControlStepper.stepTarget(focus, current: 400) == 700)
        #expect(ControlStepper.stepTarget(focus, current: 900) == 600)
        let bright = ControlDescriptor(id: 3, name: "brightness", kind: .integer, minimum: 0, maximum: 255, step: 1, defaultValue: 128, menu: [:], standard: .brightness)
        // A quarter of the range (63) toward the far end.
        #expect(ControlStepper.stepTarget(bright, current: 128) == 65)
    }

    @Test func simJitterIsGaussianWithTheAskedDeviation() {
        let interval: UInt64 = 16_666_667
        let offsets = (0..<20_000 as Range<UInt64>).map { s -> Double in
            let nominal = 1_000_000_000 + s * interval
            return Double(Int64(bitPattern: SimCamera.jittered(nominal, sequence: s, jitterMs: 2, intervalNs: interval, seed: 7) &- nominal)) / 1e6
        }
        let d = Distribution(offsets)
        #expect(abs(d.mean) < 0.05)
        // Clipping at 3 sigma takes 1.3 % off the deviation.
        #expect(abs(d.stddev - 2) < 0.06, "stddev \(d.stddev)")
        #expect(d.max <= 6.0001 && d.min >= -6.0001)
        // Repeatable: a function of (seed, sequence) only.
        #expect(SimCamera.jittered(5_000_000_000, sequence: 42, jitterMs: 2, intervalNs: interval, seed: 7) == SimCamera.jittered(5_000_000_000, sequence: 42, jitterMs: 2, intervalNs: interval, seed: 7))
        #expect(SimCamera.jittered(5_000_000_000, sequence: 42, jitterMs: 0, intervalNs: interval, seed: 7) == 5_000_000_000)
    }
}
