import ArgumentParser
import Dispatch
import Foundation
import ViewfinderKit

// `viewfinder snap`, `record`, `dump` and `export`: the sinks from the command line.
// Each prints where it wrote and what, and refuses to overwrite an existing file without --force.

/// Parses sizes such as `500000`, `200K`, `50M`, `2G` (powers of 1024).
func parseByteSize(_ s: String) throws -> UInt64 {
    let t = s.trimmingCharacters(in: .whitespaces).uppercased()
    let units: [(String, UInt64)] = [("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1)]
    for (u, m) in units where t.hasSuffix(u) {
        guard let v = Double(t.dropLast()), v > 0 else { break }
        // `1e400G` (infinite) and `1e30G` trapped converting to UInt64.
        guard v * Double(m) < 9.2e18 else { throw ValidationError("'\(s)' is larger than any size this takes (8 EiB)") }
        return UInt64(v * Double(m))
    }
    guard let v = UInt64(t), v > 0 else { throw ValidationError("'\(s)' is not a size (examples: 500000, 200K, 50M, 2G)") }
    return v
}

/// A `--duration` a command can keep: positive and finite, at most `limit` seconds (a value
/// beyond it overflowed the engine's nanosecond deadline and crashed the run).
func checkDuration(_ d: Double?, option: String = "--duration", limit: Double = 10_000_000) throws {
    guard let d else { return }
    guard d > 0, d.isFinite else { throw ValidationError("\(option) must be a positive number of seconds, got \(d)") }
    guard d <= limit else {
        let days = limit >= 86400 ? String(format: " (%.0f days)", limit / 86400) : ""
        throw ValidationError("\(option) must be at most \(Int(limit)) s\(days), got \(d)")
    }
}

/// The size and rate asked of a device: a usage error (64) when they could name no mode —
/// 1...16384 pixels, a rate above 0 and at most 10000 frames per second.
func checkStreamRequest(width: Int?, height: Int?, fps: Double?) throws {
    for (name, v) in [("--width", width), ("--height", height)] {
        if let v, !(1...16384).contains(v) { throw ValidationError("\(name) must be 1...16384 pixels, got \(v)") }
    }
    if let fps, !(fps > 0 && fps <= 10000) {
        throw ValidationError("--fps must be a rate above 0 and at most 10000 frames per second, got \(fps)")
    }
}

func refuseExisting(_ path: String, force: Bool) throws {
    try refuseEmptyPath(path)
    // A device or a fifo (`/dev/null`, a pipe to another program) is written into, not replaced:
    // nothing in it is lost, and --force is not asked for (as `run` and `process` do).
    if StreamFile.isWrittenInto(path) { return }
    if !force && FileManager.default.fileExists(atPath: path) {
        throw ValidationError("'\(path)' exists; add --force to overwrite it")
    }
}

/// An output named by an empty string (a variable that was not set) is a usage error before the
/// camera opens, not a failure after it.
func refuseEmptyPath(_ path: String) throws {
    if path.isEmpty { throw ValidationError("the output path is empty") }
}

/// For the stream outputs of `run` and `process` (`--output`, `--metadata`): refuses an existing regular
/// file without --force, as the other commands refuse theirs (frames captured earlier are not
/// lost to a repeated command). A fifo, a terminal or another device is written into, not
/// replaced, and passes; `-` is standard output.
func refuseExistingRegularFile(_ path: String?, force: Bool) throws {
    if let path { try refuseEmptyPath(path) }
    guard let path, !force, path != "-" else { return }
    // `/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N` name a descriptor the shell opened (`>
    // out.y4m` created the file just now): written into, as `-` is.
    if path.hasPrefix("/dev/") || path.hasPrefix("/proc/") { return }
    var st = stat()
    guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return }
    throw ValidationError("'\(path)' exists; add --force to overwrite it")
}

/// The file a device string reads (`dump:FILE[,options]`), if it names one.
func inputFile(ofDevice device: String?) -> String? {
    guard let d = device, d.hasPrefix("dump:") else { return nil }
    return try? DumpSource.parse(device: d).path
}

/// Whether two paths name the same existing file (the same device and inode: also through links
/// and other spellings of the path).
func sameFile(_ a: String, _ b: String) -> Bool {
    var sa = stat(), sb = stat()
    guard stat(a, &sa) == 0, stat(b, &sb) == 0 else { return false }
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
}

/// Refuses an output that is one of the command's inputs: opening it for writing would destroy
/// what is to be read (even with --force). `-` (stdin/stdout) is never a file here.
func refuseOverwritingInput(_ output: String?, inputs: [String?], what: String = "output") throws {
    guard let output, output != "-" else { return }
    for case let input? in inputs where input != "-" && sameFile(input, output) {
        throw ValidationError("the \(what) '\(output)' is the input '\(input)': writing it would destroy what is being read; choose another file")
    }
}

/// The checks a command's output file passes before anything is captured, in their order: not
/// the file the device reads (even with --force), writable by the rule its writer opens it by
/// (`check`: `AtomicFile.checkWritable` for stills, `PatchedFile.checkWritable` for movies and
/// dumps; a failure is a runtime error), and not an existing file without --force.
func checkOutputFile(_ path: String, readFrom input: String?, force: Bool, by check: (String) throws -> Void) throws {
    try refuseEmptyPath(path)
    try refuseOverwritingInput(path, inputs: [input])
    do { try check(path) } catch { throw RuntimeFailure(message: "\(error)") }
    try refuseExisting(path, force: force)
}

/// `path` as an absolute path with "." and ".." and repeated slashes taken out (links are not
/// followed: `sameFile` sees through them when the file exists).
func absolutePath(_ path: String) -> String {
    let full = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    var parts: [Substring] = []
    for c in full.split(separator: "/") where c != "." {
        if c == ".." { if !parts.isEmpty { parts.removeLast() } } else { parts.append(c) }
    }
    return "/" + parts.joined(separator: "/")
}

/// Refuses two outputs of one command that are one file (the frames and the metadata written
/// into each other: neither readable). A device or fifo (`/dev/null`, a terminal) may take both.
func refuseOneFileForTwoOutputs(_ a: (name: String, path: String?), _ b: (name: String, path: String?)) throws {
    guard let pa = a.path, let pb = b.path, pa != "-", pb != "-" else { return }
    var st = stat()
    if stat(pa, &st) == 0, st.st_mode & S_IFMT != S_IFREG { return }
    if sameFile(pa, pb) || absolutePath(pa) == absolutePath(pb) {
        throw ValidationError("\(a.name) and \(b.name) are one file ('\(pa)'): each would write over the other; choose two files")
    }
}

/// Ctrl-C (SIGINT), SIGTERM (`kill`, a service manager, a container stopping) and SIGHUP (the
/// terminal closed; not under `nohup`) run `body`:
/// the command then ends as it does at a limit — files finished, rings removed, the summary
/// printed — instead of being killed mid-write.
///
/// Install it before the session starts and check ``requested`` once it has: a signal that comes
/// while the session is starting asks for a stop the session cannot take yet (it is not running),
/// and the flag is what keeps that request from being lost (the run went on to its end).
final class InterruptHandler {
    private let sources: [any DispatchSourceSignal]
    /// The dispositions before (restored by ``cancel()``: a program running the command line as
    /// a library gets its own Ctrl-C back).
    private let previous: [(Int32, __sighandler_t?)]
    /// When the first signal came (monotonic ns); nil before one did.
    private let firstAt = LockedBox<UInt64?>(nil)
    /// The first Ctrl-C or SIGTERM runs `body` (on its own thread: it may wait for the outputs to
    /// finish); another one a second or more later, while that is under way, ends the process at
    /// once (exit 128 + signal) — the way out of a stop that waits on something that will not
    /// come. (Within the second it is the same request: a terminal's Ctrl-C and a wrapper's
    /// forwarded signal arrive together.) Movies are crash-safe to their last fragment and dumps
    /// replay to their last whole record.
    init(_ body: @escaping @Sendable () -> Void) {
        let firstAt = self.firstAt
        // Which of standard input, output and error are the terminal, found now: once it has hung
        // up, isatty fails on them (EIO) and they cannot be told apart any more.
        let terminals = (Int32(0)...2).filter { isatty($0) != 0 }
        // SIGHUP: the terminal closed (an ssh session dropped) — unless the command was started
        // with it ignored (`nohup`), which it keeps.
        var signals = [SIGINT, SIGTERM]
        var current = sigaction()
        if sigaction(SIGHUP, nil, &current) == 0,
           unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) != unsafeBitCast(SIG_IGN, to: Int.self) {
            signals.append(SIGHUP)
        }
        previous = signals.map { ($0, signal($0, SIG_IGN)) }
        sources = signals.map { sig in
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler {
                // The terminal is gone: writing to it now fails (EIO), and Foundation's
                // FileHandle.write traps on a failed write — the status line, the summary and any
                // message go to /dev/null instead (as under `nohup`), so the stop can finish.
                if sig == SIGHUP { detachFromTerminal(terminals) }
                let now = monotonicNanoseconds()
                let first = firstAt.withLock { t -> UInt64? in defer { t = t ?? now }; return t }
                if let first, now &- first < 1_000_000_000 { return }
                if first != nil {
                    // What the libraries logged in the last second is not lost with the exit.
                    HeldErrorLines.shared.release(before: nil)
                    StandardStreams.error("viewfinder: interrupted again: exiting now, without waiting for the outputs\n")
                    _exit(128 + sig)
                }
                DispatchQueue.global().async { body() }
            }
            s.resume()
            return s
        }
    }
    /// Whether Ctrl-C or SIGTERM came.
    var requested: Bool { firstAt.withLock { $0 != nil } }
    func cancel() {
        for s in sources { s.cancel() }
        for (sig, handler) in previous { signal(sig, handler) }
    }
}

func onInterrupt(_ body: @escaping @Sendable () -> Void) -> InterruptHandler { InterruptHandler(body) }

/// Points `descriptors` (those of standard input, output and error that were the terminal) at
/// /dev/null; a pipe or a file stays as it is.
func detachFromTerminal(_ descriptors: [Int32]) {
    let null = open("/dev/null", O_RDWR)
    guard null >= 0 else { return }
    for fd in descriptors { _ = dup2(null, fd) }
    if null > 2 { close(null) }
}

func formatBytes(_ b: UInt64) -> String {
    b >= 1 << 20 ? String(format: "%.1f MiB", Double(b) / 1048576) : b >= 1 << 10 ? String(format: "%.1f KiB", Double(b) / 1024) : "\(b) B"
}

func dropSummary(_ stats: EngineStatistics?) -> String {
    guard let s = stats else { return "drops: unknown" }
    var total = s.drops.total
    for c in s.consumers { total += c.drops.total }
    // A file output that fell behind its buffer budget (a stalling disk) says so by name.
    let backlog = s.consumers.filter { $0.drops[.storageBacklog] > 0 }.map { "\($0.name) \($0.drops[.storageBacklog])" }
    return "captured \(s.captured), drops \(total)" + (backlog.isEmpty ? "" : " (storage_backlog: \(backlog.joined(separator: ", ")))")
}

/// `--buffer-budget` and `--buffer-memory` of `record` and `dump`: how far the file may fall
/// behind a live camera (a stalling disk) before frames are dropped as `storage_backlog`.
struct BufferBudgetOptions: ParsableArguments {
    @Option(parsing: .unconditional, help: "Seconds of the stream the file may fall behind a live camera (a stalling disk) before frames are dropped (counted as storage_backlog); the frames waiting are copies in the output's own memory, not the camera's buffers. 0: no further than its 16-frame ring.")
    var bufferBudget = 2.0
    @Option(parsing: .unconditional, help: "At most this much memory for --buffer-budget (e.g. 256M; default 512M or an eighth of the machine's memory).")
    var bufferMemory: String?

    func validate() throws {
        guard bufferBudget >= 0 && bufferBudget <= 600 else { throw ValidationError("--buffer-budget must be in [0, 600] seconds") }
        if let m = bufferMemory { _ = try parseByteSize(m) }
    }

    var budget: BufferBudget? {
        get throws {
            guard bufferBudget > 0 else { return nil }
            let bytes = try bufferMemory.map { Int(clamping: try parseByteSize($0)) } ?? BufferBudget.defaultMaximumBytes
            return BufferBudget(seconds: bufferBudget, maximumBytes: bytes)
        }
    }
}

struct SnapCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snap",
        abstract: "Take a still (JPEG or raw), a burst or an exposure bracket.")

    @OptionGroup var deviceOptions: DeviceOptions
    @Option(name: .shortAndLong, help: "Output file; several images get -1, -2, … before the extension.") var output = "snap.jpg"
    @Option(parsing: .unconditional, help: "JPEG quality, 1-100 (default: 90).") var quality: Int?
    @Option(help: "Chroma subsampling: 444, 422, 420, grey (default: the source's).") var subsampling: String?
    @Flag(help: "Save the untouched buffer with a header describing it (.vfraw) instead of a JPEG.") var raw = false
    @Flag(help: "Save a raw companion next to each JPEG.") var rawCompanion = false
    @Flag(help: "Embed a 160x120 JPEG thumbnail in each JPEG's EXIF (what file browsers and cameras show).") var thumbnail = false
    @Option(parsing: .unconditional, help: "Burst: this many consecutive frames.") var burst = 1
    // Unconditional: the README's `--bracket -2,0,2` starts with a dash, which the parser would
    // otherwise take for an option.
    @Option(parsing: .unconditional, help: "Exposure bracket: comma-separated EV biases, e.g. -2,0,2.") var bracket: String?
    @Option(parsing: .unconditional, help: "Frames to let pass before capturing (exposure and focus settle).") var warmup = 10
    @Option(help: "Stages to run before the photo output.") var stages: String?
    @Flag(help: "Overwrite existing files.") var force = false

    func validate() throws {
        if let quality, !(1...100).contains(quality) { throw ValidationError("--quality must be 1...100") }
        guard (1...64).contains(burst) else { throw ValidationError("--burst must be 1...64") }
        guard (0...3000).contains(warmup) else { throw ValidationError("--warmup must be 0...3000 frames") }
        if let s = subsampling, ChromaSubsampling(rawValue: s) == nil { throw ValidationError("--subsampling must be one of 444, 422, 420, grey") }
        if thumbnail && raw { throw ValidationError("--thumbnail is for JPEGs: a raw still has no EXIF") }
        // A raw still is the untouched buffer: a JPEG's settings would be ignored without a word.
        if raw, quality != nil { throw ValidationError("--quality is for JPEGs: a raw still is the untouched buffer") }
        if raw, subsampling != nil { throw ValidationError("--subsampling is for JPEGs: a raw still is the untouched buffer") }
    }

    func biases() throws -> [Double] {
        guard let bracket else { return [] }
        // Every item a number: an empty one ('', ',', '1,,2') is a typing slip, not "no bracket".
        return try bracket.split(separator: ",", omittingEmptySubsequences: false).map {
            guard let v = Double($0.trimmingCharacters(in: .whitespaces)) else { throw ValidationError("--bracket: '\($0)' is not a number") }
            return v
        }
    }

    func run() throws {
        let b = try biases()
        let settings = PhotoSettings(codec: raw ? .raw : .jpeg(quality: quality ?? 90, subsampling: subsampling.flatMap(ChromaSubsampling.init(rawValue:))),
                                     rawCompanion: rawCompanion, exposureBiases: b, burstCount: burst,
                                     embeddedThumbnailSize: thumbnail ? .exifThumbnail : nil)
        let count = settings.shotCount * (rawCompanion ? 2 : 1)
        let base = PathName.deletingPathExtension(output)
        let ext = PathName.pathExtension(output).isEmpty ? "jpg" : PathName.pathExtension(output)
        // One image: OUTPUT (and BASE.vfraw); several: BASE-n.EXT (and BASE-n.vfraw).
        func path(index n: Int, raw isRaw: Bool) -> String {
            if settings.shotCount == 1 { return isRaw ? base + ".vfraw" : output }
            return "\(base)-\(n).\(isRaw ? "vfraw" : ext)"
        }
        // Refuse before capturing anything: the file the device reads (even with --force, under
        // any spelling), a folder (not "exists; add --force"), a folder that is missing or cannot
        // be written, an existing file without --force.
        let input = inputFile(ofDevice: deviceOptions.device)
        for n in 1...settings.shotCount {
            var files: [String] = []
            if raw || rawCompanion { files.append(path(index: n, raw: true)) }
            if !raw { files.append(path(index: n, raw: false)) }
            for f in files { try checkOutputFile(f, readFrom: input, force: force, by: AtomicFile.checkWritable) }
        }

        let (session, dev) = try deviceOptions.makeSession(defaultDevice: nil, registry: ViewfinderCommandLine.stages)
        let runtimeErrors = LockedBox<[any Error]>([])
        session.onEvent { e in if let error = e.error { runtimeErrors.withLock { $0.append(error) } } }
        let photo = PhotoOutput()
        // A replay (a dump, an unpaced pattern) runs at full speed: the output holds it at the
        // warm-up's frame until the capture below is asked for, so the still is that frame (it
        // was whichever frame the replay had reached; a short one had ended, and a burst lost
        // frames).
        let live = dev.source.isLive
        if !live { photo.replayHoldFrame = warmup }
        session.beginConfiguration()
        if let stages { try session.setStages(try StageSpec.parseList(stages)) }
        try session.addOutput(photo)
        try session.commitConfiguration()
        // Ctrl-C (SIGTERM, SIGHUP) withdraws the capture: a burst or bracket under way writes the
        // shots it took and says so (they were all lost with the process, exit 130).
        let interrupt = onInterrupt { [photo, id = settings.uniqueID] in photo.cancel(uniqueID: id) }
        defer { interrupt.cancel() }
        try session.startRunning()
        // A camera whose frames are JPEGs gives its own JPEG untouched (no stage changes its
        // pixels): --quality and --subsampling would be ignored, and are refused as the README says
        // of options another makes meaningless (they were ignored without a word).
        if session.streamConfiguration?.format.pixelFormat == .mjpeg, stages == nil, !raw, quality != nil || subsampling != nil {
            session.stopRunning()
            throw ValidationError("\(quality != nil ? "--quality" : "--subsampling") does not apply: \(dev.uniqueID) streams JPEGs, and a still passes the camera's JPEG through untouched (choose another format with --format, or a stage that changes the pixels)")
        }
        // Let exposure and focus settle.
        // (Ten seconds, and a tenth of a second more per frame asked for: a long warm-up on a slow
        // camera is waited for, not cut at ten seconds without a word.)
        let deadline = monotonicNanoseconds() + 10_000_000_000 + UInt64(warmup) * 100_000_000
        while live && !interrupt.requested && (session.statistics?.delivered ?? 0) < UInt64(warmup) && monotonicNanoseconds() < deadline && session.isRunning { usleep(5000) }
        let photos: [CapturePhoto]
        do { photos = try photo.capturePhotos(settings: settings, timeoutSeconds: 20) } catch {
            if interrupt.requested {
                session.stopRunning()
                print("no image taken: interrupted (Ctrl-C) before the first shot; \(dropSummary(session.statistics))")
                return
            }
            let seen = session.statistics?.delivered ?? 0
            session.stopRunning()
            // The camera's own error (unplugged, an I/O error) when there was one; a finite
            // source (a short dump, `sim:frames=N`) that ended before the capture is said as
            // such, not "not attached to a running session".
            if let e = error as? PhotoCaptureError, e == .notRunning || e == .sessionEnded {
                if let e = runtimeErrors.withLock({ $0.first }) { throw e }
                throw RuntimeFailure(message: "the stream from \(dev.uniqueID) ended after \(seen) frame\(seen == 1 ? "" : "s") (a warm-up of \(warmup), --warmup) before a frame could be taken")
            }
            throw error
        }
        session.stopRunning()
        // A bracket's shots against its 0 EV shot: what each bias got (the frame time caps the
        // exposure, the gain its range), said where it is not what was asked.
        func light(_ p: CapturePhoto) -> Double? {
            guard let e = p.metadata.exposureTime, e > 0 else { return nil }
            return e * (p.metadata.gain ?? 1)
        }
        let reference = photos.first { $0.exposureBias == 0 && !$0.isRawPhoto }.flatMap(light)
        for p in photos {
            let file = path(index: p.photoCount, raw: p.isRawPhoto)
            try p.write(to: file, overwrite: force)
            let what = p.isRawPhoto ? "raw \(p.format)" : "JPEG \(p.resolvedSettings.width)x\(p.resolvedSettings.height) \(p.resolvedSettings.codec)"
            let exposure = p.metadata.exposureTime.map { String(format: ", exposure %.2f ms", $0 / 1000) } ?? ""
            var bias = p.exposureBias.map { String(format: ", bias %+.1f EV", $0) } ?? ""
            if let asked = p.exposureBias, let r = reference, let l = light(p), abs(log2(l / r) - asked) > 0.1 {
                bias = String(format: ", bias %+.1f EV asked, %+.2f EV got (exposure capped by the frame time or the gain's range)", asked, log2(l / r))
            }
            print("wrote \(file): \(what), \(formatBytes(UInt64(p.fileDataRepresentation().count))), frame \(p.sequence)\(exposure)\(bias)")
        }
        print("\(photos.count) of \(count) images from \(dev.uniqueID); \(dropSummary(session.statistics))" + (interrupt.requested ? "; interrupted (Ctrl-C): the images taken before it" : ""))
        if photos.count < count && !interrupt.requested {
            throw RuntimeFailure(message: "\(count - photos.count) of \(count) images failed" + (photos.isEmpty ? "" : " (the ones taken were written)"))
        }
    }
}

/// Reports the recording's end to the command.
final class RecordingWaiter: MovieRecordingDelegate, @unchecked Sendable {
    // @unchecked Sendable: state behind `lock`.
    let lock = ConditionLock()
    var summary: MovieRecordingSummary?
    var error: MovieRecordingError?
    var started = false
    func movieOutput(_ output: MovieFileOutput, didStartRecordingTo path: String) { lock.withLock { started = true } }
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        lock.withLock { self.summary = summary; self.error = error; lock.broadcast() }
    }
    var isDone: Bool { lock.withLock { summary != nil } }
}

struct RecordCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record a crash-safe QuickTime movie (Motion-JPEG, fragmented MOV).")

    @OptionGroup var deviceOptions: DeviceOptions
    @Option(name: .shortAndLong, help: "Output .mov file.") var output = "movie.mov"
    @Option(parsing: .unconditional, help: "Stop after this many seconds of movie.") var duration: Double?
    @Option(parsing: .unconditional, help: "Stop before the file passes this size (e.g. 50M).") var maxSize: String?
    @Option(parsing: .unconditional, help: "Stop when the disk has less free space than this (e.g. 500M).") var minFree: String?
    @Option(parsing: .unconditional, help: "Buffer this many seconds before starting the file, and put them at its start.") var preRoll: Double?
    @Option(parsing: .unconditional, help: "JPEG quality, 1-100 (MJPEG cameras are passed through).") var quality = 85
    @Option(parsing: .unconditional, help: "TurboJPEG encoder threads.") var threads = 2
    @Option(parsing: .unconditional, help: "Movie fragment interval, seconds (at most this much is lost if the process dies).") var fragment = 0.5
    @Option(help: "Stages to run before the movie output.") var stages: String?
    @Option(parsing: .unconditional, help: "Clockwise rotation players apply when they show the movie: 0, 90, 180 or 270 (the track matrix; pixels stored as captured).") var rotation = 0
    @Flag(help: "Overwrite an existing file.") var force = false
    @OptionGroup var audioOptions: AudioOptions
    @OptionGroup var bufferOptions: BufferBudgetOptions

    func validate() throws {
        try checkDuration(duration)
        if let p = preRoll, !(p > 0 && p <= 60) { throw ValidationError("--pre-roll must be in (0, 60] seconds") }
        // The movie's duration counts its pre-roll: a limit it already passes would end the
        // recording at once (it wrote the pre-roll and said the shorter limit was reached).
        if let p = preRoll, let d = duration, d <= p {
            throw ValidationError("--duration (\(d) s) must be longer than --pre-roll (\(p) s): the movie's duration includes its pre-roll")
        }
        guard (1...100).contains(quality) else { throw ValidationError("--quality must be 1...100") }
        guard (1...16).contains(threads) else { throw ValidationError("--threads must be 1...16") }
        guard fragment > 0 && fragment <= 10 else { throw ValidationError("--fragment must be in (0, 10] seconds") }
        guard [0, 90, 180, 270].contains(rotation) else { throw ValidationError("--rotation must be 0, 90, 180 or 270") }
        if duration == nil && maxSize == nil { /* until Ctrl-C or the end of the source */ }
        // A limit smaller than a movie's header and first frame ends every recording before it
        // holds a picture (`--max-size 1` wrote 675 B, "file complete: no").
        if let m = maxSize, try parseByteSize(m) < 64 << 10 { throw ValidationError("--max-size must be at least 64K (a movie's header and its first frames), got '\(m)'") }
        if let m = minFree { _ = try parseByteSize(m) }
    }

    func run() throws {
        // Same file first: --force, which "exists" would suggest, must not look like the way out;
        // then a folder, a device or a missing folder, before the camera opens (not "exists; add
        // --force", which could not help).
        try checkOutputFile(output, readFrom: inputFile(ofDevice: deviceOptions.device), force: force, by: PatchedFile.checkWritable)
        var s = MovieOutputSettings()
        s.quality = quality
        s.encoderThreads = threads
        s.fragmentInterval = fragment
        s.rotation = rotation
        s.maximumDuration = duration
        s.maximumFileSize = try maxSize.map(parseByteSize)
        s.minimumFreeDiskSpace = try minFree.map(parseByteSize)
        if let p = preRoll { s.preRollSeconds = p; s.preRollBytes = 256 << 20 }
        let movie = MovieFileOutput(settings: s)
        movie.bufferBudget = try bufferOptions.budget
        let waiter = RecordingWaiter()
        let (session, dev) = try deviceOptions.makeSession(defaultDevice: nil, registry: ViewfinderCommandLine.stages)
        session.beginConfiguration()
        if let stages { try session.setStages(try StageSpec.parseList(stages)) }
        if !dev.source.isLive { var o = EngineOptions(); o.stallTimeoutSeconds = 30; try session.setEngineOptions(o) }
        try session.addOutput(movie)
        try audioOptions.attach(to: session, camera: dev)
        try session.commitConfiguration()
        // The camera's runtime errors (unplugged, a fatal streaming error): the movie is finished
        // and complete, and the command still exits with the error (as `run` does).
        let runtimeErrors = LockedBox<[any Error]>([])
        session.onEvent { e in if let error = e.error { runtimeErrors.withLock { $0.append(error) } } }
        let sig = onInterrupt { movie.stopRecording() }
        defer { sig.cancel() }
        if preRoll == nil { try movie.startRecording(to: output, overwrite: force, delegate: waiter) }
        try session.startRunning()
        // Ctrl-C while the session was starting: the recording ends now, not at its limit.
        if sig.requested { movie.stopRecording() }
        if let p = preRoll {
            // The trigger: after the pre-roll has filled.
            let until = monotonicNanoseconds() + UInt64(p * 1e9)
            while monotonicNanoseconds() < until && session.isRunning && !sig.requested { usleep(10_000) }
            try movie.startRecording(to: output, overwrite: force, delegate: waiter)
            if sig.requested { movie.stopRecording() }
        }
        // Until a limit ends the recording, Ctrl-C stops it, or the source ends.
        while !waiter.isDone && session.isRunning { usleep(20_000) }
        if !waiter.isDone { movie.stopRecording() }
        session.stopRunning()
        guard let summary = waiter.lock.withLock({ waiter.summary }) else { throw RuntimeFailure(message: "the recording did not start") }
        let err = waiter.lock.withLock { waiter.error }
        // Frames the camera made that are neither in the movie nor dropped on the way: before
        // the recording began or after it ended (a stop, a limit) — said, so the books balance.
        let stats = session.statistics
        // (Frames the engine dropped before the outputs — corrupt, late — are in the drops, not here.)
        let outside = Int(stats?.captured ?? 0) - Int(stats?.drops.total ?? 0) - summary.frames - summary.droppedFrames
        let outsideText = outside > 0 ? " (\(outside) captured before the recording began or after it ended)" : ""
        // Stopped before the first frame (Ctrl-C at once): no movie was made, and the summary says
        // so instead of "wrote" a file that does not exist.
        if summary.frames == 0 && !FileManager.default.fileExists(atPath: summary.path) {
            print("no movie written: the recording ended before its first frame (\(summary.reason.rawValue)); \(dropSummary(stats))")
            if let a = session.audioStatistics { print(recordedAudioText(a, nil)) }
            if let err { throw err }
            return
        }
        print("wrote \(summary.path): \(summary.frames) frames (\(summary.preRollFrames) from the pre-roll), \(String(format: "%.2f", summary.duration)) s, \(formatBytes(summary.bytes)), \(summary.droppedFrames) dropped on the way to the file; \(dropSummary(stats))\(outsideText)")
        if let a = session.audioStatistics { print(recordedAudioText(a, movie.audioAlignment)) }
        print("ended: \(summary.reason.rawValue)\(err.map { " (\($0))" } ?? ""); file complete: \(summary.successfullyFinished ? "yes" : "no")")
        if let err, !summary.successfullyFinished { throw err }
        // A full disk ends the recording early: the file is complete up to there, and the command
        // says it did not record what was asked (exit 1), as `dump` does.
        if summary.reason == .diskFull { throw err ?? MovieRecordingError.diskFull(path: output) }
        session.deliverPendingEvents()
        if let e = runtimeErrors.withLock({ $0.first }) { throw e }
    }
}

struct DumpCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump",
        abstract: "Write frames losslessly to an LZ4 raw dump (replay it with --device dump:FILE).")

    @OptionGroup var deviceOptions: DeviceOptions
    @Option(name: .shortAndLong, help: "Output dump file.") var output = "capture.vfdump"
    @Option(parsing: .unconditional, help: "Stop after this many frames.") var frames: UInt64?
    @Option(parsing: .unconditional, help: "Stop after this many seconds.") var duration: Double?
    @Option(parsing: .unconditional, help: "LZ4 acceleration of --compression lz4 and of auto's lz4 frames (1 = best ratio, the default; 8+ for noisy sensors at high rates).") var acceleration: Int?
    @Option(help: "How frames are stored: auto (packed 4:2:2 frames of 1 MiB or more — 1280x720 and up — split into planes, each coded as delta bit-planes: 2–3x on noisy sensors; other frames as lz4), lz4 (the packed bytes at --acceleration), none (as they are).")
    var compression = "auto"
    @Option(help: "Stages to run before the dump (their metadata is stored with each frame).") var stages: String?
    @Flag(help: "Overwrite an existing file.") var force = false
    @OptionGroup var audioOptions: AudioOptions
    @OptionGroup var bufferOptions: BufferBudgetOptions

    func validate() throws {
        if let f = frames, f == 0 { throw ValidationError("--frames must be at least 1") }
        try checkDuration(duration)
        if let acceleration, !(1...65537).contains(acceleration) { throw ValidationError("--acceleration must be 1...65537") }
        guard let mode = RawDumpCompression(rawValue: compression) else {
            throw ValidationError("unknown --compression '\(compression)' (known: \(RawDumpCompression.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        if mode == RawDumpCompression.none, acceleration != nil { throw ValidationError("--acceleration is LZ4's: --compression none stores frames as they are") }
    }

    func run() throws {
        try checkOutputFile(output, readFrom: inputFile(ofDevice: deviceOptions.device), force: force, by: PatchedFile.checkWritable)
        let (session, dev) = try deviceOptions.makeSession(defaultDevice: nil, registry: ViewfinderCommandLine.stages)
        let out = RawDumpOutput(path: output, overwrite: force, acceleration: acceleration ?? 1, compression: RawDumpCompression(rawValue: compression) ?? .auto, device: dev.uniqueID)
        out.bufferBudget = try bufferOptions.budget
        session.beginConfiguration()
        if let stages { try session.setStages(try StageSpec.parseList(stages)) }
        var o = EngineOptions(frameLimit: frames, durationSeconds: duration)
        if !dev.source.isLive { o.stallTimeoutSeconds = 30 }
        try session.setEngineOptions(o)
        try session.addOutput(out)
        try audioOptions.attach(to: session, camera: dev)
        try session.commitConfiguration()
        // The camera's runtime errors: the dump is closed and replays up to them, and the command
        // still exits with the error (as `run` does) instead of 0.
        let runtimeErrors = LockedBox<[any Error]>([])
        session.onEvent { e in if let error = e.error { runtimeErrors.withLock { $0.append(error) } } }
        // A write that fails (a full disk) ends the run: nothing captured after it could be kept.
        out.onFailure = { [weak session] _ in session?.requestStop() }
        let sig = onInterrupt { session.stopRunning() }
        defer { sig.cancel() }
        let t0 = monotonicNanoseconds()
        try session.startRunning()
        // Ctrl-C while the session was starting: stop now, not at the limit.
        if sig.requested || out.error != nil { session.stopRunning() }
        session.waitUntilFinished()
        session.stopRunning()
        let secs = Double(monotonicNanoseconds() - t0) / 1e9
        let ratio = out.bytesWritten > 0 ? Double(out.rawBytesWritten) / Double(out.bytesWritten) : 0
        let sound = out.audioPeriodsWritten > 0 ? ", \(out.audioPeriodsWritten) periods of sound" : ""
        let kept = out.framesStoredRawForBacklog > 0 ? ", \(out.framesStoredRawForBacklog) stored uncompressed to keep up" : ""
        // A file that could not be opened: the error alone (no "wrote …: 0 frames" before it).
        if out.fileCreated { print("wrote \(output): \(out.framesWritten) frames\(sound) of \(session.streamConfiguration.map { "\($0.format)" } ?? "?"), \(formatBytes(out.bytesWritten)) (ratio \(String(format: "%.2f", ratio))\(kept)) in \(String(format: "%.2f", secs)) s of running; \(dropSummary(session.statistics))") }
        // The sound's losses (overruns, ring drops) as `record` says them: the dump holds what
        // came, and a gap in it is otherwise found only when it is exported.
        if out.fileCreated, let a = session.audioStatistics { print(recordedAudioText(a, nil)) }
        if let e = out.error { throw e }
        session.deliverPendingEvents()
        if let e = runtimeErrors.withLock({ $0.first }) { throw e }
    }
}

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Convert a dump to .y4m or .mov, or a .y4m to a dump.")

    @Argument(help: "Input: a dump, or a .y4m file.") var input: String
    @Argument(help: "Output: .y4m (or - for stdout), .mov, or a dump (any other name).") var output: String
    @Option(parsing: .unconditional, help: "JPEG quality for .mov output.") var quality = 85
    @Flag(help: "Overwrite an existing file.") var force = false

    func validate() throws {
        // Before anything is opened: a bad quality found at the first frame left the old movie
        // replaced by a stub.
        if !(1...100).contains(quality) { throw ValidationError("--quality must be 1...100, got \(quality)") }
        // A dump converts to y4m or a movie; any other name would get y4m under the wrong name.
        if !input.hasSuffix(".y4m") && output != "-" && !output.hasSuffix(".y4m") && !output.hasSuffix(".mov") {
            throw ValidationError("a dump exports to .y4m (or - for stdout) or .mov; '\(output)' is neither (to copy a dump, copy the file)")
        }
        // A y4m imports into a dump: a dump under a .y4m or .mov name (or a file called '-') is
        // what it wrote here before.
        if input.hasSuffix(".y4m") && (output == "-" || output.hasSuffix(".y4m") || output.hasSuffix(".mov")) {
            try refuseOverwritingInput(output, inputs: [input])   // that error first, when it is so
            throw ValidationError("a .y4m imports into a dump (any name but .y4m, .mov or -); '\(output)' is not one. For a movie, import it and export the dump: viewfinder export \(input) x.vfdump && viewfinder export x.vfdump \(output == "-" ? "out.mov" : output)")
        }
    }

    func run() throws {
        try refuseOverwritingInput(output, inputs: [input])
        if output != "-" { try refuseExisting(output, force: force) }
        // Ctrl-C or SIGTERM ends the conversion at a frame's end: the file holds whole frames (a
        // movie is finished, a dump closed with its index), and the summary says it was cut.
        let interrupt = onInterrupt {}
        defer { interrupt.cancel() }
        let stop = { interrupt.requested }
        if input.hasSuffix(".y4m") {
            let r = try DumpConversion.importY4M(input, to: output, overwrite: force, stop: stop)
            let tail = r.damage.map { "; the .y4m's tail was damaged (\($0.reason); \($0.ignoredBytes) bytes ignored)" } ?? ""
            let range = r.stretchedLimitedRange ? "; its limited-range YUV stretched to the full range a dump holds" : ""
            print("wrote \(output): \(r.frames) frames, \(String(format: "%.2f", r.duration)) s from \(input)" + range + (r.interrupted ? Self.interruptedText : "") + tail)
        } else if output.hasSuffix(".mov") {
            let r = try DumpConversion.exportMovie(dump: input, to: output, quality: quality, overwrite: force, stop: stop)
            var sound = r.audioDuration > 0 ? String(format: ", with %.2f s of sound", r.audioDuration) : ""
            if r.skippedAudioRecords > 0 { sound += " (\(r.skippedAudioRecords) damaged sound records left out)" }
            print("wrote \(output): \(r.frames) frames, \(String(format: "%.2f", r.duration)) s" + sound + Self.damageText(r))
        } else {
            let r = try DumpConversion.exportY4M(dump: input, to: output, overwrite: force, stop: stop)
            var err = StandardError()
            // A .y4m holds pictures only: the dump's sound is said to stay behind, not dropped
            // without a word.
            let periods = r.soundLeftBehind
            let sound = periods > 0 ? "; the dump's sound (\(periods) periods) is not in a .y4m: export to .mov to keep it" : ""
            print("wrote \(output): \(r.frames) frames, \(String(format: "%.2f", r.duration)) s" + Self.damageText(r) + sound, to: &err)
        }
    }

    /// What of the dump was left out: a damaged tail, and frames that failed their checksum or did
    /// not decode (skipped; the frames after them are converted).
    static let interruptedText = "; interrupted (Ctrl-C): the frames before it"

    static func damageText(_ r: DumpConversion.Result) -> String {
        var s = r.interrupted ? interruptedText : ""
        s += r.headerDamage.map { "; \($0)" } ?? ""
        s += r.damage.map { "; the dump's tail was damaged (\($0.reason), \($0.ignoredBytes) bytes ignored)" } ?? ""
        if r.skippedFrames > 0 { s += "; \(r.skippedFrames) corrupt frame\(r.skippedFrames == 1 ? "" : "s") left out (the first: \(r.firstSkipReason ?? "?"))" }
        return s
    }
}
