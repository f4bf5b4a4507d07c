import Testing
import ViewfinderTestSupport
import Foundation
import Viewfinder
@testable import ViewfinderStages

@Suite("Luma statistics and focus measures")
struct KernelTests {
    @Test("histogram counts every sample and matches the direct mean, on planar and packed luma")
    func histogram() throws {
        for pf in [PixelFormat.grey, .yuyv, .nv12, .i420] {
            let frame = Frame(capacity: FrameFormat(pf, width: 67, height: 41).maxByteCount, format: FrameFormat(pf, width: 67, height: 41))
            fill(frame) { x, y in UInt8((x * 7 + y * 13) % 256) }
            let luma = try #require(LumaView(frame))
            let h = LumaHistogram()
            #expect(h.add(luma) == 67 * 41)
            #expect(h.total == 67 * 41)
            var direct = 0
            for y in 0..<41 { for x in 0..<67 { direct += (x * 7 + y * 13) % 256 } }
            #expect(abs(h.mean - Double(direct) / Double(67 * 41)) < 1e-9)
            #expect(Int(h.counts[(3 * 7 + 2 * 13) % 256]) >= 1)
            // Subsampled: every 4th sample of every 4th row.
            h.reset()
            #expect(h.add(luma, step: 4) == 17 * 11)
            var sub = 0
            for y in stride(from: 0, to: 41, by: 4) { for x in stride(from: 0, to: 67, by: 4) { sub += (x * 7 + y * 13) % 256 } }
            #expect(abs(h.mean - Double(sub) / Double(17 * 11)) < 1e-9)
            #expect(abs(LumaStatistics.mean(luma, step: 4) - h.mean) < 1e-9)
        }
    }

    @Test("histogram summaries: quantile and clipped fractions")
    func summaries() throws {
        let frame = Frame(capacity: 100, format: FrameFormat(.grey, width: 10, height: 10))
        fill(frame) { x, _ in x < 3 ? 255 : x < 5 ? 0 : 100 }
        let h = LumaHistogram()
        h.add(try #require(LumaView(frame)))
        #expect(abs(h.fraction(atOrAbove: 250) - 0.3) < 1e-12)
        #expect(abs(h.fraction(atOrBelow: 5) - 0.2) < 1e-12)
        #expect(h.quantile(0.5) == 100)
        #expect(h.quantile(0.1) == 0)
        // A region restricted to the clipped columns.
        h.reset()
        h.add(try #require(LumaView(frame)), region: PixelRect(x: 0, y: 0, width: 3, height: 10))
        #expect(h.mean == 255)
    }

    @Test("Laplacian and Tenengrad are zero on flat and linear ramps, exact on a known pattern")
    func focusMeasuresExact() throws {
        let f = FrameFormat(.grey, width: 32, height: 16)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        fill(frame) { _, _ in 90 }
        var s = FocusMeasures.measure(try #require(LumaView(frame)))
        #expect(s.laplacianVariance == 0 && s.tenengrad == 0 && s.meanLuma == 90)
        // A horizontal ramp: Laplacian 0, Sobel gx = 8 * slope.
        fill(frame) { x, _ in UInt8(10 + 3 * x) }
        s = FocusMeasures.measure(try #require(LumaView(frame)))
        #expect(s.laplacianVariance == 0)
        #expect(s.tenengrad == 24 * 24)
        // Vertical stripes 0/100: Laplacian ±200 everywhere -> variance 40000; gx = 0 (symmetric).
        fill(frame) { x, _ in x % 2 == 0 ? 0 : 100 }
        s = FocusMeasures.measure(try #require(LumaView(frame)))
        #expect(s.laplacianVariance == 40_000)
        #expect(s.tenengrad == 0)
    }

    @Test("focus measures fall with blur and ignore brightness once normalised; YUYV equals GREY")
    func focusMeasuresBlur() throws {
        let tex = TestTexture(width: 200, height: 150)
        var rng = TestRNG(1)
        var last = Double.infinity
        var lastT = Double.infinity
        for blur in [0, 1, 2, 4] {
            let f = FrameFormat(.grey, width: 160, height: 120)
            let frame = Frame(capacity: f.maxByteCount, format: f)
            render(tex, into: frame, blur: blur, rng: &rng)
            let m = FocusMeasures.measure(try #require(LumaView(frame))).normalised
            #expect(m.laplacianVariance < last)
            #expect(m.tenengrad < lastT)
            last = m.laplacianVariance; lastT = m.tenengrad
        }
        // Brightness: half the exposure changes the normalised measures little.
        let f = FrameFormat(.grey, width: 160, height: 120)
        let a = Frame(capacity: f.maxByteCount, format: f), b = Frame(capacity: f.maxByteCount, format: f)
        render(tex, into: a, exposure: 1, rng: &rng)
        render(tex, into: b, exposure: 0.5, rng: &rng)
        let ma = FocusMeasures.measure(try #require(LumaView(a))).normalised
        let mb = FocusMeasures.measure(try #require(LumaView(b))).normalised
        #expect(abs(ma.tenengrad / mb.tenengrad - 1) < 0.15)
        // The same picture in YUYV gives the same numbers.
        let fy = FrameFormat(.yuyv, width: 160, height: 120)
        let c = Frame(capacity: fy.maxByteCount, format: fy)
        let la = try #require(LumaView(a))
        fill(c) { x, y in la.pointer(x: x, y: y).pointee }
        let mc = FocusMeasures.measure(try #require(LumaView(c)))
        let raw = FocusMeasures.measure(la)
        #expect(mc == raw)
        // Regions with odd offsets and widths (vector blocks of 16 plus a scalar tail on GREY).
        for rect in [PixelRect(x: 7, y: 5, width: 101, height: 77), PixelRect(x: 1, y: 1, width: 19, height: 3), PixelRect(x: 30, y: 40, width: 130, height: 80)] {
            #expect(FocusMeasures.measure(try #require(LumaView(c)), region: rect) == FocusMeasures.measure(la, region: rect), "\(rect)")
        }
    }

    @Test("the Hann-tapered window: exact on flat and ramps, follows blur, YUYV equals GREY, and an edge moving across the border barely moves it")
    func taperedWindow() throws {
        let f = FrameFormat(.grey, width: 200, height: 160)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        fill(frame) { _, _ in 90 }
        var s = FocusMeasures.measure(try #require(LumaView(frame)), window: .hann)
        #expect(s.laplacianVariance == 0 && s.tenengrad == 0 && abs(s.meanLuma - 90) < 1e-9)
        fill(frame) { x, _ in UInt8(10 + x) }
        s = FocusMeasures.measure(try #require(LumaView(frame)), window: .hann)
        #expect(s.laplacianVariance == 0)
        #expect(abs(s.tenengrad - 64) < 1e-9)
        // A region too small for tiles of 3 samples is one tile: the box window's numbers.
        let small = PixelRect(x: 20, y: 20, width: 5, height: 5)
        fill(frame) { x, y in UInt8((x * 37 + y * y * 11) % 251) }
        let l = try #require(LumaView(frame))
        let hb = FocusMeasures.measure(l, region: small, window: .hann), bb = FocusMeasures.measure(l, region: small)
        #expect(abs(hb.tenengrad - bb.tenengrad) < 1e-9 && abs(hb.laplacianVariance - bb.laplacianVariance) < 1e-6)

        // Blur lowers it; the same picture in YUYV gives the same numbers.
        let tex = TestTexture(width: 240, height: 200)
        var rng = TestRNG(3)
        var last = Double.infinity
        for blur in [0, 1, 2, 4] {
            render(tex, into: frame, blur: blur, rng: &rng)
            let m = FocusMeasures.measure(try #require(LumaView(frame)), window: .hann).normalised
            #expect(m.tenengrad < last)
            last = m.tenengrad
        }
        let fy = FrameFormat(.yuyv, width: 200, height: 160)
        let c = Frame(capacity: fy.maxByteCount, format: fy)
        fill(c) { x, y in l.pointer(x: x, y: y).pointee }
        let rect = PixelRect(x: 31, y: 17, width: 121, height: 97)
        #expect(FocusMeasures.measure(try #require(LumaView(c)), region: rect, window: .hann) == FocusMeasures.measure(l, region: rect, window: .hann))

        // Fine texture in the window and a strong edge near its left border, moved by a few
        // pixels as a shaking camera moves it: the box score swings, the tapered one barely.
        let region = PixelRect(x: 50, y: 30, width: 100, height: 100)
        var box: [Double] = [], hann: [Double] = []
        for d in -4...4 {
            fill(frame) { x, y in
                let t = UInt8(truncatingIfNeeded: (x &* 1103515245 &+ y &* 12345 &+ (x ^ y) &* 2654435761) >> 16)
                return (x < 50 + d ? 200 : 60) &+ t % 24
            }
            let lv = try #require(LumaView(frame))
            box.append(FocusMeasures.measure(lv, region: region).normalised.tenengrad)
            hann.append(FocusMeasures.measure(lv, region: region, window: .hann).normalised.tenengrad)
        }
        // How far the edge raises the score over the texture alone: the border tile weighs
        // sin²(π/16) ≈ 4 % of the centre, so about an eighth of the box window's rise.
        func rise(_ v: [Double]) -> Double { v.max()! / v.min()! - 1 }
        #expect(rise(box) > 3)
        #expect(rise(hann) < rise(box) / 8, "box \(box), hann \(hann)")
    }

    @Test("a region outside or too small gives zero, not a crash")
    func degenerateRegions() throws {
        let f = FrameFormat(.grey, width: 16, height: 16)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        fill(frame) { x, y in UInt8(x * y) }
        let l = try #require(LumaView(frame))
        #expect(FocusMeasures.laplacianVariance(l, region: PixelRect(x: 40, y: 40, width: 10, height: 10)).variance == 0)
        #expect(FocusMeasures.tenengrad(l, region: PixelRect(x: 0, y: 0, width: 2, height: 2)).value == 0)
        let h = LumaHistogram()
        #expect(h.add(l, region: PixelRect(x: -5, y: -5, width: 3, height: 3)) == 0)
    }
}

@Suite("Pyramid")
struct PyramidTests {
    @Test("halving packed 4:2:2 luma equals halving the same luma as GREY", arguments: [PixelFormat.yuyv, .uyvy])
    func packedHalve(_ pf: PixelFormat) throws {
        let g = TexturedFrames.make(FrameFormat(.grey, width: 94, height: 38))
        let lg = try #require(LumaView(g))
        let p = Frame(capacity: FrameFormat(pf, width: 94, height: 38).maxByteCount, format: FrameFormat(pf, width: 94, height: 38))
        fill(p) { x, y in lg.pointer(x: x, y: y).pointee }
        let a = GreyImage(width: 47, height: 19), b = GreyImage(width: 47, height: 19)
        Pyramid.halve(lg, into: a)
        Pyramid.halve(try #require(LumaView(p)), into: b)
        for i in 0..<(47 * 19) { #expect(a.pixels[i] == b.pixels[i]) }
    }
}
