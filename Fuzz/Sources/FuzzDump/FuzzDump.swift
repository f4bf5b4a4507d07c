// The raw dump reader (`dump:FILE` replay, `viewfinder dump`): the stream header, the footer
// index, the index rebuilt by walking records (a crashed or damaged dump), frame and audio reads
// with LZ4 and chunked-LZ4 payloads.
//
// Input: one mode byte, then the file. Mode bit 0: open with `verify` (every record's checksum
// checked while the index is rebuilt). Bit 1: repair the checksums first (stream header, every
// record's payload), so that mutations reach the code behind the checksums instead of stopping
// at the first mismatch. Bit 2: decode chunked payloads on two threads (the replay's default).
import FuzzSupport
import Glibc
import ViewfinderKit

@main enum FuzzDump {
    static func main() {
        FuzzSeeds.handle(makeSeeds)
        let file = MemoryFile(name: "dump")
        FuzzDriver.run { data in
            var input = FuzzInput(data)
            let mode = input.byte()
            var bytes = Array(input.remaining)
            if mode & 2 != 0 { repairChecksums(&bytes) }
            bytes.withUnsafeBytes { file.set($0) }
            guard let reader = try? RawDumpReader(path: file.path, verify: mode & 1 != 0, decodeThreads: mode & 4 != 0 ? 2 : 1) else { return }
            let capacity = reader.maxRawLength
            if capacity <= fuzzFrameByteLimit {
                let frame = Frame(capacity: max(capacity, 1), format: reader.format)
                for i in 0..<min(reader.frameCount, 32) { _ = try? reader.read(i, into: frame) }
                _ = try? reader.read(reader.frameCount, into: frame)
            }
            var samples: [UInt8] = []
            for i in 0..<min(reader.audioEntries.count, 32) where reader.audioEntries[i].storedLength <= UInt32(fuzzFrameByteLimit) {
                samples.removeAll(keepingCapacity: true)
                _ = try? reader.readAudio(i, into: &samples)
            }
        }
    }

    static func get<T: FixedWidthInteger>(_ b: [UInt8], _ o: Int, _: T.Type) -> T {
        var v: T = 0
        for i in 0..<(T.bitWidth / 8) { v |= T(b[o + i]) << (8 * i) }
        return v
    }

    static func put(_ v: UInt64, _ b: inout [UInt8], _ o: Int) {
        for i in 0..<8 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * i)) }
    }

    /// Recomputes the stream header's checksum and every walkable record's payload checksum, as
    /// the writer computes them (RawDumpFormat: XXH64 of header bytes 0..<64 and the metadata as
    /// the seed of the payload's XXH64).
    static func repairChecksums(_ b: inout [UInt8]) {
        guard b.count >= 16 else { return }
        let jsonLength = Int(get(b, 12, UInt32.self))
        guard jsonLength < 1 << 20, 16 + jsonLength + 8 <= b.count else { return }
        let sum = b.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<16 + jsonLength])) }
        put(sum, &b, 16 + jsonLength)
        var offset = 16 + jsonLength + 8
        let headerSize = RawDumpFormat.recordHeaderSize
        while b.count - offset >= headerSize {
            guard get(b, offset, UInt32.self) == RawDumpFormat.recordMagic else { return }
            let type = b[offset + 4]
            let stored = Int(get(b, offset + 8, UInt32.self))
            let metaLength = Int(get(b, offset + 52, UInt32.self))
            let metaStart = offset + headerSize
            guard metaLength < 1 << 16, stored <= b.count, metaStart + metaLength + stored <= b.count else { return }
            let seed: UInt64 = b.withUnsafeBytes { all in
                let head = UnsafeRawBufferPointer(rebasing: all[offset..<offset + 64])
                if type == 2 { return XXHash64.hash(head) }
                return XXHash64.hash([head, UnsafeRawBufferPointer(rebasing: all[metaStart..<metaStart + metaLength])])
            }
            let payloadStart = metaStart + (type == 2 ? 0 : metaLength)
            let payloadSum = b.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[payloadStart..<payloadStart + stored]), seed: seed) }
            put(payloadSum, &b, offset + 64)
            offset = payloadStart + stored
        }
    }

    static func makeSeeds(_ dir: String) throws {
        // Small frames (one LZ4 block), a 1 MiB frame (chunked LZ4, 2 chunks), an unfinished dump
        // (no footer: the index is rebuilt) and one with sound records.
        let cases: [(name: String, format: FrameFormat, frames: Int, threads: Int, close: Bool, audio: Bool)] = [
            ("small", FrameFormat(.yuyv, width: 16, height: 8), 3, 1, true, false),
            ("grey", FrameFormat(.grey, width: 8, height: 4), 2, 1, true, false),
            ("chunked", FrameFormat(.yuyv, width: 512, height: 1024), 1, 2, true, false),
            ("unfinished", FrameFormat(.yuyv, width: 16, height: 8), 3, 1, false, false),
            ("sound", FrameFormat(.yuyv, width: 16, height: 8), 2, 1, true, true),
        ]
        for c in cases {
            let file = "\(dir)/\(c.name).tmp"
            do {
                let writer = try RawDumpWriter(path: file, format: c.format, interval: FrameInterval(numerator: 1, denominator: 30),
                                               device: "sim", overwrite: true, preallocate: false, compressionThreads: c.threads)
                let frame = Frame(capacity: c.format.maxByteCount, format: c.format)
                for i in 0..<c.frames {
                    for b in 0..<c.format.maxByteCount { frame.data.storeBytes(of: UInt8(truncatingIfNeeded: (b / 64) &+ i), toByteOffset: b, as: UInt8.self) }
                    frame.bytesUsed = c.format.maxByteCount
                    frame.sequence = UInt64(i)
                    frame.timestamp = Timestamp(nanoseconds: UInt64(i) * 33_333_333, clock: .monotonic)
                    try writer.append(frame)
                    if c.audio {
                        let samples = [Int16](repeating: Int16(i * 100), count: 2 * 160)
                        try samples.withUnsafeBytes { raw in
                            let buffer = AudioBuffer(data: raw, format: AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2),
                                                     period: AudioPeriod(frames: 160, timestamp: Timestamp(nanoseconds: UInt64(i) * 3_333_333, clock: .monotonic), position: UInt64(i * 160), discontinuity: false),
                                                     measuredRate: 48000)
                            try writer.appendAudio(buffer)
                        }
                    }
                }
                try writer.close()
            }
            var bytes = try FuzzSeeds.read(file)
            unlink(file)
            if !c.close { bytes.removeLast(min(100, bytes.count)) }  // the footer index lost: rebuilt by the scan
            bytes.insert(c.name == "unfinished" ? 1 : 0, at: 0)
            try FuzzSeeds.write(bytes, to: dir, name: c.name + ".seed")
        }
    }
}
