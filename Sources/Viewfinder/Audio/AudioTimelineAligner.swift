/// Puts captured audio on a movie's video timeline, by clock rather than by sample count.
///
/// The movie's audio track is contiguous 16-bit PCM at the nominal rate `R`, starting at the movie's
/// time zero `origin` (the first video frame's capture time): its sample `k` belongs at
/// `origin + k/R`. A sound card's clock is not the monotonic clock, so after `n` samples the card
/// has not necessarily advanced `n/R` seconds. The aligner keeps its own ``AudioClockEstimator``
/// over the periods' (position, monotonic time) pairs and, for each output sample, knows which
/// input position belongs there.
///
/// **Method: samples are copied unchanged and single samples are dropped or repeated at quiet
/// points**, not resampled. The error between the sample being copied and the one the clock asks
/// for is tracked; when it passes ``tolerance`` (1 ms), one sample at a time is dropped (card fast)
/// or repeated (card slow), each at the next zero crossing or near-silent sample, until the error
/// is back under a quarter of the tolerance. Why: the recording keeps the microphone's own samples
/// bit for bit (no interpolation filter colours the sound, and a test can compare samples); a real
/// card is within ±100 ppm, that is ≤ 5 corrections a second of 1/48000 s each at zero crossings,
/// which are inaudible; the A/V error stays within about one millisecond however long the
/// recording. The cost is that a grossly wrong clock (0.5 %, 240 corrections a second) gets a
/// crude, slightly rough correction where a resampler would be smoother — sync still holds.
///
/// Frames lost in overruns (positions jumping ahead) become silence of the same length (at most
/// 10 s a gap), so what follows stays in place. A long gap is held as a count, not as samples: at
/// 768 kHz × 64 channels ten seconds of silence is a gigabyte, which materialised per gap took a
/// recording's memory to gigabytes and its thread out of reach of a stop. Not thread-safe: the
/// movie's thread owns it.
public struct AudioTimelineAligner {
    public let sampleRate: Int
    public let channels: Int
    /// Time zero of the track (ns, monotonic).
    public let origin: UInt64
    /// The error (s) beyond which corrections start.
    public var tolerance: Double = 0.001
    private(set) public var clock: AudioClockEstimator
    /// Input samples (interleaved S16) from position `fifoStart` on, except the positions in
    /// ``holes``, which hold silence and have no samples here.
    private var fifo: [Int16] = []
    /// Runs of silence for lost input (sorted, apart, within `fifoStart..<inputEnd`): a gap longer
    /// than ``holeThreshold`` samples is held as a run rather than as zeros.
    private var holes: [(start: UInt64, count: UInt64)] = []
    /// Frames in `holes`.
    private var holeFrames: UInt64 = 0
    /// Samples (frames × channels) from which a gap is held as a run of silence, not as zeros.
    static let holeThreshold = 1 << 16
    private var fifoHead = 0
    private var fifoStart: UInt64 = 0
    private var started = false
    private var hasInput = false
    /// Next input position to copy, and output frames emitted.
    private var next: UInt64 = 0
    private(set) public var emitted: UInt64 = 0
    private var correcting = 0
    private(set) public var dropped: UInt64 = 0
    private(set) public var repeated: UInt64 = 0
    private(set) public var silenceInserted: UInt64 = 0
    /// Largest |error| seen after the start, seconds.
    private(set) public var maximumError: Double = 0

    public init(sampleRate: Int, channels: Int, origin: UInt64) {
        self.sampleRate = sampleRate; self.channels = channels; self.origin = origin
        clock = AudioClockEstimator(nominalRate: sampleRate)
    }

    /// The end of the input held (a position).
    public var inputEnd: UInt64 { fifoStart + UInt64((fifo.count - fifoHead) / channels) + holeFrames }
    /// Bytes of input held (a gap's silence held as a run counts nothing).
    public var bytesHeld: Int { (fifo.count - fifoHead) * 2 }
    /// The monotonic time up to which input is held.
    public var inputEndNanoseconds: Double { clock.hasPoints ? clock.nanoseconds(atPosition: Double(inputEnd)) : 0 }

    /// Adds captured samples (converted to S16) at `position`, first frame captured at `timestamp`.
    public mutating func add(_ data: UnsafeRawBufferPointer, format: AudioSampleFormat, position: UInt64, timestampNanoseconds t: UInt64, discontinuity: Bool = false) {
        let p = clock.add(position: position, timestampNanoseconds: t, discontinuity: discontinuity)
        if !hasInput { fifoStart = p; hasInput = true }
        var end = inputEnd
        if p > end {
            let gap = min(p - end, UInt64(sampleRate) * 10)
            if Int(gap) * channels < Self.holeThreshold {
                fifo.append(contentsOf: repeatElement(0, count: Int(gap) * channels))
            } else {
                holes.append((end, gap)); holeFrames += gap
            }
            silenceInserted += gap
            end += gap
        }
        let skipFrames = end > p ? Int(end - p) : 0
        let skipBytes = skipFrames * channels * format.bytesPerSample
        guard skipBytes < data.count else { return }
        AudioSamples.appendS16(UnsafeRawBufferPointer(rebasing: data[skipBytes...]), format: format, to: &fifo)
    }

    /// Appends to `out` the track's samples for the time before `endNanoseconds`, as far as input
    /// is held. Returns the output position of the first appended frame.
    @discardableResult
    public mutating func emit(upTo endNanoseconds: UInt64, into out: inout [Int16]) -> UInt64 {
        let first = emitted
        guard hasInput, endNanoseconds > origin else { return first }
        // Frame k plays at k / rate: those before the end are the first ⌈end · rate⌉ (rounding
        // down lost the last one whenever the end was a hair short of a whole frame, as a 30 fps
        // end of 1999999999 ns is of 96000 at 48 kHz; the millionth of a frame keeps a whole one
        // from counting one more).
        let want = UInt64(max(0, Double(endNanoseconds - origin) * Double(sampleRate) / 1e9 - 1e-6).rounded(.up))
        let tol = tolerance * Double(sampleRate)
        if !started { start(into: &out, until: want) }
        guard started else { return first }
        while emitted < want && next < inputEnd {
            let x = clock.position(atNanoseconds: origin + UInt64(Double(emitted) * 1e9 / Double(sampleRate)))
            let e = Double(next) - x   // > 0: ahead of the clock (card slow): repeat; < 0: drop
            maximumError = max(maximumError, abs(e) / Double(sampleRate))
            // A correction goes one way only while the error is that way: when the clock's line
            // moved between calls and the error changed sign, dropping on (or repeating on) would
            // only widen it — with nothing to stop it until the input ran out.
            if correcting != 0 && (e > 0) != (correcting > 0) { correcting = 0 }
            // In sync: copy a run at once. Within 64 frames the error moves by less than a frame
            // (for any clock within 2 %), so it is checked once per run.
            if correcting == 0 && abs(e) <= tol / 2 {
                var n = min(64, want - emitted, inputEnd - next)
                if let h = hole(containing: next) {
                    // Silence for lost input, in runs of up to 10 ms (the error is checked again
                    // after each: a drift's corrections fall in the silence, not after it).
                    n = min(want - emitted, h.start + h.count - next, UInt64(max(64, sampleRate / 100)))
                    out.append(contentsOf: repeatElement(0, count: Int(n) * channels))
                } else {
                    if let h = holes.first(where: { $0.start > next }) { n = min(n, h.start - next) }
                    let i = index(next)
                    out.append(contentsOf: fifo[i..<(i + Int(n) * channels)])
                }
                next += n; emitted += n
                continue
            }
            if correcting == 0 && abs(e) > tol { correcting = e > 0 ? 1 : -1 }
            if correcting != 0 && abs(e) < tol / 4 { correcting = 0 }
            if correcting != 0 && (isQuiet(next) || abs(e) > 4 * tol) {
                if correcting > 0, next > fifoStart {
                    copy(next - 1, into: &out); emitted += 1; repeated += 1
                    continue
                } else if correcting < 0, next + 1 < inputEnd {
                    next += 1; dropped += 1
                }
            }
            copy(next, into: &out); next += 1; emitted += 1
        }
        trim()
        return first
    }

    /// The first output sample: silence until the input starts, or skip input captured before time zero.
    private mutating func start(into out: inout [Int16], until want: UInt64) {
        let x0 = clock.position(atNanoseconds: origin)
        if x0 >= Double(fifoStart) {
            next = UInt64(x0.rounded())
            if next >= inputEnd { return }
        } else {
            // The input starts after time zero: silence until it does.
            let startTime = clock.nanoseconds(atPosition: Double(fifoStart))
            // Called again until the input's start is reached: only the silence not yet emitted.
            let k = UInt64(max(0, (startTime - Double(origin)) * Double(sampleRate) / 1e9).rounded())
            let n = min(k, want)
            if n > emitted {
                out.append(contentsOf: repeatElement(0, count: Int(n - emitted) * channels))
                silenceInserted += n - emitted
                emitted = n
            }
            if emitted < k { return }
            next = fifoStart
        }
        started = true
    }

    /// The hole that holds position `p`, if any.
    private func hole(containing p: UInt64) -> (start: UInt64, count: UInt64)? {
        for h in holes where h.start <= p {
            if p < h.start + h.count { return h }
        }
        return nil
    }

    /// The index in `fifo` of position `p`'s first sample (`p` in no hole).
    private func index(_ p: UInt64) -> Int {
        var before: UInt64 = 0
        for h in holes where h.start < p { before += min(h.count, p - h.start) }
        return fifoHead + Int(p - fifoStart - before) * channels
    }

    private func copy(_ p: UInt64, into out: inout [Int16]) {
        if hole(containing: p) != nil {
            out.append(contentsOf: repeatElement(0, count: channels))
            return
        }
        let i = index(p)
        out.append(contentsOf: fifo[i..<(i + channels)])
    }

    /// A zero crossing between `p-1` and `p`, or a sample within 1 % of full scale.
    private func isQuiet(_ p: UInt64) -> Bool {
        if hole(containing: p) != nil { return true }
        let i = index(p)
        var quiet = true
        for c in 0..<channels where abs(Int32(fifo[i + c])) > 328 { quiet = false }
        if quiet { return true }
        guard p > fifoStart else { return false }
        if hole(containing: p - 1) != nil { return true }
        let j = index(p - 1)
        return (Int32(fifo[j]) < 0) != (Int32(fifo[i]) < 0)
    }

    private mutating func trim() {
        // Keep one frame before `next` (a repeat copies it).
        guard next > fifoStart + 1 else { return }
        let newStart = next - 1
        let drop = index(newStart) - fifoHead   // holes before the kept frame hold no samples
        fifoHead += drop
        // Holes (or the parts of them) before the new start go.
        while let h = holes.first, h.start < newStart {
            let cut = min(h.count, newStart - h.start)
            holeFrames -= cut
            if cut == h.count { holes.removeFirst() } else { holes[0] = (newStart, h.count - cut) }
        }
        fifoStart = newStart
        if fifoHead > 1 << 16 && fifoHead > fifo.count / 2 {
            fifo.removeFirst(fifoHead)
            fifoHead = 0
        }
    }
}
