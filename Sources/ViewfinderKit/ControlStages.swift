/// Carries out a device's exposure and focus modes with the built-in `ExposureStage` and
/// `FocusStage`, built from typed options: the mode, the bias, custom exposure values, and the
/// points of interest mapped to sensor coordinates. Installed in `StageRegistry.builtIn`, so
/// `CaptureSession(registry: .builtIn)` runs them.
public struct BuiltInControlStages: DeviceControlStageProvider {
    public init() {}

    /// Digital zoom by crop and resample (`DigitalZoom`, over the stabiliser's warp).
    public func makeDigitalZoom() -> (any DigitalZooming)? { DigitalZoom() }

    public func controlStages(for s: DeviceSettings, device: CaptureDevice,
                              sensorPoint: @Sendable (NormalizedPoint) -> NormalizedPoint) throws -> [StageSpec] {
        var specs: [StageSpec] = []
        if s.exposureMode != .locked, device.isExposureModeSupported(s.exposureMode) {
            specs.append(.stage(ExposureStage.self, options: exposureOptions(s, sensorPoint: sensorPoint)))
        }
        if s.focusMode != .locked, device.isFocusModeSupported(s.focusMode) {
            var o = FocusOptions()
            o.mode = s.focusMode
            if let p = s.focusPointOfInterest { o.region = .point; o.point = sensorPoint(p) }
            specs.append(.stage(FocusStage.self, options: o))
        } else if s.focusMode == .locked, let p = s.lensPosition, device.isFocusModeSupported(.continuous) {
            // A lens position set on a running session: the locked focus stage queues
            // `focus_absolute` for the capture side, so the lens moves on the next frames.
            var o = FocusOptions()
            o.mode = .locked
            o.position = p
            specs.append(.stage(FocusStage.self, options: o))
        }
        if let wb = whiteBalanceOptions(s, device: device) {
            specs.append(.stage(WhiteBalanceStage.self, options: wb))
        }
        return specs
    }

    /// The white-balance stage's options for the device's settings: `continuous` on a device with
    /// `white_balance_automatic` switches the device's own loop on; `locked` without a temperature
    /// keeps whatever balance is in force (nil: no stage).
    public func whiteBalanceOptions(_ s: DeviceSettings, device: CaptureDevice) -> WhiteBalanceOptions? {
        // A monochrome stream has no colour to balance: its modes are taken and carry no stage
        // (the stage itself refuses GREY when a pipeline names it).
        let format = s.activeFormat?.pixelFormat ?? device.source.activeConfiguration?.format.pixelFormat
        if format == .grey, s.whiteBalanceMode != .continuous || device.controls?.supports(.whiteBalanceAuto) != true { return nil }
        var o = WhiteBalanceOptions()
        o.mode = s.whiteBalanceMode
        switch s.whiteBalanceMode {
        case .continuous where device.controls?.supports(.whiteBalanceAuto) == true:
            o.correction = .deviceAutomatic
        case .locked:
            guard let v = s.whiteBalanceTemperatureAndTint else { return nil }
            o.temperatureK = v.temperature
            o.tint = v.tint
        case .auto, .continuous:
            break
        }
        return o
    }

    /// The exposure stage's options for the device's settings.
    public func exposureOptions(_ s: DeviceSettings, sensorPoint: (NormalizedPoint) -> NormalizedPoint) -> ExposureOptions {
        var o = ExposureOptions()
        o.mode = s.exposureMode
        o.bias = s.exposureTargetBias
        // Expose up to the longest frame time allowed (else the stage takes the frame interval).
        if let m = s.activeVideoMaxFrameDuration, let f = s.activeVideoMinFrameDuration, m.nanoseconds > f.nanoseconds {
            o.maxExposureMs = min(1000, Double(m.nanoseconds) / 1e6)
        }
        if let p = s.exposurePointOfInterest { o.metering = .spot; o.point = sensorPoint(p) }
        if s.exposureMode == .custom, let us = s.customExposureDuration, let g = s.customGain {
            o.exposureMs = us / 1000
            o.gain = g
        }
        return o
    }
}
