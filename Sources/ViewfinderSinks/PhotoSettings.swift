import Foundation
import Synchronization
import Viewfinder

/// The codec of a still.
public enum PhotoCodec: Sendable, Equatable {
    /// JPEG through TurboJPEG; MJPEG camera frames are passed through unless a stage changed them.
    case jpeg(quality: Int, subsampling: ChromaSubsampling?)
    /// The untouched frame buffer with a header describing its format (see ``RawStill``).
    case raw

    public static let jpeg = PhotoCodec.jpeg(quality: 90, subsampling: nil)
}

private let nextPhotoID = Atomic<Int64>(1)

/// What to capture, as AVCapturePhotoSettings: each instance has a unique id and may be used for
/// one capture only.
public final class PhotoSettings: Sendable {
    public let uniqueID: Int64
    public let codec: PhotoCodec
    /// Also deliver the raw buffer of every image (AVFoundation's RAW + processed capture).
    public let rawCompanion: Bool
    /// Exposure bracket: one image per EV bias (empty: no bracket).
    public let exposureBiases: [Double]
    /// Number of consecutive frames for a burst (1: a single image). Ignored for a bracket.
    public let burstCount: Int
    /// How the image must be turned to display upright; nil takes it from the connection's
    /// rotation and mirroring (`.up` without a session).
    public let orientation: ExifOrientation?
    /// Write the EXIF APP1 segment (time, exposure, ISO, orientation) into JPEGs.
    public let embedsExif: Bool
    /// Embed a JPEG thumbnail of at most this size in the EXIF segment (AVFoundation's
    /// `embeddedThumbnailPhotoFormat`); nil for none. Needs ``embedsExif``.
    public let embeddedThumbnailSize: PhotoImageSize?
    /// Deliver an uncompressed preview picture with each photo (AVFoundation's
    /// `previewPhotoFormat`, read back as ``CapturePhoto/previewImage``); nil for none.
    public let previewFormat: PhotoPreviewFormat?
    /// Whether to fire the device's flash (AVFoundation's `flashMode`): `.auto` fires when
    /// `CaptureDevice.isLowLightScene`. Must be one of ``PhotoOutput/supportedFlashModes``.
    public let flashMode: FlashMode

    public init(codec: PhotoCodec = .jpeg, rawCompanion: Bool = false, exposureBiases: [Double] = [], burstCount: Int = 1,
                orientation: ExifOrientation? = nil, embedsExif: Bool = true, embeddedThumbnailSize: PhotoImageSize? = nil,
                previewFormat: PhotoPreviewFormat? = nil, flashMode: FlashMode = .off) {
        self.flashMode = flashMode
        uniqueID = nextPhotoID.add(1, ordering: .relaxed).oldValue
        self.codec = codec
        self.rawCompanion = rawCompanion
        self.exposureBiases = exposureBiases
        self.burstCount = burstCount
        self.orientation = orientation
        self.embedsExif = embedsExif
        self.embeddedThumbnailSize = embeddedThumbnailSize
        self.previewFormat = previewFormat
    }

    /// A new settings object with the same choices and a new id (AVFoundation's `init(from:)`).
    public func copyWithNewID() -> PhotoSettings {
        PhotoSettings(codec: codec, rawCompanion: rawCompanion, exposureBiases: exposureBiases, burstCount: burstCount, orientation: orientation, embedsExif: embedsExif,
                      embeddedThumbnailSize: embeddedThumbnailSize, previewFormat: previewFormat, flashMode: flashMode)
    }

    /// Images the capture takes (bracket length or burst count).
    public var shotCount: Int { exposureBiases.isEmpty ? max(1, burstCount) : exposureBiases.count }
}

/// What the output chose for a capture (AVCaptureResolvedPhotoSettings).
public struct ResolvedPhotoSettings: Sendable, Equatable {
    public var uniqueID: Int64
    public var width: Int
    public var height: Int
    /// The source's pixel format.
    public var sourceFormat: PixelFormat
    /// "jpeg", "mjpeg-passthrough" or "raw".
    public var codec: String
    /// JPEG quality actually used (nil for raw and pass-through).
    public var quality: Int?
    public var subsampling: ChromaSubsampling?
    public var exposureBiases: [Double]
    public var shotCount: Int
    public var rawCompanion: Bool
    /// didFinishProcessingPhoto calls to expect.
    public var expectedPhotoCount: Int
    public var orientation: ExifOrientation
    /// Whether the flash fires for this capture (AVFoundation's `isFlashEnabled`): decided when
    /// the capture begins (`.auto` from the scene then).
    public var isFlashEnabled: Bool = false
    /// Faults the flash driver reported after the strobe (empty when none, or without a flash).
    public var flashFaults: FlashFaults = []
}

/// The raw-still container: `VFRAWSTILL\n`, one line of JSON describing the buffer, `\n`, then the
/// buffer exactly as captured.
public struct RawStill: Sendable, Equatable, Codable {
    public var pixelFormat: String
    public var fourcc: String
    public var width: Int
    public var height: Int
    public var bytesPerRow: Int
    public var byteCount: Int
    public var sequence: UInt64
    public var timestampNanoseconds: UInt64
    public var clock: String
    public var exposureTime: Double?
    public var gain: Double?

    public static let magic = Array("VFRAWSTILL\n".utf8)

    /// Splits a raw-still file into its description and its pixel bytes.
    public static func parse(_ data: [UInt8]) throws -> (RawStill, ArraySlice<UInt8>) {
        guard data.count > magic.count, Array(data[0..<magic.count]) == magic,
              let nl = data[magic.count...].firstIndex(of: 0x0A) else { throw SinkError.corruptData("not a raw still (no VFRAWSTILL header)") }
        let info = try JSONDecoder().decode(RawStill.self, from: Data(data[magic.count..<nl]))
        let pixels = data[(nl + 1)...]
        guard pixels.count == info.byteCount else { throw SinkError.corruptData("raw still holds \(pixels.count) bytes, its header says \(info.byteCount)") }
        return (info, pixels)
    }
}

/// One delivered image (AVCapturePhoto).
public struct CapturePhoto: Sendable {
    public var resolvedSettings: ResolvedPhotoSettings
    /// 1-based position among the capture's images.
    public var photoCount: Int
    /// The bracket bias of this image.
    public var exposureBias: Double?
    public var isRawPhoto: Bool
    /// The source frame's format.
    public var format: FrameFormat
    public var sequence: UInt64
    public var timestamp: Timestamp
    public var metadata: FrameMetadata
    /// Wall-clock time of capture.
    public var captureDate: Date
    /// The encoded file: a JPEG (with EXIF) or a raw still.
    private var data: [UInt8]
    /// The preview picture, when the settings asked for one (AVFoundation's `previewPixelBuffer`).
    public var previewImage: PhotoPreviewImage?
    /// The JPEG embedded in the EXIF segment as the file's thumbnail, when the settings asked for one.
    public var embeddedThumbnail: [UInt8]?

    init(resolvedSettings: ResolvedPhotoSettings, photoCount: Int, exposureBias: Double?, isRawPhoto: Bool, format: FrameFormat, sequence: UInt64,
         timestamp: Timestamp, metadata: FrameMetadata, captureDate: Date, data: [UInt8], previewImage: PhotoPreviewImage? = nil, embeddedThumbnail: [UInt8]? = nil) {
        self.resolvedSettings = resolvedSettings; self.photoCount = photoCount; self.exposureBias = exposureBias; self.isRawPhoto = isRawPhoto
        self.format = format; self.sequence = sequence; self.timestamp = timestamp; self.metadata = metadata; self.captureDate = captureDate; self.data = data
        self.previewImage = previewImage; self.embeddedThumbnail = embeddedThumbnail
    }

    /// The bytes of the file this photo would be written as.
    public func fileDataRepresentation() -> [UInt8] { data }

    /// The file extension that fits: `jpg` or `vfraw`.
    public var fileExtension: String { isRawPhoto ? "vfraw" : "jpg" }

    /// Writes the file atomically (temporary file, then rename); an existing file is an error
    /// unless `overwrite`.
    public func write(to path: String, overwrite: Bool = false) throws {
        try AtomicFile.write(data, to: path, overwrite: overwrite)
    }
}
