import CViewfinderKernels
import Testing
import Viewfinder
import ViewfinderTestSupport
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

    @Test("the focus stage's half-resolution copy and the window tracker's projections against plain references", arguments: [PixelFormat.grey, .yuyv, .nv12])
    func focusCopyAndProjections(_ pf: PixelFormat) throws {
        // Widths around the vectors and the copy's 512-output blocks; regions off the origin.
        for (w, h) in [(2102, 9), (120, 70), (38, 5)] {
            let f = noiseFrame(FrameFormat(pf, width: w, height: h), seed: UInt64(w &* 17 &+ h))
            let l = try #require(LumaView(f))
            func p(_ x: Int, _ y: Int) -> Int { Int(l.pointer(x: x, y: y).pointee) }
            // The copy: outputs centred on (1 + 2i, 1 + 2j) of a region at (1, 1).
            let ow = (w - 4) / 2, oh = (h - 3) / 2
            var expected = [UInt8](repeating: 0, count: ow * oh)
            for j in 0..<oh {
                for i in 0..<ow {
                    let x = 2 + 2 * i, y = 2 + 2 * j
                    func row(_ y: Int) -> Int { p(x - 1, y) + 2 * p(x, y) + p(x + 1, y) }
                    expected[j * ow + i] = UInt8((row(y - 1) + 2 * row(y) + row(y + 1) + 8) >> 4)
                }
            }
            let copies = bothBuilds { () -> [UInt8] in
                var out = [UInt8](repeating: 0, count: ow * oh)
                out.withUnsafeMutableBufferPointer { vf_half_binomial(l.pointer(x: 2, y: 2), l.bytesPerRow, l.pixelStride, ow, oh, $0.baseAddress!, ow) }
                return out
            }
            #expect(copies.portable == expected, "\(pf) \(w)x\(h): copy, portable")
            #expect(copies.best == expected, "\(pf) \(w)x\(h): copy, best")
            // Projections of the columns 1 ..< w − 1 over rows 1 ..< h − 1, and of those rows.
            let n = w - 2, rows = h - 2
            let cols = (0..<n).map { i in (0..<rows).reduce(0) { $0 + p(1 + i, 1 + $1) } }
            let rowTotals = (0..<rows).map { j in (0..<n).reduce(0) { $0 + p(1 + $1, 1 + j) } }
            let sums = bothBuilds { () -> ([Int32], [Int32]) in
                var c = [Int32](repeating: -1, count: n), r = [Int32](repeating: -1, count: rows)
                c.withUnsafeMutableBufferPointer { vf_column_sums(l.pointer(x: 1, y: 1), l.bytesPerRow, l.pixelStride, n, rows, $0.baseAddress!) }
                r.withUnsafeMutableBufferPointer { vf_row_sums(l.pointer(x: 1, y: 1), l.bytesPerRow, l.pixelStride, n, rows, $0.baseAddress!) }
                return (c, r)
            }
            #expect(sums.portable.0.map(Int.init) == cols && sums.best.0.map(Int.init) == cols, "\(pf) \(w)x\(h): column sums")
            #expect(sums.portable.1.map(Int.init) == rowTotals && sums.best.1.map(Int.init) == rowTotals, "\(pf) \(w)x\(h): row sums")
        }
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

    /// `count` xorshift bytes.
    func noiseBytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var x = seed | 1
        return (0..<count).map { _ in
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return UInt8(truncatingIfNeeded: x >> 24)
        }
    }

    @Test("the warp", arguments: [PixelFormat.grey, .yuyv, .uyvy, .nv12, .i420])
    func warp(_ pf: PixelFormat) throws {
        // Widths around the 16-sample blocks; stabiliser-like maps (the two-pass path, rows at the
        // edges per pixel), one without rotation (a vertical step of 0) and one rotated the other way.
        let maps = [(2.3, -1.7, 0.004, 1.1), (0.5, 0.25, 0.0, 1.0), (-5.0, 3.0, -0.02, 1.05)]
        for (w, h) in [(322, 40), (64, 36), (170, 30)] {
            let format = FrameFormat(pf, width: w, height: h)
            let src = noiseFrame(format, seed: UInt64(w * 7 + h))
            let dst = Frame(capacity: format.maxByteCount, format: format)
            let ws = WarpWorkspace(maxWidth: w)
            for (dx, dy, angle, zoom) in maps {
                let m = AffineMap.correction(dx: dx, dy: dy, angle: angle, zoom: zoom, width: w, height: h)
                let r = bothBuilds { () -> [UInt8] in
                    dst.data.initializeMemory(as: UInt8.self, repeating: 0, count: format.maxByteCount)
                    Warp.frame(dst, from: src.data.assumingMemoryBound(to: UInt8.self), map: m, workspace: ws)
                    return Array(UnsafeRawBufferPointer(start: dst.data, count: format.maxByteCount))
                }
                #expect(r.portable == r.best, "\(pf) \(w)x\(h) map \(dx), \(dy), \(angle), \(zoom)")
            }
        }
    }

    @Test("the SAD of two blocks against a plain reference")
    func sadReference() {
        let stride = 40, rows = 20
        let a = noiseBytes(stride * rows, seed: 21), b = noiseBytes(stride * rows, seed: 22)
        for side in [1, 7, 13, 15, 16] {
            for (ax, ay, bx, by) in [(0, 0, 0, 0), (3, 2, 5, 1), (20, 3, 17, 4)] {
                var expected = 0
                for j in 0..<side { for i in 0..<side { expected += abs(Int(a[(ay + j) * stride + ax + i]) - Int(b[(by + j) * stride + bx + i])) } }
                let r = bothBuilds { () -> Int in
                    a.withUnsafeBufferPointer { pa in
                        b.withUnsafeBufferPointer { pb in
                            Int(vf_sad16_rows(pa.baseAddress! + ay * stride + ax, stride, pb.baseAddress! + by * stride + bx, stride, side, side))
                        }
                    }
                }
                #expect(r.portable == expected && r.best == expected, "side \(side) at \(ax), \(ay) / \(bx), \(by)")
            }
        }
    }

    @Test("the grey pyramid's halving and the strided sample copy against plain references")
    func halveGreyAndGather() {
        let bpr = 83, rows = 9
        let src = noiseBytes(bpr * rows, seed: 31)
        for w in [1, 15, 16, 17, 33, 41] {
            var expected: [UInt8] = []
            for y in 0..<4 { for x in 0..<w {
                let a = Int(src[2 * y * bpr + 2 * x]) + Int(src[2 * y * bpr + 2 * x + 1]) + Int(src[(2 * y + 1) * bpr + 2 * x]) + Int(src[(2 * y + 1) * bpr + 2 * x + 1])
                expected.append(UInt8((a + 2) >> 2))
            } }
            let r = bothBuilds { () -> [UInt8] in
                var out = [UInt8](repeating: 0, count: 4 * w)
                src.withUnsafeBufferPointer { p in out.withUnsafeMutableBufferPointer { vf_halve_grey(p.baseAddress!, bpr, w, 4, $0.baseAddress!, w) } }
                return out
            }
            #expect(r.portable == expected && r.best == expected, "halve, \(w) wide")
            for s in [1, 2, 3] where (w - 1) * s < bpr {
                let n = rows - 1
                var want: [UInt8] = []
                for j in 0..<n { for k in 0..<w { want.append(src[j * bpr + k * s]) } }
                // The source ends at the last sample (no byte after it may be read).
                let last = (n - 1) * bpr + (w - 1) * s + 1
                let exact = Array(src[0..<last])
                let g = bothBuilds { () -> [UInt8] in
                    var out = [UInt8](repeating: 0, count: n * w)
                    exact.withUnsafeBufferPointer { p in out.withUnsafeMutableBufferPointer { vf_gather_samples(p.baseAddress!, bpr, s, w, n, $0.baseAddress!, w) } }
                    return out
                }
                #expect(g.portable == want && g.best == want, "gather, \(w) samples \(s) apart")
            }
        }
    }

    /// Cells of 5, and bands of other than 4 rows, by the row loop; bands of 4 × 4 cells (the
    /// estimator's levels) 16 cells at a time when there are 16 or more (the last step overlapping).
    @Test("the dense step's pixel choice: both builds agree and match a plain reference",
          arguments: [(37, 5, 12), (64, 5, 12), (101, 5, 12), (37, 4, 4), (101, 4, 4), (300, 4, 4), (300, 4, 12), (70, 4, 4)])
    func denseCellMaxima(width w: Int, cell: Int, rows: Int) {
        let margin = 2, cells = (w - 2 * margin) / cell
        // Noise with flat patches (equal magnitudes: the first of equals must win) and a ramp; then
        // every row the same (equal magnitudes down each column: the first row must win).
        var noisy = noiseBytes(w * (rows + 2), seed: UInt64(w))
        for i in noisy.indices where (i / 7) % 3 == 0 { noisy[i] = UInt8(truncatingIfNeeded: i % w) }
        let firstRow = noiseBytes(w, seed: UInt64(w + 1))
        for img in [noisy, (0..<(rows + 2)).flatMap { _ in firstRow }] {
            func reference(_ threshold: Int16) -> ([Int16], [Int32]) {
                var best = [Int16](repeating: threshold, count: cells), at = [Int32](repeating: -7, count: cells)
                func p(_ x: Int, _ y: Int) -> Int { Int(img[y * w + x]) }
                for y in 1...rows { for k in 0..<cells { for x in (margin + k * cell)..<(margin + (k + 1) * cell) {
                    let gx = p(x + 1, y - 1) - p(x - 1, y - 1) + 2 * (p(x + 1, y) - p(x - 1, y)) + p(x + 1, y + 1) - p(x - 1, y + 1)
                    let gy = p(x - 1, y + 1) - p(x - 1, y - 1) + 2 * (p(x, y + 1) - p(x, y - 1)) + p(x + 1, y + 1) - p(x + 1, y - 1)
                    if abs(gx) + abs(gy) > Int(best[k]) { best[k] = Int16(abs(gx) + abs(gy)); at[k] = Int32(y << 16 | x) }
                } } }
                return (best, at)
            }
            // A threshold at the median cell's steepest pixel: about half the cells stay under it.
            let threshold = reference(0).0.sorted()[cells / 2]
            let (wantBest, wantAt) = reference(threshold)
            let r = bothBuilds { () -> ([Int16], [Int32]) in
                var mag = [Int16](repeating: 0, count: w), best = [Int16](repeating: threshold, count: cells), at = [Int32](repeating: -7, count: cells)
                img.withUnsafeBufferPointer { src in
                    vf_dense_cell_maxima(src.baseAddress!, w, 1, rows, margin, cell, cells, &mag, &best, &at)
                }
                return (best, at)
            }
            #expect(r.portable.0 == wantBest && r.best.0 == wantBest, "best magnitudes, \(w) wide, cells of \(cell), \(rows) rows")
            #expect(r.portable.1 == wantAt && r.best.1 == wantAt, "their places, \(w) wide, cells of \(cell), \(rows) rows")
            #expect(wantAt.contains(-7) && wantAt.contains { $0 != -7 }, "some cells stay under the threshold, some do not")
        }
    }

    @Test("the warp's vertical pass against a plain reference")
    func warpVerticalReference() {
        let bpr = 301, rows = 9
        let src = noiseBytes(bpr * rows, seed: 11)
        for s in [1, 2, 3] {
            let first = 4, last = (bpr - 1) / s - 1
            for (start, step) in [(2 * 65536 + 1234, Int32(250)), (6 * 65536 + 40000, -317), (3 * 65536 + 77, 0), (1 * 65536 + 65535, 9)] {
                var expected: [UInt8] = []
                for c in first...last {
                    let fv = Int32(start) + Int32(c - first) * step
                    let iv = Int(fv >> 16), wy = Int((fv >> 8) & 0xFF)
                    let a = Int(src[iv * bpr + c * s]), b = Int(src[(iv + 1) * bpr + c * s])
                    expected.append(UInt8((a * (256 - wy) + b * wy + 128) >> 8))
                }
                let r = bothBuilds { () -> [UInt8] in
                    var t = [UInt8](repeating: 0, count: last - first + 1)
                    src.withUnsafeBufferPointer { p in
                        t.withUnsafeMutableBufferPointer { vf_warp_vertical(p.baseAddress!, bpr, first, last, s, Int32(start), step, $0.baseAddress!) }
                    }
                    return t
                }
                #expect(r.portable == expected && r.best == expected, "stride \(s), start \(start), step \(step)")
            }
        }
    }

    @Test("the warp's horizontal pass against a plain reference")
    func warpResampleReference() {
        let ws = WarpWorkspace(maxWidth: 200)
        let src = noiseBytes(300, seed: 5)
        for a in [0.9, 0.8347, 1.0, 0.99] {
            ws.prepare(scale: a)
            let fa = Int64((a * 16_777_216).rounded())
            for k in [0, 7, 31] {
                for n in [200, 37, 16, 15] {
                    var expected: [UInt8] = []
                    for x in 0..<n {
                        let u = Int64(k) << 19 + Int64(x) * fa
                        let i = Int(u >> 24) + 8, w = Int((u >> 16) & 0xFF)
                        expected.append(UInt8((Int(src[i]) * (256 - w) + Int(src[i + 1]) * w + 128) >> 8))
                    }
                    let r = bothBuilds { () -> [UInt8] in
                        var out = [UInt8](repeating: 0, count: n)
                        src.withUnsafeBufferPointer { p in
                            out.withUnsafeMutableBufferPointer { ws.resample(p.baseAddress! + 8, into: $0.baseAddress!, count: n, phase: k) }
                        }
                        return out
                    }
                    #expect(r.portable == expected && r.best == expected, "scale \(a), phase \(k), \(n) columns")
                }
            }
        }
    }

    @Test("the pyramid's first level from packed 4:2:2 against a plain reference", arguments: [PixelFormat.yuyv, .uyvy])
    func halvePacked(_ pf: PixelFormat) throws {
        // Widths around the 16-output vectors (and below one), odd heights; the output exactly
        // as wide as the frame allows, so the last vector ends next to the row's end.
        for (w, h) in [(1920, 9), (64, 6), (66, 5), (34, 4), (30, 3), (4, 2), (98, 7)] {
            let f = noiseFrame(FrameFormat(pf, width: w, height: h), seed: UInt64(w * 13 + h))
            let luma = try #require(LumaView(f))
            var expected: [UInt8] = []
            for y in 0..<(h / 2) {
                for x in 0..<(w / 2) {
                    func l(_ c: Int, _ r: Int) -> Int { Int(luma.pointer(x: c, y: r)[0]) }
                    expected.append(UInt8((l(2 * x, 2 * y) + l(2 * x + 1, 2 * y) + l(2 * x, 2 * y + 1) + l(2 * x + 1, 2 * y + 1) + 2) >> 2))
                }
            }
            let r = bothBuilds { () -> [UInt8] in
                let out = GreyImage(width: w / 2, height: h / 2)
                Pyramid.halve(luma, into: out)
                return Array(UnsafeBufferPointer(start: out.pixels, count: out.width * out.height))
            }
            #expect(r.portable == expected, "\(pf) \(w)x\(h): portable")
            #expect(r.best == expected, "\(pf) \(w)x\(h): best")
        }
    }

    @Test("the motion estimator's dense pass: both builds agree and match a plain reference", arguments: [61, 8, 3, 0])
    func densePass(count: Int) {
        let w = 90, h = 50, bw = 97
        let image = noiseBytes(bw * h, seed: 11)
        var g = TestRNG(UInt64(count) + 5)
        // Points of a 1/2 level (s = 2), some of them mapped outside the picture.
        let xs = (0..<count).map { _ in Float(g.next() % 1000) / 1000 * Float(w + 6) - 3 }
        let ys = (0..<count).map { _ in Float(g.next() % 1000) / 1000 * Float(h + 6) - 3 }
        let ts = (0..<count).map { _ in Float(g.next() % 256) }
        let gxs = (0..<count).map { _ in Float(Int(g.next() % 128) - 64) }
        let gys = (0..<count).map { _ in Float(Int(g.next() % 128) - 64) }
        let s: Float = 2, half: Float = 0.5, cx = Float(2 * w) / 2, cy = Float(2 * h) / 2
        let tx: Float = 0.37, ty: Float = -0.61, th: Float = 0.013, kk: Float = -0.004, unit: Float = 100, huber: Float = 6
        let maxU = Float(w - 1) - 0.001, maxV = Float(h - 1) - 0.001
        // The plain reference, in doubles.
        var hist = [Int32](repeating: 0, count: 256), sums = [Double](repeating: 0, count: 14)
        var used = 0, cost = 0.0
        for i in 0..<count {
            let px = xs[i] * s + half - cx, py = ys[i] * s + half - cy
            let u = xs[i] + tx + (-th * py + kk * px) / s, v = ys[i] + ty + (th * px + kk * py) / s
            guard u >= 0, v >= 0, u < maxU, v < maxV else { continue }
            let iu = Int(u), iv = Int(v), fu = Double(u) - Double(iu), fv = Double(v) - Double(iv)
            func p(_ dx: Int, _ dy: Int) -> Double { Double(image[(iv + dy) * bw + iu + dx]) }
            let top = p(0, 0) + (p(1, 0) - p(0, 0)) * fu, bot = p(0, 1) + (p(1, 1) - p(0, 1)) * fu
            let r = top + (bot - top) * fv - Double(ts[i]), ar = abs(r)
            used += 1
            cost += ar <= 4 ? 0.5 * ar * ar : 4 * (ar - 2)
            hist[min(255, Int(ar * 4))] += 1
            let wgt = ar <= Double(huber) ? 1 : Double(huber) / ar
            let gx = Double(gxs[i] / s), gy = Double(gys[i] / s), pk = Double(px / unit), qk = Double(py / unit)
            let jac = [gx, gy, -gx * qk + gy * pk, gx * pk + gy * qk]
            var k = 0
            for a in 0..<4 { for b in a..<4 { sums[k] += wgt * jac[a] * jac[b]; k += 1 } }
            for a in 0..<4 { sums[10 + a] -= wgt * jac[a] * r }
        }
        struct Out: Equatable { var hist: [Int32]; var sums: [Float]; var used: Int; var cost: Double; var usedBare: Int; var costBare: Double }
        let r = bothBuilds { () -> Out in
            var o = Out(hist: [Int32](repeating: 0, count: 256), sums: [Float](repeating: 0, count: 14), used: 0, cost: 0, usedBare: 0, costBare: 0)
            image.withUnsafeBufferPointer { im in
                vf_dense_pass(xs, ys, ts, gxs, gys, count, im.baseAddress, bw, maxU, maxV, s, half, cx, cy, tx, ty, th, kk, unit, huber,
                              &o.hist, &o.sums, &o.used, &o.cost)
                // Without a histogram: only the count and the cost.
                vf_dense_pass(xs, ys, ts, gxs, gys, count, im.baseAddress, bw, maxU, maxV, s, half, cx, cy, tx, ty, th, kk, unit, huber,
                              nil, nil, &o.usedBare, &o.costBare)
            }
            return o
        }
        #expect(r.portable == r.best)
        #expect(r.best.used == used && r.best.usedBare == used)
        #expect(r.best.hist == hist)
        #expect(abs(r.best.cost - cost) <= 1e-4 * max(1, cost) && r.best.costBare == r.best.cost)
        let scale = sums.map(abs).max() ?? 1
        for (got, want) in zip(r.best.sums, sums) {
            #expect(abs(Double(got) - want) <= 1e-5 * max(1, scale), "\(got) vs \(want)")
        }
        if count > 8 { #expect(used > 0 && used < count, "the points should fall both inside and outside") }
    }

    @Test("the dense scan's costs are the dense pass's at every whole translation, bit for bit", arguments: [600, 61, 7, 0])
    func denseScan(count: Int) {
        // Rows exactly `width` apart (a pyramid level); whole positions, some near the edges so
        // that translations move them out on every side, and whole values.
        let w = 70, h = 44, side = 21, radius = 10
        let image = noiseBytes(w * h, seed: 23)
        var g = TestRNG(UInt64(count) + 9)
        let xs = (0..<count).map { _ in Float(g.next() % UInt64(w)) }
        let ys = (0..<count).map { _ in Float(g.next() % UInt64(h)) }
        let ts = (0..<count).map { _ in Float(g.next() % 256) }
        let zeros = [Float](repeating: 0, count: count)
        let s: Float = 4, half: Float = 1.5, cx = Float(4 * w) / 2, cy = Float(4 * h) / 2
        let maxU = Float(w - 1) - 0.001, maxV = Float(h - 1) - 0.001
        struct Out: Equatable { var costs: [Double]; var used: [Int] }
        let pass = bothBuilds { () -> Out in
            var o = Out(costs: [], used: [])
            image.withUnsafeBufferPointer { im in
                for j in 0..<side {
                    for i in 0..<side {
                        var used = 0, cost = 0.0
                        vf_dense_pass(xs, ys, ts, zeros, zeros, count, im.baseAddress, w, maxU, maxV, s, half, cx, cy,
                                      Float(i - radius), Float(j - radius), 0, 0, 1000, 4, nil, nil, &used, &cost)
                        o.costs.append(cost); o.used.append(used)
                    }
                }
            }
            return o
        }
        var lanes = [Double](repeating: .nan, count: side * side * 8)
        var scan = Out(costs: [Double](repeating: .nan, count: side * side), used: [Int](repeating: -1, count: side * side))
        image.withUnsafeBufferPointer { im in
            vf_dense_scan(xs, ys, ts, count, im.baseAddress, w, h, -radius, -radius, side, &lanes, &scan.costs, &scan.used)
        }
        #expect(pass.portable == pass.best)
        #expect(scan.used == pass.best.used)
        // Bit for bit (== would also pass for +0 against −0).
        #expect(scan.costs.map(\.bitPattern) == pass.best.costs.map(\.bitPattern))
        if count > 8 {
            #expect(Set(scan.used).count > 2, "translations should move points out of the picture")
            #expect(scan.costs.contains { $0 > 0 })
        }
    }

    @Test("Lucas–Kanade sums: both builds agree and match a plain reference", arguments: [1, 2, 3])
    func lucasKanade(stride s: Int) {
        let tw = 40, iw = 60 * s, bpr = iw + 5
        let template = noiseBytes(tw * tw, seed: 3), image = noiseBytes(bpr * 50, seed: 4)
        for n in [13, 25, 33, 8, 5] {
            for (fx, fy) in [(Float(0.3), Float(0.71)), (0, 0), (0.999, 0.5)] {
                var rx = 0.0, rxy = 0.0, ry = 0.0, rbx = 0.0, rby = 0.0
                // The similarity's normal equations (upper triangle of JᵀJ, then Jᵀe).
                var sim = [Double](repeating: 0, count: 14)
                let px0 = -0.21, py0 = 0.13, step = 0.004
                for j in 0..<n {
                    for k in 0..<n {
                        func t(_ dx: Int, _ dy: Int) -> Double { Double(template[(j + 1 + dy) * tw + k + 1 + dx]) }
                        func p(_ dx: Int, _ dy: Int) -> Double { Double(image[(j + 2 + dy) * bpr + (k + 3 + dx) * s]) }
                        let gx = (t(1, 0) - t(-1, 0)) / 2, gy = (t(0, 1) - t(0, -1)) / 2
                        let top = p(0, 0) + (p(1, 0) - p(0, 0)) * Double(fx), bot = p(0, 1) + (p(1, 1) - p(0, 1)) * Double(fx)
                        let e = t(0, 0) - (top + (bot - top) * Double(fy))
                        rx += gx * gx; rxy += gx * gy; ry += gy * gy; rbx += gx * e; rby += gy * e
                        let px = px0 + Double(k) * step, py = py0 + Double(j) * step
                        let jac = [gx, gy, gy * px - gx * py, gx * px + gy * py]
                        var u = 0
                        for a in 0..<4 { for b in a..<4 { sim[u] += jac[a] * jac[b]; u += 1 } }
                        for a in 0..<4 { sim[10 + a] += jac[a] * e }
                    }
                }
                let r = bothBuilds { () -> [Float] in
                    var out = [Float](repeating: 0, count: 5 + 14)
                    template.withUnsafeBufferPointer { t in
                        image.withUnsafeBufferPointer { im in
                            out.withUnsafeMutableBufferPointer { o in
                                vf_lk_tensor(t.baseAddress! + tw + 1, tw, n, n, o.baseAddress!)
                                vf_lk_mismatch(t.baseAddress! + tw + 1, tw, im.baseAddress! + 2 * bpr + 3 * s, bpr, s, n, n, fx, fy, o.baseAddress! + 3)
                                vf_lk_similarity(t.baseAddress! + tw + 1, tw, im.baseAddress! + 2 * bpr + 3 * s, bpr, s, n, n, fx, fy,
                                                 Float(px0), Float(py0), Float(step), o.baseAddress! + 5)
                            }
                        }
                    }
                    return out
                }
                #expect(r.portable == r.best, "stride \(s), \(n)x\(n), fraction (\(fx), \(fy))")
                for (got, want) in zip(r.best, [rx, rxy, ry, rbx, rby] + sim) {
                    #expect(abs(Double(got) - want) <= 1e-5 * max(1, abs(rx) + abs(ry)) * 10, "stride \(s), \(n)x\(n): \(got) vs \(want)")
                }
            }
        }
    }

    @Test("motion estimation", arguments: [PixelFormat.grey, .yuyv])
    func motion(_ pf: PixelFormat) {
        let format = FrameFormat(pf, width: 320, height: 240)
        let a = TexturedFrames.make(format), b = TexturedFrames.make(format, shiftX: 3, shiftY: -2)
        let r = bothBuilds { () -> [Double] in
            let est = MotionEstimator(width: 320, height: 240)
            _ = est.estimate(LumaView(a)!)
            let m = est.estimate(LumaView(b)!)
            return [m.dx, m.dy, m.angle, m.scale, m.confidence]
        }
        #expect(r.portable == r.best, "\(pf): \(r.portable) vs \(r.best)")
        #expect(abs(abs(r.best[0]) - 3) < 0.1 && abs(abs(r.best[1]) - 2) < 0.1, "\(pf): \(r.best)")
    }
}
