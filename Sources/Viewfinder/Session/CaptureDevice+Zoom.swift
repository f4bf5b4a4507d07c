import Foundation

// MARK: - Zoom (AVFoundation's videoZoomFactor and zoom ramps)

extension CaptureDevice {
    /// The largest digital zoom (crop and resample) the session offers.
    public static let maxDigitalZoomFactor = 8.0

    /// Whether zoom is optical: the device has `zoom_absolute` (else the zoom is digital).
    public var hasOpticalZoom: Bool { controls?.supports(.zoomAbsolute) ?? false }

    /// The smallest zoom factor (AVFoundation's `minAvailableVideoZoomFactor`): 1, the full picture.
    public var minAvailableVideoZoomFactor: Double { 1 }

    /// The largest zoom factor (AVFoundation's `maxAvailableVideoZoomFactor`). Optical:
    /// `zoom_absolute`'s maximum over its minimum when the minimum is positive (UVC ranges such as
    /// 100…500 read as focal-length ratios), else ``maxDigitalZoomFactor`` spread linearly over
    /// the range. Digital: ``maxDigitalZoomFactor``.
    public var maxAvailableVideoZoomFactor: Double {
        guard let d = controls?.descriptor(.zoomAbsolute) else { return Self.maxDigitalZoomFactor }
        return d.minimum > 0 ? Double(d.maximum) / Double(d.minimum) : Self.maxDigitalZoomFactor
    }

    /// The `zoom_absolute` value for a zoom factor (nil without that control).
    public func zoomControlValue(forFactor factor: Double) -> Int64? {
        guard let d = controls?.descriptor(.zoomAbsolute) else { return nil }
        let f = min(max(factor, 1), maxAvailableVideoZoomFactor)
        let raw = d.minimum > 0 ? Double(d.minimum) * f : Double(d.minimum) + (f - 1) / (Self.maxDigitalZoomFactor - 1) * Double(d.maximum - d.minimum)
        let step = Double(max(d.step, 1))
        let v = Double(d.minimum) + ((raw - Double(d.minimum)) / step).rounded() * step
        return min(d.maximum, max(d.minimum, Int64(v)))
    }

    /// The zoom factor frames have now (AVFoundation's `videoZoomFactor`): during a ramp the
    /// ramp's current value, else the factor set.
    public var videoZoomFactor: Double {
        let bits = observedZoom.load(ordering: .relaxed)
        return bits == 0 ? settings.videoZoomFactor : Double(bitPattern: bits)
    }

    /// Whether a zoom ramp is under way (AVFoundation's `isRampingVideoZoom`).
    public var isRampingVideoZoom: Bool {
        let s = settings
        return s.videoZoomRate > 0 && abs(videoZoomFactor - s.videoZoomFactor) > 1e-9
    }

    /// Sets the zoom factor (staged; needs the lock), at once — cancelling a ramp. Optical zoom
    /// writes `zoom_absolute` (``zoomControlValue(forFactor:)``); digital zoom crops the centre
    /// `1/factor` of each frame and scales it back up after the control stages, and points of
    /// interest given in the zoomed picture are mapped to the full frame for metering.
    /// - Throws: `SessionError.invalidConfiguration` outside ``minAvailableVideoZoomFactor`` …
    ///   ``maxAvailableVideoZoomFactor`` (AVFoundation raises there);
    ///   `SessionError.unsupportedMode` for digital zoom on a compressed (MJPEG) stream.
    public func setVideoZoomFactor(_ factor: Double) throws {
        try checkZoom(factor)
        try stageZoom(factor, rate: 0)
    }

    /// Ramps the zoom towards `factor` at `rate` powers of two per second (AVFoundation's
    /// `ramp(toVideoZoomFactor:withRate:)`: rate 1 doubles the factor each second), advanced once
    /// per frame by the frame interval.
    public func ramp(toVideoZoomFactor factor: Double, withRate rate: Double) throws {
        try checkZoom(factor)
        guard rate > 0, rate.isFinite else { throw SessionError.invalidConfiguration(reason: "zoom ramp rate \(rate) must be positive") }
        try stageZoom(factor, rate: rate)
    }

    /// Stops a ramp where it is (AVFoundation's `cancelVideoZoomRamp()`).
    public func cancelVideoZoomRamp() throws {
        try stageZoom(videoZoomFactor, rate: 0)
    }

    private func checkZoom(_ factor: Double) throws {
        guard factor.isFinite, factor >= minAvailableVideoZoomFactor, factor <= maxAvailableVideoZoomFactor else {
            throw SessionError.invalidConfiguration(reason: "zoom factor \(factor) is outside \(minAvailableVideoZoomFactor)...\(maxAvailableVideoZoomFactor)")
        }
        if !hasOpticalZoom, factor != 1 {
            let pf = settings.activeFormat?.pixelFormat ?? source.activeConfiguration?.format.pixelFormat
            // The digital zoom crops and resamples YUV and grey frames in place; on MJPEG, RGB and
            // Bayer streams it would do nothing, so it is refused.
            if let pf, !pf.hasYUVPlanes {
                let kind = pf.isCompressed ? "a compressed format" : pf.isBayer ? "a Bayer format" : "an RGB format"
                throw SessionError.unsupportedMode(device: uniqueID, mode: "digital zoom", reason: "it streams \(pf), \(kind) (crop and resample need YUV or grey frames)")
            }
        }
    }

    /// The full-frame point under a point of the digitally zoomed picture (identity for optical zoom).
    public func unzoomedPoint(_ p: NormalizedPoint, factor: Double) -> NormalizedPoint {
        guard !hasOpticalZoom, factor > 1 else { return p }
        return NormalizedPoint(x: 0.5 + (p.x - 0.5) / factor, y: 0.5 + (p.y - 0.5) / factor)
    }

    /// Records the zoom factor of the latest frame (stage thread; one relaxed store).
    func noteZoom(_ factor: Double) { observedZoom.store(factor.bitPattern, ordering: .relaxed) }
}

/// The zoom as the stage thread carries it out: the factor now, moved towards the target at the
/// ramp's rate once per frame. Stage thread only.
struct ZoomRamp {
    var current: Double = 1
    var target: Double = 1
    /// Powers of two per second; 0: jump.
    var rate: Double = 0

    /// Moves `current` one frame of `seconds` towards the target.
    mutating func advance(seconds: Double) {
        guard current != target else { return }
        if rate <= 0 || seconds <= 0 { current = target; return }
        let step = pow(2, rate * seconds)
        current = target > current ? min(target, current * step) : max(target, current / step)
        // Steps multiplied up carry rounding (and a frame interval in whole ns): land exactly on the target.
        if abs(current - target) <= 1e-6 * target { current = target }
    }
}
