import Viewfinder

// The modes are the session's own `ExposureMode` (Viewfinder core), so the stage and
// `CaptureDevice` speak the same type.

/// Where the exposure stage looks.
public enum MeteringMode: String, OptionChoice {
    /// The mean of the whole picture.
    case matrix
    /// 60 % from the central quarter of the picture, 40 % from the whole.
    case centre
    /// A small window around the point of interest.
    case spot
}

/// Anti-flicker policy for mains-powered lighting.
public enum AntiFlicker: String, OptionChoice {
    case off
    /// Exposure times in whole 10 ms half-periods.
    case hz50 = "50hz"
    /// Exposure times in whole 8.33 ms half-periods.
    case hz60 = "60hz"
    /// Follow the device's `power_line_frequency` control (50/60 Hz), off when it has none.
    case auto
}

/// Options of ``ExposureStage``.
public struct ExposureOptions: StageOptions {
    public var mode: ExposureMode = .continuous
    public var metering: MeteringMode = .centre
    /// Point of interest for spot metering (normalised).
    public var point: NormalizedPoint = .center
    /// Spot window size as a fraction of the picture's width and height.
    public var spotSize: Double = 0.1
    /// Take every n-th sample in x and y.
    public var subsample: Int = 4
    /// Mean luma (0–255) the loop aims for at zero bias.
    public var targetLuma: Double = 110
    /// Exposure bias, EV (positive: brighter).
    public var bias: Double = 0
    /// Exposure time for `custom`, ms.
    public var exposureMs: Double = 10
    /// Gain for `custom` (1 = unity).
    public var gain: Double = 1
    /// Longest exposure the loop may choose, ms; 0 = the frame interval.
    public var maxExposureMs: Double = 0
    /// Highest gain the loop may choose (1 = unity).
    public var maxGain: Double = 16
    /// Device gain units per 1.0x (the sim and many UVC cameras use 100).
    public var gainUnit: Double = CaptureDevice.gainUnit
    public var antiFlicker: AntiFlicker = .auto
    /// Error below which the loop calls itself converged, EV.
    public var tolerance: Double = 0.08
    /// Error that makes a converged continuous loop adjust again, EV (hysteresis).
    public var hysteresis: Double = 0.25
    /// Consecutive frames beyond `hysteresis` before a converged loop adjusts again.
    public var patience: Int = 3
    /// Luma is proportional to exposure^(1/gamma): 1 for linear data, 2.2 for sRGB-like cameras and the sim.
    public var responseGamma: Double = 2.2

    public init() {}

    public static var fields: [OptionField<ExposureOptions>] {
        [
            .choice("mode", \.mode, "locked: meter only; auto: converge then lock; continuous: keep converging with hysteresis; custom: set exposure_ms and gain"),
            .choice("metering", \.metering, "matrix: whole-picture mean; centre: centre-weighted (60 % central quarter); spot: window around point"),
            .point("point", \.point, "Point of interest for spot metering"),
            .double("spot_size", \.spotSize, range: 0.02...0.5, unit: "fraction of width/height", "Spot window size"),
            .int("subsample", \.subsample, range: 1...16, unit: "pixels", "Meter every n-th pixel in x and y (4 = 1/16 of the pixels)"),
            .double("target", \.targetLuma, range: 16...235, unit: "luma 0-255", "Mean luma the loop aims for at zero bias"),
            .double("bias", \.bias, range: -4...4, unit: "EV", "Exposure bias (positive: brighter)"),
            .double("exposure_ms", \.exposureMs, range: 0.01...1000, unit: "ms", "Exposure time in custom mode"),
            .double("gain", \.gain, range: 1...64, unit: "x", "Gain in custom mode (1 = unity)"),
            .double("max_exposure_ms", \.maxExposureMs, range: 0...1000, unit: "ms", "Longest exposure the loop may choose (0 = the frame interval)"),
            .double("max_gain", \.maxGain, range: 1...64, unit: "x", "Highest gain the loop may choose"),
            .double("gain_unit", \.gainUnit, range: 1...10000, unit: "device units", "Device gain units per 1.0x"),
            .choice("anti_flicker", \.antiFlicker, "Exposure times in whole mains half-periods: off, 50hz, 60hz, auto (follow the device's power_line_frequency)"),
            .double("tolerance", \.tolerance, range: 0.01...1, unit: "EV", "Error below which the loop is converged"),
            .double("hysteresis", \.hysteresis, range: 0.02...2, unit: "EV", "Error that makes a converged continuous loop adjust again"),
            .int("patience", \.patience, range: 1...60, unit: "frames", "Frames beyond the hysteresis before re-adjusting"),
            .double("response_gamma", \.responseGamma, range: 1...3, "Luma ~ exposure^(1/gamma): 1 for linear sensor data, 2.2 for sRGB-like cameras and the sim camera (its gamma option)"),
        ]
    }

    public func validate(stage: String) throws {
        if hysteresis < tolerance {
            throw ConfigurationError.invalidOption(stage: stage, option: "hysteresis", reason: "must be at least tolerance (\(tolerance) EV)")
        }
    }
}

/// The result of metering one frame.
public struct ExposureMeasurement: Sendable, Equatable {
    /// Weighted mean luma, 0–255.
    public var meanLuma: Double
    /// Fraction of metered samples at 250 or above, and at 5 or below.
    public var highClipped: Double
    public var lowClipped: Double
    /// Error to target, EV (positive: the frame needs more exposure), clip-corrected.
    public var errorEV: Double
}

/// Auto-exposure: meters luma and drives exposure time, then gain, through the device's controls.
///
/// The loop is predictive: from the exposure and gain a frame was actually taken with (its
/// metadata — `FrameMetadata.exposedWith` as the capture side recorded it, or the source's own —
/// else the last value known to have landed) and its metered error it computes in one
/// step the exposure that reaches the target, sends it, and then ignores frames taken before that
/// change landed (the device's `DeviceControlling.controlLatencyFrames`), so it does not hunt.
/// Exposure time goes up first, to the frame interval or the anti-flicker limit (whole mains
/// half-periods), then gain. Publishes `exposureState`, `meteredLuma`, `exposureError` and the
/// chosen values (custom keys `ae.exposure_us`, `ae.gain`; with spot metering also the spot's
/// sensor point, `ae.spot_x` and `ae.spot_y`, normalised).
public final class ExposureStage: Stage {
    public static let name = "exposure"
    public static let onePerPipeline = true
    public static let summary = "Auto-exposure: histogram metering (matrix, centre, spot) driving exposure time then gain, anti-flicker, no hunting."

    public let options: ExposureOptions
    private let histogram = LumaHistogram()
    private let centreHistogram = LumaHistogram()
    private var controls: (any DeviceControlling)?
    /// Where `process` queues exposure and gain changes (the capture side writes them).
    private var requests: ControlRequestQueue?
    private var hasExposureControl = false
    private var hasGainControl = false
    private var latency = 2
    private var frameInterval: Double = 33_333 // µs
    private var halfPeriod: Double = 0 // µs, 0 = no anti-flicker
    private var minExposure: Double = 100, maxExposure: Double = 33_333 // µs
    private var minGain: Double = 1, maxGain: Double = 16

    /// What the device runs with now (as far as the stage knows) and what was last commanded.
    private var commandedExposure: Double = 10_000
    private var commandedGain: Double = 1
    private var knownExposure: Double = 10_000
    private var knownGain: Double = 1
    /// Frames still to skip before a change has certainly landed (when frames carry no metadata).
    private var framesUntilLanded = 0
    private var awaiting = false
    private var state: ControlLoopState = .adjusting
    private var outside = 0
    /// Control writes the device refused.
    public private(set) var controlErrors = 0
    /// Commands sent to the device.
    public private(set) var commandsSent = 0

    private let exposureKey = MetadataKey("ae.exposure_us")
    private let gainKey = MetadataKey("ae.gain")
    private let spotXKey = MetadataKey("ae.spot_x")
    private let spotYKey = MetadataKey("ae.spot_y")

    public init(options: ExposureOptions) {
        self.options = options
    }

    /// Narrowest picture metering works on (a reduced MJPEG decode at least this wide).
    public static let meteringWidth = 160
    /// Samples across a spot, at least, whatever the view's reduction.
    static let spotSamples = 16.0

    /// The narrowest view `options` meter correctly on: ``meteringWidth``, or wider for a small
    /// spot — at least ``spotSamples`` across and, on a picture `width` x `height`, 8 rows down
    /// (the meter's smallest window: with fewer the spot grows, as it did on pictures wider than
    /// about 3:1 when only the width was asked for).
    static func meteringWidth(for options: ExposureOptions, width: Int, height: Int) -> Int {
        guard options.metering == .spot else { return meteringWidth }
        let aspect = width > 0 && height > 0 ? Double(width) / Double(height) : 1
        let across = spotSamples / options.spotSize, down = 8 / options.spotSize * aspect
        return max(meteringWidth, Int(max(across, down).rounded(.up)))
    }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        // Metering needs a histogram, not every pixel: on MJPEG a 1/4–1/8 decode serves (measured:
        // `SimClosedLoopTests` converge as on YUYV).
        // A spot keeps at least `spotSamples` samples across: a 0.02 spot on a 160-wide view was
        // 3 samples, widened to the meter's smallest window, and metered 2.5 times the area (an
        // MJPEG camera exposed 1.7 EV away from a YUYV one; 3 Dec sweep).
        try context.needStatistics(Self.name, minimumWidth: Self.meteringWidth(for: options, width: format.width, height: format.height))
        controls = context.controls
        requests = context.controlRequests
        hasExposureControl = context.controls?.supports(.exposureTime) ?? false
        hasGainControl = context.controls?.supports(.gain) ?? false
        latency = context.controls?.controlLatencyFrames ?? 0
        frameInterval = context.frameIntervalNanoseconds > 0 ? Double(context.frameIntervalNanoseconds) / 1000 : 33_333
        maxExposure = options.maxExposureMs > 0 ? options.maxExposureMs * 1000 : frameInterval
        maxGain = options.maxGain
        var flicker = options.antiFlicker
        if let c = controls {
            if let d = c.descriptor(.exposureTime) {
                minExposure = max(100, Double(d.minimum) * 100)
                maxExposure = min(maxExposure, Double(d.maximum) * 100)
            }
            if let d = c.descriptor(.gain) {
                minGain = max(0.01, Double(d.minimum) / options.gainUnit)
                maxGain = min(maxGain, Double(d.maximum) / options.gainUnit)
            }
            if let e = try? c.value(of: .exposureTime) { knownExposure = Double(e) * 100 }
            if let g = try? c.value(of: .gain) { knownGain = Double(g) / options.gainUnit }
            if flicker == .auto, let p = try? c.value(of: .powerLineFrequency) {
                flicker = p == 1 ? .hz50 : p == 2 ? .hz60 : .off
            } else if flicker == .hz50 || flicker == .hz60, c.supports(.powerLineFrequency) {
                try? c.set(.powerLineFrequency, to: flicker == .hz50 ? 1 : 2)
            }
        }
        if flicker == .auto { flicker = .off }
        halfPeriod = flicker == .hz50 ? 10_000 : flicker == .hz60 ? 1_000_000.0 / 120 : 0
        maxExposure = max(maxExposure, minExposure)
        maxGain = max(maxGain, minGain)
        commandedExposure = knownExposure
        commandedGain = knownGain
        awaiting = false
        framesUntilLanded = 0
        outside = 0
        switch options.mode {
        case .locked, .custom: state = .locked
        case .auto, .continuous: state = .adjusting
        }
        if let c = controls, options.mode != .locked {
            if c.supports(.exposureAuto) { try? c.set(.exposureAuto, to: 1) }
            if options.mode == .custom {
                // Before streaming: written at once.
                do {
                    let e = options.exposureMs * 1000, g = options.gain
                    if hasExposureControl { try c.set(.exposureTime, to: Int64((e / 100).rounded())) }
                    if hasGainControl { try c.set(.gain, to: Int64((g * options.gainUnit).rounded())) }
                    commanded(exposure: e, gain: g)
                } catch {
                    controlErrors += 1
                }
            }
        }
    }

    /// Meters a frame's luma as the options say. `scale`: how much smaller than the frame the view
    /// is (a reduced decode), so the sample spacing stays `subsample` frame pixels.
    public func measure(_ luma: LumaView, scale: Int = 1) -> ExposureMeasurement {
        histogram.reset()
        let step = max(1, options.subsample / max(1, scale))
        let mean: Double
        let hi: Double, lo: Double
        switch options.metering {
        case .matrix:
            histogram.add(luma, step: step)
            mean = histogram.mean
            hi = histogram.fraction(atOrAbove: 250); lo = histogram.fraction(atOrBelow: 5)
        case .centre:
            histogram.add(luma, step: step)
            centreHistogram.reset()
            let r = PixelRect.around(.center, fraction: 0.5, width: luma.width, height: luma.height)
            centreHistogram.add(luma, region: r, step: step)
            mean = 0.6 * centreHistogram.mean + 0.4 * histogram.mean
            hi = 0.6 * centreHistogram.fraction(atOrAbove: 250) + 0.4 * histogram.fraction(atOrAbove: 250)
            lo = 0.6 * centreHistogram.fraction(atOrBelow: 5) + 0.4 * histogram.fraction(atOrBelow: 5)
        case .spot:
            let r = PixelRect.around(options.point, fraction: options.spotSize, width: luma.width, height: luma.height)
            histogram.add(luma, region: r, step: max(1, min(step, r.width / 16, r.height / 16)))
            mean = histogram.mean
            hi = histogram.fraction(atOrAbove: 250); lo = histogram.fraction(atOrBelow: 5)
        }
        let g = options.responseGamma
        let target = options.targetLuma * pow2(options.bias / g)
        // Clipped samples make the mean understate the error, never overstate it: the loop takes a
        // shorter step and measures again, so clipping costs a step but never causes an overshoot.
        let err = g * log2(min(255, target) / max(mean, 0.5))
        return ExposureMeasurement(meanLuma: mean, highClipped: hi, lowClipped: lo, errorEV: err)
    }

    public func process(_ frame: Frame) -> StageVerdict {
        guard let px = frame.pixels else { return .forward }
        let m = measure(LumaView(px.luma), scale: px.scale)
        frame.metadata.meteredLuma = m.meanLuma
        frame.metadata.exposureError = m.errorEV

        // What this frame was taken with: the source's own record, else what the capture side
        // recorded from its writes and the device's latency.
        let exposed = frame.metadata.exposedWith
        let appliedE = frame.metadata.exposureTime ?? exposed.exposureTime.map { Double($0) * 100 } ?? frame.metadata.truth?.appliedExposure ?? knownExposure
        let appliedG = frame.metadata.gain ?? exposed.gain.map { Double($0) / options.gainUnit } ?? frame.metadata.truth?.appliedGain ?? knownGain
        let hasMetadata = frame.metadata.exposureTime != nil || exposed.exposureTime != nil || frame.metadata.truth != nil
        if awaiting {
            if hasMetadata {
                if abs(log2(appliedE * appliedG / (commandedExposure * commandedGain))) < 0.02 { awaiting = false }
                else { framesUntilLanded -= 1; if framesUntilLanded < -(latency + 8) { awaiting = false } }
            } else {
                framesUntilLanded -= 1
                if framesUntilLanded <= 0 { awaiting = false }
            }
            if !awaiting { knownExposure = commandedExposure; knownGain = commandedGain }
        } else if hasMetadata {
            knownExposure = appliedE; knownGain = appliedG
        }

        switch options.mode {
        case .locked, .custom:
            state = .locked
        case .auto, .continuous:
            if state == .locked { break }
            if awaiting { state = .adjusting; break }
            let err = m.errorEV
            if state == .converged {
                if abs(err) > options.hysteresis { outside += 1 } else { outside = 0 }
                if outside >= options.patience { state = .adjusting; outside = 0 }
            } else if abs(err) <= options.tolerance {
                state = options.mode == .auto ? .locked : .converged
                outside = 0
            }
            if state == .adjusting && controls != nil {
                let total = (hasMetadata ? appliedE * appliedG : knownExposure * knownGain) * pow2(err)
                let (e, g) = split(total)
                if abs(log2(e * g / (commandedExposure * commandedGain))) > 0.01 || e != commandedExposure {
                    send(exposure: e, gain: g)
                }
            }
        }
        frame.metadata.exposureState = state
        frame.metadata.custom.set(exposureKey, commandedExposure)
        frame.metadata.custom.set(gainKey, commandedGain)
        if options.metering == .spot {
            // Where this frame was metered, in sensor coordinates (a preview shows it on the picture).
            frame.metadata.custom.set(spotXKey, options.point.x)
            frame.metadata.custom.set(spotYKey, options.point.y)
        }
        return .forward
    }

    /// Splits a total exposure (µs × gain) into an exposure time and a gain: time first, up to the
    /// limit (in whole mains half-periods when anti-flicker is on), then gain.
    public func split(_ total: Double) -> (exposure: Double, gain: Double) {
        let wanted = max(total, minExposure * minGain)
        var e = min(max(wanted / max(minGain, 1), minExposure), maxExposure)
        if halfPeriod > 0 && e >= halfPeriod {
            e = max(halfPeriod, (e / halfPeriod).rounded(.down) * halfPeriod)
            if e > maxExposure { e = maxExposure }
        }
        // The device takes 100 µs steps: round down and make up the rest with gain.
        e = max(minExposure, (e / 100).rounded(.down) * 100)
        let g = min(max(wanted / e, minGain), maxGain)
        return (e, (g * options.gainUnit).rounded() / options.gainUnit)
    }

    /// Queues a change for the capture side to write (no device call on the stage thread).
    private func send(exposure: Double, gain: Double) {
        guard let q = requests else { return }
        var ok = true
        if hasExposureControl { ok = q.request(.exposureTime, to: Int64((exposure / 100).rounded())) && ok }
        if hasGainControl { ok = q.request(.gain, to: Int64((gain * options.gainUnit).rounded())) && ok }
        if ok { commanded(exposure: exposure, gain: gain) } else { controlErrors += 1 }
    }

    private func commanded(exposure: Double, gain: Double) {
        commandedExposure = exposure
        commandedGain = gain
        awaiting = true
        framesUntilLanded = latency + 1
        commandsSent += 1
    }

    /// The exposure and gain the stage last asked for (µs, x).
    public var command: (exposure: Double, gain: Double) { (commandedExposure, commandedGain) }
    public var loopState: ControlLoopState { state }
}

@inline(__always)
func pow2(_ x: Double) -> Double { exp2(x) }

#if canImport(Glibc)
import Glibc
#endif
