import CTurboJPEG
import CViewfinderKernels
import Viewfinder

/// The largest size of a small picture made from a photo: the picture is scaled down, keeping its
/// aspect ratio, to fit `width` x `height` (AVFoundation's `embeddedThumbnailPhotoFormat` and
/// `previewPhotoFormat` dimensions).
public struct PhotoImageSize: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public init(width: Int, height: Int) { self.width = width; self.height = height }
    /// 160 x 120, the size EXIF readers expect of a thumbnail.
    public static let exifThumbnail = PhotoImageSize(width: 160, height: 120)
}

/// A preview picture delivered with a photo (AVFoundation's `previewPixelBuffer`): uncompressed,
/// in the pixel format asked for.
public struct PhotoPreviewFormat: Sendable, Equatable {
    /// One of `FrameConverter.outputPixelFormats` (BGRA, RGB24, BGR24, NV12, I420, GREY).
    public var pixelFormat: PixelFormat
    public var maximumSize: PhotoImageSize
    public init(pixelFormat: PixelFormat = .bgra, maximumSize: PhotoImageSize = PhotoImageSize(width: 640, height: 480)) {
        self.pixelFormat = pixelFormat; self.maximumSize = maximumSize
    }
}

/// The preview picture of a ``CapturePhoto``.
public struct PhotoPreviewImage: Sendable, Equatable {
    public var format: FrameFormat
    public var bytes: [UInt8]
}

/// Makes the small pictures of a photo (EXIF thumbnail, preview) from the shot's pixels: a camera
/// JPEG is decoded at TurboJPEG's nearest reduced scale that still covers the size, anything else
/// is converted to RGB at full size; then area-averaged down. Used on the photo output's thread.
final class PhotoDownscaler {
    private var decoder: tjhandle?

    init() { decoder = tjInitDecompress() }
    deinit { if let decoder { tjDestroy(decoder) } }

    /// The size that fits `box` with the aspect ratio of `width` x `height` (never larger than the source).
    static func fitted(width: Int, height: Int, in box: PhotoImageSize) -> (Int, Int) {
        guard width > 0, height > 0, box.width > 0, box.height > 0 else { return (0, 0) }
        let s = min(Double(box.width) / Double(width), Double(box.height) / Double(height), 1)
        return (max(1, Int((Double(width) * s).rounded())), max(1, Int((Double(height) * s).rounded())))
    }

    /// RGB24 pixels of the shot, at full size or (camera JPEG) reduced but at least `box`.
    private func rgb(bytes: [UInt8], format: FrameFormat, box: PhotoImageSize) throws -> (width: Int, height: Int, pixels: [UInt8]) {
        if format.pixelFormat == .mjpeg {
            guard let decoder else { throw SinkError.jpeg(operation: "tjInitDecompress", message: "no handle") }
            var w: Int32 = 0, h: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
            let ok = bytes.withUnsafeBufferPointer { tjDecompressHeader3(decoder, $0.baseAddress, UInt($0.count), &w, &h, &sub, &cs) == 0 }
            guard ok, w > 0, h > 0 else {
                // libjpeg-turbo 2.1 leaves the handle mid-header after a damaged header, and every
                // later call on it fails: start again with a fresh one (error path only).
                if let fresh = tjInitDecompress() { tjDestroy(decoder); self.decoder = fresh }
                throw SinkError.corruptData("the camera's JPEG does not decode")
            }
            // The smallest scale TurboJPEG offers that still covers the box.
            var n: Int32 = 0
            var dw = w, dh = h
            let (fw, fh) = Self.fitted(width: Int(w), height: Int(h), in: box)
            if let factors = tjGetScalingFactors(&n) {
                for i in 0..<Int(n) {
                    let f = factors[i]
                    let sw = (w * f.num + f.denom - 1) / f.denom, sh = (h * f.num + f.denom - 1) / f.denom
                    if sw >= Int32(fw), sh >= Int32(fh), sw * sh < dw * dh { dw = sw; dh = sh }
                }
            }
            var out = [UInt8](repeating: 0, count: Int(dw) * Int(dh) * 3)
            let rc = bytes.withUnsafeBufferPointer { src in
                out.withUnsafeMutableBufferPointer { tjDecompress2(decoder, src.baseAddress, UInt(src.count), $0.baseAddress, dw, 0, dh, Int32(TJPF_RGB.rawValue), 0) }
            }
            guard rc == 0 else { throw SinkError.corruptData("the camera's JPEG does not decode: \(String(cString: tjGetErrorStr2(decoder)))") }
            return (Int(dw), Int(dh), out)
        }
        let frame = Frame(capacity: max(bytes.count, format.maxByteCount), format: format)
        bytes.withUnsafeBytes { frame.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        frame.bytesUsed = bytes.count
        let conv = try FrameConverter(target: .rgb24)
        let outFormat = conv.outputFormat(for: format)
        let out = Frame(capacity: outFormat.maxByteCount, format: outFormat)
        try conv.convert(frame, into: out)
        return (outFormat.width, outFormat.height, Array(UnsafeRawBufferPointer(start: out.data, count: outFormat.maxByteCount)))
    }

    /// The shot reduced to fit `box`, as RGB24.
    func reduced(bytes: [UInt8], format: FrameFormat, box: PhotoImageSize) throws -> (format: FrameFormat, pixels: [UInt8]) {
        let src = try rgb(bytes: bytes, format: format, box: box)
        let (dw, dh) = Self.fitted(width: src.width, height: src.height, in: box)
        guard dw > 0 else { throw SinkError.invalidArgument(name: "size", reason: "\(box.width)x\(box.height) is empty") }
        var out = [UInt8](repeating: 0, count: dw * dh * 3)
        src.pixels.withUnsafeBufferPointer { s in
            out.withUnsafeMutableBufferPointer { vf_downscale_packed(s.baseAddress, src.width * 3, src.width, src.height, 3, $0.baseAddress, dw * 3, dw, dh) }
        }
        return (FrameFormat(.rgb24, width: dw, height: dh), out)
    }

    /// A JPEG thumbnail that fits `box` and the EXIF segment's room (quality lowered until it does).
    /// `monochrome`: the photo is greyscale (a grey camera, or `subsampling: .grey` asked for), and
    /// so is its thumbnail (3 Dec: a grey still carried a colour thumbnail).
    func thumbnail(bytes: [UInt8], format: FrameFormat, box: PhotoImageSize, monochrome: Bool = false, encoder: JPEGEncoder) throws -> [UInt8] {
        let small = try reduced(bytes: bytes, format: format, box: box)
        let sub: ChromaSubsampling = monochrome || format.pixelFormat == .grey ? .grey : .s420
        for quality in [85, 70, 50, 30] {
            let jpeg = try small.pixels.withUnsafeBytes { try Array(encoder.encode($0.baseAddress!, byteCount: $0.count, format: small.format, quality: quality, subsampling: sub)) }
            if jpeg.count <= ExifInfo.maximumThumbnailBytes { return jpeg }
        }
        throw SinkError.invalidArgument(name: "embeddedThumbnailSize", reason: "\(box.width)x\(box.height) does not fit the EXIF segment's 64 KB")
    }

    /// The preview picture in the format asked for.
    func preview(bytes: [UInt8], format: FrameFormat, as preview: PhotoPreviewFormat) throws -> PhotoPreviewImage {
        let small = try reduced(bytes: bytes, format: format, box: preview.maximumSize)
        let conv = try FrameConverter(target: preview.pixelFormat)
        let src = Frame(capacity: small.pixels.count, format: small.format)
        small.pixels.withUnsafeBytes { src.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        src.bytesUsed = small.pixels.count
        let outFormat = conv.outputFormat(for: small.format)
        let out = Frame(capacity: outFormat.maxByteCount, format: outFormat)
        try conv.convert(src, into: out)
        return PhotoPreviewImage(format: outFormat, bytes: Array(UnsafeRawBufferPointer(start: out.data, count: outFormat.maxByteCount)))
    }
}
