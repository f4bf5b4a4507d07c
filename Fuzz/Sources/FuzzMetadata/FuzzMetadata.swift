// The writers fed extreme metadata: EXIF (capture date, exposure, ISO from gain, orientation from
// rotation) and the movie writer (track sizes, sample rates, channels, rotation, fragment
// interval, any capture timestamps, any JPEG and PCM sizes). Whatever comes in, a writer either
// throws a typed error or writes a file that its own readers parse back.
//
// Input: a little program of numbers and blocks (FuzzInput).
import Foundation
import FuzzSupport
import Glibc
import ViewfinderKit

@main enum FuzzMetadata {
    static func main() {
        FuzzSeeds.handle(makeSeeds)
        let path = "/dev/shm/vf-fuzz-movie-\(getpid()).mov"
        let jpeg: [UInt8] = {
            let format = FrameFormat(.grey, width: 16, height: 16)
            let frame = Frame(capacity: format.maxByteCount, format: format)
            frame.bytesUsed = format.maxByteCount
            let encoder = try! JPEGEncoder()  // owns the bytes `encode` returns: keep it until copied
            return withExtendedLifetime(encoder) { Array(try! encoder.encode(frame, quality: 80)) }
        }()
        FuzzDriver.run { data in
            var input = FuzzInput(data)
            // EXIF.
            let date = Date(timeIntervalSince1970: input.double())
            let exposure = input.double()
            let gain = input.double()
            let iso = ExifInfo.iso(fromGain: gain)
            let orientation = ExifOrientation(rotationDegrees: Int(truncatingIfNeeded: input.integer(Int64.self)))
            let exif = ExifInfo(dateTimeOriginal: date, exposureTime: exposure, iso: input.byte() & 1 == 0 ? iso : Int(truncatingIfNeeded: input.integer(Int64.self)),
                                orientation: orientation)
            let segment = exif.app1Segment()
            if let still = try? jpeg.withUnsafeBytes({ try JPEGMarkers.makeStandalone($0, exif: segment) }) {
                _ = still.withUnsafeBytes { try? JPEGMarkers.readExif($0) }
            }

            // The movie writer.
            var tracks: [MovieTrackDescription] = []
            let trackBits = input.byte()
            if trackBits & 1 != 0 { tracks.append(.mjpegVideo(width: Int(truncatingIfNeeded: input.integer(Int32.self)), height: Int(truncatingIfNeeded: input.integer(Int32.self)))) }
            if trackBits & 2 != 0 { tracks.append(.pcmAudio(sampleRate: Int(truncatingIfNeeded: input.integer(Int64.self)), channels: Int(truncatingIfNeeded: input.integer(Int16.self)))) }
            if trackBits & 4 != 0, let t = tracks.first { tracks.append(t) }
            let interval = input.double()
            let rotation = Int(truncatingIfNeeded: input.integer(Int64.self))
            guard let writer = try? MovieWriter(path: path, tracks: tracks, fragmentInterval: interval, overwrite: true, rotation: rotation) else { return }
            defer { unlink(path) }
            if input.byte() & 1 != 0 { writer.setOrigin(nanoseconds: input.integer(UInt64.self)) }
            var steps = 0
            while !input.isEmpty, steps < 24 {
                steps += 1
                let op = input.byte() % 4
                let time = input.integer(UInt64.self)
                do {
                    switch op {
                    case 0: try jpeg.withUnsafeBytes { try writer.appendVideo($0, timestampNanoseconds: time) }
                    case 1:
                        let n = Int(input.integer(UInt16.self) % 4096)
                        let pcm = [UInt8](repeating: 0x11, count: n)
                        try pcm.withUnsafeBytes { try writer.appendAudio($0, timestampNanoseconds: time) }
                    case 2: try writer.writeFragment()
                    default:
                        let n = Int(input.byte())
                        let bytes = Array(input.remaining.prefix(n))
                        try bytes.withUnsafeBytes { try writer.appendVideo($0, timestampNanoseconds: time) }
                    }
                } catch {
                    writer.finishAfterError()
                    return
                }
            }
            let last: UInt64? = input.byte() & 1 == 0 ? nil : input.integer(UInt64.self)
            do { try writer.finish(lastFrameDurationNanoseconds: last) } catch { writer.finishAfterError() }
        }
    }

    static func makeSeeds(_ dir: String) throws {
        func bytes(_ parts: [[UInt8]]) -> [UInt8] { parts.flatMap { $0 } }
        func le<T: FixedWidthInteger>(_ v: T) -> [UInt8] { withUnsafeBytes(of: v.littleEndian) { Array($0) } }
        func d(_ v: Double) -> [UInt8] { le(v.bitPattern) }
        // A plausible still and a movie with video and sound, frames 33 ms apart.
        var movie = bytes([d(1.7e9), d(0.01), d(2.0), le(Int64(90)), [0],
                           [3], le(Int32(640)), le(Int32(480)), le(Int64(48000)), le(Int16(2)), d(0.5), le(Int64(0)), [1], le(UInt64(1_000_000_000))])
        for i in 0..<6 {
            movie += [0] + le(UInt64(1_000_000_000 + i * 33_333_333))
            movie += [1] + le(UInt64(1_000_000_000 + i * 33_333_333)) + le(UInt16(1600))
        }
        movie += [2] + le(UInt64(0)) + [1] + le(UInt64(33_333_333))
        try FuzzSeeds.write(movie, to: dir, name: "movie.seed")
        // Extremes: NaN and infinite doubles, negative sizes, a huge rotation.
        let extreme = bytes([d(.nan), d(.infinity), d(-.infinity), le(Int64.min), [1], le(Int64.max),
                             [3], le(Int32(-1)), le(Int32.max), le(Int64.max), le(Int16.min), d(.nan), le(Int64.max), [0],
                             [0], le(UInt64.max), [0], le(UInt64(0)), [2], le(UInt64(0))])
        try FuzzSeeds.write(extreme, to: dir, name: "extreme.seed")
    }
}
