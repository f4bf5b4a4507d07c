import Foundation
import Viewfinder

/// The raw dump file format ("VFDUMP"): an append-only sequence of LZ4-compressed frame records.
///
/// Everything is little-endian.
///
/// ```text
/// stream header
///   0  8  magic "VFDUMP\r\n"
///   8  2  version (4; versions 1, without audio records, 2, without planar records, and 3, whose
///         planar records are LZ4 only, are read the same way)
///  10  2  flags (0)
///  12  4  JSON length L
///  16  L  JSON: {"pixelFormat","width","height","bytesPerRow","intervalNumerator",
///                 "intervalDenominator","device","created","codec":"lz4-block"}
/// 16+L 8  XXH64 of bytes 0 ..< 16+L
///
/// record (frames and the index), 72-byte fixed header
///   0  4  magic "VFRC"
///   4  1  type: 1 frame, 2 index
///   5  1  flags: bit 0 payload is LZ4 block-compressed (else stored as is),
///                bit 1 pixels were modified by a stage,
///                bit 2 payload is chunked (version 2): u32 k, k × (u32 raw, u32 stored), then the
///                k chunks, each an LZ4 block or as is when stored == raw (compressed side by side)
///                bit 3 (version 3, with bit 2) the raw bytes are the packed 4:2:2 frame (YUYV or UYVY,
///                rows without padding) split into its Y plane, then U, then V (width/2 x height
///                each); the reader interleaves them back
///                bit 4 (version 4, with bits 2 and 3) the chunks not stored as they are are delta
///                bit-planes, not LZ4: k = 3 × bands, chunk i a band of whole rows of Y (i < k/3,
///                rows of width bytes), U or V (width/2 bytes). Per row: each byte less the byte
///                above it (the band's first row less 128), mod 256, zigzag-coded (d ≥ 0 → 2d,
///                d < 0 → −2d − 1 of the signed byte); the row in blocks of 16 codes (the last
///                padded with 0); first ceil(blocks / 2) bytes of widths (block 2j in the low
///                nibble of byte j, 0…8: the bits of the block's largest code), then each block's
///                width × 2 bytes: bit plane 0 first, bit i of plane p = bit p of code i (u16 LE)
///   6  2  reserved (0)
///   8  4  stored payload length S
///  12  4  raw payload length (the frame's bytesUsed)
///  16  4  pixel format fourcc (V4L2 code)
///  20  4  width
///  24  4  height
///  28  4  bytes per row
///  32  8  sequence
///  40  8  timestamp, ns
///  48  1  clock (0 monotonic, 1 monotonic raw, 2 realtime, 3 boottime, 4 unknown)
///  49  3  reserved (0)
///  52  4  metadata length M
///  56  8  receive time, CLOCK_MONOTONIC ns
///  64  8  checksum: XXH64(payload, seed: XXH64(bytes 0..<64 + metadata, seed 0))
///  72  M  metadata (tag-length-value, see `DumpMetadataCodec`)
/// 72+M S  payload
///
/// audio record (type 3, version 2): one period of captured sound, stored as it is (no LZ4),
///   same 72-byte header with: 16 sample format (1 S16_LE, 2 S32_LE, 3 FLOAT_LE), 20 sample rate,
///   24 channels, 28 frames, 32 position (frames since the device started, after overruns),
///   40 capture time of the first frame, ns; 48 clock; 49 1 when frames were lost before it;
///   52 metadata length 0; 56 receive time; payload = the interleaved samples.
///
/// index record (type 2, written when the file is closed): payload = one 32-byte entry per frame
///   (record offset u64, sequence u64, timestamp u64, raw length u32, stored length u32), then (version 2)
///   one per audio record (offset, position, timestamp, raw length, stored length); header field 32
///   is the frame count, 40 the audio record count (0 in version 1).
/// trailer (last 16 bytes of a closed file): "VFIDXEND", u64 offset of the index record
/// ```
///
/// A reader uses the index when the trailer and the index checksum are valid; otherwise (a crash,
/// a truncated copy) it rebuilds the index by walking the record headers and stops at the first
/// record that is incomplete or damaged: every complete frame before it is recovered bit-exact.
public enum RawDumpFormat {
    public static let fileMagic: [UInt8] = Array("VFDUMP\r\n".utf8)
    public static let recordMagic: UInt32 = 0x4352_4656  // "VFRC" little-endian
    public static let trailerMagic: [UInt8] = Array("VFIDXEND".utf8)
    public static let version: UInt16 = 4
    /// Versions this build reads: 1 (frames only), 2 (frames and audio records), 3 (frames
    /// split into planes before LZ4) and 4 (planes in delta bit-planes).
    public static let readableVersions: ClosedRange<Int> = 1...4
    public static let recordHeaderSize = 72
    public static let indexEntrySize = 32
    public static let trailerSize = 16

    enum RecordType: UInt8 { case frame = 1, index = 2, audio = 3 }
    static func audioCode(_ f: AudioSampleFormat) -> UInt32 { switch f { case .s16: 1; case .s32: 2; case .float32: 3 } }
    static func audioFormat(_ code: UInt32) -> AudioSampleFormat? { switch code { case 1: .s16; case 2: .s32; case 3: .float32; default: nil } }
    static let flagCompressed: UInt8 = 1
    static let flagPixelsModified: UInt8 = 2
    static let flagChunked: UInt8 = 4
    static let flagPlanar422: UInt8 = 8
    static let flagDeltaPlanes: UInt8 = 16

    /// The seed of a frame record's payload checksum: XXH64 of the header's first 64 bytes and the
    /// metadata, assembled in `scratch` (kept by the caller, so nothing is allocated per record).
    static func recordSeed(header: UnsafeRawPointer, metadata: [UInt8], scratch: inout [UInt8]) -> UInt64 {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeRawBufferPointer(start: header, count: 64))
        scratch.append(contentsOf: metadata)
        return scratch.withUnsafeBytes { XXHash64.hash($0) }
    }

    static func clockCode(_ c: ClockSource) -> UInt8 {
        switch c { case .monotonic: 0; case .monotonicRaw: 1; case .realtime: 2; case .boottime: 3; case .unknown: 4 }
    }
    static func clock(_ code: UInt8) -> ClockSource {
        switch code { case 0: .monotonic; case 1: .monotonicRaw; case 2: .realtime; case 3: .boottime; default: .unknown }
    }
}

/// What the stream header says.
public struct DumpStreamInfo: Sendable, Equatable, Codable {
    public var pixelFormat: String
    public var width: Int
    public var height: Int
    public var bytesPerRow: Int
    public var intervalNumerator: UInt32
    public var intervalDenominator: UInt32
    public var device: String
    public var created: String
    public var codec: String

    public var format: FrameFormat? {
        guard let p = PixelFormat(name: pixelFormat), width > 0, height > 0 else { return nil }
        return FrameFormat(p, width: width, height: height, bytesPerRow: bytesPerRow)
    }
    public var interval: FrameInterval { FrameInterval(numerator: intervalNumerator, denominator: intervalDenominator) }
}

/// One frame in a dump, as the index knows it.
public struct DumpIndexEntry: Sendable, Equatable {
    public var offset: UInt64
    public var sequence: UInt64
    public var timestampNanoseconds: UInt64
    public var rawLength: UInt32
    public var storedLength: UInt32
}

/// One audio record in a dump, as the index knows it, with what its header says.
public struct DumpAudioEntry: Sendable, Equatable {
    public var offset: UInt64
    /// Frames since the device started (gaps are frames lost in overruns).
    public var position: UInt64
    public var timestampNanoseconds: UInt64
    public var rawLength: UInt32
    public var storedLength: UInt32
}

/// One period of sound read back from a dump.
public struct DumpAudioPeriod: Sendable, Equatable {
    public var format: AudioStreamFormat
    public var frames: Int
    public var position: UInt64
    public var timestamp: Timestamp
    public var discontinuity: Bool
    public var receiveTime: UInt64
}

/// Problems with dump files.
public enum DumpError: Error, Equatable, CustomStringConvertible {
    case notADump(path: String, reason: String)
    case unsupportedVersion(path: String, version: Int)
    case corruptRecord(path: String, offset: UInt64, reason: String)
    case checksumMismatch(path: String, frame: Int, offset: UInt64)
    case frameOutOfRange(path: String, index: Int, count: Int)
    case formatMismatch(path: String, expected: String, got: String)
    case unsupported(String)

    public var description: String {
        switch self {
        case .notADump(let p, let r): return "'\(p)' is not a Viewfinder dump: \(r)"
        case .unsupportedVersion(let p, let v): return "'\(p)': dump version \(v) is not supported (this build reads versions \(RawDumpFormat.readableVersions.lowerBound) to \(RawDumpFormat.readableVersions.upperBound))"
        case .corruptRecord(let p, let o, let r): return "'\(p)': corrupt record at byte \(o): \(r)"
        case .checksumMismatch(let p, let f, let o): return "'\(p)': frame \(f) (record at byte \(o)) fails its checksum"
        case .frameOutOfRange(let p, let i, let n): return "'\(p)': frame \(i) does not exist (the dump has \(n))"
        case .formatMismatch(let p, let e, let g): return "'\(p)': frame format \(g) does not match the stream (\(e))"
        case .unsupported(let s): return s
        }
    }
}

/// Binary tag-length-value encoding of `FrameMetadata` (no allocation-heavy JSON per frame).
///
/// Each field is `tag u8, length u8, value`; doubles are IEEE-754 little-endian. Unknown tags are
/// skipped by readers, so fields can be added. Tags: 1 exposureTime, 2 gain, 3 lensPosition,
/// 4 whiteBalance, 5 focus (laplacianVariance, tenengrad), 6 focusState (raw value string),
/// 7 exposureState (string), 8 meteredLuma, 9 exposureError, 10 motion (dx, dy, angle, scale,
/// confidence), 11 correction (same), 12 truth (10 doubles in declaration order), 13 droppedBefore
/// u32, 14 stageNanoseconds u64, 15 custom value (double, then the key's name in UTF-8), 16 the
/// truth's colorTemperature (written with tag 12 when non-zero), 17 whiteBalanceState (string).
public enum DumpMetadataCodec {
    static func encode(_ m: FrameMetadata, into out: inout [UInt8]) {
        out.removeAll(keepingCapacity: true)
        func d(_ v: Double) { withUnsafeBytes(of: v.bitPattern.littleEndian) { out += $0 } }
        func field(_ tag: UInt8, _ len: Int, _ body: () -> Void) { out.append(tag); out.append(UInt8(len)); body() }
        func dbl(_ tag: UInt8, _ v: Double?) { if let v { field(tag, 8) { d(v) } } }
        func str(_ tag: UInt8, _ s: String?) { if let s { let u = Array(s.utf8.prefix(255)); field(tag, u.count) { out += u } } }
        func motion(_ tag: UInt8, _ v: MotionEstimate?) { if let v { field(tag, 40) { d(v.dx); d(v.dy); d(v.angle); d(v.scale); d(v.confidence) } } }
        dbl(1, m.exposureTime); dbl(2, m.gain); dbl(3, m.lensPosition); dbl(4, m.whiteBalance)
        if let f = m.focus { field(5, 16) { d(f.laplacianVariance); d(f.tenengrad) } }
        str(6, m.focusState?.rawValue); str(7, m.exposureState?.rawValue)
        dbl(8, m.meteredLuma); dbl(9, m.exposureError)
        motion(10, m.motion); motion(11, m.correction)
        if let t = m.truth {
            field(12, 80) {
                for v in [t.shakeX, t.shakeY, t.shakeAngle, t.inFocusLensPosition, t.sceneLuminance, t.appliedExposure, t.appliedGain, t.appliedLensPosition, t.defocusBlur, t.renderedMeanLuma] { d(v) }
            }
            if t.colorTemperature != 0 { dbl(16, t.colorTemperature) }
        }
        str(17, m.whiteBalanceState?.rawValue)
        if m.droppedBefore != 0 { field(13, 4) { withUnsafeBytes(of: m.droppedBefore.littleEndian) { out += $0 } } }
        if m.stageNanoseconds != 0 { field(14, 8) { withUnsafeBytes(of: m.stageNanoseconds.littleEndian) { out += $0 } } }
        for (k, v) in m.custom.entries {
            let name = Array(k.description.utf8.prefix(200))
            field(15, 8 + name.count) { d(v); out += name }
        }
    }

    static func decode(_ b: UnsafeRawBufferPointer) -> FrameMetadata {
        var m = FrameMetadata()
        var i = 0
        func dbl(_ o: Int) -> Double { Double(bitPattern: UInt64(littleEndian: b.loadUnaligned(fromByteOffset: o, as: UInt64.self))) }
        func motion(_ o: Int) -> MotionEstimate { MotionEstimate(dx: dbl(o), dy: dbl(o + 8), angle: dbl(o + 16), scale: dbl(o + 24), confidence: dbl(o + 32)) }
        while i + 2 <= b.count {
            let tag = b[i], len = Int(b[i + 1])
            let v = i + 2
            guard v + len <= b.count else { break }
            switch (tag, len) {
            case (1, 8): m.exposureTime = dbl(v)
            case (2, 8): m.gain = dbl(v)
            case (3, 8): m.lensPosition = dbl(v)
            case (4, 8): m.whiteBalance = dbl(v)
            case (5, 16): m.focus = FocusMeasure(laplacianVariance: dbl(v), tenengrad: dbl(v + 8))
            case (6, _): m.focusState = ControlLoopState(rawValue: String(decoding: UnsafeRawBufferPointer(rebasing: b[v..<(v + len)]), as: UTF8.self))
            case (7, _): m.exposureState = ControlLoopState(rawValue: String(decoding: UnsafeRawBufferPointer(rebasing: b[v..<(v + len)]), as: UTF8.self))
            case (8, 8): m.meteredLuma = dbl(v)
            case (9, 8): m.exposureError = dbl(v)
            case (10, 40): m.motion = motion(v)
            case (11, 40): m.correction = motion(v)
            case (12, 80):
                var t = SimulationTruth()
                t.shakeX = dbl(v); t.shakeY = dbl(v + 8); t.shakeAngle = dbl(v + 16); t.inFocusLensPosition = dbl(v + 24)
                t.sceneLuminance = dbl(v + 32); t.appliedExposure = dbl(v + 40); t.appliedGain = dbl(v + 48)
                t.appliedLensPosition = dbl(v + 56); t.defocusBlur = dbl(v + 64); t.renderedMeanLuma = dbl(v + 72)
                if let k = m.truth?.colorTemperature, k != 0 { t.colorTemperature = k }
                m.truth = t
            case (16, 8):
                var t = m.truth ?? SimulationTruth()
                t.colorTemperature = dbl(v)
                m.truth = t
            case (17, _): m.whiteBalanceState = ControlLoopState(rawValue: String(decoding: UnsafeRawBufferPointer(rebasing: b[v..<(v + len)]), as: UTF8.self))
            case (13, 4): m.droppedBefore = UInt32(littleEndian: b.loadUnaligned(fromByteOffset: v, as: UInt32.self))
            case (14, 8): m.stageNanoseconds = UInt64(littleEndian: b.loadUnaligned(fromByteOffset: v, as: UInt64.self))
            case (15, _) where len >= 8:
                let name = String(decoding: UnsafeRawBufferPointer(rebasing: b[(v + 8)..<(v + len)]), as: UTF8.self)
                m.custom.set(MetadataKey(name), dbl(v))
            default: break
            }
            i = v + len
        }
        return m
    }
}

/// Little-endian field access in a record header.
struct LE {
    static func put<T: FixedWidthInteger>(_ v: T, _ p: UnsafeMutableRawPointer, _ o: Int) { p.storeBytes(of: v.littleEndian, toByteOffset: o, as: T.self) }
    static func get<T: FixedWidthInteger>(_ p: UnsafeRawPointer, _ o: Int, _ t: T.Type) -> T { T(littleEndian: p.loadUnaligned(fromByteOffset: o, as: T.self)) }
}
