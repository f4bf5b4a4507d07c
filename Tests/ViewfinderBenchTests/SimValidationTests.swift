import Testing
import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import ViewfinderBench
import ViewfinderKit

/// Whether this test process runs under AddressSanitizer (scripts/test.sh's sanitizer step): its
/// runtime exports `__asan_init`.
let underAddressSanitizer = dlsym(nil, "__asan_init") != nil

/// The bench measured where the truth is known: the sim camera's `latency`, `fps` and `jitter`.
@Suite(.serialized) struct SimValidationTests {
    func bench(_ device: String, duration: Double = 1, controls: [SteppedControl] = [.exposure, .gain, .focus], steps: Int? = nil) throws -> BenchReport {
        var c = BenchConfiguration(device: device)
        c.durationSeconds = duration
        c.controls = controls
        if let steps { c.stepsPerControl = steps }
        return try BenchRunner(configuration: c).run()
    }

    // Timing: the bench steps controls on a 60 fps camera paced in real time and reads the
    // latency from the pictures; under AddressSanitizer the run is 2-3x slower and loses frames.
    // The test runs in the plain unit tests.
    @Test(.disabled(if: underAddressSanitizer, "timing-sensitive: a 60 fps real-time bench, 2-3x slower under ASan"), arguments: [1, 3, 5])
    func controlLatencyEqualsTheSimLatency(latency: Int) throws {
        // Five steps a control: a step next to a lost frame is unknown, and under heavy load
        // (three busy loops on the two cores) three of three were once.
        let r = try bench("sim:latency=\(latency),fps=60,width=320,height=240", duration: 0.5, steps: 5)
        #expect(r.controls.count == 3)
        for c in r.controls {
            let steps = "\(c.control.rawValue): \(c.steps.map { $0.latencyFrames.map(String.init) ?? ($0.error ?? "?") })"
            #expect(c.latencyFrames == latency, "\(steps)")
            // Every step read exactly, however late the capture thread runs (the sim counts a set
            // from the frame it had handed out, the bench from the frame it had received, and a
            // set during a render waits for it; the one window left, a setter paused for most of a
            // frame interval between the sim's lock and the bench's clock, did not show in the runs
            // under three busy loops nor in CI). Under load (tests run in parallel) a frame can
            // be lost next to the change, or the recorder fall so far behind that too few frames
            // follow the set: that step is unknown (with the reason), never wrong.
            for s in c.steps {
                #expect(s.latencyFrames == latency || (s.latencyFrames == nil && s.error != nil), "\(steps)")
            }
            #expect(c.agreeingSteps == c.steps.filter { $0.latencyFrames != nil }.count, "\(steps)")
        }
    }

    // Timing: 30 and 50 fps read from a live sim's timestamps. Whether this machine received
    // every frame is not asserted: under the parallel test load (or AddressSanitizer, one run in
    // three lost 9 frames) a late capture thread loses frames, and the bench must count them.
    @Test(.disabled(if: underAddressSanitizer, "timing-sensitive: 50 fps paced in real time, 2-3x slower under ASan"))
    func measuredRateEqualsTheSimRate() throws {
        for fps in [30.0, 50.0] {
            let r = try bench("sim:fps=\(Int(fps)),width=320,height=240", duration: 2, controls: [])
            #expect(abs(r.camera.measuredFps - fps) / fps < 0.005, "\(fps): \(r.camera.measuredFps)")
            #expect(r.camera.nominalFps == fps)
            #expect(r.camera.frames >= Int(fps) / 2)
            // Delivered = measured × received / made: each lost frame is counted, none hidden.
            let made = Double(r.camera.frames - 1) + Double(r.camera.framesMissing)
            #expect(abs(r.camera.deliveredFps - r.camera.measuredFps * Double(r.camera.frames - 1) / made) < 1e-6)
            #expect((r.camera.sequenceGaps == 0) == (r.camera.framesMissing == 0))
            #expect(r.camera.timestampJitterMs < 0.05)
            #expect(abs(r.camera.intervalMs.p50 - 1000 / fps) < 0.05)
            #expect(r.camera.openToFirstFrameMs.map { $0 > 0 } == true)
        }
    }

    // Timing: the measured jitter of a 60 fps camera within 10 %; under AddressSanitizer the
    // slower pipeline adds its own. The test runs in the plain unit tests.
    @Test(.disabled(if: underAddressSanitizer, "timing-sensitive: measures 1 ms of jitter at 60 fps, 2-3x slower under ASan"))
    func injectedJitterIsMeasuredWithinTenPercent() throws {
        for jitter in [1.0, 3.0] {
            let r = try bench("sim:fps=60,width=320,height=240,jitter=\(jitter)", duration: 4, controls: [])
            #expect(abs(r.camera.timestampJitterMs - jitter) / jitter < 0.10, "jitter \(jitter): measured \(r.camera.timestampJitterMs)")
            // The interval's deviation is √2 times the timestamps'.
            #expect(abs(r.camera.intervalMs.stddev / 2.0.squareRoot() - jitter) / jitter < 0.15, "interval stddev \(r.camera.intervalMs.stddev)")
            #expect(abs(r.camera.measuredFps - 60) < 0.5)
        }
    }

    /// Ctrl-C in the middle of a long bench gives the report of what was measured, not nothing.
    @Test func anInterruptedBenchReportsWhatItMeasured() throws {
        var c = BenchConfiguration(device: "sim:fps=30,width=320,height=240")
        c.durationSeconds = 60
        c.sweep = true
        let runner = BenchRunner(configuration: c)
        let t0 = monotonicNanoseconds()
        let interrupt = runner.interrupter
        DispatchQueue.global().asyncAfter(deadline: .now() + 1.5) { interrupt() }
        let r = try runner.run()
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        #expect(seconds < 15, "the bench went on for \(seconds) s after the interruption at 1.5 s")
        #expect(r.interruptedDuring == "the pipeline run")
        #expect(r.camera.frames >= 10 && r.durationSeconds < 15, "\(r.camera.frames) frames over \(r.durationSeconds) s")
        #expect(r.controls.isEmpty && r.sweep.isEmpty)
        // It survives the JSON round trip (as a baseline reads it).
        let path = NSTemporaryDirectory() + "/vf-bench-interrupted-\(getpid()).json"
        try r.jsonData().write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(String(decoding: try r.jsonData(), as: UTF8.self).contains("interrupted_during"))
        #expect(try BenchReport.load(path: path).interruptedDuring == "the pipeline run")
        #expect(HTMLReport.render(r).contains("interrupted"))
    }

    /// Interrupted during the control steps, the controls whose steps were all done are kept
    /// (2 Dec, third session, sweep: a SIGTERM after the exposure steps had finished gave
    /// `controls: []`); the one cut short is left out whole. Interrupted as exposure's one step
    /// is done: gain's takes 69 more frames (2.3 s at 30 fps), so it cannot be done too.
    @Test func anInterruptedBenchKeepsTheControlsItFinished() throws {
        var c = BenchConfiguration(device: "sim:fps=30,width=160,height=120,latency=2")
        c.durationSeconds = 0.5
        c.controls = [.exposure, .gain]
        c.stepsPerControl = 1
        c.maxControlLatencyFrames = 60
        var runner = BenchRunner(configuration: c)
        let interrupt = runner.interrupter
        runner.onControlStepsDone = { done in if done == 1 { interrupt() } }
        let r = try runner.run()
        #expect(r.interruptedDuring == "the control steps")
        #expect(r.controls.map(\.control) == [.exposure])
        #expect(r.controls.first?.latencyFrames == 2, "\(r.controls)")
    }

    @Test func stageTimesAndDropsAreReported() throws {
        var c = BenchConfiguration(device: "sim:fps=30,width=320,height=240")
        c.durationSeconds = 1
        c.controls = []
        c.stages = "exposure:mode=continuous,focus"
        let r = try BenchRunner(configuration: c).run()
        // The session's own device-controls stage runs first, then the pipeline's.
        #expect(r.pipeline.stages.map(\.name).suffix(2) == ["exposure", "focus"])
        for s in r.pipeline.stages {
            // Every stage timed on the frames of the second (13 of 30 once under AddressSanitizer
            // on a loaded CI machine: the count is the machine's, the timing is the point).
            #expect(s.calls >= 5)
            #expect(s.p50Us > 0 && s.p50Us <= s.p99Us && s.maxUs > 0)
            #expect(s.buckets.reduce(0) { $0 + $1[2] } == Double(s.calls))
        }
        #expect(r.pipeline.outputs.first?.name == "bench")
        #expect(r.pipeline.threads.contains { $0.name.hasPrefix("vf-") })
        #expect(r.pipeline.timeline.count >= 5)
        #expect(r.pipeline.ringCapacities["stages"] == 8)
        #expect(r.pipeline.ringCapacities["bench"] == 32)
        #expect(r.pipeline.timeline.contains { $0.rings["stages"] != nil })
        #expect(r.series.sequence.count == r.camera.frames)
    }

    @Test func jsonRoundTripsAndTheBaselineComparison() throws {
        let r = try bench("sim:fps=60,width=320,height=240", duration: 1, controls: [])
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("bench-\(getpid()).json")
        try r.jsonData().write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        let text = try String(contentsOf: url, encoding: .utf8)
        #expect(text.contains("\"measured_fps\""))
        #expect(text.contains("\"schema_version\" : 1"))
        let back = try BenchReport.load(path: url.path)
        #expect(back.camera.measuredFps == r.camera.measuredFps)
        #expect(back.pipeline.drops == r.pipeline.drops)
        // Against itself: nothing changes.
        #expect(r.compared(with: back).regressions == 0)
        // A run whose capture-to-output latency is three times the baseline's regresses. The
        // latencies are a fixed series (1.5-2.5 ms, a steady run), not this run's: the verdict
        // weighs the change against the runs' own spread, and a real-time run on a loaded
        // machine can be spread enough to hide even a 3x shift — the comparison is under test
        // here, not the machine.
        var steady = back
        steady.series.captureToOutputMs = (0..<120).map { 1.5 + Double(($0 * 37) % 100) / 100 }
        steady.pipeline.captureToOutputMs = Distribution(steady.series.captureToOutputMs)
        var worse = steady
        worse.series.captureToOutputMs = steady.series.captureToOutputMs.map { $0 * 3 + 5 }
        worse.pipeline.captureToOutputMs = Distribution(worse.series.captureToOutputMs)
        let cmp = worse.compared(with: steady)
        #expect(cmp.metrics.first { $0.metric == "pipeline.capture_to_output_ms.p50" }?.verdict == .regression)
        #expect(cmp.metrics.first { $0.metric == "camera.measured_fps" }?.verdict == .unchanged)
        #expect(cmp.setupChanges == [] && cmp.notCompared == [])
        #expect(throws: BenchError.self) { try BenchReport.load(path: "/nonexistent/old.json") }
        // A baseline measured differently is said to be so, line by line; metrics of one run only
        // are listed, not dropped without a word.
        var other = back
        other.device = "pattern:paced=true"
        other.format?.width = 640
        other.stages = ["exposure"]
        other.pipeline.stages.append(StageTimeSummary(name: "exposure", calls: 10, meanUs: 10, p50Us: 10, p99Us: 20, maxUs: 30, buckets: []))
        let unlike = other.compared(with: back)
        #expect(unlike.setupChanges?.count == 3)
        #expect(unlike.setupChanges?.first?.hasPrefix("device: sim:fps=60,width=320,height=240 → pattern:paced=true") == true)
        #expect(unlike.setupChanges?.last == "stages: none → exposure")
        #expect(unlike.notCompared == ["stage.exposure.p50_us", "stage.exposure.p99_us"])
    }

    @Test func aSourceFasterThanItsRateEndsTheRunWhenTheFramesKeptAreFullAndSaysSo() throws {
        // Unpaced: frames come as fast as they are made, far above the nominal 30 fps.
        let r = try bench("pattern:width=64,height=32", duration: 2, controls: [])
        let kept = Int(2 * 30 * 1.5) + 256
        #expect(r.camera.frames == kept)
        #expect(r.camera.endedEarlyAfterFrames == kept)
        #expect(r.durationSeconds < 2, "the run went on after the frames kept were full")
        // A paced source keeps its run and says nothing.
        let paced = try bench("sim:fps=30,width=160,height=120", duration: 0.5, controls: [])
        #expect(paced.camera.endedEarlyAfterFrames == nil)
    }

    @Test func htmlReportIsSelfContainedWithPlots() throws {
        var c = BenchConfiguration(device: "sim:fps=60,width=320,height=240,latency=2")
        c.durationSeconds = 1
        c.stages = "exposure:mode=continuous"
        c.controls = [.exposure]
        let html = HTMLReport.render(try BenchRunner(configuration: c).run())
        // Interval histogram, intervals over time, latency over time, the step response, delivered
        // rate, drops, ring occupancy, and one per stage (the session's device_controls and exposure).
        let svgs = html.components(separatedBy: "<svg ").count - 1
        #expect(svgs == 9)
        #expect(html.contains("Stage exposure: time per frame"))
        #expect(!html.contains("<script"))
        #expect(!html.contains("https://") && !html.replacingOccurrences(of: "http://www.w3.org/2000/svg", with: "").contains("http://"))
        #expect(html.contains("exposure step response"))
        #expect(html.contains("class=\"series\""))
    }
}

/// `--sweep`: each listed mode opened, run and judged by its delivered rate.
@Suite struct SweepTests {
    // The sweep on a live (paced) sim: the mode chosen, the rate read from the timestamps and
    // every frame the sim lost counted. Whether this machine kept up with 60 fps is not asserted:
    // under the parallel test load a late capture thread loses frames (a CI run lost 3 of 37), and
    // the sim reports them as a sequence gap, which is what the sweep must show. The judgement
    // itself is tested on constructed samples below.
    // Under ASan (2-3x slower) the mode runs for 2 s instead of 0.6 s, so that the 10 frames the
    // check reads arrive whatever the slowdown.
    @Test func sweepMeasuresEachListedModeAtItsFastestRate() throws {
        var c = BenchConfiguration(device: "sim:width=320,height=240")
        c.sweepSeconds = underAddressSanitizer ? 2 : 0.6
        let sizes = [FrameSizeRange.discrete(width: 320, height: 240, intervals: [FrameInterval(fps: 30), FrameInterval(fps: 60)])]
        let f = FormatDescription(pixelFormat: .yuyv, fourcc: PixelFormat.yuyv.fourcc, description: "YUYV 4:2:2", compressed: false, sizes: sizes)
        let out = BenchRunner(configuration: c).sweepModes(formats: [f])
        #expect(out.count == 1)
        let e = try #require(out.first)
        #expect(e.error == nil)
        #expect(e.pixelFormat == "yuyv")
        #expect(e.nominalFps == 60)
        #expect(e.width == 320 && e.height == 240)
        #expect(e.frames >= 10, "\(e.frames) frames in \(c.sweepSeconds) s")
        // The sim's timestamps lie on its 60 fps grid whether or not frames were lost.
        let measured = try #require(e.measuredFps)
        #expect(abs(measured - 60) < 0.3, "measured \(measured)")
        // Delivered = measured × received / made: every lost frame shows.
        let delivered = try #require(e.deliveredFps)
        let made = Double(e.frames - 1) + Double(e.framesMissing)
        #expect(abs(delivered - measured * Double(e.frames - 1) / made) < 1e-6, "delivered \(delivered), \(e.framesMissing) missing")
        #expect(e.deliversNominalRate == (e.framesMissing == 0))
    }

    func samples(fps: Double, count: Int, lose: Set<UInt64> = []) -> [FrameSample] {
        (0..<UInt64(count)).filter { !lose.contains($0) }.map { s in
            let t = UInt64((Double(s) * 1e9 / fps).rounded())
            return FrameSample(sequence: s, timestamp: t, received: t + 500_000, consumed: t + 900_000, measure: nil)
        }
    }

    @Test func theJudgementNeedsTheNominalRateAndNoGap() {
        // Every frame at the nominal rate.
        #expect(BenchAnalysis.camera(samples(fps: 60, count: 36), nominalFps: 60).deliversNominalRate)
        // One frame lost: the rate from the timestamps is still 60, the sequence has a gap.
        let lost = BenchAnalysis.camera(samples(fps: 60, count: 36, lose: [17]), nominalFps: 60)
        #expect(abs(lost.measuredFps - 60) < 1e-6)
        #expect(lost.framesMissing == 1 && lost.sequenceGaps == 1)
        #expect(abs(lost.deliveredFps - 60 * 34 / 35) < 1e-6)
        #expect(!lost.deliversNominalRate)
        // No gap, but the camera runs 3 % slow (a 60 fps mode that gives 58.2).
        #expect(!BenchAnalysis.camera(samples(fps: 58.2, count: 36), nominalFps: 60).deliversNominalRate)
        // 1 % slow is within the 2 % allowed.
        #expect(BenchAnalysis.camera(samples(fps: 59.4, count: 36), nominalFps: 60).deliversNominalRate)
        // One frame cannot give a rate.
        #expect(!BenchAnalysis.camera(samples(fps: 60, count: 1), nominalFps: 60).deliversNominalRate)
        // Frames the pipeline dropped (a stage, a full ring) are not the camera's gaps; in a
        // gap of both, only the camera's part counts.
        let staged = BenchAnalysis.camera(samples(fps: 60, count: 36, lose: [5, 6, 20, 21, 22]), nominalFps: 60,
                                          pipelineDrops: [(first: 5, count: 2), (first: 21, count: 1)])
        #expect(staged.sequenceGaps == 1 && staged.framesMissing == 2, "\(staged.sequenceGaps) gaps, \(staged.framesMissing) missing")
    }

    /// A stage that drops frames does not make the camera look lossy (2 Dec: `bench --stages
    /// deadline:max_age_ms=11` on a perfect sim reported 2 gaps, 23 frames missing).
    @Test func framesAStageDropsAreNotTheCamerasGaps() throws {
        var c = BenchConfiguration(device: "sim:width=160,height=120,fps=30")
        c.durationSeconds = 1
        c.controls = []
        c.stages = "drop_every_other"
        c.registry = try .builtIn.merging(StageRegistry(generated: [DropOddFrames.self]))
        let r = try BenchRunner(configuration: c).run()
        #expect(r.pipeline.drops["stage", default: 0] > 5)
        #expect(r.camera.framesMissing == 0 && r.camera.sequenceGaps == 0, "\(r.camera.sequenceGaps) gaps, \(r.camera.framesMissing) missing")
        #expect(abs(r.camera.measuredFps - 30) < 0.5)
    }
}

/// Drops odd sequence numbers (a stage's drops, for the bench's camera figures).
final class DropOddFrames: Stage {
    static let name = "drop_every_other"
    static let summary = "Drops odd sequence numbers."
    struct Options: StageOptions { init() {}; static var fields: [OptionField<Options>] { [] } }
    init(options: Options) {}
    func process(_ frame: Frame) -> StageVerdict { frame.sequence % 2 == 1 ? .drop(.stage) : .forward }
}
