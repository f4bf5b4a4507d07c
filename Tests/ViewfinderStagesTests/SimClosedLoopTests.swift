import Testing
import ViewfinderTestSupport
import Foundation
import Viewfinder
import ViewfinderSim
import ViewfinderV4L2
@testable import ViewfinderStages

/// Drives `stage` in a closed loop with the sim camera (unpaced, so no threads): next frame,
/// process, record, release. `record` sees each processed frame.
/// Times of `process` calls, ms, when a test wants them.
final class TimeLog { var milliseconds: [Double] = [] }

/// With a `decoder` (MJPEG), each frame gets its decoded view at the scale the stages asked for, as
/// the engine gives it (`scales` records it).
func runSim(_ device: String, format: PixelFormat = .yuyv, width: Int, height: Int, frames: Int, stages: [any Stage], times: TimeLog? = nil,
            decoder: (any PixelDecoder)? = nil, scales: TimeLog? = nil, setup: ((SimCamera) throws -> Void)? = nil, record: (Int, Frame) -> Void) throws {
    let cam = try SimCamera(deviceString: device)
    let cfg = try cam.configure(StreamRequest(pixelFormat: format, width: width, height: height, fps: 30))
    try setup?(cam)
    let ctx = StageContext(format: cfg.format, frameIntervalNanoseconds: cfg.interval.nanoseconds, controls: cam.controls, isLive: cam.isLive,
                           pixels: PixelRequests(format: cfg.format, available: cfg.format.pixelFormat.hasYUVPlanes || decoder != nil))
    for s in stages { try s.prepare(format: cfg.format, context: ctx) }
    let scale = decoder.flatMap { ctx.pixels.scale(width: cfg.format.width, available: $0.scaleDenominators) }
    let views = decoder.map { FramePool(format: FrameFormat(.grey, width: 1, height: 1), count: 64, frameCapacity: $0.decodedByteCount(for: cfg.format, scale: scale ?? 1)) }
    try cam.start()
    defer { cam.stop() }
    var i = 0
    var out: [Frame] = []
    func deliver(_ f: Frame, from k: Int) {
        var frame: Frame? = f
        var idx = k
        while let fr = frame, idx < stages.count {
            let t0 = TexturedFrames.threadCPUNanoseconds()
            let verdict = stages[idx].process(fr)
            times?.milliseconds.append(Double(TexturedFrames.threadCPUNanoseconds() &- t0) / 1e6)
            switch verdict {
            case .forward: idx += 1
            case .drop: fr.release(); frame = nil
            case .hold:
                frame = nil
                while let r = stages[idx].nextReady() { deliver(r, from: idx + 1) }
            }
        }
        if let fr = frame { out.append(fr) }
    }
    var timeouts = 0
    var last: UInt64? = nil
    while i < frames {
        // The capture side's part: write what the stages queued, between frames.
        if let q = ctx.controlRequests, let c = cam.controls { q.apply(to: c, afterFrame: last) }
        guard case .frame(let f) = try cam.next(timeoutNanoseconds: 2_000_000_000) else {
            timeouts += 1
            try #require(timeouts < 3, "the sim ran out of buffers: a stage holds more frames than the pool has")
            continue
        }
        last = f.sequence
        if let decoder, let views, let scale {
            let d = try #require(views.acquire(), "decoded views all held")
            try decoder.decode(f, scale: scale, into: d)
            f.setDecoded(d)
            scales?.milliseconds.append(Double(scale))
        }
        deliver(f, from: 0)
        for fr in out { record(i, fr); fr.release(); i += 1 }
        out.removeAll()
    }
    for (k, s) in stages.enumerated() {
        s.finish()
        while let r = s.nextReady() { deliver(r, from: k + 1) }
    }
    for fr in out { record(i, fr); fr.release(); i += 1 }
}

@Suite("Closed loops on the sim camera")
struct SimClosedLoopTests {
    @Test("exposure: from 4 EV over or under, within 1/6 EV in 10 frames, overshoot < 1/3 EV, no oscillation", arguments: [
        "exposure=10,gain=16", "exposure=0.6,gain=1", "exposure=10,gain=1",
    ])
    func exposure(start: String) throws {
        var totals: [Double] = [], states: [ControlLoopState?] = [], lumas: [Double] = []
        try runSim("sim:paced=false,latency=2,seed=4,\(start)", width: 320, height: 240, frames: 40, stages: [ExposureStage(options: ExposureOptions())]) { _, f in
            let t = f.metadata.truth!
            totals.append(t.appliedExposure * t.appliedGain)
            states.append(f.metadata.exposureState)
            lumas.append(f.metadata.meteredLuma ?? 0)
        }
        let final = totals.last!
        let startEV = log2(totals[0] / final)
        print("sim AE from \(start): start \(startEV) EV; per frame EV error: \(totals.prefix(14).map { (log2($0 / final) * 100).rounded() / 100 })")
        for t in 10..<40 { #expect(abs(log2(totals[t] / final)) <= 1.0 / 6, "frame \(t)") }
        for t in 0..<40 {
            let e = log2(totals[t] / final)
            if startEV > 0.5 { #expect(e > -1.0 / 3, "overshoot at frame \(t): \(e) EV") }
            if startEV < -0.5 { #expect(e < 1.0 / 3, "overshoot at frame \(t): \(e) EV") }
        }
        // No oscillation: once converged the exposure does not move again.
        #expect(Set(totals[15...]).count == 1)
        #expect(states.last == .converged)
        // The metered luma ends at the target (110) within 1/6 EV (gamma 2.2: x2^(1/13.2)).
        #expect(abs(log2(lumas.last! / 110) * 2.2) <= 1.0 / 6)
    }

    @Test("exposure on MJPEG 1280x720 (metered on the 1/8 decode): converges as on YUYV", arguments: ["exposure=10,gain=16", "exposure=0.6,gain=1"])
    func exposureMJPEG(start: String) throws {
        var totals: [Double] = [], states: [ControlLoopState?] = [], lumas: [Double] = []
        let scales = TimeLog()
        try runSim("sim:paced=false,latency=2,seed=4,\(start)", format: .mjpeg, width: 1280, height: 720, frames: 40, stages: [ExposureStage(options: ExposureOptions())],
                   decoder: try MJPEGPixelDecoder(), scales: scales) { _, f in
            let t = f.metadata.truth!
            totals.append(t.appliedExposure * t.appliedGain)
            states.append(f.metadata.exposureState)
            lumas.append(f.metadata.meteredLuma ?? 0)
        }
        #expect(Set(scales.milliseconds) == [8])
        let final = totals.last!
        print("sim AE on MJPEG (1/8 view) from \(start): per frame EV error \(totals.prefix(14).map { (log2($0 / final) * 100).rounded() / 100 }), final metered luma \(lumas.last!)")
        for t in 10..<40 { #expect(abs(log2(totals[t] / final)) <= 1.0 / 6, "frame \(t)") }
        #expect(Set(totals[15...]).count == 1)
        #expect(states.last == .converged)
        #expect(abs(log2(lumas.last! / 110) * 2.2) <= 1.0 / 6)
    }

    /// A small spot or focus window keeps its samples on a reduced MJPEG decode: the view is no
    /// smaller than the window needs (3 Dec sweep: a 0.02 spot metered 2.5 times its area on the
    /// 1/8 view, 1.7 EV from YUYV's exposure; a 0.1 focus window on the 1/4 view ended 25 % of the
    /// range off).
    @Test("a small spot or focus window on MJPEG: a decode wide enough for it, and the exposure YUYV gets")
    func smallWindowsOnMJPEG() throws {
        func scale(_ stage: any Stage) throws -> Int? {
            let f = FrameFormat(.mjpeg, width: 1280, height: 720)
            let ctx = StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: nil, isLive: false, pixels: PixelRequests(format: f, available: true))
            try stage.prepare(format: f, context: ctx)
            return ctx.pixels.scale(width: 1280, available: [1, 2, 4, 8])
        }
        var spot = ExposureOptions()
        spot.metering = .spot; spot.spotSize = 0.02; spot.point = NormalizedPoint(x: 0.7, y: 0.5)
        #expect(try scale(ExposureStage(options: spot)) == 1)
        spot.spotSize = 0.1
        #expect(try scale(ExposureStage(options: spot)) == 8)
        #expect(try scale(ExposureStage(options: ExposureOptions())) == 8)
        var window = FocusOptions()
        window.size = 0.1
        #expect(try scale(FocusStage(options: window)) == 1)
        window.size = 0.25
        #expect(try scale(FocusStage(options: window)) == 2)
        // A rectangle by its own width (it went by `size`, the point window's).
        var rect = FocusOptions()
        rect.region = .rect; rect.rect = [0.45, 0.45, 0.1, 0.1]
        #expect(try scale(FocusStage(options: rect)) == 1)
        rect.size = 0.05; rect.rect = [0.25, 0.25, 0.5, 0.5]
        #expect(try scale(FocusStage(options: rect)) == 4)
        #expect(try scale(FocusStage(options: FocusOptions())) == 4)
        // The small spot meters on MJPEG what it meters on YUYV (on the sweep's photograph when
        // it could be fetched: a dragonfly whose spot at 0.7/0.5 is small against its
        // surroundings).
        spot.spotSize = 0.02
        let scene = WhiteBalancePhotos.training.first { $0.contains("Dragonfly") }.map { ",scene=\($0)" } ?? ""
        var finals: [PixelFormat: Double] = [:]
        for format in [PixelFormat.yuyv, .mjpeg] {
            try runSim("sim:paced=false,latency=2,seed=5\(scene)", format: format, width: 1280, height: 720, frames: 30, stages: [ExposureStage(options: spot)],
                       decoder: format == .mjpeg ? try MJPEGPixelDecoder() : nil) { _, f in
                let t = f.metadata.truth!
                finals[format] = t.appliedExposure * t.appliedGain
            }
        }
        let y = try #require(finals[.yuyv]), m = try #require(finals[.mjpeg])
        #expect(abs(log2(m / y)) <= 1.0 / 6, "MJPEG \(m), YUYV \(y): \(log2(m / y)) EV apart")
    }

    @Test("autofocus on MJPEG 1280x720 (measured on the 1/4 decode): lens within 2 % of the range as on YUYV", arguments: [(0, 0.5), (1000, 0.25), (500, 1.6)])
    func focusMJPEG(start: Int, subject: Double) throws {
        var o = FocusOptions()
        o.mode = .auto
        var errors: [Double] = []
        var states: [ControlLoopState?] = []
        let scales = TimeLog()
        try runSim("sim:paced=false,focus=\(start),subject=\(subject),seed=2", format: .mjpeg, width: 1280, height: 720, frames: 30, stages: [FocusStage(options: o)],
                   decoder: try MJPEGPixelDecoder(), scales: scales) { _, f in
            let t = f.metadata.truth!
            errors.append(abs(t.appliedLensPosition - t.inFocusLensPosition))
            states.append(f.metadata.focusState)
        }
        #expect(Set(scales.milliseconds) == [4])
        print("sim AF on MJPEG (1/4 view) from \(start), subject \(subject) m: lens error per frame \(errors.map { Int($0) })")
        for t in 25..<30 { #expect(errors[t] <= 20, "frame \(t): \(errors[t])") }
        #expect(states.last == .locked)
    }

    @Test("anti-flicker: under 50 Hz light, exposure times in whole 10 ms half-periods and a steady loop")
    func flicker() throws {
        var o = ExposureOptions()
        o.antiFlicker = .hz50
        var totals: [Double] = [], exposures: [Double] = [], lumas: [Double] = []
        // Dim light so that the loop needs more than one half-period of exposure.
        try runSim("sim:paced=false,flicker=50,light=0.3,exposure=1,seed=5", width: 320, height: 240, frames: 40, stages: [ExposureStage(options: o)]) { _, f in
            let t = f.metadata.truth!
            totals.append(t.appliedExposure * t.appliedGain)
            exposures.append(t.appliedExposure)
            lumas.append(f.metadata.meteredLuma ?? 0)
        }
        print("flicker AE: exposures \(exposures.suffix(5)), metered luma \(lumas.suffix(5).map { ($0 * 10).rounded() / 10 })")
        for e in exposures[20...] { #expect(e >= 10_000 && (e / 10_000).rounded() * 10_000 == e, "exposure \(e) µs is not whole half-periods") }
        #expect(Set(totals[20...]).count == 1)
        #expect(abs(log2(lumas.last! / 110) * 2.2) <= 1.0 / 6)
    }

    @Test("spot metering follows a bright or a dark point of interest")
    func spot() throws {
        // Find the brightest and darkest 10 % cells of the scene at the start exposure.
        var grid: [(NormalizedPoint, Double)] = []
        try runSim("sim:paced=false,seed=4", format: .grey, width: 320, height: 240, frames: 1, stages: []) { _, f in
            let l = LumaView(f)!
            for gy in 0..<8 { for gx in 0..<8 {
                let r = PixelRect(x: 20 + gx * 35, y: 20 + gy * 25, width: 32, height: 24)
                grid.append((NormalizedPoint(x: (Double(r.x) + 16) / 320, y: (Double(r.y) + 12) / 240), LumaStatistics.mean(l, region: r)))
            } }
        }
        grid.sort { $0.1 < $1.1 }
        let dark = grid.first!.0, bright = grid.last!.0
        func converge(_ p: NormalizedPoint) throws -> (total: Double, spot: Double) {
            var o = ExposureOptions()
            o.metering = .spot; o.point = p; o.spotSize = 0.08
            var last = (0.0, 0.0)
            try runSim("sim:paced=false,seed=4", format: .grey, width: 320, height: 240, frames: 30, stages: [ExposureStage(options: o)]) { _, f in
                last = (f.metadata.truth!.appliedExposure * f.metadata.truth!.appliedGain, f.metadata.meteredLuma!)
            }
            return last
        }
        let b = try converge(bright), d = try converge(dark)
        print("spot: bright point needs \(b.total) us*gain, dark point \(d.total)")
        #expect(b.total < d.total / 1.5)
        #expect(abs(log2(b.spot / 110) * 2.2) <= 1.0 / 6)
        #expect(abs(log2(d.spot / 110) * 2.2) <= 1.0 / 6)
    }

    @Test("autofocus: lens within 2 % of the range in 25 frames from any start", arguments: [(0, 0.5), (1000, 0.25), (500, 1.6), (900, 0.9)])
    func focus(start: Int, subject: Double) throws {
        var o = FocusOptions()
        o.mode = .auto
        var errors: [Double] = []
        var states: [ControlLoopState?] = []
        try runSim("sim:paced=false,focus=\(start),subject=\(subject),seed=2", format: .grey, width: 320, height: 240, frames: 30, stages: [FocusStage(options: o)]) { _, f in
            let t = f.metadata.truth!
            errors.append(abs(t.appliedLensPosition - t.inFocusLensPosition))
            states.append(f.metadata.focusState)
        }
        print("sim AF from \(start), subject \(subject) m: lens error per frame \(errors.map { Int($0) })")
        for t in 25..<30 { #expect(errors[t] <= 20, "frame \(t): \(errors[t])") }
        #expect(states.last == .locked)
    }

    @Test("continuous autofocus: at most one re-scan in 300 frames of a static scene")
    func continuousStatic() throws {
        let stage = FocusStage(options: FocusOptions())
        var scanning = 0
        var lastError = 0.0
        try runSim("sim:paced=false,focus=100,subject=0.7,seed=6", format: .grey, width: 256, height: 192, frames: 300, stages: [stage]) { i, f in
            if i >= 30 && f.metadata.focusState == .scanning { scanning += 1 }
            lastError = abs(f.metadata.truth!.appliedLensPosition - f.metadata.truth!.inFocusLensPosition)
        }
        print("continuous AF: \(stage.scanCount) scans, \(scanning) scanning frames after frame 30, final error \(lastError)")
        #expect(stage.scanCount <= 2)
        #expect(lastError <= 20)
    }

    /// The sim's town has rows of windows 40 px apart at 1280x720 and a checkerboard chart: the
    /// coarse search's summed surface has minima a period apart that tie within a fraction, and
    /// before the search was pulled toward the last frame's motion the estimator took frame 3 of
    /// seed 1 19.7 px off and frame 35 of seed 4 40.3 px off, both with confidence 1
    /// (`viewfinder run --device sim:width=1280,height=720,shake=4,seed=4 --stages stabilise`).
    @Test("stabilise on the sim's town at 1280x720 (windows 40 px apart): every frame's motion within 1 px of the truth", arguments: [UInt64(1), 4])
    func repeatingTexture(seed: UInt64) throws {
        var o = StabiliseOptions()
        o.lookahead = 0
        var previous: SimulationTruth?
        var worst = 0.0, frames = 0
        try runSim("sim:paced=false,shake=4,seed=\(seed),buffers=4", format: .yuyv, width: 1280, height: 720, frames: 40, stages: [StabiliseStage(options: o)]) { _, f in
            let t = f.metadata.truth!
            defer { previous = t }
            guard let p = previous, let m = f.metadata.motion, m.confidence > 0 else { return }
            let e = max(abs(m.dx - (t.shakeX - p.shakeX)), abs(m.dy - (t.shakeY - p.shakeY)))
            worst = max(worst, e); frames += 1
            #expect(e < 1, "frame \(f.sequence): motion (\(m.dx), \(m.dy)), truth (\(t.shakeX - p.shakeX), \(t.shakeY - p.shakeY))")
        }
        #expect(frames >= 35)
        print(String(format: "sim town at 1280x720, seed %d: worst motion error %.3f px over %d frames", seed, worst, frames))
    }

    @Test("stabilise: residual high-frequency jitter against the sim's true shake, look-ahead 15")
    func stabilise() throws {
        var sx: [Double] = [], sy: [Double] = [], cx: [Double] = [], cy: [Double] = []
        var seqs: [UInt64] = []
        var o = StabiliseOptions()
        o.lookahead = 15
        try runSim("sim:paced=false,shake=3,seed=9,buffers=4", format: .yuyv, width: 480, height: 270, frames: 150, stages: [StabiliseStage(options: o)]) { _, f in
            let t = f.metadata.truth!
            let c = f.metadata.correction!
            sx.append(t.shakeX); sy.append(t.shakeY); cx.append(c.dx); cy.append(c.dy)
            seqs.append(f.sequence)
        }
        #expect(seqs == (0..<UInt64(seqs.count)).map { $0 })
        #expect(seqs.count >= 90)
        let rx = zip(sx, cx).map { $0 + $1 }, ry = zip(sy, cy).map { $0 + $1 }
        let input = (highFrequencyRMS(sx) + highFrequencyRMS(sy)) / 2
        let residual = (highFrequencyRMS(rx) + highFrequencyRMS(ry)) / 2
        print("sim stabilise: input HF jitter \(input) px, residual \(residual) px = \(residual / input * 100) %")
        #expect(residual / input <= 0.08)
    }
}

/// A consumer twice as slow as capture that records the age of each frame it gets.
final class SlowConsumer: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: `ages` is only touched on the consumer's thread, and read by the test
    // after `waitUntilFinished()` has joined that thread.
    let consumerName = "slow"
    let delayNanoseconds: UInt64
    var ages: [UInt64] = []
    var discardsLateFrames: Bool { true }
    var ringCapacity: Int { 4 }
    init(delayNanoseconds: UInt64) { self.delayNanoseconds = delayNanoseconds; ages.reserveCapacity(4096) }
    func consume(_ frame: Frame) {
        ages.append(DeadlineFilter.age(of: frame))
        sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + delayNanoseconds)
    }
}

@Suite("Deadline in the engine")
struct DeadlineEngineTests {
    @Test("a consumer twice as slow as capture: delivered ages bounded (p99 < budget), books balance")
    func slowConsumer() throws {
        let cam = try SimCamera(deviceString: "sim:paced=true,fps=60,format=grey,width=160,height=120,buffers=16")
        let cfg = try cam.configure(StreamRequest(pixelFormat: .grey, width: 160, height: 120, fps: 60))
        let slow = SlowConsumer(delayNanoseconds: 2 * cfg.interval.nanoseconds)
        var o = DeadlineOptions()
        o.maxAgeMs = 100
        let stage = DeadlineStage(options: o)
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [stage], consumers: [slow], options: EngineOptions(durationSeconds: 2))
        try engine.start()
        engine.waitUntilFinished()
        let st = engine.statistics
        let c = st.consumers[0]
        print("deadline: captured \(st.captured), delivered \(st.delivered), engine drops \(st.drops.byName), consumed \(c.consumed), consumer drops \(c.drops.byName)")
        #expect(st.captured > 60)
        #expect(st.captured == st.delivered + st.drops.total)
        #expect(st.delivered == c.consumed + c.drops.total)
        #expect(c.consumed < st.delivered) // it really was too slow
        let ages = slow.ages.sorted()
        let p99 = ages[min(ages.count - 1, Int(Double(ages.count) * 0.99))]
        print("deadline: consumer frame age p50 \(Double(ages[ages.count / 2]) / 1e6) ms, p99 \(Double(p99) / 1e6) ms, max \(Double(ages.last!) / 1e6) ms")
        #expect(p99 < 100_000_000)
    }
}

/// Records the sequence numbers it receives.
final class SequenceRecorder: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: `sequences` is only touched on the consumer's thread, and read by the
    // test after `waitUntilFinished()` has joined that thread.
    let consumerName = "recorder"
    var sequences: [UInt64] = []
    var corrected = 0
    func consume(_ frame: Frame) {
        sequences.append(frame.sequence)
        if frame.metadata.correction != nil && frame.pixelsModified { corrected += 1 }
    }
}

@Suite("Stabilise in the engine")
struct StabiliseEngineTests {
    /// A 192x144 GREY sim with 4 buffers (the rest of its options in `sim`) through the stabiliser
    /// with look-ahead 8 into a recorder; started.
    func startFewBuffers(_ sim: String, options: EngineOptions = EngineOptions()) throws -> (CaptureEngine, SequenceRecorder) {
        let cam = try SimCamera(deviceString: "sim:\(sim),format=grey,width=192,height=144,buffers=4,shake=3")
        let cfg = try cam.configure(StreamRequest(pixelFormat: .grey, width: 192, height: 144, fps: 10))
        var o = StabiliseOptions()
        o.lookahead = 8
        let rec = SequenceRecorder()
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [StabiliseStage(options: o)], consumers: [rec], options: options)
        try engine.start()
        return (engine, rec)
    }

    @Test("a live sim with 4 buffers and look-ahead 8: frames in order, every one corrected, books balance")
    func liveFewBuffers() throws {
        let (engine, rec) = try startFewBuffers("paced=true,fps=10", options: EngineOptions(durationSeconds: 2.5))
        engine.waitUntilFinished()
        let st = engine.statistics
        print("stabilise live: captured \(st.captured), delivered \(st.delivered), drops \(st.drops.byName), consumed \(rec.sequences.count)")
        #expect(st.captured >= 20)
        // A live source drops (counted) when the stage thread is held up for longer than its
        // four buffers last (400 ms here): seen in CI under TSan while the ring stress test spins
        // on both cores (1–3 drops). That is the engine working, so only the kind of drop is
        // checked here; starvation by the look-ahead itself is tested deterministically below.
        #expect(st.drops.total == st.drops[.outOfBuffers])
        #expect(st.captured == st.delivered + st.drops.total)
        #expect(st.delivered == UInt64(rec.sequences.count) + st.consumers[0].drops.total)
        #expect(rec.sequences == rec.sequences.sorted())
        #expect(rec.corrected == rec.sequences.count)
    }

    /// A non-live source waits for buffers rather than dropping: if the look-ahead of 8 held the
    /// source's own 4 buffers, this run would never finish.
    @Test("4 source buffers, look-ahead 8, a source that waits for buffers: every frame comes through")
    func fewBuffersNoStarvation() throws {
        let (engine, rec) = try startFewBuffers("paced=false,frames=60")
        let finished = engine.waitUntilFinished(timeoutSeconds: 60)
        if !finished { engine.stop(); _ = engine.waitUntilFinished(timeoutSeconds: 10) }
        #expect(finished)
        #expect(rec.sequences == (0..<60).map(UInt64.init))
        #expect(rec.corrected == 60)
        #expect(engine.statistics.drops.total == 0)
    }
}
