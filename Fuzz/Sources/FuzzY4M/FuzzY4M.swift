// The y4m reader (`viewfinder process`, `dump:` replay to y4m readers, `-` on stdin): header
// parsing and frame reading of arbitrary bytes from a file descriptor.
import FuzzSupport
import Glibc
import Viewfinder

@main enum FuzzY4M {
    static func main() {
        FuzzSeeds.handle(makeSeeds)
        let file = MemoryFile(name: "y4m")
        FuzzDriver.run { data in
            _ = try? Y4MHeader.parse(Array(data.prefix(4096)))
            file.set(data)
            let fd = dup(file.fd)
            guard let reader = try? Y4MReader(fileDescriptor: fd, path: "fuzz.y4m", ownsDescriptor: true) else { return }
            let bytes = reader.header.frameByteCount
            guard bytes > 0, bytes <= fuzzFrameByteLimit else { return }
            let pool = reader.makePool(count: 1)
            guard let lease = pool.lease() else { return }
            var frames = 0
            while frames < 64, (try? reader.read(into: lease.frame)) == true { frames += 1 }
        }
    }

    static func makeSeeds(_ dir: String) throws {
        let shapes: [(PixelFormat, Int, Int)] = [(.i420, 16, 8), (.yuv422p, 8, 4), (.grey, 4, 2), (.i420, 2, 2)]
        for (n, (pf, w, h)) in shapes.enumerated() {
            let path = "\(dir)/seed\(n).y4m"
            let format = FrameFormat(pf, width: w, height: h)
            let writer = try Y4MWriter(path: path, format: format, interval: FrameInterval(numerator: 1, denominator: 25))
            let frame = Frame(capacity: format.maxByteCount, format: format)
            for i in 0..<3 {
                for b in 0..<format.maxByteCount { frame.data.storeBytes(of: UInt8(truncatingIfNeeded: b &* 7 &+ i), toByteOffset: b, as: UInt8.self) }
                frame.bytesUsed = format.maxByteCount
                try writer.write(frame)
            }
            try writer.flush()
            writer.close()
        }
    }
}
