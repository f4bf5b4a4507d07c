// MARK: - Manual lens position and ISO (AVFoundation's lensPosition, ISO and their "current" sentinels)

extension CaptureDevice {
    /// Device gain units per 1.0× of gain (`gain` = 100 is unity), the convention the session's
    /// custom exposure and the exposure stage use (`ExposureOptions.gainUnit`).
    public static let gainUnit = 100.0

    /// Passed as a lens position, locks the lens where it is now (AVFoundation's
    /// `AVCaptureDevice.currentLensPosition`): the position of the latest frame the session's
    /// control stages saw, else the device's `focus_absolute` value. -1, outside every valid position.
    public static let currentLensPosition = -1.0

    /// Passed as the ISO, keeps the gain in use now (AVFoundation's `AVCaptureDevice.currentISO`):
    /// the latest frame's gain, else the device's `gain` value. -1, outside every valid ISO.
    public static let currentISO = -1.0

    /// Passed as the duration, keeps the exposure time in use now (AVFoundation's
    /// `AVCaptureDevice.currentExposureDuration`): the latest frame's exposure time, else the
    /// device's `exposure_time_absolute` value. -1, outside every valid duration.
    public static let currentExposureDuration = -1.0

    // MARK: Lens position

    /// The device's lens positions in `focus_absolute` units (nil without that control).
    public var lensPositionRange: ClosedRange<Double>? {
        guard let d = controls?.descriptor(.focusAbsolute) else { return nil }
        return Double(d.minimum)...Double(max(d.maximum, d.minimum))
    }

    /// The lens position now in device units: the latest frame's (from the control stages'
    /// per-frame metadata while a session runs), else the device's `focus_absolute` value, else
    /// the locked position set (nil for a device without a focus control and no frames seen).
    public var lensPositionInDeviceUnits: Double? {
        let seen = Double(bitPattern: observedLens.load(ordering: .relaxed))
        if seen.isFinite { return seen }
        if let v = try? controls?.value(of: .focusAbsolute) { return Double(v) }
        return settings.lensPosition
    }

    /// The lens position now on AVFoundation's scale (`lensPosition`): 0 is the shortest focus
    /// position of ``lensPositionRange``, 1 the longest; device units are mapped linearly. 0 when
    /// the device has no focus control.
    public var lensPosition: Double {
        guard let r = lensPositionRange, let p = lensPositionInDeviceUnits else { return 0 }
        return r.upperBound > r.lowerBound ? min(1, max(0, (p - r.lowerBound) / (r.upperBound - r.lowerBound))) : 0
    }

    /// Locks the lens at `normalizedLensPosition` on AVFoundation's 0…1 scale (its
    /// `setFocusModeLocked(lensPosition:completionHandler:)`), or at ``currentLensPosition``.
    /// Mapped linearly onto ``lensPositionRange`` and rounded to the control's step when written.
    /// Staged: needs the lock; on a running session the lens moves on the frames after the lock
    /// is released (the focus stage queues `focus_absolute` for the capture side).
    /// - Throws: `SessionError.unsupportedMode` without a focus control,
    ///   `SessionError.invalidConfiguration` outside 0…1, `SessionError.notLockedForConfiguration`.
    public func setFocusModeLocked(normalizedLensPosition p: Double) throws {
        guard let r = lensPositionRange else {
            throw SessionError.unsupportedMode(device: uniqueID, mode: "locked focus at a lens position", reason: "it has no focus control")
        }
        if p == Self.currentLensPosition {
            try setFocusModeLocked(lensPosition: min(r.upperBound, max(r.lowerBound, lensPositionInDeviceUnits ?? r.lowerBound)))
            return
        }
        guard p.isFinite, (0...1).contains(p) else {
            throw SessionError.invalidConfiguration(reason: "lens position \(p) is outside 0...1")
        }
        try setFocusModeLocked(lensPosition: r.lowerBound + p * (r.upperBound - r.lowerBound))
    }

    // MARK: ISO

    /// The shortest exposure, µs (AVFoundation's `activeFormat.minExposureDuration`): the
    /// `exposure_time_absolute` control's minimum (100 µs units); nil without the control.
    public var minExposureDurationMicroseconds: Double? {
        controls?.descriptor(.exposureTime).map { Double(max(1, $0.minimum)) * 100 }
    }

    /// The longest exposure, µs (AVFoundation's `activeFormat.maxExposureDuration`): the
    /// `exposure_time_absolute` control's maximum; nil without the control. (A custom exposure
    /// longer than the frame duration lowers the frame rate where the driver allows it.)
    public var maxExposureDurationMicroseconds: Double? {
        controls?.descriptor(.exposureTime).map { Double($0.maximum) * 100 }
    }

    /// The lowest ISO (AVFoundation's `activeFormat.minISO`): 100, unity gain. ISO maps linearly
    /// onto gain, ISO 100 = gain 1× = `gain` control value ``gainUnit``; custom exposure never
    /// goes below unity gain.
    public var minISO: Double { 100 }

    /// The highest ISO (AVFoundation's `activeFormat.maxISO`): 100 × the device's largest gain
    /// (`gain` maximum / ``gainUnit``, at most 64×); 100 without a gain control or with one that
    /// does not reach above unity.
    public var maxISO: Double {
        guard let d = controls?.descriptor(.gain) else { return minISO }
        return max(minISO, 100 * min(64, Double(d.maximum) / Self.gainUnit))
    }

    /// The gain now, 1 = unity: the latest frame's, else the device's `gain` value, else the custom
    /// gain set, else 1.
    public var currentGain: Double {
        let seen = Double(bitPattern: observedGain.load(ordering: .relaxed))
        if seen.isFinite { return seen }
        if let v = try? controls?.value(of: .gain) { return Double(v) / Self.gainUnit }
        return settings.customGain ?? 1
    }

    /// The ISO now (AVFoundation's `iso`): 100 × ``currentGain``.
    public var iso: Double { 100 * currentGain }

    /// The exposure time now in µs (AVFoundation's `exposureDuration`): the latest frame's, else
    /// the device's `exposure_time_absolute` (100 µs units), else the custom duration set (nil
    /// when none of these is known).
    public var exposureDurationMicroseconds: Double? {
        let seen = Double(bitPattern: observedExposureTime.load(ordering: .relaxed))
        if seen.isFinite { return seen }
        if let v = try? controls?.value(of: .exposureTime) { return Double(v) * 100 }
        return settings.customExposureDuration
    }

    /// Custom exposure by duration and ISO (AVFoundation's
    /// `setExposureModeCustom(duration:iso:completionHandler:)`): ISO maps to gain linearly,
    /// gain = ISO / 100 (ISO 100 is unity gain), then as ``setExposureModeCustom(durationMicroseconds:gain:)``.
    /// ``currentExposureDuration`` and ``currentISO`` keep the value in use now
    /// (``exposureDurationMicroseconds``, ``iso``). On a running session the exposure stage applies
    /// it on the frames after the lock is released.
    /// - Throws: `SessionError.invalidConfiguration` for an ISO outside ``minISO`` … ``maxISO`` or
    ///   a duration outside ``minExposureDurationMicroseconds`` … ``maxExposureDurationMicroseconds``
    ///   (or not known, for ``currentExposureDuration``),
    ///   `SessionError.unsupportedMode` without exposure controls.
    public func setExposureModeCustom(durationMicroseconds: Double, iso: Double) throws {
        let d: Double
        if durationMicroseconds == Self.currentExposureDuration {
            guard let now = exposureDurationMicroseconds else {
                throw SessionError.invalidConfiguration(reason: "the current exposure duration is not known yet (no frame seen, no exposure control)")
            }
            d = now
        } else {
            d = durationMicroseconds
        }
        let i = iso == Self.currentISO ? min(maxISO, max(minISO, self.iso)) : iso
        guard i.isFinite, i >= minISO, i <= maxISO else {
            throw SessionError.invalidConfiguration(reason: "ISO \(iso) is outside \(minISO)...\(maxISO)")
        }
        guard d.isFinite, d > 0 else {
            throw SessionError.invalidConfiguration(reason: "exposure duration \(durationMicroseconds) µs is not positive")
        }
        try setExposureModeCustom(durationMicroseconds: d, gain: i / 100)
    }

    /// Records what a frame was taken with (stage thread: relaxed stores, no lock), for
    /// ``lensPosition``, ``iso`` and ``exposureDurationMicroseconds``.
    func noteApplied(lens: Double?, exposureMicroseconds: Double?, gain: Double?) {
        if let lens, lens.isFinite { observedLens.store(lens.bitPattern, ordering: .relaxed) }
        if let e = exposureMicroseconds, e.isFinite, e > 0 { observedExposureTime.store(e.bitPattern, ordering: .relaxed) }
        if let g = gain, g.isFinite, g > 0 { observedGain.store(g.bitPattern, ordering: .relaxed) }
    }
}
