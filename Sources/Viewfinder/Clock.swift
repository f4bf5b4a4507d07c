#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The clock a timestamp was taken from.
public enum ClockSource: String, Sendable, Codable {
    /// `CLOCK_MONOTONIC`: the engine's reference clock.
    case monotonic
    /// `CLOCK_MONOTONIC_RAW`.
    case monotonicRaw
    /// `CLOCK_REALTIME` (wall clock; may jump).
    case realtime
    /// `CLOCK_BOOTTIME`.
    case boottime
    /// The source did not say (V4L2 `TIMESTAMP_UNKNOWN`); the host receive time is used instead.
    case unknown
}

/// A point in time in nanoseconds on a named clock.
public struct Timestamp: Sendable, Equatable, Comparable, Codable, CustomStringConvertible {
    public var nanoseconds: UInt64
    public var clock: ClockSource

    public init(nanoseconds: UInt64, clock: ClockSource = .monotonic) {
        self.nanoseconds = nanoseconds
        self.clock = clock
    }

    public static let zero = Timestamp(nanoseconds: 0)

    public static func < (a: Timestamp, b: Timestamp) -> Bool { a.nanoseconds < b.nanoseconds }

    public var seconds: Double { Double(nanoseconds) / 1e9 }

    public var description: String { "\(nanoseconds)ns(\(clock.rawValue))" }

    /// Now, on `CLOCK_MONOTONIC`.
    @inline(__always)
    public static func now() -> Timestamp { Timestamp(nanoseconds: monotonicNanoseconds(), clock: .monotonic) }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

/// Sleeps the calling thread until `CLOCK_MONOTONIC` reaches `deadline` nanoseconds.
public func sleepUntil(monotonicNanoseconds deadline: UInt64) {
    var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
}
