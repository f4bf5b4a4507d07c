// Camera MJPEG: what a V4L2 camera (or a dump of one) hands over as a frame, through the
// TurboJPEG decoder (header, planar decode, luma decode, the pooled frame decoder stages and
// sinks use) and the pass-through paths that store the JPEG as-is (standalone JPEG with EXIF for
// stills, EXIF read-back).
//
// Input: one mode byte (bits 0-1: scale 1/1, 1/2, 1/4, 1/8), then the JPEG bytes.
import FuzzSupport
import Glibc
import ViewfinderKit

@main enum FuzzMJPEG {
    static func main() {
        FuzzSeeds.handle(makeSeeds)
        let decoder = try! MJPEGDecoder()
        let exif = ExifInfo(exposureTime: 0.01, iso: 200, orientation: .right).app1Segment()
        FuzzDriver.run { data in
            var input = FuzzInput(data)
            let scale = [1, 2, 4, 8][Int(input.byte() & 3)]
            let jpeg = input.remaining
            guard jpeg.count > 0 else { return }

            if let header = try? decoder.header(jpeg), let format = try? decoder.outputFormat(for: header, scaleDenominator: scale),
               format.maxByteCount <= fuzzFrameByteLimit {
                let target = Frame(capacity: format.maxByteCount, format: format)
                _ = try? decoder.decode(jpeg, scaleDenominator: scale, into: target)
                _ = try? decoder.decodeLuma(jpeg, scaleDenominator: scale, into: target)
                // The camera's path: a V4L2 MJPEG buffer as a frame, decoded by the pooled decoder.
                let source = Frame(capacity: jpeg.count, format: FrameFormat(.mjpeg, width: header.width, height: header.height))
                source.data.copyMemory(from: jpeg.baseAddress!, byteCount: jpeg.count)
                source.bytesUsed = jpeg.count
                if let frameDecoder = try? MJPEGFrameDecoder(scaleDenominator: scale, poolSize: 1) {
                    _ = try? frameDecoder.decode(source)
                }
            }
            // A frame too small for the picture is a typed error, not an overflow.
            let small = Frame(capacity: 64, format: FrameFormat(.grey, width: 8, height: 8))
            _ = try? decoder.decode(jpeg, scaleDenominator: scale, into: small)
            _ = try? decoder.decodeLuma(jpeg, scaleDenominator: scale, into: small)

            // Pass-through: stills keep the camera's JPEG and add EXIF; readers parse it back.
            _ = JPEGMarkers.looksLikeJPEG(jpeg)
            if let still = try? JPEGMarkers.makeStandalone(jpeg, exif: exif) {
                _ = still.withUnsafeBytes { try? JPEGMarkers.readExif($0) }
            }
            _ = try? JPEGMarkers.makeStandalone(jpeg, exif: nil)
            _ = try? JPEGMarkers.readExif(jpeg)
        }
    }

    static func makeSeeds(_ dir: String) throws {
        let encoder = try JPEGEncoder()
        let shapes: [(PixelFormat, Int, Int, Int, ChromaSubsampling?)] = [
            (.yuyv, 32, 16, 85, nil), (.grey, 16, 16, 50, nil), (.i420, 48, 32, 95, nil), (.yuyv, 64, 8, 30, .s444),
        ]
        for (n, (pf, w, h, q, sub)) in shapes.enumerated() {
            let format = FrameFormat(pf, width: w, height: h)
            let frame = Frame(capacity: format.maxByteCount, format: format)
            for b in 0..<format.maxByteCount { frame.data.storeBytes(of: UInt8(truncatingIfNeeded: b &* 13 &+ (b >> 5)), toByteOffset: b, as: UInt8.self) }
            frame.bytesUsed = format.maxByteCount
            let jpeg = try encoder.encode(frame, quality: q, subsampling: sub)
            try FuzzSeeds.write([UInt8(n & 3)] + Array(jpeg), to: dir, name: "seed\(n).jpg.seed")
            // A JPEG with EXIF, as stills store them.
            let still = try JPEGMarkers.makeStandalone(jpeg, exif: ExifInfo(iso: 100).app1Segment())
            try FuzzSeeds.write([0] + still, to: dir, name: "still\(n).jpg.seed")
        }
    }
}
