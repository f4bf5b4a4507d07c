import CFutex
import Logging
import Viewfinder

/// Writes the frames that leave the stage chain to a file or a pipe (`-` for stdout), as
/// YUV4MPEG2 or as bare planes, for `ffmpeg -i -`, a NumPy reader, or anything else that reads a
/// stream.
///
/// Flow: the engine gives the output its own ring and thread, so a slow reader only ever holds up
/// this thread. With a live source, frames the pipe cannot take in time are dropped at the ring
/// (counted on this output's path: `consumerLate`); with a non-live source the engine waits
/// (back-pressure). When the reader closes the pipe, the write fails with EPIPE — SIGPIPE is
/// blocked on this output's thread, so it does not kill the process — ``readerClosed`` is set,
/// ``onClosed`` runs once (the CLI stops the run there), and the frames still arriving are
/// counted in ``framesAfterClose``: every delivered frame is written, late, or after the close.
public final class FramePipeOutput: FrameConsumer, @unchecked Sendable {
    /// The one line a failed write is said in, by the log and by the command that ends with it
    /// (the command's error then hides the log's same line): the path once — the error usually
    /// names it already ("'a.y4m': no space left on the device").
    public static func failureText(path: String, error: any Error) -> String {
        let e = "\(error)"
        return e.contains("'\(path)'") ? "frame output: \(e)" : "frame output '\(path)': \(e)"
    }

    // @unchecked Sendable: the writers are confined to the consumer thread; counters are in `state`.
    public enum Format: String, Sendable, CaseIterable {
        /// YUV4MPEG2: 4:2:0, 4:2:2 planar or mono (NV12 is written as I420, YUYV/UYVY as 4:2:2 planar).
        case y4m
        /// Each frame's planes, rows without padding, one after the other (see ``rawLayout(of:)``).
        case raw
    }

    public let consumerName: String
    public let path: String
    public let format: Format
    public var ringCapacity: Int { 4 }
    /// On MJPEG, RGB and Bayer cameras the pipe carries each frame's full-size decoded view
    /// (planar YUV), which the engine makes because this output asks for it.
    public var needsPixels: Bool { true }
    /// Called once, on the output's thread, when the output can write no more: the reader closed
    /// the pipe, was given up on (``readerStalled``), or opening or writing failed. The CLI stops the run there
    /// (`CaptureSession.requestStop()`; `stopRunning()` would wait for this very thread).
    public var onClosed: (@Sendable () -> Void)?
    /// Called once, on the output's thread, with ``rawLayout(of:)`` of the frames a raw output is
    /// about to write (at start, or at the first frame on MJPEG, RGB and Bayer streams, whose
    /// decoded layout only the frames tell). The CLI prints it to stderr.
    public var onRawLayout: (@Sendable (String) -> Void)?
    private let logger: Logger
    private var fd: Int32 = -1
    private var frameFormatAtStart: FrameFormat?
    /// The general y4m writer: odd sizes and padded rows.
    private var y4m: Y4MWriter?
    /// Planes of one frame for the fast y4m path (packed 4:2:2 split, NV12 chroma split).
    private var scratch: UnsafeMutablePointer<UInt8>?
    private var fastY4M = false
    /// Bytes written on the fast y4m path and raw output, and where the last whole frame ends: a
    /// frame whose write fails (a full disk) is cut off a regular file there, so the file holds
    /// whole frames only (`Y4MWriter` does the same on its path).
    private var bytesOut = 0
    private var wholeBytes = 0
    /// The stream has no YUV planes (MJPEG, RGB, Bayer): the header waits for the first decoded
    /// view, whose layout (4:2:2 or 4:2:0 JPEG, I420 from RGB/Bayer) only the frames tell.
    private var pendingOpen: StreamConfiguration?
    /// How the output ended without an error of its own: the reader closed the pipe, or kept it
    /// open without reading and was given up on.
    private enum QuietEnd { case readerClosed, readerStalled }
    private struct Counts { var written: UInt64 = 0; var afterClose: UInt64 = 0; var quietEnd: QuietEnd?; var error: (any Error)? }
    private let state = LockedBox(Counts())
    /// When set (ns): once the run is asked to stop, a write that has made no progress for this
    /// long (the reader is not reading) gives up instead of waiting on.
    private let giveUpAfter = LockedBox<UInt64?>(nil)
    /// When the last bytes went into the pipe (monotonic ns; the output's thread only).
    private var lastProgress: UInt64 = 0

    public init(path: String, format: Format = .y4m, name: String = "pipe", logger: Logger = Logger(label: "viewfinder.pipe")) {
        self.path = path
        self.format = format
        self.consumerName = name
        self.logger = logger
    }

    /// From now on, a write that makes no progress for `seconds` (the reader holds the pipe
    /// open but does not read) gives up: the frames left are counted as after the close, the
    /// reader as gone. The CLI calls this when Ctrl-C or SIGTERM ends a run: such a reader must
    /// not keep the process alive. A reader that reads, however slowly, is unaffected: each
    /// write that goes in starts the time again.
    public func stopWaitingForTheReader(after seconds: Double) {
        let grace = UInt64(max(0, seconds) * 1e9)
        giveUpAfter.withLock { $0 = min($0 ?? .max, grace) }
    }

    public var framesWritten: UInt64 { state.withLock { $0.written } }
    /// Frames that reached the output after the reader had closed the pipe, or was given up on
    /// (``readerStalled``), or a write failed (not written).
    public var framesAfterClose: UInt64 { state.withLock { $0.afterClose } }
    public var readerClosed: Bool { state.withLock { $0.quietEnd == .readerClosed } }
    /// The output gave up on a reader that kept the pipe open but stopped reading, once the run
    /// was asked to stop (``stopWaitingForTheReader(after:)``); the frames after it are counted
    /// in ``framesAfterClose``. Not ``readerClosed``: the reader never closed the pipe.
    public var readerStalled: Bool { state.withLock { $0.quietEnd == .readerStalled } }
    /// A write error other than the reader closing the pipe (a full disk, …).
    public var error: (any Error)? { state.withLock { $0.error } }

    /// The layout of one raw frame in words a reader can act on: plane by plane, shape and bytes.
    public static func rawLayout(of f: FrameFormat) -> String {
        var parts: [String] = []
        var total = 0
        for i in 0..<f.planeCount {
            let (rowBytes, rows) = rawPlane(f, i)
            parts.append("plane \(i): \(rows) rows of \(rowBytes) bytes")
            total += rowBytes * rows
        }
        return "raw \(f.pixelFormat.rawValue) \(f.width)x\(f.height), \(total) bytes per frame, no headers; " + parts.joined(separator: ", ")
    }

    /// Bytes per frame of the raw format.
    public static func rawFrameBytes(_ f: FrameFormat) -> Int {
        (0..<f.planeCount).reduce(0) { acc, i in let p = rawPlane(f, i); return acc + p.rowBytes * p.rows }
    }

    static func rawPlane(_ f: FrameFormat, _ i: Int) -> (rowBytes: Int, rows: Int) {
        let g = f.plane(i)
        let perSample: Int
        switch f.pixelFormat {
        case .yuyv, .uyvy: perSample = 2
        case .rgb24, .bgr24: perSample = 3
        case .bgra: perSample = 4
        case .nv12: perSample = i == 0 ? 1 : 2
        default: perSample = 1
        }
        return (g.width * perSample, g.height)
    }

    public func start(configuration: StreamConfiguration) throws {
        // Thread-directed SIGPIPE from a write on this thread stays blocked: the write gets EPIPE.
        _ = vf_block_sigpipe_on_this_thread()
        do {
            try open(configuration)
        } catch {
            try handleWriteError(error)
        }
    }

    private func open(_ configuration: StreamConfiguration) throws {
        // By `StreamFile`'s rule: in place, a fifo written into, and a fifo with no reader an
        // error at once — not this thread blocked in open() for ever (1 Dec: `--output FIFO`
        // with no reader ran for ten minutes and Ctrl-C could not stop it).
        if path == "-" { fd = 1 } else { fd = try StreamFile.openForWriting(path) }
        // A pipe or fifo is written without blocking (see `writeAll`): a reader that stops reading
        // cannot hold the output's thread for ever once the run is asked to stop. The flag is set
        // on a description of this output's own: stdout's pipe is opened anew through /proc (a
        // pipe's /proc/self/fd entry opens the same pipe with a new description), so the shell's
        // and stderr's (`2>&1`) stay blocking whatever happens to this process.
        var st = stat()
        if fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFIFO {
            if fd == 1 {
                let own = Glibc.open("/proc/self/fd/1", O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                if own >= 0 { fd = own }   // else stdout as it is: blocking, no giving up
            } else {
                let flags = fcntl(fd, F_GETFL)
                if flags >= 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
            }
        }
        // A bigger pipe buffer (if it is a pipe) lets a reader take a 1080p frame in fewer wake-ups.
        _ = vf_set_pipe_size(fd, 1 << 20)
        if configuration.format.pixelFormat.hasYUVPlanes {
            try begin(configuration)
        } else {
            pendingOpen = configuration
        }
    }

    /// Writes the stream header (y4m) for frames of `configuration`'s format.
    private func begin(_ configuration: StreamConfiguration) throws {
        let f = configuration.format
        frameFormatAtStart = f
        if format == .raw {
            onRawLayout?(Self.rawLayout(of: f))
            return
        }
        if Self.fastY4MPath(f) {
            // Planes straight from the frame (or split once into scratch), one write each: no
            // staging copy.
            let header = Y4MHeader(width: f.width, height: f.height, pixelFormat: f.pixelFormat, fps: configuration.interval)
            try writeAll(Array(header.line.utf8))
            wholeBytes = bytesOut
            scratch = .allocate(capacity: f.width * f.height * 2)
            fastY4M = true
        } else {
            y4m = try Y4MWriter(fileDescriptor: fd, path: path, ownsDescriptor: false, format: f, interval: configuration.interval,
                                cutsTornFrames: path != "-", whenBlocked: { [unowned self] in try self.waitUntilWritable() })
        }
    }

    /// Even sizes with rows as the formats' minimum pitch take the fast path.
    static func fastY4MPath(_ f: FrameFormat) -> Bool {
        switch f.pixelFormat {
        case .yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey:
            return f.width % 2 == 0 && f.height % 2 == 0 && f.bytesPerRow == FrameFormat.minimumBytesPerRow(f.pixelFormat, width: f.width)
        default:
            return false
        }
    }

    private static let frameMarker = Array("FRAME\n".utf8)

    private func writeY4MFast(_ frame: Frame) throws {
        let f = frame.format
        guard f == frameFormatAtStart ?? f, let scratch, frame.capacity >= f.maxByteCount else {
            throw Y4MError.formatMismatch(expected: "\(frameFormatAtStart?.description ?? "?")", got: "\(f)")
        }
        try writeAll(Self.frameMarker)
        let src = frame.data.assumingMemoryBound(to: UInt8.self)
        let (w, h) = (f.width, f.height)
        switch f.pixelFormat {
        case .yuyv, .uyvy:
            YUVSplit.packed422(src, bytesPerRow: f.bytesPerRow, width: w, height: h, order: f.pixelFormat == .yuyv ? .yuyv : .uyvy,
                               y: scratch, u: scratch + w * h, v: scratch + w * h + w / 2 * h)
            try writeAll(scratch, w * h * 2)
        case .nv12:
            try writeAll(src, w * h)
            deinterleave(src + w * h, bytesPerRow: w, width: w / 2, height: h / 2, u: scratch, v: scratch + w / 2 * (h / 2))
            try writeAll(scratch, w / 2 * (h / 2) * 2)
        default:
            try writeAll(src, f.maxByteCount)   // I420, YUV422P, GREY: the planes as they lie
        }
    }

    public func consume(_ source: Frame) {
        let gone = state.withLock { c -> Bool in
            if c.quietEnd != nil || c.error != nil { c.afterClose += 1; return true }
            return false
        }
        if gone { return }
        do {
            guard let frame = source.pixelFrame else {
                throw SinkError.unsupportedFormat("\(source.format.pixelFormat) frames have no decoded view to write (the engine makes one when a TurboJPEG decoder is installed: open the device through ViewfinderKit's DeviceDirectory.standard)")
            }
            if var c = pendingOpen {
                pendingOpen = nil
                c.format = frame.format
                try begin(c)
            }
            if fastY4M { try writeY4MFast(frame) } else if let y = y4m { try y.write(frame) } else { try writeRaw(frame) }
            wholeBytes = bytesOut
            state.withLock { $0.written += 1 }
        } catch {
            cutToWholeFrames()
            state.withLock { $0.afterClose += 1 }
            try? handleWriteError(error)
        }
    }

    /// After a failed write: a regular file ends at the last whole frame again.
    private func cutToWholeFrames() {
        // Only a file this output opened (truncated, so its bytes are all this run's): standard
        // output may be a file others wrote into before (`>> frames.raw`).
        guard bytesOut > wholeBytes, fd >= 0, path != "-", DescriptorWrite.cutRegularFile(fd, to: wholeBytes) else { return }
        bytesOut = wholeBytes
    }

    /// EPIPE ends the output quietly (the reader went away); other errors are kept and logged.
    private func handleWriteError(_ error: any Error) throws {
        let e: Int32
        switch error {
        case Y4MError.io(_, _, let n, _): e = n
        case SinkError.io(_, _, let n, _): e = n
        default: e = 0
        }
        _ = vf_clear_pending_sigpipe()
        if let quiet: QuietEnd = error is ReaderStalled ? .readerStalled : e == EPIPE ? .readerClosed : nil {
            let first = state.withLock { c -> Bool in
                guard c.quietEnd == nil else { return false }
                c.quietEnd = quiet
                return true
            }
            if first { onClosed?() }
            return
        }
        logger.error("\(Self.failureText(path: path, error: error))")
        state.withLock { $0.error = $0.error ?? error }
        onClosed?()
        throw error
    }

    private func writeRaw(_ frame: Frame) throws {
        let f = frame.format
        guard !f.pixelFormat.isCompressed, frame.capacity >= f.maxByteCount else {
            throw SinkError.unsupportedFormat("raw frame output got \(f)")
        }
        for i in 0..<f.planeCount {
            let g = f.plane(i)
            let (rowBytes, rows) = Self.rawPlane(f, i)
            if g.bytesPerRow == rowBytes {
                try writeAll(frame.data + g.offset, rowBytes * rows)
            } else {
                for r in 0..<rows { try writeAll(frame.data + g.offset + r * g.bytesPerRow, rowBytes) }
            }
        }
    }

    private func writeAll(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try writeAll($0.baseAddress!, $0.count) }
    }

    private func writeAll(_ p: UnsafeRawPointer, _ count: Int) throws {
        var done = 0, counted = 0
        defer { bytesOut += done - counted }
        let failed = try DescriptorWrite.all(fd, p, count, written: &done) { [self] soFar in
            // Bytes went in since the last wait: the reader is reading.
            if soFar > counted { bytesOut += soFar - counted; counted = soFar; lastProgress = monotonicNanoseconds() }
            try waitUntilWritable()
        }
        if done > counted { lastProgress = monotonicNanoseconds() }
        if let e = failed { throw SinkError.fromErrno(path: path, operation: "write", errno: e) }
    }

    /// The reader kept the pipe open but took nothing for the grace of
    /// ``stopWaitingForTheReader(after:)``: the output ends as on a closed pipe, quietly.
    private struct ReaderStalled: Error {}

    /// Waits for room in the pipe (the reader reads), in steps of 100 ms; once
    /// ``stopWaitingForTheReader(after:)`` was called, no longer than its time since the last
    /// bytes went in: then the reader counts as gone (``readerStalled``).
    private func waitUntilWritable() throws {
        if lastProgress == 0 { lastProgress = monotonicNanoseconds() }
        while true {
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let r = poll(&p, 1, 100)
            if r > 0 { return }   // room, or an error the next write reports
            if r < 0 && errno != EINTR { throw SinkError.fromErrno(path: path, operation: "poll") }
            if let grace = giveUpAfter.withLock({ $0 }), monotonicNanoseconds() &- lastProgress >= grace {
                logger.warning("frame output '\(path)': the reader stopped reading; the run was asked to stop, so the frames left are not written")
                throw ReaderStalled()
            }
        }
    }

    public func finish(error: (any Error)?) {
        // No frame came to tell the decoded layout (every frame dropped): the y4m still gets its
        // header — as a camera JPEG decodes (4:2:2), as RGB and Bayer convert (4:2:0) — so the
        // file is an empty stream, not an empty file readers refuse.
        if var c = pendingOpen, format == .y4m, fd >= 0 {
            pendingOpen = nil
            c.format = FrameFormat(c.format.pixelFormat.isCompressed ? .yuv422p : .i420, width: c.format.width, height: c.format.height)
            try? begin(c)
        }
        if let y = y4m { try? y.flush(); y.close() }
        y4m = nil
        scratch?.deallocate()
        scratch = nil
        _ = vf_clear_pending_sigpipe()
        if fd > 1 { Glibc.close(fd) }
        fd = -1
    }
}

#if canImport(Glibc)
import Glibc
#endif
