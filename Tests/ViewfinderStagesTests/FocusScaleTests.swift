import Testing
import Viewfinder
@testable import ViewfinderStages

/// The half-resolution focus measure (`FocusOptions.scale` 2): a picture shifted by half a pixel
/// and resampled (what a shaking camera's frames are to each other in the sim) changes the
/// full-resolution Tenengrad by 13 % — interpolation is a low-pass filter whose strength depends on
/// the sub-pixel phase, strong around half the Nyquist frequency where the Sobel operator looks —
/// and the half-resolution one, working an octave lower, by 2 %; a 3×3 blur (the lens) drops them
/// by 67 % and 35 %: the blur stands 17 times above the shift's change instead of 5 times.
@Suite("Focus measure at half resolution")
struct FocusScaleTests {
    static let w = 400, h = 300

    /// Detail down to the pixel: seeded white noise smoothed once by [1 2 1]⊗[1 2 1].
    static func picture(seed: UInt64) -> [Float] {
        var rng = TestRNG(seed)
        var raw = [Float](repeating: 0, count: w * h)
        for i in raw.indices { raw[i] = Float(rng.uniform()) }
        var out = raw
        for y in 1..<(h - 1) {
            for x in 1..<(w - 1) {
                var s: Float = 0
                for (dy, wy) in [(-1, 1), (0, 2), (1, 1)] as [(Int, Float)] {
                    for (dx, wx) in [(-1, 1), (0, 2), (1, 1)] as [(Int, Float)] { s += wy * wx * raw[(y + dy) * w + x + dx] }
                }
                out[y * w + x] = s / 16
            }
        }
        return out
    }

    /// Catmull-Rom weights for a fraction t (taps at −1, 0, +1, +2), the sim camera's interpolation.
    static func catmullRom(_ t: Float) -> (Float, Float, Float, Float) {
        let t2 = t * t, t3 = t2 * t
        return ((-t3 + 2 * t2 - t) / 2, (3 * t3 - 5 * t2 + 2) / 2, (-3 * t3 + 4 * t2 + t) / 2, (t3 - t2) / 2)
    }

    /// The picture moved by (dx, dy), 0 ≤ dx, dy < 1, resampled by Catmull-Rom as the sim camera
    /// resamples its shaken frames, optionally box-blurred, as 8-bit luma.
    static func view(_ p: [Float], dx: Double, dy: Double, blur: Int = 0) -> [UInt8] {
        let (a0, a1, a2, a3) = catmullRom(Float(dx)), (b0, b1, b2, b3) = catmullRom(Float(dy))
        var rows = p
        for y in 0..<h {
            for x in 1..<(w - 2) {
                let r = y * w + x
                rows[r] = a0 * p[r - 1] + a1 * p[r] + a2 * p[r + 1] + a3 * p[r + 2]
            }
        }
        var lin = rows
        for y in 1..<(h - 2) {
            for x in 0..<w {
                let r = y * w + x
                lin[r] = b0 * rows[r - w] + b1 * rows[r] + b2 * rows[r + w] + b3 * rows[r + 2 * w]
            }
        }
        if blur > 0 { boxBlur(&lin, w, h, blur) }
        return lin.map { UInt8(max(0, min(255, (40 + 180 * $0).rounded()))) }
    }

    /// Tenengrad of the region (the stage's measure and window), at full or half resolution.
    static func tenengrad(_ pixels: [UInt8], half: Bool) -> Double {
        let region = PixelRect(x: 60, y: 50, width: 280, height: 200)
        return pixels.withUnsafeBufferPointer { buf in
            let luma = LumaView(base: buf.baseAddress!, width: w, height: h, bytesPerRow: w)
            guard half else { return FocusMeasures.measure(luma, region: region, window: .hann).tenengrad }
            let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: w * h)
            defer { scratch.deallocate() }
            let v = FocusMeasures.halfResolution(luma, region: region, into: scratch, capacity: w * h)!
            #expect(v.width == 139 && v.height == 99)
            return FocusMeasures.measure(v, region: nil, window: .hann).tenengrad
        }
    }

    @Test("a sub-pixel shift barely moves the half-resolution score; a blur moves it")
    func shiftAgainstBlur() {
        for seed in [1, 2, 3] as [UInt64] {
            let p = Self.picture(seed: seed)
            let still = Self.view(p, dx: 0, dy: 0), moved = Self.view(p, dx: 0.5, dy: 0.5), blurred = Self.view(p, dx: 0, dy: 0, blur: 1)
            var change: [Bool: Double] = [:], blurDrop: [Bool: Double] = [:]
            for half in [false, true] {
                let t0 = Self.tenengrad(still, half: half)
                change[half] = abs(Self.tenengrad(moved, half: half) - t0) / t0
                blurDrop[half] = 1 - Self.tenengrad(blurred, half: half) / t0
            }
            print("seed \(seed): half-pixel shift changes the score by \(change[false]!) (full), \(change[true]!) (half); a 3x3 box blur drops it by \(blurDrop[false]!), \(blurDrop[true]!)")
            // The shift moves the full-resolution score far more than the half-resolution one...
            #expect(change[true]! * 4 < change[false]!, "seed \(seed)")
            // ...and the half-resolution score still falls with the blur, by many times the shift's change.
            #expect(blurDrop[true]! > 10 * change[true]!, "seed \(seed)")
        }
    }

    @Test("a region too small for a half-resolution copy is measured at full resolution")
    func smallRegion() {
        let p = Self.view(Self.picture(seed: 4), dx: 0, dy: 0)
        p.withUnsafeBufferPointer { buf in
            let luma = LumaView(base: buf.baseAddress!, width: Self.w, height: Self.h, bytesPerRow: Self.w)
            let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: Self.w * Self.h)
            defer { scratch.deallocate() }
            #expect(FocusMeasures.halfResolution(luma, region: PixelRect(x: 0, y: 0, width: 97, height: 200), into: scratch, capacity: Self.w * Self.h) == nil)
            #expect(FocusMeasures.halfResolution(luma, region: PixelRect(x: 0, y: 0, width: 98, height: 66), into: scratch, capacity: Self.w * Self.h) != nil)
            // Nor into a buffer too small for it.
            #expect(FocusMeasures.halfResolution(luma, region: nil, into: scratch, capacity: 100) == nil)
        }
    }

    /// A soft, low-contrast subject (a sky of clouds): detail of a few grey levels under sensor
    /// noise. The score's frame-to-frame noise with the lens still is averaged down by the
    /// window's samples, while the drop a small defocus brings is a property of the picture, so a
    /// larger window stands further above its noise. The default window (half the width and
    /// height) must stand clearly further than a 0.3 one: on the sim's Storm that is what ends
    /// every autofocus run within 2 % of the range (signal over noise 8.2 against 3.4).
    @Test("the default window's score stands further above sensor noise than a 0.3 window's on a soft subject")
    func defaultWindowAgainstNoise() {
        let sharp = Self.picture(seed: 5)
        var soft = sharp
        boxBlur(&soft, Self.w, Self.h, 1)
        // One fine step out of focus: a tenth of the way to a 3×3 blur.
        for i in sharp.indices { soft[i] = 0.9 * sharp[i] + 0.1 * soft[i] }
        var rng = TestRNG(99)
        func frame(_ f: [Float]) -> [UInt8] {
            f.map { UInt8(max(0, min(255, (100 + 30 * $0 + Float(2 * rng.gaussian())).rounded()))) }
        }
        func score(_ pixels: [UInt8], size: Double) -> Double {
            pixels.withUnsafeBufferPointer { buf in
                let luma = LumaView(base: buf.baseAddress!, width: Self.w, height: Self.h, bytesPerRow: Self.w)
                let region = PixelRect.around(.center, fraction: size, width: Self.w, height: Self.h)
                let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: Self.w * Self.h)
                defer { scratch.deallocate() }
                let v = FocusMeasures.halfResolution(luma, region: region, into: scratch, capacity: Self.w * Self.h)!
                return FocusMeasures.measure(v, region: nil, window: .hann).tenengrad
            }
        }
        let frames = 16
        let inFocus = (0..<frames).map { _ in frame(sharp) }, outOfFocus = (0..<frames).map { _ in frame(soft) }
        var ratio: [Double: Double] = [:]
        for size in [0.3, FocusOptions().size] {
            let a = inFocus.map { score($0, size: size) }, b = outOfFocus.map { score($0, size: size) }
            let mean = a.reduce(0, +) / Double(frames)
            let sd = (a.map { ($0 - mean) * ($0 - mean) }.reduce(0, +) / Double(frames - 1)).squareRoot()
            let drop = mean - b.reduce(0, +) / Double(frames)
            ratio[size] = drop / sd
            print("window \(size): score \(mean), noise \(sd / mean * 100) %, one step out \(drop / mean * 100) % lower, signal over noise \(drop / sd)")
            #expect(drop > 0, "window \(size): the defocused frames score lower")
        }
        #expect(FocusOptions().size > 0.3)
        #expect(ratio[FocusOptions().size]! > 1.3 * ratio[0.3]!)
    }
}
