/// Errors in building or configuring a pipeline. Each names the culprit.
public enum ConfigurationError: Error, Equatable, CustomStringConvertible {
    case unknownStage(String, known: [String])
    case unknownOption(stage: String, option: String, known: [String])
    case invalidOption(stage: String, option: String, reason: String)
    case invalidConfigFile(path: String, reason: String)
    /// Two stage types claim one name (`types` names them).
    case duplicateStage(String, types: [String])
    /// A stage cannot run on the stream it was given (too small a picture, pixels that cannot be
    /// had): not an option of the stage's.
    case unsupportedStream(stage: String, reason: String)
    /// A stage that closes a loop over the camera's controls (``Stage/onePerPipeline``) is in the
    /// pipeline twice: the two would fight over the same controls.
    case repeatedStage(String)

    public var description: String {
        switch self {
        case .unknownStage(let n, _) where n.isEmpty:
            return "a stage in the list has no name (expected name[:key=value…], stages separated by ',', e.g. stabilise:lookahead=15,focus)"
        case .unknownStage(let n, let known):
            return "unknown stage '\(n)' (known stages: \(known.sorted().joined(separator: ", ")))"
        case .unknownOption(let s, let o, let known):
            return "stage '\(s)' has no option '\(o)' (its options: \(known.isEmpty ? "none" : known.joined(separator: ", ")))"
        case .invalidOption(let s, let o, let r):
            return "stage '\(s)', option '\(o)': \(r)"
        case .invalidConfigFile(let p, let r):
            return "pipeline file '\(p)': \(r)"
        case .duplicateStage(let n, let types):
            return "two stage types register the name '\(n)': \(types.joined(separator: " and "))"
        case .unsupportedStream(let s, let r):
            return "stage '\(s)' cannot run on this stream: \(r)"
        case .repeatedStage(let s):
            return "stage '\(s)' is in the pipeline twice: it steers the camera's controls, and two of it would fight over them"
        }
    }
}

/// Errors from devices (sim, V4L2, dump replay).
public enum DeviceError: Error, Equatable, CustomStringConvertible {
    case unknownDevice(String, reason: String)
    case invalidDeviceOption(device: String, option: String, reason: String)
    case unsupportedFormat(device: String, requested: String, available: [String])
    case busy(device: String)
    case permissionDenied(device: String)
    case bandwidth(device: String)
    case disconnected(device: String)
    case stalled(device: String, seconds: Double)
    case io(device: String, operation: String, errno: Int32, message: String)
    case unknownControl(device: String, control: String, known: [String])
    case controlOutOfRange(device: String, control: String, value: Double, range: ClosedRange<Double>)
    case notRunning(device: String)
    case corruptInput(device: String, reason: String)

    public var description: String {
        switch self {
        case .unknownDevice(let d, let r): return "no such device '\(d)': \(r)"
        case .invalidDeviceOption(let d, let o, let r): return "device '\(d)', option '\(o)': \(r)"
        case .unsupportedFormat(let d, let req, let av):
            return "device '\(d)' cannot deliver \(req) (it offers: \(av.joined(separator: ", ")))"
        case .busy(let d): return "device '\(d)' is busy: another program is using it (EBUSY)"
        case .permissionDenied(let d): return "no permission to open '\(d)': add the user to the 'video' group or run as root"
        case .bandwidth(let d):
            return "device '\(d)' refused to stream: not enough USB bandwidth (ENOSPC on STREAMON). Use a smaller size, a lower rate or MJPEG, or move one camera to another USB controller"
        case .disconnected(let d): return "device '\(d)' was disconnected"
        case .stalled(let d, let s): return "device '\(d)' delivered no frame for \(s) s and could not be restarted"
        case .io(let d, let op, let e, let m): return "device '\(d)': \(op) failed: \(m) (errno \(e))"
        case .unknownControl(let d, let c, let known):
            return "device '\(d)' has no control '\(c)' (its controls: \(known.joined(separator: ", ")))"
        case .controlOutOfRange(let d, let c, let v, let r) where r.contains(v):
            // Inside the range, refused all the same: off the control's step, or no item of its menu.
            return "device '\(d)': value \(v) for '\(c)' is within \(r.lowerBound)...\(r.upperBound) but not one of its values (off its step, or not an item of its menu: `viewfinder controls --device \(d)` lists them)"
        case .controlOutOfRange(let d, let c, let v, let r):
            return "device '\(d)': value \(v) for '\(c)' is outside \(r.lowerBound)...\(r.upperBound)"
        case .notRunning(let d): return "device '\(d)' is not streaming"
        case .corruptInput(let d, let r): return "device '\(d)': corrupt input: \(r)"
        }
    }
}
