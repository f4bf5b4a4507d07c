import CLZ4
import CViewfinderKernels
import Foundation
import Viewfinder

/// Compresses one frame as independent LZ4 blocks on a few threads (the caller's and helpers kept
/// for the writer's life), into a chunked payload (see ``RawDumpFormat``):
///
/// ```text
/// u32 chunk count k; k × (u32 raw length, u32 stored length); then the k chunks' bytes in order,
/// each an LZ4 block, or the raw bytes when stored length == raw length
/// ```
///
/// LZ4 is the dump's cost on camera frames (~11 ms for a noisy 1080p YUYV frame on one core here):
/// blocks compressed side by side bring it to the time of one block. A job may hold more chunks
/// than there are threads (thread j takes chunks j, j + threads, …), each with its own LZ4
/// acceleration, and with `probe` each chunk first compresses two 16 KiB samples and is stored as
/// it is when they shrink by less than 10 % (sensor-noise luma). The job is handed over in fields,
/// not a closure, so nothing is allocated per frame. Used by one thread at a time.
final class ChunkedLZ4 {
    private let core: ChunkedLZ4Core
    private var threads: [EngineThread] = []
    /// Threads compressing (the caller's included).
    var threadCount: Int { core.threads }
    /// The most chunks one job may have.
    var maximumChunks: Int { core.maximumChunks }
    /// Threads a dump's writer compresses and its replay decodes on unless told otherwise: one
    /// per core, at most 4.
    static var defaultThreads: Int { min(4, ProcessInfo.processInfo.activeProcessorCount) }

    init(threads: Int, maximumChunks: Int? = nil) {
        core = ChunkedLZ4Core(threads: threads, maximumChunks: maximumChunks ?? threads)
        for i in 1..<core.threads {
            let core = self.core   // the helpers hold the core, not this owner (whose deinit stops them)
            self.threads.append(EngineThread(name: "vf-lz4-\(i)") { core.work(i) })
        }
    }

    deinit {
        core.stop()
        for t in threads { t.join() }
    }

    /// The largest payload a frame of `count` bytes can need (any chunk count up to the maximum).
    func bound(_ count: Int) -> Int { core.bound(count) }

    /// Compresses `count` bytes as one chunk per thread, all at `acceleration`.
    func compress(_ source: UnsafeRawPointer, count: Int, acceleration: Int32, into payload: UnsafeMutableRawPointer) -> Int {
        core.compress(source, count: count, chunks: core.threads, accelerations: { _ in acceleration }, probe: false, into: payload)
    }

    /// Compresses `count` bytes as `chunks` chunks (at most ``maximumChunks``), chunk `i` at
    /// `acceleration(i)`; with `probe`, chunks whose samples shrink by less than 10 % are stored.
    func compress(_ source: UnsafeRawPointer, count: Int, chunks: Int, accelerations: (Int) -> Int32, probe: Bool, into payload: UnsafeMutableRawPointer) -> Int {
        core.compress(source, count: count, chunks: chunks, accelerations: accelerations, probe: probe, into: payload)
    }

    /// Splits a packed 4:2:2 frame (YUYV or UYVY, rows without padding) into Y, U and V planes at
    /// `planes` (its size) and compresses them, both on all the threads at once: thread `b` splits
    /// its own band of rows and compresses that band of each plane (luma at `lumaAcceleration`,
    /// chroma at `chromaAcceleration`), so the split costs no pass of its own on one core and no
    /// thread waits for another's rows. The chunks, in order, are the Y plane's bands, then U's,
    /// then V's: concatenated, exactly the planes (the version 3 planar record). With `probe`,
    /// chunks whose samples shrink by less than 10 % are stored as they are. Nothing is packed
    /// into one buffer: read the table with ``writeTable(into:)`` and the chunks with
    /// ``piece(_:)``. Returns the chunk count. With `deltaPlanes`, each chunk is coded as delta
    /// bit-planes (`vf_dbp_encode`: each byte less the byte above it, 16 at a time in as many bits
    /// as the largest needs; the version 4 record) instead of LZ4, and stored as it is when that
    /// does not make it smaller; the accelerations and `probe` are then not used.
    func compressPlanar422(_ packed: UnsafeRawPointer, width: Int, height: Int, order: YUVSplit.Packed422Order, planes: UnsafeMutableRawPointer,
                           lumaAcceleration: Int32, chromaAcceleration: Int32, probe: Bool, deltaPlanes: Bool = false) -> Int {
        core.compressPlanar422(packed, width: width, height: height, order: order, planes: planes,
                               lumaAcceleration: lumaAcceleration, chromaAcceleration: chromaAcceleration, probe: probe, deltaPlanes: deltaPlanes)
    }

    /// Compresses `count` bytes as one chunk per thread at `acceleration`, without packing them:
    /// the pieces are read with ``writeTable(into:)`` and ``piece(_:)``. Returns the chunk count.
    func compressChunks(_ source: UnsafeRawPointer, count: Int, acceleration: Int32, probe: Bool) -> Int {
        core.runJob(source, count: count, chunks: core.threads, accelerations: { _ in acceleration }, probe: probe)
    }

    /// Bytes of the chunk table of the last job (`4 + 8 × chunks`).
    var tableSize: Int { core.tableSize }
    /// Writes the last job's chunk table (``tableSize`` bytes) at `table`; returns the payload's
    /// length (table and chunks).
    func writeTable(into table: UnsafeMutableRawPointer) -> Int { core.writeTable(into: table) }
    /// Chunk `i` of the last job as it is stored: its LZ4 block, or its raw bytes in the source
    /// (stored as they are, not copied).
    func piece(_ i: Int) -> UnsafeRawBufferPointer { core.piece(i) }

    /// Decodes a chunked payload into `destination` (`rawLength` bytes) on this thread. Throws a
    /// description of what is wrong with a damaged payload.
    ///
    /// `deltaPlanesWidth`: the chunks are a planar 4:2:2 frame of this width in delta bit-planes
    /// (version 4): Y's bands, then U's, then V's (a third of the chunks each), rows of `width`
    /// and `width / 2` bytes.
    static func decompress(_ payload: UnsafeRawBufferPointer, into destination: UnsafeMutableRawPointer, rawLength: Int,
                           deltaPlanesWidth: Int? = nil) throws(ChunkError) {
        try walkTable(payload, rawLength: rawLength, deltaPlanesWidth: deltaPlanesWidth) { (i, chunk) throws(ChunkError) in
            let n = decodeChunk(chunk, payload: payload.baseAddress!, into: destination)
            if n != chunk.raw { throw decodeError(i, chunk, got: n) }
        }
    }

    /// Decodes a chunked payload as ``decompress(_:into:rawLength:deltaPlanesWidth:)`` does, its
    /// chunks side by side on this object's threads (the caller's and the helpers: thread j decodes
    /// chunks j, j + threads, …). The table is checked whole before any chunk is decoded.
    func decompress(_ payload: UnsafeRawBufferPointer, into destination: UnsafeMutableRawPointer, rawLength: Int,
                    deltaPlanesWidth: Int? = nil) throws(ChunkError) {
        guard core.threads > 1 else {
            try Self.decompress(payload, into: destination, rawLength: rawLength, deltaPlanesWidth: deltaPlanesWidth)
            return
        }
        let core = self.core
        var k = 0
        try Self.walkTable(payload, rawLength: rawLength, deltaPlanesWidth: deltaPlanesWidth) { (i, chunk) throws(ChunkError) in
            guard i < core.maximumChunks else { throw ChunkError("chunk table of more than \(core.maximumChunks) chunks") }
            core.decodeChunks[i] = chunk
            k = i + 1
        }
        core.runDecode(payload.baseAddress!, into: destination, chunks: k)
        for i in 0..<k where core.decoded[i] != core.decodeChunks[i].raw {
            throw Self.decodeError(i, core.decodeChunks[i], got: core.decoded[i])
        }
    }

    /// One chunk of a payload's table: where its bytes are, where they go, and how they are coded.
    struct Chunk {
        /// Offset of its stored bytes in the payload, and their count.
        var at = 0, stored = 0
        /// Offset of its decoded bytes in the frame, and their count.
        var out = 0, raw = 0
        /// Delta bit-planes of rows this long; 0: an LZ4 block (or stored, when stored == raw).
        var rowBytes = 0
    }

    /// Checks a payload's chunk table against the payload and the frame and calls `visit` for each
    /// chunk in order; throws at the first thing wrong.
    static func walkTable(_ payload: UnsafeRawBufferPointer, rawLength: Int, deltaPlanesWidth: Int?,
                          _ visit: (Int, Chunk) throws(ChunkError) -> Void) throws(ChunkError) {
        guard payload.count >= 4, let base = payload.baseAddress else { throw ChunkError("no chunk table") }
        let k = Int(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
        guard k >= 1, k <= 64, payload.count >= 4 + 8 * k else { throw ChunkError("chunk table of \(k) chunks does not fit") }
        if let w = deltaPlanesWidth, w < 2 || k % 3 != 0 { throw ChunkError("\(k) chunks of width \(w) are not three planes") }
        var at = 4 + 8 * k, out = 0
        for i in 0..<k {
            let raw = Int(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 4 + 8 * i, as: UInt32.self)))
            let stored = Int(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 8 + 8 * i, as: UInt32.self)))
            guard stored <= raw, at + stored <= payload.count, out + raw <= rawLength else { throw ChunkError("chunk \(i) runs past the payload or the frame") }
            var rowBytes = 0
            if stored < raw, let w = deltaPlanesWidth {
                rowBytes = i < k / 3 ? w : w / 2
                guard raw % rowBytes == 0 else { throw ChunkError("chunk \(i) of \(raw) bytes is not whole rows of \(rowBytes)") }
            }
            try visit(i, Chunk(at: at, stored: stored, out: out, raw: raw, rowBytes: rowBytes))
            at += stored; out += raw
        }
        guard out == rawLength, at == payload.count else { throw ChunkError("chunks hold \(out) bytes of \(rawLength)") }
    }

    /// Decodes one chunk of `payload` into `destination`; returns the bytes it decoded to (a
    /// negative LZ4 code, or −1 for delta bit-planes that do not decode, when damaged).
    static func decodeChunk(_ c: Chunk, payload base: UnsafeRawPointer, into destination: UnsafeMutableRawPointer) -> Int {
        if c.stored == c.raw {
            (destination + c.out).copyMemory(from: base + c.at, byteCount: c.raw)
            return c.raw
        }
        if c.rowBytes > 0 {
            let r = vf_dbp_decode((base + c.at).assumingMemoryBound(to: UInt8.self), c.stored, c.rowBytes, c.raw / c.rowBytes,
                                  (destination + c.out).assumingMemoryBound(to: UInt8.self))
            return r == 0 ? c.raw : -1
        }
        return Int(LZ4_decompress_safe((base + c.at).assumingMemoryBound(to: CChar.self), (destination + c.out).assumingMemoryBound(to: CChar.self),
                                       Int32(c.stored), Int32(c.raw)))
    }

    static func decodeError(_ i: Int, _ c: Chunk, got n: Int) -> ChunkError {
        c.rowBytes > 0 ? ChunkError("chunk \(i): delta bit-planes do not decode to \(c.raw) bytes")
                       : ChunkError("chunk \(i): LZ4 block decodes to \(n) bytes, expected \(c.raw)")
    }

    struct ChunkError: Error { let reason: String; init(_ r: String) { reason = r } }
}

/// The state the caller and the helper threads share.
final class ChunkedLZ4Core: @unchecked Sendable {
    // @unchecked Sendable: the job fields (and the per-chunk accelerations) are written by the
    // caller before `generation` moves (under `lock`) and read by the helpers after they see it
    // move; each chunk's result slot is written by the one thread that owns the chunk and read by
    // the caller after `remaining` reaches 0 (under `lock`).
    let threads: Int
    let maximumChunks: Int
    private let lock = ConditionLock()
    private var generation: UInt64 = 0
    private var remaining = 0
    private var stopping = false
    // The job.
    private var source: UnsafeRawPointer?
    private var count = 0
    private var chunks = 1
    private var probe = false
    private let accelerations: UnsafeMutablePointer<Int32>
    private var regions: UnsafeMutableRawPointer
    private var regionSize = 0
    private var chunkBound = 0
    private var storedLengths: UnsafeMutablePointer<Int>
    /// Planar job (``compressPlanar422``): the packed frame, its geometry, and how many bands of
    /// rows (one per thread that takes part); 0 bands is a job over `source` as it is.
    private var packed: UnsafeRawPointer?
    private var width = 0, height = 0, bands = 0
    private var order = YUVSplit.Packed422Order.yuyv
    /// Planar job: chunks coded as delta bit-planes instead of LZ4.
    private var deltaPlanes = false
    /// Decode job (``runDecode``): the chunks (filled by the caller first), the payload and frame,
    /// and what each chunk decoded to (written by the thread that owns it).
    let decodeChunks: UnsafeMutablePointer<ChunkedLZ4.Chunk>
    let decoded: UnsafeMutablePointer<Int>
    private var decoding = false
    private var decodeDestination: UnsafeMutableRawPointer?

    init(threads: Int, maximumChunks: Int) {
        self.threads = max(1, threads)
        self.maximumChunks = max(self.threads, maximumChunks)
        regions = .allocate(byteCount: 64, alignment: 64)
        storedLengths = .allocate(capacity: self.maximumChunks)
        storedLengths.initialize(repeating: 0, count: self.maximumChunks)
        accelerations = .allocate(capacity: self.maximumChunks)
        accelerations.initialize(repeating: 1, count: self.maximumChunks)
        decodeChunks = .allocate(capacity: self.maximumChunks)
        decodeChunks.initialize(repeating: ChunkedLZ4.Chunk(), count: self.maximumChunks)
        decoded = .allocate(capacity: self.maximumChunks)
        decoded.initialize(repeating: 0, count: self.maximumChunks)
    }

    /// Ends the helpers' loops.
    func stop() { lock.withLock { stopping = true; lock.broadcast() } }

    deinit {
        regions.deallocate()
        storedLengths.deallocate()
        accelerations.deallocate()
        decodeChunks.deallocate()
        decoded.deallocate()
    }

    /// The largest payload a frame of `count` bytes can need with any chunk count up to the maximum
    /// (LZ4's bound grows with the chunk's size, so fewer, larger chunks need more).
    func bound(_ count: Int) -> Int {
        4 + 8 * maximumChunks + maximumChunks * Int(LZ4_compressBound(Int32((count + threads - 1) / threads)))
    }

    /// Range of chunk `i` in the source (in a planar job: the band `i % bands` of plane
    /// `i / bands`, planes Y, U, V one after the other).
    private func range(_ i: Int) -> (start: Int, length: Int) {
        if bands > 0 {
            let plane = i / bands, b = i % bands
            let r0 = height * b / bands, r1 = height * (b + 1) / bands
            let rowBytes = plane == 0 ? width : width / 2
            let planeStart = plane == 0 ? 0 : width * height + (plane - 1) * (width / 2) * height
            return (planeStart + r0 * rowBytes, (r1 - r0) * rowBytes)
        }
        let start = count * i / chunks, end = count * (i + 1) / chunks
        return (start, end - start)
    }

    /// Runs a job over `count` bytes at `source` as `k` chunks on all the threads; returns `k`.
    func runJob(_ source: UnsafeRawPointer, count: Int, chunks k: Int, accelerations acc: (Int) -> Int32, probe: Bool) -> Int {
        let k = min(max(1, k), maximumChunks)
        bands = 0; packed = nil; deltaPlanes = false; decoding = false
        prepareRegions(chunks: k, largestChunk: (count + k - 1) / k)
        for i in 0..<k { accelerations[i] = max(1, acc(i)) }
        dispatch(source, count: count, chunks: k, probe: probe)
        return k
    }

    /// See `ChunkedLZ4.compressPlanar422`.
    func compressPlanar422(_ packed: UnsafeRawPointer, width: Int, height: Int, order: YUVSplit.Packed422Order, planes: UnsafeMutableRawPointer,
                           lumaAcceleration: Int32, chromaAcceleration: Int32, probe: Bool, deltaPlanes: Bool) -> Int {
        let b = max(1, min(threads, maximumChunks / 3, height))
        let k = 3 * b
        self.packed = packed; self.width = width; self.height = height; self.order = order; bands = b
        self.deltaPlanes = deltaPlanes; decoding = false
        let rows = (height + b - 1) / b
        prepareRegions(chunks: k, largestChunk: rows * width, minimumBound: deltaPlanes ? vf_dbp_bound(width, rows) : 0)
        for i in 0..<k { accelerations[i] = max(1, i < b ? lumaAcceleration : chromaAcceleration) }
        dispatch(UnsafeRawPointer(planes), count: 2 * width * height, chunks: k, probe: probe)
        return k
    }

    private func prepareRegions(chunks k: Int, largestChunk: Int, minimumBound: Int = 0) {
        let bound = max(Int(LZ4_compressBound(Int32(largestChunk))), minimumBound)
        if bound * k > regionSize {
            regions.deallocate()
            regionSize = bound * k
            regions = .allocate(byteCount: regionSize, alignment: 64)
        }
        chunkBound = bound
    }

    /// Hands the job to the helpers, does the caller's share, and waits for theirs.
    private func dispatch(_ source: UnsafeRawPointer, count: Int, chunks k: Int, probe: Bool) {
        lock.lock()
        self.source = source; self.count = count; self.chunks = k; self.probe = probe
        remaining = threads - 1
        generation &+= 1
        lock.broadcast()
        lock.unlock()
        share(0)
        lock.lock()
        while remaining > 0 { lock.wait() }
        lock.unlock()
    }

    /// Decodes the first `k` chunks of ``decodeChunks`` from `payload` into `destination` on all
    /// the threads; each chunk's result lands in ``decoded``.
    func runDecode(_ payload: UnsafeRawPointer, into destination: UnsafeMutableRawPointer, chunks k: Int) {
        decoding = true; decodeDestination = destination
        dispatch(payload, count: 0, chunks: k, probe: false)
        decoding = false; decodeDestination = nil
    }

    /// Thread `t`'s part of the current job.
    private func share(_ t: Int) {
        guard decoding else { compressChunks(of: t); return }
        guard let source, let decodeDestination else { return }
        var i = t
        while i < chunks {
            decoded[i] = ChunkedLZ4.decodeChunk(decodeChunks[i], payload: source, into: decodeDestination)
            i += threads
        }
    }

    var tableSize: Int { 4 + 8 * chunks }

    /// See `ChunkedLZ4.writeTable(into:)`.
    func writeTable(into payload: UnsafeMutableRawPointer) -> Int {
        payload.storeBytes(of: UInt32(chunks).littleEndian, toByteOffset: 0, as: UInt32.self)
        var total = tableSize
        for i in 0..<chunks {
            let length = range(i).length, stored = storedLengths[i]
            payload.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 4 + 8 * i, as: UInt32.self)
            payload.storeBytes(of: UInt32(stored).littleEndian, toByteOffset: 8 + 8 * i, as: UInt32.self)
            total += stored
        }
        return total
    }

    /// See `ChunkedLZ4.piece(_:)`.
    func piece(_ i: Int) -> UnsafeRawBufferPointer {
        let (start, length) = range(i)
        let stored = storedLengths[i]
        return stored == length ? UnsafeRawBufferPointer(start: source! + start, count: length) : UnsafeRawBufferPointer(start: regions + i * chunkBound, count: stored)
    }

    /// Compresses `count` bytes at `source` into `payload` (at least ``bound(_:)`` bytes) and
    /// returns the payload's length.
    func compress(_ source: UnsafeRawPointer, count: Int, chunks k: Int, accelerations acc: (Int) -> Int32, probe: Bool, into payload: UnsafeMutableRawPointer) -> Int {
        let k = runJob(source, count: count, chunks: k, accelerations: acc, probe: probe)
        // Table, then the chunks packed one after the other.
        _ = writeTable(into: payload)
        var at = tableSize
        for i in 0..<k {
            let p = piece(i)
            (payload + at).copyMemory(from: p.baseAddress!, byteCount: p.count)
            at += p.count
        }
        return at
    }

    /// Bytes of each probe sample; a chunk gets two (a quarter and three quarters in).
    static let probeBytes = 16 << 10

    /// The chunks thread `t` owns: t, t + threads, …
    private func compressChunks(of t: Int) {
        if bands > 0 {
            // A planar job: this thread's band of rows is split, then its three chunks compressed.
            guard t < bands, let packed, let source else { return }
            let r0 = height * t / bands, r1 = height * (t + 1) / bands
            let planes = UnsafeMutableRawPointer(mutating: source).assumingMemoryBound(to: UInt8.self)
            let y = planes + r0 * width, u = planes + width * height + r0 * (width / 2), v = u + (width / 2) * height
            YUVSplit.packed422((packed + r0 * 2 * width).assumingMemoryBound(to: UInt8.self), bytesPerRow: 2 * width, width: width, height: r1 - r0,
                               order: order, y: y, u: u, v: v)
            for plane in 0..<3 { compressChunk(plane * bands + t) }
            return
        }
        var i = t
        while i < chunks { compressChunk(i); i += threads }
    }

    private func compressChunk(_ i: Int) {
        guard let source else { return }
        let (start, length) = range(i)
        if deltaPlanes && bands > 0 {
            let rowBytes = i < bands ? width : width / 2
            let n = vf_dbp_encode((source + start).assumingMemoryBound(to: UInt8.self), rowBytes, length / rowBytes,
                                  (regions + i * chunkBound).assumingMemoryBound(to: UInt8.self))
            // A chunk the code cannot shrink (full-range noise) is stored as it is.
            storedLengths[i] = n < length ? n : length
            return
        }
        let dst = (regions + i * chunkBound).assumingMemoryBound(to: CChar.self)
        let a = accelerations[i]
        if probe && length >= 8 * Self.probeBytes {
            // Two samples; the real block is written over them afterwards.
            let n = Self.probeBytes
            func sample(_ at: Int) -> Int {
                let c = LZ4_compress_fast((source + start + at).assumingMemoryBound(to: CChar.self), dst, Int32(n), Int32(chunkBound), a)
                return c > 0 ? Int(c) : n
            }
            let stored = sample(length / 4) + sample(3 * length / 4 - n)
            if Double(stored) >= 0.9 * Double(2 * n) { storedLengths[i] = length; return }
        }
        let n = LZ4_compress_fast((source + start).assumingMemoryBound(to: CChar.self), dst, Int32(length), Int32(chunkBound), a)
        // A chunk LZ4 cannot shrink is stored as it is.
        storedLengths[i] = n > 0 && Int(n) < length ? Int(n) : length
    }

    func work(_ t: Int) {
        var seen: UInt64 = 0
        while true {
            lock.lock()
            while generation == seen && !stopping { lock.wait() }
            if stopping { lock.unlock(); return }
            seen = generation
            lock.unlock()
            share(t)
            lock.lock()
            remaining -= 1
            if remaining == 0 { lock.broadcast() }
            lock.unlock()
        }
    }
}
