import Dispatch
import Foundation
import Synchronization
import Viewfinder

/// Why an ``AssetWriter`` failed or refused a call.
public enum AssetWriterError: Error, Equatable, CustomStringConvertible {
    /// The call is not allowed in the writer's current status (e.g. adding an input after
    /// `startWriting`, appending before `startSession`).
    case invalidStatus(operation: String, status: AssetWriter.Status)
    /// A second input of the same media type, or an input already added elsewhere.
    case cannotAddInput(String)
    /// A frame or sound block that does not match its input's settings.
    case formatMismatch(String)
    /// Writing the file failed (the underlying sink error's description).
    case writeFailed(String)
    /// The path names a kind of file the writer does not make: it writes QuickTime movies
    /// (`.mov`, `.qt`), as `AVAssetWriter` with `fileType: .mov`.
    case unsupportedFileType(path: String)

    public var description: String {
        switch self {
        case .invalidStatus(let op, let s): return "\(op) is not allowed while the writer is \(s)"
        case .cannotAddInput(let why): return "cannot add input: \(why)"
        case .formatMismatch(let why): return "format mismatch: \(why)"
        case .writeFailed(let why): return "writing failed: \(why)"
        case .unsupportedFileType(let path):
            return "'\(path)': the writer makes QuickTime movies, name the file .mov (or .qt)"
        }
    }
}

/// One track of an ``AssetWriter`` (AVFoundation's `AVAssetWriterInput`): video frames, encoded
/// inside as Motion-JPEG, or sound as 16-bit PCM.
///
/// Appends are queued to the writer's thread, which encodes and writes them in the order they
/// were appended across all inputs; ``isReadyForMoreMediaData`` is false while this input has
/// ``maximumPendingSamples`` waiting, so a producer that respects it never builds a backlog.
public final class AssetWriterInput: @unchecked Sendable {
    // @unchecked Sendable: mutable state behind `state`; the writer reference is set once, before
    // writing starts.

    /// What an input takes.
    public enum Settings: Sendable, Equatable {
        /// Frames of this size (any pixel format the package reads; MJPEG frames pass through
        /// unchanged), encoded as JPEG at `quality`.
        case video(width: Int, height: Int, quality: Int = 85)
        /// Interleaved sound at this rate and channel count (16-bit, 32-bit or float samples are
        /// converted to 16-bit).
        case audio(sampleRate: Int, channels: Int)
    }

    public let settings: Settings
    /// Whether the samples come from a live source (AVFoundation's `expectsMediaDataInRealTime`):
    /// such an input is ready while it has fewer than twice ``maximumPendingSamples`` queued.
    public var expectsMediaDataInRealTime: Bool {
        get { state.withLock { $0.realTime } }
        set { state.withLock { $0.realTime = newValue } }
    }
    /// Queued samples at which ``isReadyForMoreMediaData`` turns false.
    public let maximumPendingSamples: Int

    struct State {
        var realTime = false
        var pending = 0
        var finished = false
        var appended: UInt64 = 0
    }
    let state = LockedBox(State())
    private let readiness = ConditionLock()
    weak var writer: AssetWriter?

    public init(settings: Settings, maximumPendingSamples: Int? = nil) {
        self.settings = settings
        if case .video = settings { self.maximumPendingSamples = max(1, maximumPendingSamples ?? 4) } else { self.maximumPendingSamples = max(1, maximumPendingSamples ?? 32) }
    }

    public var mediaType: MediaType { if case .video = settings { return .video } else { return .audio } }

    /// Whether an append now would be taken without building a backlog.
    public var isReadyForMoreMediaData: Bool {
        guard let writer, writer.status == .writing else { return false }
        return state.withLock { s in !s.finished && s.pending < (s.realTime ? 2 * maximumPendingSamples : maximumPendingSamples) }
    }

    /// Samples accepted so far.
    public var appendedSamples: UInt64 { state.withLock { $0.appended } }

    /// Appends a video frame (kept alive by the sample buffer until it is written). Returns false
    /// when the writer is not writing (see its ``AssetWriter/status`` and ``AssetWriter/error``),
    /// the input is finished, or the frame is before the session's start or after its end.
    @discardableResult
    public func append(_ sampleBuffer: SampleBuffer) -> Bool {
        guard case .video(let w, let h, _) = settings else {
            writer?.fail(AssetWriterError.formatMismatch("a video frame appended to an audio input")); return false
        }
        let f = sampleBuffer.format
        guard f.width == w, f.height == h else {
            writer?.fail(AssetWriterError.formatMismatch("frame \(f.width)x\(f.height), input expects \(w)x\(h)")); return false
        }
        return enqueue(timestamp: sampleBuffer.timestamp.nanoseconds) { writer in try writer.writeVideo(sampleBuffer, input: self) }
    }

    /// Appends one block of interleaved sound captured at `timestamp` (its first sample). The
    /// samples are copied.
    @discardableResult
    public func append(pcm: UnsafeRawBufferPointer, format: AudioStreamFormat, timestamp: Timestamp) -> Bool {
        guard case .audio(let rate, let channels) = settings else {
            writer?.fail(AssetWriterError.formatMismatch("sound appended to a video input")); return false
        }
        guard format.sampleRate == rate, format.channels == channels else {
            writer?.fail(AssetWriterError.formatMismatch("sound \(format), input expects \(rate) Hz \(channels) ch")); return false
        }
        guard pcm.count % format.bytesPerFrame == 0 else {
            writer?.fail(AssetWriterError.formatMismatch("\(pcm.count) bytes is not a whole number of \(format) frames")); return false
        }
        var s16: [Int16] = []
        s16.reserveCapacity(pcm.count / format.sampleFormat.bytesPerSample)
        AudioSamples.appendS16(pcm, format: format.sampleFormat, to: &s16)
        let samples = s16
        return enqueue(timestamp: timestamp.nanoseconds) { writer in try writer.writeAudio(samples, timestamp: timestamp.nanoseconds) }
    }

    /// Appends a period of sound as an audio source delivers it (an `AudioBuffer` lent to a
    /// custom `AudioSource` consumer; the samples are copied).
    @discardableResult
    public func append(_ buffer: AudioBuffer) -> Bool {
        append(pcm: buffer.data, format: buffer.format, timestamp: buffer.period.timestamp)
    }

    /// Appends what an `AudioDataOutput` delivers — to its delegate's
    /// `audioDataOutput(_:didOutput:)` or through `buffers()` (AVFoundation's `append(_:)` of a
    /// sample buffer from `AVCaptureAudioDataOutput`).
    @discardableResult
    public func append(_ buffer: AudioSampleBuffer) -> Bool {
        buffer.data.withUnsafeBytes { append(pcm: $0, format: buffer.format, timestamp: buffer.timestamp) }
    }

    /// No more samples will be appended to this input.
    public func markAsFinished() {
        state.withLock { $0.finished = true }
        signalReadiness()
    }

    /// Calls `block` on `queue` whenever the input is ready for more, until it is marked finished
    /// or the writer stops writing (AVFoundation's `requestMediaDataWhenReady(on:using:)`). The
    /// block should append while ``isReadyForMoreMediaData`` holds, then return.
    public func requestMediaDataWhenReady(on queue: DispatchQueue, using block: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            while true {
                readiness.lock()
                while !isReadyForMoreMediaData && !isDone { readiness.wait(untilMonotonicNanoseconds: monotonicNanoseconds() &+ 50_000_000) }
                readiness.unlock()
                if isDone { return }
                block()
            }
        }
    }

    private var isDone: Bool {
        let finished = state.withLock { $0.finished }
        guard let writer else { return true }
        return finished || writer.status != .writing
    }

    func signalReadiness() { readiness.withLock { readiness.broadcast() } }

    private func enqueue(timestamp: UInt64, _ work: @escaping @Sendable (AssetWriter) throws -> Void) -> Bool {
        guard let writer else { return false }
        guard writer.status == .writing else { return false }
        guard let start = writer.sessionStart else {
            writer.fail(AssetWriterError.invalidStatus(operation: "append before startSession(atSourceTime:)", status: writer.status)); return false
        }
        if timestamp < start && mediaType == .video { return false }
        if let end = writer.sessionEnd, timestamp >= end { return false }
        let accepted = state.withLock { s -> Bool in
            guard !s.finished else { return false }
            s.pending += 1
            s.appended += 1
            return true
        }
        guard accepted else { return false }
        writer.submit { w in
            defer {
                self.state.withLock { $0.pending -= 1 }
                self.signalReadiness()
            }
            guard w.status == .writing else { return }  // failed or cancelled meanwhile
            try work(w)
        }
        return true
    }
}

/// Writes processed frames and sound to a QuickTime movie (AVFoundation's `AVAssetWriter`):
/// Motion-JPEG video and 16-bit PCM sound in the same crash-safe fragmented MOV as
/// `MovieFileOutput`.
///
/// ```swift
/// let writer = AssetWriter(path: "out.mov")
/// let video = AssetWriterInput(settings: .video(width: 1280, height: 720))
/// try writer.add(video)
/// try writer.startWriting()
/// writer.startSession(atSourceTime: firstFrame.timestamp)
/// if video.isReadyForMoreMediaData { video.append(sampleBuffer) }
/// video.markAsFinished()
/// try writer.finishWriting()
/// ```
///
/// Frames are encoded on the writer's own thread (one serial queue), in append order; a write
/// error (a full disk) fails the writer: ``status`` becomes `.failed`, ``error`` says why, and what
/// was written before stays playable.
public final class AssetWriter: @unchecked Sendable {
    // @unchecked Sendable: status and session bounds behind `state`; the movie writer, encoder and
    // converter are used on `queue` only.

    public enum Status: String, Sendable, Equatable { case unknown, writing, completed, failed, cancelled }

    public let path: String
    public let overwrite: Bool
    /// Clockwise rotation written in the video track's matrix (0, 90, 180, 270).
    public var rotation: Int = 0

    private struct State {
        var status: Status = .unknown
        var error: (any Error)?
        var inputs: [AssetWriterInput] = []
        var sessionStart: UInt64?
        var sessionEnd: UInt64?
        /// `startWriting()` made the file (it is this writer's to remove).
        var madeFile = false
    }
    private let state = LockedBox(State())
    private let queue = DispatchQueue(label: "viewfinder.asset-writer")
    // Used on `queue` only.
    private var movie: MovieWriter?
    private var encoder: JPEGEncoder?
    private var converter: FrameConverter?
    /// The demosaiced picture of a Bayer frame, reused from frame to frame.
    private var demosaiced: Frame?
    private var lastVideoNanoseconds: UInt64?

    /// - Parameters:
    ///   - path: the movie to write.
    ///   - overwrite: replace an existing file (otherwise `startWriting` fails with `fileExists`).
    public init(path: String, overwrite: Bool = false) {
        self.path = path
        self.overwrite = overwrite
    }

    public var status: Status { state.withLock { $0.status } }
    /// Why the writer failed.
    public var error: (any Error)? { state.withLock { $0.error } }
    public var inputs: [AssetWriterInput] { state.withLock { $0.inputs } }
    var sessionStart: UInt64? { state.withLock { $0.sessionStart } }
    var sessionEnd: UInt64? { state.withLock { $0.sessionEnd } }

    /// Whether `input` can be added: before writing starts, one input per media type.
    public func canAdd(_ input: AssetWriterInput) -> Bool {
        state.withLock { s in s.status == .unknown && input.writer == nil && !s.inputs.contains { $0.mediaType == input.mediaType } }
    }

    public func add(_ input: AssetWriterInput) throws(AssetWriterError) {
        let problem: AssetWriterError? = state.withLock { s in
            if s.status != .unknown { return .invalidStatus(operation: "add(_:)", status: s.status) }
            if input.writer != nil { return .cannotAddInput("the input belongs to a writer already") }
            if s.inputs.contains(where: { $0.mediaType == input.mediaType }) { return .cannotAddInput("the writer has a \(input.mediaType.rawValue) input already") }
            return nil
        }
        if let problem { throw problem }
        if case .video(let w, let h, let q) = input.settings {
            guard w > 0, h > 0, w % 2 == 0, (1...100).contains(q) else { throw .cannotAddInput("video \(w)x\(h) quality \(q): sizes must be positive and even, quality 1...100") }
        }
        if case .audio(let rate, let ch) = input.settings {
            guard (8000...384_000).contains(rate), (1...8).contains(ch) else { throw .cannotAddInput("audio \(rate) Hz \(ch) ch is outside 8000...384000 Hz, 1...8 channels") }
        }
        input.writer = self
        state.withLock { $0.inputs.append(input) }
    }

    /// Creates the file and begins accepting samples.
    public func startWriting() throws {
        let inputs = try state.withLock { s throws(AssetWriterError) -> [AssetWriterInput] in
            guard s.status == .unknown else { throw .invalidStatus(operation: "startWriting()", status: s.status) }
            guard !s.inputs.isEmpty else { throw .cannotAddInput("a writer needs at least one input") }
            // Not an .mp4 (or any other kind) under a QuickTime movie's bytes.
            let ext = PathName.pathExtension(path).lowercased()
            guard ext == "mov" || ext == "qt" else { throw .unsupportedFileType(path: path) }
            return s.inputs
        }
        let video = inputs.first { $0.mediaType == .video }
        let audio = inputs.first { $0.mediaType == .audio }
        var tracks: [MovieTrackDescription] = []
        if let video, case .video(let w, let h, _) = video.settings { tracks.append(.mjpegVideo(width: w, height: h)) }
        if let audio, case .audio(let r, let c) = audio.settings { tracks.append(.pcmAudio(sampleRate: r, channels: c)) }
        do {
            let m = try MovieWriter(path: path, tracks: tracks, overwrite: overwrite, rotation: rotation)
            let e = video == nil ? nil : try JPEGEncoder()
            queue.sync { movie = m; encoder = e }
        } catch {
            fail(error)
            throw error
        }
        state.withLock { $0.madeFile = true; if $0.status == .unknown { $0.status = .writing } }
    }

    /// Time zero of the movie: samples are placed relative to it, video frames before it are not
    /// written and sound before it is trimmed.
    public func startSession(atSourceTime time: Timestamp) {
        state.withLock { if $0.sessionStart == nil { $0.sessionStart = time.nanoseconds } }
        queue.async { self.movie?.setOrigin(nanoseconds: time.nanoseconds) }
    }

    /// The end of the movie: samples at or after it are not written, and the last frame lasts
    /// until it.
    public func endSession(atSourceTime time: Timestamp) {
        state.withLock { $0.sessionEnd = time.nanoseconds }
    }

    /// Writes what is queued and completes the file. Throws the error that failed the writer.
    public func finishWriting() throws {
        let st = status
        guard st == .writing else {
            if st == .failed, let e = error { throw e }
            throw AssetWriterError.invalidStatus(operation: "finishWriting()", status: st)
        }
        for i in inputs { i.markAsFinished() }
        let end = sessionEnd
        let result: Result<Void, any Error> = queue.sync {
            guard let movie else { return .success(()) }
            do {
                let last = end.flatMap { e in lastVideoNanoseconds.map { e > $0 ? e - $0 : 1 } }
                try movie.finish(lastFrameDurationNanoseconds: last)
                return .success(())
            } catch {
                movie.finishAfterError()
                return .failure(error)
            }
        }
        switch result {
        case .success: state.withLock { if $0.status == .writing { $0.status = .completed } }
        case .failure(let e): fail(e)
        }
        if status == .failed { throw error ?? AssetWriterError.writeFailed("unknown") }
    }

    /// ``finishWriting()`` off the caller's thread; `handler` runs when the file is complete (or
    /// the writer failed: check ``status``).
    public func finishWriting(completionHandler handler: @escaping @Sendable () -> Void) {
        DispatchQueue.global().async { _ = try? self.finishWriting(); handler() }
    }

    /// Stops writing and removes the file — also after the writer failed (a sample appended
    /// before ``startSession(atSourceTime:)``, a frame of the wrong size), which leaves its
    /// status `.failed` and its ``error``. After ``finishWriting()`` completed it does nothing.
    public func cancelWriting() {
        let (was, made) = state.withLock { s -> (Status, Bool) in
            let w = s.status
            if w == .writing || w == .unknown { s.status = .cancelled }
            // Removed once: a second cancel (after a failure the status stays) must not remove
            // a file someone wrote at the path since.
            defer { s.madeFile = false }
            return (w, s.madeFile)
        }
        guard was == .writing || was == .unknown || was == .failed else { return }
        for i in inputs { i.markAsFinished() }
        queue.sync { movie = nil }
        // Only a file this writer made, and only a regular one: never a file that was there
        // before `startWriting`, a device node or a folder.
        var st = stat()
        if made, lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG { unlink(path) }
    }

    func fail(_ error: any Error) {
        let changed = state.withLock { s -> Bool in
            guard s.status == .writing || s.status == .unknown else { return false }
            s.status = .failed
            s.error = error
            return true
        }
        if changed { for i in inputs { i.signalReadiness() } }
    }

    func submit(_ work: @escaping @Sendable (AssetWriter) throws -> Void) {
        queue.async {
            do { try work(self) } catch { self.fail(error); self.movie?.finishAfterError() }
        }
    }

    // MARK: - On the writer's queue

    func writeVideo(_ sample: SampleBuffer, input: AssetWriterInput) throws {
        guard let movie, case .video(_, _, let quality) = input.settings else { return }
        let frame = sample.frame
        let ts = sample.timestamp.nanoseconds
        if frame.format.pixelFormat == .mjpeg {
            let jpeg = try sample.withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: nil) }
            try jpeg.withUnsafeBytes { try movie.appendVideo($0, timestampNanoseconds: ts) }
        } else {
            guard let encoder else { return }
            var source = frame
            if frame.format.pixelFormat.isBayer {
                // A mosaic is demosaiced first (the encoder takes YUV and packed RGB).
                if converter == nil { converter = try FrameConverter(target: .i420) }
                let need = converter!.outputFormat(for: frame.format).maxByteCount
                if demosaiced == nil || demosaiced!.capacity < need { demosaiced = Frame(capacity: need, format: frame.format) }
                try converter!.convert(frame, into: demosaiced!)
                source = demosaiced!
            }
            let jpeg = try encoder.encode(source, quality: quality)
            try movie.appendVideo(jpeg, timestampNanoseconds: ts)
        }
        lastVideoNanoseconds = ts
    }

    func writeAudio(_ s16: [Int16], timestamp: UInt64) throws {
        guard let movie else { return }
        try s16.withUnsafeBytes { try movie.appendAudio($0, timestampNanoseconds: timestamp) }
    }
}
