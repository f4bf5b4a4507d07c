import CLZ4
import Foundation
import Viewfinder
#if canImport(Glibc)
import Glibc
#endif

/// How a raw dump stores frames (decided per frame; every choice reads back bit-exact).
public enum RawDumpCompression: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Fit the cost to the data (the default). Packed 4:2:2 frames of 1 MiB and more are split into
    /// Y, U and V planes, each coded band by band on several threads as delta bit-planes (each
    /// byte less the one above it, 16 at a time in only as many bits as the largest difference
    /// needs: sensor noise of a few levels costs 4–5 bits a byte, where LZ4 finds almost nothing
    /// to repeat; 2.3–3.3x on noisy photographs against LZ4's 1.05–1.6x); a band the code cannot
    /// shrink is stored as it is. Other frames are compressed as with ``lz4``.
    case auto
    /// The packed bytes as LZ4 blocks at the writer's acceleration (version 2's only choice); a
    /// frame a probe finds LZ4 would shrink by less than 10 % is stored as it is.
    case lz4
    /// Every frame stored as it is: the speed of the write, no compression.
    case none

    public var description: String { rawValue }
}

/// Writes a raw dump (see ``RawDumpFormat``): one record per frame (compressed as
/// ``RawDumpCompression`` says), its payload written piece by piece (hashed while in the cache,
/// never copied into one buffer) and its header last, then an index and a trailer at ``close()``.
///
/// Not thread-safe: one thread appends (the dump output's). Buffers grow to the largest frame once
/// and are reused.
public final class RawDumpWriter {
    public let path: String
    public let format: FrameFormat
    /// LZ4 acceleration (1 = default; larger is faster and compresses less).
    public let acceleration: Int32
    private let file: OutputFile
    private var scratch: UnsafeMutableRawPointer
    private var scratchCapacity: Int
    private var header = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
    private var metadata: [UInt8] = []
    /// Where the header checksum's input is assembled (see `RawDumpFormat.recordSeed`).
    private var checksummed: [UInt8] = []
    /// How frames are stored.
    public let compression: RawDumpCompression
    /// Side-by-side compression of large frames (one thread when the writer has one).
    private let chunked: ChunkedLZ4
    /// Planes of a packed 4:2:2 frame (``RawDumpCompression/auto``).
    private var planar: UnsafeMutableRawPointer
    private var planarCapacity = 0
    /// Frames at least this large are compressed in chunks.
    static let chunkedMinimum = 1 << 20
    /// How ``RawDumpCompression/auto`` codes the planes of a split frame: delta bit-planes
    /// (version 4, the default) or LZ4 (what version 3 wrote; kept to test that those dumps read).
    package var planesInLZ4 = false
    /// Frames stored as they are because a probe said LZ4 would save too little, and frames
    /// compressed whole (for the summary and the report).
    public private(set) var framesStoredByProbe = 0
    public private(set) var framesCompressed = 0
    /// Frames split into planes before compression (``RawDumpCompression/auto``).
    public private(set) var framesSplit = 0
    /// Frames stored as they are, without trying to compress them, because the dump was behind a
    /// live source (``append(_:behindLiveSource:)``): compression would have made it fall further
    /// behind.
    public private(set) var framesStoredRawForBacklog = 0
    /// Test seam: each frame compressed takes at least this much longer (a slow compressor, as on a
    /// weak or busy machine). 0 outside tests.
    package var compressionDelayNanoseconds: UInt64 = 0
    /// The payload of the record being appended, as pieces written one after the other (the
    /// frame's own bytes, a chunk table, LZ4 blocks, planes stored as they are): no piece is copied
    /// into one buffer before the write.
    private let pieces = UnsafeMutablePointer<UnsafeRawBufferPointer>.allocate(capacity: 66)
    private var pieceCount = 0
    private var index: [DumpIndexEntry] = []
    private var audioIndex: [DumpAudioEntry] = []
    private var audioHeader = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
    private var closed = false
    private var preallocator: Preallocator?

    public var framesWritten: Int { index.count }
    /// Audio records (periods) written.
    public var audioPeriodsWritten: Int { audioIndex.count }
    public var bytesWritten: UInt64 { file.offset }
    /// Sum of the frames' raw sizes.
    public private(set) var rawBytes: UInt64 = 0

    /// The compression threads to use (default: one per core, at most 4), after checking both
    /// arguments.
    private static func compressionThreads(_ requested: Int?, acceleration: Int) throws -> Int {
        guard acceleration >= 1 && acceleration <= 65537 else { throw SinkError.invalidArgument(name: "acceleration", reason: "\(acceleration) is outside 1...65537") }
        let threads = requested ?? ChunkedLZ4.defaultThreads
        guard (1...64).contains(threads) else { throw SinkError.invalidArgument(name: "compressionThreads", reason: "\(threads) is outside 1...64") }
        return threads
    }

    /// Creates the dump and writes its stream header. `preallocate` reserves space ahead of the
    /// writes on a helper thread (see `Preallocator`): faster on tmpfs, less fragmented on disks.
    /// Frames of 1 MiB and more are compressed as LZ4 blocks side by side on `compressionThreads`
    /// threads (default: one per core, at most 4); 1 keeps them on the appending thread.
    /// `compression` chooses how frames are stored; `acceleration` is the LZ4 acceleration of
    /// ``RawDumpCompression/lz4`` (and of frames ``RawDumpCompression/auto`` does not split).
    public init(path: String, format: FrameFormat, interval: FrameInterval = FrameInterval(numerator: 0, denominator: 0), device: String = "", overwrite: Bool = false, acceleration: Int = 1, preallocate: Bool = true,
                compressionThreads: Int? = nil, compression: RawDumpCompression = .auto) throws {
        let threads = try Self.compressionThreads(compressionThreads, acceleration: acceleration)
        chunked = ChunkedLZ4(threads: threads, maximumChunks: min(64, 3 * threads))
        self.compression = compression
        planar = .allocate(byteCount: 64, alignment: 64)
        self.path = path
        self.format = format
        self.acceleration = Int32(acceleration)
        file = try OutputFile(path: path, exclusive: !overwrite, regularFile: true)
        scratchCapacity = 0
        scratch = .allocate(byteCount: 64, alignment: 64)
        let iso = ISO8601DateFormatter().string(from: Date())
        let info = DumpStreamInfo(pixelFormat: format.pixelFormat.rawValue, width: format.width, height: format.height, bytesPerRow: format.bytesPerRow,
                                  intervalNumerator: interval.numerator, intervalDenominator: interval.denominator, device: device, created: iso, codec: "lz4-block")
        let enc = JSONEncoder(); enc.outputFormatting = [.sortedKeys]
        let json = try Array(enc.encode(info))
        var h = RawDumpFormat.fileMagic
        withUnsafeBytes(of: RawDumpFormat.version.littleEndian) { h += $0 }
        h += [0, 0]
        withUnsafeBytes(of: UInt32(json.count).littleEndian) { h += $0 }
        h += json
        let sum = h.withUnsafeBytes { XXHash64.hash($0) }
        withUnsafeBytes(of: sum.littleEndian) { h += $0 }
        do { try h.withUnsafeBytes { try file.write($0) } } catch { file.discard(); throw error }
        if preallocate { preallocator = Preallocator(fd: file.fd) }
    }

    /// Reopens the dump at `path` to append frames after its last complete record: its index and
    /// trailer (or a torn tail) are cut off, its frames and sound kept, and ``close()`` writes an
    /// index of all of them. A session whose camera came back after a disconnection starts its
    /// outputs again; the dump goes on in the same file instead of being created anew (which
    /// truncated the frames already written).
    ///
    /// - Throws: ``DumpError/formatMismatch(path:expected:got:)`` when `format` is not the dump's,
    ///   ``DumpError/unsupported(_:)`` for a dump of another version, and the reader's errors for a
    ///   file that is not a dump. The file is left as it was on every error.
    init(appendingTo path: String, format: FrameFormat, acceleration: Int = 1, preallocate: Bool = true,
         compressionThreads: Int? = nil, compression: RawDumpCompression = .auto) throws {
        let threads = try Self.compressionThreads(compressionThreads, acceleration: acceleration)
        // The reader is closed before the writer opens: closing any descriptor of a file drops
        // this process's lock on it (``OutputFile``), which the writer takes.
        let (recordsEnd, entries, audioEntries) = try { () throws -> (UInt64, [DumpIndexEntry], [DumpAudioEntry]) in
            let reader = try RawDumpReader(path: path)
            guard reader.version == Int(RawDumpFormat.version) else {
                throw DumpError.unsupported("'\(path)' is a version \(reader.version) dump; only version \(RawDumpFormat.version) dumps are appended to")
            }
            guard reader.format == format else { throw DumpError.formatMismatch(path: path, expected: "\(reader.format)", got: "\(format)") }
            return (reader.recordsEnd, reader.entries, reader.audioEntries)
        }()
        file = try OutputFile(path: path, exclusive: false, truncate: false, regularFile: true)
        try file.cut(to: recordsEnd)
        index = entries
        audioIndex = audioEntries
        rawBytes = entries.reduce(0) { $0 &+ UInt64($1.rawLength) }
        chunked = ChunkedLZ4(threads: threads, maximumChunks: min(64, 3 * threads))
        self.compression = compression
        planar = .allocate(byteCount: 64, alignment: 64)
        self.path = path
        self.format = format
        self.acceleration = Int32(acceleration)
        scratchCapacity = 0
        scratch = .allocate(byteCount: 64, alignment: 64)
        if preallocate { preallocator = Preallocator(fd: file.fd) }
    }

    deinit {
        if !closed { try? close() }
        preallocator?.finish(size: Int64(file.offset))
        scratch.deallocate()
        planar.deallocate()
        pieces.deallocate()
    }

    /// Appends one frame: its valid bytes, exactly as they are, and its metadata.
    public func append(_ frame: Frame) throws {
        try append(frame, behindLiveSource: false)
    }

    /// Appends one frame as ``append(_:)`` does; when `behindLiveSource` (the caller is falling
    /// behind a live camera), the frame is stored as it is, without compressing it, whatever
    /// ``compression`` says: the record kind every reader reads, bit-exact, at the speed of the
    /// write. Counted in ``framesStoredRawForBacklog`` (frames of ``RawDumpCompression/none``
    /// are not counted: they are never compressed).
    public func append(_ frame: Frame, behindLiveSource: Bool) throws {
        guard !closed else { throw SinkError.invalidArgument(name: "dump", reason: "'\(path)' is closed") }
        let f = frame.format
        guard f.pixelFormat == format.pixelFormat, f.width == format.width, f.height == format.height else {
            throw DumpError.formatMismatch(path: path, expected: "\(format)", got: "\(f)")
        }
        let raw = frame.bytesUsed
        guard raw >= 0, raw <= Int(LZ4_MAX_INPUT_SIZE) else { throw SinkError.invalidArgument(name: "frame", reason: "\(raw) bytes") }
        let bound = max(Int(LZ4_compressBound(Int32(raw))), chunked.bound(raw))
        if bound > scratchCapacity {
            scratch.deallocate()
            scratch = .allocate(byteCount: bound, alignment: 64)
            scratchCapacity = bound
        }
        pieceCount = 0
        var stored = raw
        var flags: UInt8 = frame.pixelsModified ? RawDumpFormat.flagPixelsModified : 0
        /// The chunked job's table (in scratch) and chunks as the payload's pieces.
        func chunkPieces(_ k: Int) -> Int {
            let n = chunked.writeTable(into: scratch)
            pieces[0] = UnsafeRawBufferPointer(start: scratch, count: chunked.tableSize)
            for i in 0..<k { pieces[1 + i] = chunked.piece(i) }
            pieceCount = 1 + k
            return n
        }
        if compressionDelayNanoseconds > 0, raw > 0, compression != .none, !behindLiveSource {
            let until = monotonicNanoseconds() &+ compressionDelayNanoseconds
            while case let now = monotonicNanoseconds(), now < until { usleep(UInt32(min(until - now, 100_000_000) / 1000) + 1) }
        }
        if raw == 0 || compression == .none {
            // stored as it is
        } else if behindLiveSource {
            framesStoredRawForBacklog += 1   // stored as it is: the dump must catch up
        } else if compression == .auto, let order = Self.splittable(f, raw: raw) {
            // Y, U, V planes as chunks, split and compressed band by band on all the threads.
            framesSplit += 1
            if raw > planarCapacity {
                planar.deallocate()
                planar = .allocate(byteCount: raw, alignment: 64)
                planarCapacity = raw
            }
            let k = chunked.compressPlanar422(frame.data, width: f.width, height: f.height, order: order, planes: planar,
                                              lumaAcceleration: Self.autoLumaAcceleration, chromaAcceleration: Self.autoChromaAcceleration, probe: true,
                                              deltaPlanes: !planesInLZ4)
            let n = chunkPieces(k)
            if n < raw {
                framesCompressed += 1
                stored = n
                flags |= RawDumpFormat.flagChunked | RawDumpFormat.flagPlanar422 | (planesInLZ4 ? 0 : RawDumpFormat.flagDeltaPlanes)
            } else {
                framesStoredByProbe += 1   // nothing shrank: the packed frame as it is (read with one copy)
                pieceCount = 0
            }
        } else if !worthCompressing(frame.data, count: raw) {
            framesStoredByProbe += 1
        } else {
            framesCompressed += 1
            // Large frames as blocks side by side, others as one block. Whatever LZ4 cannot
            // shrink (sensor noise) is stored as it is: no slower to write, faster to read.
            if chunked.threadCount > 1, raw >= Self.chunkedMinimum {
                let n = chunkPieces(chunked.compressChunks(frame.data, count: raw, acceleration: acceleration, probe: false))
                if n < raw { stored = n; flags |= RawDumpFormat.flagChunked } else { pieceCount = 0 }
            } else {
                let n = Int(LZ4_compress_fast(frame.data.assumingMemoryBound(to: CChar.self), scratch.assumingMemoryBound(to: CChar.self),
                                              Int32(raw), Int32(scratchCapacity), acceleration))
                if n > 0 && n < raw {
                    stored = n
                    flags |= RawDumpFormat.flagCompressed
                    pieces[0] = UnsafeRawBufferPointer(start: scratch, count: n)
                    pieceCount = 1
                }
            }
        }
        if pieceCount == 0 && raw > 0 {
            pieces[0] = UnsafeRawBufferPointer(start: frame.data, count: raw)
            pieceCount = 1
        }
        DumpMetadataCodec.encode(frame.metadata, into: &metadata)
        let offset = file.offset
        var seed: UInt64 = 0
        header.withUnsafeMutableBytes { hb in
            let p = hb.baseAddress!
            LE.put(RawDumpFormat.recordMagic, p, 0)
            p.storeBytes(of: RawDumpFormat.RecordType.frame.rawValue, toByteOffset: 4, as: UInt8.self)
            p.storeBytes(of: flags, toByteOffset: 5, as: UInt8.self)
            LE.put(UInt16(0), p, 6)
            LE.put(UInt32(stored), p, 8)
            LE.put(UInt32(raw), p, 12)
            LE.put(f.pixelFormat.fourcc, p, 16)
            LE.put(UInt32(f.width), p, 20)
            LE.put(UInt32(f.height), p, 24)
            LE.put(UInt32(f.bytesPerRow), p, 28)
            LE.put(frame.sequence, p, 32)
            LE.put(frame.timestamp.nanoseconds, p, 40)
            p.storeBytes(of: RawDumpFormat.clockCode(frame.timestamp.clock), toByteOffset: 48, as: UInt8.self)
            p.storeBytes(of: UInt8(0), toByteOffset: 49, as: UInt8.self)
            LE.put(UInt16(0), p, 50)
            LE.put(UInt32(metadata.count), p, 52)
            LE.put(frame.receiveTime, p, 56)
            seed = RawDumpFormat.recordSeed(header: p, metadata: metadata, scratch: &checksummed)
        }
        try writeRecord(payloadLength: stored, seed: seed)
        preallocator?.advance(to: Int64(file.offset))
        index.append(DumpIndexEntry(offset: offset, sequence: frame.sequence, timestampNanoseconds: frame.timestamp.nanoseconds, rawLength: UInt32(raw), storedLength: UInt32(stored)))
        rawBytes &+= UInt64(raw)
    }

    /// Bytes of the payload hashed and written at a time: small enough to stay in the cache
    /// between the hash and the write's copy, so each byte is read from memory once.
    static let writePiece = 256 << 10

    /// Writes the record: the payload's pieces after the header's and metadata's place, each
    /// 256 KiB hashed and written while it is in the cache, then the header with the checksum,
    /// then the file's end moves past the record. On a failure the file is cut back to where the
    /// record started (it never ends in a half-written record).
    private func writeRecord(payloadLength: Int, seed: UInt64) throws {
        let start = file.offset
        var at = start + UInt64(RawDumpFormat.recordHeaderSize + metadata.count)
        var hasher = XXHash64.Streaming(seed: seed)
        do {
            for i in 0..<pieceCount {
                let p = pieces[i]
                var done = 0
                while done < p.count {
                    let n = min(Self.writePiece, p.count - done)
                    let slice = UnsafeRawBufferPointer(start: p.baseAddress! + done, count: n)
                    hasher.update(slice)
                    try file.pwrite(slice, at: at)
                    at += UInt64(n); done += n
                }
            }
            precondition(at - start == UInt64(RawDumpFormat.recordHeaderSize + metadata.count + payloadLength), "the payload's pieces add up to its length")
            let sum = hasher.digest()
            try header.withUnsafeMutableBytes { hb in
                LE.put(sum, hb.baseAddress!, 64)
                try file.pwrite(UnsafeRawBufferPointer(hb), at: start)
            }
            if !metadata.isEmpty { try metadata.withUnsafeBytes { try file.pwrite($0, at: start + UInt64(RawDumpFormat.recordHeaderSize)) } }
            try file.moveEnd(to: at)
        } catch {
            file.cutBack(to: start)
            throw error
        }
    }

    /// Appends one period of sound (type 3 record): its samples as they are, with the capture time
    /// of its first frame and its position in the device's stream. Nothing is allocated but the
    /// index entry (amortized).
    public func appendAudio(_ buffer: AudioBuffer, receiveTime: UInt64 = 0) throws {
        guard !closed else { throw SinkError.invalidArgument(name: "dump", reason: "'\(path)' is closed") }
        let payload = UnsafeRawBufferPointer(start: buffer.data.baseAddress, count: buffer.frames * buffer.format.bytesPerFrame)
        guard payload.count <= buffer.data.count, payload.count < Int(UInt32.max) else { throw SinkError.invalidArgument(name: "audio", reason: "\(buffer.data.count) bytes") }
        let offset = file.offset
        let period = buffer.period
        audioHeader.withUnsafeMutableBytes { hb in
            let p = hb.baseAddress!
            LE.put(RawDumpFormat.recordMagic, p, 0)
            p.storeBytes(of: RawDumpFormat.RecordType.audio.rawValue, toByteOffset: 4, as: UInt8.self)
            p.storeBytes(of: UInt8(0), toByteOffset: 5, as: UInt8.self)
            LE.put(UInt16(0), p, 6)
            LE.put(UInt32(payload.count), p, 8)
            LE.put(UInt32(payload.count), p, 12)
            LE.put(RawDumpFormat.audioCode(buffer.format.sampleFormat), p, 16)
            LE.put(UInt32(buffer.format.sampleRate), p, 20)
            LE.put(UInt32(buffer.format.channels), p, 24)
            LE.put(UInt32(period.frames), p, 28)
            LE.put(period.position, p, 32)
            LE.put(period.timestamp.nanoseconds, p, 40)
            p.storeBytes(of: RawDumpFormat.clockCode(period.timestamp.clock), toByteOffset: 48, as: UInt8.self)
            p.storeBytes(of: UInt8(period.discontinuity ? 1 : 0), toByteOffset: 49, as: UInt8.self)
            LE.put(UInt16(0), p, 50)
            LE.put(UInt32(0), p, 52)
            LE.put(receiveTime, p, 56)
            let hh = XXHash64.hash(UnsafeRawBufferPointer(start: p, count: 64))
            LE.put(XXHash64.hash(payload, seed: hh), p, 64)
        }
        try audioHeader.withUnsafeBytes { hb in try file.writev([hb, payload]) }
        preallocator?.advance(to: Int64(file.offset))
        audioIndex.append(DumpAudioEntry(offset: offset, position: period.position, timestampNanoseconds: period.timestamp.nanoseconds, rawLength: UInt32(payload.count), storedLength: UInt32(payload.count)))
    }

    /// LZ4 accelerations of the luma and chroma chunks of a split frame (``RawDumpCompression/auto``).
    /// On 1080p YUYV of a photograph with sensor noise (this machine, one core): luma at 64 shrinks
    /// 1.10x in 1.9 ms (at 1: 1.53x in 6.1 ms), chroma at 32 2.48x in 2.7 ms (at 1: 2.91x in
    /// 3.6 ms); the packed frame at 1: 1.60x in 11.4 ms. Luma that shrinks by less than 10 % is
    /// stored as it is.
    static let autoLumaAcceleration: Int32 = 64, autoChromaAcceleration: Int32 = 32

    /// The byte order when `auto` may split a frame of `format` into planes: packed 4:2:2 of
    /// 1 MiB and more, even width, rows without padding, all of the frame's bytes used.
    static func splittable(_ format: FrameFormat, raw: Int) -> YUVSplit.Packed422Order? {
        let order: YUVSplit.Packed422Order
        switch format.pixelFormat {
        case .yuyv: order = .yuyv
        case .uyvy: order = .uyvy
        default: return nil
        }
        guard raw >= chunkedMinimum, format.width % 2 == 0, format.bytesPerRow == 2 * format.width, raw == format.bytesPerRow * format.height else { return nil }
        return order
    }

    /// Bytes of each probe, and how many probes a frame gets (spread over its height).
    static let probeBytes = 16 << 10, probeCount = 4
    /// A probe that LZ4 shrinks to more than this fraction says the frame is not worth it.
    static let probeKeepRatio = 0.9

    /// Whether LZ4 would save at least 10 % of this frame, judged by compressing four 16 KiB
    /// samples spread over it (about 1.5 % of the work of compressing a 1080p frame). Sensor
    /// noise leaves LZ4 nothing to find: such frames are stored as they are, at the speed of the
    /// write, instead of paying a full compression that would then be thrown away. Small frames are
    /// always compressed whole.
    func worthCompressing(_ data: UnsafeMutableRawPointer, count: Int) -> Bool {
        let n = Self.probeBytes, k = Self.probeCount
        guard count >= 4 * n * k else { return true }
        var stored = 0
        for i in 0..<k {
            let start = (count - n) * (2 * i + 1) / (2 * k)
            let c = LZ4_compress_fast((data + start).assumingMemoryBound(to: CChar.self), scratch.assumingMemoryBound(to: CChar.self),
                                      Int32(n), Int32(scratchCapacity), acceleration)
            stored += c > 0 ? Int(c) : n
        }
        return Double(stored) < Self.probeKeepRatio * Double(n * k)
    }

    /// Writes the index record and the trailer. The file is complete without them (a reader
    /// rebuilds the index), they only make opening instant.
    public func close() throws {
        guard !closed else { return }
        closed = true
        var payload = [UInt8]()
        payload.reserveCapacity((index.count + audioIndex.count) * RawDumpFormat.indexEntrySize)
        func entry(_ offset: UInt64, _ a: UInt64, _ t: UInt64, _ raw: UInt32, _ stored: UInt32) {
            withUnsafeBytes(of: offset.littleEndian) { payload += $0 }
            withUnsafeBytes(of: a.littleEndian) { payload += $0 }
            withUnsafeBytes(of: t.littleEndian) { payload += $0 }
            withUnsafeBytes(of: raw.littleEndian) { payload += $0 }
            withUnsafeBytes(of: stored.littleEndian) { payload += $0 }
        }
        for e in index { entry(e.offset, e.sequence, e.timestampNanoseconds, e.rawLength, e.storedLength) }
        for e in audioIndex { entry(e.offset, e.position, e.timestampNanoseconds, e.rawLength, e.storedLength) }
        let indexOffset = file.offset
        var h = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
        h.withUnsafeMutableBytes { hb in
            let p = hb.baseAddress!
            LE.put(RawDumpFormat.recordMagic, p, 0)
            p.storeBytes(of: RawDumpFormat.RecordType.index.rawValue, toByteOffset: 4, as: UInt8.self)
            LE.put(UInt32(payload.count), p, 8)
            LE.put(UInt32(payload.count), p, 12)
            LE.put(UInt64(index.count), p, 32)
            LE.put(UInt64(audioIndex.count), p, 40)
            let hh = XXHash64.hash(UnsafeRawBufferPointer(start: p, count: 64))
            LE.put(payload.withUnsafeBytes { XXHash64.hash($0, seed: hh) }, p, 64)
        }
        var trailer = RawDumpFormat.trailerMagic
        withUnsafeBytes(of: indexOffset.littleEndian) { trailer += $0 }
        defer { preallocator?.finish(size: Int64(file.offset)); preallocator = nil }
        try h.withUnsafeBytes { a in try payload.withUnsafeBytes { b in try trailer.withUnsafeBytes { c in try file.writev([a, b, c]) } } }
    }

    /// Flushes the data to the disk.
    public func sync() throws { try file.sync() }
}

/// What the reader found at the end of a dump that was not closed cleanly.
public struct DumpDamage: Sendable, Equatable {
    /// Where the first incomplete or damaged record starts.
    public var offset: UInt64
    /// Bytes from there to the end of the file, ignored.
    public var ignoredBytes: UInt64
    public var reason: String
}

/// Reads a raw dump: the stream header, the index (from the footer, or rebuilt by walking the
/// records), and frames by number, checked against their checksums and decompressed bit-exact.
///
/// Not thread-safe (one reader per thread); cheap to open twice.
public final class RawDumpReader {
    public let path: String
    /// What the stream header says (rebuilt from the frames when it is damaged: ``headerDamage``).
    public private(set) var info: DumpStreamInfo
    public let format: FrameFormat
    public private(set) var entries: [DumpIndexEntry] = []
    /// The audio records (version 2 dumps recorded with sound), in the order written.
    public private(set) var audioEntries: [DumpAudioEntry] = []
    /// The file's version (1, 2 or 3).
    public private(set) var version = 0
    /// Set when the file did not end with a valid index: a crash, a truncated copy, damage.
    public private(set) var damage: DumpDamage?
    /// Set when the stream header was damaged and the frames were recovered from their own
    /// records (the format from the first frame record; the rate, when the header's was unreadable,
    /// from the timestamps): what happened, for the user.
    public private(set) var headerDamage: String?
    /// Whether the index came from the footer (false: rebuilt by scanning).
    public private(set) var usedFooterIndex = false
    public let fileSize: UInt64
    private let fd: Int32
    /// The open file's size and modification time now (`fstat`): a replay tells by them that the
    /// file was cut or rewritten under it. Nil when `fstat` fails.
    public var currentFileState: (size: UInt64, modified: timespec)? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return (UInt64(max(0, st.st_size)), st.st_mtim)
    }
    private var scratch: UnsafeMutableRawPointer
    private var scratchCapacity: Int
    /// The planes of a planar record before they are interleaved.
    private var planar = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
    private var planarCapacity = 0
    /// Where the header checksum's input is assembled (see `RawDumpFormat.recordSeed`).
    private var checksummed: [UInt8] = []
    /// Decodes a chunked record's chunks side by side (nil: on the reading thread alone).
    private let decoder: ChunkedLZ4?
    /// Threads that decode a chunked record (the reading thread's included).
    public var decodeThreads: Int { decoder?.threadCount ?? 1 }
    private let headerEnd: UInt64
    /// The end of the last complete record (frame or sound): where an index starts, a torn tail
    /// begins, or the file ends. A writer appending to the dump goes on from here.
    private(set) var recordsEnd: UInt64 = 0

    public var frameCount: Int { entries.count }
    /// The largest raw frame, for sizing buffers.
    public var maxRawLength: Int { Int(entries.map(\.rawLength).max() ?? 0) }

    /// Opens `path`. With `verify`, every record's checksum is checked while the index is rebuilt
    /// (reads the whole file); otherwise only the record headers are walked and checksums are
    /// checked as frames are read. `decodeThreads` above 1 decodes the chunks of a compressed
    /// frame side by side on that many threads (the reading thread and helpers kept for the
    /// reader's life; at most 16), as the writer coded them: a 1080p frame of a noisy `auto` dump
    /// decodes in about 3.5 ms on one core.
    public init(path: String, verify: Bool = false, decodeThreads: Int = 1) throws {
        decoder = decodeThreads > 1 ? ChunkedLZ4(threads: min(16, decodeThreads), maximumChunks: 64) : nil
        self.path = path
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SinkError.fromErrno(path: path, operation: "open") }
        var st = stat()
        fstat(fd, &st)
        fileSize = UInt64(st.st_size)
        scratchCapacity = 1 << 16
        scratch = .allocate(byteCount: scratchCapacity, alignment: 64)
        do {
            var head = [UInt8](repeating: 0, count: 16)
            let got = try RawDumpReader.pread(fd, &head, 0, path)
            guard got >= 8, Array(head[0..<8]) == RawDumpFormat.fileMagic else {
                throw DumpError.notADump(path: path, reason: "no VFDUMP magic at the start")
            }
            guard got == 16 else {
                throw DumpError.corruptRecord(path: path, offset: 0, reason: "the file ends after \(fileSize) bytes, inside its header (truncated)")
            }
            version = Int(head[8]) | Int(head[9]) << 8
            let jsonLength = Int(head[12]) | Int(head[13]) << 8 | Int(head[14]) << 16 | Int(head[15]) << 24
            let header = try Self.streamHeader(fd, head: head, jsonLength: jsonLength, fileSize: fileSize, path: path)
            if let header {
                guard RawDumpFormat.readableVersions.contains(version) else { throw DumpError.unsupportedVersion(path: path, version: version) }
                guard let f = header.info.format else { throw DumpError.notADump(path: path, reason: "unknown format '\(header.info.pixelFormat)' \(header.info.width)x\(header.info.height)") }
                info = header.info
                format = f
                headerEnd = header.end
                if !(try loadFooterIndex()) { try scan(verify: verify) }
            } else {
                // The stream header is damaged (a flipped bit, a bad sector): every frame record
                // says its own format and has its own checksum, so the frames are recovered from
                // the first whole record on and only what the header alone said (the rate, the
                // device, the date) is lost or taken from what is left of it.
                let stated = jsonLength < 1 << 20 ? UInt64(16 + jsonLength + 8) : nil
                guard let first = try Self.firstRecords(fd, from: stated, fileSize: fileSize, path: path) else {
                    if jsonLength >= 1 << 20 || UInt64(16 + jsonLength + 8) > fileSize {
                        throw DumpError.notADump(path: path, reason: "stream header runs past the end")
                    }
                    throw DumpError.notADump(path: path, reason: "stream header checksum mismatch, and no whole frame record after it")
                }
                // The version may be the damaged part: the newest this build reads reads them all
                // (every difference between versions is an addition).
                version = Int(RawDumpFormat.version)
                headerEnd = first.start
                format = first.format
                info = DumpStreamInfo(pixelFormat: "", width: 0, height: 0, bytesPerRow: 0, intervalNumerator: 0, intervalDenominator: 0,
                                      device: "", created: "", codec: "")
                if !(try loadFooterIndex()) { try scan(verify: verify) }
                // What the damaged header still says, where it agrees with the frames: the format,
                // and the rate within 10 % of the timestamps' (else the timestamps').
                let unknownDevice = "unknown (the stream header is damaged)"
                var recovered = Self.partialInfo(fd, jsonLength: jsonLength, end: first.start, path: path)
                    ?? DumpStreamInfo(pixelFormat: "", width: 0, height: 0, bytesPerRow: 0, intervalNumerator: 0, intervalDenominator: 0,
                                      device: unknownDevice, created: "", codec: "lz4-block")
                // (1/30 s when neither the header nor the timestamps tell.)
                let measured = Self.interval(of: entries)
                let rateAgrees = recovered.intervalNumerator > 0 && recovered.intervalDenominator > 0
                    && (measured.map { abs(recovered.interval.seconds / $0.seconds - 1) <= 0.1 } ?? true)
                let rate = rateAgrees ? recovered.interval : measured ?? FrameInterval(numerator: 1, denominator: 30)
                if recovered.format != first.format || !rateAgrees {
                    recovered = DumpStreamInfo(pixelFormat: "\(first.format.pixelFormat)", width: first.format.width, height: first.format.height,
                                               bytesPerRow: first.format.bytesPerRow,
                                               intervalNumerator: rate.numerator, intervalDenominator: rate.denominator,
                                               device: recovered.device.isEmpty ? unknownDevice : recovered.device,
                                               created: recovered.created, codec: "lz4-block")
                }
                info = recovered
                headerDamage = "the stream header is damaged (its checksum does not match): the format was taken from the first frame record"
                    + (rateAgrees ? "" : measured != nil ? ", the frame rate from the timestamps" : ", the frame rate unknown (taken as 30 fps)")
            }
        } catch {
            close(fd)
            scratch.deallocate()
            planar.deallocate()
            throw error
        }
    }

    deinit {
        close(fd)
        scratch.deallocate()
        planar.deallocate()
    }

    /// The stream header when it is whole; nil when it is damaged (its checksum does not match, or
    /// its length runs past the file).
    private static func streamHeader(_ fd: Int32, head: [UInt8], jsonLength: Int, fileSize: UInt64, path: String) throws -> (info: DumpStreamInfo, end: UInt64)? {
        guard jsonLength < 1 << 20, UInt64(16 + jsonLength + 8) <= fileSize else { return nil }
        var rest = [UInt8](repeating: 0, count: jsonLength + 8)
        _ = try pread(fd, &rest, 16, path)
        let all = head + rest[0..<jsonLength]
        let sum = rest.withUnsafeBytes { LE.get($0.baseAddress!, jsonLength, UInt64.self) }
        guard all.withUnsafeBytes({ XXHash64.hash($0) }) == sum else { return nil }
        // A header whose checksum holds is what its writer wrote: JSON this build cannot read is
        // an error, not damage to recover from.
        let info: DumpStreamInfo
        do { info = try JSONDecoder().decode(DumpStreamInfo.self, from: Data(rest[0..<jsonLength])) } catch {
            let version = Int(head[8]) | Int(head[9]) << 8
            if !RawDumpFormat.readableVersions.contains(version) { throw DumpError.unsupportedVersion(path: path, version: version) }
            throw DumpError.notADump(path: path, reason: "its stream header does not read: \(error)")
        }
        return (info, UInt64(16 + jsonLength + 8))
    }

    /// The record whose header starts at `offset`: its header in `h`, its metadata and the seed of
    /// its checksum (header and metadata hashed; the payload goes on from it); nil when no record
    /// header is there (the file ends first, no magic, a metadata length no record has). Shared by
    /// the reads of frames and the walk over a dump whose header is damaged.
    private static func recordHead(_ fd: Int32, at offset: UInt64, path: String, header h: inout [UInt8], scratch: inout [UInt8]) throws -> (stored: UInt32, metadata: [UInt8], seed: UInt64, sum: UInt64)? {
        guard try pread(fd, &h, offset, path) == h.count else { return nil }
        let (magic, stored, metaLen, sum) = h.withUnsafeBytes { b -> (UInt32, UInt32, UInt32, UInt64) in
            let p = b.baseAddress!
            return (LE.get(p, 0, UInt32.self), LE.get(p, 8, UInt32.self), LE.get(p, 52, UInt32.self), LE.get(p, 64, UInt64.self))
        }
        guard magic == RawDumpFormat.recordMagic, metaLen < 1 << 16 else { return nil }
        var meta = [UInt8](repeating: 0, count: Int(metaLen))
        if metaLen > 0 { guard try pread(fd, &meta, offset + UInt64(RawDumpFormat.recordHeaderSize), path) == meta.count else { return nil } }
        let seed = h.withUnsafeBytes { RawDumpFormat.recordSeed(header: $0.baseAddress!, metadata: meta, scratch: &scratch) }
        return (stored, meta, seed, sum)
    }

    /// A whole record at `offset` (its checksum holds): its type, its length, and for a frame its
    /// format; nil when there is none.
    private final class RecordCheck {
        var h = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
        var scratch: [UInt8] = [], piece: [UInt8] = []

        func record(_ fd: Int32, at offset: UInt64, fileSize: UInt64, path: String) throws -> (type: UInt8, total: UInt64, format: FrameFormat?)? {
            guard offset + UInt64(RawDumpFormat.recordHeaderSize) <= fileSize,
                  let head = try RawDumpReader.recordHead(fd, at: offset, path: path, header: &h, scratch: &scratch) else { return nil }
            let total = UInt64(RawDumpFormat.recordHeaderSize) + UInt64(head.metadata.count) + UInt64(head.stored)
            guard offset + total <= fileSize else { return nil }
            let type = h[4]
            var format: FrameFormat?
            if type == RawDumpFormat.RecordType.frame.rawValue {
                let (fourcc, w, hgt, bpr) = h.withUnsafeBytes { b in
                    (LE.get(b.baseAddress!, 16, UInt32.self), LE.get(b.baseAddress!, 20, UInt32.self), LE.get(b.baseAddress!, 24, UInt32.self), LE.get(b.baseAddress!, 28, UInt32.self))
                }
                guard let pf = PixelFormat(fourcc: fourcc), w > 0, hgt > 0, w < 1 << 16, hgt < 1 << 16, bpr < 1 << 20 else { return nil }
                let minimum = FrameFormat.minimumBytesPerRow(pf, width: Int(w))
                format = FrameFormat(pf, width: Int(w), height: Int(hgt), bytesPerRow: pf == .mjpeg ? 0 : max(Int(bpr), minimum))
            } else if type != RawDumpFormat.RecordType.audio.rawValue {
                return nil
            }
            // Hashed in pieces of at most 1 MiB: the length is the damaged file's word, not a size
            // to allocate.
            var hasher = XXHash64.Streaming(seed: head.seed)
            var at = offset + UInt64(RawDumpFormat.recordHeaderSize) + UInt64(head.metadata.count), left = Int(head.stored)
            while left > 0 {
                if piece.count != min(left, 1 << 20) { piece = [UInt8](repeating: 0, count: min(left, 1 << 20)) }
                let n = try RawDumpReader.pread(fd, &piece, at, path)
                guard n == piece.count else { return nil }
                piece.withUnsafeBytes { hasher.update($0) }
                at += UInt64(n); left -= n
            }
            guard hasher.digest() == head.sum else { return nil }
            return (type, total, format)
        }

        /// The length of a damaged record at `offset` as its header states it, when a whole
        /// record starts right after it (so the length is the writer's, not the damage's); nil
        /// otherwise.
        func statedLength(_ fd: Int32, at offset: UInt64, fileSize: UInt64, path: String) throws -> UInt64? {
            guard offset + UInt64(RawDumpFormat.recordHeaderSize) <= fileSize,
                  let head = try RawDumpReader.recordHead(fd, at: offset, path: path, header: &h, scratch: &scratch) else { return nil }
            let total = UInt64(RawDumpFormat.recordHeaderSize) + UInt64(head.metadata.count) + UInt64(head.stored)
            guard offset + total <= fileSize, try record(fd, at: offset + total, fileSize: fileSize, path: path) != nil else { return nil }
            return total
        }
    }

    /// Where the records of a dump with a damaged header start, and the format of its first frame
    /// record. First the records are walked from where the header says they start, each checked,
    /// through any sound captured before the first frame and past records that are damaged too
    /// (skipped by the length their header states, when a whole record follows there; the
    /// reader's scan then leaves them out and counts them); when that fails (the length field is
    /// the damaged part), the file is searched from its start for the first whole frame record
    /// (read in 1 MiB pieces; at most 4096 places that start with a record's magic are tried).
    private static func firstRecords(_ fd: Int32, from stated: UInt64?, fileSize: UInt64, path: String) throws -> (start: UInt64, format: FrameFormat)? {
        let check = RecordCheck()
        if let stated {
            var offset = stated, skipped = 0
            for _ in 0..<100_000 {
                if let r = try check.record(fd, at: offset, fileSize: fileSize, path: path) {
                    if let f = r.format { return (stated, f) }
                    offset += r.total
                } else if skipped < 8, let total = try check.statedLength(fd, at: offset, fileSize: fileSize, path: path) {
                    skipped += 1
                    offset += total
                } else {
                    break
                }
            }
        }
        let piece = 1 << 20
        var bytes = [UInt8](repeating: 0, count: piece + 3)
        var base: UInt64 = 0, tried = 0
        while base < fileSize && tried < 4096 {
            let got = try pread(fd, &bytes, base, path)
            guard got >= 4 else { break }
            var i = base == 0 ? 16 : 0
            while i + 4 <= got && tried < 4096 {
                if bytes[i] == 0x56, bytes[i + 1] == 0x46, bytes[i + 2] == 0x52, bytes[i + 3] == 0x43, base + UInt64(i) != stated {
                    tried += 1
                    if let r = try check.record(fd, at: base + UInt64(i), fileSize: fileSize, path: path), let f = r.format { return (base + UInt64(i), f) }
                }
                i += 1
            }
            // The next piece starts where a magic could still begin (3 bytes back).
            base += UInt64(max(1, got - 3))
            if got < bytes.count { break }
        }
        return nil
    }

    /// The header's JSON read despite its checksum (the damage may be elsewhere in it); nil when
    /// it does not read.
    private static func partialInfo(_ fd: Int32, jsonLength: Int, end: UInt64, path: String) -> DumpStreamInfo? {
        guard jsonLength > 0, UInt64(16 + jsonLength) <= end else { return nil }
        var json = [UInt8](repeating: 0, count: jsonLength)
        guard (try? pread(fd, &json, 16, path)) == jsonLength else { return nil }
        return try? JSONDecoder().decode(DumpStreamInfo.self, from: Data(json))
    }

    /// The frame interval the timestamps show (the median step of the first frames, to the
    /// microsecond); nil when they show none (fewer than two frames, no step forward).
    private static func interval(of entries: [DumpIndexEntry]) -> FrameInterval? {
        let ts = entries.prefix(61).map(\.timestampNanoseconds)
        var steps: [UInt64] = []
        for (a, b) in zip(ts, ts.dropFirst()) where b > a { steps.append(b - a) }
        guard !steps.isEmpty else { return nil }
        steps.sort()
        // Rounded without adding first: a damaged timestamp can make a step near UInt64.max (found
        // by FuzzDump: `+ 500` trapped).
        let mid = steps[steps.count / 2]
        let us = max(1, mid / 1000 + (mid % 1000 >= 500 ? 1 : 0))
        return FrameInterval(numerator: UInt32(min(us, UInt64(UInt32.max))), denominator: 1_000_000)
    }

    static func pread(_ fd: Int32, _ buf: inout [UInt8], _ offset: UInt64, _ path: String) throws -> Int {
        try buf.withUnsafeMutableBytes { try pread(fd, $0, offset, path) }
    }
    static func pread(_ fd: Int32, _ buf: UnsafeMutableRawBufferPointer, _ offset: UInt64, _ path: String) throws -> Int {
        // An offset from a damaged index can be past what a file offset holds (found by FuzzDump:
        // off_t(offset) trapped): a corrupt record, not a crash.
        guard offset <= UInt64(off_t.max) - UInt64(buf.count) else {
            throw DumpError.corruptRecord(path: path, offset: offset, reason: "offset past the largest file offset")
        }
        var done = 0
        while done < buf.count {
            let n = Glibc.pread(fd, buf.baseAddress! + done, buf.count - done, off_t(offset) + off_t(done))
            if n < 0 { if errno == EINTR { continue }; throw SinkError.fromErrno(path: path, operation: "read") }
            if n == 0 { break }
            done += n
        }
        return done
    }

    private func ensureScratch(_ n: Int) {
        if n > scratchCapacity { scratch.deallocate(); scratch = .allocate(byteCount: n, alignment: 64); scratchCapacity = n }
    }

    private func loadFooterIndex() throws -> Bool {
        let ts = UInt64(RawDumpFormat.trailerSize)
        guard fileSize >= headerEnd + ts + UInt64(RawDumpFormat.recordHeaderSize) else { return false }
        var trailer = [UInt8](repeating: 0, count: RawDumpFormat.trailerSize)
        _ = try RawDumpReader.pread(fd, &trailer, fileSize - ts, path)
        guard Array(trailer[0..<8]) == RawDumpFormat.trailerMagic else { return false }
        let indexOffset = trailer.withUnsafeBytes { LE.get($0.baseAddress!, 8, UInt64.self) }
        guard indexOffset >= headerEnd, indexOffset + UInt64(RawDumpFormat.recordHeaderSize) <= fileSize - ts else { return false }
        var h = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
        _ = try RawDumpReader.pread(fd, &h, indexOffset, path)
        let (magic, type, stored, count, audioCount, sum) = h.withUnsafeBytes { b -> (UInt32, UInt8, UInt32, UInt64, UInt64, UInt64) in
            let p = b.baseAddress!
            return (LE.get(p, 0, UInt32.self), b[4], LE.get(p, 8, UInt32.self), LE.get(p, 32, UInt64.self), LE.get(p, 40, UInt64.self), LE.get(p, 64, UInt64.self))
        }
        guard magic == RawDumpFormat.recordMagic, type == RawDumpFormat.RecordType.index.rawValue,
              indexOffset + UInt64(RawDumpFormat.recordHeaderSize) + UInt64(stored) + ts == fileSize,
              count < 1 << 40, audioCount < 1 << 40, version >= 2 || audioCount == 0,
              UInt64(stored) == (count + audioCount) * UInt64(RawDumpFormat.indexEntrySize) else { return false }
        var payload = [UInt8](repeating: 0, count: Int(stored))
        _ = try RawDumpReader.pread(fd, &payload, indexOffset + UInt64(RawDumpFormat.recordHeaderSize), path)
        let hh = h.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<64])) }
        guard payload.withUnsafeBytes({ XXHash64.hash($0, seed: hh) }) == sum else { return false }
        var out: [DumpIndexEntry] = []
        var audio: [DumpAudioEntry] = []
        out.reserveCapacity(Int(count))
        audio.reserveCapacity(Int(audioCount))
        payload.withUnsafeBytes { b in
            let p = b.baseAddress!
            for i in 0..<Int(count + audioCount) {
                let o = i * RawDumpFormat.indexEntrySize
                let (off, a, t, raw, st) = (LE.get(p, o, UInt64.self), LE.get(p, o + 8, UInt64.self), LE.get(p, o + 16, UInt64.self), LE.get(p, o + 24, UInt32.self), LE.get(p, o + 28, UInt32.self))
                if i < Int(count) {
                    out.append(DumpIndexEntry(offset: off, sequence: a, timestampNanoseconds: t, rawLength: raw, storedLength: st))
                } else {
                    audio.append(DumpAudioEntry(offset: off, position: a, timestampNanoseconds: t, rawLength: raw, storedLength: st))
                }
            }
        }
        entries = out
        audioEntries = audio
        usedFooterIndex = true
        recordsEnd = indexOffset
        return true
    }

    /// Rebuilds the index by walking the records from the stream header on.
    private func scan(verify: Bool) throws {
        var offset = headerEnd
        var h = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
        entries = []
        audioEntries = []
        defer { recordsEnd = offset }
        while offset < fileSize {
            func stop(_ reason: String) { damage = DumpDamage(offset: offset, ignoredBytes: fileSize - offset, reason: reason) }
            guard fileSize - offset >= UInt64(RawDumpFormat.recordHeaderSize) else { stop("incomplete record header"); return }
            _ = try RawDumpReader.pread(fd, &h, offset, path)
            let (magic, type, stored, raw, metaLen, seq, ts) = h.withUnsafeBytes { b -> (UInt32, UInt8, UInt32, UInt32, UInt32, UInt64, UInt64) in
                let p = b.baseAddress!
                return (LE.get(p, 0, UInt32.self), b[4], LE.get(p, 8, UInt32.self), LE.get(p, 12, UInt32.self), LE.get(p, 52, UInt32.self), LE.get(p, 32, UInt64.self), LE.get(p, 40, UInt64.self))
            }
            guard magic == RawDumpFormat.recordMagic else { stop("no record magic"); return }
            let total = UInt64(RawDumpFormat.recordHeaderSize) + UInt64(metaLen) + UInt64(stored)
            guard metaLen < 1 << 16, offset + total <= fileSize else { stop("record runs past the end of the file"); return }
            if type == RawDumpFormat.RecordType.index.rawValue {
                // An index record ends the frames; whatever follows is the trailer or damage.
                let end = offset + total
                let trailer = UInt64(RawDumpFormat.trailerSize)
                if end < fileSize && fileSize < end + trailer {
                    // Cut inside the trailer: every record is whole, only the trailer's tail is gone.
                    damage = DumpDamage(offset: end, ignoredBytes: fileSize - end, reason: "the trailer cut short (\(fileSize - end) of its \(trailer) bytes; every record before it is whole)")
                } else if end != fileSize && end + trailer != fileSize {
                    damage = DumpDamage(offset: end, ignoredBytes: fileSize - end, reason: "data after the index")
                }
                return
            }
            if type == RawDumpFormat.RecordType.audio.rawValue && version >= 2 {
                let entry = DumpAudioEntry(offset: offset, position: seq, timestampNanoseconds: ts, rawLength: raw, storedLength: stored)
                if verify {
                    do { _ = try checkedPayload(DumpIndexEntry(offset: offset, sequence: seq, timestampNanoseconds: ts, rawLength: raw, storedLength: stored), frameNumber: audioEntries.count) } catch { stop("\(error)"); return }
                }
                audioEntries.append(entry)
                offset += total
                continue
            }
            guard type == RawDumpFormat.RecordType.frame.rawValue else { stop("unknown record type \(type)"); return }
            let entry = DumpIndexEntry(offset: offset, sequence: seq, timestampNanoseconds: ts, rawLength: raw, storedLength: stored)
            if verify {
                do { _ = try checkedPayload(entry, frameNumber: entries.count) } catch { stop("\(error)"); return }
            }
            entries.append(entry)
            offset += total
        }
    }

    /// Reads the record of `entry`, verifies its checksum and returns (header, metadata, stored
    /// payload). The payload lands in scratch, or straight in `direct` when the record is stored
    /// uncompressed and fits there (a replay of a noisy dump then copies each frame once, not twice).
    private func checkedPayload(_ e: DumpIndexEntry, frameNumber: Int, direct: UnsafeMutableRawBufferPointer? = nil) throws -> (header: [UInt8], metadata: [UInt8], payload: UnsafeRawBufferPointer) {
        var h = [UInt8](repeating: 0, count: RawDumpFormat.recordHeaderSize)
        guard let head = try Self.recordHead(fd, at: e.offset, path: path, header: &h, scratch: &checksummed) else {
            throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "no whole record header there")
        }
        guard head.stored == e.storedLength else {
            throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "header does not match the index")
        }
        let (stored, meta, hh, sum) = head
        let buf: UnsafeMutableRawBufferPointer
        if let direct, h[5] & (RawDumpFormat.flagCompressed | RawDumpFormat.flagChunked) == 0, Int(stored) <= direct.count {
            buf = UnsafeMutableRawBufferPointer(rebasing: direct[0..<Int(stored)])
        } else {
            ensureScratch(Int(stored))
            buf = UnsafeMutableRawBufferPointer(start: scratch, count: Int(stored))
        }
        // Read in pieces and hash each while it is in the cache (one pass over memory, not two).
        let payloadOffset = e.offset + UInt64(RawDumpFormat.recordHeaderSize) + UInt64(meta.count)
        let (fd, path) = (fd, path)
        let (got, filled) = try XXHash64.hashWhileFilling(UnsafeRawPointer(buf.baseAddress!), count: buf.count, seed: hh) { offset, n in
            try RawDumpReader.pread(fd, UnsafeMutableRawBufferPointer(rebasing: buf[offset..<(offset + n)]), payloadOffset + UInt64(offset), path)
        }
        guard filled == Int(stored) else { throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "truncated payload") }
        guard got == sum else { throw DumpError.checksumMismatch(path: path, frame: frameNumber, offset: e.offset) }
        return (h, meta, UnsafeRawBufferPointer(buf))
    }

    /// Reads frame `i` into `frame` (whose capacity must hold its raw bytes): pixels, format,
    /// sequence, timestamps and metadata, exactly as recorded.
    public func read(_ i: Int, into frame: Frame) throws {
        guard i >= 0 && i < entries.count else { throw DumpError.frameOutOfRange(path: path, index: i, count: entries.count) }
        let e = entries[i]
        let (h, meta, payload) = try checkedPayload(e, frameNumber: i, direct: UnsafeMutableRawBufferPointer(start: frame.data, count: frame.capacity))
        guard Int(e.rawLength) <= frame.capacity else {
            throw DumpError.formatMismatch(path: path, expected: "a buffer of \(e.rawLength) bytes", got: "\(frame.capacity)")
        }
        let fields = h.withUnsafeBytes { b -> (UInt8, UInt32, UInt32, UInt32, UInt32, UInt64, UInt64, UInt8, UInt64) in
            let p = b.baseAddress!
            return (b[5], LE.get(p, 16, UInt32.self), LE.get(p, 20, UInt32.self), LE.get(p, 24, UInt32.self), LE.get(p, 28, UInt32.self),
                    LE.get(p, 32, UInt64.self), LE.get(p, 40, UInt64.self), b[48], LE.get(p, 56, UInt64.self))
        }
        let (flags, fourcc, w, hgt, bpr, seq, ts, clock, receive) = fields
        guard let pf = PixelFormat(fourcc: fourcc), w > 0, hgt > 0 else {
            throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "unknown pixel format \(fourCCString(fourcc)) \(w)x\(hgt)")
        }
        if flags & RawDumpFormat.flagPlanar422 != 0 {
            try readPlanar(payload, entry: e, flags: flags, format: FrameFormat(pf, width: Int(w), height: Int(hgt), bytesPerRow: Int(bpr)), into: frame)
        } else if flags & RawDumpFormat.flagChunked != 0 {
            do {
                try decodeChunks(payload, into: frame.data, rawLength: Int(e.rawLength))
            } catch {
                throw DumpError.corruptRecord(path: path, offset: e.offset, reason: error.reason)
            }
        } else if flags & RawDumpFormat.flagCompressed != 0 {
            let n = LZ4_decompress_safe(payload.baseAddress!.assumingMemoryBound(to: CChar.self), frame.data.assumingMemoryBound(to: CChar.self), Int32(payload.count), Int32(frame.capacity))
            guard n == Int32(e.rawLength) else { throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "LZ4 block decodes to \(n) bytes, expected \(e.rawLength)") }
        } else {
            guard payload.count == Int(e.rawLength) else { throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "stored length differs from raw length") }
            if payload.count > 0 && payload.baseAddress != UnsafeRawPointer(frame.data) {
                frame.data.copyMemory(from: payload.baseAddress!, byteCount: payload.count)
            }
        }
        frame.format = FrameFormat(pf, width: Int(w), height: Int(hgt), bytesPerRow: Int(bpr))
        frame.bytesUsed = Int(e.rawLength)
        frame.sequence = seq
        frame.timestamp = Timestamp(nanoseconds: ts, clock: RawDumpFormat.clock(clock))
        frame.receiveTime = receive
        frame.pixelsModified = flags & RawDumpFormat.flagPixelsModified != 0
        frame.metadata = meta.withUnsafeBytes { DumpMetadataCodec.decode($0) }
    }

    /// A chunked payload decoded on the decoder's threads, or on this one when there is none.
    private func decodeChunks(_ payload: UnsafeRawBufferPointer, into destination: UnsafeMutableRawPointer, rawLength: Int,
                              deltaPlanesWidth: Int? = nil) throws(ChunkedLZ4.ChunkError) {
        if let decoder {
            try decoder.decompress(payload, into: destination, rawLength: rawLength, deltaPlanesWidth: deltaPlanesWidth)
        } else {
            try ChunkedLZ4.decompress(payload, into: destination, rawLength: rawLength, deltaPlanesWidth: deltaPlanesWidth)
        }
    }

    /// Decodes a planar record (version 3, LZ4; version 4, delta bit-planes): the chunks into the planes, then the planes
    /// interleaved back into the packed frame.
    private func readPlanar(_ payload: UnsafeRawBufferPointer, entry e: DumpIndexEntry, flags: UInt8, format f: FrameFormat, into frame: Frame) throws {
        let order: YUVSplit.Packed422Order? = f.pixelFormat == .yuyv ? .yuyv : (f.pixelFormat == .uyvy ? .uyvy : nil)
        guard let order, version >= 3, flags & RawDumpFormat.flagChunked != 0, f.width % 2 == 0, f.bytesPerRow == 2 * f.width, Int(e.rawLength) == f.bytesPerRow * f.height else {
            throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "planar record of \(f) (\(e.rawLength) bytes) is not unpadded packed 4:2:2")
        }
        let raw = Int(e.rawLength)
        if raw > planarCapacity {
            planar.deallocate()
            planar = .allocate(byteCount: raw, alignment: 64)
            planarCapacity = raw
        }
        let deltaPlanes = flags & RawDumpFormat.flagDeltaPlanes != 0
        guard !deltaPlanes || version >= 4 else {
            throw DumpError.corruptRecord(path: path, offset: e.offset, reason: "delta bit-planes in a version \(version) dump")
        }
        do {
            try decodeChunks(payload, into: planar, rawLength: raw, deltaPlanesWidth: deltaPlanes ? f.width : nil)
        } catch {
            throw DumpError.corruptRecord(path: path, offset: e.offset, reason: error.reason)
        }
        let y = planar.assumingMemoryBound(to: UInt8.self), u = y + f.width * f.height, v = u + f.width / 2 * f.height
        YUVSplit.mergePacked422(y: y, u: u, v: v, width: f.width, height: f.height, order: order,
                                into: frame.data.assumingMemoryBound(to: UInt8.self), bytesPerRow: f.bytesPerRow)
    }

    /// Reads audio record `i`: its samples (appended to `samples`, interleaved, as captured), format,
    /// position and capture time, checked against its checksum.
    @discardableResult
    public func readAudio(_ i: Int, into samples: inout [UInt8]) throws -> DumpAudioPeriod {
        guard i >= 0 && i < audioEntries.count else { throw DumpError.frameOutOfRange(path: path, index: i, count: audioEntries.count) }
        let a = audioEntries[i]
        let (h, _, payload) = try checkedPayload(DumpIndexEntry(offset: a.offset, sequence: a.position, timestampNanoseconds: a.timestampNanoseconds, rawLength: a.rawLength, storedLength: a.storedLength), frameNumber: i)
        let (type, code, rate, channels, frames, position, ts, clock, gap, receive) = h.withUnsafeBytes { b in
            let p = b.baseAddress!
            return (b[4], LE.get(p, 16, UInt32.self), LE.get(p, 20, UInt32.self), LE.get(p, 24, UInt32.self), LE.get(p, 28, UInt32.self),
                    LE.get(p, 32, UInt64.self), LE.get(p, 40, UInt64.self), b[48], b[49], LE.get(p, 56, UInt64.self))
        }
        guard type == RawDumpFormat.RecordType.audio.rawValue, let sf = RawDumpFormat.audioFormat(code), rate > 0, channels > 0 else {
            throw DumpError.corruptRecord(path: path, offset: a.offset, reason: "not a valid audio record")
        }
        // frames and channels are 32-bit fields of a possibly damaged record: their product can
        // overflow (FuzzDump found it), so it is checked.
        let (perFrame, o1) = sf.bytesPerSample.multipliedReportingOverflow(by: Int(channels))
        let (bytes, o2) = perFrame.multipliedReportingOverflow(by: Int(frames))
        guard !o1, !o2, bytes == payload.count else {
            throw DumpError.corruptRecord(path: path, offset: a.offset, reason: "audio record of \(frames) frames × \(channels) channels does not match its \(payload.count) bytes")
        }
        samples.append(contentsOf: payload)
        return DumpAudioPeriod(format: AudioStreamFormat(sampleFormat: sf, sampleRate: Int(rate), channels: Int(channels)), frames: Int(frames),
                               position: position, timestamp: Timestamp(nanoseconds: ts, clock: RawDumpFormat.clock(clock)), discontinuity: gap != 0, receiveTime: receive)
    }
}
