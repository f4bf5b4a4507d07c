import Testing
import Foundation
import Viewfinder
@testable import ViewfinderStages

/// Runs the exposure stage in a closed loop against ``FakeControls`` and the sim's tone curve.
/// Returns per frame (applied total exposure in µs·gain, stage's state).
func runExposureLoop(options: ExposureOptions, startExposure: Int64, startGain: Int64, frames: Int, texture: TestTexture, scene: (Int) -> Double = { _ in 1 }) throws -> [(total: Double, state: ControlLoopState?, error: Double?)] {
    let controls = FakeControls(latency: 2, exposure100us: startExposure, gain: startGain)
    let f = FrameFormat(.yuyv, width: 96, height: 72)
    var options = options
    options.responseGamma = 2 // the fake renders with the square-root tone curve
    let stage = ExposureStage(options: options)
    try stage.prepare(format: f, context: StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: controls, controlRequests: controls.requests, isLive: false))
    let frame = Frame(capacity: f.maxByteCount, format: f)
    var rng = TestRNG(3)
    var out: [(Double, ControlLoopState?, Double?)] = []
    for i in 0..<frames {
        let v = controls.nextFrame()
        let e = Double(v["exposure_time_absolute"]!) * 100, g = Double(v["gain"]!) / 100
        frame.reset()
        render(texture, into: frame, exposure: e / 10_000 * g * scene(i), noise: 1, rng: &rng)
        frame.metadata.exposureTime = e
        frame.metadata.gain = g
        #expect(stage.process(frame) == .forward)
        out.append((e * g, frame.metadata.exposureState, frame.metadata.exposureError))
    }
    return out
}

@Suite("Auto-exposure")
struct ExposureTests {
    let texture = TestTexture(width: 120, height: 90, seed: 11)

    @Test("split: exposure time first up to the frame interval, then gain; anti-flicker in half-periods")
    func split() throws {
        let controls = FakeControls(latency: 2)
        let f = FrameFormat(.grey, width: 64, height: 48)
        var o = ExposureOptions()
        o.antiFlicker = .hz50
        let s = ExposureStage(options: o)
        try s.prepare(format: f, context: StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: controls, controlRequests: controls.requests))
        var r = s.split(5_000)
        #expect(r.exposure == 5_000 && r.gain == 1)
        r = s.split(25_000) // above one half-period: whole 10 ms steps, gain makes up the rest
        #expect(r.exposure == 20_000)
        #expect(abs(r.gain - 1.25) < 0.006)
        r = s.split(100_000) // beyond the frame interval: 30 ms (3 half-periods) and gain
        #expect(r.exposure == 30_000)
        #expect(abs(r.exposure * r.gain - 100_000) < 200)
        r = s.split(1e9) // clamps at the maximum gain
        #expect(r.gain == 16)

        var o60 = ExposureOptions()
        o60.antiFlicker = .hz60
        let s60 = ExposureStage(options: o60)
        try s60.prepare(format: f, context: StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: controls, controlRequests: controls.requests))
        let q = s60.split(20_000)
        #expect(q.exposure == 16_600) // two 8.33 ms half-periods, on the device's 100 µs grid
        #expect(abs(q.exposure * q.gain - 20_000) < 150)
    }

    @Test("from 4 EV over or under: within 1/6 EV in 10 frames, overshoot under 1/3 EV, then steady", arguments: [
        (Int64(100), Int64(1600)), // 10 ms x16: 4 EV over
        (Int64(100), Int64(100)),  // reference
        (Int64(6), Int64(100)),    // 0.6 ms: 4 EV under
    ])
    func convergence(start: (Int64, Int64)) throws {
        var o = ExposureOptions()
        o.metering = .matrix
        let run = try runExposureLoop(options: o, startExposure: start.0, startGain: start.1, frames: 40, texture: texture)
        let final = run.last!.total
        let startEV = log2(run[0].total / final)
        for t in 10..<40 {
            #expect(abs(log2(run[t].total / final)) <= 1.0 / 6, "frame \(t): \(log2(run[t].total / final)) EV off")
        }
        // Overshoot: never past the final value on the other side by 1/3 EV.
        for t in 0..<40 {
            let e = log2(run[t].total / final)
            if startEV > 0.5 { #expect(e > -1.0 / 3) }
            if startEV < -0.5 { #expect(e < 1.0 / 3) }
        }
        // Steady: no change in the last 20 frames, and converged.
        #expect(Set(run[20...].map(\.total)).count == 1)
        #expect(run.last!.state == .converged)
        #expect(abs(run.last!.error ?? 9) <= 0.1)
    }

    @Test("auto mode converges, then locks and stops driving")
    func autoLocks() throws {
        var o = ExposureOptions()
        o.mode = .auto
        // The scene darkens by 2 EV at frame 20: a locked loop does not follow.
        let run = try runExposureLoop(options: o, startExposure: 30, startGain: 100, frames: 40, texture: texture, scene: { $0 < 20 ? 1 : 0.25 })
        #expect(run[19].state == .locked)
        #expect(run[39].state == .locked)
        #expect(run[39].total == run[19].total)
    }

    @Test("continuous mode follows a 2 EV scene change and settles")
    func continuousFollows() throws {
        let run = try runExposureLoop(options: ExposureOptions(), startExposure: 100, startGain: 100, frames: 50, texture: texture, scene: { $0 < 20 ? 1 : 0.25 })
        let before = run[19].total, after = run[49].total
        #expect(abs(log2(after / before) - 2) < 0.25)
        #expect(run[49].state == .converged)
    }

    @Test("custom mode sets the given exposure and gain once and locks")
    func custom() throws {
        let controls = FakeControls(latency: 2)
        var o = ExposureOptions()
        o.mode = .custom; o.exposureMs = 12.3; o.gain = 2.5
        let f = FrameFormat(.grey, width: 64, height: 48)
        let s = ExposureStage(options: o)
        try s.prepare(format: f, context: StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: controls, controlRequests: controls.requests))
        #expect(controls.values["exposure_time_absolute"] == 123)
        #expect(controls.values["gain"] == 250)
        #expect(controls.values["auto_exposure"] == 1)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        fill(frame) { _, _ in 30 }
        _ = s.process(frame)
        #expect(frame.metadata.exposureState == .locked)
        #expect(controls.sets == 3)
    }

    @Test("spot metering reads the point of interest, not the picture")
    func spot() throws {
        let f = FrameFormat(.grey, width: 100, height: 100)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        // Dark picture with a bright patch at (0.8, 0.2).
        fill(frame) { x, y in (70..<90).contains(x) && (10..<30).contains(y) ? 200 : 40 }
        var o = ExposureOptions()
        o.metering = .spot; o.point = NormalizedPoint(x: 0.8, y: 0.2); o.mode = .locked
        let s = ExposureStage(options: o)
        try s.prepare(format: f, context: StageContext(format: f))
        #expect(s.measure(try #require(LumaView(frame))).meanLuma == 200)
        o.point = NormalizedPoint(x: 0.2, y: 0.8)
        let d = ExposureStage(options: o)
        try d.prepare(format: f, context: StageContext(format: f))
        #expect(d.measure(try #require(LumaView(frame))).meanLuma == 40)
        o.metering = .matrix
        let m = ExposureStage(options: o)
        try m.prepare(format: f, context: StageContext(format: f))
        let mean = m.measure(try #require(LumaView(frame))).meanLuma
        #expect(mean > 40 && mean < 200)
    }

    @Test("options: bad values are typed errors naming the option")
    func options() {
        #expect(throws: ConfigurationError.self) { try ExposureStage.make(options: ["mode": .string("sometimes")]) }
        #expect(throws: ConfigurationError.self) { try ExposureStage.make(options: ["bias": .number(9)]) }
        #expect(throws: ConfigurationError.self) { try ExposureStage.make(options: ["tolerance": .number(0.5), "hysteresis": .number(0.1)]) }
        // MJPEG without a decoder installed: no pixels to meter, a typed error naming the stage.
        #expect(throws: ConfigurationError.self) {
            let s = ExposureStage(options: ExposureOptions())
            let f = FrameFormat(.mjpeg, width: 64, height: 64)
            try s.prepare(format: f, context: StageContext(format: f))
        }
        // RGB is converted by the engine: the stage asks for reduced statistics and prepares.
        let s = ExposureStage(options: ExposureOptions())
        let rgb = FrameFormat(.rgb24, width: 64, height: 64)
        let ctx = StageContext(format: rgb)
        #expect(throws: Never.self) { try s.prepare(format: rgb, context: ctx) }
        #expect(!ctx.pixels.all.isEmpty)
    }
}

/// Runs the focus stage against ``FakeControls``: the picture is blurred by |lens − inFocus| / 40.
func runFocusLoop(options: FocusOptions, start: Int64, inFocus: (Int) -> Double, frames: Int, texture: TestTexture, latency: Int = 2, lost: Int? = nil) throws -> (lens: [Double], states: [ControlLoopState?], stage: FocusStage) {
    let controls = FakeControls(latency: latency, focus: start)
    let f = FrameFormat(.grey, width: 80, height: 60)
    let stage = FocusStage(options: options)
    try stage.prepare(format: f, context: StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: controls, controlRequests: controls.requests, isLive: false))
    let frame = Frame(capacity: f.maxByteCount, format: f)
    var rng = TestRNG(5)
    var lens: [Double] = [], states: [ControlLoopState?] = []
    for i in 0..<frames {
        let v = controls.nextFrame()
        let p = Double(v["focus_absolute"]!)
        frame.reset()
        let blur = Int((abs(p - inFocus(i)) / 40).rounded())
        render(texture, into: frame, blur: min(blur, 12), noise: 1, rng: &rng)
        frame.metadata.lensPosition = p
        // A frame the camera lost: the lens moved on, the stage never saw it.
        if i != lost { _ = stage.process(frame) }
        lens.append(p); states.append(frame.metadata.focusState)
        #expect(i == lost || frame.metadata.focus != nil)
    }
    return (lens, states, stage)
}

/// The focus loop on a picture whose score is a narrow peak on a plateau: coarse detail (the
/// texture blurred by 2 px, going to 5 px 500 units from focus) plus the finest detail weighted
/// by a Gaussian of the defocus (30 units), sensor noise 1 level.
func runPlateauFocusLoop(options: FocusOptions, start: Int64, inFocus: Double, seed: UInt64) throws -> [Double] {
    let controls = FakeControls(latency: 3, focus: start)
    let w = 160, h = 120
    let f = FrameFormat(.grey, width: w, height: h)
    let stage = FocusStage(options: options)
    try stage.prepare(format: f, context: StageContext(format: f, frameIntervalNanoseconds: 33_333_333, controls: controls, controlRequests: controls.requests, isLive: false))
    let frame = Frame(capacity: f.maxByteCount, format: f)
    let texture = TestTexture(width: w + 8, height: h + 8, seed: 40 + seed)
    var coarse = texture.values, soft = texture.values
    boxBlur(&coarse, texture.width, texture.height, 2)
    boxBlur(&soft, texture.width, texture.height, 5)
    let detail = zip(texture.values, coarse).map { $0 - $1 }
    var rng = TestRNG(seed)
    var lens: [Double] = []
    for _ in 0..<30 {
        let p = Double(controls.nextFrame()["focus_absolute"]!)
        let d = (p - inFocus) / 30
        let weight = Float(0.15 * exp(-d * d)), far = Float(min(((p - inFocus) / 500) * ((p - inFocus) / 500), 1))
        frame.reset()
        fill(frame) { x, y in
            let i = (y + 4) * texture.width + x + 4
            let v = 255 * min((coarse[i] + far * (soft[i] - coarse[i]) + weight * detail[i]) * 0.18, 1).squareRoot() + Float(rng.gaussian())
            return UInt8(max(0, min(255, v.rounded())))
        }
        frame.metadata.lensPosition = p
        _ = stage.process(frame)
        lens.append(p)
    }
    return lens
}

@Suite("Autofocus")
struct FocusTests {
    let texture = TestTexture(width: 100, height: 80, seed: 21)

    @Test("auto: lens within 2 % of the range in 25 frames from any start", arguments: [(Int64(0), 613.0), (Int64(1000), 177.0), (Int64(500), 905.0), (Int64(300), 300.0),
                                                                                      (Int64(0), 30.0), (Int64(1000), 30.0), (Int64(0), 990.0), (Int64(1000), 990.0)])
    func converges(start: Int64, target: Double) throws {
        var o = FocusOptions()
        o.mode = .auto
        let r = try runFocusLoop(options: o, start: start, inFocus: { _ in target }, frames: 30, texture: texture)
        for t in 25..<30 {
            #expect(abs(r.lens[t] - target) <= 20, "frame \(t): lens \(r.lens[t]) vs \(target)")
        }
        #expect(r.states[29] == .locked)
        #expect(r.states[0] == .scanning)
    }

    /// A soft subject whose score is a narrow peak on a broad plateau, shaped like the Storm
    /// photograph's (4.7 % down 30 units from focus, 7.8 % at 60, 10 % at 100, half the score
    /// 400 away), with 1.7 % of frame-to-frame noise: the refine positions, the speculative frames
    /// and the local fit must still bring the lens within 2 % in 25 frames. (This synthetic
    /// score's noise is independent per frame; the scan without those parts does as well on it.
    /// Their gain shows on the photograph, whose score drifts with the shake:
    /// `viewfinder-report --autofocus`, docs/stabilisation-autofocus-log.md.)
    @Test("auto: a narrow peak on a plateau (a soft subject) within 2 % in 25 frames", arguments: [(Int64(0), 613.0), (Int64(1000), 613.0), (Int64(0), 177.0), (Int64(1000), 177.0), (Int64(0), 420.0), (Int64(1000), 420.0)])
    func narrowPeak(start: Int64, target: Double) throws {
        for seed in [3, 4] as [UInt64] {
            let lens = try runPlateauFocusLoop(options: { var o = FocusOptions(); o.mode = .auto; return o }(), start: start, inFocus: target, seed: seed)
            for t in 25..<30 {
                #expect(abs(lens[t] - target) <= 20, "seed \(seed), frame \(t): lens \(lens[t]) vs \(target)")
            }
        }
    }

    /// The camera loses one frame somewhere in the scan (each frame in turn): the scan must not
    /// wait for it. After the last position of a pass the lens moves on (speculative and waiting
    /// positions), so a lost frame there is never replaced; the pass ends two frames after it was
    /// due instead of at its time-out (which left the lens 3.9 % off at frame 25 and 16 % off at
    /// frame 28 when the coarse sweep's last frame, 10, was lost). A lost frame costs up to two
    /// frames (the lens still refining near the peak at frame 25, its last move of a few units as
    /// late as frame 28), and a lost coarse
    /// frame leaves the peak less well known (up to 2.5 % off on this picture, whose blur changes
    /// in steps of 40 units).
    @Test("auto: a frame lost anywhere in the scan: within 2.5 % from frame 25, settled from 27", arguments: [Int64(0), 1000])
    func lostFrame(start: Int64) throws {
        var o = FocusOptions()
        o.mode = .auto
        for lost in 1..<24 {
            let r = try runFocusLoop(options: o, start: start, inFocus: { _ in 613 }, frames: 30, texture: texture, latency: 3, lost: lost)
            for t in 25..<30 {
                #expect(abs(r.lens[t] - 613) <= 25, "frame \(lost) lost; frame \(t): lens \(r.lens[t])")
                #expect(t < 27 || abs(r.lens[t] - r.lens[29]) <= 5, "frame \(lost) lost: the lens still moving at frame \(t)")
            }
        }
    }

    @Test("continuous: no re-scan on a static scene, one re-scan after the subject moves")
    func continuous() throws {
        let r = try runFocusLoop(options: FocusOptions(), start: 0, inFocus: { $0 < 150 ? 420 : 800 }, frames: 300, texture: texture)
        #expect(r.stage.scanCount == 2)
        #expect(abs(r.lens[140] - 420) <= 20)
        #expect(abs(r.lens[299] - 800) <= 20)
        let scanning = r.states[30..<150].filter { $0 == .scanning }.count
        #expect(scanning == 0)
    }

    @Test("locked mode moves the lens once to the given position")
    func locked() throws {
        var o = FocusOptions()
        o.mode = .locked; o.position = 250
        let r = try runFocusLoop(options: o, start: 0, inFocus: { _ in 600 }, frames: 6, texture: texture)
        #expect(r.lens[5] == 250)
        #expect(r.states.allSatisfy { $0 == .locked })
    }

    @Test("rect option is validated")
    func rectValidation() {
        #expect(throws: ConfigurationError.self) { try FocusStage.make(options: ["rect": .array([.number(0.1), .number(0.1)])]) }
        #expect(throws: ConfigurationError.self) { try FocusStage.make(options: ["rect": .array([.number(0.1), .number(0.1), .number(0), .number(0.5)])]) }
    }
}
