import Viewfinder

/// Something that fires a flash for a photo: the photo output asks whether to fire, fires, waits
/// ``latencyFrames`` frames, captures, then ends the strobe.
public protocol PhotoFlashing: AnyObject, Sendable {
    /// The flash modes photo settings may ask for (`[.off]` without a flash).
    var supportedFlashModes: [FlashMode] { get }
    /// Whether `mode` fires now (`.auto`: from the scene).
    func shouldFire(_ mode: FlashMode) -> Bool
    /// Arms and strobes the flash.
    func fire() throws
    /// Frames between ``fire()`` and the first frame lit by it.
    var latencyFrames: Int { get }
    /// Ends the strobe, restores the LED's resting mode and returns the faults the driver reported.
    func end() -> FlashFaults
}

/// Fires a V4L2 flash through the device's flash controls: on ``fire()`` `led_mode` flash,
/// `strobe_source` software, `intensity` (when ``level`` is set) and `strobe`; on ``end()``
/// `stop_strobe`, a read of `faults`, and `led_mode` back to torch or none as the device's torch
/// mode wants. Errors are the device's (`DeviceError`).
public final class DeviceFlash: PhotoFlashing, @unchecked Sendable {
    // @unchecked Sendable: `level` is set before captures; `fire`/`end` run in sequence on the
    // photo output's thread; the device is thread-safe.
    public let device: CaptureDevice
    /// Flash level, 0 … 1 of `intensity`'s range; nil leaves the driver's setting.
    public var level: Double?

    public init(device: CaptureDevice, level: Double? = nil) {
        self.device = device
        self.level = level
    }

    public var supportedFlashModes: [FlashMode] { device.hasFlash ? [.off, .on, .auto] : [.off] }

    public func shouldFire(_ mode: FlashMode) -> Bool {
        switch mode {
        case .off: return false
        case .on: return true
        case .auto: return device.isLowLightScene
        }
    }

    public var latencyFrames: Int { device.controls?.controlLatencyFrames ?? 1 }

    public func fire() throws {
        guard let c = device.controls, device.hasFlash else {
            throw PhotoCaptureError.flashUnavailable("the device has no flash (led_mode with flash, strobe)")
        }
        let faults = try device.readFlashFaults()
        guard faults.isEmpty else { throw PhotoCaptureError.flashUnavailable("the flash driver reports faults: \(faults)") }
        try c.set(.flashLEDMode, to: 1)
        if c.supports(.flashStrobeSource) { try c.set(.flashStrobeSource, to: 0) }
        if let level, let d = c.descriptor(.flashIntensity) {
            let span = Double(d.maximum - d.minimum), step = Double(max(d.step, 1))
            let steps = min((span * min(max(level, 0), 1) / step).rounded(), (span / step).rounded(.down))
            try c.set(.flashIntensity, to: d.minimum + Int64(steps) * Int64(step))
        }
        try c.set(.flashStrobe, to: 1)
    }

    public func end() -> FlashFaults {
        guard let c = device.controls else { return [] }
        if c.supports(.flashStrobeStop) { try? c.set(.flashStrobeStop, to: 1) }
        let faults = (try? device.readFlashFaults()) ?? []
        try? c.set(.flashLEDMode, to: device.isTorchActive ? 2 : 0)
        return faults
    }
}
