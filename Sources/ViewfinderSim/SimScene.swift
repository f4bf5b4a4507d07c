import Viewfinder
import CTurboJPEG
#if canImport(Glibc)
import Glibc
#endif

/// Errors of the sim camera's scene loading.
public enum SimSceneError: Error, Equatable, CustomStringConvertible {
    case unreadable(path: String, reason: String)
    case undecodable(path: String, reason: String)

    public var description: String {
        switch self {
        case .unreadable(let p, let r): return "sim scene '\(p)': cannot read: \(r)"
        case .undecodable(let p, let r): return "sim scene '\(p)': not a JPEG or binary PPM/PGM image: \(r)"
        }
    }
}

/// An 8-bit sRGB image (interleaved RGB), decoded from a scene file.
struct SimImage: Sendable {
    var width: Int
    var height: Int
    var rgb: [UInt8]

    /// Reads a JPEG (TurboJPEG) or a binary PPM (P6) / PGM (P5) file.
    static func load(path: String) throws -> SimImage {
        // A file, not a fifo (opening one waits for a writer for ever), a directory or a device.
        var st = stat()
        if stat(path, &st) == 0 && (st.st_mode & S_IFMT) != S_IFREG {
            let kind = (st.st_mode & S_IFMT) == S_IFDIR ? "a directory" : (st.st_mode & S_IFMT) == S_IFIFO ? "a fifo" : "not a regular file"
            throw SimSceneError.unreadable(path: path, reason: "\(kind); the scene is an image file")
        }
        guard let fp = fopen(path, "rb") else {
            throw SimSceneError.unreadable(path: path, reason: String(cString: strerror(errno)))
        }
        defer { fclose(fp) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, fp) }
            if n > 0 { bytes.append(contentsOf: chunk[0..<n]) }
            if n < chunk.count { break }
            if bytes.count > 256 << 20 { throw SimSceneError.unreadable(path: path, reason: "larger than 256 MB") }
        }
        if bytes.count >= 3, bytes[0] == 0xFF, bytes[1] == 0xD8 { return try decodeJPEG(bytes, path: path) }
        if bytes.count >= 2, bytes[0] == UInt8(ascii: "P"), bytes[1] == UInt8(ascii: "5") || bytes[1] == UInt8(ascii: "6") {
            return try decodePNM(bytes, path: path)
        }
        throw SimSceneError.undecodable(path: path, reason: "unknown file signature")
    }

    static func decodeJPEG(_ bytes: [UInt8], path: String) throws -> SimImage {
        guard let h = tjInitDecompress() else { throw SimSceneError.undecodable(path: path, reason: "tjInitDecompress failed") }
        defer { tjDestroy(h) }
        var w: Int32 = 0, ht: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
        let ok = bytes.withUnsafeBufferPointer { b in
            tjDecompressHeader3(h, b.baseAddress, UInt(b.count), &w, &ht, &sub, &cs)
        }
        guard ok == 0 else { throw SimSceneError.undecodable(path: path, reason: String(cString: tjGetErrorStr2(h))) }
        // A header that reads but asks for too much (TurboJPEG has no error to tell: "No error").
        guard w > 0, ht > 0, Int(w) * Int(ht) <= 100_000_000 else {
            throw SimSceneError.undecodable(path: path, reason: "\(w)x\(ht) is larger than a scene may be (100 megapixels)")
        }
        var rgb = [UInt8](repeating: 0, count: Int(w) * Int(ht) * 3)
        let r = bytes.withUnsafeBufferPointer { b in
            rgb.withUnsafeMutableBufferPointer { o in
                tjDecompress2(h, b.baseAddress, UInt(b.count), o.baseAddress, w, 0, ht, Int32(TJPF_RGB.rawValue), 0)
            }
        }
        guard r == 0 else { throw SimSceneError.undecodable(path: path, reason: String(cString: tjGetErrorStr2(h))) }
        return SimImage(width: Int(w), height: Int(ht), rgb: rgb)
    }

    static func decodePNM(_ b: [UInt8], path: String) throws -> SimImage {
        var i = 2
        func token() throws -> Int {
            while i < b.count {
                if b[i] == UInt8(ascii: "#") { while i < b.count && b[i] != 10 { i += 1 } }
                else if b[i] == 32 || b[i] == 9 || b[i] == 10 || b[i] == 13 { i += 1 }
                else { break }
            }
            var v = 0, digits = 0
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                // More than 9 digits: no size or maxval this reads (read on, it would be mis-split).
                guard digits < 9 else { throw SimSceneError.undecodable(path: path, reason: "a PNM header number of more than 9 digits") }
                v = v * 10 + Int(b[i] - 48); i += 1; digits += 1
            }
            guard digits > 0 else { throw SimSceneError.undecodable(path: path, reason: "bad PNM header") }
            return v
        }
        let channels = b[1] == UInt8(ascii: "6") ? 3 : 1
        let w = try token(), h = try token(), maxv = try token()
        i += 1 // the single whitespace after maxval
        guard w > 0, h > 0, w * h <= 100_000_000, maxv > 0, maxv < 256 else {
            throw SimSceneError.undecodable(path: path, reason: "unsupported PNM (\(w)x\(h), maxval \(maxv); 8-bit only)")
        }
        guard b.count - i >= w * h * channels else { throw SimSceneError.undecodable(path: path, reason: "truncated PNM data") }
        var rgb = [UInt8](repeating: 0, count: w * h * 3)
        for p in 0..<(w * h) {
            for c in 0..<3 {
                let v = Int(b[i + p * channels + (channels == 3 ? c : 0)])
                rgb[p * 3 + c] = UInt8(min(255, v * 255 / maxv))
            }
        }
        return SimImage(width: w, height: h, rgb: rgb)
    }
}

/// The world the sim camera films: linear radiance (luma) at full resolution and chroma at half
/// resolution, larger than the output so that shake and blur never show a border.
///
/// Radiance is stored as UInt16 with ``midGrey`` (5000) for an 18 % grey card under the reference
/// light; 65535 is 13 x that (speculars and light sources clip there). Chroma is stored as a signed
/// ratio: a pixel of output luma Y gets U = 128 + cu x Y / 255 (likewise V), so colour scales with
/// brightness as it does in gamma-encoded video.
///
/// Immutable after init, so `@unchecked Sendable` is safe: the buffers are only read.
final class SimScene: @unchecked Sendable {
    static let midGrey: Double = 5000

    let width: Int
    let height: Int
    let luma: UnsafeMutablePointer<UInt16>
    let chromaWidth: Int
    let chromaHeight: Int
    /// Chroma relative to luma at half resolution each way, in 1/255 of the luma (Cb·255/Y): the
    /// renderer scales it by the luma it renders. ±2047 holds every sRGB colour (pure blue's Cb is
    /// 4.4 times its luma; an 8-bit store at ±127 halved strong colours: pure red rendered
    /// (130, 63, 7)).
    let cu: UnsafeMutablePointer<Int16>
    let cv: UnsafeMutablePointer<Int16>
    static let chromaLimit: Double = 2047
    /// Mean radiance of the whole scene relative to mid grey.
    private(set) var meanLuminance: Double = 1

    deinit {
        luma.deallocate(); cu.deallocate(); cv.deallocate()
    }

    private init(width: Int, height: Int, fill: (SimScene) -> Void) {
        self.width = width
        self.height = height
        chromaWidth = (width + 1) / 2
        chromaHeight = (height + 1) / 2
        luma = .allocate(capacity: width * height + 64)
        luma.initialize(repeating: 0, count: width * height + 64)
        cu = .allocate(capacity: chromaWidth * chromaHeight + 64)
        cu.initialize(repeating: 0, count: chromaWidth * chromaHeight + 64)
        cv = .allocate(capacity: chromaWidth * chromaHeight + 64)
        cv.initialize(repeating: 0, count: chromaWidth * chromaHeight + 64)
        fill(self)
        opticalLowPass()
        var sum: UInt64 = 0
        for i in 0..<(width * height) { sum &+= UInt64(luma[i]) }
        meanLuminance = Double(sum) / Double(width * height) / SimScene.midGrey
    }

    /// The lens's best-focus MTF and the sensor's anti-aliasing filter: a separable [1 2 1]/4 blur
    /// applied once to the stored radiance. Without it the scene has full energy at the pixel
    /// Nyquist frequency, and any sub-pixel resampling (the shake warp) would change sharpness
    /// from frame to frame far more than a real camera's optics allow, fooling contrast autofocus.
    private func opticalLowPass() {
        let w = width, h = height
        let tmp = UnsafeMutablePointer<UInt32>.allocate(capacity: max(w, h) + 2)
        defer { tmp.deallocate() }
        for y in 0..<h {
            let r = luma + y * w
            for x in 0..<w { tmp[x] = UInt32(r[x]) }
            for x in 1..<(w - 1) { r[x] = UInt16((tmp[x - 1] + 2 * tmp[x] + tmp[x + 1] + 2) / 4) }
        }
        let prev = UnsafeMutablePointer<UInt32>.allocate(capacity: w)
        defer { prev.deallocate() }
        for x in 0..<w { prev[x] = UInt32(luma[x]) }
        for y in 1..<(h - 1) {
            let r = luma + y * w, below = luma + (y + 1) * w
            for x in 0..<w {
                let c = UInt32(r[x])
                r[x] = UInt16((prev[x] + 2 * c + UInt32(below[x]) + 2) / 4)
                prev[x] = c
            }
        }
    }

    // MARK: Image scenes

    /// A scene from an image, scaled to cover `width` x `height` (cropping the longer side).
    static func fromImage(_ img: SimImage, width: Int, height: Int) -> SimScene {
        SimScene(width: width, height: height) { s in
            // sRGB-encoded value to linear, and to radiance (white paper = 1/0.18 mid grey).
            var lin = [Double](repeating: 0, count: 256)
            for i in 0..<256 {
                let c = Double(i) / 255
                lin[i] = c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4)
            }
            let scale = max(Double(width) / Double(img.width), Double(height) / Double(img.height))
            let ox = (Double(img.width) - Double(width) / scale) / 2
            let oy = (Double(img.height) - Double(height) / scale) / 2
            img.rgb.withUnsafeBufferPointer { rgb in
                func sample(_ fx: Double, _ fy: Double, _ c: Int) -> Double {
                    let x = min(max(fx, 0), Double(img.width - 1)), y = min(max(fy, 0), Double(img.height - 1))
                    let x0 = Int(x), y0 = Int(y)
                    let x1 = min(x0 + 1, img.width - 1), y1 = min(y0 + 1, img.height - 1)
                    let ax = x - Double(x0), ay = y - Double(y0)
                    func p(_ xx: Int, _ yy: Int) -> Double { Double(rgb[(yy * img.width + xx) * 3 + c]) }
                    return (p(x0, y0) * (1 - ax) + p(x1, y0) * ax) * (1 - ay) + (p(x0, y1) * (1 - ax) + p(x1, y1) * ax) * ay
                }
                // Each 2x2 block's chroma from its four pixels (centred, as 4:2:0 sites are),
                // relative to their mean luma.
                var sumU = [Double](repeating: 0, count: s.chromaWidth)
                var sumV = [Double](repeating: 0, count: s.chromaWidth)
                var sumY = [Double](repeating: 0, count: s.chromaWidth)
                var count = [Int](repeating: 0, count: s.chromaWidth)
                for y in 0..<height {
                    let fy = oy + (Double(y) + 0.5) / scale - 0.5
                    if y % 2 == 0 {
                        for i in 0..<s.chromaWidth { sumU[i] = 0; sumV[i] = 0; sumY[i] = 0; count[i] = 0 }
                    }
                    for x in 0..<width {
                        let fx = ox + (Double(x) + 0.5) / scale - 0.5
                        let r = sample(fx, fy, 0), g = sample(fx, fy, 1), b = sample(fx, fy, 2)
                        let yy = 0.299 * r + 0.587 * g + 0.114 * b
                        let i0 = min(254, Int(yy)), fr = yy - Double(i0)
                        let l = lin[i0] * (1 - fr) + lin[i0 + 1] * fr
                        s.luma[y * width + x] = UInt16(min(65535, (l / 0.18 * SimScene.midGrey).rounded()))
                        let cx = x / 2
                        sumU[cx] += 0.564 * (b - yy); sumV[cx] += 0.713 * (r - yy); sumY[cx] += yy; count[cx] += 1
                    }
                    if y % 2 == 1 || y == height - 1 {
                        let row = (y / 2) * s.chromaWidth
                        for cx in 0..<s.chromaWidth where count[cx] > 0 {
                            let n = Double(count[cx]), d = max(sumY[cx] / n, 8)
                            s.cu[row + cx] = SimScene.relativeChroma(sumU[cx] / n, luma: d)
                            s.cv[row + cx] = SimScene.relativeChroma(sumV[cx] / n, luma: d)
                        }
                    }
                }
            }
        }
    }

    /// A chroma difference (Cb or Cr, 8-bit scale) relative to a luma, as the scene stores it.
    static func relativeChroma(_ c: Double, luma: Double) -> Int16 {
        Int16(max(-chromaLimit, min(chromaLimit, (c * 255 / luma).rounded())))
    }

    // MARK: The procedural scene

    private struct Key: Equatable { var width: Int; var height: Int; var unit: Double; var seed: UInt64 }
    /// The last few procedural scenes built (immutable, so shared): reopening the sim at the same
    /// size, as tests and sessions do, starts at once instead of re-rendering the scene.
    private static let cache = LockedBox<[(Key, SimScene)]>([])

    /// ``procedural(width:height:unit:seed:)``, shared with earlier cameras of the same geometry.
    static func cachedProcedural(width: Int, height: Int, unit: Double, seed: UInt64) -> SimScene {
        let key = Key(width: width, height: height, unit: unit, seed: seed)
        if let hit = cache.withLock({ c in c.first(where: { $0.0 == key })?.1 }) { return hit }
        let scene = procedural(width: width, height: height, unit: unit, seed: seed)
        cache.withLock { c in
            c.removeAll { $0.0 == key }
            c.insert((key, scene), at: 0)
            if c.count > 3 { c.removeLast(c.count - 3) }
        }
        return scene
    }

    /// A deterministic pseudo-photographic composition: sky with a clipped sun, a horizon of
    /// buildings with windows, textured ground, a deep shadow, a test chart (checkerboard and a
    /// Siemens star) and a textured subject in the centre, all under fractal texture from 128 px
    /// down to 1 px. Coordinates are in units of `unit` pixels (the output height) around the
    /// centre, so the composition frames the same at every size.
    static func procedural(width: Int, height: Int, unit: Double, seed: UInt64) -> SimScene {
        let composition = ProceduralComposition(seed: seed)
        return SimScene(width: width, height: height) { s in
            let cx = Double(width - 1) / 2, cy = Double(height - 1) / 2
            for py in 0..<height {
                let v = (Double(py) - cy) / unit
                for px in 0..<width {
                    let u = (Double(px) - cx) / unit
                    let p = composition.paint(u: u, v: v, px: Double(px), py: Double(py))
                    s.luma[py * width + px] = UInt16(min(65535, max(0, p.level * SimScene.midGrey).rounded()))
                    if py % 2 == 0 && px % 2 == 0 {
                        let c = (py / 2) * s.chromaWidth + px / 2
                        s.cu[c] = Int16(max(-127, min(127, p.cu.rounded())))
                        s.cv[c] = Int16(max(-127, min(127, p.cv.rounded())))
                    }
                }
            }
        }
    }
}

/// The layers of ``SimScene/procedural(width:height:unit:seed:)``, painted back to front at a
/// point (u, v) in units of the picture height around the centre.
private struct ProceduralComposition {
    /// Light level relative to mid grey, and chroma offsets.
    struct Paint { var level: Double; var cu: Double; var cv: Double }
    struct Building { var x0, x1, y0, y1, level: Double; var cu, cv: Double; var windows: Bool }

    let buildings: [Building]
    let noise: ValueNoise
    let sunX = 0.42, sunY = -0.36, sunR = 0.045
    let subjectX = 0.0, subjectY = 0.08, subjectRX = 0.16, subjectRY = 0.22

    init(seed: UInt64) {
        var rng = SplitMix64(seed: seed ^ 0x5CE7E)
        var buildings: [Building] = []
        var x = -1.2
        while x < 1.2 {
            let w = 0.08 + rng.unit() * 0.16
            let h = 0.08 + rng.unit() * 0.3
            buildings.append(Building(x0: x, x1: x + w, y0: -0.08 - h, y1: -0.08, level: 0.25 + rng.unit() * 1.4,
                                      cu: (rng.unit() - 0.5) * 40, cv: (rng.unit() - 0.5) * 50, windows: rng.unit() < 0.7))
            x += w + rng.unit() * 0.04
        }
        self.buildings = buildings
        noise = ValueNoise(seed: seed)
    }

    /// The scene at (u, v); (px, py) is the output pixel, for the texture.
    func paint(u: Double, v: Double, px: Double, py: Double) -> Paint {
        // Fractal texture: octaves from 128 px down to 1 px.
        let t = noise.fbm(px, py)
        var p = v < -0.08 ? sky(u: u, v: v, px: px, py: py) : ground(v: v, texture: t)
        paintBuildings(&p, u: u, v: v, texture: t)
        // A deep shadow in the lower left.
        if u < -0.45 && v > 0.24 { p = Paint(level: 0.04 * (1 + 0.3 * t), cu: 0, cv: 0) }
        paintCharts(&p, u: u, v: v)
        paintSubject(&p, u: u, v: v, texture: t)
        return p
    }

    /// Sky: brighter towards the top, bluish, with soft clouds and the sun with its glare.
    private func sky(u: Double, v: Double, px: Double, py: Double) -> Paint {
        var level = 2.2 + (-0.08 - v) * 3 + 0.8 * max(0, noise.low(px / 3, py / 2))
        let d = ((u - sunX) * (u - sunX) + (v - sunY) * (v - sunY)).squareRoot()
        if d < sunR { level = 20 } else if d < sunR * 2.5 { level += 6 * (sunR * 2.5 - d) / (sunR * 1.5) }
        return Paint(level: level, cu: 28, cv: -14)
    }

    /// Ground: darker towards the bottom, greenish, strongly textured.
    private func ground(v: Double, texture t: Double) -> Paint {
        var level = 0.9 - (v + 0.08) * 0.6
        level *= 1 + 0.45 * t
        return Paint(level: level, cu: -18, cv: -22)
    }

    private func paintBuildings(_ p: inout Paint, u: Double, v: Double, texture t: Double) {
        for b in buildings where u >= b.x0 && u < b.x1 && v >= b.y0 && v < b.y1 {
            p = Paint(level: b.level * (1 + 0.15 * t), cu: b.cu, cv: b.cv)
            if b.windows {
                let wx = (u - b.x0) / 0.02, wy = (v - b.y0) / 0.03
                if wx.truncatingRemainder(dividingBy: 1) > 0.45 && wy.truncatingRemainder(dividingBy: 1) > 0.4 && u - b.x0 > 0.01 && b.x1 - u > 0.01 {
                    p.level = 0.08 + 0.04 * t
                }
            }
        }
    }

    /// A checkerboard chart on the right and a Siemens star on the left, both neutral.
    private func paintCharts(_ p: inout Paint, u: Double, v: Double) {
        if u > 0.38 && u < 0.62 && v > 0.12 && v < 0.36 {
            let cxI = Int(((u - 0.38) / 0.03).rounded(.down)), cyI = Int(((v - 0.12) / 0.03).rounded(.down))
            p = Paint(level: (cxI + cyI) % 2 == 0 ? 0.12 : 2.4, cu: 0, cv: 0)
        }
        let sx = u + 0.5, sy = v - 0.05, sr = (sx * sx + sy * sy).squareRoot()
        if sr < 0.14 {
            let a = atan2(sy, sx)
            p = Paint(level: sin(a * 18) > 0 ? 2.0 : 0.1, cu: 0, cv: 0)
            if sr < 0.004 { p.level = 1 }
        }
    }

    /// The subject: a textured ellipse with two dark eyes and a mouth, and a dark outline.
    private func paintSubject(_ p: inout Paint, u: Double, v: Double, texture t: Double) {
        let ex = (u - subjectX) / subjectRX, ey = (v - subjectY) / subjectRY
        let er = ex * ex + ey * ey
        if er < 1 {
            p = Paint(level: 1.3 * (1 - 0.25 * er) * (1 + 0.3 * t), cu: -12, cv: 26)
            let e1 = (u + 0.055) * (u + 0.055) + (v + 0.0) * (v + 0.0)
            let e2 = (u - 0.055) * (u - 0.055) + (v + 0.0) * (v + 0.0)
            if e1 < 0.0006 || e2 < 0.0006 { p = Paint(level: 0.05, cu: 0, cv: 0) }
            if abs(v - 0.12) < 0.006 && abs(u) < 0.06 { p.level = 0.3; p.cv = 50 }
        } else if er < 1.06 {
            p.level = 0.06
        }
    }
}

/// A small deterministic generator (SplitMix64).
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    mutating func unit() -> Double { Double(next() >> 11) * (1.0 / 9_007_199_254_740_992.0) }
    /// Standard normal (Box–Muller).
    mutating func gaussian() -> Double {
        let u1 = max(unit(), 1e-300), u2 = unit()
        return (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
    }
}

/// Value noise on hashed lattices: `fbm` sums octaves with cell sizes 128, 64, ..., 1 pixels.
struct ValueNoise {
    let seed: UInt64
    init(seed: UInt64) { self.seed = seed }

    @inline(__always) func hash(_ x: Int, _ y: Int, _ o: Int) -> Double {
        var h = UInt64(bitPattern: Int64(x)) &* 0x9E37_79B9_7F4A_7C15 ^ UInt64(bitPattern: Int64(y)) &* 0xC2B2_AE3D_27D4_EB4F ^ UInt64(o) &* 0x1656_67B1_9E37_79F9 ^ seed
        h ^= h >> 29; h = h &* 0xBF58_476D_1CE4_E5B9; h ^= h >> 32
        return Double(h >> 11) * (2.0 / 9_007_199_254_740_992.0) - 1
    }

    @inline(__always) func octave(_ x: Double, _ y: Double, cell: Double, _ o: Int) -> Double {
        let fx = x / cell, fy = y / cell
        let x0 = Int(fx.rounded(.down)), y0 = Int(fy.rounded(.down))
        var ax = fx - Double(x0), ay = fy - Double(y0)
        ax = ax * ax * (3 - 2 * ax); ay = ay * ay * (3 - 2 * ay)
        let a = hash(x0, y0, o), b = hash(x0 + 1, y0, o), c = hash(x0, y0 + 1, o), d = hash(x0 + 1, y0 + 1, o)
        return (a + (b - a) * ax) * (1 - ay) + (c + (d - c) * ax) * ay
    }

    /// Texture in about [-1, 1] with energy at every scale from 128 px to 1 px.
    func fbm(_ x: Double, _ y: Double) -> Double {
        var sum = 0.0, amp = 0.5, cell = 128.0, o = 0
        while cell >= 1 {
            sum += amp * (cell == 1 ? hash(Int(x), Int(y), o) : octave(x, y, cell: cell, o))
            amp *= 0.8; cell /= 2; o += 1
        }
        return sum * 0.5
    }

    /// Large, soft structure (clouds).
    func low(_ x: Double, _ y: Double) -> Double {
        0.6 * octave(x, y, cell: 97, 20) + 0.4 * octave(x, y, cell: 41, 21)
    }
}
