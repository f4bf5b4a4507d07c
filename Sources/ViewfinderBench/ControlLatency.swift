import Foundation

/// One control step as seen in the pictures.
public struct StepResponse: Codable, Sendable, Equatable {
    public var from: Int64
    public var to: Int64
    /// Sequence of the newest frame the capture thread had received when the device took the value
    /// (where the device does not say when, when the `set` returned): the frame the latency counts from.
    public var referenceSequence: UInt64?
    /// Frames from the reference to the first frame that moved at least half-way to the new level
    /// (nil: no visible change, or the set failed).
    public var latencyFrames: Int?
    /// Mean measure of the frames up to the reference, and the spread (max − min) among them.
    public var baseline: Double
    public var baselineSpread: Double
    /// Mean measure of the last three frames of the window.
    public var settled: Double
    /// Frame offsets from the reference (negative: before) and the measure of each, for the plot.
    public var offsets: [Int]
    public var values: [Double]
    public var error: String?
}

/// The control latency of one control, from its steps.
public struct ControlLatencyResult: Codable, Sendable, Equatable {
    public var control: SteppedControl
    /// The device's control name, or nil when the device has none for this kind.
    public var name: String?
    public var measure: PictureMeasure
    /// The median of the steps' latencies (nil when no step showed a change).
    public var latencyFrames: Int?
    /// How many steps gave the median value, of how many made.
    public var agreeingSteps: Int
    public var steps: [StepResponse]
    public var error: String?
}

/// Finds the frame at which a step shows in the pictures.
public enum ControlLatencyAnalysis {
    /// The response of `step` in `samples`: the baseline is the `baselineFrames` frames up to the
    /// reference (the newest frame received before the set), the new level the mean of the last
    /// three of the `window` frames after it (both at least 1). A change smaller than three times
    /// the baseline's spread (or than `minimumChange`) is "no visible change"; otherwise the
    /// latency is the offset of the first frame at least half-way from the baseline to the new
    /// level. Where the set was stamped before and after (the device did not say when it took the
    /// value) and a frame arrived in between, the latency is unknown: the error gives its range.
    public static func response(of step: ControlStep, in samples: [FrameSample], baselineFrames: Int, window: Int, minimumChange: Double) -> StepResponse {
        let baselineFrames = max(1, baselineFrames), window = max(1, window)
        var r = StepResponse(from: step.from, to: step.to, referenceSequence: step.reference, latencyFrames: nil, baseline: 0, baselineSpread: 0, settled: 0, offsets: [], values: [], error: step.error)
        guard let consumedAtSet = step.reference else {
            if r.error == nil { r.error = "the step was not made (the run ended first)" }
            return r
        }
        // The newest frame received by the capture thread before the set: later than the one the
        // recorder had in hand when the pipeline runs behind.
        func newestReceived(by t: UInt64) -> UInt64 {
            samples.reduce(consumedAtSet) { $1.received > 0 && $1.received <= t && $1.sequence > $0 ? $1.sequence : $0 }
        }
        let k = step.setTime.map(newestReceived(by:)) ?? consumedAtSet
        // Where the device did not say when it took the value: the newest frame received before
        // the `set` was called. A frame received while the `set` ran may be the reference or not.
        let earliest = step.setStart.map(newestReceived(by:)) ?? k
        r.referenceSequence = k
        // The stepper moves to the next step `window` frames after the set (and the recorder then
        // measures that step's picture measure, which may be another one): frames after that
        // belong to the next step.
        let last = min(k + UInt64(window), consumedAtSet + UInt64(window))
        let lo = k >= UInt64(baselineFrames - 1) ? k - UInt64(baselineFrames - 1) : 0
        var before: [Double] = []
        var after: [(Int, Double)] = []
        for s in samples {
            guard let m = s.measure else { continue }
            if s.sequence >= lo && s.sequence <= k { before.append(m); r.offsets.append(-Int(k - s.sequence)); r.values.append(m) }
            else if s.sequence > k && s.sequence <= last {
                let off = Int(s.sequence - k)
                after.append((off, m)); r.offsets.append(off); r.values.append(m)
            }
        }
        guard !before.isEmpty, after.count >= 3 else {
            r.error = "too few frames with a picture measure around the step (\(before.count) before, \(after.count) after)"
            return r
        }
        r.baseline = before.reduce(0, +) / Double(before.count)
        r.baselineSpread = (before.max() ?? 0) - (before.min() ?? 0)
        let tail = after.suffix(3).map(\.1)
        r.settled = tail.reduce(0, +) / Double(tail.count)
        let delta = r.settled - r.baseline
        guard abs(delta) >= max(3 * r.baselineSpread, minimumChange) else {
            r.error = "no visible change: \(fmt(r.baseline)) → \(fmt(r.settled)), baseline spread \(fmt(r.baselineSpread))"
            return r
        }
        for (i, (off, m)) in after.enumerated() where (m - r.baseline) * delta.sign.multiplier >= abs(delta) / 2 {
            // The change could have shown first on a frame that was lost: the latency is only
            // known when the frame before the first one showing it was received.
            let previous = i > 0 ? after[i - 1].0 : 0
            if previous != off - 1 {
                r.error = "frames lost around the change: it shows on frame +\(off), frame +\(off - 1) was lost"
            } else if earliest < k {
                let during = samples.filter { $0.sequence > earliest && $0.sequence <= k }.map { String($0.sequence) }
                r.error = "frame \(during.joined(separator: ", ")) arrived while the set ran: latency \(off) to \(off + Int(k - earliest)) frames"
            } else {
                r.latencyFrames = off
            }
            break
        }
        return r
    }

    /// The result of a control's steps: the median latency and how many steps agree with it.
    public static func result(control: SteppedControl, name: String?, responses: [StepResponse]) -> ControlLatencyResult {
        let found = responses.compactMap(\.latencyFrames).sorted()
        var out = ControlLatencyResult(control: control, name: name, measure: control.measure, latencyFrames: nil, agreeingSteps: 0, steps: responses, error: nil)
        if name == nil { out.error = "the device has no \(control.standard.rawValue) control" }
        else if responses.isEmpty { out.error = "no step could be planned (the control's range allows none)" }
        else if found.isEmpty { out.error = responses.compactMap(\.error).first ?? "no step showed a change" }
        else {
            let median = found[(found.count - 1) / 2]
            out.latencyFrames = median
            out.agreeingSteps = found.filter { $0 == median }.count
        }
        return out
    }

    static func fmt(_ v: Double) -> String { String(format: "%.2f", v) }
}

extension FloatingPointSign {
    var multiplier: Double { self == .minus ? -1 : 1 }
}
