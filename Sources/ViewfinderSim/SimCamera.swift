import Viewfinder
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import CTurboJPEG

/// The simulated camera: the engine's built-in device (`sim[:options]`, see ``SimOptions``).
///
/// It films a stored scene through a physical model (``SimRenderer``): hand-shake, a focusing lens,
/// a rolling-shutter sensor with full-well clipping, shot and read noise, gain and a tone curve,
/// under light that may flicker at twice the mains frequency. Its ``controls`` act like a V4L2
/// camera's, with a fixed latency in frames, and every frame carries the ground truth
/// (`SimulationTruth`) so that control loops can be scored.
///
/// Built-in automation (optional, off by default): `auto_exposure` = 3 (aperture priority) runs a
/// simple built-in auto-exposure (aims at luma 110, exposure first up to the frame interval, then
/// gain; its changes go through the same latency); `focus_automatic_continuous` = 1 runs an
/// idealised autofocus that slews the lens to the true focus at up to 40 units per frame;
/// `white_balance_automatic` = 1 (the default) corrects exactly for the light's colour temperature.
/// `power_line_frequency` matching the flicker (or 3, auto) makes the sensor round exposures of at
/// least one light period down to whole light periods (10 ms at 50 Hz, 8.33 ms at 60 Hz), which
/// removes the banding; shorter exposures still band, as on real sensors.
///
/// Pacing: `paced=true` is a live source: frame k is due at start + k/fps (CLOCK_MONOTONIC), and
/// when the renderer or the caller falls a whole frame behind, the missed frames are skipped and
/// reported as `.lost(.driverGap, n)`; an empty pool loses the frame as `.outOfBuffers`.
/// `paced=false` renders as fast as it is asked and waits for free buffers (back-pressure).
///
/// Threading: `configure`, `start` and `stop` are called by the session while not streaming;
/// `next` only by the capture thread; `controls` from any thread (they lock). That split is why the
/// class is `@unchecked Sendable`: its mutable streaming state is touched by one thread at a time.
public final class SimCamera: CaptureSource, @unchecked Sendable {
    public let options: SimOptions
    public let info: DeviceInfo
    public var isLive: Bool { options.paced }
    public var controls: (any DeviceControlling)? { simControls }
    /// The controls, with their concrete type.
    public let simControls: SimControls
    /// The scene's light while running, as `Double` bits (0: the `light` option); see ``setSceneLight(_:)``.
    private let lightOverride = Atomic<UInt64>(0)

    /// Changes the scene's illumination from the next frame on (a light switched on or off, a
    /// cloud): relative to the reference as the `light` option; nil goes back to the option.
    public func setSceneLight(_ light: Double?) {
        lightOverride.store(light.map { max(0.001, $0).bitPattern } ?? 0, ordering: .relaxed)
    }
    public private(set) var activeConfiguration: StreamConfiguration?
    let logger: Logger
    private let image: SimImage?

    private var renderer: SimRenderer?
    private var pool: FramePool?
    private var sequence: UInt64 = 0
    private var startNs: UInt64 = 0
    private var running = false
    private var ended = false
    // Built-in loops.
    private var aeWaitUntil: UInt64 = 0
    private var afLens: Double = 400
    // Frame timing (capture thread): frame k ≥ baseSequence is due at startNs + (k − baseSequence)
    // × intervalNs, and its scene time is timeBase + (k − baseSequence) × interval seconds.
    private var intervalNs: UInt64 = 33_333_333
    private var baseSequence: UInt64 = 0
    private var timeBase: Double = 0
    /// A frame interval set while streaming, taken by the capture thread before the next frame.
    private let pendingInterval = LockedBox<FrameInterval?>(nil)
    private let streamingFlag = Atomic<Bool>(false)

    /// Opens the sim camera with `options`. Throws if the scene file cannot be read.
    public init(options: SimOptions = SimOptions(), id: String = "sim", logger: Logger = Logger(label: "viewfinder.sim")) throws {
        self.options = options
        self.logger = logger
        if let path = options.scene {
            do { image = try SimImage.load(path: path) } catch let e as SimSceneError {
                throw DeviceError.invalidDeviceOption(device: id, option: "scene", reason: e.description)
            }
        } else {
            image = nil
        }
        var d = SimControlValues()
        d.exposureTime = max(1, min(10000, Int64((options.exposureMs * 10).rounded())))
        d.gain = Int64((options.gain * 100).rounded())
        d.focus = Int64(options.focus.rounded())
        d.whiteBalanceTemperature = max(2800, min(6500, Int64((options.colorTemperature / 10).rounded()) * 10))
        simControls = SimControls(defaults: d, latency: options.latency, deviceName: id, setsWaitForRender: options.paced)
        info = SimCamera.deviceInfo(id: id, controls: SimControls.baseDescriptors(defaults: d), isLive: options.paced)
        activeConfiguration = StreamConfiguration(format: FrameFormat(options.format, width: options.width, height: options.height),
                                                  interval: FrameInterval(fps: options.fps), bufferCount: options.buffers)
        afLens = options.focus
        intervalNs = FrameInterval(fps: options.fps).nanoseconds
    }

    /// Opens `sim` or `sim:key=value,...`.
    public convenience init(deviceString: String, logger: Logger = Logger(label: "viewfinder.sim")) throws {
        try self.init(options: SimOptions(deviceString: deviceString), id: deviceString, logger: logger)
    }

    /// Sizes listed by discovery (any even size from 64x64 to 7680x4320 is accepted).
    public static let discreteSizes = [(640, 480), (1280, 720), (1920, 1080), (3840, 2160)]

    static func deviceInfo(id: String, controls: [ControlDescriptor], isLive: Bool) -> DeviceInfo {
        let intervals = [FrameInterval(fps: 60), FrameInterval(fps: 30), FrameInterval(fps: 15)]
        let sizes = discreteSizes.map { FrameSizeRange.discrete(width: $0.0, height: $0.1, intervals: intervals) }
        let names: [PixelFormat: String] = [.yuyv: "YUYV 4:2:2", .uyvy: "UYVY 4:2:2", .nv12: "Y/UV 4:2:0", .i420: "Planar YUV 4:2:0",
                                            .yuv422p: "Planar YUV 4:2:2", .grey: "8-bit Greyscale", .mjpeg: "Motion-JPEG"]
        let formats = SimOptions.formats.map {
            FormatDescription(pixelFormat: $0, fourcc: $0.fourcc, description: names[$0] ?? $0.rawValue, compressed: $0.isCompressed, sizes: sizes)
        }
        return DeviceInfo(id: id, name: "Viewfinder simulated camera", driver: "viewfinder-sim", bus: "virtual:sim",
                          stableIDs: ["sim"], formats: formats, controls: controls, isLive: isLive)
    }

    public func configure(_ request: StreamRequest) throws -> StreamConfiguration {
        let available = SimOptions.formats.map(\.description)
        guard SimOptions.formats.contains(request.pixelFormat) else {
            throw DeviceError.unsupportedFormat(device: info.id, requested: "\(request.pixelFormat)", available: available)
        }
        guard request.width >= 64, request.width <= 7680, request.height >= 64, request.height <= 4320,
              request.width % 2 == 0, request.height % 2 == 0 else {
            throw DeviceError.unsupportedFormat(device: info.id, requested: "\(request.pixelFormat) \(request.width)x\(request.height)", available: available.map { "\($0) (even sizes 64x64...7680x4320)" })
        }
        let fps = request.fps ?? options.fps
        guard fps >= 0.1, fps <= 240 else {
            throw DeviceError.unsupportedFormat(device: info.id, requested: "\(request.pixelFormat) \(request.width)x\(request.height) at \(fps) fps", available: ["0.1...240 fps"])
        }
        let cfg = StreamConfiguration(format: FrameFormat(request.pixelFormat, width: request.width, height: request.height),
                                      interval: FrameInterval(fps: fps), bufferCount: max(request.bufferCount, options.buffers))
        if cfg != activeConfiguration { renderer = nil }
        activeConfiguration = cfg
        intervalNs = cfg.interval.nanoseconds
        return cfg
    }

    /// Builds the renderer (the scene is rendered here, once per configuration) and the pool.
    public func start() throws {
        guard let cfg = activeConfiguration else { throw DeviceError.notRunning(device: info.id) }
        if renderer == nil {
            let t0 = monotonicNanoseconds()
            renderer = try SimRenderer(options: options, format: cfg.format, interval: cfg.interval, image: image)
            logger.debug("sim scene ready", metadata: ["size": "\(cfg.format.width)x\(cfg.format.height)", "ms": "\(Double(monotonicNanoseconds() - t0) / 1e6)"])
        }
        let r = renderer!
        pool = FramePool(format: cfg.format, count: cfg.bufferCount, frameCapacity: r.compressedCapacity)
        sequence = 0
        ended = false
        aeWaitUntil = 0
        intervalNs = cfg.interval.nanoseconds
        baseSequence = 0
        timeBase = 0
        if let iv = pendingInterval.withLock({ p in defer { p = nil }; return p }) {
            intervalNs = iv.nanoseconds
            activeConfiguration?.interval = iv
        }
        streamingFlag.store(true, ordering: .relaxed)
        simControls.streamStarted()
        startNs = monotonicNanoseconds() &+ 1_000_000
        running = true
    }

    public func stop() {
        running = false
        streamingFlag.store(false, ordering: .relaxed)
        simControls.streamStopped()
    }

    /// The renderer of the current configuration (nil before ``start()``), e.g. to render frames
    /// directly in benchmarks and in the portable-kernel tests.
    public var currentRenderer: SimRenderer? { renderer }

    /// The physical state of frame `sequence` with control values `v`: exposure clamped to the
    /// frame interval (and rounded to whole light periods when anti-flicker matches), shake from
    /// the seeded path at the frame's nominal time.
    func frameState(sequence seq: UInt64, values v: SimControlValues, renderer r: SimRenderer) -> SimFrameState {
        var st = SimFrameState()
        st.sequence = seq
        let interval = Double(intervalNs) / 1e9
        st.time = timeBase + Double(seq &- baseSequence) * interval
        var e = Double(v.exposureTime) * 100
        e = min(e, interval * 1e6)
        if options.flicker > 0 {
            let matches = v.powerLineFrequency == 3 || (v.powerLineFrequency == 1 && options.flicker == 50) || (v.powerLineFrequency == 2 && options.flicker == 60)
            let period = 1e6 / Double(2 * options.flicker)
            if matches && e >= period { e = (e / period).rounded(.down) * period }
        }
        st.exposureMicroseconds = e
        st.gain = Double(v.gain) / 100
        if v.focusAuto == 1 {
            let target = r.inFocusPosition
            afLens += max(-40, min(40, target - afLens))
            st.lensPosition = afLens
        } else {
            afLens = Double(v.focus)
            st.lensPosition = Double(v.focus)
        }
        st.whiteBalance = v.whiteBalanceAuto == 1 ? options.colorTemperature : Double(v.whiteBalanceTemperature)
        let sh = r.shake.at(st.time)
        st.shakeX = sh.dx; st.shakeY = sh.dy; st.shakeAngle = sh.angle
        st.brightness = Int(v.brightness); st.contrast = Int(v.contrast); st.saturation = Int(v.saturation)
        return st
    }

    public func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        guard running, let pool, let r = renderer, activeConfiguration != nil else { throw DeviceError.notRunning(device: info.id) }
        if options.frames > 0 && sequence >= options.frames { ended = true; return .endOfStream }
        if let iv = pendingInterval.withLock({ p in defer { p = nil }; return p }) { changeInterval(to: iv) }
        var due = SimCamera.jittered(startNs &+ (sequence &- baseSequence) &* intervalNs, sequence: sequence, jitterMs: options.jitterMs, intervalNs: intervalNs, seed: options.seed)
        let frame: Frame
        if options.paced {
            let now = monotonicNanoseconds()
            if now >= due &+ intervalNs {
                // A whole frame late: the sensor went on without us.
                var skip = (now - due) / intervalNs
                if options.frames > 0 { skip = min(skip, options.frames - sequence) }
                sequence &+= skip
                return .lost(.driverGap, count: Int(skip))
            }
            if due > now {
                if due - now > timeoutNanoseconds {
                    sleepUntil(monotonicNanoseconds: now &+ timeoutNanoseconds)
                    return .timeout
                }
                sleepUntil(monotonicNanoseconds: due)
            }
            guard let f = pool.acquire() else {
                sequence &+= 1
                return .lost(.outOfBuffers, count: 1)
            }
            frame = f
        } else {
            guard let f = pool.acquire(timeoutNanoseconds: timeoutNanoseconds) else { return .timeout }
            frame = f
            due = monotonicNanoseconds()
        }
        let seq = sequence
        let values = simControls.values(forFrame: seq)
        let st = frameState(sequence: seq, values: values, renderer: r)
        let lightBits = lightOverride.load(ordering: .relaxed)
        guard r.render(st, into: frame, sceneLight: lightBits == 0 ? nil : Double(bitPattern: lightBits)) else {
            frame.release()
            simControls.abandoned()
            sequence &+= 1
            logger.warning("sim MJPEG encode failed", metadata: ["sequence": "\(seq)"])
            return .lost(.corrupt, count: 1)
        }
        frame.sequence = seq
        frame.timestamp = Timestamp(nanoseconds: due, clock: .monotonic)
        if values.exposureAuto == 3 { builtInAutoExposure(seq: seq, state: st, meanLuma: r.lastMeanLuma, interval: Double(intervalNs) / 1e9) }
        sequence &+= 1
        frame.receiveTime = simControls.delivered(seq)
        return .frame(frame)
    }

    /// Sets the frame interval: while streaming the next frame comes one new interval after the
    /// last one (`FrameRateChange.appliedWhileStreaming`), no frame is lost; else at the next start.
    /// - Throws: `DeviceError.unsupportedFormat` outside 0.1 … 240 fps.
    public func setFrameInterval(_ interval: FrameInterval) throws -> FrameRateChange {
        guard interval.numerator > 0, interval.denominator > 0, (0.1...240).contains(interval.fps) else {
            throw DeviceError.unsupportedFormat(device: info.id, requested: "\(interval)", available: ["0.1...240 fps"])
        }
        pendingInterval.withLock { $0 = interval }
        return streamingFlag.load(ordering: .relaxed) ? .appliedWhileStreaming(interval) : .appliedAtNextStart(interval)
    }

    /// Rebases frame timing on `interval` from the next frame on (capture thread).
    private func changeInterval(to interval: FrameInterval) {
        let old = intervalNs, new = interval.nanoseconds
        guard new > 0, new != old else { return }
        let previousDue = sequence > baseSequence ? startNs &+ (sequence &- 1 &- baseSequence) &* old : startNs &- new
        timeBase += Double(sequence &- baseSequence) * Double(old) / 1e9
        startNs = previousDue &+ new
        baseSequence = sequence
        intervalNs = new
        activeConfiguration?.interval = interval
        logger.debug("sim frame interval \(interval) from frame \(sequence)")
    }

    /// Frame `sequence`'s due time `nominal` moved by the `jitter` option: a Gaussian offset of
    /// `jitterMs` standard deviation drawn from (`seed`, `sequence`) alone, so a run is repeatable
    /// and skipped frames do not shift the others. Clipped to ±3σ and to ±0.45 intervals, which
    /// keeps frames in order.
    static func jittered(_ nominal: UInt64, sequence: UInt64, jitterMs: Double, intervalNs: UInt64, seed: UInt64) -> UInt64 {
        guard jitterMs > 0 else { return nominal }
        // SplitMix64 of (seed, sequence): two uniforms in (0, 1), then Box–Muller.
        func mix(_ x: UInt64) -> UInt64 {
            var z = x &+ 0x9E37_79B9_7F4A_7C15
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let a = mix(seed ^ (sequence &* 0xD1B5_4A32_D192_ED03))
        let b = mix(a)
        let u1 = (Double(a >> 11) + 0.5) / 9_007_199_254_740_992
        let u2 = (Double(b >> 11) + 0.5) / 9_007_199_254_740_992
        let g = (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
        let sigma = jitterMs * 1e6
        let limit = min(3 * sigma, 0.45 * Double(intervalNs))
        let offset = max(-limit, min(limit, g * sigma))
        return offset >= 0 ? nominal &+ UInt64(offset) : nominal &- min(nominal, UInt64(-offset))
    }

    /// A simple proportional auto-exposure (aperture priority mode): after each change it waits for
    /// the change to land, then moves exposure x gain by the measured error (in linear light).
    private func builtInAutoExposure(seq: UInt64, state: SimFrameState, meanLuma: Double, interval: Double) {
        guard seq >= aeWaitUntil else { return }
        let target = 110.0
        let errorEV = log2(target / max(meanLuma, 1)) * options.gamma
        guard abs(errorEV) > 0.1 else { return }
        let total = state.exposureMicroseconds * state.gain * pow(2, max(-3, min(3, errorEV)))
        var maxExposure = interval * 1e6
        if options.flicker > 0 {
            let period = 1e6 / Double(2 * options.flicker)
            maxExposure = max(period, (maxExposure / period).rounded(.down) * period)
        }
        let e = max(100, min(total, maxExposure))
        let g = max(1, min(16, total / e))
        simControls.schedule("exposure_time_absolute", max(1, min(10000, Int64((e / 100).rounded()))), internal: true)
        simControls.schedule("gain", max(100, min(1600, Int64((g * 100).rounded()))), internal: true)
        aeWaitUntil = seq &+ UInt64(simControls.controlLatencyFrames)
    }
}

/// Opens the sim camera: `sim` and `sim:key=value,...`.
public struct SimProvider: DeviceProvider {
    public let logger: Logger
    public init(logger: Logger = Logger(label: "viewfinder.sim")) { self.logger = logger }
    public func handles(_ device: String) -> Bool { device == "sim" || device.hasPrefix("sim:") }
    public func open(_ device: String) throws -> any CaptureSource { try SimCamera(deviceString: device, logger: logger) }
    public func discover() -> [DeviceInfo] {
        let d = SimControlValues()
        return [SimCamera.deviceInfo(id: "sim", controls: SimControls.baseDescriptors(defaults: d), isLive: true)]
    }
}

extension DeviceDirectory {
    /// The devices the core engine knows by itself: the sim camera.
    public static var core: DeviceDirectory { DeviceDirectory(providers: [SimProvider()]) }
}
