import Foundation
import CTurboJPEG
import Viewfinder
#if canImport(Glibc)
import Glibc
#endif

/// EXIF orientation (TIFF tag 0x0112): how the stored image must be turned to display upright.
public enum ExifOrientation: UInt16, Sendable, Codable, CaseIterable {
    case up = 1, upMirrored = 2, down = 3, downMirrored = 4
    case leftMirrored = 5, right = 6, rightMirrored = 7, left = 8

    /// The orientation for a connection's video rotation angle in degrees (0, 90, 180, 270),
    /// as AVCaptureConnection's `videoRotationAngle` means it (clockwise).
    public init(rotationDegrees: Int) {
        switch ((rotationDegrees % 360) + 360) % 360 {
        case 90: self = .right
        case 180: self = .down
        case 270: self = .left
        default: self = .up
        }
    }
}

/// The few EXIF fields a still carries: capture time, exposure time, ISO (from gain), orientation,
/// and an optional embedded thumbnail (a small JPEG in IFD1, as cameras write it).
public struct ExifInfo: Sendable, Equatable {
    /// Wall-clock time of capture.
    public var dateTimeOriginal: Date?
    /// Exposure time in seconds.
    public var exposureTime: Double?
    /// ISO speed: gain 1.0 is ISO 100.
    public var iso: Int?
    public var orientation: ExifOrientation
    /// A JPEG stored as the file's thumbnail (IFD1). It must fit the APP1 segment's 64 KB with the
    /// rest: ``maximumThumbnailBytes``; a larger one is left out.
    public var thumbnailJPEG: [UInt8]?
    /// The largest thumbnail the APP1 segment has room for.
    public static let maximumThumbnailBytes = 60_000
    public init(dateTimeOriginal: Date? = nil, exposureTime: Double? = nil, iso: Int? = nil, orientation: ExifOrientation = .up, thumbnailJPEG: [UInt8]? = nil) {
        self.dateTimeOriginal = dateTimeOriginal; self.exposureTime = exposureTime; self.iso = iso; self.orientation = orientation
        self.thumbnailJPEG = thumbnailJPEG
    }

    /// ISO from an analogue gain (1.0 = ISO 100), clamped to the SHORT range.
    /// A NaN gain gives the lowest ISO.
    public static func iso(fromGain gain: Double) -> Int { gain.isNaN ? 1 : Int(max(1, min(65535, (gain * 100).rounded()))) }

    /// "YYYY:MM:DD HH:MM:SS" in local time, as EXIF wants it; nil for a date it cannot hold
    /// (not finite, before 1970 or after 9999).
    static func exifDate(_ d: Date) -> String? {
        let seconds = d.timeIntervalSince1970
        guard seconds.isFinite, seconds >= 0, seconds < 253_402_214_400 else { return nil }
        var t = time_t(seconds)
        var tmv = tm()
        localtime_r(&t, &tmv)
        func p(_ v: Int32, _ n: Int) -> String { let s = String(v); return String(repeating: "0", count: max(0, n - s.count)) + s }
        return "\(p(tmv.tm_year + 1900, 4)):\(p(tmv.tm_mon + 1, 2)):\(p(tmv.tm_mday, 2)) \(p(tmv.tm_hour, 2)):\(p(tmv.tm_min, 2)):\(p(tmv.tm_sec, 2))"
    }

    /// The APP1 segment (marker FFE1, length, "Exif\0\0", a little-endian TIFF with IFD0 and the Exif IFD).
    public func app1Segment() -> [UInt8] {
        var tiff = [UInt8]()
        func u16(_ v: UInt16) { tiff.append(UInt8(v & 0xFF)); tiff.append(UInt8(v >> 8)) }
        func u32(_ v: UInt32) { for i in 0..<4 { tiff.append(UInt8((v >> (8 * UInt32(i))) & 0xFF)) } }
        // Header: II, 42, offset of IFD0.
        tiff += [0x49, 0x49]; u16(42); u32(8)

        // Exif IFD entries (sorted by tag), with out-of-line data placed after the IFD.
        struct Entry { var tag: UInt16; var type: UInt16; var count: UInt32; var inline: [UInt8]; var data: [UInt8] }
        var exif: [Entry] = []
        // Exposures that are not finite, not positive, or too short for 1/N in 32 bits are left out.
        if let t = exposureTime, t.isFinite, t > 0, t >= 1.0 / 4e9 {
            // RATIONAL: 1/N for short exposures, N/1000000 otherwise.
            let (num, den): (UInt32, UInt32) = t < 1 && (1 / t).rounded() * t > 0.999 && (1 / t).rounded() * t < 1.001
                ? (1, UInt32((1 / t).rounded())) : (UInt32(min(4e9, (t * 1_000_000).rounded())), 1_000_000)
            var d = [UInt8](); for v in [num, den] { for i in 0..<4 { d.append(UInt8((v >> (8 * UInt32(i))) & 0xFF)) } }
            exif.append(Entry(tag: 0x829A, type: 5, count: 1, inline: [], data: d))
        }
        if let iso {
            let v = UInt16(clamping: iso)
            exif.append(Entry(tag: 0x8827, type: 3, count: 1, inline: [UInt8(v & 0xFF), UInt8(v >> 8), 0, 0], data: []))
        }
        exif.append(Entry(tag: 0x9000, type: 7, count: 4, inline: Array("0230".utf8), data: []))
        if let date = dateTimeOriginal, let text = ExifInfo.exifDate(date) {
            let s = Array(text.utf8) + [0]
            exif.append(Entry(tag: 0x9003, type: 2, count: UInt32(s.count), inline: [], data: s))
        }

        // IFD0: orientation and the pointer to the Exif IFD.
        let ifd0Offset = 8
        let ifd0Size = 2 + 2 * 12 + 4
        let exifOffset = ifd0Offset + ifd0Size
        u16(2)
        u16(0x0112); u16(3); u32(1); u16(orientation.rawValue); u16(0)
        u16(0x8769); u16(4); u32(1); u32(UInt32(exifOffset))
        let nextIFDPatch = tiff.count
        u32(0)

        let exifSize = 2 + exif.count * 12 + 4
        var dataOffset = exifOffset + exifSize
        var trailing = [UInt8]()
        u16(UInt16(exif.count))
        for e in exif {
            u16(e.tag); u16(e.type); u32(e.count)
            if e.data.isEmpty {
                tiff += e.inline + [UInt8](repeating: 0, count: 4 - e.inline.count)
            } else {
                u32(UInt32(dataOffset))
                trailing += e.data
                if e.data.count % 2 == 1 { trailing.append(0) }
                dataOffset = exifOffset + exifSize + trailing.count
            }
        }
        u32(0)
        tiff += trailing

        // IFD1: the thumbnail (compression 6 = JPEG, its offset and length), then its bytes.
        if let thumb = thumbnailJPEG, !thumb.isEmpty, thumb.count <= Self.maximumThumbnailBytes {
            if tiff.count % 2 == 1 { tiff.append(0) }
            let ifd1 = tiff.count
            for i in 0..<4 { tiff[nextIFDPatch + i] = UInt8((UInt32(ifd1) >> (8 * UInt32(i))) & 0xFF) }
            let ifd1Size = 2 + 3 * 12 + 4
            u16(3)
            u16(0x0103); u16(3); u32(1); u16(6); u16(0)
            u16(0x0201); u16(4); u32(1); u32(UInt32(ifd1 + ifd1Size))
            u16(0x0202); u16(4); u32(1); u32(UInt32(thumb.count))
            u32(0)
            tiff += thumb
        }

        let payload = Array("Exif".utf8) + [0, 0] + tiff
        let length = payload.count + 2
        return [0xFF, 0xE1, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
    }
}

/// Small surgery on JPEG marker streams: EXIF insertion and the Huffman tables that MJPEG cameras
/// leave out.
public enum JPEGMarkers {
    /// Whether the data starts with SOI and a marker follows.
    public static func looksLikeJPEG(_ b: UnsafeRawBufferPointer) -> Bool {
        b.count >= 4 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF
    }

    /// Offsets of the header segments: (marker, offset of 0xFF, total length including the marker).
    /// Stops at SOS. Throws on a malformed stream.
    static func segments(_ b: UnsafeRawBufferPointer) throws -> [(marker: UInt8, offset: Int, length: Int)] {
        guard looksLikeJPEG(b) else { throw SinkError.corruptData("not a JPEG (no SOI marker)") }
        var out: [(UInt8, Int, Int)] = []
        var i = 2
        while i + 4 <= b.count {
            guard b[i] == 0xFF else { throw SinkError.corruptData("JPEG marker expected at byte \(i)") }
            let m = b[i + 1]
            if m == 0xFF { i += 1; continue }
            let len = Int(b[i + 2]) << 8 | Int(b[i + 3])
            guard len >= 2, i + 2 + len <= b.count else { throw SinkError.corruptData("JPEG segment at byte \(i) runs past the end") }
            out.append((m, i, len + 2))
            if m == 0xDA { return out }
            i += 2 + len
        }
        throw SinkError.corruptData("JPEG without a start-of-scan")
    }

    /// The standard Huffman tables (ITU T.81 K.3) as one DHT segment, taken from TurboJPEG's own
    /// output (it uses them unless asked to optimise).
    static let standardDHT: [UInt8] = {
        guard let enc = try? JPEGEncoder() else { return [] }
        var px = [UInt8](repeating: 128, count: 16 * 16 * 2)
        let fmt = FrameFormatShim.yuyv16
        guard let jpeg = try? px.withUnsafeMutableBytes({ p -> [UInt8] in
            try withExtendedLifetime(enc) { Array(try enc.encode(UnsafeRawPointer(p.baseAddress!), byteCount: p.count, format: fmt, quality: 90)) }
        }) else { return [] }
        guard let segs = try? jpeg.withUnsafeBytes({ try segments($0) }) else { return [] }
        var dht = [UInt8]()
        for s in segs where s.marker == 0xC4 { dht += jpeg[s.offset..<(s.offset + s.length)] }
        return dht
    }()

    /// Returns a standalone JPEG: `exif` inserted right after SOI (replacing a JFIF APP0 or an
    /// existing EXIF APP1 there) and, when the stream has no DHT (UVC MJPEG), the standard tables
    /// inserted before SOS.
    public static func makeStandalone(_ b: UnsafeRawBufferPointer, exif: [UInt8]?) throws -> [UInt8] {
        let segs = try segments(b)
        let hasDHT = segs.contains { $0.marker == 0xC4 }
        var out = [UInt8]()
        out.reserveCapacity(b.count + (exif?.count ?? 0) + (hasDHT ? 0 : 500))
        out += [0xFF, 0xD8]
        if let exif { out += exif }
        for s in segs {
            let isJFIF = s.marker == 0xE0 && s.length >= 9 && b[s.offset + 4] == 0x4A && b[s.offset + 5] == 0x46
            let isExif = s.marker == 0xE1 && s.length >= 10 && b[s.offset + 4] == 0x45 && b[s.offset + 5] == 0x78
            if exif != nil && (isJFIF || isExif) { continue }
            if s.marker == 0xDA && !hasDHT { out += standardDHT }
            if s.marker == 0xDA {
                out += UnsafeRawBufferPointer(rebasing: b[s.offset..<b.count])
            } else {
                out += UnsafeRawBufferPointer(rebasing: b[s.offset..<(s.offset + s.length)])
            }
        }
        return out
    }

    /// The thumbnail JPEG stored in the EXIF APP1 segment's IFD1, if there is one.
    public static func exifThumbnail(_ b: UnsafeRawBufferPointer) throws -> [UInt8]? {
        let segs = try segments(b)
        guard let app1 = segs.first(where: { $0.marker == 0xE1 && $0.length >= 18 }) else { return nil }
        let t = app1.offset + 10, end = app1.offset + app1.length
        guard b[t] == 0x49 && b[t + 1] == 0x49 else { throw SinkError.corruptData("EXIF is not little-endian TIFF") }
        func inside(_ o: Int, _ n: Int) -> Bool { o >= 0 && t + o + n <= end }
        func u16(_ o: Int) -> UInt16 { UInt16(b[t + o]) | UInt16(b[t + o + 1]) << 8 }
        func u32(_ o: Int) -> UInt32 { UInt32(u16(o)) | UInt32(u16(o + 2)) << 16 }
        guard inside(4, 4) else { return nil }
        let ifd0 = Int(u32(4))
        guard inside(ifd0, 2) else { return nil }
        let next = ifd0 + 2 + 12 * Int(u16(ifd0))
        guard inside(next, 4) else { return nil }
        let ifd1 = Int(u32(next))
        guard ifd1 != 0, inside(ifd1, 2) else { return nil }
        var offset: Int?, length: Int?
        for k in 0..<Int(u16(ifd1)) {
            let e = ifd1 + 2 + 12 * k
            guard inside(e, 12) else { break }
            switch u16(e) {
            case 0x0201: offset = Int(u32(e + 8))
            case 0x0202: length = Int(u32(e + 8))
            default: break
            }
        }
        guard let offset, let length, length > 0, inside(offset, length) else { return nil }
        return (0..<length).map { b[t + offset + $0] }
    }

    /// Reads back the EXIF APP1 fields this module writes (for tests and `viewfinder` inspection).
    ///
    /// Every offset is checked against the APP1 segment: a damaged or hostile EXIF block (offsets
    /// past the end, a sub-IFD pointing at itself) is a `SinkError.corruptData`, never a read
    /// outside the buffer.
    public static func readExif(_ b: UnsafeRawBufferPointer) throws -> (orientation: UInt16?, iso: UInt16?, exposure: Double?, date: String?) {
        let segs = try segments(b)
        guard let app1 = segs.first(where: { $0.marker == 0xE1 }) else { return (nil, nil, nil, nil) }
        // The TIFF block: after FF E1, the length (2) and "Exif\0\0" (6), to the segment's end.
        let t = app1.offset + 10
        let end = app1.offset + app1.length
        func corrupt(_ why: String) -> SinkError { SinkError.corruptData("EXIF \(why)") }
        guard end - t >= 8 else { throw corrupt("block too short for a TIFF header") }
        guard b[t] == 0x49 && b[t + 1] == 0x49 else { throw corrupt("is not little-endian TIFF") }
        func u16(_ o: Int) throws -> UInt16 {
            guard o >= 0, o <= end - t - 2 else { throw corrupt("offset \(o) is outside its \(end - t)-byte block") }
            return UInt16(b[t + o]) | UInt16(b[t + o + 1]) << 8
        }
        func u32(_ o: Int) throws -> UInt32 { UInt32(try u16(o)) | UInt32(try u16(o + 2)) << 16 }
        var orientation: UInt16?, iso: UInt16?, exposure: Double?, date: String?
        var visited: Set<Int> = []
        func walk(_ ifd: Int) throws {
            // A sub-IFD that points back at one already read would recurse forever.
            guard visited.insert(ifd).inserted, visited.count <= 8 else { throw corrupt("IFD chain loops or is too deep") }
            let n = Int(try u16(ifd))
            for k in 0..<n {
                let e = ifd + 2 + 12 * k
                let tag = try u16(e), count = Int(try u32(e + 4))
                switch tag {
                case 0x0112: orientation = try u16(e + 8)
                case 0x8827: iso = try u16(e + 8)
                case 0x829A:
                    let o = Int(try u32(e + 8))
                    exposure = Double(try u32(o)) / Double(max(1, try u32(o + 4)))
                case 0x9003:
                    let o = Int(try u32(e + 8))
                    guard count >= 1, o >= 0, o <= end - t, count - 1 <= end - t - o else { throw corrupt("date of \(count) bytes at \(o) is outside its block") }
                    date = String(decoding: UnsafeRawBufferPointer(rebasing: b[(t + o)..<(t + o + count - 1)]), as: UTF8.self)
                case 0x8769: try walk(Int(try u32(e + 8)))
                default: break
                }
            }
        }
        try walk(Int(try u32(4)))
        return (orientation, iso, exposure, date)
    }
}

enum FrameFormatShim {
    static let yuyv16 = FrameFormat(.yuyv, width: 16, height: 16)
}
