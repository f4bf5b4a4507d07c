import CLZ4
import Viewfinder

/// Compresses one frame as independent LZ4 blocks, one per thread (the caller's and helpers kept
/// for the writer's life), into a chunked payload (see ``RawDumpFormat``):
///
/// ```text
/// u32 chunk count k; k × (u32 raw length, u32 stored length); then the k chunks' bytes in order,
/// each an LZ4 block, or the raw bytes when stored length == raw length
/// ```
///
/// LZ4 is the dump's cost on camera frames (~15 ms for a noisy 1080p YUYV frame on one core here):
/// blocks compressed side by side bring it to the time of one block. The job is handed over in
/// fields, not a closure, so nothing is allocated per frame. Used by one thread at a time.
final class ChunkedLZ4 {
    private let core: ChunkedLZ4Core
    private var threads: [EngineThread] = []
    var chunks: Int { core.chunks }

    init(chunks: Int) {
        core = ChunkedLZ4Core(chunks: chunks)
        for i in 1..<core.chunks {
            let core = self.core   // the helpers hold the core, not this owner (whose deinit stops them)
            threads.append(EngineThread(name: "vf-lz4-\(i)") { core.work(i) })
        }
    }

    deinit {
        core.stop()
        for t in threads { t.join() }
    }

    func bound(_ count: Int) -> Int { core.bound(count) }
    func compress(_ source: UnsafeRawPointer, count: Int, acceleration: Int32, into payload: UnsafeMutableRawPointer) -> Int {
        core.compress(source, count: count, acceleration: acceleration, into: payload)
    }

    /// Decodes a chunked payload into `destination` (`rawLength` bytes). Throws a description of
    /// what is wrong with a damaged payload.
    static func decompress(_ payload: UnsafeRawBufferPointer, into destination: UnsafeMutableRawPointer, rawLength: Int) throws(ChunkError) {
        guard payload.count >= 4, let base = payload.baseAddress else { throw ChunkError("no chunk table") }
        let k = Int(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
        guard k >= 1, k <= 64, payload.count >= 4 + 8 * k else { throw ChunkError("chunk table of \(k) chunks does not fit") }
        var at = 4 + 8 * k, out = 0
        for i in 0..<k {
            let raw = Int(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 4 + 8 * i, as: UInt32.self)))
            let stored = Int(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: 8 + 8 * i, as: UInt32.self)))
            guard stored <= raw, at + stored <= payload.count, out + raw <= rawLength else { throw ChunkError("chunk \(i) runs past the payload or the frame") }
            if stored == raw {
                (destination + out).copyMemory(from: base + at, byteCount: raw)
            } else {
                let n = LZ4_decompress_safe((base + at).assumingMemoryBound(to: CChar.self), (destination + out).assumingMemoryBound(to: CChar.self), Int32(stored), Int32(raw))
                guard n == Int32(raw) else { throw ChunkError("chunk \(i): LZ4 block decodes to \(n) bytes, expected \(raw)") }
            }
            at += stored; out += raw
        }
        guard out == rawLength, at == payload.count else { throw ChunkError("chunks hold \(out) bytes of \(rawLength)") }
    }

    struct ChunkError: Error { let reason: String; init(_ r: String) { reason = r } }
}

/// The state the caller and the helper threads share.
final class ChunkedLZ4Core: @unchecked Sendable {
    // @unchecked Sendable: the job fields are written by the caller before `generation` moves
    // (under `lock`) and read by the helpers after they see it move; results are read by the
    // caller after `remaining` reaches 0 (under `lock`).
    let chunks: Int
    private let lock = ConditionLock()
    private var generation: UInt64 = 0
    private var remaining = 0
    private var stopping = false
    // The job.
    private var source: UnsafeRawPointer?
    private var count = 0
    private var acceleration: Int32 = 1
    private var regions: UnsafeMutableRawPointer
    private var regionSize = 0
    private var storedLengths: UnsafeMutablePointer<Int>

    /// Payload bytes before the chunks' data.
    var tableSize: Int { 4 + 8 * chunks }

    init(chunks: Int) {
        self.chunks = max(1, chunks)
        regions = .allocate(byteCount: 64, alignment: 64)
        storedLengths = .allocate(capacity: self.chunks)
        storedLengths.initialize(repeating: 0, count: self.chunks)
    }

    /// Ends the helpers' loops.
    func stop() { lock.withLock { stopping = true; lock.broadcast() } }

    deinit {
        regions.deallocate()
        storedLengths.deallocate()
    }

    /// The largest payload a frame of `count` bytes can need.
    func bound(_ count: Int) -> Int {
        tableSize + chunks * Int(LZ4_compressBound(Int32((count + chunks - 1) / chunks)))
    }

    /// Range of chunk `i` in the source.
    private func range(_ i: Int) -> (start: Int, length: Int) {
        let start = count * i / chunks, end = count * (i + 1) / chunks
        return (start, end - start)
    }

    /// Compresses `count` bytes at `source` into `payload` (at least ``bound(_:)`` bytes) and
    /// returns the payload's length.
    func compress(_ source: UnsafeRawPointer, count: Int, acceleration: Int32, into payload: UnsafeMutableRawPointer) -> Int {
        let chunkBound = Int(LZ4_compressBound(Int32((count + chunks - 1) / chunks)))
        if chunkBound * chunks > regionSize {
            regions.deallocate()
            regionSize = chunkBound * chunks
            regions = .allocate(byteCount: regionSize, alignment: 64)
        }
        lock.lock()
        self.source = source; self.count = count; self.acceleration = acceleration
        remaining = chunks - 1
        generation &+= 1
        lock.broadcast()
        lock.unlock()
        compressChunk(0)
        lock.lock()
        while remaining > 0 { lock.wait() }
        lock.unlock()
        // Table, then the chunks packed one after the other.
        payload.storeBytes(of: UInt32(chunks).littleEndian, toByteOffset: 0, as: UInt32.self)
        var at = tableSize
        for i in 0..<chunks {
            let (start, length) = range(i)
            let stored = storedLengths[i]
            payload.storeBytes(of: UInt32(length).littleEndian, toByteOffset: 4 + 8 * i, as: UInt32.self)
            payload.storeBytes(of: UInt32(stored).littleEndian, toByteOffset: 8 + 8 * i, as: UInt32.self)
            if stored == length {
                (payload + at).copyMemory(from: source + start, byteCount: length)
            } else {
                (payload + at).copyMemory(from: regions + i * chunkBound, byteCount: stored)
            }
            at += stored
        }
        return at
    }

    private func compressChunk(_ i: Int) {
        guard let source else { return }
        let (start, length) = range(i)
        let chunkBound = regionSize / chunks
        let n = LZ4_compress_fast((source + start).assumingMemoryBound(to: CChar.self), (regions + i * chunkBound).assumingMemoryBound(to: CChar.self),
                                  Int32(length), Int32(chunkBound), acceleration)
        // A chunk LZ4 cannot shrink is stored as it is.
        storedLengths[i] = n > 0 && Int(n) < length ? Int(n) : length
    }

    func work(_ i: Int) {
        var seen: UInt64 = 0
        while true {
            lock.lock()
            while generation == seen && !stopping { lock.wait() }
            if stopping { lock.unlock(); return }
            seen = generation
            lock.unlock()
            compressChunk(i)
            lock.lock()
            remaining -= 1
            if remaining == 0 { lock.broadcast() }
            lock.unlock()
        }
    }

}
