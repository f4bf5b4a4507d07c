import Foundation
import Viewfinder

/// The result of a `viewfinder bench` run: the `--json` output (keys in snake case) and the input
/// of the HTML report and of a later `--baseline` comparison.
///
/// The schema is stable: fields are only added, and ``schemaVersion`` changes if one is renamed or
/// removed. Times are in the unit their key names (`_ms`, `_us`, `seconds`).
public struct BenchReport: Codable, Sendable {
    /// The version of this schema.
    public static let currentSchema = 1
    public var schemaVersion = BenchReport.currentSchema
    public var device: String
    /// The stages of the measured pipeline, as given (`exposure:mode=continuous`, …).
    public var stages: [String]
    public var format: FormatSummary?
    /// Seconds of the pipeline run.
    public var durationSeconds: Double
    public var camera: CameraSummary
    public var controls: [ControlLatencyResult]
    public var pipeline: PipelineSummary
    /// Modes measured by `--sweep` (empty without it).
    public var sweep: [SweepEntry]
    /// Per-frame series for plots.
    public var series: FrameSeries
    /// The comparison with `--baseline` (nil without it).
    public var comparison: BaselineComparison?
    /// Where Ctrl-C ended the measurements ("the pipeline run", "the control steps", "the mode
    /// sweep"): the figures cover what was measured until then, the later parts are empty. Nil
    /// for a whole run.
    public var interruptedDuring: String?
}

public struct FormatSummary: Codable, Sendable, Equatable {
    public var pixelFormat: String
    public var width: Int
    public var height: Int
    public var nominalFps: Double
}

/// What the camera delivered, from the buffer timestamps and sequence numbers.
public struct CameraSummary: Codable, Sendable {
    public var nominalFps: Double
    /// Frames per second from the timestamps: (last − first sequence) / (last − first timestamp).
    public var measuredFps: Double
    /// Frames per second that reached the process: (frames received − 1) over the same span.
    /// Below ``measuredFps`` when the sequence has gaps (frames the sensor made but lost).
    public var deliveredFps: Double
    /// Frames the bench received.
    public var frames: Int
    /// Set when the run was ended before its duration, after this many frames: the bench keeps
    /// 1.5 × duration × the nominal rate + 256 frames, and a source faster than its nominal rate
    /// (an unpaced one) filled them. The figures cover those frames. (Absent in earlier reports.)
    public var endedEarlyAfterFrames: Int?
    /// Places where the sequence numbers skipped, and the frames missing there in total.
    public var sequenceGaps: Int
    public var framesMissing: UInt64
    /// Intervals between the timestamps of consecutive sequence numbers, ms.
    public var intervalMs: Distribution
    public var intervalHistogramMs: Histogram
    /// |interval − nominal interval|, ms.
    public var intervalErrorMs: Distribution
    /// RMS distance of the timestamps from the best straight line through (sequence, timestamp),
    /// ms: the timing jitter of the frames themselves (an interval's jitter is √2 times it).
    public var timestampJitterMs: Double
    /// From the buffer timestamp to the capture thread's dequeue, ms.
    public var driverToProcessMs: Distribution
    /// From opening the device to the first frame, and from starting the session to it, ms.
    public var openToFirstFrameMs: Double?
    public var startToFirstFrameMs: Double?

    /// Whether the camera delivered its nominal rate: at least two frames, the delivered rate
    /// within 2 % of the nominal one and no sequence gap (the judgement of `--sweep`).
    public var deliversNominalRate: Bool {
        frames >= 2 && deliveredFps >= nominalFps * 0.98 && framesMissing == 0
    }
}

/// Time per call of one stage, µs (bucketed at 2^(1/8): quantiles are bucket upper bounds).
public struct StageTimeSummary: Codable, Sendable, Equatable {
    public var name: String
    public var calls: UInt64
    public var meanUs: Double
    public var p50Us: Double
    public var p99Us: Double
    public var maxUs: Double
    /// Non-empty buckets: lower and upper bound (µs) and count.
    public var buckets: [[Double]]
}

/// One sink's path: frames, drops and capture-to-consume latency (bucketed like stage times).
public struct OutputSummary: Codable, Sendable, Equatable {
    public var name: String
    public var consumed: UInt64
    public var drops: [String: UInt64]
    public var latencyP50Ms: Double
    public var latencyP99Ms: Double
    public var latencyMaxMs: Double
}

/// CPU time of one thread over the run.
public struct ThreadSummary: Codable, Sendable, Equatable {
    public var name: String
    public var cpuSeconds: Double
    /// CPU time over the run's wall time, percent of one core.
    public var cpuPercent: Double
}

/// Counts at one moment of the run (cumulative).
public struct TimelinePoint: Codable, Sendable, Equatable {
    public var seconds: Double
    public var captured: UInt64
    public var delivered: UInt64
    /// Drops by reason so far; a sink's drops are keyed `sink.reason`.
    public var drops: [String: UInt64]
    /// Frames queued in each of the engine's rings (`decode`, `stages`, each sink by name).
    public var rings: [String: Int]
}

public struct PipelineSummary: Codable, Sendable {
    public var captured: UInt64
    public var delivered: UInt64
    /// Drops by reason between the source and the end of the stages.
    public var drops: [String: UInt64]
    public var stages: [StageTimeSummary]
    public var outputs: [OutputSummary]
    /// From the buffer timestamp to the bench's own sink, ms (exact, per frame).
    public var captureToOutputMs: Distribution
    public var threads: [ThreadSummary]
    public var timeline: [TimelinePoint]
    /// The capacity of each ring in ``TimelinePoint/rings``.
    public var ringCapacities: [String: Int]
}

/// Per-frame series (same length; times in seconds from the first frame's timestamp).
public struct FrameSeries: Codable, Sendable {
    public var sequence: [UInt64]
    public var seconds: [Double]
    /// Interval to the previous frame, ms (0 for the first and after a gap).
    public var intervalMs: [Double]
    public var driverToProcessMs: [Double]
    public var captureToOutputMs: [Double]
}

/// One mode of a `--sweep`.
public struct SweepEntry: Codable, Sendable, Equatable {
    public var pixelFormat: String
    public var width: Int
    public var height: Int
    public var nominalFps: Double
    public var measuredFps: Double?
    public var frames: Int
    public var framesMissing: UInt64
    /// Frames per second that reached the process (``CameraSummary/deliveredFps``).
    public var deliveredFps: Double?
    /// Whether the delivered rate is within 2 % of the nominal one, with no sequence gap.
    public var deliversNominalRate: Bool
    public var error: String?
}

extension BenchReport {
    /// The report as JSON: snake-case keys, sorted, pretty-printed.
    public func jsonData() throws -> Data {
        let e = JSONEncoder()
        e.keyEncodingStrategy = .convertToSnakeCase
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        e.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        return try e.encode(self)
    }

    /// Reads a report written by ``jsonData()``. Throws ``BenchError/badBaseline(path:reason:)``.
    public static func load(path: String) throws -> BenchReport {
        let data: Data
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
            throw BenchError.badBaseline(path: path, reason: "it is a folder, not a report")
        }
        // The system's own reason (no such file, permission denied), not Foundation's error domain.
        guard access(path, R_OK) == 0 else {
            throw BenchError.badBaseline(path: path, reason: "cannot read it: \(String(cString: strerror(errno)))")
        }
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw BenchError.badBaseline(path: path, reason: "cannot read it: \((error as NSError).localizedFailureReason ?? error.localizedDescription)")
        }
        let d = JSONDecoder()
        d.keyDecodingStrategy = .convertFromSnakeCase
        d.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        do {
            let r = try d.decode(BenchReport.self, from: data)
            guard r.schemaVersion == currentSchema else {
                throw BenchError.badBaseline(path: path, reason: "schema version \(r.schemaVersion), this viewfinder reads \(currentSchema)")
            }
            return r
        } catch let e as BenchError { throw e } catch {
            throw BenchError.badBaseline(path: path, reason: "not a bench report: \(jsonDecodingFailure(error, snakeCase: true))")
        }
    }
}

/// Errors of the bench itself (device and session errors pass through with their own types).
public enum BenchError: Error, Equatable, CustomStringConvertible {
    case badBaseline(path: String, reason: String)
    case noFrames(device: String, seconds: Double)
    case cannotWrite(path: String, reason: String)
    /// Ctrl-C (or SIGTERM) before the device delivered the two frames a measurement needs.
    case interruptedBeforeFrames(device: String, seconds: Double, frames: Int)
    /// The run asked for ended before two frames came, the device being as fast as it says.
    case durationTooShort(device: String, seconds: Double, frames: Int, nominalFps: Double)

    public var description: String {
        switch self {
        case .interruptedBeforeFrames(let d, let s, let n):
            return "interrupted after \(String(format: "%.1f", s)) s, when \(d) had delivered \(n) frame\(n == 1 ? "" : "s") (a bench needs two): nothing was measured"
        case .durationTooShort(let d, let s, let n, let fps):
            let least = fps > 0 ? String(format: " (at %.4g fps, --duration %.2g or more)", fps, 3 / fps) : ""
            return "the run of \(String(format: "%.2f", s)) s ended with \(n) frame\(n == 1 ? "" : "s") from \(d): a bench needs two; give a longer --duration\(least)"
        case .badBaseline(let p, let r): return "baseline '\(p)': \(r)"
        case .noFrames(let d, let s): return "\(d) delivered no frame in \(String(format: "%.1f", s)) s"
        case .cannotWrite(let p, let r): return "cannot write '\(p)': \(r)"
        }
    }
}
