import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// Collects copies of the frames it consumes.
final class CollectingConsumer: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: `frames` is written on the consumer thread and read after the engine finished.
    let consumerName = "collect"
    var frames: [(bytes: [UInt8], sequence: UInt64, timestamp: UInt64, metadata: FrameMetadata, received: UInt64)] = []
    func consume(_ frame: Frame) {
        frames.append((Array(frame.bytes), frame.sequence, frame.timestamp.nanoseconds, frame.metadata, monotonicNanoseconds()))
    }
}

@Suite struct RawDumpTests {
    let format = FrameFormat(.yuyv, width: 64, height: 48)

    /// Writes `count` frames (every third with rich metadata) and returns their bytes and metadata.
    func writeDump(_ path: String, count: Int, close: Bool = true, format: FrameFormat? = nil, noise: Int = 40) throws -> [(bytes: [UInt8], metadata: FrameMetadata, timestamp: UInt64)] {
        let fmt = format ?? self.format
        let pool = FramePool(format: fmt, count: 1)
        let writer = try RawDumpWriter(path: path, format: fmt, interval: FrameInterval(fps: 30), device: "test")
        var written: [(bytes: [UInt8], metadata: FrameMetadata, timestamp: UInt64)] = []
        let key = MetadataKey("test.sharpness")
        for i in 0..<count {
            let f = pool.acquire()!
            // Alternate noisy (stored raw) and flat (LZ4-compressed) frames.
            fillFrame(f, index: i, noise: noise)
            if i % 2 == 1 { memset(f.data, Int32(16 + i), f.bytesUsed / 2) }
            f.timestamp = Timestamp(nanoseconds: 7_000_000_000 + UInt64(i) * 33_000_000 + UInt64(i % 3) * 1_000_000)
            f.receiveTime = 123 + UInt64(i)
            if i % 3 == 0 {
                f.metadata.exposureTime = 10_000 + Double(i)
                f.metadata.gain = 2.5
                f.metadata.focusState = .converged
                f.metadata.motion = MotionEstimate(dx: 1.5, dy: -2, angle: 0.01, scale: 1, confidence: 0.9)
                var t = SimulationTruth(); t.shakeX = Double(i); t.renderedMeanLuma = 99
                f.metadata.truth = t
                f.metadata.droppedBefore = 2
                f.metadata.custom.set(key, Double(i) * 0.5)
                f.pixelsModified = true
            }
            try writer.append(f)
            written.append((Array(f.bytes), f.metadata, f.timestamp.nanoseconds))
            f.release()
        }
        if close { try writer.close() }
        return written
    }

    @Test func roundTripIsBitExactWithMetadata() throws {
        let dir = makeTempDirectory()
        let path = dir + "/a.vfdump"
        let written = try writeDump(path, count: 12)
        let reader = try RawDumpReader(path: path)
        #expect(reader.usedFooterIndex)
        #expect(reader.damage == nil)
        #expect(reader.frameCount == 12)
        #expect(reader.format == format)
        #expect(reader.info.device == "test")
        let frame = Frame(capacity: format.maxByteCount, format: format)
        for i in 0..<12 {
            try reader.read(i, into: frame)
            #expect(Array(frame.bytes) == written[i].bytes, "frame \(i)")
            #expect(frame.metadata == written[i].metadata)
            #expect(frame.timestamp.nanoseconds == written[i].timestamp)
            #expect(frame.sequence == UInt64(i))
            #expect(frame.receiveTime == 123 + UInt64(i))
            #expect(frame.pixelsModified == (i % 3 == 0))
        }
        // Noise is stored as it is, flat frames compress.
        #expect(reader.entries[0].storedLength == reader.entries[0].rawLength)
        #expect(reader.entries[1].storedLength < reader.entries[1].rawLength * 3 / 5)
        #expect(throws: DumpError.frameOutOfRange(path: path, index: 12, count: 12)) { try reader.read(12, into: frame) }
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func truncatedAtRandomBytesGivesBackEveryCompleteFrame() throws {
        let dir = makeTempDirectory()
        let path = dir + "/full.vfdump"
        let written = try writeDump(path, count: 10)
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let complete = try RawDumpReader(path: path).entries
        let ends = complete.map { Int($0.offset) }
        var rng = SystemRandomNumberGenerator()
        var offsets = (0..<25).map { _ in Int.random(in: 16..<data.count, using: &rng) }
        offsets += ends.map { $0 } + ends.map { $0 + 1 } + [data.count - 1, data.count - 16]
        let frame = Frame(capacity: format.maxByteCount, format: format)
        for cut in offsets {
            let tpath = dir + "/cut.vfdump"
            try data.prefix(cut).write(to: URL(fileURLWithPath: tpath))
            guard let reader = try? RawDumpReader(path: tpath) else {
                // Only a cut inside the stream header makes the file unreadable.
                #expect(cut < Int(complete[0].offset), "cut at \(cut) made the dump unreadable")
                continue
            }
            // Frames whose record lies wholly before the cut.
            let expected = complete.indices.filter { i in
                let end = i + 1 < complete.count ? Int(complete[i + 1].offset) : Int(complete[i].offset) + 72 + Int(complete[i].storedLength) + metadataLength(data, complete[i])
                return end <= cut
            }.count
            #expect(reader.frameCount == expected, "cut at \(cut)")
            #expect(!reader.usedFooterIndex)
            // Damage is reported unless the cut falls exactly between records.
            let indexStart = Int(complete.last!.offset) + 72 + Int(complete.last!.storedLength) + metadataLength(data, complete.last!)
            let clean = Set(complete.map { Int($0.offset) } + [indexStart, data.count - 16])
            #expect((reader.damage == nil) == clean.contains(cut), "cut at \(cut): \(String(describing: reader.damage))")
            // Cut inside the trailer: said so, not "data after the index" (29 Nov sweep).
            if cut > data.count - 16 {
                #expect(reader.damage?.reason.hasPrefix("the trailer cut short") == true, "cut at \(cut): \(String(describing: reader.damage))")
            }
            for i in 0..<reader.frameCount {
                try reader.read(i, into: frame)
                #expect(Array(frame.bytes) == written[i].bytes, "cut \(cut), frame \(i)")
            }
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Frames of 1 MiB and more compress as LZ4 blocks side by side: bit-exact back whatever the
    /// thread count (odd counts make unequal chunks), each record flagged chunked, and the same
    /// file size as one block within a few percent.
    @Test(arguments: [1, 2, 3])
    func largeFramesCompressInChunksBitExact(_ threads: Int) throws {
        let dir = makeTempDirectory("chunked-\(threads)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1280, height: 720)
        let path = dir + "/c.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt, compressionThreads: threads, compression: .lz4)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        for i in 0..<5 {
            fillFrame(f, index: i, noise: 2)
            memset(f.data + i * 50_000, Int32(i), 300_000)   // a flat band: LZ4 has something to find
            f.sequence = UInt64(i)
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        #expect(writer.framesCompressed == 5)
        let reader = try RawDumpReader(path: path)
        let back = Frame(capacity: fmt.maxByteCount, format: fmt)
        for i in 0..<5 {
            try reader.read(i, into: back)
            #expect(Array(back.bytes) == written[i], "frame \(i)")
            #expect(reader.entries[i].storedLength < reader.entries[i].rawLength)
        }
        // Decoded side by side, on fewer, as many or more threads than wrote it: the same bytes.
        for decodeThreads in [2, 3, 5] {
            let r = try RawDumpReader(path: path, decodeThreads: decodeThreads)
            #expect(r.decodeThreads == decodeThreads)
            for i in [4, 0, 2] {
                memset(back.data, 0xA5, fmt.maxByteCount)
                try r.read(i, into: back)
                #expect(Array(back.bytes) == written[i], "frame \(i), \(decodeThreads) decoding threads")
            }
        }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let flags = data[Int(reader.entries[0].offset) + 5]
        #expect((flags & 4 != 0) == (threads > 1), "chunked flag with \(threads) threads: \(flags)")
        // A damaged chunk table is a typed error, never a crash (checksums off: read past them).
        if threads > 1 {
            var bad = data
            let e = reader.entries[2]
            let tableAt = Int(e.offset) + 72 + metadataLength(data, e)
            bad[tableAt] = 0xFF   // chunk count 255
            let badPath = dir + "/bad.vfdump"
            try bad.write(to: URL(fileURLWithPath: badPath))
            for decodeThreads in [1, 2] {
                let r2 = try RawDumpReader(path: badPath, decodeThreads: decodeThreads)
                #expect(throws: DumpError.self) { try r2.read(2, into: back) }
                try r2.read(1, into: back)
                #expect(Array(back.bytes) == written[1])
            }
        }
    }

    /// `auto` splits packed 4:2:2 frames into planes coded as delta bit-planes (version 4):
    /// bit-exact back for YUYV and UYVY whatever the thread count, flagged planar, chunked and
    /// delta-coded, full-range noise in luma stored as it is while smooth chroma shrinks; padded
    /// rows and small frames are not split and still read back.
    @Test(arguments: [(PixelFormat.yuyv, 1), (.yuyv, 2), (.uyvy, 3)])
    func autoSplitsPackedFramesIntoPlanesBitExact(_ pf: PixelFormat, _ threads: Int) throws {
        let dir = makeTempDirectory("planar-\(threads)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(pf, width: 1280, height: 720)
        let path = dir + "/p.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt, compressionThreads: threads)
        #expect(writer.compression == .auto)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        var rng = UInt64(99)
        for i in 0..<4 {
            // Luma: full-range noise (LZ4 finds nothing); chroma: a smooth ramp (LZ4 shrinks it).
            let p = f.data.assumingMemoryBound(to: UInt8.self)
            let (yo, uo) = pf == .yuyv ? (0, 1) : (1, 0)
            for px in 0..<(fmt.width * fmt.height / 2) {
                rng = rng &* 6364136223846793005 &+ 1442695040888963407
                p[4 * px + yo] = UInt8(truncatingIfNeeded: rng >> 33)
                p[4 * px + yo + 2] = UInt8(truncatingIfNeeded: rng >> 41)
                p[4 * px + uo] = UInt8(truncatingIfNeeded: 100 + (px / 640 + i) / 8)
                p[4 * px + uo + 2] = UInt8(truncatingIfNeeded: 140 - px / 4096)
            }
            f.bytesUsed = fmt.maxByteCount
            f.sequence = UInt64(i)
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        #expect(writer.framesSplit == 4)
        let reader = try RawDumpReader(path: path)
        #expect(reader.version == 4)
        let back = Frame(capacity: fmt.maxByteCount, format: fmt)
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let parallel = try RawDumpReader(path: path, decodeThreads: 4)
        for i in 0..<4 {
            memset(back.data, 0xA5, fmt.maxByteCount)
            try parallel.read(i, into: back)
            #expect(Array(back.bytes) == written[i], "frame \(i), 4 decoding threads")
            try reader.read(i, into: back)
            #expect(Array(back.bytes) == written[i], "frame \(i)")
            let e = reader.entries[i]
            // Luma (half the bytes) is stored, chroma shrinks: between half and all of the frame.
            #expect(e.storedLength < e.rawLength && e.storedLength > e.rawLength / 2, "frame \(i): \(e.storedLength) of \(e.rawLength)")
            #expect(data[Int(e.offset) + 5] & 28 == 28, "planar, chunked and delta bit-plane flags")
        }
        // A damaged planar record is a typed error, never a crash.
        var bad = data
        let e = reader.entries[1]
        bad[Int(e.offset) + 20] = 0x01   // width 1281 (odd)
        let badPath = dir + "/bad.vfdump"
        try bad.write(to: URL(fileURLWithPath: badPath))
        for decodeThreads in [1, 3] {
            let r2 = try RawDumpReader(path: badPath, decodeThreads: decodeThreads)
            #expect(throws: DumpError.self) { try r2.read(1, into: back) }
        }
    }

    /// Frames `auto` does not split (rows with padding, frames under 1 MiB, other formats) take
    /// the packed path and read back bit-exact.
    @Test func autoLeavesPaddedAndSmallFramesPacked() throws {
        let dir = makeTempDirectory("planar-padded")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for fmt in [FrameFormat(.yuyv, width: 1280, height: 720, bytesPerRow: 2 * 1280 + 64), FrameFormat(.yuyv, width: 320, height: 240)] {
            let path = dir + "/\(fmt.bytesPerRow).vfdump"
            let writer = try RawDumpWriter(path: path, format: fmt)
            let f = Frame(capacity: fmt.maxByteCount, format: fmt)
            fillFrame(f, index: 1, noise: 2)
            try writer.append(f)
            try writer.close()
            #expect(writer.framesSplit == 0)
            let back = Frame(capacity: fmt.maxByteCount, format: fmt)
            try RawDumpReader(path: path).read(0, into: back)
            #expect(Array(back.bytes) == Array(f.bytes))
        }
    }

    /// Sensor noise on a photograph-like picture (a smooth gradient with edges plus noise of a few
    /// levels in every byte): the delta bit-planes shrink the whole frame, luma included, where
    /// LZ4 stores the luma as it is; back bit-exact.
    @Test func noisyFramesShrinkInDeltaBitPlanesWhereLZ4CannotShrinkThem() throws {
        let dir = makeTempDirectory("dbp-noise")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1280, height: 720)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var rng = UInt64(7)
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        for y in 0..<fmt.height {
            for x in 0..<(2 * fmt.width) {
                rng = rng &* 6364136223846793005 &+ 1442695040888963407
                let noise = Int(rng >> 61) - 4                      // -4…3
                let base = x % 2 == 0 ? (x / 8 + y / 4 + (x > 1200 ? 60 : 0)) : 128 + (y / 16) - (x / 64)
                p[y * fmt.bytesPerRow + x] = UInt8(clamping: base + noise)
            }
        }
        f.bytesUsed = fmt.maxByteCount
        var sizes: [RawDumpCompression: UInt64] = [:]
        for c in [RawDumpCompression.auto, .lz4] {
            let path = dir + "/\(c).vfdump"
            let writer = try RawDumpWriter(path: path, format: fmt, compression: c)
            try writer.append(f)
            try writer.close()
            let reader = try RawDumpReader(path: path, verify: true)
            let back = Frame(capacity: fmt.maxByteCount, format: fmt)
            try reader.read(0, into: back)
            #expect(Array(back.bytes) == Array(f.bytes), "\(c)")
            sizes[c] = UInt64(reader.entries[0].storedLength)
        }
        let raw = UInt64(fmt.maxByteCount)
        // 3-bit noise and small steps: about 4 bits a byte against LZ4's nothing.
        #expect(sizes[.auto]! < raw * 6 / 10, "auto \(sizes[.auto]!) of \(raw)")
        #expect(sizes[.auto]! < sizes[.lz4]!)
    }

    /// Planar records of version 3 (LZ4 planes) still read: a dump written that way (the writer's
    /// test switch), its version field set back to 3, reads back bit-exact; a version 3 dump
    /// claiming delta bit-planes is a typed error.
    @Test func version3PlanarRecordsStillRead() throws {
        let dir = makeTempDirectory("v3-planar")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1280, height: 720)
        let path = dir + "/v.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt)
        writer.planesInLZ4 = true
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        for i in 0..<2 {
            fillFrame(f, index: i, noise: 2)
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        #expect(writer.framesSplit == 2)
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        func setVersion(_ v: UInt8) {
            data[8] = v; data[9] = 0
            let jsonLength = Int(data[12]) | Int(data[13]) << 8 | Int(data[14]) << 16 | Int(data[15]) << 24
            let sum = data.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<(16 + jsonLength)])) }
            withUnsafeBytes(of: sum.littleEndian) { for (k, b) in $0.enumerated() { data[16 + jsonLength + k] = b } }
        }
        setVersion(3)
        let old = dir + "/old.vfdump"
        try data.write(to: URL(fileURLWithPath: old))
        let reader = try RawDumpReader(path: old)
        #expect(reader.version == 3)
        let back = Frame(capacity: fmt.maxByteCount, format: fmt)
        let parallel = try RawDumpReader(path: old, decodeThreads: 2)
        for i in 0..<2 {
            #expect(data[Int(reader.entries[i].offset) + 5] & 28 == 12, "LZ4 planes")
            try reader.read(i, into: back)
            #expect(Array(back.bytes) == written[i])
            memset(back.data, 0xA5, fmt.maxByteCount)
            try parallel.read(i, into: back)
            #expect(Array(back.bytes) == written[i], "2 decoding threads")
        }
        // A version 4 file's delta-coded record in a file that says version 3.
        let w4 = dir + "/w4.vfdump"
        let writer4 = try RawDumpWriter(path: w4, format: fmt)
        try writer4.append(f)
        try writer4.close()
        data = try Data(contentsOf: URL(fileURLWithPath: w4))
        setVersion(3)
        try data.write(to: URL(fileURLWithPath: w4 + ".3"))
        let r3 = try RawDumpReader(path: w4 + ".3")
        #expect(throws: DumpError.self) { try r3.read(0, into: back) }
    }

    /// Dumps of versions 1 and 2 still read: a file written packed (`lz4`, the only layout those
    /// versions had) with its version field set back to 1 and 2 reads back bit-exact.
    @Test(arguments: [1, 2])
    func olderVersionsStillRead(_ version: UInt16) throws {
        let dir = makeTempDirectory("v\(version)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1280, height: 720)
        let path = dir + "/v.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt, compression: .lz4)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        for i in 0..<3 {
            fillFrame(f, index: i, noise: 2)
            memset(f.data + i * 50_000, Int32(i), 300_000)
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        data[8] = UInt8(version); data[9] = 0
        let jsonLength = Int(data[12]) | Int(data[13]) << 8 | Int(data[14]) << 16 | Int(data[15]) << 24
        let sum = data.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<(16 + jsonLength)])) }
        withUnsafeBytes(of: sum.littleEndian) { for (k, b) in $0.enumerated() { data[16 + jsonLength + k] = b } }
        let old = dir + "/old.vfdump"
        try data.write(to: URL(fileURLWithPath: old))
        let reader = try RawDumpReader(path: old)
        #expect(reader.version == Int(version))
        let back = Frame(capacity: fmt.maxByteCount, format: fmt)
        for i in 0..<3 {
            try reader.read(i, into: back)
            #expect(Array(back.bytes) == written[i])
        }
    }

    func metadataLength(_ data: Data, _ e: DumpIndexEntry) -> Int {
        let o = Int(e.offset) + 52
        return Int(data[o]) | Int(data[o + 1]) << 8 | Int(data[o + 2]) << 16 | Int(data[o + 3]) << 24
    }

    @Test func damagedRecordIsDetected() throws {
        let dir = makeTempDirectory()
        let path = dir + "/d.vfdump"
        let written = try writeDump(path, count: 6, close: false)
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        // Deinit closed it: drop the index and trailer as a crash would, then flip a payload byte of frame 4.
        let entries = try RawDumpReader(path: path).entries
        data = data.prefix(Int(entries[5].offset) + 72 + Int(entries[5].storedLength) + metadataLength(data, entries[5]))
        data[Int(entries[4].offset) + 72 + metadataLength(data, entries[4]) + 10] ^= 0x55
        try data.write(to: URL(fileURLWithPath: path))
        let lazy = try RawDumpReader(path: path)
        #expect(lazy.frameCount == 6)
        let frame = Frame(capacity: format.maxByteCount, format: format)
        #expect(throws: DumpError.checksumMismatch(path: path, frame: 4, offset: entries[4].offset)) { try lazy.read(4, into: frame) }
        let verified = try RawDumpReader(path: path, verify: true)
        #expect(verified.frameCount == 4)
        #expect(verified.damage?.offset == entries[4].offset)
        for i in 0..<4 { try verified.read(i, into: frame); #expect(Array(frame.bytes) == written[i].bytes) }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A flipped bit in the stream header (its JSON, its version, its length field, its checksum)
    /// loses only what the header alone said: the frames say their own format and carry their own
    /// checksums, so every one is read back bit-exact, and the reader says what happened.
    @Test func aDamagedStreamHeaderLosesNoFrame() throws {
        let dir = makeTempDirectory()
        let path = dir + "/h.vfdump"
        let written = try writeDump(path, count: 12)
        let good = try Data(contentsOf: URL(fileURLWithPath: path))
        let jsonLength = Int(good[12]) | Int(good[13]) << 8
        // (byte, bit): inside the JSON's device name, in the version, in the JSON length, in the checksum.
        let jsonDevice = try #require(good.range(of: Data("\"test\"".utf8))).lowerBound + 2
        // "intervalDenominator":30 made 70: a rate the timestamps disagree with is not kept.
        let jsonRate = try #require(good.range(of: Data("\"intervalDenominator\":30".utf8))).upperBound - 2
        for (byte, bit) in [(jsonDevice, 0), (8, 7), (13, 1), (16 + jsonLength + 3, 4), (40, 2), (jsonRate, 2)] {
            var data = good
            data[byte] ^= UInt8(1 << bit)
            let damaged = dir + "/h\(byte).vfdump"
            try data.write(to: URL(fileURLWithPath: damaged))
            let reader = try RawDumpReader(path: damaged)
            #expect(reader.headerDamage != nil, "byte \(byte)")
            #expect(reader.format == format, "byte \(byte)")
            #expect(reader.frameCount == 12, "byte \(byte)")
            #expect(reader.damage == nil, "byte \(byte)")
            let ms = Double(reader.info.interval.nanoseconds) / 1e6
            #expect(ms > 30 && ms < 36, "byte \(byte): interval \(ms) ms")
            if byte == jsonRate { #expect(reader.headerDamage?.contains("frame rate from the timestamps") == true) }
            let frame = Frame(capacity: format.maxByteCount, format: format)
            for i in 0..<12 {
                try reader.read(i, into: frame)
                #expect(Array(frame.bytes) == written[i].bytes, "byte \(byte), frame \(i)")
            }
            // Replay and export say it.
            let source = try DumpSource(device: "dump:\(damaged),paced=false")
            #expect(source.headerDamage != nil && source.frameCount == 12)
        }
        // A damaged header with no whole frame after it is still not a dump.
        var empty = good.prefix(16 + jsonLength + 8 + 40)
        empty[20] ^= 1
        let cut = dir + "/cut.vfdump"
        try Data(empty).write(to: URL(fileURLWithPath: cut))
        #expect(throws: DumpError.self) { _ = try RawDumpReader(path: cut) }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A looping replay of a dump none of whose frames reads ends with an error after one pass (it
    /// spun for ever at full speed, 70 000 warnings a second); a dump cut under a running replay
    /// is an error that says so (it was every later frame counted corrupt, and exit 0).
    @Test func aReplayOfNothingReadableOrOfAFileCutUnderItEnds() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/all.vfdump"
        _ = try writeDump(path, count: 6, noise: 255)
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        for e in try RawDumpReader(path: path).entries { data[Int(e.offset) + RawDumpFormat.recordHeaderSize + 100] ^= 0x40 }
        let damaged = dir + "/damaged.vfdump"
        try data.write(to: URL(fileURLWithPath: damaged))
        let source = try DumpSource(device: "dump:\(damaged),paced=false,loop=0")
        _ = try source.configure(StreamRequest(pixelFormat: format.pixelFormat, width: format.width, height: format.height, fps: 30, bufferCount: 4))
        try source.start()
        var corrupt = 0, thrown: (any Error)?
        for _ in 0..<100 {
            do {
                if case .lost(.corrupt, _) = try source.next(timeoutNanoseconds: 100_000_000) { corrupt += 1 }
            } catch { thrown = error; break }
        }
        #expect(corrupt == 6)
        #expect("\(thrown.map { "\($0)" } ?? "none")".contains("no frame of the dump could be read in a whole pass"))
        source.stop()

        let cut = dir + "/cut.vfdump"
        try Data(contentsOf: URL(fileURLWithPath: path)).write(to: URL(fileURLWithPath: cut))
        let replay = try DumpSource(device: "dump:\(cut),paced=false")
        _ = try replay.configure(StreamRequest(pixelFormat: format.pixelFormat, width: format.width, height: format.height, fps: 30, bufferCount: 4))
        try replay.start()
        for _ in 0..<2 {
            guard case .frame(let f) = try replay.next(timeoutNanoseconds: 100_000_000) else { Issue.record("no frame"); return }
            f.release()
        }
        #expect(truncate(cut, 200) == 0)
        #expect { _ = try replay.next(timeoutNanoseconds: 100_000_000) } throws: { "\($0)".contains("was cut from") }
        replay.stop()
    }

    /// A damaged header and a damaged first frame, with frames larger than 64 KiB: the frames after
    /// it are recovered (the walk skips the damaged record by its stated length; with the header's
    /// length field damaged too, the search goes past the first 64 KiB). Both lost every frame.
    @Test func aDamagedHeaderAndFirstFrameLoseOnlyThatFrame() throws {
        let dir = makeTempDirectory()
        let path = dir + "/big.vfdump"
        let big = FrameFormat(.yuyv, width: 320, height: 240)
        let written = try writeDump(path, count: 6, format: big, noise: 255)
        let good = try Data(contentsOf: URL(fileURLWithPath: path))
        let jsonLength = Int(good[12]) | Int(good[13]) << 8
        let firstRecord = 16 + jsonLength + 8
        let jsonDevice = try #require(good.range(of: Data("\"test\"".utf8))).lowerBound + 2
        // (header byte, bit): inside the JSON; in the JSON length field (the stated start is lost).
        for (byte, bit) in [(jsonDevice, 0), (13, 2)] {
            var data = good
            data[byte] ^= UInt8(1 << bit)
            data[firstRecord + 2000] ^= 0x10   // inside frame 0's pixels
            let damaged = dir + "/d\(byte).vfdump"
            try data.write(to: URL(fileURLWithPath: damaged))
            let reader = try RawDumpReader(path: damaged)
            #expect(reader.headerDamage != nil, "byte \(byte)")
            #expect(reader.format == big, "byte \(byte)")
            let frame = Frame(capacity: big.maxByteCount, format: big)
            // Frames 1-5 read back bit-exact; frame 0 is left out (counted) or fails its checksum.
            var recovered = 0
            for i in 0..<reader.frameCount {
                guard (try? reader.read(i, into: frame)) != nil else { continue }
                let bytes = Array(frame.bytes)
                #expect(written[1...].contains { $0.bytes == bytes }, "byte \(byte), frame \(i)")
                recovered += 1
            }
            #expect(recovered == 5, "byte \(byte)")
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Sound captured before the first frame survives a damaged header (the records are walked
    /// from where the header said they start), even when it is more than 64 KiB of it; a
    /// header whose checksum holds but whose JSON does not read stays an error.
    @Test func aDamagedHeaderBeforeSoundKeepsTheSound() throws {
        let dir = makeTempDirectory()
        let path = dir + "/s.vfdump"
        let fmt = FrameFormat(.grey, width: 8, height: 4)
        let writer = try RawDumpWriter(path: path, format: fmt, interval: FrameInterval(numerator: 1, denominator: 30),
                                       device: "sim", overwrite: true, preallocate: false, compressionThreads: 1)
        // 40 periods of 10 ms stereo before the first frame: 64 KiB of sound.
        let samples = [Int16](repeating: 7, count: 2 * 480)
        for k in 0..<40 {
            try samples.withUnsafeBytes { raw in
                try writer.appendAudio(AudioBuffer(data: raw, format: AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2),
                                                   period: AudioPeriod(frames: 480, timestamp: Timestamp(nanoseconds: UInt64(k) * 10_000_000, clock: .monotonic),
                                                                       position: UInt64(k) * 480, discontinuity: false),
                                                   measuredRate: 48000))
            }
        }
        let frame = Frame(capacity: fmt.maxByteCount, format: fmt)
        for i in 0..<5 {
            memset(frame.data, Int32(i * 40), fmt.maxByteCount)
            frame.bytesUsed = fmt.maxByteCount
            frame.timestamp = Timestamp(nanoseconds: 400_000_000 + UInt64(i) * 33_333_333)
            try writer.append(frame)
        }
        try writer.close()
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        let device = try #require(data.range(of: Data("\"sim\"".utf8))).lowerBound + 1
        data[device] ^= 0x01
        try data.write(to: URL(fileURLWithPath: path))
        let reader = try RawDumpReader(path: path)
        #expect(reader.headerDamage != nil)
        #expect(reader.audioEntries.count == 40)
        #expect(reader.frameCount == 5)

        // A whole header (its checksum right) with JSON this build cannot read.
        var bad = try Data(contentsOf: URL(fileURLWithPath: path))
        bad[device] ^= 0x01
        let jsonLength = Int(bad[12]) | Int(bad[13]) << 8
        for i in 16..<(16 + jsonLength) { bad[i] = 0x20 }
        bad[16] = 0x7B   // "{" and blanks: no keys
        let sum = bad.prefix(16 + jsonLength).withUnsafeBytes { XXHash64.hash($0) }
        for i in 0..<8 { bad[16 + jsonLength + i] = UInt8(truncatingIfNeeded: sum >> (8 * i)) }
        let badPath = dir + "/bad.vfdump"
        try bad.write(to: URL(fileURLWithPath: badPath))
        let e = #expect(throws: DumpError.self) { _ = try RawDumpReader(path: badPath) }
        if case .notADump(_, let reason)? = e { #expect(reason.hasPrefix("its stream header does not read")) } else { Issue.record("\(String(describing: e))") }
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func notADumpIsATypedError() throws {
        let dir = makeTempDirectory()
        let path = dir + "/x.vfdump"
        try Data("hello world, not a dump at all".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: DumpError.notADump(path: path, reason: "no VFDUMP magic at the start")) { _ = try RawDumpReader(path: path) }
        // A dump cut inside its first 16 bytes is a truncated dump, not "not a dump".
        let cut = dir + "/cut.vfdump"
        try Data(RawDumpFormat.fileMagic + [1, 0]).write(to: URL(fileURLWithPath: cut))
        #expect(throws: DumpError.corruptRecord(path: cut, offset: 0, reason: "the file ends after 10 bytes, inside its header (truncated)")) {
            _ = try RawDumpReader(path: cut)
        }
        #expect(throws: DeviceError.self) { _ = try DumpProvider().open("dump:" + path) }
        #expect(throws: DeviceError.invalidDeviceOption(device: "dump:\(path),speed=2", option: "speed", reason: "unknown option (known: paced, loop, rebase, threads)")) {
            _ = try DumpSource(device: "dump:\(path),speed=2")
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func replaysThroughTheEngineAsFastAsPossible() throws {
        let dir = makeTempDirectory()
        let path = dir + "/r.vfdump"
        let written = try writeDump(path, count: 20)
        let provider = DumpProvider()
        #expect(provider.handles("dump:" + path))
        #expect(!provider.handles("/dev/video0"))
        let source = try #require(try provider.open("dump:\(path),paced=false,loop=2,rebase=false") as? DumpSource)
        #expect(!source.isLive)
        let cfg = try source.configure(StreamRequest(pixelFormat: .yuyv, width: 64, height: 48))
        #expect(throws: DeviceError.self) { _ = try source.configure(StreamRequest(pixelFormat: .nv12, width: 64, height: 48)) }
        let sink = CollectingConsumer()
        let engine = CaptureEngine(source: source, configuration: cfg, stages: [], consumers: [sink])
        try engine.start()
        engine.waitUntilFinished()
        #expect(sink.frames.count == 40)
        for (i, f) in sink.frames.enumerated() {
            #expect(f.bytes == written[i % 20].bytes)
            #expect(f.sequence == UInt64(i))
            #expect(f.metadata.exposureTime == written[i % 20].metadata.exposureTime)
        }
        // The second pass continues the time line one interval after the first.
        #expect(sink.frames[20].timestamp == written[19].timestamp + 33_333_333 + (written[19].timestamp - written[0].timestamp) - (written[19].timestamp - written[0].timestamp))
        #expect(engine.statistics.drops.total == 0)
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A replay decodes a compressed frame's chunks side by side (`threads`, default one per
    /// core, at most 4): the frames of an `auto` dump (planes in delta bit-planes) come through
    /// the engine bit-exact on 1 and 3 threads; a thread count out of range is a typed error.
    @Test func chunkedFramesReplayOnSeveralDecodingThreads() throws {
        let dir = makeTempDirectory("replay-threads")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1280, height: 720)
        let path = dir + "/t.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt, interval: FrameInterval(fps: 30), compressionThreads: 2)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        for i in 0..<6 {
            fillFrame(f, index: i, noise: 3)
            f.timestamp = Timestamp(nanoseconds: 1_000_000_000 + UInt64(i) * 33_333_333)
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        #expect(writer.framesSplit == 6)
        for threads in [1, 3] {
            let source = try DumpSource(device: "dump:\(path),paced=false,threads=\(threads)")
            #expect(source.decodeThreads == threads)
            let cfg = try source.configure(StreamRequest(pixelFormat: .yuyv, width: 1280, height: 720))
            let sink = CollectingConsumer()
            let engine = CaptureEngine(source: source, configuration: cfg, stages: [], consumers: [sink])
            try engine.start()
            engine.waitUntilFinished()
            #expect(sink.frames.count == 6)
            for (i, got) in sink.frames.enumerated() { #expect(got.bytes == written[i], "frame \(i), \(threads) threads") }
        }
        #expect(try DumpSource(device: "dump:\(path)").decodeThreads == min(4, ProcessInfo.processInfo.activeProcessorCount))
        #expect(throws: DeviceError.self) { _ = try DumpSource(device: "dump:\(path),threads=17") }
    }

    @Test func pacedReplayKeepsTheRecordedTiming() throws {
        let dir = makeTempDirectory()
        let path = dir + "/p.vfdump"
        _ = try writeDump(path, count: 10)
        let source = try DumpSource(device: "dump:" + path)
        #expect(source.isLive)
        // Its active format before any request is the recorded one: a request naming only the
        // pixel format is completed with the recorded size (2 Dec: with the CLI's 1280x720).
        #expect(source.activeConfiguration?.format == source.recordedConfiguration().format)
        let sink = CollectingConsumer()
        let engine = CaptureEngine(source: source, configuration: source.recordedConfiguration(), stages: [], consumers: [sink])
        try engine.start()
        engine.waitUntilFinished()
        #expect(sink.frames.count == 10)
        let written = try RawDumpReader(path: path).entries.map(\.timestampNanoseconds)
        // Rebased timestamps keep the recorded spacing, and frames arrive no earlier than it.
        for i in 1..<10 {
            #expect(sink.frames[i].timestamp - sink.frames[0].timestamp == written[i] - written[0])
            #expect(sink.frames[i].received >= sink.frames[i].timestamp)
        }
        // The replay took (at least) the recorded time from its first timestamp to the last frame.
        let span = sink.frames[9].received - sink.frames[0].timestamp
        #expect(span >= written[9] - written[0], "replay took \(span) ns")
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func exportsToY4MAndImportsBackBitExact() throws {
        let dir = makeTempDirectory()
        let path = dir + "/i.vfdump"
        let i420 = FrameFormat(.i420, width: 64, height: 48)
        let written = try writeDump(path, count: 8, format: i420)
        let y4m = dir + "/i.y4m"
        let r = try DumpConversion.exportY4M(dump: path, to: y4m)
        #expect(r.frames == 8)
        let probe = try ffprobe(y4m)
        #expect(intValue(probe.stream("video")?["nb_read_frames"]) == 8)
        #expect(throws: SinkError.fileExists(path: y4m)) { _ = try DumpConversion.exportY4M(dump: path, to: y4m) }
        let back = dir + "/back.vfdump"
        let r2 = try DumpConversion.importY4M(y4m, to: back)
        #expect(r2.frames == 8)
        let reader = try RawDumpReader(path: back)
        let frame = Frame(capacity: i420.maxByteCount, format: i420)
        for i in 0..<8 {
            try reader.read(i, into: frame)
            #expect(Array(frame.bytes) == written[i].bytes)
        }
        // YUYV dumps export as 4:2:2 planar, which ffmpeg reads.
        let yuyvDump = dir + "/y.vfdump"
        _ = try writeDump(yuyvDump, count: 5)
        _ = try DumpConversion.exportY4M(dump: yuyvDump, to: dir + "/y.y4m")
        let p2 = try ffprobe(dir + "/y.y4m")
        #expect(p2.stream("video")?["pix_fmt"] as? String == "yuv422p")
        #expect(intValue(p2.stream("video")?["nb_read_frames"]) == 5)
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A `.y4m` that says its YUV is limited range is stretched to the full range a dump holds
    /// (its bytes were kept and then read as full range: blacks lifted, colours off by up to 7
    /// levels in every export); one that says FULL, or nothing, is kept byte for byte.
    @Test func aLimitedRangeY4MIsStretchedOnImport() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // 64x48 I420: luma in three bands 16 / 126 / 235, chroma 16 / 128 / 240 (the stretch keeps
        // neutral chroma at 128, so 16 lands at 0.5, rounded to 1).
        var planes = [UInt8]()
        for _ in 0..<48 { for x in 0..<64 { planes.append(x < 21 ? 16 : x < 42 ? 126 : 235) } }
        for _ in 0..<2 { for _ in 0..<24 { for x in 0..<32 { planes.append(x < 10 ? 16 : x < 21 ? 128 : 240) } } }
        for tag in ["XCOLORRANGE=LIMITED", "XCOLORRANGE=FULL", ""] {
            let y4m = dir + "/l\(tag.count).y4m", back = dir + "/l\(tag.count).vfdump"
            var data = Data("YUV4MPEG2 W64 H48 F30:1 Ip A1:1 C420jpeg\(tag.isEmpty ? "" : " " + tag)\n".utf8)
            for _ in 0..<2 { data.append(Data("FRAME\n".utf8)); data.append(contentsOf: planes) }
            try data.write(to: URL(fileURLWithPath: y4m))
            let r = try DumpConversion.importY4M(y4m, to: back)
            #expect(r.frames == 2 && r.stretchedLimitedRange == (tag == "XCOLORRANGE=LIMITED"), "\(tag)")
            let reader = try RawDumpReader(path: back)
            let f = Frame(capacity: reader.format.maxByteCount, format: reader.format)
            try reader.read(1, into: f)
            let b = Array(f.bytes)
            if tag == "XCOLORRANGE=LIMITED" {
                #expect(b[0] == 0 && b[30] == 128 && b[60] == 255, "luma \(b[0]) \(b[30]) \(b[60])")
                let u = 64 * 48
                #expect(b[u] <= 1 && b[u + 15] == 128 && b[u + 30] == 255, "chroma \(b[u]) \(b[u + 15]) \(b[u + 30])")
            } else {
                #expect(b == planes, "\(tag): bytes kept")
            }
        }
    }

    /// A y4m cut inside a frame (its writer stopped) imports its whole frames and says what was
    /// left; an error in its header names the file.
    @Test func aTruncatedY4MImportsItsWholeFrames() throws {
        let dir = makeTempDirectory()
        let path = dir + "/t.vfdump"
        let i420 = FrameFormat(.i420, width: 64, height: 48)
        let written = try writeDump(path, count: 6, format: i420)
        let y4m = dir + "/t.y4m"
        _ = try DumpConversion.exportY4M(dump: path, to: y4m)
        let whole = try Data(contentsOf: URL(fileURLWithPath: y4m))
        let cut = dir + "/cut.y4m"
        try whole.prefix(whole.count - 1000).write(to: URL(fileURLWithPath: cut))
        let back = dir + "/back.vfdump"
        let r = try DumpConversion.importY4M(cut, to: back)
        #expect(r.frames == 5)
        let damage = try #require(r.damage)
        #expect(damage.reason.contains("frame 5 is truncated"), "\(damage)")
        #expect(damage.ignoredBytes > 0 && damage.offset + damage.ignoredBytes == UInt64(whole.count - 1000))
        let reader = try RawDumpReader(path: back)
        #expect(reader.frameCount == 5)
        let frame = Frame(capacity: i420.maxByteCount, format: i420)
        for i in 0..<5 { try reader.read(i, into: frame); #expect(Array(frame.bytes) == written[i].bytes) }
        // A header that does not read: the error names the file.
        let bad = dir + "/bad.y4m"
        try Data("YUV4MPEG2 W0 H48\n".utf8).write(to: URL(fileURLWithPath: bad))
        do { _ = try DumpConversion.importY4M(bad, to: dir + "/x.vfdump"); Issue.record("imported a bad header") } catch {
            #expect("\(error)".contains("'\(bad)'"), "\(error)")
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func dumpOutputRecordsAnEngineRun() throws {
        let dir = makeTempDirectory()
        let path = dir + "/o.vfdump"
        let source = SyntheticSource(format: format, count: 30)
        let out = RawDumpOutput(path: path)
        let engine = CaptureEngine(source: source, configuration: source.configuration, stages: [], consumers: [out])
        try engine.start()
        engine.waitUntilFinished()
        #expect(out.framesWritten == 30)
        #expect(out.error == nil)
        let reader = try RawDumpReader(path: path)
        #expect(reader.frameCount == 30)
        #expect(reader.usedFooterIndex)
        let again = RawDumpOutput(path: path)
        #expect(throws: SinkError.fileExists(path: path)) { try again.start(configuration: source.configuration) }
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func xxhash64MatchesTheReference() {
        #expect(XXHash64.hash(UnsafeRawBufferPointer(start: nil, count: 0)) == 0xEF46_DB37_51D8_E999)
        let abc = Array("abc".utf8)
        #expect(abc.withUnsafeBytes { XXHash64.hash($0) } == 0x44BC_2CF5_AD77_0999)
    }

    /// Hashing while the bytes arrive in pieces gives the one-shot hash at every length (below and
    /// above one stripe, piece boundaries mid-buffer, a tail shorter than a stripe), and a short
    /// fill is reported, not hashed past.
    @Test func xxhash64WhileFillingMatchesOneShot() {
        var source = [UInt8](repeating: 0, count: 70_000)
        for i in source.indices { source[i] = UInt8(truncatingIfNeeded: (i &* 2_654_435_761) >> 11) }
        for (len, chunk) in [(0, 32), (31, 32), (32, 32), (33, 32), (100, 64), (65_536, 4096), (70_000, 256 << 10), (69_999, 96)] {
            var dest = [UInt8](repeating: 0, count: max(len, 1))
            let oneShot = source.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<len]), seed: 7) }
            let (streamed, filled) = dest.withUnsafeMutableBytes { d in
                source.withUnsafeBytes { s in
                    XXHash64.hashWhileFilling(UnsafeRawPointer(d.baseAddress!), count: len, seed: 7, chunk: chunk) { offset, n in
                        UnsafeMutableRawBufferPointer(rebasing: d[offset..<(offset + n)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: s[offset..<(offset + n)]))
                        return n
                    }
                }
            }
            #expect(streamed == oneShot && filled == len, "length \(len), pieces of \(chunk)")
            #expect(Array(dest.prefix(len)) == Array(source.prefix(len)))
        }
        var dest = [UInt8](repeating: 0, count: 1000)
        let short = dest.withUnsafeMutableBytes { d in XXHash64.hashWhileFilling(UnsafeRawPointer(d.baseAddress!), count: 1000, chunk: 256) { offset, n in offset == 512 ? 10 : n } }
        #expect(short.filled == 522)
    }

    /// The streaming hash (a record's payload hashed piece by piece as it is written) equals the
    /// one-shot hash for every way of cutting the bytes: pieces shorter than a stripe, pieces that
    /// end mid-stripe, empty pieces, one piece.
    @Test func xxhash64StreamingMatchesOneShot() {
        var source = [UInt8](repeating: 0, count: 9_000)
        for i in source.indices { source[i] = UInt8(truncatingIfNeeded: (i &* 2_654_435_761) >> 13) }
        var rng = UInt64(5)
        for len in [0, 1, 31, 32, 33, 63, 64, 65, 100, 4096, 9_000] {
            let oneShot = source.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<len]), seed: 11) }
            for cut in [1, 3, 7, 31, 32, 33, 1000, 0] {
                var h = XXHash64.Streaming(seed: 11)
                var at = 0
                source.withUnsafeBytes { s in
                    while at < len {
                        rng = rng &* 6364136223846793005 &+ 1442695040888963407
                        // cut 0: random piece lengths, empty pieces included
                        let n = min(len - at, cut == 0 ? Int(rng >> 58) : cut)
                        h.update(UnsafeRawBufferPointer(rebasing: s[at..<(at + n)]))
                        at += n
                    }
                }
                #expect(h.digest() == oneShot, "length \(len), pieces of \(cut)")
            }
        }
    }

    /// The planar split runs band by band on the compression threads: with thread counts that do
    /// not divide the height, a smooth luma (compressed) or a noisy one (stored as it is, written
    /// straight from the planes), every frame reads back bit-exact and passes a full verify; the
    /// record holds three bands per thread (Y's, then U's, then V's).
    @Test(arguments: [1, 2, 4, 7])
    func planarBandsOnEveryThreadCountReadBackBitExact(_ threads: Int) throws {
        let dir = makeTempDirectory("bands-\(threads)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1282, height: 411)   // 1.05 MB: split; 411 rows in uneven bands
        let path = dir + "/b.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt, compressionThreads: threads)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        var rng = UInt64(3)
        for i in 0..<4 {
            let p = f.data.assumingMemoryBound(to: UInt8.self)
            for px in 0..<(fmt.width * fmt.height / 2) {
                rng = rng &* 6364136223846793005 &+ 1442695040888963407
                let smooth = UInt8(truncatingIfNeeded: px / 900 + i)
                p[4 * px] = i % 2 == 0 ? UInt8(truncatingIfNeeded: rng >> 33) : smooth
                p[4 * px + 2] = i % 2 == 0 ? UInt8(truncatingIfNeeded: rng >> 41) : smooth &+ 1
                p[4 * px + 1] = UInt8(truncatingIfNeeded: 90 + px / 5000)
                p[4 * px + 3] = UInt8(truncatingIfNeeded: 160 - px / 7000)
            }
            f.bytesUsed = fmt.maxByteCount
            f.sequence = UInt64(i)
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        #expect(writer.framesSplit == 4 && writer.framesCompressed == 4)
        let reader = try RawDumpReader(path: path, verify: true)
        #expect(reader.damage == nil && reader.frameCount == 4)
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let back = Frame(capacity: fmt.maxByteCount, format: fmt)
        for i in 0..<4 {
            try reader.read(i, into: back)
            #expect(Array(back.bytes) == written[i], "frame \(i)")
            let e = reader.entries[i]
            let payload = Int(e.offset) + RawDumpFormat.recordHeaderSize + (Int(data[Int(e.offset) + 52]) | Int(data[Int(e.offset) + 53]) << 8)
            #expect(Int(data[payload]) == 3 * min(threads, 21), "frame \(i): three bands per thread")
            if i % 2 == 1 { #expect(e.storedLength < e.rawLength / 2, "smooth luma compressed: \(e.storedLength) of \(e.rawLength)") }
        }
    }

    /// Frames stored as they are (`none`), hashed and written in pieces, pass a full verify and
    /// read back bit-exact; a byte flipped in the middle of a payload fails its checksum.
    @Test func storedFramesWrittenInPiecesVerify() throws {
        let dir = makeTempDirectory("pieces")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fmt = FrameFormat(.yuyv, width: 1920, height: 1080)
        let path = dir + "/n.vfdump"
        let writer = try RawDumpWriter(path: path, format: fmt, compression: .none)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        var written: [[UInt8]] = []
        for i in 0..<3 {
            fillFrame(f, index: i, noise: 30)
            f.metadata.exposureTime = Double(i) / 100
            try writer.append(f)
            written.append(Array(f.bytes))
        }
        try writer.close()
        let reader = try RawDumpReader(path: path, verify: true)
        #expect(reader.damage == nil && reader.frameCount == 3)
        let back = Frame(capacity: fmt.maxByteCount, format: fmt)
        for i in 0..<3 {
            try reader.read(i, into: back)
            #expect(Array(back.bytes) == written[i] && back.metadata.exposureTime == Double(i) / 100)
        }
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        data[Int(reader.entries[1].offset) + 2_000_000] ^= 0x40
        let badPath = dir + "/bad.vfdump"
        try data.write(to: URL(fileURLWithPath: badPath))
        #expect(throws: DumpError.self) { try RawDumpReader(path: badPath).read(1, into: back) }
    }

    @Test func mjpegDumpExportsToY4M() throws {
        let dir = makeTempDirectory()
        let path = dir + "/m.vfdump"
        let source = SyntheticSource(format: FrameFormat(.yuyv, width: 64, height: 48), count: 6, mjpeg: true)
        let out = RawDumpOutput(path: path)
        let engine = CaptureEngine(source: source, configuration: source.configuration, stages: [], consumers: [out])
        try engine.start()
        engine.waitUntilFinished()
        #expect(out.framesWritten == 6)
        let r = try DumpConversion.exportY4M(dump: path, to: dir + "/m.y4m")
        #expect(r.frames == 6)
        let v = try #require(try ffprobe(dir + "/m.y4m").stream("video"))
        #expect(v["pix_fmt"] as? String == "yuv422p")
        #expect(intValue(v["nb_read_frames"]) == 6)
        // The pictures are the decoded JPEGs: compare the first luma plane with TurboJPEG's decode.
        let y4m = try Y4MReader(path: dir + "/m.y4m")
        let frame = Frame(capacity: y4m.format.maxByteCount, format: y4m.format)
        #expect(try y4m.read(into: frame))
        let reader = try RawDumpReader(path: path)
        let jpeg = Frame(capacity: reader.maxRawLength, format: reader.format)
        try reader.read(0, into: jpeg)
        let d = try JPEGDecoder().decodePlanes(UnsafeRawBufferPointer(jpeg.bytes))
        #expect(Array(UnsafeRawBufferPointer(start: frame.data, count: 64 * 48)) == d.y)
        try? FileManager.default.removeItem(atPath: dir)
    }
}
