import Foundation
import Logging
import Viewfinder

/// Replays a raw dump as a device: `dump:FILE[,paced=true|false][,loop=N][,rebase=true|false]`.
///
/// - `paced` (default true): frames come at their recorded timing (variable rate kept) and the
///   source is live (a slow pipeline drops, as with a camera). `paced=false` delivers them as fast
///   as the pipeline takes them, with back-pressure (non-live): the fixture mode for tests and
///   benchmarks.
/// - `loop`: plays the dump N times (0: forever); sequences and timestamps keep increasing.
/// - `rebase` (default true): timestamps are moved to the replay's CLOCK_MONOTONIC time line,
///   keeping the recorded intervals, so latency figures mean something; `rebase=false` keeps them
///   exactly as recorded.
/// - `threads` (default 0: one per core, at most 4): threads that decode a compressed frame's
///   chunks side by side, as the writer coded them; 1 decodes on the replay's own thread.
public final class DumpSource: CaptureSource, @unchecked Sendable {
    // @unchecked Sendable: the reader, the pool pointer and the replay position are used only by the
    // capture thread (start/next/stop are called in sequence by the engine); `info` and the options
    // are immutable.
    public let path: String
    public let paced: Bool
    public let loops: Int
    public let rebase: Bool
    public let info: DeviceInfo
    public var isLive: Bool { paced }
    public var controls: (any DeviceControlling)? { nil }
    public private(set) var activeConfiguration: StreamConfiguration?

    private let reader: RawDumpReader
    private let logger: Logger
    private var pool: FramePool?
    private var position = 0
    private var pass = 0
    private var startTime: UInt64 = 0
    private var firstTimestamp: UInt64 = 0
    private var passOffset: UInt64 = 0
    private var sequenceOffset: UInt64 = 0
    private var pending: Frame?
    /// The file as it was when the replay started (a change under it ends the replay).
    private var startState: (size: UInt64, modified: timespec)?
    /// Corrupt frames in the current pass, and in the whole replay (for the warnings' rate).
    private var corruptInPass = 0
    private var corruptSeen = 0
    /// Shared with the sound of the replay (``makeAudioSource()``).
    private let timeline = DumpReplayTimeline()

    /// Options of a dump replay (after the file: `dump:FILE,paced=false,loop=3`).
    public struct Options: DeviceOptionTable, Equatable {
        public var paced = true
        public var loops = 1
        public var rebase = true
        public var threads = 0
        public init() {}

        public static var fields: [OptionField<Options>] {
            [
                .bool("paced", \.paced, "true: frames come at their recorded timing (a live source); false: as fast as the pipeline takes them, with back-pressure"),
                .int("loop", \.loops, range: 0...1_000_000, unit: "passes", "Plays the dump this many times (0: forever); sequences and timestamps keep increasing"),
                .bool("rebase", \.rebase, "true: timestamps move to the replay's CLOCK_MONOTONIC time line, keeping the recorded intervals; false: exactly as recorded"),
                .int("threads", \.threads, range: 0...16, unit: "threads", "Threads decoding a compressed frame's chunks side by side (0: one per core, at most 4; 1: the replay's own thread)"),
            ]
        }
    }

    /// Splits `dump:FILE[,key=value…]` into the file and its options (the options are the last
    /// comma-separated items that look like `key=value`, so a file name may contain commas).
    public static func parse(device: String) throws(DeviceError) -> (path: String, options: Options) {
        var spec = device.hasPrefix("dump:") ? Substring(device.dropFirst(5)) : Substring(device)
        var optionText: [Substring] = []
        while let comma = spec.lastIndex(of: ","), spec[spec.index(after: comma)...].contains("=") {
            optionText.insert(spec[spec.index(after: comma)...], at: 0)
            spec = spec[..<comma]
        }
        let options = try Options.decode(keyValues: Substring(optionText.joined(separator: ",")), device: device)
        return (String(spec), options)
    }

    /// Opens a dump (`device` is `dump:FILE[,options]` or a plain path).
    public init(device: String, logger: Logger = Logger(label: "viewfinder.dump")) throws {
        let (spec, o) = try Self.parse(device: device)
        let (paced, loops, rebase) = (o.paced, o.loops, o.rebase)
        guard !spec.isEmpty else { throw DeviceError.invalidDeviceOption(device: device, option: "file", reason: "no file named (expected dump:FILE)") }
        path = spec
        self.paced = paced
        self.loops = loops
        self.rebase = rebase
        self.logger = logger
        do {
            let threads = o.threads > 0 ? o.threads : ChunkedLZ4.defaultThreads
            reader = try RawDumpReader(path: spec, decodeThreads: threads)
        } catch let e as SinkError {
            throw DeviceError.unknownDevice(device, reason: e.description)
        } catch let e as DumpError {
            throw DeviceError.corruptInput(device: device, reason: e.description)
        }
        if let h = reader.headerDamage {
            logger.warning("dump '\(spec)': \(h)")
        }
        if let d = reader.damage {
            logger.warning("dump '\(spec)': \(d.reason) at byte \(d.offset); replaying the \(reader.frameCount) complete frames before it")
        }
        let f = reader.format
        let interval = reader.info.interval
        let fd = FormatDescription(pixelFormat: f.pixelFormat, fourcc: f.pixelFormat.fourcc, description: "\(f.pixelFormat) (recorded)", compressed: f.pixelFormat.isCompressed,
                                   sizes: [.discrete(width: f.width, height: f.height, intervals: interval.denominator > 0 ? [interval] : [])])
        info = DeviceInfo(id: device, name: "dump \(PathName.lastComponent(spec))", driver: "viewfinder-dump", bus: "file:\(spec)",
                          formats: [fd], controls: [], isLive: paced)
        // A dump's active format is the one it recorded (what a request that names only some of
        // format, size and rate completes the rest from).
        activeConfiguration = StreamConfiguration(format: f, interval: nominalInterval, bufferCount: 8)
    }

    public var frameCount: Int { reader.frameCount }
    /// Threads decoding a compressed frame's chunks (the `threads` option; 1: the replay's own).
    public var decodeThreads: Int { reader.decodeThreads }
    public var damage: DumpDamage? { reader.damage }
    /// The dump's stream header was damaged and its frames recovered from their own records.
    public var headerDamage: String? { reader.headerDamage }

    /// The recorded frame interval, or the median of the recorded timestamps' spacing.
    private var nominalInterval: FrameInterval {
        let i = reader.info.interval
        if i.denominator > 0 && i.numerator > 0 { return i }
        let ts = reader.entries.prefix(64).map(\.timestampNanoseconds)
        if ts.count >= 2 {
            let d = zip(ts.dropFirst(), ts).map { $0 > $1 ? $0 - $1 : 0 }.sorted()[(ts.count - 1) / 2]
            if d > 0 { return FrameInterval(numerator: UInt32(clamping: d / 1000), denominator: 1_000_000) }
        }
        return FrameInterval(numerator: 1, denominator: 30)
    }

    public func configure(_ request: StreamRequest) throws -> StreamConfiguration {
        let f = reader.format
        guard request.pixelFormat == f.pixelFormat, request.width == f.width, request.height == f.height else {
            throw DeviceError.unsupportedFormat(device: info.id, requested: "\(request.pixelFormat) \(request.width)x\(request.height)", available: ["\(f)"])
        }
        return recordedConfiguration(bufferCount: request.bufferCount)
    }

    /// The configuration the dump was recorded with (what `configure` accepts).
    public func recordedConfiguration(bufferCount: Int = 8) -> StreamConfiguration {
        let c = StreamConfiguration(format: reader.format, interval: nominalInterval, bufferCount: max(4, bufferCount))
        activeConfiguration = c
        return c
    }

    public func start() throws {
        guard reader.frameCount > 0 else { throw DeviceError.corruptInput(device: info.id, reason: "the dump holds no complete frame") }
        let cfg = activeConfiguration ?? recordedConfiguration()
        let capacity = max(reader.maxRawLength, cfg.format.maxByteCount)
        pool = FramePool(format: cfg.format, count: max(4, cfg.bufferCount), frameCapacity: capacity)
        position = 0; pass = 0; passOffset = 0; sequenceOffset = 0
        corruptInPass = 0; corruptSeen = 0
        startState = reader.currentFileState
        firstTimestamp = reader.entries[0].timestampNanoseconds
        startTime = timeline.videoStarted()
    }

    /// Whether the dump holds sound (audio records, version 2).
    public var hasAudio: Bool { !reader.audioEntries.isEmpty }

    /// The dump's sound as a microphone for the same session, replayed in step with these frames
    /// (same pacing, loops and time line); nil when the dump has no sound.
    public func makeAudioSource() throws -> DumpAudioSource? {
        guard hasAudio, let first = reader.entries.first, let last = reader.entries.last else { return nil }
        return try DumpAudioSource(path: path, id: info.id + "#audio", timeline: timeline, paced: paced, rebase: rebase, loops: loops,
                                   firstVideo: first.timestampNanoseconds, lastVideo: last.timestampNanoseconds, interval: nominalInterval.nanoseconds)
    }

    public func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        guard let pool else { throw DeviceError.notRunning(device: info.id) }
        let frame: Frame
        if let p = pending {
            frame = p
            pending = nil
        } else {
            if position >= reader.frameCount {
                // A whole pass in which every frame was corrupt: looping on would spin for ever on
                // nothing (a loop=0 replay of a damaged file wrote 70 000 warnings a second and
                // never ended). (Frames a paced replay skipped for want of a buffer are no sign.)
                if corruptInPass >= reader.frameCount {
                    throw DeviceError.corruptInput(device: info.id, reason: "no frame of the dump could be read in a whole pass (\(reader.frameCount) corrupt)")
                }
                corruptInPass = 0
                pass += 1
                if loops != 0 && pass >= loops { return .endOfStream }
                // The next pass continues the time line one interval after the last frame.
                let last = reader.entries[reader.frameCount - 1]
                passOffset &+= (last.timestampNanoseconds &- firstTimestamp) &+ nominalInterval.nanoseconds
                sequenceOffset &+= (last.sequence &- reader.entries[0].sequence) &+ 1
                position = 0
            }
            let got = paced ? pool.acquire() : pool.acquire(timeoutNanoseconds: timeoutNanoseconds)
            guard let f = got else {
                if paced { position += 1; return .lost(.outOfBuffers, count: 1) }
                return .timeout
            }
            do {
                try reader.read(position, into: f)
            } catch {
                f.release()
                position += 1
                // The file cut or rewritten under the replay (another program, a `dump --force`
                // to the same name): the frames from here on are not the dump's — an error that
                // ends the run, not every later frame counted corrupt at full speed and exit 0.
                if let was = startState, let now = reader.currentFileState,
                   now.size != was.size || now.modified.tv_sec != was.modified.tv_sec || now.modified.tv_nsec != was.modified.tv_nsec {
                    let how = now.size < was.size ? "cut from \(was.size) to \(now.size) bytes" : now.size == was.size ? "rewritten" : "rewritten (\(now.size) bytes, was \(was.size))"
                    throw DeviceError.corruptInput(device: info.id, reason: "the dump file was \(how) while it was replayed: frame \(position - 1) and those after it cannot be read")
                }
                corruptSeen += 1
                corruptInPass += 1
                // The first twenty, then one in a thousand: a damaged stretch is said, not
                // repeated line by line.
                if corruptSeen <= 20 || corruptSeen % 1000 == 0 {
                    let more = corruptSeen == 20 ? " (further corrupt frames: one line in a thousand)" : corruptSeen > 20 ? " (\(corruptSeen) corrupt frames so far)" : ""
                    // These two name the file and the frame already.
                    switch error {
                    case DumpError.checksumMismatch, DumpError.frameOutOfRange: logger.warning("dump: \(error)\(more)")
                    default: logger.warning("dump '\(path)': frame \(position - 1): \(error)\(more)")
                    }
                }
                return .lost(.corrupt, count: 1)
            }
            position += 1
            let recorded = f.timestamp.nanoseconds
            let offset = (recorded &- firstTimestamp) &+ passOffset
            f.sequence &+= sequenceOffset
            if rebase {
                f.timestamp = Timestamp(nanoseconds: startTime &+ offset, clock: .monotonic)
            } else if passOffset > 0 {
                f.timestamp.nanoseconds = recorded &+ passOffset
            }
            f.receiveTime = 0
            timeline.videoEmitted(offset: Int64(bitPattern: offset))
            frame = f
        }
        if paced {
            let recordedOffset = rebase ? frame.timestamp.nanoseconds &- startTime : frame.timestamp.nanoseconds &- firstTimestamp
            let due = startTime &+ recordedOffset
            let now = monotonicNanoseconds()
            if due > now {
                if due - now > timeoutNanoseconds {
                    sleepUntil(monotonicNanoseconds: now &+ timeoutNanoseconds)
                    pending = frame
                    return .timeout
                }
                sleepUntil(monotonicNanoseconds: due)
            }
        }
        return .frame(frame)
    }

    public func stop() {
        pending?.release()
        pending = nil
        timeline.videoStopped(interval: nominalInterval.nanoseconds)
    }
}

/// Opens `dump:FILE[,options]` devices (see ``DumpSource``).
public struct DumpProvider: DeviceProvider {
    public init() {}
    public func handles(_ device: String) -> Bool { device.hasPrefix("dump:") }
    public func open(_ device: String) throws -> any CaptureSource { try DumpSource(device: device) }
    /// Dumps are opened by name; there is nothing to discover.
    public func discover() -> [DeviceInfo] { [] }
}

extension DumpProvider: DocumentedDeviceProvider {
    public var documentation: DeviceKindDocumentation {
        DeviceKindDocumentation(syntax: "dump:FILE[,key=value,…]", summary: "Replays an LZ4 raw dump written by `viewfinder dump` (or a .y4m converted by `viewfinder export`).", options: DumpSource.Options.self)
    }
}
