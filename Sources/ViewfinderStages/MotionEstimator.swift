import Viewfinder

/// An 8-bit single-channel image in memory the estimator owns.
public final class GreyImage {
    public let width: Int
    public let height: Int
    public let pixels: UnsafeMutablePointer<UInt8>

    public init(width: Int, height: Int) {
        self.width = max(1, width)
        self.height = max(1, height)
        pixels = .allocate(capacity: self.width * self.height)
        pixels.initialize(repeating: 0, count: self.width * self.height)
    }
    deinit { pixels.deallocate() }

    @inline(__always) subscript(x: Int, y: Int) -> UInt8 { pixels[y &* width &+ x] }

    /// Bilinear sample at (x, y); the caller keeps (x, y) inside `[0, w-1) × [0, h-1)`.
    @inline(__always)
    func sample(_ x: Float, _ y: Float) -> Float {
        let ix = Int(x), iy = Int(y)
        let fx = x - Float(ix), fy = y - Float(iy)
        let p = pixels + (iy &* width &+ ix)
        let a = Float(p[0]), b = Float(p[1]), c = Float(p[width]), d = Float(p[width &+ 1])
        let top = a + (b - a) * fx
        let bot = c + (d - c) * fx
        return top + (bot - top) * fy
    }
}

/// Image pyramid kernels.
public enum Pyramid {
    /// Halves `luma` into `out` by 2×2 box averaging (`out` must be at least width/2 × height/2).
    public static func halve(_ luma: LumaView, into out: GreyImage) {
        switch luma.pixelStride {
        case 1: halve(luma, out, stride: 1)
        case 2: halvePacked(luma, out)
        default: halve(luma, out, stride: luma.pixelStride)
        }
    }

    /// Packed 4:2:2: the two luma samples of a pixel pair are bytes 0 and 2 of one 32-bit word, so
    /// the loop reads whole words (contiguous, vectorisable) instead of every other byte.
    static func halvePacked(_ luma: LumaView, _ out: GreyImage) {
        let w = min(out.width, luma.width / 2), h = min(out.height, luma.height / 2)
        guard w > 1 else { halve(luma, out, stride: 2); return }
        for y in 0..<h {
            let r0 = UnsafeRawPointer(luma.pointer(x: 0, y: 2 &* y))
            let r1 = r0 + luma.bytesPerRow
            let o = out.pixels + y &* out.width
            // All but the last pair: a word never reads past the pair's own bytes plus one.
            for x in 0..<(w - 1) {
                let a = r0.loadUnaligned(fromByteOffset: x &* 4, as: UInt32.self)
                let b = r1.loadUnaligned(fromByteOffset: x &* 4, as: UInt32.self)
                let v = (a & 0xFF) &+ ((a &>> 16) & 0xFF) &+ (b & 0xFF) &+ ((b &>> 16) & 0xFF) &+ 2
                o[x] = UInt8(truncatingIfNeeded: v &>> 2)
            }
            let k = (w - 1) &* 4
            let p0 = r0.assumingMemoryBound(to: UInt8.self), p1 = r1.assumingMemoryBound(to: UInt8.self)
            let v = UInt16(p0[k]) &+ UInt16(p0[k &+ 2]) &+ UInt16(p1[k]) &+ UInt16(p1[k &+ 2]) &+ 2
            o[w - 1] = UInt8(truncatingIfNeeded: v &>> 2)
        }
    }

    @inline(__always)
    static func halve(_ luma: LumaView, _ out: GreyImage, stride s: Int) {
        let w = min(out.width, luma.width / 2), h = min(out.height, luma.height / 2)
        for y in 0..<h {
            let r0 = luma.pointer(x: 0, y: 2 &* y)
            let r1 = r0 + luma.bytesPerRow
            let o = out.pixels + y &* out.width
            for x in 0..<w {
                let k = x &* (2 &* s)
                let v = UInt16(r0[k]) &+ UInt16(r0[k &+ s]) &+ UInt16(r1[k]) &+ UInt16(r1[k &+ s]) &+ 2
                o[x] = UInt8(truncatingIfNeeded: v &>> 2)
            }
        }
    }

    /// Halves a grey image.
    public static func halve(_ image: GreyImage, into out: GreyImage) {
        halve(LumaView(base: UnsafePointer(image.pixels), width: image.width, height: image.height, bytesPerRow: image.width), out, stride: 1)
    }
}

/// Global motion between two frames: translation, rotation and scale about the picture centre.
/// Conventions as ``SimulationTruth``: positive dx/dy move the content right/down, a positive
/// angle turns it counter-clockwise as seen.
///
/// Luma is reduced to a pyramid (1/2, 1/4, 1/8). A grid of blocks is matched by SAD search at
/// 1/8 for a robust coarse shift (the median over blocks), refined per block by Lucas–Kanade at 1/4
/// and 1/2 resolution; blocks without texture in two directions are skipped. A similarity
/// (translation, rotation, scale) is fitted to the block displacements by least squares, outliers
/// are rejected and the fit repeated. Everything is preallocated when the size is known.
public final class MotionEstimator {
    public let width: Int
    public let height: Int
    /// Pyramid levels of the previous and the current frame: 1/2, 1/4, 1/8.
    private var prev: [GreyImage]
    private var cur: [GreyImage]
    private var hasPrevious = false
    /// Block centres at 1/2 resolution.
    private var centres: [(x: Int, y: Int)] = []
    private var disp: [(dx: Double, dy: Double, w: Double, ok: Bool)] = []
    private var sadX: [Int] = []
    private var sadY: [Int] = []
    private var res: [Double] = []
    /// Half-size of an LK block at 1/2 resolution (so 2*half+1 pixels square).
    let half2 = 12
    let sadHalf = 6
    let sadRange = 7

    private let blocksX: Int

    public init(width: Int, height: Int, blocksX: Int = 8, blocksY: Int = 6) {
        self.blocksX = max(1, blocksX)
        self.width = width
        self.height = height
        let w2 = width / 2, h2 = height / 2
        prev = [GreyImage(width: w2, height: h2), GreyImage(width: w2 / 2, height: h2 / 2), GreyImage(width: w2 / 4, height: h2 / 4)]
        cur = [GreyImage(width: w2, height: h2), GreyImage(width: w2 / 2, height: h2 / 2), GreyImage(width: w2 / 4, height: h2 / 4)]
        // Block centres on a grid over the central 84 % of the picture, at 1/2 resolution.
        let mx = Double(w2) * 0.08 + Double(half2 + 8), my = Double(h2) * 0.08 + Double(half2 + 8)
        for j in 0..<blocksY {
            for i in 0..<blocksX {
                let x = mx + (Double(w2) - 2 * mx) * (Double(i) + 0.5) / Double(blocksX)
                let y = my + (Double(h2) - 2 * my) * (Double(j) + 0.5) / Double(blocksY)
                centres.append((Int(x), Int(y)))
            }
        }
        disp = Array(repeating: (0, 0, 0, false), count: centres.count)
        sadX = Array(repeating: 0, count: centres.count)
        sadY = Array(repeating: 0, count: centres.count)
        res.reserveCapacity(centres.count)
    }

    /// Forgets the previous frame (the next estimate is zero motion).
    public func reset() { hasPrevious = false }

    /// Motion from the previous frame given to this estimator to `luma` (content displacement:
    /// positive dx means the picture content moved right), about the picture centre.
    public func estimate(_ luma: LumaView) -> MotionEstimate {
        swap(&prev, &cur)
        Pyramid.halve(luma, into: cur[0])
        Pyramid.halve(cur[0], into: cur[1])
        Pyramid.halve(cur[1], into: cur[2])
        defer {
            hasPrevious = true
            savePatches(luma)
        }
        guard hasPrevious else { return MotionEstimate(confidence: 0) }
        return match(luma)
    }

    /// Half-size of the full-resolution refinement patches.
    let half0 = 16
    /// Full-resolution patches of the previous frame around each block centre (with a 1-pixel
    /// border for gradients), for the final sub-pixel refinement.
    private lazy var patches = UnsafeMutablePointer<UInt8>.allocate(capacity: centres.count * patchSide * patchSide)
    private var patchSide: Int { 2 * half0 + 3 }
    private var patchValid: [Bool] = []

    deinit { patches.deallocate() }

    private func savePatches(_ luma: LumaView) {
        if patchValid.count != centres.count { patchValid = Array(repeating: false, count: centres.count) }
        let side = patchSide, r = half0 + 1
        for (i, c) in centres.enumerated() {
            let x = c.x * 2, y = c.y * 2
            guard x - r >= 0, y - r >= 0, x + r < luma.width, y + r < luma.height else { patchValid[i] = false; continue }
            let dst = patches + i * side * side
            for j in 0..<side {
                let src = luma.pointer(x: x - r, y: y - r + j)
                let row = dst + j * side
                for k in 0..<side { row[k] = src[k &* luma.pixelStride] }
            }
            patchValid[i] = true
        }
    }

    /// Lucas–Kanade at full resolution: the previous frame's patch `i` against `luma` from (dx, dy).
    private func refine(_ i: Int, _ luma: LumaView, dx: Double, dy: Double) -> (dx: Double, dy: Double, w: Double)? {
        guard i < patchValid.count, patchValid[i] else { return nil }
        let side = patchSide, h = half0
        let t = patches + i * side * side
        let cx = centres[i].x * 2, cy = centres[i].y * 2
        var gxx: Float = 0, gxy: Float = 0, gyy: Float = 0
        for j in 1...(2 * h + 1) {
            let row = t + j * side
            for k in 1...(2 * h + 1) {
                let gx = (Float(row[k + 1]) - Float(row[k - 1])) * 0.5
                let gy = (Float(row[k + side]) - Float(row[k - side])) * 0.5
                gxx += gx * gx; gxy += gx * gy; gyy += gy * gy
            }
        }
        let det = gxx * gyy - gxy * gxy
        guard det > 1e-6 else { return nil }
        var ux = Float(dx), uy = Float(dy)
        let s = luma.pixelStride, bpr = luma.bytesPerRow
        for _ in 0..<2 {
            let sx0 = Float(cx - h) + ux, sy0 = Float(cy - h) + uy
            guard sx0 >= 0, sy0 >= 0, sx0 + Float(2 * h + 2) < Float(luma.width - 1), sy0 + Float(2 * h + 2) < Float(luma.height - 1) else { return nil }
            let ix = Int(sx0), iy = Int(sy0)
            let fx = sx0 - Float(ix), fy = sy0 - Float(iy)
            var bx: Float = 0, by: Float = 0
            for j in 0...(2 * h) {
                let row = t + (j + 1) * side
                let p = luma.pointer(x: ix, y: iy + j)
                for k in 0...(2 * h) {
                    let q = p + k &* s
                    let a = Float(q[0]), b = Float(q[s]), c = Float(q[bpr]), d = Float(q[bpr &+ s])
                    let top = a + (b - a) * fx
                    let v = top + ((c + (d - c) * fx) - top) * fy
                    let gx = (Float(row[k + 2]) - Float(row[k])) * 0.5
                    let gy = (Float(row[k + 1 + side]) - Float(row[k + 1 - side])) * 0.5
                    let e = Float(row[k + 1]) - v
                    bx += gx * e; by += gy * e
                }
            }
            let du = (gyy * bx - gxy * by) / det
            let dv = (gxx * by - gxy * bx) / det
            ux += du; uy += dv
            if du * du + dv * dv < 1e-4 { break }
        }
        return (Double(ux), Double(uy), 0)
    }

    private func match(_ luma: LumaView) -> MotionEstimate {
        // 1. Coarse: SAD search at 1/8 per block, median shift.
        let p8 = prev[2], c8 = cur[2]
        var n = 0
        // Every other block in each direction is enough for a robust median (a quarter of the cost).
        for (idx, c) in centres.enumerated() where (idx % blocksX) % 2 == 0 && (idx / blocksX) % 2 == 0 {
            let x = c.x / 4, y = c.y / 4
            let r = sadHalf + sadRange + 1
            guard x - r >= 0, y - r >= 0, x + r < p8.width, y + r < p8.height else { continue }
            var best = Int.max, bx = 0, by = 0
            for dy in -sadRange...sadRange {
                for dx in -sadRange...sadRange {
                    let s = sad(p8, c8, x, y, dx, dy, sadHalf)
                    if s < best || (s == best && abs(dx) + abs(dy) < abs(bx) + abs(by)) { best = s; bx = dx; by = dy }
                }
            }
            sadX[n] = bx; sadY[n] = by; n += 1
        }
        var gx = 0.0, gy = 0.0
        if n > 0 {
            gx = Double(median(&sadX, n)) * 4
            gy = Double(median(&sadY, n)) * 4
        }
        // 2. Per block: LK at 1/4 from the coarse shift, then at 1/2.
        for (i, c) in centres.enumerated() {
            var dx = gx / 2, dy = gy / 2 // at 1/4 resolution
            var ok = true
            var w = 0.0
            if let r = lk(prev[1], cur[1], c.x / 2, c.y / 2, half: half2 / 2, dx: dx, dy: dy, iterations: 3) {
                dx = r.dx; dy = r.dy
            }
            if let r = lk(prev[0], cur[0], c.x, c.y, half: half2, dx: dx * 2, dy: dy * 2, iterations: 3) {
                dx = r.dx; dy = r.dy; w = r.w
            } else { ok = false }
            if ok, let r = refine(i, luma, dx: dx * 2, dy: dy * 2), abs(r.dx - dx * 2) < 2, abs(r.dy - dy * 2) < 2 {
                disp[i] = (r.dx, r.dy, w, ok)
            } else {
                disp[i] = (dx * 2, dy * 2, w, ok)
            }
        }
        // 3. Similarity fit with outlier rejection.
        let cx = Double(width) / 2, cy = Double(height) / 2
        var fit = fitSimilarity(cx: cx, cy: cy)
        for _ in 0..<2 {
            guard let f = fit else { break }
            res.removeAll(keepingCapacity: true)
            for (i, c) in centres.enumerated() where disp[i].ok {
                res.append(residual(f, i, c, cx, cy))
            }
            guard !res.isEmpty else { break }
            res.sort()
            let med = res[res.count / 2]
            let limit = max(0.6, 3 * med)
            var changed = false
            for (i, c) in centres.enumerated() where disp[i].ok && residual(f, i, c, cx, cy) > limit {
                disp[i].ok = false; changed = true
            }
            if !changed { break }
            fit = fitSimilarity(cx: cx, cy: cy)
        }
        guard let f = fit else {
            return MotionEstimate(dx: gx, dy: gy, confidence: n > 0 ? 0.2 : 0)
        }
        let inliers = disp.reduce(0) { $0 + ($1.ok ? 1 : 0) }
        return MotionEstimate(dx: f.tx, dy: f.ty, angle: -f.theta, scale: 1 + f.k, confidence: Double(inliers) / Double(max(1, centres.count)))
    }

    private func residual(_ f: (tx: Double, ty: Double, theta: Double, k: Double), _ i: Int, _ c: (x: Int, y: Int), _ cx: Double, _ cy: Double) -> Double {
        let px = Double(c.x * 2) - cx, py = Double(c.y * 2) - cy
        let ex = f.tx - f.theta * py + f.k * px - disp[i].dx
        let ey = f.ty + f.theta * px + f.k * py - disp[i].dy
        return (ex * ex + ey * ey).squareRoot()
    }

    /// Weighted least squares for dx = tx − θ·py + k·px, dy = ty + θ·px + k·py.
    private func fitSimilarity(cx: Double, cy: Double) -> (tx: Double, ty: Double, theta: Double, k: Double)? {
        var sw = 0.0, spx = 0.0, spy = 0.0, sdx = 0.0, sdy = 0.0
        var count = 0
        for (i, c) in centres.enumerated() where disp[i].ok {
            let w = disp[i].w
            sw += w; spx += w * Double(c.x * 2); spy += w * Double(c.y * 2)
            sdx += w * disp[i].dx; sdy += w * disp[i].dy
            count += 1
        }
        guard count >= 2, sw > 0 else { return nil }
        let mx = spx / sw, my = spy / sw, mdx = sdx / sw, mdy = sdy / sw
        // With centred points the rotation/scale part decouples from the translation.
        var sr = 0.0, st = 0.0, ss = 0.0
        for (i, c) in centres.enumerated() where disp[i].ok {
            let w = disp[i].w
            let px = Double(c.x * 2) - mx, py = Double(c.y * 2) - my
            let dx = disp[i].dx - mdx, dy = disp[i].dy - mdy
            ss += w * (px * px + py * py)
            st += w * (px * dy - py * dx)
            sr += w * (px * dx + py * dy)
        }
        guard ss > 0 else { return (mdx, mdy, 0, 0) }
        let theta = count >= 3 ? st / ss : 0
        let k = count >= 3 ? sr / ss : 0
        // Translation at the picture centre.
        let ox = mx - cx, oy = my - cy
        let tx = mdx - (-theta * oy + k * ox)
        let ty = mdy - (theta * ox + k * oy)
        return (tx, ty, theta, k)
    }

    @inline(__always)
    private func sad(_ a: GreyImage, _ b: GreyImage, _ x: Int, _ y: Int, _ dx: Int, _ dy: Int, _ h: Int) -> Int {
        var s: Int32 = 0
        let w = a.width
        for j in -h...h {
            let pa = a.pixels + ((y &+ j) &* w &+ x &- h)
            let pb = b.pixels + ((y &+ j &+ dy) &* w &+ x &+ dx &- h)
            for i in 0..<(2 &* h &+ 1) {
                let d = Int32(pa[i]) &- Int32(pb[i])
                s &+= d < 0 ? 0 &- d : d
            }
        }
        return Int(s)
    }

    /// Lucas–Kanade translation of the block of half-size `half` at (x, y) in `a`, found in `b`
    /// starting from (dx, dy). Nil when the block lacks texture or leaves the picture.
    private func lk(_ a: GreyImage, _ b: GreyImage, _ x: Int, _ y: Int, half: Int, dx: Double, dy: Double, iterations: Int) -> (dx: Double, dy: Double, w: Double)? {
        guard x - half - 1 >= 0, y - half - 1 >= 0, x + half + 1 < a.width, y + half + 1 < a.height else { return nil }
        var gxx: Float = 0, gxy: Float = 0, gyy: Float = 0
        let w = a.width
        for j in -half...half {
            let row = a.pixels + ((y &+ j) &* w &+ x)
            for i in -half...half {
                let gx = (Float(row[i &+ 1]) - Float(row[i &- 1])) * 0.5
                let gy = (Float(row[i &+ w]) - Float(row[i &- w])) * 0.5
                gxx += gx * gx; gxy += gx * gy; gyy += gy * gy
            }
        }
        let det = gxx * gyy - gxy * gxy
        let tr = gxx + gyy
        let minEig = 0.5 * (tr - (max(0, tr * tr - 4 * det)).squareRoot())
        let npx = Float((2 * half + 1) * (2 * half + 1))
        guard det > 1e-6, minEig / npx > 1.0 else { return nil }
        var ux = Float(dx), uy = Float(dy)
        for _ in 0..<iterations {
            let sx = Float(x) + ux, sy = Float(y) + uy
            guard sx - Float(half) >= 1, sy - Float(half) >= 1, sx + Float(half) < Float(b.width - 2), sy + Float(half) < Float(b.height - 2) else { return nil }
            var bx: Float = 0, by: Float = 0
            for j in -half...half {
                let row = a.pixels + ((y &+ j) &* w &+ x)
                let yy = sy + Float(j)
                for i in -half...half {
                    let gx = (Float(row[i &+ 1]) - Float(row[i &- 1])) * 0.5
                    let gy = (Float(row[i &+ w]) - Float(row[i &- w])) * 0.5
                    let e = Float(row[i]) - b.sample(sx + Float(i), yy)
                    bx += gx * e; by += gy * e
                }
            }
            let du = (gyy * bx - gxy * by) / det
            let dv = (gxx * by - gxy * bx) / det
            ux += du; uy += dv
            if du * du + dv * dv < 1e-4 { break }
        }
        return (Double(ux), Double(uy), Double(minEig / npx))
    }

    private func median(_ a: inout [Int], _ n: Int) -> Int {
        // Small n: insertion sort of the first n entries.
        if n <= 1 { return a[0] }
        for i in 1..<n {
            let v = a[i]; var j = i - 1
            while j >= 0 && a[j] > v { a[j + 1] = a[j]; j -= 1 }
            a[j + 1] = v
        }
        return a[n / 2]
    }
}
