import Foundation
import Logging
import Viewfinder

/// Why a recording ended.
public enum MovieRecordingEndReason: String, Sendable, Codable {
    /// ``MovieFileOutput/stopRecording()`` was called.
    case stopped
    /// The session stopped (end of the source, engine stopped).
    case sessionEnded
    case maximumDurationReached
    case maximumFileSizeReached
    /// Free space on the disk fell below ``MovieOutputSettings/minimumFreeDiskSpace``.
    case diskSpaceLow
    /// A write failed with ENOSPC.
    case diskFull
    /// Any other failure.
    case failed
}

/// Errors a recording ends with (passed to ``MovieRecordingDelegate`` like AVFoundation's
/// `AVErrorMaximumDurationReached` & co.). The limit errors come with a file that is complete.
public enum MovieRecordingError: Error, Equatable, CustomStringConvertible {
    case maximumDurationReached(seconds: Double)
    case maximumFileSizeReached(bytes: UInt64)
    case minimumFreeDiskSpaceReached(bytes: UInt64)
    case diskFull(path: String)
    case writeFailed(SinkError)
    case encodingFailed(String)
    case alreadyRecording(path: String)
    case notRunning
    case unsupportedFormat(String)

    public var description: String {
        switch self {
        case .maximumDurationReached(let s): return "the recording reached its maximum duration (\(s) s)"
        case .maximumFileSizeReached(let b): return "the recording reached its maximum file size (\(b) bytes)"
        case .minimumFreeDiskSpaceReached(let b): return "free disk space fell below the limit (\(b) bytes)"
        case .diskFull(let p): return "the disk holding '\(p)' is full; the file holds everything written before"
        case .writeFailed(let e): return "writing the movie failed: \(e)"
        case .encodingFailed(let m): return "encoding a frame failed: \(m)"
        case .alreadyRecording(let p): return "already recording to '\(p)'"
        case .notRunning: return "the movie output is not attached to a running session"
        case .unsupportedFormat(let s): return "cannot record \(s)"
        }
    }
}

/// What a finished recording holds.
public struct MovieRecordingSummary: Sendable, Equatable {
    public var path: String
    /// Video frames in the file (pre-roll included).
    public var frames: Int
    /// Of which from the pre-roll buffer.
    public var preRollFrames: Int
    /// Media duration, seconds.
    public var duration: Double
    public var bytes: UInt64
    /// Frames lost on the way to this output while recording (its ring was full, …).
    public var droppedFrames: Int
    public var reason: MovieRecordingEndReason
    /// AVFoundation's `AVErrorRecordingSuccessfullyFinishedKey`: the file is complete and playable
    /// even though the recording ended with an error (a limit, a full disk).
    public var successfullyFinished: Bool
}

/// Receives the recording events. Called on the movie output's thread.
public protocol MovieRecordingDelegate: AnyObject, Sendable {
    /// The first frame went into the file.
    func movieOutput(_ output: MovieFileOutput, didStartRecordingTo path: String)
    /// The recording ended; `error` is nil for a plain stop. Always called once per started recording.
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?)
}

extension MovieRecordingDelegate {
    public func movieOutput(_ output: MovieFileOutput, didStartRecordingTo path: String) {}
}

/// How the movie output encodes and when it stops on its own.
public struct MovieOutputSettings: Sendable, Equatable {
    /// JPEG quality for frames that must be encoded (1–100).
    public var quality: Int = 85
    /// Chroma subsampling of encoded frames; nil keeps the source's.
    public var subsampling: ChromaSubsampling? = nil
    /// TurboJPEG worker threads (2 spreads encoding over both cores of a small machine).
    public var encoderThreads: Int = 2
    /// Camera MJPEG goes into the file as it is unless a stage changed the pixels.
    public var passThroughMJPEG: Bool = true
    /// Media seconds per fragment (AVFoundation's `movieFragmentInterval`): at most this much is
    /// lost if the process is killed.
    public var fragmentInterval: Double = 0.5
    /// `fdatasync` every fragment (survives power loss too, costs I/O).
    public var syncFragments: Bool = false
    public var maximumDuration: Double? = nil
    public var maximumFileSize: UInt64? = nil
    /// Stop when the disk has less free space than this (AVFoundation's `minFreeDiskSpaceLimit`).
    public var minimumFreeDiskSpace: UInt64? = nil
    /// Seconds of video kept in memory before the trigger and put at the start of each recording (0: off).
    public var preRollSeconds: Double = 0
    /// Memory for the pre-roll buffer.
    public var preRollBytes: Int = 64 << 20
    /// The audio track, when the session has an audio input.
    public var audio: PCMFormat? = nil
    /// Clockwise rotation players apply when they show the movie: 0, 90, 180 or 270 degrees,
    /// written into the video track's matrix (the pixels are stored as captured, as cameras do).
    /// 0 (the default) takes the rotation of the output's video connection in a session
    /// (`CaptureConnection.videoRotationAngle`) when a recording starts, as AVFoundation's movie
    /// output does; any other value is used as it is. The connection's mirroring is not written
    /// (a track matrix that flips is shown mirrored by few players).
    public var rotation: Int = 0
    public init() {}
}

/// Interleaved signed 16-bit PCM.
public struct PCMFormat: Sendable, Equatable, Codable {
    public var sampleRate: Int
    public var channels: Int
    public init(sampleRate: Int, channels: Int) { self.sampleRate = sampleRate; self.channels = channels }
}

/// The movie file output: records the stream to a crash-safe QuickTime movie (fragmented MOV,
/// Motion-JPEG video, optional PCM audio), modelled on AVCaptureMovieFileOutput.
///
/// It is a `FrameConsumer`: the engine gives it its own ring and thread. `startRecording` and
/// `stopRecording` may be called from any thread; the delegate hears `didStart` when the first frame
/// is in the file and `didFinish` exactly once per recording, with the reason and the
/// "successfully finished" flag. Frames are encoded by a pool of TurboJPEG threads and written in
/// capture order with their capture timestamps.
public final class MovieFileOutput: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: `control` (requests from other threads, published state) is guarded by
    // `lock`; everything else is confined to the consumer thread (start/consume/finish).
    public let consumerName: String
    public var ringCapacity: Int { 16 }
    /// A Bayer mosaic is encoded from the engine's full-size decoded view (the encoder takes YUV
    /// and packed RGB as they are, and a camera's JPEGs pass through).
    public func needsPixels(for format: PixelFormat) -> Bool { format.isBayer }
    /// How far the movie may fall behind a live camera (its disk stalling) before frames are
    /// dropped (counted as `DropReason.storageBacklog` in the session's drops, and in the
    /// recording's ``MovieRecordingSummary/droppedFrames``): by default 2 s of the
    /// stream in at most 512 MiB (see `BufferBudget`). The frames waiting are copies in the
    /// movie's own memory, never the camera's buffers; the sound waits in its own 5 s queue.
    /// Read when the session starts.
    public var bufferBudget: BufferBudget? {
        get { lock.withLock { budgetValue } }
        set { lock.withLock { budgetValue = newValue } }
    }
    private var budgetValue: BufferBudget? = .standard
    private let logger: Logger
    private let lock = ConditionLock()

    // Shared with other threads (under `lock`).
    private var settingsValue: MovieOutputSettings
    private var configuration: StreamConfiguration?
    private var running = false
    private var ended = false
    private var pendingStart: (writer: MovieWriter, delegate: (any MovieRecordingDelegate)?)?
    private var stopRequested = false
    private var stopTime: UInt64 = 0
    private var activePath: String?
    private var publishedDuration: Double = 0
    private var publishedBytes: UInt64 = 0
    /// Queued audio blocks from `pendingAudioHead` on (the ones before it were dropped).
    private var pendingAudio: [QueuedAudio] = []
    private var pendingAudioHead = 0
    private var pendingAudioBytes = 0
    /// The session's microphone feeds this output (``prepareAudio(format:)``) and is still running.
    private var sessionAudioLive = false
    /// The longest block of sound the microphone has delivered (its period), ns; under `lock`.
    private var longestAudioBlockNanoseconds: UInt64 = 0
    /// The audio format ``prepareAudio(format:)`` put into the settings (nil when the settings'
    /// own format stands): replaced by the next run's microphone, removed by a run without one.
    private var sessionAudioFormat: PCMFormat?
    /// The session's video connection (its rotation, when the settings give none).
    let connectionBox = LockedBox(WeakConnection(nil))
    /// Frames given through ``appendAudio(_:timestamp:)`` (their positions).
    private var appendedAudioFrames: UInt64 = 0
    private var finishedCount = 0

    // Consumer thread only.
    private var pool: JPEGEncoderPool?
    private var preRoll: PreRollBuffer?
    private var recording: Recording?
    private var lastFrameInterval: UInt64 = 0
    private var lastTimestamp: UInt64 = 0
    /// The last frame's sequence number (nil before the first frame of a run).
    private var lastSequence: UInt64?

    /// Frames in a row whose encoding failed (reset by one that encoded), recording or not.
    private var encodeFailuresInARow = 0

    private final class Recording {
        let writer: MovieWriter
        let delegate: (any MovieRecordingDelegate)?
        var started = false
        var frames = 0
        var preRollFrames = 0
        var dropped = 0
        /// Drops of frames from this sequence number on are this recording's (the frame after the
        /// last one the output had seen when the recording began).
        var firstSequence: UInt64 = 0
        var firstTimestamp: UInt64?
        var lastTimestamp: UInt64 = 0
        /// Puts the audio on the video timeline (made at the first frame: its time is time zero).
        var aligner: AudioTimelineAligner?
        var audioOut: [Int16] = []
        init(writer: MovieWriter, delegate: (any MovieRecordingDelegate)?) { self.writer = writer; self.delegate = delegate }
    }

    public init(name: String = "movie", settings: MovieOutputSettings = MovieOutputSettings(), logger: Logger = Logger(label: "viewfinder.movie")) {
        consumerName = name
        settingsValue = settings
        self.logger = logger
    }

    /// The settings; changes apply to the next recording (encoder settings at the next session start).
    public var settings: MovieOutputSettings {
        get { lock.withLock { settingsValue } }
        set {
            lock.withLock {
                // An audio format the app sets is its own, kept across runs.
                if newValue.audio != settingsValue.audio { sessionAudioFormat = nil }
                settingsValue = newValue
            }
        }
    }

    public var isRecording: Bool { lock.withLock { activePath != nil } }
    /// Media seconds in the current recording's file so far.
    public var recordedDuration: Double { lock.withLock { publishedDuration } }
    public var recordedFileSize: UInt64 { lock.withLock { publishedBytes } }
    /// Where the current recording goes.
    public var outputPath: String? { lock.withLock { activePath } }

    // MARK: Control (any thread)

    /// Starts recording to `path` (a `.mov`). When the output is running the file is created now,
    /// so a bad path or an existing file (without `overwrite`) throws here; before the session starts
    /// (the first time, or again after a stop while the output stays in the session) the request
    /// waits for the stream format (an existing file still throws at once) and a later failure to
    /// create the file comes as `didFinish` with the error. The first frame goes in at the next frame.
    public func startRecording(to path: String, overwrite: Bool = false, delegate: (any MovieRecordingDelegate)?) throws {
        lock.lock()
        defer { lock.unlock() }
        if let p = activePath { throw MovieRecordingError.alreadyRecording(path: p) }
        // After a run: still connected to a session, the recording waits for its next start (as
        // before the first one); on its own, the output has nothing to record.
        let connected = connectionBox.withLock { $0.connection != nil }
        guard !ended || connected else { throw MovieRecordingError.notRunning }
        if !overwrite && FileManager.default.fileExists(atPath: path) { throw SinkError.fileExists(path: path) }
        activePath = path
        stopRequested = false
        publishedDuration = 0
        if let cfg = configuration, !ended {
            do {
                let writer = try makeWriter(path: path, overwrite: overwrite, configuration: cfg)
                pendingStart = (writer, delegate)
                publishedBytes = writer.bytesWritten
            } catch {
                activePath = nil
                throw error
            }
        } else {
            deferredStart = (path, overwrite, delegate)
        }
    }

    private var deferredStart: (path: String, overwrite: Bool, delegate: (any MovieRecordingDelegate)?)?

    /// Called with `lock` held.
    private func makeWriter(path: String, overwrite: Bool, configuration cfg: StreamConfiguration) throws -> MovieWriter {
        var tracks: [MovieTrackDescription] = [.mjpegVideo(width: cfg.format.width, height: cfg.format.height)]
        if let a = settingsValue.audio { tracks.append(.pcmAudio(sampleRate: a.sampleRate, channels: a.channels)) }
        var rotation = settingsValue.rotation
        if rotation == 0, let angle = connectionBox.withLock({ $0.connection?.videoRotationAngle }) { rotation = angle }
        let writer = try MovieWriter(path: path, tracks: tracks, fragmentInterval: settingsValue.fragmentInterval, overwrite: overwrite, rotation: rotation)
        writer.syncEachFragment = settingsValue.syncFragments
        return writer
    }

    /// Ends the current recording after the frames already captured; `didFinish` follows on the
    /// output's thread. A recording still waiting for its session to start is withdrawn: no file is
    /// made and `didFinish` comes on this thread (0 frames, `.stopped`).
    public func stopRecording() {
        let withdrawn = lock.withLock { () -> (path: String, delegate: (any MovieRecordingDelegate)?)? in
            guard activePath != nil else { return nil }
            if let d = deferredStart {
                deferredStart = nil
                activePath = nil
                return (d.path, d.delegate)
            }
            stopRequested = true
            stopTime = monotonicNanoseconds()
            lock.broadcast()
            return nil
        }
        if let (path, delegate) = withdrawn {
            let summary = MovieRecordingSummary(path: path, frames: 0, preRollFrames: 0, duration: 0, bytes: 0, droppedFrames: 0, reason: .stopped, successfullyFinished: false)
            delegate?.movieOutput(self, didFinishRecordingTo: path, summary: summary, error: nil)
        }
    }

    /// Adds PCM audio (interleaved 16-bit, ``MovieOutputSettings/audio`` format) captured at
    /// `timestamp` (same clock as the video). Thread-safe; at most 5 s are queued.
    public func appendAudio(_ pcm: UnsafeRawBufferPointer, timestamp: Timestamp) {
        lock.withLock {
            guard activePath != nil, let a = settingsValue.audio else { return }
            let frames = UInt64(pcm.count / (2 * a.channels))
            queueAudio(QueuedAudio(bytes: Array(pcm), format: .s16, position: appendedAudioFrames, timestamp: timestamp.nanoseconds, discontinuity: false))
            appendedAudioFrames += frames
        }
    }

    // MARK: FrameConsumer (the output's thread)

    public func start(configuration cfg: StreamConfiguration) throws {
        let s = settings
        guard (1...100).contains(s.quality) else { throw MovieRecordingError.encodingFailed("quality \(s.quality) is outside 1...100") }
        if cfg.format.pixelFormat == .mjpeg && !s.passThroughMJPEG {
            throw MovieRecordingError.unsupportedFormat("MJPEG input without pass-through")
        }
        let expected = cfg.format.pixelFormat == .mjpeg ? cfg.format.maxByteCount : cfg.format.width * cfg.format.height
        pool = JPEGEncoderPool(threads: max(1, s.encoderThreads), quality: s.quality, subsampling: s.subsampling, expectedBytes: expected)
        if s.preRollSeconds > 0 { preRoll = PreRollBuffer(seconds: s.preRollSeconds, capacityBytes: s.preRollBytes) }
        lastSequence = nil
        let failed = lock.withLock { () -> (String, (any MovieRecordingDelegate)?, MovieRecordingError)? in
            configuration = cfg; running = true; ended = false
            guard let d = deferredStart else { return nil }
            deferredStart = nil
            do {
                pendingStart = (try makeWriter(path: d.path, overwrite: d.overwrite, configuration: cfg), d.delegate)
                return nil
            } catch {
                activePath = nil
                return (d.path, d.delegate, classify(error))
            }
        }
        if let (path, delegate, error) = failed {
            let summary = MovieRecordingSummary(path: path, frames: 0, preRollFrames: 0, duration: 0, bytes: 0, droppedFrames: 0, reason: .failed, successfullyFinished: false)
            delegate?.movieOutput(self, didFinishRecordingTo: path, summary: summary, error: error)
        }
    }

    /// Told of every frame that did not reach the movie (the camera's gaps, a late stage, a full
    /// ring, the storage budget), also of drops after the last frame, which no later frame's
    /// `droppedBefore` could carry: the recording's ``MovieRecordingSummary/droppedFrames``.
    public var wantsDropNotices: Bool { true }
    public func didDrop(sequence: UInt64, count: UInt64, reason: DropReason) {
        guard let r = recording else { return }
        let end = sequence &+ count
        guard end > r.firstSequence else { return }
        r.dropped += Int(end - max(sequence, r.firstSequence))
    }

    public func consume(_ frame: Frame) {
        takeRequests()
        if frame.timestamp.nanoseconds > lastTimestamp && lastTimestamp > 0 { lastFrameInterval = frame.timestamp.nanoseconds - lastTimestamp }
        lastTimestamp = frame.timestamp.nanoseconds
        lastSequence = frame.sequence
        if let stopAt = stopRequestTime() {
            // Frames captured before the stop call still go in; anything later ends the recording.
            let t = frame.timestamp
            let before = t.clock == .monotonic && t.nanoseconds <= stopAt && stopAt &- t.nanoseconds < 2_000_000_000
            if !before { drainAndFinish(reason: .stopped, error: nil) }
        }
        guard recording != nil || preRoll != nil, let pool else { return }
        while pool.inFlight >= pool.capacity, let r = pool.next(wait: true) { deliver(r) }
        // MJPEG frames are JPEG images already: they go in as the camera made them unless a stage
        // changed the pixels, which it did in their decoded view (that view is then encoded).
        pool.submit(frame, passthrough: frame.format.pixelFormat == .mjpeg && !frame.pixelsModified)
        while let r = pool.next(wait: false) { deliver(r) }
    }

    public func finish(error: (any Error)?) {
        takeRequests()
        if recording != nil { drainAndFinish(reason: .sessionEnded, error: nil) }
        pool?.shutdown()
        pool = nil
        lock.withLock { running = false; ended = true; lock.broadcast() }
    }

    // MARK: Internals

    private func stopRequestTime() -> UInt64? { lock.withLock { stopRequested ? stopTime : nil } }

    private func takeRequests() {
        let start = lock.withLock { () -> (MovieWriter, (any MovieRecordingDelegate)?)? in
            defer { pendingStart = nil }
            return pendingStart
        }
        if let (w, d) = start {
            // Frames still being encoded belong to the time before the trigger: into the pre-roll.
            if let pool { while let r = pool.next(wait: true) { deliver(r) } }
            recording = Recording(writer: w, delegate: d)
            encodeFailuresInARow = 0   // the recording's first 30 frames are counted from here
            recording?.firstSequence = lastSequence.map { $0 &+ 1 } ?? 0
            // The pre-roll goes first, with its own timestamps.
            if let pr = preRoll, let r = recording {
                var failed: (any Error)?
                pr.drain { bytes, ts in
                    guard failed == nil else { return }
                    do { try append(bytes, timestamp: ts, to: r); r.preRollFrames += 1 } catch { failed = error }
                }
                if let failed { endRecording(reason: .failed, error: classify(failed)) }
            }
        }
    }

    private func deliver(_ r: JPEGEncoderPool.Result) {
        if let e = r.error {
            encodeFailuresInARow += 1
            // Said once, then every hundredth frame (a stream no frame of which encodes logged a
            // line per frame, thousands of them).
            if encodeFailuresInARow == 1 || encodeFailuresInARow % 100 == 0 {
                logger.error("movie: encoding frame \(r.sequence) failed: \(e) (\(encodeFailuresInARow) in a row)")
            }
            guard let rec = recording else { return }
            rec.dropped += 1
            // A recording none of whose first 30 frames encodes will not: it ends, with the
            // error, instead of running on (its duration counts the movie's time, which never grows).
            if rec.frames == 0 && encodeFailuresInARow >= 30 {
                endRecording(reason: .failed, error: .encodingFailed("\(e) (the recording's first 30 frames)"))
            }
            return
        }
        encodeFailuresInARow = 0
        if let rec = recording {
            do {
                if try checkLimits(rec, adding: r.bytes.count, timestamp: r.timestamp) { return }
                try append(r.bytes, timestamp: r.timestamp, to: rec)
            } catch {
                endRecording(reason: .failed, error: classify(error))
            }
        } else if let pr = preRoll {
            pr.append(r.bytes, timestamp: r.timestamp)
        }
    }

    private func append(_ bytes: UnsafeRawBufferPointer, timestamp: UInt64, to rec: Recording) throws {
        try rec.writer.appendVideo(bytes, timestampNanoseconds: timestamp)
        if rec.firstTimestamp == nil { rec.firstTimestamp = timestamp }
        rec.lastTimestamp = timestamp
        rec.frames += 1
        if !rec.started {
            rec.started = true
            rec.delegate?.movieOutput(self, didStartRecordingTo: rec.writer.path)
        }
        // Audio captured up to this frame's time, placed by the clock.
        try writeAudio(rec, upTo: timestamp)
        let d = rec.writer.durationAppended, b = rec.writer.bytesWritten
        lock.withLock { publishedDuration = d; publishedBytes = b }
    }

    /// Ends the recording (and returns true) when adding this frame would pass a limit.
    private func checkLimits(_ rec: Recording, adding bytes: Int, timestamp: UInt64) throws -> Bool {
        let s = settings
        // A frame goes in when at least half of its (nominal) display time fits in the limit.
        if let maxD = s.maximumDuration, let first = rec.firstTimestamp, timestamp > first,
           Double(timestamp - first) / 1e9 >= maxD - Double(lastFrameInterval) / 2e9 {
            endRecording(reason: .maximumDurationReached, error: .maximumDurationReached(seconds: maxD), lastFrameDuration: UInt64(maxD * 1e9) &- (rec.lastTimestamp &- first))
            return true
        }
        if let maxS = s.maximumFileSize, rec.writer.bytesWritten + UInt64(rec.writer.bufferedBytes) + UInt64(bytes) + 1024 > maxS {
            endRecording(reason: .maximumFileSizeReached, error: .maximumFileSizeReached(bytes: maxS))
            return true
        }
        if let minFree = s.minimumFreeDiskSpace {
            // statvfs costs about a microsecond: checked on every frame, against what the next
            // fragment will need.
            if let free = freeDiskSpace(at: rec.writer.path), free < minFree + UInt64(rec.writer.bufferedBytes + bytes + 4096) {
                endRecording(reason: .diskSpaceLow, error: .minimumFreeDiskSpaceReached(bytes: minFree))
                return true
            }
        }
        return false
    }


    private func classify(_ error: any Error) -> MovieRecordingError {
        if let e = error as? SinkError {
            if case .diskFull(let p) = e { return .diskFull(path: p) }
            return .writeFailed(e)
        }
        if let e = error as? MovieRecordingError { return e }
        return .encodingFailed("\(error)")
    }

    private func drainAndFinish(reason: MovieRecordingEndReason, error: MovieRecordingError?) {
        if let pool {
            while let r = pool.next(wait: true) {
                if recording == nil { continue }
                deliver(r)
            }
        }
        if recording != nil { endRecording(reason: reason, error: error) }
    }

    private func endRecording(reason: MovieRecordingEndReason, error: MovieRecordingError?, lastFrameDuration: UInt64? = nil) {
        guard let rec = recording else { return }
        recording = nil
        var finalError = error
        var finalReason = reason
        do {
            let last = lastFrameDuration.flatMap { $0 > 0 && $0 < 10_000_000_000 ? $0 : nil } ?? (lastFrameInterval > 0 ? lastFrameInterval : nil)
            if error == nil || reason == .maximumDurationReached || reason == .maximumFileSizeReached {
                try completeAudio(rec, videoEnd: rec.lastTimestamp &+ (last ?? 0))
            }
            if case .diskFull = error ?? .notRunning { rec.writer.finishAfterError() }
            else if case .writeFailed = error ?? .notRunning { rec.writer.finishAfterError() }
            else { try rec.writer.finish(lastFrameDurationNanoseconds: last) }
        } catch {
            let e = classify(error)
            if finalError == nil { finalError = e }
            if case .diskFull = e { finalReason = .diskFull } else { finalReason = .failed }
            rec.writer.finishAfterError()
        }
        if case .diskFull = finalError ?? .notRunning { finalReason = .diskFull }
        // A file with frames in complete fragments plays; without frames there is nothing to keep.
        let ok = rec.writer.videoSamplesWritten > 0
        let summary = MovieRecordingSummary(path: rec.writer.path, frames: Int(rec.writer.videoSamplesWritten), preRollFrames: rec.preRollFrames,
                                            duration: rec.writer.durationWritten, bytes: rec.writer.bytesWritten, droppedFrames: rec.dropped,
                                            reason: finalReason, successfullyFinished: ok)
        logger.debug("movie: \(rec.writer.path): \(summary.frames) frames, \(summary.duration) s, \(summary.bytes) bytes, ended: \(finalReason.rawValue)")
        lock.withLock {
            activePath = nil
            stopRequested = false
            pendingAudio.removeAll(); pendingAudioHead = 0; pendingAudioBytes = 0
            finishedCount += 1
            lock.broadcast()
        }
        rec.delegate?.movieOutput(self, didFinishRecordingTo: rec.writer.path, summary: summary, error: finalError)
    }

    // MARK: Sound (the session's microphone, or `appendAudio`)

    /// A block of captured audio waiting for the movie's thread.
    private struct QueuedAudio {
        var bytes: [UInt8]
        var format: AudioSampleFormat
        var position: UInt64
        var timestamp: UInt64
        var discontinuity: Bool
    }

    /// Blocks that did not fit in the 5 s queue (the movie's thread stalled).
    private var droppedAudioBlocks = 0

    /// Called with `lock` held: queues a block, dropping the oldest beyond 5 s of audio (the
    /// pre-roll's length + 2 s when that is longer). Dropping
    /// moves a head index (compacted now and then), so a stalled movie thread with a full queue
    /// costs the microphone's thread O(1) a block under the lock, not a shift of the whole queue.
    private func queueAudio(_ q: QueuedAudio) {
        guard let a = settingsValue.audio else { return }
        let seconds = max(5, Int(settingsValue.preRollSeconds.rounded(.up)) + 2)
        let limit = a.sampleRate * a.channels * 4 * seconds
        while pendingAudioBytes + q.bytes.count > limit, pendingAudioHead < pendingAudio.count {
            pendingAudioBytes -= pendingAudio[pendingAudioHead].bytes.count
            pendingAudio[pendingAudioHead].bytes = []
            pendingAudioHead += 1
            droppedAudioBlocks += 1
        }
        if pendingAudioHead >= 64 && pendingAudioHead * 2 >= pendingAudio.count {
            pendingAudio.removeFirst(pendingAudioHead)
            pendingAudioHead = 0
        }
        pendingAudio.append(q)
        pendingAudioBytes += q.bytes.count
    }

    /// Feeds the queued audio to the recording's aligner and writes the track up to `time`.
    private func writeAudio(_ rec: Recording, upTo time: UInt64) throws {
        let (audio, head) = lock.withLock { () -> ([QueuedAudio], Int) in
            var taken: [QueuedAudio] = []
            swap(&taken, &pendingAudio)
            defer { pendingAudioHead = 0; pendingAudioBytes = 0 }
            return (taken, pendingAudioHead)
        }
        guard rec.writer.tracks.count > 1, case .pcmAudio(let rate, let channels) = rec.writer.tracks[1], let origin = rec.firstTimestamp else { return }
        if rec.aligner == nil { rec.aligner = AudioTimelineAligner(sampleRate: rate, channels: channels, origin: origin) }
        for a in audio[head...] {
            a.bytes.withUnsafeBytes { rec.aligner!.add($0, format: a.format, position: a.position, timestampNanoseconds: a.timestamp, discontinuity: a.discontinuity) }
        }
        try rec.writer.appendAudio(from: &rec.aligner!, upTo: time, buffer: &rec.audioOut)
    }

    /// At the end of a recording: waits for the audio of the last frame's time while the
    /// microphone is live — at most 300 ms more than the longest period it has delivered (the
    /// sound of the video's end comes with the period that holds it: with periods of 0.9 s,
    /// waiting 300 ms lost up to 0.56 s of the end) — and writes the track up to the end of the
    /// video.
    private func completeAudio(_ rec: Recording, videoEnd: UInt64) throws {
        guard rec.writer.tracks.count > 1, rec.firstTimestamp != nil else { return }
        let deadline = monotonicNanoseconds() + 300_000_000 + lock.withLock { longestAudioBlockNanoseconds }
        while lock.withLock({ sessionAudioLive }) && monotonicNanoseconds() < deadline {
            try writeAudio(rec, upTo: videoEnd)
            if let a = rec.aligner, a.inputEndNanoseconds >= Double(videoEnd) { break }
            usleep(5000)
        }
        try writeAudio(rec, upTo: videoEnd)
        if let a = rec.aligner {
            logger.debug("movie: audio \(a.emitted) frames, \(a.dropped) dropped and \(a.repeated) repeated for sync, \(a.silenceInserted) of silence, clock \(a.clock.ppm) ppm, max error \(a.maximumError * 1000) ms")
            lock.withLock { lastAudioAlignment = MovieAudioAlignment(aligner: a) }
        }
    }

    private var lastAudioAlignment: MovieAudioAlignment?

    /// How the last recording's audio was aligned with its video.
    public var audioAlignment: MovieAudioAlignment? { lock.withLock { lastAudioAlignment } }
}

/// How a recording's audio was kept on the video's timeline.
public struct MovieAudioAlignment: Sendable, Equatable, Codable {
    /// Audio frames in the track.
    public var frames: UInt64
    /// Single frames dropped (card fast) and repeated (card slow) at quiet points.
    public var dropped: UInt64
    public var repeated: UInt64
    /// Frames of silence for audio that was lost or had not started.
    public var silence: UInt64
    /// The card's clock against the monotonic clock at the end, ppm.
    public var measuredPPM: Double
    /// The largest error between a written sample and where the clock put it, seconds.
    public var maximumError: Double
    /// The movie's time zero (the first frame's capture time, monotonic ns): track sample `k`
    /// belongs at `origin + k / rate`.
    public var origin: UInt64

    init(aligner a: AudioTimelineAligner) {
        origin = a.origin
        frames = a.emitted; dropped = a.dropped; repeated = a.repeated; silence = a.silenceInserted
        measuredPPM = a.clock.ppm; maximumError = a.maximumError
    }
}

extension MovieFileOutput: AudioConsumer {
    /// The session's microphone: the movie gets an audio track in its format (as 16-bit PCM)
    /// unless ``MovieOutputSettings/audio`` was set. Each run of the session brings its own
    /// microphone's format (an output used again after the microphone changed records the new
    /// one), and a run without a microphone records no audio track.
    public func prepareAudio(format: AudioStreamFormat) {
        lock.withLock {
            if settingsValue.audio == nil || settingsValue.audio == sessionAudioFormat {
                let f = PCMFormat(sampleRate: format.sampleRate, channels: format.channels)
                settingsValue.audio = f
                sessionAudioFormat = f
            }
            sessionAudioLive = true
        }
    }

    public func consumeAudio(_ buffer: AudioBuffer) {
        lock.withLock {
            // With a pre-roll the sound is kept before the recording starts too (the queue holds
            // the pre-roll's length and a little more), so the pre-roll's video has its sound.
            guard activePath != nil || settingsValue.preRollSeconds > 0, let a = settingsValue.audio,
                  a.sampleRate == buffer.format.sampleRate, a.channels == buffer.format.channels else { return }
            longestAudioBlockNanoseconds = max(longestAudioBlockNanoseconds, UInt64(Double(buffer.frames) * 1e9 / Double(max(1, buffer.format.sampleRate))))
            queueAudio(QueuedAudio(bytes: Array(buffer.data), format: buffer.format.sampleFormat, position: buffer.period.position,
                                   timestamp: buffer.period.timestamp.nanoseconds, discontinuity: buffer.period.discontinuity))
        }
    }

    public func finishAudio(error: (any Error)?) {
        lock.withLock {
            sessionAudioLive = false
            // The run's microphone is gone: the next run brings its own, or none.
            if let f = sessionAudioFormat, settingsValue.audio == f { settingsValue.audio = nil }
            sessionAudioFormat = nil
        }
    }
}
