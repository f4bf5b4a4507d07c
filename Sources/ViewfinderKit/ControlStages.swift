/// Carries out a device's exposure and focus modes with the built-in `ExposureStage` and
/// `FocusStage`, built from typed options: the mode, the bias, custom exposure values, and the
/// points of interest mapped to sensor coordinates. Installed in `StageRegistry.builtIn`, so
/// `CaptureSession(registry: .builtIn)` runs them.
public struct BuiltInControlStages: DeviceControlStageProvider {
    public init() {}

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
        }
        return specs
    }

    /// The exposure stage's options for the device's settings.
    public func exposureOptions(_ s: DeviceSettings, sensorPoint: (NormalizedPoint) -> NormalizedPoint) -> ExposureOptions {
        var o = ExposureOptions()
        o.mode = s.exposureMode
        o.bias = s.exposureTargetBias
        if let p = s.exposurePointOfInterest { o.metering = .spot; o.point = sensorPoint(p) }
        if s.exposureMode == .custom, let us = s.customExposureDuration, let g = s.customGain {
            o.exposureMs = us / 1000
            o.gain = g
        }
        return o
    }
}
