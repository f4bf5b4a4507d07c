import Viewfinder

/// How the deadline stage decides that a frame is late.
public enum DeadlinePolicy: String, OptionChoice {
    /// Late when older than `max_age_ms`.
    case maxAge = "max_age"
    /// Late when a newer frame must already exist: older than one frame interval plus `slack`
    /// (or `max_age_ms` when the interval is unknown). Keeps only the latest frame.
    case keepLatest = "keep_latest"
}

/// Options of ``DeadlineStage``.
public struct DeadlineOptions: StageOptions {
    public var policy: DeadlinePolicy = .maxAge
    /// Age budget, ms (capture timestamp to now).
    public var maxAgeMs: Double = 100
    /// Extra time allowed beyond one frame interval for `keep_latest`, as a fraction of the interval.
    public var slack: Double = 0.5
    public init() {}
    public static var fields: [OptionField<DeadlineOptions>] {
        [
            .choice("policy", \.policy, "max_age: drop frames older than max_age_ms; keep_latest: drop frames a newer one has superseded"),
            .double("max_age_ms", \.maxAgeMs, range: 0.1...60_000, unit: "ms", "Age budget from capture to this stage"),
            .double("slack", \.slack, range: 0...10, unit: "frame intervals", "Tolerance beyond one frame interval for keep_latest"),
        ]
    }
}

/// The late-frame test on its own, for consumers that want to apply the same budget when they get
/// to a frame (a video data output's "discard late frames").
public struct DeadlineFilter: Sendable, Equatable {
    /// Frames older than this are late, ns.
    public var budgetNanoseconds: UInt64
    public init(budgetNanoseconds: UInt64) { self.budgetNanoseconds = budgetNanoseconds }

    /// Age of `frame` at `now` (capture timestamp when on CLOCK_MONOTONIC, else receive time), ns.
    @inline(__always)
    public static func age(of frame: Frame, now: UInt64 = monotonicNanoseconds()) -> UInt64 {
        let t = frame.timestamp.clock == .monotonic && frame.timestamp.nanoseconds > 0 ? frame.timestamp.nanoseconds : frame.receiveTime
        return now > t ? now &- t : 0
    }

    @inline(__always)
    public func isLate(_ frame: Frame, now: UInt64 = monotonicNanoseconds()) -> Bool {
        Self.age(of: frame, now: now) > budgetNanoseconds
    }
}

/// Late-frame dropping: frames older than a budget (capture time to now) are dropped with reason
/// `late`, so whatever follows only ever sees fresh frames and the age of delivered frames stays
/// bounded when something downstream is slower than capture.
public final class DeadlineStage: Stage {
    public static let name = "deadline"
    public static let summary = "Drops frames older than a budget (max_age) or superseded by a newer one (keep_latest), counted as late."

    public let options: DeadlineOptions
    public private(set) var filter: DeadlineFilter
    /// Frames this stage dropped.
    public private(set) var dropped: UInt64 = 0
    public private(set) var passed: UInt64 = 0

    public init(options: DeadlineOptions) {
        self.options = options
        self.filter = DeadlineFilter(budgetNanoseconds: UInt64(options.maxAgeMs * 1e6))
    }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        switch options.policy {
        case .maxAge:
            filter = DeadlineFilter(budgetNanoseconds: UInt64(options.maxAgeMs * 1e6))
        case .keepLatest:
            if context.frameIntervalNanoseconds > 0 {
                filter = DeadlineFilter(budgetNanoseconds: UInt64(Double(context.frameIntervalNanoseconds) * (1 + options.slack)))
            } else {
                filter = DeadlineFilter(budgetNanoseconds: UInt64(options.maxAgeMs * 1e6))
            }
        }
        // The stages before this one hold every frame for their look-ahead: a budget shorter than
        // that drops every frame (`stabilise,deadline` — 15 frames, 500 ms at 30 fps, against
        // 100 ms — delivered nothing, and said nothing).
        let held = UInt64(context.upstreamDelayFrames) * context.frameIntervalNanoseconds
        if held > 0 && held >= filter.budgetNanoseconds {
            throw ConfigurationError.unsupportedStream(stage: Self.name, reason: String(
                format: "the stages before it hold each frame %d frames (%.0f ms) for their look-ahead, longer than its budget of %.0f ms: every frame would be late (put deadline before them, or raise max_age_ms above %.0f)",
                context.upstreamDelayFrames, Double(held) / 1e6, Double(filter.budgetNanoseconds) / 1e6, Double(held) / 1e6))
        }
    }

    public func process(_ frame: Frame) -> StageVerdict {
        if filter.isLate(frame) {
            dropped &+= 1
            return .drop(.late)
        }
        passed &+= 1
        return .forward
    }
}
