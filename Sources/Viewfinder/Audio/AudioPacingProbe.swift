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

/// Watches a device judged real time by ``AudioPacingProbe`` for the rest of the stream: a source
/// whose first periods came slowly (a loaded machine, a sanitiser, a slow start) but that then
/// returns audio faster than it plays is caught as soon as it is ``lead`` seconds ahead of the
/// clock, instead of flooding the consumers for the whole session (CI once saw a scripted device
/// under TSan deliver 417 s of audio in 120 s — 3.5× real time — and stall a movie).
///
/// Since the stream started, the device has returned more than `lead` seconds of audio beyond the
/// time that passed *and* more than `ratio` (2 %) faster than real time, and its stamps (if any) do
/// not advance with its positions. A real card cannot: its buffer only holds what it captured since
/// it started (with the stream, to within the thread's start), so however late the program reads,
/// it never has more than the time that passed; its clock is within 0.1 % (a long session's drift
/// is not 2 %); and a kernel card's stamps follow its positions anyway. How far the audio got
/// ahead matters downstream: the periods before the switch are stamped on arrival, ahead of the
/// paced line, and a movie corrects for that lead once — so the watch looks at every period
/// rather than waiting for a window. Does not allocate.
public struct AudioPacingWatch: Sendable {
    public let sampleRate: Int
    /// When the stream started (before its first read), monotonic ns.
    public let start: UInt64
    public let lead: Double
    public let ratio: Double
    /// Where the stamps are compared from (moved on every half second of audio: a replay's stamps
    /// follow its positions over a stretch but may be rebased between stretches), and the last
    /// verdict.
    private var anchorPosition: UInt64?
    private var anchorStamp: UInt64?
    private var stampsFollow = true

    public init(sampleRate: Int, start: UInt64, lead: Double = 0.25, ratio: Double = 1.02) {
        self.sampleRate = sampleRate; self.start = start; self.lead = lead; self.ratio = ratio
    }

    /// Records a period (position counted from the stream's start; as
    /// ``AudioPacingProbe/record(position:frames:arrivalNanoseconds:deviceTimestamp:)``).
    /// Returns true when the device is not real time.
    public mutating func record(position: UInt64, frames: Int, arrivalNanoseconds: UInt64, deviceTimestamp: UInt64?) -> Bool {
        let rate = Double(sampleRate)
        if let p0 = anchorPosition {
            let positionSpan = Double(position &- p0) / rate
            if let a = anchorStamp, let b = deviceTimestamp {
                // Judged over at least 50 ms of audio; until then the last verdict stands.
                if positionSpan >= 0.05 { stampsFollow = Double(Int64(bitPattern: b &- a)) / 1e9 >= positionSpan / 2 }
            } else {
                stampsFollow = false
            }
            if positionSpan >= 0.5 { anchorPosition = position; anchorStamp = deviceTimestamp }
        } else {
            anchorPosition = position; anchorStamp = deviceTimestamp
            stampsFollow = deviceTimestamp != nil
        }
        let media = Double(position + UInt64(frames)) / rate
        let elapsed = Double(Int64(bitPattern: arrivalNanoseconds &- start)) / 1e9
        return media - elapsed > lead && media > elapsed * ratio && !stampsFollow
    }
}
