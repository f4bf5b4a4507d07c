import Foundation
import Logging
import Synchronization
import Viewfinder

/// Writes every frame that reaches it to a raw dump (see ``RawDumpFormat``): the pixels exactly as
/// they arrive (after the stages) and their metadata. A `FrameConsumer` with its own thread.
///
/// A write error (a full disk) ends the dump: later frames are counted as dropped and the error is
/// kept in ``error``; what was written stays readable.
public final class RawDumpOutput: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: `writer` is read and written under `writeLock` (the frame thread and
    // the audio delivery thread both write through it); the published counters and the error are
    // behind `state`; `behind` is touched by the frame thread alone (`willConsume`, `consume`,
    // `start`).
    public let consumerName: String
    public let path: String
    public let overwrite: Bool
    public let acceleration: Int
    /// How frames are stored (see ``RawDumpCompression``).
    public let compression: RawDumpCompression
    public let device: String
    public var ringCapacity: Int { 16 }
    /// How far the dump may fall behind a live camera (its disk stalling) before frames are dropped
    /// (counted as `DropReason.storageBacklog`, in ``framesDroppedForBacklog`` and the session's
    /// drops): by default 2 s of the stream in at most 512 MiB (see `BufferBudget`). The frames
    /// waiting are copies in the dump's own memory, never the camera's buffers. Read when the
    /// session starts.
    public var bufferBudget: BufferBudget? {
        get { budget.withLock { $0 } }
        set { budget.withLock { $0 = newValue } }
    }
    private let budget = LockedBox<BufferBudget?>(.standard)
    public var wantsDropNotices: Bool { true }
    private let backlogDrops = Atomic<Int>(0)
    /// Frames dropped because the dump fell further behind than its ``bufferBudget``.
    public var framesDroppedForBacklog: Int { backlogDrops.load(ordering: .relaxed) }
    public func didDrop(sequence: UInt64, count: UInt64, reason: DropReason) {
        if reason == .storageBacklog { backlogDrops.add(Int(count), ordering: .relaxed) }
    }
    private let logger: Logger
    private var writer: RawDumpWriter?
    private struct Published { var frames = 0; var bytes: UInt64 = 0; var rawBytes: UInt64 = 0; var dropped = 0; var storedRawForBacklog = 0; var error: (any Error)?; var finished = false }
    private let state = LockedBox(Published())

    public init(path: String, overwrite: Bool = false, acceleration: Int = 1, compression: RawDumpCompression = .auto, device: String = "", name: String = "dump", logger: Logger = Logger(label: "viewfinder.dump")) {
        self.path = path; self.overwrite = overwrite; self.acceleration = acceleration; self.compression = compression; self.device = device
        consumerName = name
        self.logger = logger
    }

    /// Frames stored uncompressed because the dump was behind a live source: with
    /// ``RawDumpCompression/auto`` or ``RawDumpCompression/lz4``, once
    /// ``backlogRawThreshold`` frames wait behind the one being written, the next frames are
    /// stored as they are (no compression: the speed of the write) until no more than
    /// ``backlogCompressThreshold`` wait, then compressed again. Compression never makes the dump
    /// the bottleneck of a live camera; a non-live source (a file, the sim unpaced) waits for the
    /// dump instead, and every frame of it is compressed. The records are the ordinary
    /// stored-as-is kind: replay is bit-exact.
    public var framesStoredRawForBacklog: Int { state.withLock { $0.storedRawForBacklog } }
    /// Frames waiting behind the current one from which the dump stores frames uncompressed: half
    /// its ring. Past the ring every further frame is copied into the dump's own memory (its
    /// ``bufferBudget``), a cost of its own on the machine that is already short of time, and
    /// half a ring is still well clear of it; a single late frame (a scheduling hiccup) does not
    /// switch.
    public var backlogRawThreshold: Int { ringCapacity / 2 }
    /// Frames waiting from which (and below) the dump compresses again: a quarter of its ring. The
    /// gap to ``backlogRawThreshold`` keeps it from switching on every frame.
    public var backlogCompressThreshold: Int { ringCapacity / 4 }
    /// Whether the next frames are stored uncompressed (the frame thread's alone).
    private var behind = false
    /// Test seam: see `RawDumpWriter.compressionDelayNanoseconds`. Read when the session starts.
    package var compressionDelayNanoseconds: UInt64 = 0

    /// Switches between compressing and storing frames as they are (see
    /// ``framesStoredRawForBacklog``) by how many frames wait behind the next one.
    public func willConsume(framesWaiting: Int) {
        if framesWaiting >= backlogRawThreshold { behind = true } else if framesWaiting <= backlogCompressThreshold { behind = false }
    }

    public var framesWritten: Int { state.withLock { $0.frames } }
    public var bytesWritten: UInt64 { state.withLock { $0.bytes } }
    public var rawBytesWritten: UInt64 { state.withLock { $0.rawBytes } }
    /// Frames that arrived but could not be written (after a write error).
    public var framesDropped: Int { state.withLock { $0.dropped } }
    public var error: (any Error)? { state.withLock { $0.error } }
    public var isFinished: Bool { state.withLock { $0.finished } }
    /// Called once, on the output's thread, when a write fails (a full disk, a read-only or
    /// vanished file system) and the dump can take no more frames: what was written stays readable.
    /// The CLI stops the run there instead of capturing on to its end for nothing, with
    /// `CaptureSession.requestStop()`: `stopRunning()` waits for this output's thread, so the
    /// handler must not call it.
    public var onFailure: (@Sendable (any Error) -> Void)? {
        get { failureHandler.withLock { $0 } }
        set { failureHandler.withLock { $0 = newValue } }
    }
    private let failureHandler = LockedBox<(@Sendable (any Error) -> Void)?>(nil)

    /// Opens the dump for a run of the session. The first run creates the file; a later run (the
    /// session starting again after its camera came back from a disconnection, or a new
    /// `startRunning`) appends to the dump this output wrote instead of creating it anew, so the
    /// frames already written are never lost. A later run in another format fails with
    /// `DumpError.formatMismatch` and leaves the dump as it was.
    public func start(configuration: StreamConfiguration) throws {
        let resume = writeLock.withLock { created }
        let w = resume
            ? try RawDumpWriter(appendingTo: path, format: configuration.format, acceleration: acceleration, compression: compression)
            : try RawDumpWriter(path: path, format: configuration.format, interval: configuration.interval, device: device, overwrite: overwrite, acceleration: acceleration, compression: compression)
        // The audio delivery thread may already be writing periods (it starts first): `writer` is
        // set under the same lock it reads it under.
        writeLock.lock(); defer { writeLock.unlock() }
        created = true
        w.compressionDelayNanoseconds = compressionDelayNanoseconds
        writer = w
        behind = false
        let (n, b, r) = (w.framesWritten, w.bytesWritten, w.rawBytes)
        state.withLock { $0.frames = n; $0.bytes = b; $0.rawBytes = r; $0.finished = false }
        intervalNanoseconds = configuration.interval.nanoseconds
        // Sound captured before the file existed (the microphone starts first): written now.
        let early = earlyAudio
        earlyAudio.removeAll()
        earlyAudioBytes = 0
        for e in early { write(e, to: w) }
    }

    /// A period that came before the file was open: kept (the last two seconds) until it is.
    private struct EarlyAudio { var bytes: [UInt8]; var format: AudioStreamFormat; var period: AudioPeriod; var measuredRate: Double }
    /// Under `writeLock`.
    private var earlyAudio: [EarlyAudio] = []
    private var earlyAudioBytes = 0

    /// Whether this output created its file (under `writeLock`): later runs append to it.
    private var created = false
    /// Whether this output has created its file (false when the file could not be opened: then
    /// the session's runtime error says why, and nothing was written).
    public var fileCreated: Bool { writeLock.withLock { created } }

    /// The stream's frame interval (under `writeLock`).
    private var intervalNanoseconds: UInt64 = 0

    /// Serializes the writer between the frame thread and the audio delivery thread.
    private let writeLock = NSLock()
    private struct AudioCounts {
        var periods = 0
        var error: (any Error)?
        /// A microphone is delivering (between `prepareAudio` and `finishAudio`).
        var live = false
        /// The end of the sound written, and of the last frame's display time (monotonic ns).
        var end: UInt64 = 0
        var videoEnd: UInt64 = 0
        /// The longest period delivered, ns.
        var longestPeriod: UInt64 = 0
    }
    private let audioState = LockedBox(AudioCounts())
    /// Audio periods written (a session with a microphone records them beside the frames).
    public var audioPeriodsWritten: Int { audioState.withLock { $0.periods } }

    public func consume(_ frame: Frame) {
        // The failure is told after the lock is released: a handler may stop the session, whose
        // finish takes the lock.
        if let failure = write(frame) { onFailure?(failure) }
    }

    private func write(_ frame: Frame) -> (any Error)? {
        writeLock.lock(); defer { writeLock.unlock() }
        guard let w = writer else { state.withLock { $0.dropped += 1 }; return nil }
        do {
            let before = w.framesStoredRawForBacklog
            try w.append(frame, behindLiveSource: behind)
            let (n, b, r, raw) = (w.framesWritten, w.bytesWritten, w.rawBytes, w.framesStoredRawForBacklog - before)
            state.withLock { $0.frames = n; $0.bytes = b; $0.rawBytes = r; $0.storedRawForBacklog += raw }
            let frameEnd = frame.timestamp.nanoseconds &+ intervalNanoseconds
            audioState.withLock { $0.videoEnd = frameEnd }
        } catch {
            logger.error("dump '\(path)': \(error); the \(w.framesWritten) frames written so far stay readable")
            try? w.close()
            writer = nil
            state.withLock { $0.error = error; $0.dropped += 1 }
            return error
        }
        return nil
    }

    public func finish(error: (any Error)?) {
        // The sound of the last frame's time is still being captured when the video ends: while
        // the microphone is live, wait for it — at most 300 ms more than its longest period, as
        // the movie does (it comes with the period that holds it).
        let deadline = monotonicNanoseconds() &+ 300_000_000 &+ audioState.withLock { $0.longestPeriod }
        while monotonicNanoseconds() < deadline {
            let a = audioState.withLock { $0 }
            guard a.live, a.end < a.videoEnd else { break }
            usleep(5000)
        }
        writeLock.lock(); defer { writeLock.unlock() }
        if let w = writer {
            do { try w.close() } catch { state.withLock { $0.error = $0.error ?? error } }
            let b = w.bytesWritten
            state.withLock { $0.bytes = b }
        }
        writer = nil
        state.withLock { $0.finished = true }
    }
}

/// Conversions between dumps and YUV4MPEG2.
extension RawDumpOutput: AudioConsumer {
    public func prepareAudio(format: AudioStreamFormat) { audioState.withLock { $0.live = true } }

    /// Writes the period as an audio record (its samples as captured, its stamp and position).
    /// Periods that arrive before the stream opened the file are kept for it (the last 2 s); those
    /// after it closed are not.
    public func consumeAudio(_ buffer: AudioBuffer) {
        writeLock.lock(); defer { writeLock.unlock() }
        guard let w = writer else {
            // Not open yet (before the first frame's stream started): keep the last 2 s for it.
            guard state.withLock({ !$0.finished && $0.error == nil }) else { return }
            let e = EarlyAudio(bytes: Array(buffer.data), format: buffer.format, period: buffer.period, measuredRate: buffer.measuredRate)
            earlyAudio.append(e)
            earlyAudioBytes += e.bytes.count
            while earlyAudioBytes > 2 * buffer.format.sampleRate * buffer.format.bytesPerFrame, earlyAudio.count > 1 {
                earlyAudioBytes -= earlyAudio.removeFirst().bytes.count
            }
            return
        }
        append(buffer, to: w)
    }

    /// Under `writeLock`.
    private func write(_ e: EarlyAudio, to w: RawDumpWriter) {
        e.bytes.withUnsafeBytes { append(AudioBuffer(data: $0, format: e.format, period: e.period, measuredRate: e.measuredRate), to: w) }
    }

    /// Under `writeLock`.
    private func append(_ buffer: AudioBuffer, to w: RawDumpWriter) {
        do {
            try w.appendAudio(buffer, receiveTime: monotonicNanoseconds())
            let n = w.audioPeriodsWritten
            let length = UInt64(Double(buffer.frames) * 1e9 / Double(max(1, buffer.format.sampleRate)))
            let end = buffer.period.timestamp.nanoseconds &+ length
            audioState.withLock { $0.periods = n; $0.end = end; $0.longestPeriod = max($0.longestPeriod, length) }
        } catch {
            logger.error("dump '\(path)': audio: \(error)")
            audioState.withLock { $0.error = error }
        }
    }

    public func finishAudio(error: (any Error)?) { audioState.withLock { $0.live = false } }
}

public enum DumpConversion {
    /// Summary of a conversion.
    public struct Result: Sendable, Equatable {
        public var frames: Int
        public var duration: Double
        /// The damaged tail of the input dump, if any (its complete frames were converted).
        public var damage: DumpDamage?
        /// The input dump's stream header was damaged and its frames recovered from their own
        /// records (``RawDumpReader/headerDamage``).
        public var headerDamage: String?
        /// Frames left out because their record failed its checksum or did not decode (a corrupt
        /// JPEG from the camera): the frames after them are still converted, as replay drops such
        /// a frame as `corrupt` and carries on.
        public var skippedFrames = 0
        /// Why the first of them was left out.
        public var firstSkipReason: String?
        /// Seconds of sound written (a movie exported from a dump recorded with sound); 0 without.
        public var audioDuration: Double = 0
        /// Sound records left out because they failed their checksum or changed format mid-dump.
        public var skippedAudioRecords = 0
        /// The conversion was asked to stop (its `stop` said so): the file holds the frames
        /// before that point, whole.
        public var interrupted = false
        /// Periods of sound the dump holds that the output has no place for (a `.y4m`); 0 when
        /// none were left behind.
        public var soundLeftBehind = 0
        /// The imported `.y4m` said its YUV is limited range (`XCOLORRANGE=LIMITED`): each frame
        /// was stretched to the full range a dump holds.
        public var stretchedLimitedRange = false

        init(frames: Int, duration: Double, damage: DumpDamage?, headerDamage: String? = nil, skippedFrames: Int = 0, firstSkipReason: String? = nil) {
            self.frames = frames; self.duration = duration; self.damage = damage; self.headerDamage = headerDamage
            self.skippedFrames = skippedFrames; self.firstSkipReason = firstSkipReason
        }
    }

    /// Counts the frames a conversion leaves out, and ends it when none could be converted.
    struct Skips {
        var count = 0
        var first: String?
        mutating func skip(_ error: any Error) {
            count += 1
            if first == nil { first = "\(error)" }
        }
        func checkSomethingConverted(_ written: Int, dump: String) throws {
            if written == 0, count > 0 {
                throw DumpError.unsupported("no frame of '\(dump)' could be read (\(count) corrupt; the first: \(first ?? "?"))")
            }
        }
    }

    /// Writes the frames of a dump to a `.y4m` file (`-` for stdout). The y4m frame rate is the
    /// dump's nominal rate (y4m has no per-frame timestamps).
    /// `stop`: asked before each frame (Ctrl-C): true ends the conversion there, the file whole,
    /// and the result ``Result/interrupted``.
    public static func exportY4M(dump: String, to output: String, overwrite: Bool = false, stop: () -> Bool = { false }) throws -> Result {
        let reader = try RawDumpReader(path: dump)
        // A fifo or a device there is written into, not replaced: no --force is asked for.
        if output != "-" && !overwrite && !StreamFile.isWrittenInto(output) && FileManager.default.fileExists(atPath: output) { throw SinkError.fileExists(path: output) }
        let interval = reader.info.interval.denominator > 0 ? reader.info.interval : FrameInterval(fps: 30)
        let frame = Frame(capacity: max(reader.maxRawLength, reader.format.maxByteCount), format: reader.format)
        if reader.format.pixelFormat == .mjpeg {
            // MJPEG is decoded to planar YUV at the first image's subsampling (4:2:2 or 4:2:0).
            guard reader.frameCount > 0 else { throw DumpError.unsupported("'\(dump)' holds no complete frame") }
            let decoder = try JPEGDecoder()
            var writer: Y4MWriter?
            var planar: Frame?
            var skips = Skips(), written = 0
            var interrupted = false
            for i in 0..<reader.frameCount {
                if stop() { interrupted = true; break }
                let d: (width: Int, height: Int, subsampling: ChromaSubsampling, y: [UInt8], u: [UInt8], v: [UInt8])
                do {
                    try reader.read(i, into: frame)
                    d = try decoder.decodePlanes(UnsafeRawBufferPointer(frame.bytes))
                } catch {
                    skips.skip(error)
                    continue
                }
                if writer == nil {
                    let pf: PixelFormat = d.subsampling == .s420 ? .i420 : d.subsampling == .grey ? .grey : .yuv422p
                    guard d.subsampling != .s444 else { throw DumpError.unsupported("y4m export of 4:4:4 JPEG is not supported") }
                    let f = FrameFormat(pf, width: d.width, height: d.height, bytesPerRow: pf == .grey ? d.width : (d.width + 1) & ~1)
                    planar = Frame(capacity: f.maxByteCount, format: f)
                    writer = try Y4MWriter(path: output, format: f, interval: interval)
                }
                guard let p = planar, let w = writer, d.width == p.format.width, d.height == p.format.height else {
                    skips.skip(DumpError.formatMismatch(path: dump, expected: "\(planar?.format.description ?? "?")", got: "\(d.width)x\(d.height) JPEG"))
                    continue
                }
                do { try copyPlanes(d, into: p) } catch { skips.skip(error); continue }
                try w.write(p)
                written += 1
            }
            try writer?.flush()
            writer?.close()
            if !interrupted { try skips.checkSomethingConverted(written, dump: dump) }
            var r = Result(frames: written, duration: Self.duration(reader, interval), damage: reader.damage, headerDamage: reader.headerDamage, skippedFrames: skips.count, firstSkipReason: skips.first)
            r.interrupted = interrupted
            r.soundLeftBehind = reader.audioEntries.count
            if interrupted { r.duration = Double(written) * interval.seconds }
            return r
        }
        // A dump with no complete frame (cut after its header) has nothing to export: said before
        // the output is opened, as replaying it says.
        guard reader.frameCount > 0 else { throw DumpError.unsupported("'\(dump)' holds no complete frame") }
        // RGB, BGR and Bayer frames are converted to I420 (as `run --output` writes them).
        let pf = reader.format.pixelFormat
        let toI420 = try ToI420(reader.format, if: !pf.hasYUVPlanes && pf != .mjpeg)
        let writer = try Y4MWriter(path: output, format: toI420?.frame.format ?? reader.format, interval: interval)
        var skips = Skips(), written = 0, interrupted = false
        for i in 0..<reader.frameCount {
            if stop() { interrupted = true; break }
            do { try reader.read(i, into: frame) } catch let e as DumpError { skips.skip(e); continue }
            try writer.write(try toI420?.convert(frame) ?? frame)
            written += 1
        }
        try writer.flush()
        writer.close()
        if !interrupted { try skips.checkSomethingConverted(written, dump: dump) }
        var r = Result(frames: written, duration: Self.duration(reader, interval), damage: reader.damage, headerDamage: reader.headerDamage, skippedFrames: skips.count, firstSkipReason: skips.first)
        r.interrupted = interrupted
        r.soundLeftBehind = reader.audioEntries.count
        if interrupted { r.duration = Double(written) * interval.seconds }
        return r
    }

    /// A dump's frames converted to I420 before they are written (RGB, BGR and Bayer for y4m; a
    /// Bayer mosaic for the movie's encoder): one converter and one frame, reused.
    struct ToI420 {
        let converter: FrameConverter
        let frame: Frame
        /// nil unless `needed`.
        init?(_ format: FrameFormat, if needed: Bool) throws {
            guard needed else { return nil }
            converter = try FrameConverter(target: .i420)
            let out = converter.outputFormat(for: format)
            frame = Frame(capacity: out.maxByteCount, format: out)
        }
        /// `source` converted (into ``frame``, which is returned).
        func convert(_ source: Frame) throws -> Frame {
            try converter.convert(source, into: frame)
            return frame
        }
    }

    static func duration(_ reader: RawDumpReader, _ interval: FrameInterval) -> Double {
        let e = reader.entries
        // A damaged dump's last timestamp can be before its first: the span is then the frames'.
        guard e.count > 1, e.last!.timestampNanoseconds >= e.first!.timestampNanoseconds else { return Double(e.count) * interval.seconds }
        return Double(e.last!.timestampNanoseconds - e.first!.timestampNanoseconds) / 1e9 + interval.seconds
    }

    /// Copies decoded JPEG planes into a planar frame (whose chroma matches the JPEG's subsampling).
    static func copyPlanes(_ d: (width: Int, height: Int, subsampling: ChromaSubsampling, y: [UInt8], u: [UInt8], v: [UInt8]), into f: Frame) throws {
        let planes = [d.y, d.u, d.v]
        for i in 0..<f.format.planeCount {
            let g = f.format.plane(i)
            let src = planes[i]
            let w = i == 0 ? d.width : (d.width + 1) / 2
            guard src.count >= w * g.height else { throw SinkError.corruptData("decoded plane \(i) is smaller than the frame's") }
            src.withUnsafeBytes { s in
                for r in 0..<g.height { (f.data + g.offset + r * g.bytesPerRow).copyMemory(from: s.baseAddress! + r * w, byteCount: min(w, g.bytesPerRow)) }
            }
        }
        f.bytesUsed = f.format.maxByteCount
    }

    /// Makes a dump from a `.y4m` file; timestamps follow the y4m frame rate from `startNanoseconds`.
    public static func importY4M(_ input: String, to dump: String, overwrite: Bool = false, startNanoseconds: UInt64 = 0, stop: () -> Bool = { false }) throws -> Result {
        // The stream's errors name the file (an I/O error already does).
        func named<T>(_ body: () throws -> T) throws -> T {
            do { return try body() } catch let e as Y4MError {
                if case .io = e { throw e }
                throw DumpError.unsupported("'\(input)': \(e)")
            }
        }
        let reader = try named { try Y4MReader(path: input) }
        let interval = reader.header.interval ?? FrameInterval(fps: 30)
        let frame = Frame(capacity: reader.format.maxByteCount, format: reader.format)
        // A dump's YUV is full range, as everything the engine makes: a stream that says it is
        // limited (`XCOLORRANGE=LIMITED`, ffmpeg's `-color_range tv`) is stretched as a limited-range
        // camera's frames are (3 Dec: its bytes were kept and then read as full range — blacks
        // lifted, blue 7 levels high in every export). Without the tag it is taken as full.
        let stretch = reader.header.colorRange?.uppercased() == "LIMITED"
        // The first frame before the dump is opened: a y4m without one (a header alone) is an
        // error, and an existing dump is not replaced by an empty one.
        guard try named({ try reader.read(into: frame) }) else { throw DumpError.unsupported("'\(input)' holds no frame (a y4m header alone)") }
        let writer = try RawDumpWriter(path: dump, format: reader.format, interval: interval, device: "y4m:\(input)", overwrite: overwrite)
        var n = 0, interrupted = false
        var damage: DumpDamage?
        repeat {
            if stop() { interrupted = true; break }
            frame.sequence = UInt64(n)
            frame.timestamp = Timestamp(nanoseconds: startNanoseconds &+ UInt64(n) &* interval.nanoseconds)
            frame.receiveTime = 0
            frame.metadata = FrameMetadata()
            if stretch { YUVRange.expandToFull(frame) }
            try writer.append(frame)
            n += 1
            // A y4m whose writer was stopped mid-frame, or whose tail is damaged: the whole frames
            // before it are kept (the dump closed with them), and the result says what was left.
            do {
                guard try reader.read(into: frame) else { break }
            } catch let e as Y4MError {
                switch e {
                case .truncatedFrame, .malformedFrame: break
                default: try? writer.close(); throw e
                }
                let at = reader.lastFrameStart
                let size = (try? FileManager.default.attributesOfItem(atPath: input)[.size] as? NSNumber)?.map { $0.uint64Value } ?? UInt64(at)
                damage = DumpDamage(offset: UInt64(at), ignoredBytes: size >= UInt64(at) ? size - UInt64(at) : 0, reason: "\(e)")
                break
            }
        } while true
        try writer.close()
        var r = Result(frames: n, duration: Double(n) * interval.seconds, damage: damage)
        r.interrupted = interrupted
        r.stretchedLimitedRange = stretch
        return r
    }
}

extension FrameInterval {
    var seconds: Double { denominator == 0 ? 0 : Double(numerator) / Double(denominator) }
}

extension DumpConversion {
    /// Makes a Motion-JPEG movie from a dump with its recorded timestamps (MJPEG dumps are passed
    /// through, raw frames encoded with TurboJPEG).
    /// A dump recorded with sound (`viewfinder dump --audio`) gives the movie its sound track too,
    /// laid on the video's timeline as a recording does (`AudioTimelineAligner`: the first video
    /// frame is time zero; gaps are filled with silence, the card's clock drift absorbed).
    public static func exportMovie(dump: String, to output: String, quality: Int = 85, overwrite: Bool = false, stop: () -> Bool = { false }) throws -> Result {
        guard (1...100).contains(quality) else { throw SinkError.invalidArgument(name: "quality", reason: "\(quality) is outside 1...100") }
        let reader = try RawDumpReader(path: dump)
        guard reader.frameCount > 0 else { throw DumpError.unsupported("'\(dump)' holds no complete frame") }
        var tracks: [MovieTrackDescription] = [.mjpegVideo(width: reader.format.width, height: reader.format.height)]
        var scratch: [UInt8] = []
        // The sound's format: the first readable record's.
        var sound: AudioStreamFormat?
        for i in reader.audioEntries.indices {
            scratch.removeAll(keepingCapacity: true)
            if let p = try? reader.readAudio(i, into: &scratch) { sound = p.format; break }
        }
        if let a = sound { tracks.append(.pcmAudio(sampleRate: a.sampleRate, channels: a.channels)) }
        let writer = try MovieWriter(path: output, tracks: tracks, overwrite: overwrite)
        let frame = Frame(capacity: max(reader.maxRawLength, reader.format.maxByteCount), format: reader.format)
        let encoder = try JPEGEncoder()
        // A camera's JPEG goes in as it is when it decodes completely; a damaged one is left out
        // and counted, as the y4m export and the movie output do (it went in, and players then
        // failed on it). A Bayer mosaic is demosaiced first (the encoder takes YUV and RGB).
        let checker = reader.format.pixelFormat == .mjpeg ? try JPEGDecoder() : nil
        let demosaic = try ToI420(reader.format, if: reader.format.pixelFormat.isBayer)
        var skips = Skips(), written = 0
        var aligner: AudioTimelineAligner?
        var nextAudio = 0, skippedAudio = 0
        var pcm: [Int16] = []
        // Feeds the sound captured up to half a second past `end` to the aligner and writes the
        // track up to `end` (the movie's timeline starts at the first video frame, `origin`).
        func writeSound(upTo end: UInt64, origin: UInt64) throws {
            guard let a = sound else { return }
            if aligner == nil { aligner = AudioTimelineAligner(sampleRate: a.sampleRate, channels: a.channels, origin: origin) }
            while nextAudio < reader.audioEntries.count, reader.audioEntries[nextAudio].timestampNanoseconds <= end &+ 500_000_000 {
                defer { nextAudio += 1 }
                scratch.removeAll(keepingCapacity: true)
                guard let p = try? reader.readAudio(nextAudio, into: &scratch), p.format.sampleRate == a.sampleRate, p.format.channels == a.channels else {
                    skippedAudio += 1
                    continue
                }
                scratch.withUnsafeBytes { aligner!.add($0, format: p.format.sampleFormat, position: p.position, timestampNanoseconds: p.timestamp.nanoseconds, discontinuity: p.discontinuity) }
            }
            try writer.appendAudio(from: &aligner!, upTo: end, buffer: &pcm)
        }
        var origin: UInt64?, last: UInt64 = 0, interrupted = false
        try withExtendedLifetime(encoder) {
            for i in 0..<reader.frameCount {
                if stop() { interrupted = true; break }
                do { try reader.read(i, into: frame) } catch let e as DumpError { skips.skip(e); continue }
                let ts = frame.timestamp.nanoseconds
                if frame.format.pixelFormat == .mjpeg {
                    guard checker?.decodesCompletely(UnsafeRawBufferPointer(frame.bytes)) ?? true else {
                        skips.skip(SinkError.corruptData("frame \(i) is a JPEG that does not decode"))
                        continue
                    }
                    try writer.appendVideo(UnsafeRawBufferPointer(frame.bytes), timestampNanoseconds: ts)
                } else {
                    try writer.appendVideo(try encoder.encode(try demosaic?.convert(frame) ?? frame, quality: quality), timestampNanoseconds: ts)
                }
                written += 1
                if origin == nil { origin = ts }
                last = max(last, ts)
                try writeSound(upTo: last, origin: origin!)
            }
        }
        let interval = reader.info.interval.denominator > 0 ? reader.info.interval.nanoseconds : nil
        if let origin { try writeSound(upTo: last &+ (interval ?? 0), origin: origin) }
        try writer.finish(lastFrameDurationNanoseconds: interval)
        if !interrupted { try skips.checkSomethingConverted(written, dump: dump) }
        var r = Result(frames: written, duration: writer.durationWritten, damage: reader.damage, headerDamage: reader.headerDamage, skippedFrames: skips.count, firstSkipReason: skips.first)
        r.interrupted = interrupted
        if let a = aligner, let s = sound { r.audioDuration = Double(a.emitted) / Double(s.sampleRate) }
        r.skippedAudioRecords = skippedAudio
        return r
    }
}
