import Testing
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// The libv4lconvert fallback: formats the engine lacks (Bayer here) become RGB24 or YU12.
@Suite struct ConversionTests {
    /// A camera that only speaks 8-bit Bayer BGGR, filled with a uniform colour (B 40, G 120, R 200).
    func bayerKernel() -> FakeV4L2Kernel {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.formats = [FakeV4L2Kernel.Format(fourcc: fourCC("BA81"), description: "8-bit Bayer BGBG/GRGR",
                                              sizes: [.discrete(width: 640, height: 480)], intervals: [FrameInterval(numerator: 1, denominator: 30)])]
        let k = makeKernel([spec])
        k.setPayload { buf, _ in
            for y in 0..<480 {
                for x in 0..<640 {
                    let v: UInt8 = y & 1 == 0 ? (x & 1 == 0 ? 40 : 120) : (x & 1 == 0 ? 120 : 200)
                    buf[y * 640 + x] = v
                }
            }
            return 640 * 480
        }
        return k
    }

    @Test func bayerBecomesRGB24() throws {
        let k = bayerKernel()
        let cam = try makeCamera(k)
        defer { cam.close() }
        let c = try cam.configure(StreamRequest(pixelFormat: .rgb24, width: 640, height: 480, bufferCount: 4))
        #expect(c.format == FrameFormat(.rgb24, width: 640, height: 480))
        #expect(cam.convertedFrom == fourCC("BA81"))
        try cam.start()
        k.produce(2)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.format.pixelFormat == .rgb24)
        #expect(f.bytesUsed == 640 * 480 * 3)
        #expect(f.recycler !== cam) // a pool frame: the kernel buffer went straight back
        #expect(k.statistics().queued + k.statistics().done == 4)
        let p = f.plane(0)
        let mid = (240 * 640 + 320) * 3
        let (r, g, b) = (Int(p[mid]), Int(p[mid + 1]), Int(p[mid + 2]))
        #expect(r > g && g > b, "rgb \(r) \(g) \(b)")
        // Uniform input, uniform output (away from the borders).
        let other = (100 * 640 + 101) * 3
        #expect(abs(Int(p[other]) - r) <= 2 && abs(Int(p[other + 1]) - g) <= 2 && abs(Int(p[other + 2]) - b) <= 2)
        f.release()
        try #require(expectFrame(try nextEvent(cam)))?.release()
    }

    @Test func bayerBecomesI420() throws {
        let k = bayerKernel()
        let cam = try makeCamera(k)
        defer { cam.close() }
        let c = try cam.configure(StreamRequest(pixelFormat: .i420, width: 640, height: 480))
        #expect(c.format == FrameFormat(.i420, width: 640, height: 480))
        try cam.start()
        k.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        defer { f.release() }
        #expect(f.bytesUsed == 640 * 480 * 3 / 2)
        let y = f.plane(0), u = f.plane(1), v = f.plane(2)
        #expect(y[240 * 640 + 320] > 60 && y[240 * 640 + 320] < 200)
        #expect(v[120 * 320 + 160] > 128, "red-ish: V above neutral")
        #expect(u[120 * 320 + 160] < 128, "not blue: U below neutral")
    }

    @Test func formatsNeitherNativeNorConvertibleAreRefused() throws {
        let k = bayerKernel()
        let cam = try makeCamera(k)
        defer { cam.close() }
        #expect(throws: DeviceError.self) { try cam.configure(StreamRequest(pixelFormat: .uyvy, width: 640, height: 480)) }
    }

    @Test func heldPoolFramesAreOutOfBuffersAndTheKernelNeverStarves() throws {
        let k = bayerKernel()
        let cam = try makeCamera(k)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .rgb24, width: 640, height: 480, bufferCount: 4))
        try cam.start()
        k.produce(4)
        var held: [Frame] = []
        for _ in 0..<4 { held.append(try #require(expectFrame(try nextEvent(cam)))) }
        k.produce(1)
        expectLost(try nextEvent(cam), .outOfBuffers, 1)
        #expect(k.statistics().queued == 4)
        for f in held { f.release() }
        k.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.sequence == 5)
        f.release()
    }
}
