import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// Inputs that crashed a fuzz target (scripts/fuzz.sh), kept as regression tests: each must now be
/// a typed error or a clean result.
@Suite struct FuzzRegressionTests {
    /// FuzzMJPEG, crash-efc9c8a7: a still's EXIF whose sub-IFD entry points past the APP1 segment
    /// made `JPEGMarkers.readExif` read outside the buffer (a Swift bounds trap).
    static let exifOffsetPastSegment: [UInt8] = [
        0xff, 0xd8, 0xff, 0xe1, 0x00, 0x4c, 0x45, 0x78, 0x69, 0x66, 0x00, 0x00, 0x49, 0x49, 0x2a, 0x00, 
        0x08, 0x00, 0x00, 0x12, 0x01, 0x00, 0x00, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 
        0x00, 0x00, 0x69, 0x87, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x26, 0x00, 0x00, 0x00, 0x00, 0x00, 
        0x00, 0x00, 0x02, 0x00, 0x27, 0x88, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00, 
        0x00, 0x90, 0x07, 0x00, 0x04, 0x00, 0x00, 0xba, 0x30, 0x32, 0x33, 0x30, 0x00, 0x00, 0x00, 0x00, 
        0xff, 0xdb, 0x00, 0x43, 0x00, 0x10, 0x0b, 0x0c, 0x0e, 0x0c, 0x0a, 0x10, 0x0e, 0x0d, 0x0e, 0x12, 
        0x11, 0x10, 0x13, 0x18, 0x28, 0x1a, 0x18, 0x16, 0x16, 0x18, 0x31, 0x23, 0x25, 0x1d, 0x28, 0x3a, 
        0x33, 0x3d, 0x3c, 0x39, 0x33, 0x38, 0x37, 0x40, 0x48, 0x5c, 0x4e, 0x40, 0x44, 0x57, 0x45, 0x37, 
        0x38, 0x50, 0x6d, 0x51, 0x57, 0x5f, 0x62, 0x67, 0x68, 0x67, 0x3e, 0x4d, 0x71, 0x79, 0x70, 0x64, 
        0x78, 0x5c, 0x65, 0x67, 0x63, 0xff, 0xc0, 0x00, 0x0b, 0x08, 0x00, 0x10, 0x00, 0x10, 0x01, 0x01, 
        0x11, 0x00, 0xff, 0xc4, 0x00, 0x1f, 0x00, 0x00, 0x01, 0x05, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 
        0x09, 0x0a, 0x0b, 0xff, 0xc4, 0x00, 0xb5, 0x10, 0x00, 0x02, 0x01, 0x03, 0x03, 0x02, 0x04, 0x03, 
        0x05, 0x05, 0x04, 0x04, 0x00, 0x00, 0x01, 0x7d, 0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 
        0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 
        0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0, 0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 
        0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 
        0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 
        0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 
        0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 
        0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 
        0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 
        0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0x18, 0x1a, 0xea, 
        0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 
        0x00, 0x00, 0x3f, 0x00, 0x64, 0xcb, 0x05, 0xb2, 0xa3, 0x6a, 0x5a, 0x22, 0xc2, 0x91, 0x8c, 0xf9, 
        0x90, 0x8d, 0xa8, 0x32, 0x71, 0xf3, 0x34, 0x67, 0x1d, 0x47, 0x42, 0x7b, 0xfb, 0xd3, 0x6d, 0xd6, 
        0x13, 0xf3, 0x58, 0x6a, 0xf2, 0x26, 0x13, 0x84, 0x9d, 0x43, 0x65, 0xb9, 0xfe, 0x21, 0x8c, 0x0e, 
        0x9d, 0x8d, 0x4f, 0x6e, 0xb3, 0x0f, 0x9a, 0xc3, 0x57, 0x8d, 0xf2, 0xfc, 0x24, 0xea, 0x57, 0x0b, 
        0xcf, 0xf1, 0x0c, 0xe4, 0xf4, 0xec, 0x29, 0xd7, 0x02, 0x77, 0x91, 0x85, 0xfe, 0x8e, 0xb7, 0x46, 
        0x53, 0x8f, 0x3e, 0x04, 0xde, 0xcd, 0xb7, 0x18, 0x3b, 0x97, 0xe6, 0x1d, 0xba, 0xe3, 0x8e, 0x3d, 
        0x6b, 0xff, 0xd9
    ]

    /// FuzzDump, crash-46cb8aad: a damaged index entry gave a frame offset past `off_t.max`, and
    /// `off_t(offset)` in the reader's pread trapped ("Not enough bits to represent the passed value").
    @Test func dumpOffsetPastTheLargestFileOffsetIsACorruptRecord() throws {
        let fd = open("/dev/null", O_RDONLY)
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 16)
        for offset in [UInt64(Int64.max) + 1, UInt64.max, UInt64(Int64.max) - 4] {
            #expect(throws: DumpError.self) { _ = try RawDumpReader.pread(fd, &buf, offset, "/dev/null") }
        }
        #expect(try RawDumpReader.pread(fd, &buf, 0, "/dev/null") == 0)
    }

    /// FuzzDump, crash-9348feb0 (Fuzz/Corpus/FuzzDump/regression-audio-size-overflow): an audio
    /// record whose frame and channel counts (32-bit fields) multiply past `Int.max` trapped in
    /// `readAudio`'s size check. Here a real sound record is damaged that way, its checksum made
    /// right again so the check behind it is reached.
    @Test func audioRecordWhoseSizeOverflowsIsACorruptRecord() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vf-fuzz-audio-\(getpid()).vfdump").path
        defer { unlink(path) }
        let format = FrameFormat(.grey, width: 8, height: 4)
        let writer = try RawDumpWriter(path: path, format: format, interval: FrameInterval(numerator: 1, denominator: 30),
                                       device: "sim", overwrite: true, preallocate: false, compressionThreads: 1)
        let frame = Frame(capacity: format.maxByteCount, format: format)
        frame.bytesUsed = format.maxByteCount
        try writer.append(frame)
        let samples = [Int16](repeating: 7, count: 2 * 160)
        try samples.withUnsafeBytes { raw in
            try writer.appendAudio(AudioBuffer(data: raw, format: AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2),
                                               period: AudioPeriod(frames: 160, timestamp: Timestamp(nanoseconds: 0, clock: .monotonic), position: 0, discontinuity: false),
                                               measuredRate: 48000))
        }
        try writer.close()
        let offset = try Int(RawDumpReader(path: path).audioEntries[0].offset)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        for i in 24..<32 { bytes[offset + i] = 0xFF }  // channels and frames: 2^32 − 1 each
        let stored = bytes[offset + 8..<offset + 12].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) }
        let payloadStart = offset + RawDumpFormat.recordHeaderSize
        var scratch: [UInt8] = []
        let seed = bytes.withUnsafeBytes { RawDumpFormat.recordSeed(header: $0.baseAddress! + offset, metadata: [], scratch: &scratch) }
        let sum = bytes.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[payloadStart..<payloadStart + stored]), seed: seed) }
        for i in 0..<8 { bytes[offset + 64 + i] = UInt8(truncatingIfNeeded: sum >> (8 * i)) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let reader = try RawDumpReader(path: path)
        var out: [UInt8] = []
        #expect(throws: DumpError.self) { try reader.readAudio(0, into: &out) }
        #expect(out.isEmpty)
    }

    @Test func exifWithAnOffsetPastItsSegmentIsCorruptData() throws {
        let jpeg = Self.exifOffsetPastSegment
        #expect(throws: SinkError.self) { try jpeg.withUnsafeBytes { try JPEGMarkers.readExif($0) } }
        // The still it came in is still passed through untouched with fresh EXIF.
        let still = try jpeg.withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: ExifInfo(iso: 100).app1Segment()) }
        #expect(try still.withUnsafeBytes { try JPEGMarkers.readExif($0) }.iso == 100)
    }

    /// An EXIF sub-IFD pointing at itself recursed until the stack ran out.
    @Test func exifSubIFDThatPointsAtItselfIsCorruptData() throws {
        // TIFF: "II", 42, IFD0 at 8 with one entry: ExifIFD (0x8769) pointing at 8 again.
        var tiff: [UInt8] = [0x49, 0x49, 0x2A, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01, 0x00, 0x69, 0x87, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00]
        tiff += [0, 0, 0, 0]
        let app1: [UInt8] = [0xFF, 0xE1] + [UInt8((tiff.count + 8) >> 8), UInt8((tiff.count + 8) & 0xFF)] + Array("Exif".utf8) + [0, 0] + tiff
        let sos: [UInt8] = [0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00, 0xFF, 0xD9]
        let jpeg: [UInt8] = [0xFF, 0xD8] + app1 + sos
        #expect(throws: SinkError.self) { try jpeg.withUnsafeBytes { try JPEGMarkers.readExif($0) } }
    }

    /// The EXIF this module writes still reads back (the bounds checks cut nothing valid).
    @Test func writtenExifStillReadsBack() throws {
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00, 0xFF, 0xD9]
        let info = ExifInfo(dateTimeOriginal: Date(timeIntervalSince1970: 1_700_000_000), exposureTime: 0.01, iso: 400, orientation: .right)
        let still = try jpeg.withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: info.app1Segment()) }
        let back = try still.withUnsafeBytes { try JPEGMarkers.readExif($0) }
        #expect(back.iso == 400)
        #expect(back.orientation == ExifOrientation.right.rawValue)
        #expect(abs((back.exposure ?? 0) - 0.01) < 1e-6)
        #expect(back.date?.count == 19)
    }

    /// FuzzY4M, crash-6e792476: `F4:21999999999999` (a rate part beyond UInt32) trapped when the
    /// reader made the frame interval; now the header is a malformed-header error.
    @Test func y4mRateBeyondUInt32IsMalformedHeader() {
        #expect(throws: Y4MError.self) { try Y4MHeader.parse(Array("YUV4MPEG2 W2 H2 F4:21999999999999".utf8)) }
        #expect(throws: Y4MError.self) { try Y4MHeader.parse(Array("YUV4MPEG2 W2 H2 F4294967296:1".utf8)) }
        #expect((try? Y4MHeader.parse(Array("YUV4MPEG2 W2 H2 F4294967295:1".utf8)))?.interval != nil)
    }

    /// The slowest rate a header can state (1 frame in 2^32-1 s): the frames' times saturate
    /// instead of overflowing.
    @Test func y4mSlowestRateReadsEveryFrame() throws {
        let header = Array("YUV4MPEG2 W2 H2 F1:4294967295 Cmono\n".utf8)
        var bytes = header
        for i in 0..<8 { bytes += Array("FRAME\n".utf8) + [UInt8](repeating: UInt8(i), count: 4) }
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        _ = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress!, $0.count) }
        close(fds[1])
        let reader = try Y4MReader(fileDescriptor: fds[0], path: "slow.y4m", ownsDescriptor: true)
        let frame = Frame(capacity: 4, format: reader.format)
        var times: [UInt64] = []
        while try reader.read(into: frame) { times.append(frame.timestamp.nanoseconds) }
        #expect(times.count == 8)
        #expect(times.last == .max)
        #expect(times[1] == 4_294_967_295_000_000_000)
    }

    /// FuzzMetadata, crash-cac71d19: a NaN capture date trapped in the EXIF date conversion. Dates
    /// EXIF cannot hold and exposures that are not finite or too short are left out; a NaN gain is
    /// the lowest ISO.
    @Test(arguments: [Double.nan, .infinity, -.infinity, -1, 1e300, 9.9e15])
    func exifWithExtremeValuesIsWrittenWithoutThem(_ value: Double) throws {
        let info = ExifInfo(dateTimeOriginal: Date(timeIntervalSince1970: value), exposureTime: value == 1e300 ? 1e-300 : value,
                            iso: ExifInfo.iso(fromGain: value), orientation: .up)
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00, 0xFF, 0xD9]
        let still = try jpeg.withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: info.app1Segment()) }
        let back = try still.withUnsafeBytes { try JPEGMarkers.readExif($0) }
        #expect(back.date == nil)
        #expect(back.iso != nil)
        #expect(ExifInfo.iso(fromGain: .nan) == 1)
    }

    /// FuzzDump, crash-469a181f (Fuzz/Corpus/FuzzDump/regress-interval-overflow): a damaged
    /// record's timestamp made a step between frames near UInt64.max, and rounding the median step
    /// to microseconds (`+ 500`) trapped while the reader opened the dump.
    @Test func aTimestampStepNearTheLargestIntegerOpensTheDump() throws {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let input = try [UInt8](Data(contentsOf: repo.appendingPathComponent("Fuzz/Corpus/FuzzDump/regress-interval-overflow")))
        #expect(input[0] == 0)  // mode: no verify, no checksum repair, one decode thread
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vf-fuzz-interval-\(getpid()).vfdump").path
        defer { unlink(path) }
        try Data(input.dropFirst()).write(to: URL(fileURLWithPath: path))
        let reader = try RawDumpReader(path: path)
        #expect(reader.frameCount >= 1)
        #expect(reader.info.interval.numerator >= 1)
        #expect(reader.headerDamage != nil)
    }
}
