#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Problems with a YUV4MPEG2 stream. Each names the byte offset where it was found.
public enum Y4MError: Error, Equatable, CustomStringConvertible {
    /// The stream header is not a valid YUV4MPEG2 header.
    case malformedHeader(offset: Int, reason: String)
    /// A valid header asks for something not supported (10-bit, 4:4:4, …).
    case unsupported(offset: Int, reason: String)
    /// A frame header is not `FRAME[ params]\n` (`frame` -1: a header line that does not end).
    case malformedFrame(offset: Int, frame: Int, reason: String)
    /// The stream ended inside a frame.
    case truncatedFrame(offset: Int, frame: Int, expected: Int, got: Int)
    /// The frame given to write does not fit the stream.
    case formatMismatch(expected: String, got: String)
    /// A system call failed.
    case io(path: String, operation: String, errno: Int32, message: String)

    public var description: String {
        switch self {
        case .malformedHeader(let o, let r): return "YUV4MPEG2: bad stream header at byte \(o): \(r)"
        case .unsupported(let o, let r): return "YUV4MPEG2: unsupported stream at byte \(o): \(r)"
        case .malformedFrame(let o, let f, let r):
            // (-1: a header line read before it is known whose it is.)
            return f < 0 ? "YUV4MPEG2: bad header line at byte \(o): \(r)" : "YUV4MPEG2: bad frame header of frame \(f) at byte \(o): \(r)"
        case .truncatedFrame(let o, let f, let e, let g):
            return "YUV4MPEG2: frame \(f) is truncated at byte \(o): expected \(e) bytes of picture, got \(g)"
        case .formatMismatch(let e, let g): return "YUV4MPEG2: frame format \(g) does not match the stream (\(e))"
        case .io(let p, let op, let e, let m): return "'\(p)': \(op) failed: \(m) (errno \(e))"
        }
    }
}

/// The stream header of a YUV4MPEG2 file (`YUV4MPEG2 W640 H480 F30000:1001 Ip A1:1 C420jpeg`).
public struct Y4MHeader: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// Frame rate as `F<num>:<den>` gives it (frames per second = num/den); nil when absent.
    public var rateNumerator: Int?
    public var rateDenominator: Int?
    /// Interlacing: `p` progressive, `t`/`b` top/bottom field first, `m` mixed, `?` unknown.
    public var interlacing: Character
    /// Pixel aspect ratio `A<n>:<d>` (0:0 unknown).
    public var aspect: (Int, Int)
    /// Colour space tag (`420jpeg`, `420paldv`, `420`, `420mpeg2`, `422`, `mono`).
    public var colorspace: String
    /// Other tags (`X…` comments and the like), kept in order.
    public var extras: [String]

    public static func == (a: Y4MHeader, b: Y4MHeader) -> Bool {
        a.width == b.width && a.height == b.height && a.rateNumerator == b.rateNumerator && a.rateDenominator == b.rateDenominator
            && a.interlacing == b.interlacing && a.aspect == b.aspect && a.colorspace == b.colorspace && a.extras == b.extras
    }

    public init(width: Int, height: Int, pixelFormat: PixelFormat = .i420, fps: FrameInterval? = nil) {
        self.width = width
        self.height = height
        if let fps { rateNumerator = Int(fps.denominator); rateDenominator = Int(fps.numerator) }
        interlacing = "p"
        aspect = (1, 1)
        switch pixelFormat {
        case .grey: colorspace = "mono"
        case .yuv422p, .yuyv, .uyvy: colorspace = "422"
        default: colorspace = "420jpeg"
        }
        // The engine's YUV is full range (JFIF's BT.601, as its JPEGs): said, so that ffmpeg and
        // OpenCV do not take 0...255 samples for 16...235 ones.
        extras = ["XCOLORRANGE=FULL"]
    }

    /// The `XCOLORRANGE` tag's value (`FULL`, `LIMITED`), nil when the header has none.
    public var colorRange: String? {
        extras.first { $0.hasPrefix("XCOLORRANGE=") }.map { String($0.dropFirst("XCOLORRANGE=".count)) }
    }

    /// The engine's pixel format for the colour space.
    public var pixelFormat: PixelFormat? {
        switch colorspace {
        case "420jpeg", "420paldv", "420", "420mpeg2": return .i420
        case "422": return .yuv422p
        case "mono": return .grey
        default: return nil
        }
    }

    /// The frame format frames of this stream have (rows padded to an even width so chroma rows
    /// of odd widths fit).
    public var format: FrameFormat? {
        guard let p = pixelFormat, width > 0, height > 0 else { return nil }
        return FrameFormat(p, width: width, height: height, bytesPerRow: p == .grey ? width : (width + 1) & ~1)
    }

    /// The frame interval, when the header gives a rate.
    public var interval: FrameInterval? {
        guard let n = rateNumerator, let d = rateDenominator, n > 0, d > 0 else { return nil }
        return FrameInterval(numerator: UInt32(d), denominator: UInt32(n))
    }

    /// Bytes of picture per frame.
    public var frameByteCount: Int {
        let cw = (width + 1) / 2, ch = (height + 1) / 2
        switch pixelFormat {
        case .grey?: return width * height
        case .yuv422p?: return width * height + 2 * cw * height
        default: return width * height + 2 * cw * ch
        }
    }

    /// The header line, with its newline.
    public var line: String {
        var s = "YUV4MPEG2 W\(width) H\(height)"
        if let n = rateNumerator, let d = rateDenominator { s += " F\(n):\(d)" }
        s += " I\(interlacing) A\(aspect.0):\(aspect.1) C\(colorspace)"
        for e in extras { s += " " + e }
        return s + "\n"
    }

    /// Parses a header line (without its newline). `offset` is where the line starts, for errors.
    public static func parse(_ line: [UInt8], offset: Int = 0) throws -> Y4MHeader {
        let magic = Array("YUV4MPEG2".utf8)
        guard line.count >= magic.count, Array(line[0..<magic.count]) == magic else {
            throw Y4MError.malformedHeader(offset: offset, reason: "does not start with 'YUV4MPEG2'")
        }
        var h = Y4MHeader(width: 0, height: 0)
        h.colorspace = "420jpeg"
        h.extras = []
        var w: Int?, ht: Int?
        var seen = Set<Character>()
        var pos = magic.count
        while pos < line.count {
            guard line[pos] == UInt8(ascii: " ") else {
                throw Y4MError.malformedHeader(offset: offset + pos, reason: "expected a space between tags")
            }
            pos += 1
            let start = pos
            while pos < line.count && line[pos] != UInt8(ascii: " ") { pos += 1 }
            guard pos > start else { continue }
            let tag = String(decoding: line[start..<pos], as: UTF8.self)
            let key = tag.first!
            let value = String(tag.dropFirst())
            // A tag given twice (`C420 C422`): which one the writer meant is unknown (the last won).
            if key != "X" {
                if seen.contains(key) { throw Y4MError.malformedHeader(offset: offset + start, reason: "tag '\(key)' is given twice") }
                seen.insert(key)
            }
            func ratio() throws -> (Int, Int) {
                let parts = value.split(separator: ":", omittingEmptySubsequences: false)
                guard parts.count == 2, let a = Int(parts[0]), let b = Int(parts[1]), a >= 0, b >= 0 else {
                    throw Y4MError.malformedHeader(offset: offset + start, reason: "tag '\(tag)' is not <n>:<d>")
                }
                return (a, b)
            }
            switch key {
            case "W":
                guard let v = Int(value), v > 0, v <= 65536 else { throw Y4MError.malformedHeader(offset: offset + start, reason: "bad width '\(value)'") }
                w = v
            case "H":
                guard let v = Int(value), v > 0, v <= 65536 else { throw Y4MError.malformedHeader(offset: offset + start, reason: "bad height '\(value)'") }
                ht = v
            case "F":
                let r = try ratio()
                // Both parts become a `FrameInterval`'s UInt32 fields.
                guard r.0 > 0, r.1 > 0, r.0 <= Int(UInt32.max), r.1 <= Int(UInt32.max) else {
                    throw Y4MError.malformedHeader(offset: offset + start, reason: "bad frame rate '\(value)'")
                }
                h.rateNumerator = r.0; h.rateDenominator = r.1
            case "I":
                guard value.count == 1, "ptbm?".contains(value) else { throw Y4MError.malformedHeader(offset: offset + start, reason: "bad interlacing '\(value)'") }
                h.interlacing = value.first!
            case "A":
                h.aspect = try ratio()
            case "C":
                h.colorspace = value
                guard h.pixelFormat != nil else {
                    throw Y4MError.unsupported(offset: offset + start, reason: "colour space '\(value)' (supported: 420jpeg, 420paldv, 420, 420mpeg2, 422, mono)")
                }
            case "X":
                h.extras.append(tag)
            default:
                throw Y4MError.malformedHeader(offset: offset + start, reason: "unknown tag '\(tag)'")
            }
        }
        guard let w else { throw Y4MError.malformedHeader(offset: offset, reason: "no width (W) tag") }
        guard let ht else { throw Y4MError.malformedHeader(offset: offset, reason: "no height (H) tag") }
        guard w <= 16384, ht <= 16384, w * ht <= 8192 * 8192 else {
            throw Y4MError.unsupported(offset: offset, reason: "\(w)x\(ht) is larger than 8192x8192 pixels")
        }
        h.width = w; h.height = ht
        return h
    }
}

/// Reads a YUV4MPEG2 stream from a file or stdin (`-`), frame by frame into frames the caller
/// provides (from a ``FramePool``). A malformed or truncated frame throws a ``Y4MError`` naming
/// the byte offset; every frame before it has been returned.
public final class Y4MReader {
    public let path: String
    public let header: Y4MHeader
    public let format: FrameFormat
    /// Bytes consumed so far.
    public private(set) var offset = 0
    /// Frames read so far.
    public private(set) var framesRead = 0
    private let fd: Int32
    private let ownsFD: Bool
    private var buffer: UnsafeMutablePointer<UInt8>
    private let bufferSize = 1 << 16
    private var bufStart = 0
    private var bufEnd = 0
    private var eof = false

    /// Opens `path` (`-` for stdin) and reads the stream header.
    public convenience init(path: String) throws {
        if path == "-" {
            try self.init(fileDescriptor: 0, path: "-", ownsDescriptor: false)
        } else {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                let e = errno
                throw Y4MError.io(path: path, operation: "open", errno: e, message: String(cString: strerror(e)))
            }
            try self.init(fileDescriptor: fd, path: path, ownsDescriptor: true)
        }
    }

    /// Reads from an open descriptor.
    public init(fileDescriptor: Int32, path: String, ownsDescriptor: Bool) throws {
        self.fd = fileDescriptor
        self.ownsFD = ownsDescriptor
        self.path = path
        buffer = .allocate(capacity: 1 << 16)
        var hdr: Y4MHeader
        do {
            guard let line = try Self.readLine(fd: fd, buffer: buffer, size: 1 << 16, start: &bufStart, end: &bufEnd, eof: &eof, offset: &offset, limit: 4096) else {
                throw Y4MError.malformedHeader(offset: 0, reason: "empty input")
            }
            hdr = try Y4MHeader.parse(line, offset: 0)
        } catch {
            buffer.deallocate()
            if ownsDescriptor { close(fileDescriptor) }
            throw error
        }
        header = hdr
        format = hdr.format!
    }

    deinit {
        buffer.deallocate()
        if ownsFD { close(fd) }
    }

    /// Where the frame the last ``read(into:)`` read (or failed to read) starts, in bytes from the
    /// start of the stream.
    public private(set) var lastFrameStart = 0

    /// A pool of `count` frames for this stream.
    public func makePool(count: Int) -> FramePool { FramePool(format: format, count: count) }

    /// Reads the next frame into `frame` (whose capacity must hold ``format``). Returns false at
    /// the clean end of the stream.
    public func read(into frame: Frame) throws -> Bool {
        let frameStart = offset
        lastFrameStart = frameStart
        guard let line = try Self.readLine(fd: fd, buffer: buffer, size: bufferSize, start: &bufStart, end: &bufEnd, eof: &eof, offset: &offset, limit: 4096) else {
            return false
        }
        let marker = Array("FRAME".utf8)
        guard line.count >= marker.count, Array(line[0..<marker.count]) == marker,
              line.count == marker.count || line[marker.count] == UInt8(ascii: " ") else {
            throw Y4MError.malformedFrame(offset: frameStart, frame: framesRead, reason: "expected 'FRAME', got '\(String(decoding: line.prefix(16), as: UTF8.self))'")
        }
        guard frame.capacity >= format.maxByteCount else {
            throw Y4MError.formatMismatch(expected: "\(format)", got: "a frame of \(frame.capacity) bytes")
        }
        frame.format = format
        frame.bytesUsed = format.maxByteCount
        let pictureStart = offset
        var got = 0
        let dst = frame.data.assumingMemoryBound(to: UInt8.self)
        for i in 0..<format.planeCount {
            let p = format.plane(i)
            if p.bytesPerRow == p.width {
                let n = try fill(dst + p.offset, count: p.width * p.height)
                got += n
                if n < p.width * p.height {
                    throw Y4MError.truncatedFrame(offset: pictureStart + got, frame: framesRead, expected: header.frameByteCount, got: got)
                }
                continue
            }
            for row in 0..<p.height {
                let n = try fill(dst + p.offset + row * p.bytesPerRow, count: p.width)
                got += n
                if n < p.width {
                    throw Y4MError.truncatedFrame(offset: pictureStart + got, frame: framesRead, expected: header.frameByteCount, got: got)
                }
            }
        }
        frame.sequence = UInt64(framesRead)
        if let iv = header.interval {
            // A rate of 1 frame in 2^32 s overflows after a few frames: such a stream's times stop at the end of UInt64.
            let (t, overflow) = UInt64(framesRead).multipliedReportingOverflow(by: iv.nanoseconds)
            frame.timestamp = Timestamp(nanoseconds: overflow ? .max : t, clock: .unknown)
        }
        framesRead += 1
        return true
    }

    /// Copies up to `count` bytes of the stream to `dst`; fewer only at the end of the input.
    private func fill(_ dst: UnsafeMutablePointer<UInt8>, count: Int) throws -> Int {
        var done = 0
        while done < count {
            if bufStart == bufEnd {
                if eof { break }
                try refill()
                if bufStart == bufEnd { break }
            }
            let n = min(count - done, bufEnd - bufStart)
            (dst + done).update(from: buffer + bufStart, count: n)
            bufStart += n; done += n; offset += n
        }
        return done
    }

    private func refill() throws {
        try Self.refill(fd: fd, buffer: buffer, size: bufferSize, start: &bufStart, end: &bufEnd, eof: &eof, path: path)
    }

    private static func refill(fd: Int32, buffer: UnsafeMutablePointer<UInt8>, size: Int, start: inout Int, end: inout Int, eof: inout Bool, path: String = "") throws {
        if start > 0 {
            let live = end - start
            if live > 0 { buffer.update(from: buffer + start, count: live) }
            start = 0; end = live
        }
        while true {
            let n = Glibc.read(fd, buffer + end, size - end)
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                throw Y4MError.io(path: path, operation: "read", errno: e, message: String(cString: strerror(e)))
            }
            if n == 0 { eof = true }
            end += n
            return
        }
    }

    /// A line without its newline; nil at a clean end of input. A line longer than `limit` or an
    /// end of input inside a line is an error.
    private static func readLine(fd: Int32, buffer: UnsafeMutablePointer<UInt8>, size: Int, start: inout Int, end: inout Int, eof: inout Bool, offset: inout Int, limit: Int) throws -> [UInt8]? {
        var line: [UInt8] = []
        let lineStart = offset
        while true {
            if start == end {
                if eof { break }
                try refill(fd: fd, buffer: buffer, size: size, start: &start, end: &end, eof: &eof)
                if start == end { break }
            }
            var i = start
            while i < end && buffer[i] != 10 { i += 1 }
            line.append(contentsOf: UnsafeBufferPointer(start: buffer + start, count: i - start))
            offset += i - start
            if i < end {
                start = i + 1
                offset += 1
                return line
            }
            start = end
            if line.count > limit {
                throw Y4MError.malformedFrame(offset: lineStart, frame: -1, reason: "no newline within \(limit) bytes")
            }
        }
        if line.isEmpty { return nil }
        throw Y4MError.malformedFrame(offset: offset, frame: -1, reason: "input ends inside a header line")
    }
}

/// Writes a YUV4MPEG2 stream to a file or stdout (`-`). Takes frames in I420, YUV422P or GREY as
/// they are; NV12 is written as I420 and YUYV/UYVY as 4:2:2 planar.
public final class Y4MWriter {
    public let path: String
    public let header: Y4MHeader
    public private(set) var framesWritten = 0
    private let fd: Int32
    private let ownsFD: Bool
    private var row: UnsafeMutablePointer<UInt8>
    private let rowCapacity: Int
    private var closed = false
    private let out: UnsafeMutablePointer<UInt8>
    private let outCapacity = 1 << 18
    private var outCount = 0
    /// Bytes written to the descriptor so far, and where the last whole frame (or the header)
    /// ends: a frame whose write fails (a full disk) is cut off there, so the file stays a y4m
    /// of whole frames that every reader takes.
    private var flushedBytes = 0
    private var wholeBytes = 0
    private let cutsTornFrames: Bool

    /// Creates `path` (`-` for stdout) and writes the stream header for frames of `format`. A
    /// regular file another program is writing is refused (`EBUSY`), untouched.
    /// `colorRange`: the `XCOLORRANGE` tag's value (`FULL`, the engine's own YUV, by default;
    /// nil: no tag, a range not known — as an input y4m without one). `pixelAspect`: the `A` tag
    /// (square pixels by default; `process` passes its input's on).
    public convenience init(path: String, format: FrameFormat, interval: FrameInterval? = nil, colorRange: String? = "FULL", pixelAspect: (Int, Int) = (1, 1)) throws {
        if path == "-" {
            try self.init(fileDescriptor: 1, path: "-", ownsDescriptor: false, format: format, interval: interval, colorRange: colorRange, pixelAspect: pixelAspect)
        } else {
            let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                let e = errno
                throw Y4MError.io(path: path, operation: "create", errno: e, message: String(cString: strerror(e)))
            }
            // A y4m another program is writing is left to it (`StreamFile.claim`).
            switch StreamFile.claim(fd, truncating: true) {
            case .claimed: break
            case .heldBy(let pid):
                Glibc.close(fd)
                throw Y4MError.io(path: path, operation: "create", errno: EBUSY, message: StreamFile.busyMessage(pid))
            case .truncateFailed(let e):
                Glibc.close(fd)
                throw Y4MError.io(path: path, operation: "create", errno: e, message: String(cString: strerror(e)))
            }
            try self.init(fileDescriptor: fd, path: path, ownsDescriptor: true, format: format, interval: interval, colorRange: colorRange, pixelAspect: pixelAspect)
        }
    }

    /// `whenBlocked`: see ``whenBlocked`` (set before the header is written, which may find a
    /// non-blocking pipe full too).
    /// `cutsTornFrames`: whether a failed frame is cut off the file (a regular file whose bytes are
    /// all this writer's, from offset 0; default: when the writer owns the descriptor).
    public init(fileDescriptor: Int32, path: String, ownsDescriptor: Bool, format: FrameFormat, interval: FrameInterval? = nil,
                colorRange: String? = "FULL", pixelAspect: (Int, Int) = (1, 1), cutsTornFrames: Bool? = nil, whenBlocked: (() throws -> Void)? = nil) throws {
        switch format.pixelFormat {
        case .i420, .nv12, .yuv422p, .yuyv, .uyvy, .grey: break
        default:
            if ownsDescriptor { Glibc.close(fileDescriptor) }
            throw Y4MError.formatMismatch(expected: "I420, NV12, YUV422P, YUYV, UYVY or GREY", got: "\(format.pixelFormat)")
        }
        self.fd = fileDescriptor
        self.ownsFD = ownsDescriptor
        self.cutsTornFrames = cutsTornFrames ?? ownsDescriptor
        self.path = path
        var h = Y4MHeader(width: format.width, height: format.height, pixelFormat: format.pixelFormat, fps: interval)
        h.extras = colorRange.map { ["XCOLORRANGE=\($0)"] } ?? []
        h.aspect = pixelAspect
        header = h
        self.whenBlocked = whenBlocked
        rowCapacity = max(format.width, 16) * 2
        row = .allocate(capacity: rowCapacity)
        out = .allocate(capacity: 1 << 18)
        try writeAll(Array(header.line.utf8))
        try flush()
        wholeBytes = flushedBytes
    }

    deinit {
        try? flush()
        row.deallocate()
        out.deallocate()
        if ownsFD && !closed { Glibc.close(fd) }
    }

    /// Writes one frame. When the write fails (a full disk, a closed pipe) the error is thrown
    /// and a regular file the writer created is cut back to the end of the last whole frame.
    public func write(_ frame: Frame) throws {
        let f = frame.format
        guard f.width == header.width, f.height == header.height, !f.pixelFormat.isCompressed, frame.capacity >= f.maxByteCount else {
            throw Y4MError.formatMismatch(expected: "\(header.width)x\(header.height)", got: "\(f)")
        }
        do {
            try writeFrame(frame)
        } catch {
            outCount = 0
            // Only a file this writer created (and so started at offset 0): a descriptor it was
            // given may hold what others wrote before (`>> file`).
            if cutsTornFrames, flushedBytes > wholeBytes, DescriptorWrite.cutRegularFile(fd, to: wholeBytes) {
                flushedBytes = wholeBytes
            }
            throw error
        }
        wholeBytes = flushedBytes
    }

    private func writeFrame(_ frame: Frame) throws {
        let f = frame.format
        try writeAll(Array("FRAME\n".utf8))
        let base = frame.data.assumingMemoryBound(to: UInt8.self)
        switch f.pixelFormat {
        case .i420, .yuv422p, .grey:
            for i in 0..<f.planeCount {
                let p = f.plane(i)
                for r in 0..<p.height { try writeAll(base + p.offset + r * p.bytesPerRow, p.width) }
            }
        case .nv12:
            let y = f.plane(0)
            for r in 0..<y.height { try writeAll(base + r * y.bytesPerRow, y.width) }
            let uv = f.plane(1)
            for k in 0..<2 {
                for r in 0..<uv.height {
                    let src = base + uv.offset + r * uv.bytesPerRow + k
                    for x in 0..<uv.width { row[x] = src[2 * x] }
                    try writeAll(row, uv.width)
                }
            }
        case .yuyv, .uyvy:
            let lo = f.pixelFormat == .yuyv ? 0 : 1, co = f.pixelFormat == .yuyv ? 1 : 0
            let cw = (f.width + 1) / 2
            for r in 0..<f.height {
                let src = base + r * f.bytesPerRow
                for x in 0..<f.width { row[x] = src[2 * x + lo] }
                try writeAll(row, f.width)
            }
            for k in 0..<2 {
                for r in 0..<f.height {
                    let src = base + r * f.bytesPerRow + co + 2 * k
                    for x in 0..<cw { row[x] = src[4 * x] }
                    try writeAll(row, cw)
                }
            }
        default:
            throw Y4MError.formatMismatch(expected: header.colorspace, got: "\(f.pixelFormat)")
        }
        try flush()
        framesWritten += 1
    }

    /// For a descriptor in non-blocking mode (a pipe its owner waits on): called when a write
    /// finds no room, to wait for some (or throw to give up). Without it such a write is an error.
    public let whenBlocked: (() throws -> Void)?

    /// Writes out what is buffered.
    public func flush() throws {
        var done = 0
        defer { flushedBytes += done; outCount = 0 }
        if let e = try DescriptorWrite.all(fd, out, outCount, written: &done, whenBlocked: whenBlocked.map { wait in { _ in try wait() } }) {
            throw Y4MError.io(path: path, operation: "write", errno: e, message: String(cString: strerror(e)))
        }
    }

    /// Closes the file (stdout is left open).
    public func close() {
        guard !closed else { return }
        try? flush()
        closed = true
        if ownsFD { Glibc.close(fd) }
    }

    private func writeAll(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBufferPointer { try writeAll($0.baseAddress!, $0.count) }
    }

    private func writeAll(_ p: UnsafePointer<UInt8>, _ count: Int) throws {
        var done = 0
        while done < count {
            if outCount == outCapacity { try flush() }
            let n = min(count - done, outCapacity - outCount)
            (out + outCount).update(from: p + done, count: n)
            outCount += n; done += n
        }
    }
}
