/// Decides whether a sound device paces itself (a real card) or returns audio as fast as it is
/// read (ALSA's `file`/`null` plugins), from the first periods.
///
/// The first 100 ms are not enough: a real card can deliver a burst at start (snd-dummy did, first
/// in a fresh VM: its position jumped when its timer caught up). So the probe looks at up to
/// ``maximumPeriods`` periods or ``window`` seconds of audio and calls a device *not real time*
/// only when all three hold:
///
/// 1. the whole window arrived more than 4× faster than real time;
/// 2. so did its second half (a real card's burst at start is followed by periods at real time);
/// 3. the device's own timestamps do not advance with its positions (no timestamps, or stamps
///    spanning less than half the audio's duration): a kernel card stamps each period when it was
///    captured, however late the program reads it.
///
/// Storage is preallocated; ``record(position:frames:arrivalNanoseconds:deviceTimestamp:)`` does
/// not allocate.
public struct AudioPacingProbe: Sendable {
    public let sampleRate: Int
    public let maximumPeriods: Int
    public let window: Double
    /// When capture started (before the first read), monotonic ns.
    public let start: UInt64
    private var positions: [UInt64]
    private var ends: [UInt64]
    private var arrivals: [UInt64]
    private var stamps: [UInt64]
    private var missingStamps = 0
    private(set) public var count = 0

    public init(sampleRate: Int, start: UInt64, maximumPeriods: Int = 32, window: Double = 0.25) {
        self.sampleRate = sampleRate
        self.start = start
        self.maximumPeriods = max(1, maximumPeriods)
        self.window = window
        positions = [UInt64](repeating: 0, count: self.maximumPeriods)
        ends = positions; arrivals = positions; stamps = positions
    }

    /// Records a period (its first frame's position, its length, when the read returned and the
    /// device's stamp of its first frame if it gave one). Returns true when enough is known.
    public mutating func record(position: UInt64, frames: Int, arrivalNanoseconds: UInt64, deviceTimestamp: UInt64?) -> Bool {
        if count < maximumPeriods {
            positions[count] = position
            ends[count] = position + UInt64(frames)
            arrivals[count] = arrivalNanoseconds
            stamps[count] = deviceTimestamp ?? 0
            if deviceTimestamp == nil { missingStamps += 1 }
            count += 1
        }
        return isComplete
    }

    public var isComplete: Bool {
        count >= maximumPeriods || (count > 0 && Double(ends[count - 1] - positions[0]) >= window * Double(sampleRate))
    }

    /// True when the device delivered faster than real time and its stamps do not follow its
    /// positions: the engine must pace it by the clock.
    public var isSelfPaced: Bool {
        guard count > 0 else { return false }
        let rate = Double(sampleRate)
        let last = count - 1
        let media = Double(ends[last] - positions[0]) / rate
        let elapsed = Double(arrivals[last] &- start) / 1e9
        guard elapsed < media / 4 else { return false }
        if count >= 4 {
            let m = count / 2
            let secondMedia = Double(ends[last] - positions[m]) / rate
            let secondElapsed = Double(arrivals[last] &- arrivals[m - 1]) / 1e9
            guard secondElapsed < secondMedia / 4 else { return false }
        }
        if missingStamps == 0 && count >= 2 {
            let stampSpan = Double(Int64(bitPattern: stamps[last] &- stamps[0])) / 1e9
            let positionSpan = Double(positions[last] - positions[0]) / rate
            if stampSpan >= positionSpan / 2 { return false }
        }
        return true
    }
}
