import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// Embedded EXIF thumbnails and preview pictures (AVFoundation's `embeddedThumbnailPhotoFormat`
/// and `previewPhotoFormat`).
@Suite struct PhotoThumbnailTests {
    let format = FrameFormat(.yuyv, width: 320, height: 240)
    func config(_ f: FrameFormat) -> StreamConfiguration { StreamConfiguration(format: f, interval: FrameInterval(fps: 30), bufferCount: 8) }

    /// The source's luma averaged over `k`×`k` blocks.
    func blockLuma(_ f: Frame, k: Int) -> [[Double]] {
        let (off, stride, bpr) = f.format.lumaLayout!
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        return (0..<(f.format.height / k)).map { by in
            (0..<(f.format.width / k)).map { bx in
                var s = 0.0
                for y in 0..<k { for x in 0..<k { s += Double(p[off + (by * k + y) * bpr + (bx * k + x) * stride]) } }
                return s / Double(k * k)
            }
        }
    }

    func capture(_ frame: Frame, settings: PhotoSettings) throws -> CapturePhoto {
        let output = PhotoOutput()
        try output.start(configuration: config(frame.format))
        let events = PhotoEvents()
        output.capture(settings: settings, delegate: events)
        output.consume(frame)
        if let e = events.errors.compactMap({ $0 }).first { throw e }
        return try #require(events.photos.first)
    }

    @Test func thumbnailIsInTheExifSegmentAndShowsThePicture() throws {
        let f = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(f, index: 2, noise: 4)
        let photo = try capture(f, settings: PhotoSettings(orientation: .right, embeddedThumbnailSize: .exifThumbnail,
                                                           previewFormat: PhotoPreviewFormat(pixelFormat: .bgra, maximumSize: PhotoImageSize(width: 80, height: 80))))
        let jpeg = photo.fileDataRepresentation()
        // The file's own EXIF fields are still there, and the thumbnail read back from IFD1 is the one delivered.
        let exif = try jpeg.withUnsafeBytes { try JPEGMarkers.readExif($0) }
        #expect(exif.orientation == 6)
        let stored = try #require(try jpeg.withUnsafeBytes { try JPEGMarkers.exifThumbnail($0) })
        #expect(stored == photo.embeddedThumbnail)
        // 160x120 (the 4:3 picture fitted into 160x120), and it shows the picture: its luma is the
        // source's averaged over 2x2 blocks, up to JPEG loss.
        let dec = try JPEGDecoder()
        let t = try stored.withUnsafeBytes { try dec.decodePlanes($0) }
        #expect(t.width == 160 && t.height == 120)
        let ref = blockLuma(f, k: 2)
        var err = 0.0
        for y in 0..<120 { for x in 0..<160 { err += abs(Double(t.y[y * 160 + x]) - ref[y][x]) } }
        #expect(err / (160 * 120) < 4, "thumbnail luma is \(err / (160 * 120)) levels off on average")
        // The preview: BGRA, fitted into 80x80 → 80x60, whose BT.601 luma is the source's 4x4 means.
        let preview = try #require(photo.previewImage)
        #expect(preview.format == FrameFormat(.bgra, width: 80, height: 60))
        let ref4 = blockLuma(f, k: 4)
        var perr = 0.0
        for y in 0..<60 { for x in 0..<80 {
            let o = y * 320 + x * 4
            let l = 0.299 * Double(preview.bytes[o + 2]) + 0.587 * Double(preview.bytes[o + 1]) + 0.114 * Double(preview.bytes[o])
            perr += abs(l - ref4[y][x])
            #expect(preview.bytes[o + 3] == 255)
        } }
        #expect(perr / (80 * 60) < 2, "preview luma is \(perr / (80 * 60)) levels off on average")
        // The main picture is untouched by all this: ffprobe reads a 320x240 JPEG.
        let dir = makeTempDirectory()
        try photo.write(to: dir + "/p.jpg")
        let probe = try ffprobe(dir + "/p.jpg")
        #expect(intValue(probe.stream("video")?["width"]) == 320)
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test("a greyscale still gets a greyscale thumbnail (it carried the colour picture's)")
    func aGreyStillHasAGreyThumbnail() throws {
        let f = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(f, index: 3, noise: 4)
        let photo = try capture(f, settings: PhotoSettings(codec: .jpeg(quality: 90, subsampling: .grey), embeddedThumbnailSize: .exifThumbnail))
        let dec = try JPEGDecoder()
        let main = try photo.fileDataRepresentation().withUnsafeBytes { try dec.header($0) }
        #expect(main.subsampling == .grey)
        let thumb = try #require(photo.embeddedThumbnail)
        let t = try thumb.withUnsafeBytes { try dec.decodePlanes($0) }
        #expect(t.subsampling == .grey && t.width == 160 && t.height == 120)
        // A colour still keeps a colour thumbnail.
        let colour = try capture(f, settings: PhotoSettings(embeddedThumbnailSize: .exifThumbnail))
        let c = try #require(colour.embeddedThumbnail).withUnsafeBytes { try dec.decodePlanes($0) }
        #expect(c.subsampling == .s420)
    }

    @Test func aCameraJPEGGetsAThumbnailAndKeepsItsOwnData() throws {
        let yuyv = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(yuyv, index: 1, noise: 4)
        let enc = try JPEGEncoder()
        let camera = try withExtendedLifetime(enc) { Array(try enc.encode(yuyv, quality: 80)) }
        let mjpeg = FrameFormat(.mjpeg, width: 320, height: 240)
        let f = Frame(capacity: mjpeg.maxByteCount, format: mjpeg)
        camera.withUnsafeBytes { f.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        f.bytesUsed = camera.count
        let photo = try capture(f, settings: PhotoSettings(embeddedThumbnailSize: PhotoImageSize(width: 64, height: 64), previewFormat: PhotoPreviewFormat(pixelFormat: .nv12)))
        #expect(photo.resolvedSettings.codec == "mjpeg-passthrough")
        let jpeg = photo.fileDataRepresentation()
        let stored = try #require(try jpeg.withUnsafeBytes { try JPEGMarkers.exifThumbnail($0) })
        let dec = try JPEGDecoder()
        let t = try stored.withUnsafeBytes { try dec.header($0) }
        #expect(t.width == 64 && t.height == 48)
        // The camera's entropy-coded data is in the file byte for byte.
        let sos = try #require(camera.indices.first { camera[$0] == 0xFF && camera[$0 + 1] == 0xDA })
        #expect(jpeg.suffix(camera.count - sos) == camera[sos...])
        let preview = try #require(photo.previewImage)
        #expect(preview.format.pixelFormat == .nv12 && preview.format.width == 320 && preview.format.height == 240)
    }

    @Test func badThumbnailAndPreviewSettingsAreRefused() throws {
        let f = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(f, index: 0)
        #expect(throws: PhotoCaptureError.self) { try capture(f, settings: PhotoSettings(embedsExif: false, embeddedThumbnailSize: .exifThumbnail)) }
        #expect(throws: PhotoCaptureError.self) { try capture(f, settings: PhotoSettings(previewFormat: PhotoPreviewFormat(pixelFormat: .mjpeg))) }
        #expect(throws: PhotoCaptureError.self) { try capture(f, settings: PhotoSettings(embeddedThumbnailSize: PhotoImageSize(width: 0, height: 10))) }
    }

    @Test func exifWithoutAThumbnailHasNone() throws {
        let seg = ExifInfo(orientation: .up).app1Segment()
        let jpeg: [UInt8] = [0xFF, 0xD8] + seg + [0xFF, 0xDA, 0x00, 0x02]
        #expect(try jpeg.withUnsafeBytes { try JPEGMarkers.exifThumbnail($0) } == nil)
        // A thumbnail too large for the segment is left out rather than overflowing it.
        let big = ExifInfo(thumbnailJPEG: [UInt8](repeating: 0xAB, count: ExifInfo.maximumThumbnailBytes + 1)).app1Segment()
        #expect(big.count < 1000)
    }
}
