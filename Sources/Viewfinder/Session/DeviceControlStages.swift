import Logging
import Synchronization

/// Carries device settings from the user's thread to the stage thread.
final class SettingsRelay: Sendable {
    private let box = LockedBox<DeviceSettings>(DeviceSettings())
    private let generation = Atomic<Int>(0)

    func publish(_ s: DeviceSettings) {
        box.withLock { $0 = s }
        generation.add(1, ordering: .releasing)
    }

    @inline(__always) var currentGeneration: Int { generation.load(ordering: .acquiring) }
    var settings: DeviceSettings { box.withLock { $0 } }
}

/// First stage of a session's chain: runs the stages that carry out the device's exposure and
/// focus modes (made by the session's ``DeviceControlStageProvider``), and rebuilds them between
/// frames when the device's settings change (the `lockForConfiguration`/`unlockForConfiguration`
/// model). Control stages read the applied exposure and lens position from each frame's metadata,
/// so a rebuilt stage picks up where the device is. Nothing is allocated per frame; a rebuild
/// allocates once per change.
final class DeviceControlStages: Stage {
    static let name = "device_controls"
    static let summary = "Runs the exposure/focus stages the device's modes ask for (made by the session)."
    private let relay: SettingsRelay
    private let build: @Sendable (DeviceSettings) throws -> [any Stage]
    private let logger: Logger
    private var stages: [any Stage]
    private var seen: Int
    private var prepared: (FrameFormat, StageContext)?

    /// The device whose white balance the frames report (``CaptureDevice/deviceWhiteBalanceGains``).
    private weak var device: CaptureDevice?

    // Zoom (stage thread): the ramp, and how it is carried out.
    private var zoom = ZoomRamp()
    private let digitalZoom: (any DigitalZooming)?
    private var digitalZoomUsable = false
    private var opticalZoom = false
    private var lastZoomValue: Int64?
    private var frameSeconds = 1.0 / 30
    /// The last frame's capture time (ns): the zoom ramp moves by the time between frames, so
    /// frames the camera lost do not stretch it.
    private var lastZoomFrameTime: UInt64?
    private let zoomKey = MetadataKey("zoom.factor")
    /// Subject-area change detection (stage thread only).
    private var subjectArea = SubjectAreaMonitor()

    init(relay: SettingsRelay, initial: [any Stage], build: @escaping @Sendable (DeviceSettings) throws -> [any Stage], device: CaptureDevice? = nil,
         digitalZoom: (any DigitalZooming)? = nil, logger: Logger) {
        self.relay = relay
        self.device = device
        self.stages = initial
        self.build = build
        self.logger = logger
        self.seen = relay.currentGeneration
        self.digitalZoom = digitalZoom
        let s = device?.settings ?? relay.settings
        zoom = ZoomRamp(current: s.videoZoomRate > 0 ? 1 : s.videoZoomFactor, target: s.videoZoomFactor, rate: s.videoZoomRate)
    }

    init(options: NoOptions) throws {
        throw SessionError.invalidConfiguration(reason: "the device control stages are made by the session, not by name")
    }

    func prepare(format: FrameFormat, context: StageContext) throws {
        prepared = (format, context)
        seen = relay.currentGeneration
        for s in stages { try s.prepare(format: format, context: context) }
        opticalZoom = context.controls?.supports(.zoomAbsolute) ?? false
        digitalZoomUsable = !opticalZoom && (digitalZoom?.prepare(format: format) ?? false)
        if context.frameIntervalNanoseconds > 0 { frameSeconds = Double(context.frameIntervalNanoseconds) / 1e9 }
        lastZoomValue = nil
    }

    func process(_ frame: Frame) -> StageVerdict {
        let g = relay.currentGeneration
        if g != seen {
            seen = g
            do {
                let settings = relay.settings
                let fresh = try build(settings)
                if let (f, c) = prepared {
                    // The frame interval may have changed (activeVideoMinFrameDuration): the
                    // exposure loop's limit follows it.
                    var c = c
                    if let iv = settings.activeVideoMinFrameDuration { c.frameIntervalNanoseconds = iv.nanoseconds }
                    // Frames are flowing: what the fresh stages write in `prepare` (a custom
                    // exposure, a white balance) goes through the capture side's queue like any
                    // request, so the frames' `exposedWith` follows it (it kept the old values).
                    var streaming = c
                    if let base = c.controls, let q = c.controlRequests { streaming.controls = QueuedControls(base: base, queue: q) }
                    for s in fresh { try s.prepare(format: f, context: streaming) }
                    prepared = (f, c)
                    if c.frameIntervalNanoseconds > 0 { frameSeconds = Double(c.frameIntervalNanoseconds) / 1e9 }
                }
                zoom.target = settings.videoZoomFactor
                zoom.rate = settings.videoZoomRate
                stages = fresh
            } catch {
                logger.error("new device settings could not be applied, keeping the previous ones: \(error)")
            }
        }
        for s in stages {
            let v = s.process(frame)
            // Control stages have no look-ahead: they forward or drop.
            if v != .forward { return v }
        }
        applyZoom(frame)
        if let k = frame.metadata.whiteBalance { device?.noteWhiteBalance(k) }
        // What the frame was taken with, for the device's `lensPosition`, `iso` and `exposureDuration`.
        let m = frame.metadata
        device?.noteApplied(lens: m.lensPosition ?? m.exposedWith.focus.map(Double.init),
                            exposureMicroseconds: m.exposureTime ?? m.exposedWith.exposureTime.map { Double($0) * 100 },
                            gain: m.gain ?? m.exposedWith.gain.map { Double($0) / CaptureDevice.gainUnit })
        if let d = device {
            let moving = d.noteLoops(exposure: m.exposureState, focus: m.focusState, whiteBalance: m.whiteBalanceState)
            if d.subjectAreaMonitoring.load(ordering: .relaxed), let luma = m.meteredLuma {
                if subjectArea.update(luma: luma, contrast: m.focus?.tenengrad, adjusting: moving) { d.postSubjectAreaChange() }
            } else {
                subjectArea = SubjectAreaMonitor()
            }
        }
        // For flash/torch `.auto`: the metered error (and the torch's switch, queued for the capture side).
        if let e = m.exposureError { device?.noteExposure(errorEV: e, requests: prepared?.1.controlRequests) }
        return .forward
    }

    /// Advances the zoom ramp by the time since the last frame on a live source (the frame
    /// interval for the first, after a gap of a second or more, and on unpaced sources)
    /// and carries it out: `zoom_absolute` queued for the capture
    /// side when its value changes (optical), or the crop-and-resample (digital, after the control
    /// stages metered the full frame). The frame carries `zoom.factor`.
    private func applyZoom(_ frame: Frame) {
        let t = frame.timestamp.nanoseconds
        var seconds = frameSeconds
        // A live source's capture times (a camera, a paced replay); an unpaced one goes by its
        // frame interval (its times are not media time).
        if prepared?.1.isLive == true, let last = lastZoomFrameTime, t > last, Double(t - last) / 1e9 < 1 { seconds = Double(t - last) / 1e9 }
        lastZoomFrameTime = t
        zoom.advance(seconds: seconds)
        let z = zoom.current
        if opticalZoom {
            if let v = device?.zoomControlValue(forFactor: z), v != lastZoomValue, prepared?.1.controlRequests?.request(.zoomAbsolute, to: v) == true {
                lastZoomValue = v
            }
        } else if z > 1.000_001 {
            guard digitalZoomUsable, let dz = digitalZoom else { return }
            dz.zoom(frame, factor: z)
            frame.pixelsModified = true
        }
        // Frames carry the factor once zoom is in use (an unzoomed session's metadata stays as it was).
        if z != 1 || zoom.target != 1 {
            _ = frame.metadata.custom.set(zoomKey, z)
            device?.noteZoom(z)
        }
    }
}

/// A device's controls as a stage sees them while frames flow: reads from the device, writes
/// queued for the capture side (``ControlRequestQueue``), which applies them between frames and
/// records when they take effect.
final class QueuedControls: DeviceControlling {
    let base: any DeviceControlling
    let queue: ControlRequestQueue
    init(base: any DeviceControlling, queue: ControlRequestQueue) { self.base = base; self.queue = queue }
    var descriptors: [ControlDescriptor] { base.descriptors }
    var controlLatencyFrames: Int { base.controlLatencyFrames }
    func value(of name: String) throws -> Int64 { try base.value(of: name) }
    func set(_ name: String, to value: Int64) throws {
        // A control with no standard meaning cannot be queued: written as before.
        guard let std = descriptors.first(where: { $0.name == name })?.standard else { return try base.set(name, to: value) }
        try set(std, to: value)
    }
    func set(_ standard: StandardControl, to value: Int64) throws {
        guard supports(standard) else { return try base.set(standard, to: value) }
        guard queue.request(standard, to: value) else {
            throw DeviceError.io(device: "controls", operation: "queue \(standard.rawValue)", errno: 105, message: "the control request queue is full")
        }
    }
}
