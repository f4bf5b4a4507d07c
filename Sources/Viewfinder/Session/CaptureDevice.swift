import Synchronization

/// Exposure modes (AVFoundation's `AVCaptureDevice.ExposureMode`).
public enum ExposureMode: String, Sendable, Codable, CaseIterable, OptionChoice {
    /// Keep the current exposure.
    case locked
    /// Converge once, then lock.
    case auto
    /// Keep adjusting as the scene changes.
    case continuous
    /// Exposure time and gain given by the user.
    case custom
}

/// Focus modes (AVFoundation's `AVCaptureDevice.FocusMode`).
public enum FocusMode: String, Sendable, Codable, CaseIterable, OptionChoice {
    case locked, auto, continuous
}

/// White balance modes (AVFoundation's `AVCaptureDevice.WhiteBalanceMode`).
public enum WhiteBalanceMode: String, Sendable, Codable, CaseIterable, OptionChoice {
    /// Keep the current balance (or the one given with `setWhiteBalanceModeLocked(with:)`).
    case locked
    /// Estimate the light once, then lock.
    case auto
    /// Keep estimating as the light changes.
    case continuous
}

/// The part of a device's configuration the session turns into the control stages it runs:
/// modes, points of interest (in user-facing picture coordinates) and manual values.
public struct DeviceSettings: Sendable, Equatable {
    public var exposureMode: ExposureMode = .continuous
    public var focusMode: FocusMode = .continuous
    public var whiteBalanceMode: WhiteBalanceMode = .continuous
    /// Where to meter, in the picture as the user sees it (0,0 top-left … 1,1 bottom-right); nil: whole frame.
    public var exposurePointOfInterest: NormalizedPoint?
    /// Where to focus, user-facing coordinates; nil: centre.
    public var focusPointOfInterest: NormalizedPoint?
    /// Exposure bias, EV.
    public var exposureTargetBias: Double = 0
    /// Custom exposure: duration µs and gain (1 = unity).
    public var customExposureDuration: Double?
    public var customGain: Double?
    /// Locked focus: lens position in device units.
    public var lensPosition: Double?
    /// Locked white balance: the light to balance for (nil: keep the current balance).
    public var whiteBalanceTemperatureAndTint: WhiteBalanceTemperatureAndTintValues?
    /// The format the device should stream when the session preset is `inputPriority`.
    public var activeFormat: StreamRequest?
    /// The stream's frame interval (AVFoundation's `activeVideoMinFrameDuration`); nil: the format's own.
    public var activeVideoMinFrameDuration: FrameInterval?
    /// The longest frame time the exposure loop may expose for (AVFoundation's
    /// `activeVideoMaxFrameDuration`); nil: the frame interval.
    public var activeVideoMaxFrameDuration: FrameInterval?
    /// The zoom factor to reach (1: none); see `CaptureDevice.videoZoomFactor`.
    public var videoZoomFactor: Double = 1
    /// The zoom ramp's rate in powers of two per second; 0: jump to ``videoZoomFactor`` at once.
    public var videoZoomRate: Double = 0
    public init() {}
}

/// A camera (AVFoundation's `AVCaptureDevice`): discovery, formats, and configuration under an
/// exclusive lock. Changes made while locked are staged and applied together — between frames —
/// when the lock is released.
public final class CaptureDevice: @unchecked Sendable {
    // @unchecked Sendable: `settings`, `staged` and `lockOwner` are guarded by `state`.
    public let source: any CaptureSource
    public var uniqueID: String { source.info.id }
    public var localizedName: String { source.info.name }
    public var formats: [FormatDescription] { source.info.formats }
    public var controls: (any DeviceControlling)? { source.controls }

    private struct State { var settings = DeviceSettings(); var staged: DeviceSettings?; var generation = 0 }
    private let state = LockedBox(State())
    private let configurationLock = Atomic<Bool>(false)
    /// Called (with the new settings) when a configuration is committed; the session uses it to
    /// reconfigure the control stages between frames.
    var onSettingsChange: (@Sendable (DeviceSettings) -> Void)? {
        get { observer.withLock { $0 } }
        set { observer.withLock { $0 = newValue } }
    }
    private let observer = LockedBox<(@Sendable (DeviceSettings) -> Void)?>(nil)

    /// Torch mode and level as last set (see CaptureDevice+Torch.swift).
    let torchBox = LockedBox(TorchState())
    /// The last frame-rate change a session made (see CaptureDevice+Torch.swift).
    let frameRateChangeBox = LockedBox<FrameRateChange?>(nil)
    /// The zoom factor frames have now, as `Double` bits (0: none seen; see CaptureDevice+Zoom.swift).
    let observedZoom = Atomic<UInt64>(0)
    /// The latest metered frame's exposure error, EV, as `Double` bits (NaN: none yet). Relaxed:
    /// a lone value, written by the stage thread, read by whoever asks for ``isLowLightScene``.
    let observedExposureError = Atomic<UInt64>(Double.nan.bitPattern)
    /// The latest frame's lens position (device units), exposure time (µs) and gain (1 = unity),
    /// as `Double` bits (NaN: none yet); see CaptureDevice+Manual.swift. Relaxed lone values.
    let observedLens = Atomic<UInt64>(Double.nan.bitPattern)
    let observedExposureTime = Atomic<UInt64>(Double.nan.bitPattern)
    let observedGain = Atomic<UInt64>(Double.nan.bitPattern)
    /// Which control loops the latest frame had adjusting (``DeviceAdjustingState`` bits) and the
    /// streams of ``stateChanges`` (CaptureDevice+Adjusting.swift).
    let adjustingBits = Atomic<UInt8>(0)
    let stateStreams = EventStreams<DeviceAdjustingState>(bufferingNewest: 64)
    /// Subject-area change monitoring: on or off, and the streams of ``subjectAreaChanges``.
    let subjectAreaMonitoring = Atomic<Bool>(false)
    let subjectAreaStreams = EventStreams<Void>(bufferingNewest: 16)

    /// Decoders for the device's formats without YUV planes (MJPEG), so stages get pixels.
    public let pixelDecoders: (any PixelDecoderFactory)?

    public init(source: any CaptureSource, pixelDecoders: (any PixelDecoderFactory)? = nil) {
        self.source = source
        self.pixelDecoders = pixelDecoders
        // A camera that balances in hardware starts in its continuous mode, as AVFoundation's
        // devices do. One without white-balance controls starts locked (the picture as the sensor
        // gives it, no stage, no cost): choosing `.continuous` or `.auto` turns the software
        // `white_balance` stage on.
        if let c = source.controls, c.supports(.whiteBalanceAuto) || c.supports(.whiteBalanceTemperature) { return }
        state.withLock { $0.settings.whiteBalanceMode = .locked }
    }

    /// Opens a device by its string (`sim`, `/dev/video0`, `dump:FILE`).
    public static func open(_ id: String, directory: DeviceDirectory) throws -> CaptureDevice {
        CaptureDevice(source: try directory.open(id), pixelDecoders: directory.pixelDecoders)
    }

    /// The default video device: the first V4L2 camera if one is present, else the sim camera.
    public static func defaultDevice(directory: DeviceDirectory) throws -> CaptureDevice {
        let found = directory.discover()
        let pick = found.first(where: { $0.id.hasPrefix("/dev/") }) ?? found.first(where: { $0.id == "sim" })
        return try open(pick?.id ?? "sim", directory: directory)
    }

    /// The settings in force.
    public var settings: DeviceSettings { state.withLock { $0.settings } }

    // MARK: The configuration lock

    /// Takes the exclusive configuration lock; throws if another client holds it.
    public func lockForConfiguration() throws {
        guard configurationLock.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else {
            throw SessionError.lockedByAnotherClient(device: uniqueID)
        }
        state.withLock { $0.staged = $0.settings }
    }

    /// Applies the staged changes together and releases the lock.
    public func unlockForConfiguration() {
        let applied: DeviceSettings? = state.withLock { s in
            guard let staged = s.staged else { return nil }
            s.staged = nil
            if staged == s.settings { return nil }
            s.settings = staged
            s.generation += 1
            return staged
        }
        configurationLock.store(false, ordering: .releasing)
        if let applied { onSettingsChange?(applied) }
    }

    public var isLockedForConfiguration: Bool { configurationLock.load(ordering: .relaxed) }

    /// Locks, runs `body` on the staged settings, and applies them — or discards them if `body` throws.
    public func configure(_ body: (inout DeviceSettings) throws -> Void) throws {
        try lockForConfiguration()
        do {
            var staged = state.withLock { $0.staged! }
            try body(&staged)
            try validate(staged)
            state.withLock { $0.staged = staged }
        } catch {
            state.withLock { $0.staged = nil }
            configurationLock.store(false, ordering: .releasing)
            throw error
        }
        unlockForConfiguration()
    }

    /// Stages a zoom target and ramp rate (CaptureDevice+Zoom.swift).
    func stageZoom(_ factor: Double, rate: Double) throws {
        try stage { $0.videoZoomFactor = factor; $0.videoZoomRate = rate }
    }

    private func stage(_ change: (inout DeviceSettings) -> Void) throws {
        guard isLockedForConfiguration else { throw SessionError.notLockedForConfiguration(device: uniqueID) }
        state.withLock { s in if s.staged != nil { change(&s.staged!) } }
    }

    // MARK: Capabilities and setters (staged; require the lock)

    public func isExposureModeSupported(_ mode: ExposureMode) -> Bool {
        guard let c = controls else { return mode == .locked }
        switch mode {
        case .locked: return true
        case .auto, .continuous, .custom: return c.supports(.exposureTime) || c.supports(.gain)
        }
    }

    public func isFocusModeSupported(_ mode: FocusMode) -> Bool {
        guard let c = controls else { return mode == .locked }
        return mode == .locked || c.supports(.focusAbsolute)
    }

    public var isExposurePointOfInterestSupported: Bool { isExposureModeSupported(.continuous) }
    public var isFocusPointOfInterestSupported: Bool { isFocusModeSupported(.continuous) }

    public func setExposureMode(_ mode: ExposureMode) throws {
        guard isExposureModeSupported(mode) else {
            throw SessionError.unsupportedMode(device: uniqueID, mode: "exposure mode \(mode.rawValue)", reason: "it has no exposure time or gain control")
        }
        guard mode == .custom else { try stage { $0.exposureMode = mode }; return }
        // As AVFoundation's: custom keeps the exposure in use now — the custom values staged in
        // this lock when it is custom already (setExposureModeCustom), else what the frames are
        // taken with (not the values of an earlier custom spell, which the loop has left).
        let staged = state.withLock { $0.staged }
        let keep = staged?.exposureMode == .custom
        let duration = (keep ? staged?.customExposureDuration : nil) ?? exposureDurationMicroseconds
        let gain = (keep ? staged?.customGain : nil) ?? min(max(currentGain, minISO / 100), maxISO / 100)
        guard let duration else {
            throw SessionError.invalidConfiguration(reason: "custom exposure needs a duration and a gain, and the current exposure duration is not known yet (no frame seen, no exposure control): use setExposureModeCustom")
        }
        try stage { $0.exposureMode = .custom; $0.customExposureDuration = duration; $0.customGain = gain }
    }

    public func setFocusMode(_ mode: FocusMode) throws {
        guard isFocusModeSupported(mode) else {
            throw SessionError.unsupportedMode(device: uniqueID, mode: "focus mode \(mode.rawValue)", reason: "it has no focus control")
        }
        try stage { $0.focusMode = mode }
    }

    /// Point of interest for metering, in user-facing picture coordinates.
    public func setExposurePointOfInterest(_ p: NormalizedPoint) throws {
        try Self.checkPoint(p)
        try stage { $0.exposurePointOfInterest = p }
    }

    /// Point of interest for focus, in user-facing picture coordinates.
    public func setFocusPointOfInterest(_ p: NormalizedPoint) throws {
        try Self.checkPoint(p)
        try stage { $0.focusPointOfInterest = p }
    }

    public func setExposureTargetBias(_ ev: Double) throws {
        guard (-4...4).contains(ev) else { throw SessionError.invalidConfiguration(reason: "exposure bias \(ev) EV is outside -4...4") }
        try stage { $0.exposureTargetBias = ev }
    }

    /// The exposure stage's custom range, µs (its `exposure_ms` option: 0.01…1000 ms).
    static let customExposureRange: ClosedRange<Double> = 10...1_000_000

    /// Custom exposure: duration in µs and gain (1 = unity); sets the mode to `.custom`.
    /// - Throws: `SessionError.invalidConfiguration` for a duration outside
    ///   ``minExposureDurationMicroseconds`` … ``maxExposureDurationMicroseconds`` (and 10 µs … 1 s)
    ///   or a gain below 1 or above the device's; `SessionError.unsupportedMode` without exposure
    ///   controls.
    public func setExposureModeCustom(durationMicroseconds: Double, gain: Double) throws {
        guard isExposureModeSupported(.custom) else {
            throw SessionError.unsupportedMode(device: uniqueID, mode: "custom exposure", reason: "it has no exposure time or gain control")
        }
        guard durationMicroseconds > 0, gain >= 1 else { throw SessionError.invalidConfiguration(reason: "custom exposure needs a positive duration and a gain ≥ 1") }
        // Within what the device takes (and the exposure stage's 10 µs…1 s) now, at the call: an
        // exposure refused later, when the settings are applied, was dropped with the rest of
        // the batch (zoom, lens) while `settings` claimed it.
        let lo = max(Self.customExposureRange.lowerBound, minExposureDurationMicroseconds ?? 0)
        let hi = min(Self.customExposureRange.upperBound, maxExposureDurationMicroseconds ?? .infinity)
        guard durationMicroseconds.isFinite, durationMicroseconds >= lo, durationMicroseconds <= hi else {
            throw SessionError.invalidConfiguration(reason: "exposure duration \(durationMicroseconds) µs is outside \(lo)...\(hi) µs (minExposureDurationMicroseconds...maxExposureDurationMicroseconds)")
        }
        // The device's largest gain is `maxISO`'s; without a gain control, the stage's 64×.
        let maxGain = controls?.descriptor(.gain) == nil ? 64 : maxISO / 100
        guard gain.isFinite, gain <= maxGain else {
            throw SessionError.invalidConfiguration(reason: "gain \(gain) is above the device's \(maxGain) (maxISO \(maxISO))")
        }
        try stage { $0.exposureMode = .custom; $0.customExposureDuration = durationMicroseconds; $0.customGain = gain }
    }

    /// Locks the lens at `lensPosition` in the device's `focus_absolute` units (see
    /// ``lensPositionRange``; AVFoundation's 0…1 scale is ``setFocusModeLocked(normalizedLensPosition:)``).
    /// On a running session the lens moves when the lock is released, on the next frames.
    public func setFocusModeLocked(lensPosition: Double) throws {
        guard let d = controls?.descriptor(.focusAbsolute) else {
            throw SessionError.unsupportedMode(device: uniqueID, mode: "locked focus at a lens position", reason: "it has no focus control")
        }
        guard Double(d.minimum)...Double(d.maximum) ~= lensPosition else {
            throw SessionError.invalidConfiguration(reason: "lens position \(lensPosition) is outside \(d.minimum)...\(d.maximum)")
        }
        try stage { $0.focusMode = .locked; $0.lensPosition = lensPosition }
    }

    // MARK: White balance

    /// Every mode is supported: a device with `white_balance_automatic`/`white_balance_temperature`
    /// is driven through them, any other gets the software `white_balance` stage (gains on the
    /// chroma; on MJPEG, RGB and Bayer streams on the frames' decoded views, from the session's
    /// start: a mode first chosen while running corrects from the next start). A device without those
    /// controls starts `.locked` (no stage runs until a mode is chosen).
    public func isWhiteBalanceModeSupported(_ mode: WhiteBalanceMode) -> Bool { true }

    /// Whether the device balances in hardware (it has a `white_balance_temperature` control).
    public var hasWhiteBalanceControl: Bool { controls?.supports(.whiteBalanceTemperature) ?? false }

    /// Largest gain ``setWhiteBalanceModeLocked(with:)`` takes (AVFoundation's `maxWhiteBalanceGain`).
    public var maxWhiteBalanceGain: Double { WhiteBalanceModel.maxGain }

    public func setWhiteBalanceMode(_ mode: WhiteBalanceMode) throws {
        try stage { $0.whiteBalanceMode = mode }
    }

    /// Locks the white balance to `gains` (each 1 … ``maxWhiteBalanceGain``; AVFoundation's
    /// `setWhiteBalanceModeLocked(with:completionHandler:)`).
    public func setWhiteBalanceModeLocked(with gains: WhiteBalanceGains) throws {
        guard gains.isValid(maxGain: maxWhiteBalanceGain) else {
            throw SessionError.invalidConfiguration(reason: "white balance gains \(gains) are outside 1...\(maxWhiteBalanceGain)")
        }
        let tt = temperatureAndTintValues(for: gains)
        // Gains are applied as the light they balance for: ones far off the black-body locus (a
        // strong red alone) have no such light in range, and would come out as another colour.
        let back = WhiteBalanceModel.gains(for: tt), want = gains.normalized
        let roundTrips = abs(back.redGain / want.redGain - 1) < 1e-6 && abs(back.greenGain / want.greenGain - 1) < 1e-6
            && abs(back.blueGain / want.blueGain - 1) < 1e-6
        guard WhiteBalanceModel.temperatureRange.contains(tt.temperature), (-150...150).contains(tt.tint), roundTrips else {
            throw SessionError.invalidConfiguration(reason: "white balance gains \(gains) balance for no light within \(WhiteBalanceModel.temperatureRange) K, tint -150...150 (they give \(Int(tt.temperature.rounded())) K, tint \(Int(tt.tint.rounded())))")
        }
        try stage { $0.whiteBalanceMode = .locked; $0.whiteBalanceTemperatureAndTint = tt }
    }

    /// Locks the white balance to a light of `temperatureAndTint`.
    public func setWhiteBalanceModeLocked(temperatureAndTint v: WhiteBalanceTemperatureAndTintValues) throws {
        guard WhiteBalanceModel.temperatureRange.contains(v.temperature), (-150...150).contains(v.tint) else {
            throw SessionError.invalidConfiguration(reason: "white balance \(v.temperature) K tint \(v.tint) is outside \(WhiteBalanceModel.temperatureRange) K, tint -150...150")
        }
        try stage { $0.whiteBalanceMode = .locked; $0.whiteBalanceTemperatureAndTint = v }
    }

    /// The gains for a light (AVFoundation's `deviceWhiteBalanceGains(for:)`), by ``WhiteBalanceModel``.
    public func deviceWhiteBalanceGains(for v: WhiteBalanceTemperatureAndTintValues) -> WhiteBalanceGains {
        WhiteBalanceModel.gains(for: v)
    }

    /// The light some gains balance for (AVFoundation's `temperatureAndTintValues(for:)`).
    public func temperatureAndTintValues(for gains: WhiteBalanceGains) -> WhiteBalanceTemperatureAndTintValues {
        WhiteBalanceModel.temperatureAndTint(for: gains)
    }

    /// The gains in force (AVFoundation's `deviceWhiteBalanceGains`): from the locked setting, else
    /// the device's `white_balance_temperature` when its automatic balance is off, else the latest
    /// frame's `white_balance_k` the session saw (``noteWhiteBalance(_:)``), else the native balance.
    public var deviceWhiteBalanceGains: WhiteBalanceGains {
        if settings.whiteBalanceMode == .locked, let v = settings.whiteBalanceTemperatureAndTint { return WhiteBalanceModel.gains(for: v) }
        if let c = controls, (try? c.value(of: .whiteBalanceAuto)) != 1, let k = try? c.value(of: .whiteBalanceTemperature) {
            return WhiteBalanceModel.gains(for: .init(temperature: Double(k)))
        }
        let bits = observedWhiteBalance.load(ordering: .relaxed)
        let k = bits == 0 ? WhiteBalanceModel.nativeTemperature : Double(bitPattern: bits)
        return WhiteBalanceModel.gains(for: .init(temperature: k))
    }

    /// Records the white balance a frame carried (`FrameMetadata.whiteBalance`), for
    /// ``deviceWhiteBalanceGains``; the session calls it for every frame its control stages saw
    /// (one relaxed atomic store: no lock on the stage thread).
    public func noteWhiteBalance(_ kelvin: Double) {
        guard kelvin > 0, kelvin.isFinite else { return }
        observedWhiteBalance.store(kelvin.bitPattern, ordering: .relaxed)
    }
    /// The latest frame's white balance, K, as `Double` bits (0: none yet). Relaxed: a lone value,
    /// no other memory is published with it.
    private let observedWhiteBalance = Atomic<UInt64>(0)

    // MARK: Frame rate

    /// The frame interval the device streams at (AVFoundation's `activeVideoMinFrameDuration`):
    /// the one set, else the source's active one, else 1/30 s.
    public var activeVideoMinFrameDuration: FrameInterval {
        settings.activeVideoMinFrameDuration ?? source.activeConfiguration?.interval ?? FrameInterval(numerator: 1, denominator: 30)
    }

    /// The longest exposure the exposure loop may use (AVFoundation's `activeVideoMaxFrameDuration`):
    /// the one set, else ``activeVideoMinFrameDuration``.
    public var activeVideoMaxFrameDuration: FrameInterval {
        settings.activeVideoMaxFrameDuration ?? activeVideoMinFrameDuration
    }

    /// The frame intervals the active format lists (empty when the device lists none).
    public var supportedFrameIntervals: [FrameInterval] {
        let cfg = settings.activeFormat.map { ($0.pixelFormat, $0.width, $0.height) }
            ?? source.activeConfiguration.map { ($0.format.pixelFormat, $0.format.width, $0.format.height) }
        guard let (pf, w, h) = cfg, let f = formats.first(where: { $0.pixelFormat == pf }) else { return [] }
        return f.sizes.first(where: { $0.contains(width: w, height: h) })?.intervals ?? []
    }

    /// Sets the frame interval (staged; needs the lock). On a running session it applies when the
    /// lock is released: `VIDIOC_S_PARM` while streaming where the driver takes it, else the
    /// stream restarts around it between two frames (``FrameRateChange``); the exposure loop's
    /// limit follows. The interval must be one the active format lists (any 1/240 … 10 s interval
    /// when it lists none).
    /// - Throws: `SessionError.invalidConfiguration` for an interval the format does not offer,
    ///   `SessionError.notLockedForConfiguration`.
    public func setActiveVideoMinFrameDuration(_ interval: FrameInterval) throws {
        try checkInterval(interval, "frame duration")
        try stage {
            $0.activeVideoMinFrameDuration = interval
            if let m = $0.activeVideoMaxFrameDuration, m.nanoseconds < interval.nanoseconds { $0.activeVideoMaxFrameDuration = interval }
        }
    }

    /// Sets the longest frame time the exposure loop may expose for (staged; at least the frame
    /// interval; drivers that slow the stream for long exposures, such as UVC's
    /// `exposure_dynamic_framerate`, then drop towards it in the dark).
    public func setActiveVideoMaxFrameDuration(_ interval: FrameInterval) throws {
        guard interval.numerator > 0, interval.denominator > 0, interval.nanoseconds <= 10_000_000_000 else {
            throw SessionError.invalidConfiguration(reason: "frame duration \(interval) is outside 1/240 s ... 10 s")
        }
        let minimum = state.withLock { ($0.staged ?? $0.settings).activeVideoMinFrameDuration } ?? activeVideoMinFrameDuration
        guard interval.nanoseconds >= minimum.nanoseconds else {
            throw SessionError.invalidConfiguration(reason: "max frame duration \(interval) is shorter than the min frame duration \(minimum)")
        }
        try stage { $0.activeVideoMaxFrameDuration = interval }
    }

    private func checkInterval(_ interval: FrameInterval, _ what: String) throws {
        guard interval.numerator > 0, interval.denominator > 0, (4_166_666...10_000_000_000).contains(interval.nanoseconds) else {
            throw SessionError.invalidConfiguration(reason: "\(what) \(interval) is outside 1/240 s ... 10 s")
        }
        let offered = supportedFrameIntervals
        guard offered.isEmpty || offered.contains(where: { $0.fps == interval.fps }) else {
            throw SessionError.invalidConfiguration(reason: "\(what) \(interval) is not offered by the active format (\(offered.map(\.description).joined(separator: ", ")))")
        }
    }

    /// The format to stream when the session preset is `inputPriority`.
    public func setActiveFormat(_ request: StreamRequest) throws {
        try stage { $0.activeFormat = request }
    }

    private static func checkPoint(_ p: NormalizedPoint) throws {
        guard (0...1).contains(p.x), (0...1).contains(p.y) else {
            throw SessionError.invalidConfiguration(reason: "point of interest (\(p.x), \(p.y)) is outside 0...1")
        }
    }

    private func validate(_ s: DeviceSettings) throws {
        if s.exposureMode == .custom && (s.customExposureDuration == nil || s.customGain == nil) {
            throw SessionError.invalidConfiguration(reason: "custom exposure needs a duration and a gain (setExposureModeCustom)")
        }
    }
}

/// An input that takes media from a device (AVFoundation's `AVCaptureDeviceInput`).
public final class CaptureDeviceInput: CaptureInput, @unchecked Sendable {
    public let device: CaptureDevice
    public init(device: CaptureDevice) {
        self.device = device
        super.init(mediaType: .video)
    }
}
