import CViewfinderKernels
import Testing
import Viewfinder
@testable import ViewfinderStages
@testable import ViewfinderSim

/// The C kernels run as an AVX2 build where the CPU has AVX2 and as a portable build elsewhere
/// (SSE2 on x86-64, NEON on arm64). Both must give the same bits: each test runs the kernels with
/// the portable build forced and with the CPU's best, and compares.
@Suite("Portable and AVX2 kernels agree", .serialized)
struct PortableKernelTests {
    /// `body` with the portable build forced, then with the CPU's best build.
    func bothBuilds<T>(_ body: () throws -> T) rethrows -> (portable: T, best: T) {
        vf_kernels_force_portable(1)
        defer { vf_kernels_force_portable(0) }
        #expect(vf_kernels_avx2_active() == 0)
        let p = try body()
        vf_kernels_force_portable(0)
        #expect(vf_kernels_avx2_active() == vf_kernels_avx2_available())
        return (p, try body())
    }

    /// A frame of random bytes (every plane), so the kernels see full-range values.
    func noiseFrame(_ format: FrameFormat, seed: UInt64) -> Frame {
        let f = Frame(capacity: format.maxByteCount, format: format)
        var x = seed | 1
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        for i in 0..<format.maxByteCount {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17 // xorshift64
            p[i] = UInt8(truncatingIfNeeded: x >> 24)
        }
        return f
    }

    @Test("the AVX2 build is used where the CPU has AVX2")
    func dispatch() {
        #if arch(x86_64)
        // Every x86-64 machine this project runs on has AVX2; the test says so if one does not.
        if vf_kernels_avx2_available() == 0 { print("note: no AVX2 here; only the portable build was compared") }
        #else
        #expect(vf_kernels_avx2_available() == 0)
        #endif
        #expect(vf_kernels_avx2_active() == vf_kernels_avx2_available())
    }

    @Test("focus measures", arguments: [PixelFormat.grey, .yuyv, .uyvy, .nv12])
    func focus(_ pf: PixelFormat) throws {
        // Widths around the 16-sample vectors and the 1024-sample chunks; regions off the origin.
        for (w, h) in [(1922, 21), (64, 48), (38, 6), (2050, 9)] {
            let f = noiseFrame(FrameFormat(pf, width: w, height: h), seed: UInt64(w * 31 + h))
            let luma = try #require(LumaView(f))
            for region in [nil, PixelRect(x: 3, y: 1, width: w - 5, height: h - 2), PixelRect(x: 1, y: 0, width: 19, height: 3)] {
                let r = bothBuilds { (FocusMeasures.laplacianVariance(luma, region: region), FocusMeasures.tenengrad(luma, region: region)) }
                #expect(r.portable.0 == r.best.0, "\(pf) \(w)x\(h) \(String(describing: region)): Laplacian")
                #expect(r.portable.1 == r.best.1, "\(pf) \(w)x\(h) \(String(describing: region)): Tenengrad")
            }
        }
    }

    @Test("focus measures against a plain reference")
    func focusReference() throws {
        let f = noiseFrame(FrameFormat(.yuyv, width: 70, height: 9), seed: 7)
        let l = try #require(LumaView(f))
        var sq = 0, px = 0
        for y in 1..<(l.height - 1) {
            for x in 1..<(l.width - 1) {
                func p(_ dx: Int, _ dy: Int) -> Int { Int(l.pointer(x: x + dx, y: y + dy).pointee) }
                let gx = (p(1, -1) + 2 * p(1, 0) + p(1, 1)) - (p(-1, -1) + 2 * p(-1, 0) + p(-1, 1))
                let gy = (p(-1, 1) + 2 * p(0, 1) + p(1, 1)) - (p(-1, -1) + 2 * p(0, -1) + p(1, -1))
                sq += gx * gx + gy * gy; px += p(0, 0)
            }
        }
        let n = Double((l.width - 2) * (l.height - 2))
        let r = bothBuilds { FocusMeasures.tenengrad(l) }
        #expect(r.portable.value == Double(sq) / n && r.best.value == Double(sq) / n)
        #expect(r.portable.mean == Double(px) / n)
    }

    @Test("the sim camera's renderer", arguments: [PixelFormat.yuyv, .uyvy, .nv12, .i420, .grey])
    func simRender(_ pf: PixelFormat) throws {
        for defocus in [0.0, 60, 400] {
            var o = SimOptions()
            o.width = 320; o.height = 240; o.format = pf; o.shake = 3; o.flicker = 50; o.paced = false
            let cam = try SimCamera(options: o)
            _ = try cam.configure(StreamRequest(pixelFormat: pf, width: 320, height: 240, fps: 30))
            try cam.start()
            defer { cam.stop() }
            let r = try #require(cam.currentRenderer)
            var st = SimFrameState()
            st.sequence = 5; st.time = 0.17; st.exposureMicroseconds = 3000
            st.shakeX = 1.3; st.shakeY = -2.2; st.shakeAngle = 0.004
            st.lensPosition = r.inFocusPosition + defocus
            let bytes = bothBuilds { () -> [UInt8] in
                let f = Frame(capacity: r.compressedCapacity, format: r.format)
                r.render(st, into: f)
                return Array(UnsafeRawBufferPointer(start: f.data, count: f.bytesUsed))
            }
            #expect(bytes.portable.count == r.format.maxByteCount)
            #expect(bytes.portable == bytes.best, "\(pf), defocus \(defocus)")
        }
    }
}
