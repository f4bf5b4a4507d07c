/// Torch modes (AVFoundation's `AVCaptureDevice.TorchMode`).
public enum TorchMode: String, Sendable, Codable, CaseIterable, OptionChoice {
    /// The LED is off.
    case off
    /// The LED is lit continuously.
    case on
    /// The session lights the LED while the scene is too dark for the exposure loop (its error
    /// ≥ 1 EV at its limits) and turns it off when the scene is too bright with it (error ≤ −1 EV).
    case auto
}

/// Flash modes for a photo (AVFoundation's `AVCaptureDevice.FlashMode`).
public enum FlashMode: String, Sendable, Codable, CaseIterable, OptionChoice {
    /// No flash.
    case off
    /// Fire the flash for every photo.
    case on
    /// Fire the flash when ``CaptureDevice/isLowLightScene`` says the scene is too dark.
    case auto
}

/// The faults a flash driver reports (`V4L2_CID_FLASH_FAULT`, a bitmask). Reading the control
/// clears the faults on most drivers, so a fault is reported once.
public struct FlashFaults: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// The corresponding C constant is `V4L2_FLASH_FAULT_OVER_VOLTAGE`.
    public static let overVoltage = FlashFaults(rawValue: 1 << 0)
    /// The strobe lasted longer than the flash timeout (`V4L2_FLASH_FAULT_TIMEOUT`).
    public static let timeout = FlashFaults(rawValue: 1 << 1)
    /// The corresponding C constant is `V4L2_FLASH_FAULT_OVER_TEMPERATURE`.
    public static let overTemperature = FlashFaults(rawValue: 1 << 2)
    /// The corresponding C constant is `V4L2_FLASH_FAULT_SHORT_CIRCUIT`.
    public static let shortCircuit = FlashFaults(rawValue: 1 << 3)
    /// The corresponding C constant is `V4L2_FLASH_FAULT_OVER_CURRENT`.
    public static let overCurrent = FlashFaults(rawValue: 1 << 4)
    /// The indicator LED is faulty (`V4L2_FLASH_FAULT_INDICATOR`).
    public static let indicator = FlashFaults(rawValue: 1 << 5)
    /// The corresponding C constant is `V4L2_FLASH_FAULT_UNDER_VOLTAGE`.
    public static let underVoltage = FlashFaults(rawValue: 1 << 6)
    /// The corresponding C constant is `V4L2_FLASH_FAULT_INPUT_VOLTAGE`.
    public static let inputVoltage = FlashFaults(rawValue: 1 << 7)
    /// The corresponding C constant is `V4L2_FLASH_FAULT_LED_OVER_TEMPERATURE`.
    public static let ledOverTemperature = FlashFaults(rawValue: 1 << 8)

    static let names: [(FlashFaults, String)] = [
        (.overVoltage, "over-voltage"), (.timeout, "timeout"), (.overTemperature, "over-temperature"), (.shortCircuit, "short circuit"),
        (.overCurrent, "over-current"), (.indicator, "indicator"), (.underVoltage, "under-voltage"), (.inputVoltage, "input voltage"),
        (.ledOverTemperature, "LED over-temperature"),
    ]
    /// The faults by name (`over-temperature, timeout`), `none` when empty.
    public var description: String {
        let n = Self.names.filter { contains($0.0) }.map(\.1)
        return n.isEmpty ? "none" : n.joined(separator: ", ")
    }
}

/// What the device's torch was last set to.
struct TorchState {
    var mode: TorchMode = .off
    /// 0 … 1 while lit (or while `.auto` may light it), 0 when off.
    var level: Double = 0
    /// Whether the session's `.auto` logic lit the LED (its last request).
    var autoLit = false
}

// MARK: - Torch and flash (AVFoundation's torch and flash API over V4L2's flash controls)

extension CaptureDevice {
    /// The highest torch level (AVFoundation's `AVCaptureMaxAvailableTorchLevel`): 1, the
    /// maximum of the device's `torch_intensity`.
    public static let maxAvailableTorchLevel = 1.0

    /// LED-mode values of `V4L2_CID_FLASH_LED_MODE`.
    enum LEDMode: Int64 { case none = 0, flash = 1, torch = 2 }

    private func ledModeOffers(_ m: LEDMode) -> Bool {
        guard let d = controls?.descriptor(.flashLEDMode) else { return false }
        return d.menu.isEmpty ? d.range.contains(m.rawValue) : d.menu[m.rawValue] != nil
    }

    /// Whether the device has a torch: a `led_mode` control offering `torch`.
    public var hasTorch: Bool { ledModeOffers(.torch) }

    /// Whether the device has a flash: a `led_mode` control offering `flash` and a `strobe` button.
    public var hasFlash: Bool { ledModeOffers(.flash) && controls?.supports(.flashStrobe) == true }

    /// Whether the torch can be lit now: the device has one and its driver reports no fault
    /// (``readFlashFaults()``). AVFoundation's `isTorchAvailable` (false while overheated).
    public var isTorchAvailable: Bool { hasTorch && ((try? readFlashFaults()) ?? []).isEmpty }

    /// Whether the flash can fire now: the device has one and its driver reports no fault.
    public var isFlashAvailable: Bool { hasFlash && ((try? readFlashFaults()) ?? []).isEmpty }

    /// Reads the flash driver's fault bits (`faults`); empty on a device without that control.
    /// Most drivers clear the bits on read.
    public func readFlashFaults() throws -> FlashFaults {
        guard let c = controls, c.supports(.flashFault) else { return [] }
        return FlashFaults(rawValue: UInt32(truncatingIfNeeded: try c.value(of: .flashFault)))
    }

    /// The torch mode last set (``setTorchMode(_:)``, ``setTorchModeOn(level:)``).
    public var torchMode: TorchMode { torchBox.withLock { $0.mode } }

    /// The torch's level now, 0 … 1 (0 while off; AVFoundation's `torchLevel`).
    public var torchLevel: Double {
        torchBox.withLock { s in s.mode == .on || (s.mode == .auto && s.autoLit) ? s.level : 0 }
    }

    /// Whether the torch is lit now (AVFoundation's `isTorchActive`).
    public var isTorchActive: Bool { torchLevel > 0 }

    /// Every torch mode is supported on a device with a torch; on one without, only `.off` (what
    /// it always is).
    public func isTorchModeSupported(_ mode: TorchMode) -> Bool { hasTorch || mode == .off }

    /// Sets the torch mode (needs the configuration lock). Applies at once: `.off` writes
    /// `led_mode` none, `.on` is ``setTorchModeOn(level:)`` at ``maxAvailableTorchLevel``, `.auto`
    /// sets `torch_intensity` to its maximum and leaves lighting to the session (see ``TorchMode/auto``).
    /// - Throws: `SessionError.unsupportedMode` on a device without a torch (except for `.off`,
    ///   which such a device always is),
    ///   `SessionError.notLockedForConfiguration` without the lock, `DeviceError` when a write fails.
    public func setTorchMode(_ mode: TorchMode) throws {
        // A device without a torch is always off: turning it off is no error (a ported app's
        // clean-up sets `.off` whatever the camera).
        if mode == .off, !hasTorch {
            guard isLockedForConfiguration else { throw SessionError.notLockedForConfiguration(device: uniqueID) }
            return
        }
        try checkTorch(mode.rawValue)
        switch mode {
        case .on:
            try setTorchModeOn(level: Self.maxAvailableTorchLevel)
        case .off:
            try controls!.set(.flashLEDMode, to: LEDMode.none.rawValue)
            torchBox.withLock { $0 = TorchState() }
        case .auto:
            try writeTorchIntensity(Self.maxAvailableTorchLevel)
            let lit = torchBox.withLock { $0.mode != .off && ($0.mode == .on || $0.autoLit) }
            if !lit { try controls!.set(.flashLEDMode, to: LEDMode.none.rawValue) }
            torchBox.withLock { $0 = TorchState(mode: .auto, level: Self.maxAvailableTorchLevel, autoLit: lit) }
        }
    }

    /// Lights the torch at `level` (0 < level ≤ 1, mapped linearly onto `torch_intensity`'s range
    /// and rounded to its step; AVFoundation's `setTorchModeOn(level:)`). Needs the configuration
    /// lock; applies at once: `torch_intensity` first, then `led_mode` torch, so the LED comes on
    /// at the asked level.
    /// - Throws: `SessionError.unsupportedMode` without a torch, `SessionError.invalidConfiguration`
    ///   for a level outside (0, 1], `SessionError.notLockedForConfiguration`, `DeviceError`.
    public func setTorchModeOn(level: Double) throws {
        try checkTorch("on")
        guard level > 0, level <= Self.maxAvailableTorchLevel, level.isFinite else {
            throw SessionError.invalidConfiguration(reason: "torch level \(level) is outside (0, 1]")
        }
        try writeTorchIntensity(level)
        try controls!.set(.flashLEDMode, to: LEDMode.torch.rawValue)
        torchBox.withLock { $0 = TorchState(mode: .on, level: level) }
    }

    private func checkTorch(_ what: String) throws {
        guard hasTorch else {
            throw SessionError.unsupportedMode(device: uniqueID, mode: "torch \(what)", reason: "it has no flash LED with a torch mode (led_mode)")
        }
        guard isLockedForConfiguration else { throw SessionError.notLockedForConfiguration(device: uniqueID) }
    }

    private func writeTorchIntensity(_ level: Double) throws {
        guard let c = controls, let d = c.descriptor(.torchIntensity) else { return }
        try c.set(.torchIntensity, to: Self.deviceValue(level, d))
    }

    /// `fraction` (0 … 1) of a control's range, rounded to its step, at least its minimum.
    static func deviceValue(_ fraction: Double, _ d: ControlDescriptor) -> Int64 {
        let span = Double(d.maximum - d.minimum)
        var steps = (span * fraction / Double(max(d.step, 1))).rounded()
        steps = max(0, min(steps, (span / Double(max(d.step, 1))).rounded(.down)))
        return d.minimum + Int64(steps) * max(d.step, 1)
    }

    /// The `led_mode` value the torch wants when no flash fires (to restore after a strobe).
    var torchRestingLEDMode: Int64 {
        torchBox.withLock { $0.mode == .on || ($0.mode == .auto && $0.autoLit) } ? LEDMode.torch.rawValue : LEDMode.none.rawValue
    }

    /// Whether the scene is too dark for the exposure loop: the latest metered frame still wanted
    /// ≥ 1 EV more light (the loop is at its longest exposure and highest gain). False before any
    /// frame was metered (no exposure stage runs: the session cannot tell). What flash `.auto` and
    /// torch `.auto` decide from (AVFoundation's `isFlashScene`).
    public var isLowLightScene: Bool {
        let e = Double(bitPattern: observedExposureError.load(ordering: .relaxed))
        return e.isFinite && e >= Self.lowLightEV
    }
    static let lowLightEV = 1.0

    /// Records a frame's metered exposure error (stage thread, one relaxed store) and, in torch
    /// `.auto`, queues the LED's switch on `requests` when the scene crosses ±1 EV.
    func noteExposure(errorEV: Double, requests: ControlRequestQueue?) {
        guard errorEV.isFinite else { return }
        observedExposureError.store(errorEV.bitPattern, ordering: .relaxed)
        guard let requests else { return }
        let change: Bool? = torchBox.withLock { s in
            guard s.mode == .auto else { return nil }
            if !s.autoLit && errorEV >= Self.lowLightEV { s.autoLit = true; return true }
            if s.autoLit && errorEV <= -Self.lowLightEV { s.autoLit = false; return false }
            return nil
        }
        if let on = change { requests.request(.flashLEDMode, to: on ? LEDMode.torch.rawValue : LEDMode.none.rawValue) }
    }
}

// MARK: - Frame rate changes

extension CaptureDevice {
    /// How the last frame-interval change on a running session was carried out (nil: none yet).
    public var lastFrameRateChange: FrameRateChange? { frameRateChangeBox.withLock { $0 } }

    func noteFrameRateChange(_ c: FrameRateChange) { frameRateChangeBox.withLock { $0 = c } }
}
