import Foundation
import Logging
import Synchronization

/// The counts of an audio capture run.
public struct AudioStatistics: Sendable, Equatable, Codable {
    /// Frames (one sample per channel) delivered to consumers.
    public var frames: UInt64 = 0
    public var periods: UInt64 = 0
    /// Overruns the device reported and the engine recovered (`snd_pcm_recover`).
    public var overruns: UInt64 = 0
    /// Frames the device's clock says were lost in overruns.
    public var framesLost: UInt64 = 0
    /// Periods read but not delivered because the consumers fell behind (the ring was full).
    public var ringDrops: UInt64 = 0
    /// Periods stamped by the clock because the device gave no timestamp.
    public var softwareTimestamps: UInt64 = 0
    /// The device delivered faster than real time (a file or null PCM): the engine paced it by the
    /// monotonic clock and stamped it by position.
    public var selfPaced = false
    /// Peak level over the last half second, dBFS (a level meter's reading).
    public var peakDBFS: Double = -120
    /// The highest peak of the whole run, dBFS (what a summary after the run reports).
    public var maximumPeakDBFS: Double = -120
    /// The card's rate against the monotonic clock, ppm off nominal.
    public var measuredPPM: Double = 0
    public var measuredRate: Double = 0
    /// Why capture ended early, if it did (a device that disappeared).
    public var error: String?
    public init() {}

    private enum CodingKeys: String, CodingKey {
        case frames, periods, overruns, framesLost, ringDrops, softwareTimestamps, selfPaced, peakDBFS, maximumPeakDBFS, measuredPPM, measuredRate, error
    }

    /// Reads statistics encoded before a field was added (``maximumPeakDBFS``): what is absent
    /// keeps its initial value.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        frames = try c.decode(UInt64.self, forKey: .frames)
        periods = try c.decode(UInt64.self, forKey: .periods)
        overruns = try c.decode(UInt64.self, forKey: .overruns)
        framesLost = try c.decode(UInt64.self, forKey: .framesLost)
        ringDrops = try c.decode(UInt64.self, forKey: .ringDrops)
        softwareTimestamps = try c.decode(UInt64.self, forKey: .softwareTimestamps)
        selfPaced = try c.decode(Bool.self, forKey: .selfPaced)
        peakDBFS = try c.decode(Double.self, forKey: .peakDBFS)
        maximumPeakDBFS = try c.decodeIfPresent(Double.self, forKey: .maximumPeakDBFS) ?? peakDBFS
        measuredPPM = try c.decode(Double.self, forKey: .measuredPPM)
        measuredRate = try c.decode(Double.self, forKey: .measuredRate)
        error = try c.decodeIfPresent(String.self, forKey: .error)
    }
}

/// Runs a sound device: a real-time capture thread reads periods into preallocated slots and
/// hands them over a lock-free ring; a delivery thread stamps them against the measured clock and
/// gives them to the consumers (the movie, the audio data output).
///
/// - The capture thread allocates nothing per period: slots come from a free ring and go back to
///   it; when every slot is in use, the period is read into a scratch slot and counted as a ring
///   drop (the device is drained regardless, so a slow consumer never causes an overrun).
/// - Periods are stamped by the device (ALSA's `htstamp` on `CLOCK_MONOTONIC`), not by when the
///   thread woke up.
/// - The engine never relies on the device pacing it: a device that returns the first periods
///   much faster than real time (ALSA's `file`/`null` plugins) is paced by the monotonic clock and
///   stamped by its position (``AudioStatistics/selfPaced``); one that passed that probe and then
///   gets ahead of the clock is caught later by ``AudioPacingWatch`` and paced from then on.
public final class AudioCaptureEngine: @unchecked Sendable {
    // @unchecked Sendable: configuration is immutable after init; capture-thread state is owned by
    // that thread, delivery state by the delivery thread; shared counts are atomics or `stats`.
    public let source: any AudioCaptureSource
    public let format: AudioStreamFormat
    public let periodFrames: Int
    private let consumers: [any AudioConsumer]
    private let logger: Logger
    private let slotCount: Int
    private let slotBytes: Int
    private let storage: UnsafeMutableRawPointer
    private let free: SPSCRing<Int>
    private let filled: SPSCRing<(slot: Int, period: AudioPeriod)>
    private let stopFlag = Atomic<Bool>(false)
    /// The capture thread's end: 0 running, 1 ended (the delivery thread closes the source), 2
    /// given up on by the delivery thread (a read that did not return after the stop; the capture
    /// thread closes the source itself if it ever returns), 3 given up on and since returned (the
    /// source closed).
    private let captureState = Atomic<Int>(0)
    /// When ``stop()`` was called (monotonic ns; 0: not yet).
    private let stopRequestedAt = Atomic<UInt64>(0)
    private let overruns = Atomic<UInt64>(0)
    private let ringDrops = Atomic<UInt64>(0)
    private let softwareStamps = Atomic<UInt64>(0)
    private let selfPaced = Atomic<Bool>(false)
    private let stats = LockedBox(AudioStatistics())
    private let errorBox = LockedBox<(any Error)?>(nil)
    private let doneLock = ConditionLock()
    private var finished = false
    private var threads: [EngineThread] = []
    /// Called once, when the device fails (disappears) mid-run — from the capture thread, or from
    /// the delivery thread when a read did not return after the stop.
    public var onRuntimeError: (@Sendable (any Error) -> Void)?

    /// `source` must be configured (its format is `format`). `ringPeriods` is a power of two.
    public init(source: any AudioCaptureSource, format: AudioStreamFormat, consumers: [any AudioConsumer], ringPeriods: Int = 64,
                logger: Logger = Logger(label: "viewfinder.audio")) {
        self.source = source
        self.format = format
        self.periodFrames = max(1, source.periodFrames)
        self.consumers = consumers
        self.logger = logger
        self.slotCount = ringPeriods
        self.slotBytes = periodFrames * format.bytesPerFrame
        // One more slot: the scratch slot periods go to when the ring is full.
        storage = .allocate(byteCount: (ringPeriods + 1) * slotBytes, alignment: 64)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: (ringPeriods + 1) * slotBytes)
        free = SPSCRing(capacity: ringPeriods)
        filled = SPSCRing(capacity: ringPeriods)
        for i in 0..<ringPeriods { _ = free.push(i) }
    }

    deinit { storage.deallocate() }

    public var statistics: AudioStatistics {
        var s = stats.withLock { $0 }
        s.overruns = overruns.load(ordering: .relaxed)
        s.ringDrops = ringDrops.load(ordering: .relaxed)
        s.softwareTimestamps = softwareStamps.load(ordering: .relaxed)
        s.selfPaced = selfPaced.load(ordering: .relaxed)
        return s
    }

    public var isFinished: Bool { doneLock.withLock { finished } }

    private var prepared = false

    /// Tells the consumers that the run ends without this device's sound (it failed to start after
    /// ``prepare()`` told them its format).
    func abandon(error: any Error) {
        for c in consumers { c.finishAudio(error: error) }
    }

    /// Tells the consumers the format (before the video starts, so that a movie has its track).
    public func prepare() {
        guard !prepared else { return }
        prepared = true
        for c in consumers { c.prepareAudio(format: format) }
    }

    /// Prepares the consumers if not done yet, starts the device and the two threads.
    public func start() throws {
        prepare()
        try source.start()
        threads.append(EngineThread(name: "vf-audio-cap") { [self] in captureLoop() })
        threads.append(EngineThread(name: "vf-audio-out") { [self] in deliveryLoop() })
    }

    /// Stops capture; periods already read still reach the consumers.
    public func stop() {
        _ = stopRequestedAt.compareExchange(expected: 0, desired: monotonicNanoseconds(), ordering: .relaxed)
        stopFlag.store(true, ordering: .releasing)
    }

    /// Waits for the delivery thread, then for the capture thread — unless the delivery thread
    /// gave up on it (a device read that did not return after the stop): it is detached then, and
    /// ends when the read does.
    public func waitUntilFinished() {
        guard threads.count == 2 else { for t in threads { t.join() }; return }
        threads[1].join()
        if captureState.load(ordering: .acquiring) == 2 { threads[0].detach() } else { threads[0].join() }
    }

    /// How long after the stop the delivery thread waits for a capture thread stuck in a read: three
    /// seconds and a period.
    var abandonAfterNanoseconds: UInt64 { 3_000_000_000 &+ UInt64(Double(periodFrames) * 1e9 / Double(max(1, format.sampleRate))) }

    // MARK: Capture thread

    private struct Pacing {
        var start: UInt64 = 0
        var probing = true
        var probe: AudioPacingProbe
        var held: [(slot: Int, period: AudioPeriod)] = []
        var watch: AudioPacingWatch
    }

    private func captureLoop() {
        let rate = Double(format.sampleRate)
        let started = monotonicNanoseconds()
        let probeLimit = min(Self.probePeriods, max(1, slotCount / 2))
        var pacing = Pacing(start: started, probe: AudioPacingProbe(sampleRate: format.sampleRate, start: started, maximumPeriods: probeLimit),
                            watch: AudioPacingWatch(sampleRate: format.sampleRate, start: started))
        pacing.held.reserveCapacity(probeLimit)
        var position: UInt64 = 0
        var spare: Int?
        var lostBefore = false
        var stopDeadline: UInt64 = 0
        while true {
            if stopFlag.load(ordering: .acquiring) {
                // A device stops at once; a finite source is read to its end (bounded).
                guard source.endsByItself else { break }
                let now = monotonicNanoseconds()
                if stopDeadline == 0 { stopDeadline = now &+ 2_000_000_000 } else if now > stopDeadline { break }
            }
            var next = spare ?? free.pop()
            spare = nil
            // A finite source (a replay) is not real time: it waits for room rather than dropping.
            while next == nil && source.endsByItself && !(stopDeadline != 0 && monotonicNanoseconds() > stopDeadline) {
                usleep(1000)
                next = free.pop()
            }
            let slot = next ?? slotCount
            if selfPaced.load(ordering: .relaxed) {
                sleepUntil(monotonicNanoseconds: pacing.start &+ UInt64(Double(position + UInt64(periodFrames)) * 1e9 / rate))
            }
            let r: AudioReadResult
            do { r = try source.read(into: storage + slot * slotBytes, frames: periodFrames) } catch {
                if slot < slotCount { spare = slot }
                // Given up on after the stop: the run is over and its error was said.
                if captureState.load(ordering: .acquiring) != 2 { fail(error) }
                break
            }
            if r.overruns > 0 { overruns.add(UInt64(r.overruns), ordering: .relaxed); lostBefore = true }
            if r.discontinuity { lostBefore = true }
            guard r.frames > 0 else {
                if slot < slotCount { spare = slot }
                if r.endOfStream { break }
                continue
            }
            var stamp = r.timestamp?.nanoseconds ?? 0
            if r.timestamp == nil || selfPaced.load(ordering: .relaxed) {
                if r.timestamp == nil { softwareStamps.add(1, ordering: .relaxed) }
                stamp = selfPaced.load(ordering: .relaxed)
                    ? pacing.start &+ UInt64(Double(position) * 1e9 / rate)
                    : monotonicNanoseconds() &- UInt64(Double(r.frames) * 1e9 / rate)
            }
            let period = AudioPeriod(frames: r.frames, timestamp: Timestamp(nanoseconds: stamp), position: position, discontinuity: lostBefore)
            lostBefore = false
            position += UInt64(r.frames)
            if !pacing.probing && !selfPaced.load(ordering: .relaxed),
               pacing.watch.record(position: period.position, frames: r.frames, arrivalNanoseconds: monotonicNanoseconds(), deviceTimestamp: r.timestamp?.nanoseconds) {
                // Judged real time at start, but now returning audio faster than it plays: paced by
                // the clock from here, as if from the stream's start (what the probe would have
                // done; the next period waits until its position's time). The periods so far were
                // stamped as they came, ahead of that line: the clocks that place audio on a
                // timeline (a movie's) treat them as bad stamps, at the cost of one sync correction.
                selfPaced.store(true, ordering: .relaxed)
                let media = Double(position) / rate
                let elapsed = Double(monotonicNanoseconds() &- pacing.start) / 1e9
                logger.debug("audio: '\(source.info.id)' is returning audio faster than real time after its start (\(media) s in \(elapsed) s): pacing it by the clock")
            }
            if slot == slotCount {
                ringDrops.add(1, ordering: .relaxed)
                if r.endOfStream { break }
                continue
            }
            if pacing.probing {
                let done = pacing.probe.record(position: period.position, frames: r.frames, arrivalNanoseconds: monotonicNanoseconds(), deviceTimestamp: r.timestamp?.nanoseconds)
                probe(&pacing, slot: slot, period: period, decide: done)
                if r.endOfStream { break }
                continue
            }
            if filled.push((slot, period)) != nil { ringDrops.add(1, ordering: .relaxed); spare = slot }
            if r.endOfStream { break }
        }
        for h in pacing.held where filled.push(h) != nil { ringDrops.add(1, ordering: .relaxed) }
        if !captureState.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged {
            // The delivery thread gave up on this thread and finished without it: the source is
            // this thread's to close (no run can have opened it meanwhile: see `isHoldingSource`).
            source.close()
            captureState.store(3, ordering: .releasing)
        }
    }

    /// Whether a capture thread given up on after the stop is still inside the source's read: the
    /// source must not be configured or started again until it returns (and closes it).
    public var isHoldingSource: Bool {
        captureState.load(ordering: .acquiring) == 2
    }

    static let probePeriods = 32

    /// Holds the first periods back (up to 250 ms, at most half the ring) until it is known whether
    /// the device paces itself (``AudioPacingProbe``): a file or null PCM returns them at once and
    /// without timestamps that follow its positions; a real card may burst at start, but its
    /// stamps follow its positions and the periods after the burst come at real time.
    private func probe(_ p: inout Pacing, slot: Int, period: AudioPeriod, decide: Bool) {
        p.held.append((slot, period))
        guard decide else { return }
        p.probing = false
        if p.probe.isSelfPaced {
            selfPaced.store(true, ordering: .relaxed)
            let media = Double(period.position + UInt64(period.frames)) / Double(format.sampleRate)
            let elapsed = Double(monotonicNanoseconds() &- p.start) / 1e9
            logger.debug("audio: '\(source.info.id)' delivered \(media) s in \(elapsed) s with no timestamps that follow it: not a real-time device, pacing it by the clock")
            for i in p.held.indices {
                p.held[i].period.timestamp = Timestamp(nanoseconds: p.start &+ UInt64(Double(p.held[i].period.position) * 1e9 / Double(format.sampleRate)))
            }
        }
        for h in p.held where filled.push(h) != nil { ringDrops.add(1, ordering: .relaxed) }
        p.held.removeAll(keepingCapacity: true)
    }

    private func fail(_ error: any Error) {
        logger.error("audio: \(error)")
        errorBox.withLock { $0 = error }
        stats.withLock { $0.error = "\(error)" }
        onRuntimeError?(error)
    }

    // MARK: Delivery thread

    private func deliveryLoop() {
        var clock = AudioClockEstimator(nominalRate: format.sampleRate)
        var peakHold = 0.0
        var peakTime: UInt64 = 0
        var runPeak = 0.0
        while true {
            guard let e = filled.pop() else {
                if captureState.load(ordering: .acquiring) == 1 && filled.isEmpty { break }
                // A read that does not return (a PCM whose plugin blocks inside it) would hold
                // the session's stop for ever: after the stop and a grace, the run ends without
                // this device's last sound, said as its error.
                let stopAt = stopRequestedAt.load(ordering: .relaxed)
                if stopAt != 0, monotonicNanoseconds() &- stopAt > abandonAfterNanoseconds,
                   captureState.compareExchange(expected: 0, desired: 2, ordering: .acquiringAndReleasing).exchanged {
                    let waited = Double(monotonicNanoseconds() &- stopAt) / 1e9
                    fail(AudioError.deviceFailed(device: source.info.id, call: "read",
                                                 message: String(format: "a read did not return %.1f s after the stop; the run ended without it", waited)))
                    break
                }
                usleep(2000)
                continue
            }
            var period = e.period
            period.position = clock.add(position: period.position, timestampNanoseconds: period.timestamp.nanoseconds, discontinuity: period.discontinuity)
            let data = UnsafeRawBufferPointer(start: storage + e.slot * slotBytes, count: period.frames * format.bytesPerFrame)
            let peak = AudioSamples.peak(data, format: format.sampleFormat)
            if peak >= peakHold || period.timestamp.nanoseconds &- peakTime > 500_000_000 { peakHold = peak; peakTime = period.timestamp.nanoseconds }
            runPeak = max(runPeak, peak)
            let buffer = AudioBuffer(data: data, format: format, period: period, measuredRate: clock.rate)
            for c in consumers { c.consumeAudio(buffer) }
            _ = free.push(e.slot)
            let (rate, ppm, lost, level, maxLevel) = (clock.rate, clock.ppm, clock.framesLost, AudioSamples.dBFS(peakHold), AudioSamples.dBFS(runPeak))
            stats.withLock { s in
                s.frames += UInt64(period.frames); s.periods += 1
                s.measuredRate = rate; s.measuredPPM = ppm; s.framesLost = lost; s.peakDBFS = level; s.maximumPeakDBFS = maxLevel
            }
        }
        if captureState.load(ordering: .acquiring) == 1 { source.close() }
        let error = errorBox.withLock { $0 }
        for c in consumers { c.finishAudio(error: error) }
        doneLock.withLock { finished = true; doneLock.broadcast() }
    }
}
