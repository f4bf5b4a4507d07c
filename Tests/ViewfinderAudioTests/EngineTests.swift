import Foundation
import Synchronization
import Testing
import Viewfinder

/// A scripted sound device: returns 48-frame periods of a counter signal as fast as it is asked
/// (not real time, like ALSA's file plugin), with overruns and a failure where the script says.
final class ScriptedAudioSource: AudioCaptureSource, @unchecked Sendable {
    let info = AudioDeviceInfo(id: "scripted", name: "scripted test device", sampleFormats: [.s16], minimumRate: 48000, maximumRate: 48000, rates: [48000], minimumChannels: 1, maximumChannels: 1)
    let periodFrames: Int
    let overrunEvery: Int?
    let failAfter: Int?
    /// The first reads take a period's time each (a device that looks real time at start, as a
    /// loaded machine or a sanitiser can make it look), then return at once.
    let slowReads: Int
    let reads = Atomic<Int>(0)
    let closed = Atomic<Bool>(false)
    /// Set by a test: the next read fails as if the device was unplugged.
    let unplugged = Atomic<Bool>(false)
    /// Set by a test: `start()` fails (a device that opens, then refuses to stream).
    let refusesToStart = Atomic<Bool>(false)
    /// Reads after this many block until ``releaseBlockedRead`` is set (a PCM whose plugin blocks
    /// inside its read: ALSA's file plugin on a fifo that stops delivering).
    var blocksAfter: Int?
    let releaseBlockedRead = Atomic<Bool>(false)
    private var produced = 0
    /// 1 ms periods unless told (a real request's default is 10 ms).
    init(overrunEvery: Int? = nil, failAfter: Int? = nil, slowReads: Int = 0, periodFrames: Int = 48) {
        self.overrunEvery = overrunEvery; self.failAfter = failAfter; self.slowReads = slowReads; self.periodFrames = periodFrames
    }
    func configure(_ request: AudioStreamRequest) throws -> AudioStreamFormat {
        if let f = request.sampleFormat, f != .s16 { throw AudioError.unsupportedFormat(device: info.id, requested: f.rawValue, available: "S16_LE") }
        return AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 1)
    }
    func start() throws { if refusesToStart.load(ordering: .relaxed) { throw AudioError.deviceGone(info.id) } }
    func read(into buffer: UnsafeMutableRawPointer, frames: Int) throws -> AudioReadResult {
        let k = reads.add(1, ordering: .relaxed).newValue
        if let f = failAfter, k > f { throw AudioError.deviceGone(info.id) }
        if unplugged.load(ordering: .relaxed) { throw AudioError.deviceGone(info.id) }
        if k <= slowReads { usleep(UInt32(frames * 1_000_000 / 48000)) }
        if let b = blocksAfter, k > b {
            while !releaseBlockedRead.load(ordering: .relaxed) { usleep(1000) }
            throw AudioError.deviceGone(info.id)
        }
        let p = buffer.assumingMemoryBound(to: Int16.self)
        for i in 0..<frames { p[i] = Int16(truncatingIfNeeded: produced + i) }
        produced += frames
        let overrun = overrunEvery.map { k % $0 == 0 } ?? false
        return AudioReadResult(frames: frames, timestamp: nil, overruns: overrun ? 1 : 0)
    }
    func close() { closed.store(true, ordering: .relaxed) }
}

@Suite struct AudioEngineTests {
    func run(_ source: ScriptedAudioSource, consumer: CollectingConsumer, seconds: Double, ring: Int = 64) throws -> AudioCaptureEngine {
        let format = try source.configure(AudioStreamRequest())
        let engine = AudioCaptureEngine(source: source, format: format, consumers: [consumer], ringPeriods: ring)
        try engine.start()
        let until = monotonicNanoseconds() + UInt64(seconds * 1e9)
        while monotonicNanoseconds() < until && !engine.isFinished { usleep(5000) }
        engine.stop()
        engine.waitUntilFinished()
        return engine
    }

    /// 10 ms periods, as a real request's default: the probe judges 0.25 s of them (with 1 ms
    /// periods, 32 ms, which a loaded machine can stretch — the watch's case, in the next test).
    @Test func aDeviceFasterThanRealTimeIsPacedByTheClockAndEveryFrameArrives() throws {
        let source = ScriptedAudioSource(periodFrames: 480)
        let c = CollectingConsumer()
        let start = monotonicNanoseconds()
        let engine = try run(source, consumer: c, seconds: 0.5)
        let elapsed = Double(monotonicNanoseconds() - start) / 1e9
        let s = engine.statistics
        #expect(s.selfPaced)
        // Paced: about 0.5 s of audio in 0.5 s, not millions of frames.
        #expect(Double(s.frames) / 48000 < elapsed + 0.1)
        #expect(s.frames > 48000 / 4)
        let st = c.state
        #expect(st.finished && st.error == nil && source.closed.load(ordering: .relaxed))
        #expect(st.samples.enumerated().allSatisfy { $0.element == Int16(truncatingIfNeeded: $0.offset) })
        // Stamped by position: exactly one period apart.
        for (a, b) in zip(st.periods, st.periods.dropFirst()) { #expect(b.timestamp.nanoseconds - a.timestamp.nanoseconds == 10_000_000) }
    }

    /// A device whose first periods come at real time (so the probe judges it a real card) and
    /// that then returns audio as fast as it is read — what a loaded machine under TSan made of the
    /// scripted device in CI, flooding the movie for two minutes: the engine's watch catches it
    /// within half a second of audio and paces it by the clock; every frame still arrives in order.
    @Test func aDeviceThatTurnsFasterThanRealTimeAfterItsStartIsPacedFromThen() throws {
        let source = ScriptedAudioSource(slowReads: 60)
        let c = CollectingConsumer()
        let start = monotonicNanoseconds()
        let engine = try run(source, consumer: c, seconds: 1.5)
        let elapsed = Double(monotonicNanoseconds() - start) / 1e9
        let s = engine.statistics
        #expect(s.selfPaced)
        // At most the probe's and one watch window's audio ahead of the clock, not millions of frames.
        #expect(Double(s.frames) / 48000 < elapsed + 0.6, "\(s.frames) frames in \(elapsed) s")
        #expect(s.frames > 48000 / 2)
        let st = c.state
        #expect(st.finished && st.error == nil && source.closed.load(ordering: .relaxed))
        // In order and as read: the flood before the watch caught it may have overflowed the ring
        // (counted); every period delivered is the device's counter at its position.
        #expect(st.samples.count == Int(s.frames))
        #expect(zip(st.periods, st.periods.dropFirst()).allSatisfy { $1.position > $0.position })
        var offset = 0
        for p in st.periods {
            #expect(st.samples[offset] == Int16(truncatingIfNeeded: p.position) && p.frames == 48)
            offset += p.frames
        }
    }

    @Test func anOverrunStormIsCountedAndNeverEndsCapture() throws {
        let source = ScriptedAudioSource(overrunEvery: 3)
        let c = CollectingConsumer()
        let engine = try run(source, consumer: c, seconds: 0.4)
        let s = engine.statistics
        let reads = source.reads.load(ordering: .relaxed)
        #expect(s.overruns >= UInt64(reads / 3 - 1) && s.overruns <= UInt64(reads / 3))
        #expect(s.error == nil)
        #expect(c.state.periods.filter(\.discontinuity).count >= Int(s.overruns) - 1)
    }

    /// An engine on `source` feeding a collecting consumer, started, with its runtime errors
    /// collected as text.
    func started(_ source: ScriptedAudioSource) throws -> (AudioCaptureEngine, CollectingConsumer, LockedBox<[String]>) {
        let c = CollectingConsumer()
        let errors = LockedBox<[String]>([])
        let format = try source.configure(AudioStreamRequest())
        let engine = AudioCaptureEngine(source: source, format: format, consumers: [c])
        engine.onRuntimeError = { e in errors.withLock { $0.append("\(e)") } }
        try engine.start()
        return (engine, c, errors)
    }

    @Test func aDeviceThatDisappearsEndsCaptureWithOneErrorAndKeepsWhatCameBefore() throws {
        let (engine, c, errors) = try started(ScriptedAudioSource(failAfter: 100))
        engine.waitUntilFinished()
        #expect(errors.withLock { $0 } == ["sound device 'scripted' disappeared"])
        #expect(engine.statistics.error == "sound device 'scripted' disappeared")
        let st = c.state
        #expect(st.samples.count == 100 * 48)
        #expect(st.finished && st.error != nil)
    }

    /// A read that never returns cannot hold the stop for ever (2 Dec: `record --audio` on a PCM
    /// whose plugin blocked in its read never ended, and Ctrl-C did nothing): after the stop and
    /// a grace the engine ends without it, says why, keeps what came before, and the source is
    /// closed when the read returns.
    @Test func aReadThatNeverReturnsCannotHoldTheStop() throws {
        let source = ScriptedAudioSource()
        source.blocksAfter = 50
        let (engine, c, errors) = try started(source)
        while source.reads.load(ordering: .relaxed) <= 50 { usleep(1000) }
        let t0 = monotonicNanoseconds()
        engine.stop()
        engine.waitUntilFinished()
        let took = Double(monotonicNanoseconds() - t0) / 1e9
        #expect(took > 2.9 && took < 6, "the stop took \(took) s")
        let st = c.state
        #expect(st.samples.count == 50 * 48)
        #expect(st.finished && (st.error ?? "").contains("did not return"), "\(st.error ?? "no error")")
        #expect(errors.withLock { $0.count } == 1)
        let closedUnderRead = source.closed.load(ordering: .relaxed)
        #expect(!closedUnderRead, "closed under a read")
        // The device is the stuck read's until it returns: a session refuses to configure it.
        #expect(engine.isHoldingSource)
        source.releaseBlockedRead.store(true, ordering: .relaxed)
        let deadline = monotonicNanoseconds() + 2_000_000_000
        while !source.closed.load(ordering: .relaxed) && monotonicNanoseconds() < deadline { usleep(1000) }
        let closedAfter = source.closed.load(ordering: .relaxed)
        #expect(closedAfter)
        while engine.isHoldingSource && monotonicNanoseconds() < deadline { usleep(1000) }
        #expect(!engine.isHoldingSource)
        // The read's own error after the give-up is not told again.
        #expect(errors.withLock { $0.count } == 1)
    }

    @Test func aSlowConsumerCostsCountedRingDropsNotOverruns() throws {
        let source = ScriptedAudioSource()
        let c = CollectingConsumer(delayMicroseconds: 4000)
        let engine = try run(source, consumer: c, seconds: 0.5, ring: 4)
        let s = engine.statistics
        #expect(s.ringDrops > 0)
        #expect(s.overruns == 0)
        let reads = UInt64(source.reads.load(ordering: .relaxed))
        #expect(s.periods + s.ringDrops <= reads && s.periods + s.ringDrops >= reads - 1)
    }

    @Test func requestsParse() throws {
        let r = try AudioStreamRequest(options: "rate=44100,channels=1,format=float,period=256,periods=3")
        #expect(r.sampleRate == 44100 && r.channels == 1 && r.sampleFormat == .float32 && r.periodFrames == 256 && r.periods == 3)
        #expect(throws: AudioError.self) { try AudioStreamRequest(options: "channels=0") }
        #expect(throws: AudioError.self) { try AudioStreamRequest(options: "format=u8") }
        #expect(throws: AudioError.self) { try AudioStreamRequest(options: "bogus=1") }
    }
}
