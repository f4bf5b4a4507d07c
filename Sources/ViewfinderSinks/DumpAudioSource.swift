import Foundation
import Viewfinder

/// What the video and the sound of one dump replay share: the replay's start on the monotonic
/// clock, how far the video has got, and where it ended. Media offsets are nanoseconds since the
/// dump's first frame (plus one pass length per loop).
final class DumpReplayTimeline: @unchecked Sendable {
    // @unchecked Sendable: all state is behind `lock`.
    private struct State {
        var epoch: UInt64 = 0
        /// Set by the sound's start when the video has not started yet: the video takes this epoch.
        var armedBySound = false
        var videoRunning = false
        var lastVideoOffset: Int64?
        var lastVideoProgress: UInt64 = 0
        var videoEndOffset: Int64?
    }
    private let lock = LockedBox(State())

    /// The video starts: the epoch is the sound's when the sound started first, else now.
    func videoStarted() -> UInt64 {
        lock.withLock { s in
            if s.armedBySound { s.armedBySound = false } else { s.epoch = monotonicNanoseconds() }
            s.videoRunning = true
            s.lastVideoOffset = nil
            s.videoEndOffset = nil
            s.lastVideoProgress = monotonicNanoseconds()
            return s.epoch
        }
    }

    /// The sound starts: it joins a running video's epoch, or sets one the video will take.
    func soundStarted() {
        lock.withLock { s in
            if !s.videoRunning {
                s.epoch = monotonicNanoseconds()
                s.armedBySound = true
                s.lastVideoOffset = nil
                s.videoEndOffset = nil
                s.lastVideoProgress = s.epoch
            }
        }
    }

    func videoEmitted(offset: Int64) {
        lock.withLock { s in
            s.lastVideoOffset = offset
            s.lastVideoProgress = monotonicNanoseconds()
        }
    }

    /// The video ended (its end of stream, or the session stopped): the sound ends one frame
    /// interval after the last frame it delivered.
    func videoStopped(interval: UInt64) {
        lock.withLock { s in
            guard s.videoRunning else { return }
            s.videoRunning = false
            s.videoEndOffset = (s.lastVideoOffset ?? 0) + Int64(interval)
        }
    }

    var snapshot: (epoch: UInt64, lastVideoOffset: Int64?, lastVideoProgress: UInt64, videoEndOffset: Int64?) {
        lock.withLock { ($0.epoch, $0.lastVideoOffset, $0.lastVideoProgress, $0.videoEndOffset) }
    }
}

/// The sound of a raw dump replayed with its video (`dump:FILE` with audio records): a finite
/// `AudioCaptureSource` that gives the recorded periods back with their recorded capture times
/// moved onto the replay's time line, the same way ``DumpSource`` moves the frames, so a movie
/// recorded from a replay has the dump's sound, in sync.
///
/// - Paced replay: each period comes when it is due (like a card delivering it).
/// - Unpaced replay (`paced=false`): periods come as the video gets to them (at most half a second
///   ahead of the last frame delivered), so a movie's queue of sound never overflows.
/// - Loops repeat the sound with the video; sound outside the frames' span is skipped on later
///   passes.
/// - It ends one frame interval after the last frame the video delivered (its end of stream, or
///   the session stopping): ``endsByItself`` is true.
/// - A damaged audio record is skipped and reported as a loss (a discontinuity), as an overrun of
///   a card would be.
public final class DumpAudioSource: AudioCaptureSource, @unchecked Sendable {
    // @unchecked Sendable: after init the reader and cursor are used by the engine's capture
    // thread only (configure before it starts); `closed` is atomic-ish behind a lock.
    public let info: AudioDeviceInfo
    public let format: AudioStreamFormat
    public let periodFrames: Int
    public var endsByItself: Bool { true }

    private let reader: RawDumpReader
    private let timeline: DumpReplayTimeline
    private let paced: Bool
    private let rebase: Bool
    private let loops: Int
    private let firstVideo: UInt64
    private let videoSpanEnd: UInt64
    private let passLength: UInt64
    private let closedBox = LockedBox(false)
    private var samples: [UInt8] = []
    private var entry = -1
    private var pass = 0
    private var cursorFrames = 0
    private var periodFramesInBuffer = 0
    private var periodTimestamp: UInt64 = 0
    private var pendingLoss = 0
    /// The next period starts a new pass of a looped replay (a join on the time line, no loss).
    private var pendingJoin = false
    private var started = false

    /// How far ahead of the video an unpaced replay's sound may run.
    static let unpacedLead: Int64 = 500_000_000

    init(path: String, id: String, timeline: DumpReplayTimeline, paced: Bool, rebase: Bool, loops: Int,
         firstVideo: UInt64, lastVideo: UInt64, interval: UInt64) throws {
        reader = try RawDumpReader(path: path)
        guard !reader.audioEntries.isEmpty else { throw AudioError.deviceNotFound(id) }
        var first: [UInt8] = []
        let p = try reader.readAudio(0, into: &first)
        format = p.format
        periodFrames = max(1, p.frames)
        samples.reserveCapacity(max(first.count, Int(reader.audioEntries.map(\.rawLength).max() ?? 0)))
        info = AudioDeviceInfo(id: id, name: "sound of dump \(PathName.lastComponent(path))", sampleFormats: [p.format.sampleFormat],
                               minimumRate: p.format.sampleRate, maximumRate: p.format.sampleRate, rates: [p.format.sampleRate],
                               minimumChannels: p.format.channels, maximumChannels: p.format.channels)
        self.timeline = timeline
        self.paced = paced
        self.rebase = rebase
        self.loops = loops
        self.firstVideo = firstVideo
        videoSpanEnd = lastVideo &+ interval
        passLength = (lastVideo &- firstVideo) &+ interval
    }

    /// The recorded format, whatever is asked: a recording offers only what it holds.
    public func configure(_ request: AudioStreamRequest) throws -> AudioStreamFormat { format }

    public func start() throws {
        entry = -1; pass = 0; cursorFrames = 0; periodFramesInBuffer = 0; pendingLoss = 0; pendingJoin = false
        closedBox.withLock { $0 = false }
        started = true
        timeline.soundStarted()
    }

    public func close() { closedBox.withLock { $0 = true } }

    private var isClosed: Bool { closedBox.withLock { $0 } }

    /// Moves to the next audio record to play (skipping those outside the frames' span on later
    /// passes, and damaged ones); false at the end of the last pass.
    private func advance() -> Bool {
        var tried = 0
        while true {
            // A whole pass with nothing to play (all of its sound outside the frames' span) ends it.
            tried += 1
            if tried > reader.audioEntries.count + 1 { return false }
            entry += 1
            if entry >= reader.audioEntries.count {
                pass += 1
                if loops != 0 && pass >= loops { return false }
                entry = 0
                // The next pass's sound follows on the time line, not in the card's positions:
                // a discontinuity, but nothing was lost.
                pendingJoin = true
            }
            let e = reader.audioEntries[entry]
            if e.timestampNanoseconds >= videoSpanEnd || (pass > 0 && e.timestampNanoseconds < firstVideo) { continue }
            samples.removeAll(keepingCapacity: true)
            do {
                let p = try reader.readAudio(entry, into: &samples)
                guard p.format == format else { pendingLoss = 1; continue }
                if p.discontinuity { pendingLoss = 1 }
                periodFramesInBuffer = p.frames
                periodTimestamp = p.timestamp.nanoseconds
                cursorFrames = 0
                return true
            } catch {
                pendingLoss = 1
                continue
            }
        }
    }

    public func read(into buffer: UnsafeMutableRawPointer, frames: Int) throws -> AudioReadResult {
        guard started else { throw AudioError.notConfigured }
        if isClosed { return AudioReadResult(frames: 0, timestamp: nil, endOfStream: true) }
        if cursorFrames >= periodFramesInBuffer {
            guard advance() else { return AudioReadResult(frames: 0, timestamp: nil, endOfStream: true) }
        }
        let rate = Double(format.sampleRate)
        let n = min(frames, periodFramesInBuffer - cursorFrames)
        let recorded = periodTimestamp &+ UInt64(Double(cursorFrames) * 1e9 / rate)
        let passShift = UInt64(pass) &* passLength
        let mediaStart = Int64(bitPattern: recorded &- firstVideo) &+ Int64(bitPattern: passShift)
        let duration = Int64(Double(n) * 1e9 / rate)
        // Wait until the period is due (paced) or the video has got near it (unpaced).
        var epoch: UInt64
        while true {
            if isClosed { return AudioReadResult(frames: 0, timestamp: nil, endOfStream: true) }
            let t = timeline.snapshot
            epoch = t.epoch
            if let end = t.videoEndOffset {
                if mediaStart >= end { return AudioReadResult(frames: 0, timestamp: nil, endOfStream: true) }
                break
            }
            let now = monotonicNanoseconds()
            if paced {
                let due = UInt64(bitPattern: Int64(bitPattern: t.epoch) &+ mediaStart &+ duration)
                if now >= due { break }
                sleepUntil(monotonicNanoseconds: min(due, now &+ 5_000_000))
            } else {
                if let v = t.lastVideoOffset, mediaStart <= v &+ Self.unpacedLead { break }
                // A video that makes no progress for two seconds (a stalled pipeline, or no video
                // at all) does not hold the sound back for ever.
                if now &- t.lastVideoProgress > 2_000_000_000 { break }
                sleepUntil(monotonicNanoseconds: now &+ 1_000_000)
            }
        }
        let bytes = n * format.bytesPerFrame
        samples.withUnsafeBytes { s in buffer.copyMemory(from: s.baseAddress! + cursorFrames * format.bytesPerFrame, byteCount: bytes) }
        cursorFrames += n
        let stamp = rebase ? UInt64(bitPattern: Int64(bitPattern: epoch) &+ mediaStart) : recorded &+ passShift
        let lost = pendingLoss, join = pendingJoin
        pendingLoss = 0
        pendingJoin = false
        return AudioReadResult(frames: n, timestamp: Timestamp(nanoseconds: stamp, clock: .monotonic), overruns: lost, discontinuity: join)
    }
}

extension CaptureDevice {
    /// The sound recorded with a replayed dump (a `dump:FILE` device whose dump holds audio
    /// records), as a microphone for the same session, replayed in step with the frames; nil for
    /// other devices and for dumps without sound.
    ///
    /// ```swift
    /// let replay = try CaptureDevice.open("dump:take1.vfdump", directory: .standard)
    /// if let sound = try replay.recordedSound() { try session.addInput(AudioDeviceInput(device: sound)) }
    /// ```
    public func recordedSound() throws -> AudioCaptureDevice? {
        guard let dump = source as? DumpSource, let s = try dump.makeAudioSource() else { return nil }
        return AudioCaptureDevice(source: s)
    }
}
