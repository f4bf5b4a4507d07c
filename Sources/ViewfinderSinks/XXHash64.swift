/// XXH64 (xxHash, 64-bit), the checksum of every raw-dump record. It runs at memory speed (several
/// GB/s), where a table CRC32 would cost a few milliseconds per 1080p frame.
///
/// Matches the reference implementation (`xxhsum -H1`): `XXH64("", 0) == 0xEF46DB3751D8E999`.
public struct XXHash64 {
    static let p1: UInt64 = 0x9E3779B185EBCA87
    static let p2: UInt64 = 0xC2B2AE3D27D4EB4F
    static let p3: UInt64 = 0x165667B19E3779F9
    static let p4: UInt64 = 0x85EBCA77C2B2AE63
    static let p5: UInt64 = 0x27D4EB2F165667C5

    @inline(__always) static func rotl(_ x: UInt64, _ r: UInt64) -> UInt64 { (x << r) | (x >> (64 &- r)) }
    @inline(__always) static func round(_ acc: UInt64, _ input: UInt64) -> UInt64 {
        rotl(acc &+ input &* p2, 31) &* p1
    }
    @inline(__always) static func merge(_ acc: UInt64, _ val: UInt64) -> UInt64 {
        (acc ^ round(0, val)) &* p1 &+ p4
    }

    /// The four accumulators of the 32-byte stripes, shared by the one-shot and the filling hash.
    struct Lanes {
        var v1: UInt64, v2: UInt64, v3: UInt64, v4: UInt64
        init(seed: UInt64) { v1 = seed &+ p1 &+ p2; v2 = seed &+ p2; v3 = seed; v4 = seed &- p1 }

        /// Consumes the stripes that start at `i` up to `limit` (inclusive), advancing `i`.
        @inline(__always)
        mutating func consume(_ base: UnsafeRawPointer, from i: inout Int, through limit: Int) {
            while i <= limit {
                v1 = round(v1, base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                v2 = round(v2, base.loadUnaligned(fromByteOffset: i &+ 8, as: UInt64.self))
                v3 = round(v3, base.loadUnaligned(fromByteOffset: i &+ 16, as: UInt64.self))
                v4 = round(v4, base.loadUnaligned(fromByteOffset: i &+ 24, as: UInt64.self))
                i &+= 32
            }
        }

        /// The lanes merged into one value (before the length and the tail are added).
        @inline(__always)
        var converged: UInt64 {
            var h = rotl(v1, 1) &+ rotl(v2, 7) &+ rotl(v3, 12) &+ rotl(v4, 18)
            h = merge(h, v1); h = merge(h, v2); h = merge(h, v3); h = merge(h, v4)
            return h
        }
    }

    /// Hashes `buffer` with `seed` in one go.
    public static func hash(_ buffer: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return finalize(seed &+ p5, base: nil, count: 0, length: 0) }
        let len = buffer.count
        var i = 0
        var h: UInt64
        if len >= 32 {
            var lanes = Lanes(seed: seed)
            lanes.consume(base, from: &i, through: len - 32)
            h = lanes.converged
        } else {
            h = seed &+ p5
        }
        h &+= UInt64(len)
        return finalize(h, base: base + i, count: len - i, length: len)
    }

    /// Hashes `count` bytes at `base` while they arrive: `fill(offset, n)` must put bytes
    /// `offset..<offset+n` in place (a `pread` into the buffer), and each piece (`chunk` bytes, a
    /// multiple of 32) is hashed right after it lands, while it is still in the cache, instead of
    /// in a second pass over the whole buffer from memory. The result equals
    /// `hash(UnsafeRawBufferPointer(start: base, count: count), seed: seed)`; `fill` returns how
    /// many bytes it stored, and a short fill stops the hash (the caller checks the count).
    public static func hashWhileFilling(_ base: UnsafeRawPointer, count len: Int, seed: UInt64 = 0, chunk: Int = 256 << 10,
                                        fill: (_ offset: Int, _ count: Int) throws -> Int) rethrows -> (hash: UInt64, filled: Int) {
        precondition(chunk > 0 && chunk % 32 == 0, "chunk must be a positive multiple of 32")
        if len < 32 {
            let n = try fill(0, len)
            return (hash(UnsafeRawBufferPointer(start: base, count: n), seed: seed), n)
        }
        var lanes = Lanes(seed: seed)
        var i = 0, filled = 0
        while filled < len {
            let want = min(chunk, len - filled)
            let got = try fill(filled, want)
            filled += got
            guard got == want else { return (0, filled) }
            // Stripes whose 32 bytes have all arrived (the one-shot loop runs while i <= len - 32).
            lanes.consume(base, from: &i, through: filled - 32)
        }
        var h = lanes.converged
        h &+= UInt64(len)
        return (finalize(h, base: base + i, count: len - i, length: len), filled)
    }

    /// XXH64 of bytes that arrive in pieces of any size (a record's payload written piece by piece
    /// from several buffers): ``update(_:)`` each piece in order, then ``digest()``. Equal to the
    /// one-shot hash of the pieces concatenated; nothing is allocated (the partial stripe is kept in
    /// four words).
    struct Streaming {
        private var lanes: Lanes
        private let seed: UInt64
        private var total = 0
        /// The bytes of an incomplete 32-byte stripe, and how many there are.
        private var tail: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        private var tailCount = 0

        init(seed: UInt64 = 0) {
            self.seed = seed
            lanes = Lanes(seed: seed)
        }

        /// Adds `count` bytes at `base`.
        mutating func update(_ base: UnsafeRawPointer, count: Int) {
            guard count > 0 else { return }
            total &+= count
            var i = 0
            if tailCount > 0 {
                let n = min(32 - tailCount, count)
                let at = tailCount
                withUnsafeMutableBytes(of: &tail) { $0.baseAddress!.advanced(by: at).copyMemory(from: base, byteCount: n) }
                tailCount += n
                i = n
                guard tailCount == 32 else { return }
                var j = 0
                withUnsafeBytes(of: tail) { lanes.consume($0.baseAddress!, from: &j, through: 0) }
                tailCount = 0
            }
            if count - i >= 32 { lanes.consume(base, from: &i, through: count - 32) }
            let left = count - i
            if left > 0 {
                withUnsafeMutableBytes(of: &tail) { $0.baseAddress!.copyMemory(from: base + i, byteCount: left) }
                tailCount = left
            }
        }

        /// Adds the bytes of `buffer`.
        mutating func update(_ buffer: UnsafeRawBufferPointer) {
            if let b = buffer.baseAddress { update(b, count: buffer.count) }
        }

        /// The hash of everything added so far.
        func digest() -> UInt64 {
            var h = total >= 32 ? lanes.converged : seed &+ p5
            h &+= UInt64(total)
            let (t, n) = (tail, tailCount)
            return withUnsafeBytes(of: t) { finalize(h, base: $0.baseAddress!, count: n, length: total) }
        }
    }

    /// Hashes several buffers as if concatenated (copies the small ones; fine for headers + payload).
    public static func hash(_ parts: [UnsafeRawBufferPointer], seed: UInt64 = 0) -> UInt64 {
        if parts.count == 1 { return hash(parts[0], seed: seed) }
        var all = [UInt8]()
        all.reserveCapacity(parts.reduce(0) { $0 + $1.count })
        for p in parts { all.append(contentsOf: p) }
        return all.withUnsafeBytes { hash($0, seed: seed) }
    }

    @inline(__always)
    static func finalize(_ hIn: UInt64, base: UnsafeRawPointer?, count: Int, length: Int) -> UInt64 {
        var h = hIn
        var i = 0
        if let p = base {
            while i + 8 <= count {
                h ^= round(0, p.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                h = rotl(h, 27) &* p1 &+ p4
                i += 8
            }
            if i + 4 <= count {
                h ^= UInt64(p.loadUnaligned(fromByteOffset: i, as: UInt32.self)) &* p1
                h = rotl(h, 23) &* p2 &+ p3
                i += 4
            }
            while i < count {
                h ^= UInt64(p.load(fromByteOffset: i, as: UInt8.self)) &* p5
                h = rotl(h, 11) &* p1
                i += 1
            }
        }
        h ^= h >> 33; h = h &* p2
        h ^= h >> 29; h = h &* p3
        h ^= h >> 32
        return h
    }
}
