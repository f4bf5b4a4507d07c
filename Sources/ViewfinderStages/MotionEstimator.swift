import CViewfinderKernels
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
}

/// Image pyramid kernels.
public enum Pyramid {
    /// Halves `luma` into `out` by 2×2 box averaging (`out` must be at least width/2 × height/2).
    public static func halve(_ luma: LumaView, into out: GreyImage) {
        switch luma.pixelStride {
        case 1: halvePlanar(luma, out)
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

    /// Planar luma: 16 bytes of each of two rows are eight 16-bit lanes holding a pixel pair each,
    /// so a pair's sum is (lane & 0xFF) + (lane >> 8) — plain 128-bit vector operations, no
    /// deinterleaving shuffle (which the baseline x86-64 vector unit lacks).
    static func halvePlanar(_ luma: LumaView, _ out: GreyImage) {
        let w = min(out.width, luma.width / 2), h = min(out.height, luma.height / 2)
        let blocks = w / 8
        for y in 0..<h {
            let r0 = UnsafeRawPointer(luma.pointer(x: 0, y: 2 &* y))
            let r1 = r0 + luma.bytesPerRow
            let o = UnsafeMutableRawPointer(out.pixels + y &* out.width)
            for b in 0..<blocks {
                let a = r0.loadUnaligned(fromByteOffset: b &* 16, as: SIMD8<UInt16>.self)
                let c = r1.loadUnaligned(fromByteOffset: b &* 16, as: SIMD8<UInt16>.self)
                let sum = (a & 0xFF) &+ (a &>> 8) &+ (c & 0xFF) &+ (c &>> 8) &+ 2
                o.storeBytes(of: SIMD8<UInt8>(truncatingIfNeeded: sum &>> 2), toByteOffset: b &* 8, as: SIMD8<UInt8>.self)
            }
            let p0 = r0.assumingMemoryBound(to: UInt8.self), p1 = r1.assumingMemoryBound(to: UInt8.self)
            for x in (blocks &* 8)..<w {
                let v = UInt16(p0[2 &* x]) &+ UInt16(p0[2 &* x &+ 1]) &+ UInt16(p1[2 &* x]) &+ UInt16(p1[2 &* x &+ 1]) &+ 2
                o.storeBytes(of: UInt8(truncatingIfNeeded: v &>> 2), toByteOffset: x, as: UInt8.self)
            }
        }
    }

    /// Halves a grey image.
    public static func halve(_ image: GreyImage, into out: GreyImage) {
        halvePlanar(LumaView(base: UnsafePointer(image.pixels), width: image.width, height: image.height, bytesPerRow: image.width), out)
    }
}

/// Global motion between two frames: translation, rotation and scale about the picture centre.
/// Conventions as `SimulationTruth`: positive dx/dy move the content right/down, a positive
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
    /// Per block: displacement (full-resolution pixels), the structure tensor of its texture
    /// (per pixel) that weights it in the fit, and whether it is used.
    struct BlockMotion { var dx = 0.0, dy = 0.0, gxx = 0.0, gxy = 0.0, gyy = 0.0, ok = false }
    private var disp: [BlockMotion] = []
    /// One block's SAD surface, and the sum of the normalised surfaces of the blocks used
    /// ((2 × `sadRange` + 1)² entries).
    private var blockSurface = [Int](repeating: 0, count: 225)
    private var surface = [Double](repeating: 0, count: 225)
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
        disp = Array(repeating: BlockMotion(), count: centres.count)
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

    /// Texture below this (largest eigenvalue of the per-pixel structure tensor, grey levels²)
    /// gives no constraint: sensor noise alone reaches a few units.
    static let minTexture: Float = 6
    /// Share of the largest eigenvalue added to the tensor's diagonal when solving a block: along
    /// an edge (one-dimensional texture) the block then keeps its starting displacement instead of
    /// sliding, and the fit gives that direction no weight (it uses the tensor itself).
    static let regularisation: Float = 0.02

    /// Solves (G + εI)·u = b for a block's update; ε from ``regularisation``.
    @inline(__always)
    static func solve(_ gxx: Float, _ gxy: Float, _ gyy: Float, _ bx: Float, _ by: Float) -> (Float, Float) {
        let tr = gxx + gyy
        let eps = regularisation * tr + 1e-3
        let a = gxx + eps, c = gyy + eps
        let det = a * c - gxy * gxy
        return ((c * bx - gxy * by) / det, (a * by - gxy * bx) / det)
    }

    /// Largest eigenvalue of a 2×2 symmetric tensor.
    @inline(__always)
    static func largestEigenvalue(_ gxx: Float, _ gxy: Float, _ gyy: Float) -> Float {
        let tr = gxx + gyy, det = gxx * gyy - gxy * gxy
        return 0.5 * (tr + max(0, tr * tr - 4 * det).squareRoot())
    }

    /// Lucas–Kanade at full resolution: the previous frame's patch `i` against `luma` from (dx, dy).
    /// Returns the displacement and the patch's structure tensor per pixel.
    private func refine(_ i: Int, _ luma: LumaView, dx: Double, dy: Double) -> BlockMotion? {
        guard i < patchValid.count, patchValid[i] else { return nil }
        let side = patchSide, h = half0
        let t = patches + i * side * side
        let cx = centres[i].x * 2, cy = centres[i].y * 2
        let n = 2 * h + 1
        let (gxx, gxy, gyy) = Self.tensor(t + side + 1, rowStride: side, size: n)
        let npx = Float((2 * h + 1) * (2 * h + 1))
        guard Self.largestEigenvalue(gxx, gxy, gyy) / npx > Self.minTexture else { return nil }
        var ux = Float(dx), uy = Float(dy)
        let s = luma.pixelStride, bpr = luma.bytesPerRow
        for _ in 0..<2 {
            let sx0 = Float(cx - h) + ux, sy0 = Float(cy - h) + uy
            guard sx0 >= 0, sy0 >= 0, sx0 + Float(2 * h + 2) < Float(luma.width - 1), sy0 + Float(2 * h + 2) < Float(luma.height - 1) else { return nil }
            let ix = Int(sx0), iy = Int(sy0)
            let fx = sx0 - Float(ix), fy = sy0 - Float(iy)
            let (bx, by) = Self.mismatch(t + side + 1, rowStride: side, luma.pointer(x: ix, y: iy), bytesPerRow: bpr, pixelStride: s, size: n, fx: fx, fy: fy)
            let (du, dv) = Self.solve(gxx, gxy, gyy, bx, by)
            ux += du; uy += dv
            if du * du + dv * dv < 1e-4 { break }
        }
        return BlockMotion(dx: Double(ux), dy: Double(uy), gxx: Double(gxx / npx), gxy: Double(gxy / npx), gyy: Double(gyy / npx), ok: true)
    }

    private func match(_ luma: LumaView) -> MotionEstimate {
        // 1. Coarse: SAD search at 1/8 per block (blocks with a clear minimum only). Each block's
        // surface, normalised to its own contrast (0 at its minimum, 1 at its mean), is added to a
        // global one whose minimum is the coarse shift: along an edge (a cable against the sky) a
        // block's surface is a valley whose lowest point is anywhere along it, but valleys of
        // edges at different angles, and the pits of textured blocks, meet only at the true shift
        // (a median of per-block minima is pulled along the valleys).
        let p8 = prev[2], c8 = cur[2]
        var n = 0
        let area = (2 * sadHalf + 1) * (2 * sadHalf + 1)
        let side = 2 * sadRange + 1
        for k in 0..<(side * side) { surface[k] = 0 }
        // A quarter of the blocks (every other one each way) first; the rest only when too few
        // of those have texture enough for a clear minimum.
        for pass in 0..<2 where pass == 0 || n < 4 {
        for (idx, c) in centres.enumerated() where ((idx % blocksX) % 2 == 0 && (idx / blocksX) % 2 == 0) == (pass == 0) {
            let x = c.x / 4, y = c.y / 4
            let r = sadHalf + sadRange + 1
            guard x - r >= 0, y - r >= 0, x + r < p8.width, y + r < p8.height else { continue }
            var best = Int.max, total = 0
            for dy in -sadRange...sadRange {
                for dx in -sadRange...sadRange {
                    let s = sad(p8, c8, x, y, dx, dy, sadHalf)
                    blockSurface[(dy + sadRange) * side + dx + sadRange] = s
                    total += s
                    best = min(best, s)
                }
            }
            // A flat block's SAD surface is flat: its minimum is noise.
            let mean = total / (side * side)
            guard mean - best > 3 * area else { continue }
            let scale = 1 / Double(mean - best)
            for k in 0..<(side * side) { surface[k] += Double(blockSurface[k] - best) * scale }
            n += 1
        }
        }
        var gx = 0.0, gy = 0.0
        if n > 0 {
            var best = Double.infinity, bx = 0, by = 0
            for dy in -sadRange...sadRange {
                for dx in -sadRange...sadRange {
                    let s = surface[(dy + sadRange) * side + dx + sadRange]
                    if s < best - 1e-9 || (abs(s - best) <= 1e-9 && abs(dx) + abs(dy) < abs(bx) + abs(by)) { best = s; bx = dx; by = dy }
                }
            }
            gx = Double(bx) * 8 // 1/8 resolution → full
            gy = Double(by) * 8
        }
        // 2. Per block: LK at 1/4 from the coarse shift, then at 1/2, then at full resolution.
        for (i, c) in centres.enumerated() {
            var m = BlockMotion(dx: gx, dy: gy)
            if let r = lk(prev[1], cur[1], c.x / 2, c.y / 2, half: half2 / 2, dx: gx / 4, dy: gy / 4, iterations: 3) {
                m.dx = r.dx * 4; m.dy = r.dy * 4
            }
            if let r = lk(prev[0], cur[0], c.x, c.y, half: half2, dx: m.dx / 2, dy: m.dy / 2, iterations: 3) {
                m = r
                m.dx *= 2; m.dy *= 2
                if let f = refine(i, luma, dx: m.dx, dy: m.dy), abs(f.dx - m.dx) < 2, abs(f.dy - m.dy) < 2 { m = f }
            }
            disp[i] = m
        }
        // 3. Similarity fit, each block weighted by its structure tensor (an edge constrains only
        // across itself), with outlier rejection.
        let cx = Double(width) / 2, cy = Double(height) / 2
        var fit = fitSimilarity(cx: cx, cy: cy)
        for _ in 0..<2 {
            guard let f = fit else { break }
            res.removeAll(keepingCapacity: true)
            for (i, c) in centres.enumerated() where disp[i].ok {
                res.append(residual(f, i, c, cx, cy))
            }
            guard !res.isEmpty else { break }
            Self.insertionSort(&res)
            let med = res[res.count / 2]
            let limit = max(0.5, 3 * med)
            var changed = false
            for (i, c) in centres.enumerated() where disp[i].ok && residual(f, i, c, cx, cy) > limit {
                disp[i].ok = false; changed = true
            }
            if !changed { break }
            fit = fitSimilarity(cx: cx, cy: cy)
        }
        guard var f = fit else {
            return MotionEstimate(dx: gx, dy: gy, confidence: n > 0 ? 0.2 : 0)
        }
        // 4. All inlier patches at full resolution at once: one similarity fitted to every pixel
        // of them (Gauss–Newton), which uses the texture a single block cannot pin down (edges,
        // faint texture: a sky with cables). With enough blocks textured both ways the block fit
        // is already as good (0.01 px on photographs) and this is skipped.
        var strong = 0
        for d in disp where d.ok {
            let lmax = Self.largestEigenvalue(Float(d.gxx), Float(d.gxy), Float(d.gyy))
            let lmin = Float(d.gxx + d.gyy) - lmax
            if lmin > 0.1 * lmax && lmax > 4 * Self.minTexture { strong += 1 }
        }
        for _ in 0..<(strong >= 16 ? 0 : 2) {
            guard let g = refineJointly(luma, f, cx: cx, cy: cy) else { break }
            let step = abs(g.tx - f.tx) + abs(g.ty - f.ty)
            f = g
            if step < 0.01 { break }
        }
        let inliers = disp.reduce(0) { $0 + ($1.ok ? 1 : 0) }
        // A dozen consistent textured blocks pin a similarity down; fewer, less surely.
        return MotionEstimate(dx: f.tx, dy: f.ty, angle: -f.theta, scale: 1 + f.k, confidence: min(1, Double(inliers) / 12))
    }

    /// One Gauss–Newton step of the similarity over the saved full-resolution patches of the inlier
    /// blocks: previous-frame patch pixel X is sought in `luma` at X + d(X), d the similarity's
    /// displacement; the template's own gradients stand in for the frame's (inverse compositional).
    private func refineJointly(_ luma: LumaView, _ f: (tx: Double, ty: Double, theta: Double, k: Double), cx: Double, cy: Double) -> (tx: Double, ty: Double, theta: Double, k: Double)? {
        var H = InlineArray<16, Double>(repeating: 0), g = InlineArray<4, Double>(repeating: 0)
        let side = patchSide, h = half0
        let s = luma.pixelStride, bpr = luma.bytesPerRow
        let unit: Float = 1000
        var used = 0
        for (i, c) in centres.enumerated() where disp[i].ok && i < patchValid.count && patchValid[i] {
            let t = patches + i * side * side
            let bx = c.x * 2, by = c.y * 2
            // Positions relative to the picture centre, in kilopixels (balanced normal equations).
            let px0 = Float(Double(bx - h) - cx) / unit, py0 = Float(Double(by - h) - cy) / unit
            // The block's displacement at its centre; across 33 pixels the similarity's
            // rotation and scale change it by well under a hundredth of a pixel, so one sampling
            // offset serves the whole patch (the Jacobian keeps the per-pixel terms).
            let pcx = Double(bx) - cx, pcy = Double(by) - cy
            let dx = f.tx - f.theta * pcy + f.k * pcx, dy = f.ty + f.theta * pcx + f.k * pcy
            let sx0 = Double(bx - h) + dx, sy0 = Double(by - h) + dy
            guard sx0 >= 0, sy0 >= 0, sx0 + Double(2 * h + 2) < Double(luma.width - 1), sy0 + Double(2 * h + 2) < Double(luma.height - 1) else { continue }
            let ix = Int(sx0), iy = Int(sy0)
            let fx = Float(sx0 - Double(ix)), fy = Float(sy0 - Double(iy))
            var h00: Float = 0, h01: Float = 0, h02: Float = 0, h03: Float = 0, h11: Float = 0, h12: Float = 0, h13: Float = 0, h22: Float = 0, h23: Float = 0, h33: Float = 0
            var g0: Float = 0, g1: Float = 0, g2: Float = 0, g3: Float = 0
            for j in 0...(2 * h) {
                let row = t + (j + 1) * side
                let p = luma.pointer(x: ix, y: iy + j)
                let py = py0 + Float(j) / unit
                for k in 0...(2 * h) {
                    let q = p + k &* s
                    let a = Float(q[0]), b = Float(q[s]), cc = Float(q[bpr]), d = Float(q[bpr &+ s])
                    let top = a + (b - a) * fx
                    let v = top + ((cc + (d - cc) * fx) - top) * fy
                    let gx = (Float(row[k + 2]) - Float(row[k])) * 0.5
                    let gy = (Float(row[k + 1 + side]) - Float(row[k + 1 - side])) * 0.5
                    let e = Float(row[k + 1]) - v
                    let px = px0 + Float(k) / unit
                    // J = ∇T · ∂X'/∂(tx, ty, θ, k): (1, 0), (0, 1), (−py, px), (px, py)
                    let j2 = -gx * py + gy * px, j3 = gx * px + gy * py
                    h00 += gx * gx; h01 += gx * gy; h02 += gx * j2; h03 += gx * j3
                    h11 += gy * gy; h12 += gy * j2; h13 += gy * j3
                    h22 += j2 * j2; h23 += j2 * j3; h33 += j3 * j3
                    g0 += gx * e; g1 += gy * e; g2 += j2 * e; g3 += j3 * e
                }
            }
            H[0] += Double(h00); H[1] += Double(h01); H[2] += Double(h02); H[3] += Double(h03)
            H[5] += Double(h11); H[6] += Double(h12); H[7] += Double(h13)
            H[10] += Double(h22); H[11] += Double(h23); H[15] += Double(h33)
            g[0] += Double(g0); g[1] += Double(g1); g[2] += Double(g2); g[3] += Double(g3)
            used += 1
        }
        guard used >= 3 else { return nil }
        for r in 0..<4 { for c in 0..<r { H[r * 4 + c] = H[c * 4 + r] } }
        let trace = H[0] + H[5] + H[10] + H[15]
        guard let d = Self.solve4(H, g, minPivot: 1e-9 * trace) else { return nil }
        let u = Double(unit)
        let out = (tx: f.tx + d[0], ty: f.ty + d[1], theta: f.theta + d[2] / u, k: f.k + d[3] / u)
        // A step this large means the patches disagree with the blocks: keep the block fit.
        guard abs(d[0]) < 1, abs(d[1]) < 1, out.tx.isFinite, out.theta.isFinite else { return nil }
        return out
    }

    /// A block's misfit along the direction its texture measures, pixels: sqrt(eᵀGe / λmax(G)).
    private func residual(_ f: (tx: Double, ty: Double, theta: Double, k: Double), _ i: Int, _ c: (x: Int, y: Int), _ cx: Double, _ cy: Double) -> Double {
        let px = Double(c.x * 2) - cx, py = Double(c.y * 2) - cy
        let d = disp[i]
        let ex = f.tx - f.theta * py + f.k * px - d.dx
        let ey = f.ty + f.theta * px + f.k * py - d.dy
        let lmax = Double(Self.largestEigenvalue(Float(d.gxx), Float(d.gxy), Float(d.gyy)))
        return ((ex * ex * d.gxx + 2 * ex * ey * d.gxy + ey * ey * d.gyy) / max(lmax, 1e-9)).squareRoot()
    }

    /// Least squares for dx = tx − θ·py + k·px, dy = ty + θ·px + k·py over the blocks in use,
    /// each weighted by its 2×2 structure tensor. Nil when the blocks do not pin the motion down.
    private func fitSimilarity(cx: Double, cy: Double) -> (tx: Double, ty: Double, theta: Double, k: Double)? {
        var N = InlineArray<16, Double>(repeating: 0), r = InlineArray<4, Double>(repeating: 0)
        var count = 0
        let unit = 1000.0 // positions in kilopixels keep the system balanced
        for (i, c) in centres.enumerated() where disp[i].ok {
            let d = disp[i]
            let px = (Double(c.x * 2) - cx) / unit, py = (Double(c.y * 2) - cy) / unit
            // Rows of A: (1, 0, −py, px) for dx and (0, 1, px, py) for dy.
            let axs: InlineArray<4, Double> = [1, 0, -py, px], ays: InlineArray<4, Double> = [0, 1, px, py]
            for u in 0..<4 {
                // (Aᵀ G)_u = ax_u·(gxx, gxy) + ay_u·(gxy, gyy)
                let gu0 = axs[u] * d.gxx + ays[u] * d.gxy, gu1 = axs[u] * d.gxy + ays[u] * d.gyy
                for v in 0..<4 { N[u * 4 + v] += gu0 * axs[v] + gu1 * ays[v] }
                r[u] += gu0 * d.dx + gu1 * d.dy
            }
            count += 1
        }
        guard count >= 2 else { return nil }
        // Without rotation and scale when few blocks or the 4×4 system is ill-conditioned.
        let trace = N[0] + N[5] + N[10] + N[15]
        if count >= 3, let q = Self.solve4(N, r, minPivot: 1e-6 * trace) {
            return (q[0], q[1], q[2] / unit, q[3] / unit)
        }
        let det = N[0] * N[5] - N[1] * N[4]
        guard det > 1e-9 * trace * trace else { return nil }
        return ((N[5] * r[0] - N[1] * r[1]) / det, (N[0] * r[1] - N[4] * r[0]) / det, 0, 0)
    }

    /// Gaussian elimination with partial pivoting; nil when a pivot falls below `minPivot`.
    static func solve4(_ m: InlineArray<16, Double>, _ rhs: InlineArray<4, Double>, minPivot: Double) -> InlineArray<4, Double>? {
        var a = m, b = rhs
        for c in 0..<4 {
            var piv = c
            for r in (c + 1)..<4 where abs(a[r * 4 + c]) > abs(a[piv * 4 + c]) { piv = r }
            guard abs(a[piv * 4 + c]) > minPivot else { return nil }
            if piv != c {
                for k in 0..<4 { a.swapAt(c * 4 + k, piv * 4 + k) }
                b.swapAt(c, piv)
            }
            for r in 0..<4 where r != c {
                let f = a[r * 4 + c] / a[c * 4 + c]
                for k in c..<4 { a[r * 4 + k] -= f * a[c * 4 + k] }
                b[r] -= f * b[c]
            }
        }
        var x = InlineArray<4, Double>(repeating: 0)
        for i in 0..<4 { x[i] = b[i] / a[i * 4 + i] }
        return x
    }

    /// Sum of absolute differences of the (2h+1)² block at (x, y) in `a` and at (x+dx, y+dy) in `b`.
    /// Each row (at most 16 samples) is one 128-bit byte vector (|a − b| as max − min, summed in
    /// 16-bit lanes); a load may read up to 15 − 2h bytes past the row's block, at worst into the
    /// next row, which ``match``'s margin keeps inside the image; those lanes are masked out.
    @inline(__always)
    private func sad(_ a: GreyImage, _ b: GreyImage, _ x: Int, _ y: Int, _ dx: Int, _ dy: Int, _ h: Int) -> Int {
        let w = a.width, side = 2 &* h &+ 1
        assert(side <= 16, "SAD blocks are at most 16 wide")
        // 0xFF in lanes below `side`: lane − side wraps to 241...255 there (top bit set), and is
        // below 16 elsewhere. (Arithmetic, not `replacing(with:where:)`, which became a per-lane loop.)
        let lanes = SIMD16<UInt8>(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
        let mask = ((lanes &- UInt8(side)) &>> 7) &* 0xFF
        var acc = SIMD16<UInt16>()
        for j in -h...h {
            let pa = UnsafeRawPointer(a.pixels + ((y &+ j) &* w &+ x &- h))
            let pb = UnsafeRawPointer(b.pixels + ((y &+ j &+ dy) &* w &+ x &+ dx &- h))
            let va = pa.loadUnaligned(as: SIMD16<UInt8>.self), vb = pb.loadUnaligned(as: SIMD16<UInt8>.self)
            let d = (pointwiseMax(va, vb) &- pointwiseMin(va, vb)) & mask
            acc &+= SIMD16<UInt16>(truncatingIfNeeded: d)
        }
        return Int(acc.wrappedSum())
    }

    /// Lucas–Kanade translation of the block of half-size `half` at (x, y) in `a`, found in `b`
    /// starting from (dx, dy), with the block's structure tensor per pixel. Nil when the block has
    /// no texture or leaves the picture; along an edge the block keeps its starting displacement.
    private func lk(_ a: GreyImage, _ b: GreyImage, _ x: Int, _ y: Int, half: Int, dx: Double, dy: Double, iterations: Int) -> BlockMotion? {
        guard x - half - 1 >= 0, y - half - 1 >= 0, x + half + 1 < a.width, y + half + 1 < a.height else { return nil }
        let w = a.width, n = 2 * half + 1
        // The block's top-left sample in `a`.
        let t = UnsafePointer(a.pixels + ((y &- half) &* w &+ x &- half))
        let (gxx, gxy, gyy) = Self.tensor(t, rowStride: w, size: n)
        let npx = Float((2 * half + 1) * (2 * half + 1))
        guard Self.largestEigenvalue(gxx, gxy, gyy) / npx > Self.minTexture else { return nil }
        var ux = Float(dx), uy = Float(dy)
        for _ in 0..<iterations {
            let sx = Float(x) + ux, sy = Float(y) + uy
            guard sx - Float(half) >= 1, sy - Float(half) >= 1, sx + Float(half) < Float(b.width - 2), sy + Float(half) < Float(b.height - 2) else { return nil }
            // One bilinear fraction for the whole block: it moves by whole pixels.
            let x0 = sx - Float(half), y0 = sy - Float(half)
            let ix = Int(x0), iy = Int(y0)
            let fx = x0 - Float(ix), fy = y0 - Float(iy)
            let (bx, by) = Self.mismatch(t, rowStride: w, UnsafePointer(b.pixels + (iy &* b.width &+ ix)), bytesPerRow: b.width, pixelStride: 1, size: n, fx: fx, fy: fy)
            let (du, dv) = Self.solve(gxx, gxy, gyy, bx, by)
            ux += du; uy += dv
            if du * du + dv * dv < 1e-4 { break }
        }
        return BlockMotion(dx: Double(ux), dy: Double(uy), gxx: Double(gxx / npx), gxy: Double(gxy / npx), gyy: Double(gyy / npx), ok: true)
    }

    /// The structure tensor (Σgx², Σgx·gy, Σgy²) of the size × size template whose top-left sample
    /// is `t` (central differences; one sample of border read all round). `vf_lk_tensor`.
    @inline(__always)
    static func tensor(_ t: UnsafePointer<UInt8>, rowStride: Int, size n: Int) -> (Float, Float, Float) {
        var out = InlineArray<3, Float>(repeating: 0)
        withUnsafeMutablePointer(to: &out) { vf_lk_tensor(t, rowStride, n, n, UnsafeMutableRawPointer($0).assumingMemoryBound(to: Float.self)) }
        return (out[0], out[1], out[2])
    }

    /// A Lucas–Kanade step's right-hand side (Σgx·e, Σgy·e), e the template `t` minus the image
    /// sampled bilinearly at (k + fx, j + fy) from `img`. `vf_lk_mismatch`: sums in eight float
    /// lanes in a fixed order, so the portable and AVX2 builds agree bit for bit.
    @inline(__always)
    static func mismatch(_ t: UnsafePointer<UInt8>, rowStride: Int, _ img: UnsafePointer<UInt8>, bytesPerRow: Int, pixelStride: Int, size n: Int, fx: Float, fy: Float) -> (Float, Float) {
        var out = InlineArray<2, Float>(repeating: 0)
        withUnsafeMutablePointer(to: &out) { vf_lk_mismatch(t, rowStride, img, bytesPerRow, pixelStride, n, n, fx, fy, UnsafeMutableRawPointer($0).assumingMemoryBound(to: Float.self)) }
        return (out[0], out[1])
    }

    /// In place, without the temporary buffer the standard library's sort may allocate.
    static func insertionSort(_ a: inout [Double]) {
        a.withUnsafeMutableBufferPointer { p in
            guard p.count > 1 else { return }
            for i in 1..<p.count {
                let v = p[i]
                var j = i - 1
                while j >= 0 && p[j] > v { p[j + 1] = p[j]; j -= 1 }
                p[j + 1] = v
            }
        }
    }
}
