import Foundation
import Viewfinder

/// Something that can take a frame at a given exposure bias for a bracket: the photo output asks,
/// waits for frames taken with the new exposure, captures, and finally restores.
///
/// ``DeviceExposureBracketer`` drives the device's exposure controls directly; a session whose
/// exposure stage runs continuously should supply an implementation that holds that stage (or
/// serves the biases through it), so that the two do not fight.
public protocol ExposureBracketing: AnyObject, Sendable {
    /// Remembers the current exposure and takes control of it.
    func beginBracket() throws
    /// Sets the exposure for `bias` EV relative to the remembered one; returns the exposure time
    /// (µs) and gain asked for.
    func apply(bias: Double) throws -> (exposureTime: Double, gain: Double)
    /// Frames between `apply` and the first frame taken with it.
    var latencyFrames: Int { get }
    /// Restores what `beginBracket` remembered.
    func endBracket()
}

/// Errors of still capture.
public enum PhotoCaptureError: Error, Equatable, CustomStringConvertible {
    case settingsReused(uniqueID: Int64)
    case invalidSettings(String)
    case notRunning
    case sessionEnded
    case bracketingUnavailable(String)
    case encodingFailed(String)
    case cancelled
    case timedOut
    /// The settings asked for a flash the device cannot fire (none, or a fault).
    case flashUnavailable(String)

    public var description: String {
        switch self {
        case .settingsReused(let id): return "photo settings \(id) were already used; make a new settings object for each capture"
        case .invalidSettings(let r): return "invalid photo settings: \(r)"
        case .notRunning: return "the photo output is not attached to a running session"
        case .sessionEnded: return "the session ended before the capture completed"
        case .bracketingUnavailable(let r): return "exposure bracketing is not possible: \(r)"
        case .encodingFailed(let r): return "encoding the photo failed: \(r)"
        case .cancelled: return "the capture was cancelled"
        case .timedOut: return "no frame arrived in time for the capture"
        case .flashUnavailable(let r): return "the flash cannot fire: \(r)"
        }
    }
}

/// Brackets by driving the device's `auto_exposure`, `exposure_time_absolute` (100 µs units) and
/// `gain` controls: exposure time first, gain for what the time range cannot give.
public final class DeviceExposureBracketer: ExposureBracketing, @unchecked Sendable {
    // @unchecked Sendable: the remembered state is written in beginBracket and read in
    // apply/endBracket, all called in sequence by the photo output's thread.
    public let controls: any DeviceControlling
    /// Device gain units per 1.0x (100 for the sim and many UVC cameras).
    public let gainUnit: Double
    private var savedAuto: Int64?
    private var savedTime: Int64 = 0
    private var savedGain: Int64?
    /// The longest exposure the stream allows now, in seconds (its frame interval); nil: the
    /// control's range alone limits it.
    public let maximumExposureSeconds: @Sendable () -> Double?

    /// - Parameters:
    ///   - controls: the device's controls (`exposure_time_absolute`, and `gain` when it has one).
    ///   - gainUnit: device gain units per 1.0x.
    ///   - maximumExposureSeconds: the longest exposure the stream allows (its longest frame
    ///     duration): a longer one is not given by the sensor (the sim caps it; many cameras
    ///     lower their rate), so what a bias asks beyond it is made up by the gain.
    public init(controls: any DeviceControlling, gainUnit: Double = 100, maximumExposureSeconds: @escaping @Sendable () -> Double? = { nil }) {
        self.controls = controls
        self.gainUnit = gainUnit
        self.maximumExposureSeconds = maximumExposureSeconds
    }

    public var latencyFrames: Int { controls.controlLatencyFrames }

    public func beginBracket() throws {
        guard controls.supports(.exposureTime) else { throw PhotoCaptureError.bracketingUnavailable("the device has no exposure_time_absolute control") }
        savedAuto = controls.supports(.exposureAuto) ? try controls.value(of: .exposureAuto) : nil
        savedTime = try controls.value(of: .exposureTime)
        savedGain = controls.supports(.gain) ? try controls.value(of: .gain) : nil
        if savedAuto != nil { try controls.set(.exposureAuto, to: 1) }
    }

    public func apply(bias: Double) throws -> (exposureTime: Double, gain: Double) {
        let td = controls.descriptor(.exposureTime)!
        let factor = pow(2, bias)
        let wanted = Double(savedTime) * factor
        var longest = Double(td.maximum)
        if let frame = maximumExposureSeconds(), frame > 0 { longest = max(Double(td.minimum), min(longest, (frame * 10_000).rounded(.down))) }
        let t = Int64(min(longest, max(Double(td.minimum), wanted.rounded())))
        try controls.set(.exposureTime, to: t)
        var gain = Double(savedGain ?? Int64(gainUnit)) / gainUnit
        if let sg = savedGain, let gd = controls.descriptor(.gain), t > 0 {
            // What the time range could not give, the gain makes up (within its range).
            let rest = wanted / Double(t)
            let g = Int64(min(Double(gd.maximum), max(Double(gd.minimum), (Double(sg) * rest).rounded())))
            try controls.set(.gain, to: g)
            gain = Double(g) / gainUnit
        }
        return (Double(t) * 100, gain)
    }

    public func endBracket() {
        try? controls.set(.exposureTime, to: savedTime)
        if let g = savedGain { try? controls.set(.gain, to: g) }
        if let a = savedAuto { try? controls.set(.exposureAuto, to: a) }
    }
}
