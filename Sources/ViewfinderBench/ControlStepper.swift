import ViewfinderKit

/// The controls the bench steps, with the picture measure that shows each one.
public enum SteppedControl: String, Codable, Sendable, CaseIterable {
    case exposure, gain, focus, brightness

    public var standard: StandardControl {
        switch self {
        case .exposure: return .exposureTime
        case .gain: return .gain
        case .focus: return .focusAbsolute
        case .brightness: return .brightness
        }
    }

    public var measure: PictureMeasure { self == .focus ? .focus : .luma }
}

/// One planned and (after the run) observed control step.
public struct ControlStep: Sendable, Equatable {
    public var control: SteppedControl
    /// The device's control name (`exposure_time_absolute`, …).
    public var name: String
    public var from: Int64
    public var to: Int64
    /// Sequence of the frame after whose arrival at the recorder the `set` was made (nil: not made).
    public var reference: UInt64?
    /// When the device took the value, CLOCK_MONOTONIC ns, where it says
    /// (``DeviceControlling/setReportingTime(_:to:)``); else when the `set` returned (nil: not made).
    public var setTime: UInt64?
    /// When the `set` was called, where the device did not say when it took the value (nil where
    /// it did): a frame received between this and ``setTime`` may have arrived before or after
    /// the device took the value.
    public var setStart: UInt64?
    /// The error of the `set`, if it failed.
    public var error: String?
}

/// Steps controls one at a time, from the thread that receives frames: for each step it waits
/// `baselineFrames` frames, sets the control right after frame k arrives (k is the step's
/// reference), then watches `window` more frames before the next step.
///
/// Setting right after a frame arrives keeps the set clear of frame boundaries. The analysis
/// counts from the newest frame the capture thread had received when the device took the value
/// (k, or a later one when the pipeline runs behind the camera): on a camera whose control
/// applies `L` frames after the last frame delivered (libcamera's "frame delay"), the first frame
/// showing the change is that frame + L. The device says when it took the value where it knows
/// (the sim); elsewhere the `set` is stamped before and after, and a frame received in between
/// leaves that step's reference, and so its latency, unknown. Not thread-safe: the recorder calls
/// it under its lock.
public struct ControlStepper: Sendable {
    public private(set) var steps: [ControlStep]
    private let controls: any DeviceControlling
    public let baselineFrames: Int
    public let window: Int
    private var index = 0
    private var framesInStep = 0

    /// Plans `repeats` steps for each of `controls` the device has: away from the current value
    /// and back, alternately (see ``stepTarget(_:current:)``). Controls the device lacks are
    /// left out (the caller reports them).
    public init(device: any DeviceControlling, controls wanted: [SteppedControl], repeats: Int = 3, baselineFrames: Int = 4, maxLatencyFrames: Int = 10) {
        self.controls = device
        self.baselineFrames = max(2, baselineFrames)
        self.window = max(1, maxLatencyFrames) + 4
        var plan: [ControlStep] = []
        for c in wanted {
            guard let d = device.descriptor(c.standard), let current = try? device.value(of: d.name) else { continue }
            let target = ControlStepper.stepTarget(d, current: current)
            guard target != current else { continue }
            for r in 0..<max(1, repeats) {
                let (a, b) = r % 2 == 0 ? (current, target) : (target, current)
                plan.append(ControlStep(control: c, name: d.name, from: a, to: b))
            }
        }
        steps = plan
    }

    /// The value to step to from `current`: exposure and gain double (or halve when doubling does
    /// not fit the range), brightness moves by a quarter of its range, focus by 30 % of its range
    /// toward the far end. Snapped to the control's step.
    public static func stepTarget(_ d: ControlDescriptor, current: Int64) -> Int64 {
        let span = d.maximum - d.minimum
        var t: Int64
        switch d.standard {
        case .exposureTime?, .gain?:
            t = current * 2 <= d.maximum ? current * 2 : current / 2
        case .focusAbsolute?:
            t = current - d.minimum > d.maximum - current ? current - span * 3 / 10 : current + span * 3 / 10
        default:
            t = current - d.minimum > d.maximum - current ? current - span / 4 : current + span / 4
        }
        let step = max(d.step, 1)
        t = d.minimum + ((t - d.minimum) / step) * step
        return min(d.maximum, max(d.minimum, t))
    }

    /// The measure the current step watches (nil when done).
    public var currentMeasure: PictureMeasure? { index < steps.count ? steps[index].control.measure : nil }
    public var isDone: Bool { index >= steps.count }
    /// Steps done (set and watched for their whole window), in plan order.
    public var completed: Int { index }

    /// Called for each frame as it arrives.
    public mutating func frameArrived(sequence: UInt64, measure: Double?) {
        guard index < steps.count else { return }
        framesInStep += 1
        if steps[index].reference == nil {
            guard framesInStep >= baselineFrames else { return }
            do {
                let start = monotonicNanoseconds()
                if let taken = try controls.setReportingTime(steps[index].name, to: steps[index].to) {
                    steps[index].setTime = taken
                } else {
                    steps[index].setTime = monotonicNanoseconds()
                    steps[index].setStart = start
                }
                steps[index].reference = sequence
                framesInStep = 0
            } catch {
                steps[index].error = "\(error)"
                // A control that cannot be set: skip its other steps too.
                let c = steps[index].control
                while index < steps.count, steps[index].control == c {
                    if steps[index].error == nil { steps[index].error = "skipped: an earlier set of \(c.rawValue) failed" }
                    index += 1
                }
                framesInStep = 0
            }
            return
        }
        if framesInStep >= window {
            index += 1
            framesInStep = 0
        }
    }
}
