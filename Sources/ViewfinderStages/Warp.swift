import CViewfinderKernels
import Viewfinder

/// An affine map from destination to source pixel coordinates: `src = (a·x + b·y + tx, c·x + d·y + ty)`.
public struct AffineMap: Sendable, Equatable {
    public var a, b, c, d, tx, ty: Double
    public init(a: Double, b: Double, c: Double, d: Double, tx: Double, ty: Double) {
        self.a = a; self.b = b; self.c = c; self.d = d; self.tx = tx; self.ty = ty
    }
    public static let identity = AffineMap(a: 1, b: 0, c: 0, d: 1, tx: 0, ty: 0)

    @inline(__always)
    public func apply(_ x: Double, _ y: Double) -> (x: Double, y: Double) { (a * x + b * y + tx, c * x + d * y + ty) }

    /// The same map for a plane subsampled by (sx, sy): `S⁻¹ · M · S`.
    public func subsampled(_ sx: Double, _ sy: Double) -> AffineMap {
        AffineMap(a: a, b: b * sy / sx, c: c * sx / sy, d: d, tx: tx / sx, ty: ty / sy)
    }

    /// The map that shows the picture moved by (dx, dy) and rotated by `angle` (radians, about the
    /// centre, positive counter-clockwise as seen), both in source pixels, then zoomed by `zoom`
    /// about the centre: destination q = c + zoom·(R(θ)·(p − c) + (dx, dy)), θ = −angle in y-down
    /// pixel coordinates. The zoom scales the correction with the picture: a shake of s source
    /// pixels shows as zoom·s in the output, so a correction of −s must too (applied after the
    /// zoom, it would leave (zoom − 1)·s of every shake: 11 % at the default crop).
    public static func correction(dx: Double, dy: Double, angle: Double, zoom: Double, width: Int, height: Int) -> AffineMap {
        let cx = Double(width - 1) / 2, cy = Double(height - 1) / 2
        let co = cos(-angle) / zoom, si = sin(-angle) / zoom
        // p = R(−angle)·((q − c)/zoom − t) + c = R(−angle)·(q − c − zoom·t)/zoom + c
        let a = co, b = si, c = -si, d = co
        let qx = -cx - zoom * dx, qy = -cy - zoom * dy
        return AffineMap(a: a, b: b, c: c, d: d, tx: a * qx + b * qy + cx, ty: c * qx + d * qy + cy)
    }
}

/// Scratch memory for ``Warp``: intermediate rows and the horizontal resampling tables.
/// Allocate once (a stage's `prepare`) for the widest channel, reuse for every frame.
///
/// The horizontal pass resamples a row by a scale `a` (at most 1: the stabiliser zooms in) at one
/// of 32 sub-pixel phases. For each phase the workspace keeps, per output column, the source
/// column and weight (the scalar path), and per block of 16 output columns a base column, four
/// lane masks and the weights (the vector path): with `a` in [0.8, 1] output lane j of a block
/// reads source `base + j − z` with z in 0...3, so a block is five unaligned loads blended by
/// masks made from z — no gather, which the baseline vector units lack and x86 does poorly. Tables
/// are rebuilt when `a` changes (fixed point) and the block tables of a phase when it is first
/// used. Both passes run in `CViewfinderKernels` (portable, and AVX2 where the CPU has it).
public final class WarpWorkspace {
    public let maxWidth: Int
    static let phases = 32
    /// Bytes before and after each scratch row that the vector path may read (masked out).
    static let pad = 64
    let rowStorage: UnsafeMutablePointer<UInt8>
    /// The vertical pass's row (room for a packed 4:2:2 row: two bytes per pixel).
    let row: UnsafeMutablePointer<UInt8>
    /// Planar rows split from an interleaved row (luma or first channel, second, third), and the
    /// planar outputs before they are interleaved again.
    let planes: [UnsafeMutablePointer<UInt8>]
    let outputs: [UnsafeMutablePointer<UInt8>]
    let index: UnsafeMutablePointer<Int32>
    let weight: UnsafeMutablePointer<Int32>
    let blocks: Int
    let blockBase: UnsafeMutablePointer<Int32>
    /// Per block, lane j's z (source column base + j − z), 0...3.
    let blockShift: UnsafeMutablePointer<SIMD16<Int8>>
    let blockWeight: UnsafeMutablePointer<SIMD16<UInt8>>
    /// Per phase: 0 block table not built, 1 built and usable, 2 built and not usable (scalar path).
    let blockState: UnsafeMutablePointer<UInt8>
    private(set) var scale = Double.nan

    public init(maxWidth: Int) {
        self.maxWidth = max(maxWidth, 2)
        let rowBytes = 2 * self.maxWidth + 2 * Self.pad
        let planeBytes = self.maxWidth + 2 * Self.pad
        rowStorage = .allocate(capacity: rowBytes + 6 * planeBytes)
        rowStorage.initialize(repeating: 0, count: rowBytes + 6 * planeBytes)
        row = rowStorage + Self.pad
        var p: [UnsafeMutablePointer<UInt8>] = []
        for i in 0..<6 { p.append(rowStorage + rowBytes + i * planeBytes + Self.pad) }
        planes = Array(p[0..<3])
        outputs = Array(p[3..<6])
        index = .allocate(capacity: Self.phases * self.maxWidth)
        index.initialize(repeating: 0, count: Self.phases * self.maxWidth)
        weight = .allocate(capacity: Self.phases * self.maxWidth)
        weight.initialize(repeating: 0, count: Self.phases * self.maxWidth)
        blocks = self.maxWidth / 16
        blockBase = .allocate(capacity: Self.phases * max(1, blocks))
        blockBase.initialize(repeating: 0, count: Self.phases * max(1, blocks))
        blockShift = .allocate(capacity: Self.phases * max(1, blocks))
        blockShift.initialize(repeating: .zero, count: Self.phases * max(1, blocks))
        blockWeight = .allocate(capacity: Self.phases * max(1, blocks))
        blockWeight.initialize(repeating: .zero, count: Self.phases * max(1, blocks))
        blockState = .allocate(capacity: Self.phases)
        blockState.initialize(repeating: 0, count: Self.phases)
    }

    deinit {
        rowStorage.deallocate(); index.deallocate(); weight.deallocate()
        blockBase.deallocate(); blockShift.deallocate(); blockWeight.deallocate(); blockState.deallocate()
    }

    /// Makes the tables describe scale `a`: for phase k, output column x reads source columns
    /// floor(a·x + k/32) and the next, with weight its fraction in 1/256.
    func prepare(scale a: Double) {
        guard a != scale else { return }
        scale = a
        let fa = Int64((a * 16_777_216).rounded()) // 2^24
        for k in 0..<Self.phases {
            let ip = index + k * maxWidth, wp = weight + k * maxWidth
            var u = Int64(k) << 19 // k/32 in 2^24 units
            for x in 0..<maxWidth {
                ip[x] = Int32(truncatingIfNeeded: u &>> 24)
                wp[x] = Int32(truncatingIfNeeded: (u &>> 16) & 0xFF)
                u &+= fa
            }
            blockState[k] = 0
        }
    }

    /// A source offset as whole pixels and the nearest of the 32 sub-pixel phases.
    @inline(__always)
    static func split(_ offset: Double) -> (whole: Int, phase: Int) {
        let n0 = offset.rounded(.down)
        let phase = Int(((offset - n0) * Double(phases)).rounded())
        return phase == phases ? (Int(n0) + 1, 0) : (Int(n0), phase)
    }

    /// Builds phase k's block table on first use; whether the vector path applies to it.
    @inline(__always)
    func blocksUsable(phase k: Int) -> Bool {
        if blockState[k] == 0 { buildBlocks(phase: k) }
        return blockState[k] == 1
    }

    private func buildBlocks(phase k: Int) {
        let ip = index + k * maxWidth, wp = weight + k * maxWidth
        let zs = UnsafeMutableRawPointer(blockShift + k * blocks), ws = UnsafeMutableRawPointer(blockWeight + k * blocks)
        var outOfRange: Int32 = 0
        for b in 0..<blocks {
            let x0 = b &* 16
            let base = ip[x0]
            blockBase[k &* blocks &+ b] = base
            for j in 0..<16 {
                let z = Int32(truncatingIfNeeded: j) &- (ip[x0 &+ j] &- base)
                outOfRange |= z & ~3
                zs.storeBytes(of: Int8(truncatingIfNeeded: z), toByteOffset: x0 &+ j, as: Int8.self)
                ws.storeBytes(of: UInt8(truncatingIfNeeded: wp[x0 &+ j]), toByteOffset: x0 &+ j, as: UInt8.self)
            }
        }
        blockState[k] = blocks > 0 && outOfRange == 0 ? 1 : 2
    }

    /// Resamples one planar row: `out[x] = lerp(src[i], src[i+1], w)` with (i, w) of phase `k`
    /// for x in 0..<n. `src` may be read up to 3 bytes before and 16 after the columns used.
    /// Blocks of 16 outputs by the phase's block tables, the rest by its per-column table
    /// (`vf_warp_resample` in CViewfinderKernels).
    @inline(__always)
    func resample(_ src: UnsafePointer<UInt8>, into out: UnsafeMutablePointer<UInt8>, count n: Int, phase k: Int) {
        let t = table(phase: k, count: n)
        vf_warp_resample(src, out, n, t.blocks, t.blockBase, t.blockShift, t.blockWeight, t.index, t.weight)
    }

    /// Phase k's tables for a row of n outputs, as ``resample(_:into:count:phase:)`` uses them.
    @inline(__always)
    func table(phase k: Int, count n: Int) -> vf_warp_table {
        let full = n >= 16 && blocksUsable(phase: k) ? min(n / 16, blocks) : 0
        return vf_warp_table(blockBase: UnsafePointer(blockBase + k * blocks),
                             blockShift: UnsafeRawPointer(blockShift + k * blocks).assumingMemoryBound(to: Int8.self),
                             blockWeight: UnsafeRawPointer(blockWeight + k * blocks).assumingMemoryBound(to: UInt8.self),
                             index: UnsafePointer(index + k * maxWidth), weight: UnsafePointer(weight + k * maxWidth), blocks: full)
    }
}

/// Bilinear warping of one channel of a frame (a plane, or the luma or a chroma component of a
/// packed format), in fixed point.
///
/// Maps close to a similarity (the stabiliser's small rotations and zooms) go through two passes
/// that vectorise: a vertical pass per output row that blends two source rows with a weight ramp
/// (split where the source row changes), then a horizontal resampling of that row through tables
/// of offsets and weights precomputed for 32 sub-pixel phases. Other maps, and rows that reach
/// outside the source, take a plain per-pixel path that clamps at the edges.
public enum Warp {
    /// One channel's memory layout.
    public struct Channel {
        public var base: UnsafeMutablePointer<UInt8>
        public var width: Int
        public var height: Int
        public var bytesPerRow: Int
        public var pixelStride: Int
        public init(base: UnsafeMutablePointer<UInt8>, width: Int, height: Int, bytesPerRow: Int, pixelStride: Int) {
            self.base = base; self.width = width; self.height = height; self.bytesPerRow = bytesPerRow; self.pixelStride = pixelStride
        }
    }

    /// Writes `dst(x, y) = src(map(x, y))`, bilinear; samples outside the source are clamped to its
    /// edge. `src` and `dst` have the same geometry and must not overlap.
    public static func bilinear(from src: Channel, to dst: Channel, map: AffineMap, workspace: WarpWorkspace? = nil) {
        if let ws = workspace, ws.maxWidth >= src.width, twoPassApplies(map, src) {
            switch src.pixelStride {
            case 1: twoPass(src, dst, map, ws, stride: 1)
            case 2: twoPass(src, dst, map, ws, stride: 2)
            case 4: twoPass(src, dst, map, ws, stride: 4)
            default: twoPass(src, dst, map, ws, stride: src.pixelStride)
            }
            return
        }
        switch src.pixelStride {
        case 1: run(src, dst, map, stride: 1)
        case 2: run(src, dst, map, stride: 2)
        case 4: run(src, dst, map, stride: 4)
        default: run(src, dst, map, stride: src.pixelStride)
        }
    }

    /// Whether the map is near enough a similarity for the two-pass path.
    static func twoPassApplies(_ m: AffineMap, _ src: Channel) -> Bool {
        m.a > 0.25 && m.a < 4 && abs(m.c) < 0.2 && abs(m.b) < 0.2 && m.d > 0.25 && m.d < 4 && src.width >= 4 && src.height >= 4
    }

    /// dst(x, y) = src(a·x + b·y + tx, c·x + d·y + ty) as I(u, y) = src(u, p·u + q·y + r) (vertical
    /// pass), then dst(x, y) = I(a·x + b·y + tx, y) (horizontal pass).
    @inline(__always)
    static func twoPass(_ src: Channel, _ dst: Channel, _ m: AffineMap, _ ws: WarpWorkspace, stride s: Int) {
        let w = src.width, h = src.height
        let p = m.c / m.a, q = m.d - m.b * m.c / m.a, r = m.ty - m.c * m.tx / m.a
        // Horizontal tables: for phase k (fraction k/32 of the row offset), source column and weight
        // of output x are floor(a·x + k/32) and its fraction.
        ws.prepare(scale: m.a)
        let span = m.a * Double(w - 1)
        let tmp = ws.row
        let sbase = UnsafePointer(src.base)
        let bpr = src.bytesPerRow
        let one = 65536.0
        for y in 0..<min(h, dst.height) {
            let off = m.b * Double(y) + m.tx
            let u0 = off, u1 = off + span
            // Source columns this row needs, and the source rows over them.
            let lo = Int(min(u0, u1).rounded(.down)), hi = Int(max(u0, u1).rounded(.down)) + 2
            let v0 = p * Double(lo) + q * Double(y) + r, v1 = p * Double(hi) + q * Double(y) + r
            guard lo >= 0, hi <= w - 1, min(v0, v1) >= 0.05, max(v0, v1) < Double(h - 1) - 0.05 else {
                rowGeneral(src, dst, m, y, stride: s)
                continue
            }
            // Vertical pass over columns lo...hi into tmp[0...hi-lo].
            let step = Int32((p * one).rounded())
            verticalPass(sbase, bytesPerRow: bpr, columns: lo...hi, stride: s, start: Int32((v0 * one).rounded()), step: step, into: tmp)
            // Horizontal pass from tmp.
            let rel = off - Double(lo)
            let (whole, phase) = WarpWorkspace.split(rel)
            let tb = tmp + whole
            let out = dst.base + y &* dst.bytesPerRow
            if s == 1 {
                ws.resample(tb, into: out, count: w, phase: phase)
            } else {
                let o = ws.outputs[0]
                ws.resample(tb, into: o, count: w, phase: phase)
                for x in 0..<w { out[x &* s] = o[x] }
            }
        }
    }

    /// Packed 4:2:2: the vertical pass runs over the row's bytes (luma and chroma share their
    /// source rows at the same luma position, so one stride-1 pass serves both), then luma and
    /// chroma are resampled horizontally from it.
    static func packedTwoPass(source: UnsafeMutablePointer<UInt8>, dst: UnsafeMutablePointer<UInt8>, width w: Int, height h: Int, bytesPerRow bpr: Int, lumaOffset lo8: Int, chromaOffset co8: Int, map m: AffineMap, ws: WarpWorkspace) {
        let p = m.c / m.a, q = m.d - m.b * m.c / m.a, r = m.ty - m.c * m.tx / m.a
        ws.prepare(scale: m.a)
        let cw = w / 2
        let span = m.a * Double(w - 1)
        let tmp = ws.row
        let sbase = UnsafePointer(source)
        let one = 65536.0
        let step = Int32((p * 0.5 * one).rounded()) // per byte: half a luma column
        let lumaDst = Channel(base: dst + lo8, width: w, height: h, bytesPerRow: bpr, pixelStride: 2)
        let cm = m.subsampled(2, 1)
        for y in 0..<h {
            let off = m.b * Double(y) + m.tx
            let minU = min(off, off + span), maxU = max(off, off + span)
            // Byte range of whole pixel pairs covering the luma and chroma samples this row needs.
            let firstPair = Int(minU.rounded(.down)) / 2 - 1, lastPair = Int(maxU.rounded(.down)) / 2 + 2
            let b0 = 4 * firstPair, b1 = 4 * lastPair + 3
            let v0 = p * Double(b0) * 0.5 + q * Double(y) + r, v1 = p * Double(b1) * 0.5 + q * Double(y) + r
            guard minU >= 0, firstPair >= 0, lastPair < cw, min(v0, v1) >= 0.05, max(v0, v1) < Double(h - 1) - 0.05 else {
                rowGeneral(Channel(base: source + lo8, width: w, height: h, bytesPerRow: bpr, pixelStride: 2), lumaDst, m, y, stride: 2)
                for c in 0..<2 {
                    rowGeneral(Channel(base: source + co8 + 2 * c, width: cw, height: h, bytesPerRow: bpr, pixelStride: 4),
                               Channel(base: dst + co8 + 2 * c, width: cw, height: h, bytesPerRow: bpr, pixelStride: 4), cm, y, stride: 4)
                }
                continue
            }
            // Luma column i of the vertical pass's row is tmp[2·(i − 2·firstPair) + lo8]; chroma pair j
            // is tmp[4·(j − firstPair) + co8] (U) and +2 (V). One call per row: the vertical pass, the
            // split into planar rows, the resampling of each and the interleaving into the output row
            // (`vf_warp_packed422_row`; its AVX2 build resamples and interleaves in registers).
            let rel = off - Double(2 * firstPair)
            let (whole, phase) = WarpWorkspace.split(rel)
            let offC = cm.b * Double(y) + cm.tx
            let relC = offC - Double(firstPair)
            let (wholeC, phaseC) = WarpWorkspace.split(relC)
            guard wholeC >= 0, whole >= 0 else {
                rowGeneral(Channel(base: source + lo8, width: w, height: h, bytesPerRow: bpr, pixelStride: 2), lumaDst, m, y, stride: 2)
                for c in 0..<2 {
                    rowGeneral(Channel(base: source + co8 + 2 * c, width: cw, height: h, bytesPerRow: bpr, pixelStride: 4),
                               Channel(base: dst + co8 + 2 * c, width: cw, height: h, bytesPerRow: bpr, pixelStride: 4), cm, y, stride: 4)
                }
                continue
            }
            var row = vf_warp_packed_row(
                source: sbase, bytesPerRow: bpr, first: b0, last: b1, start: Int32((v0 * one).rounded()), step: step,
                tmp: tmp, spanPairs: lastPair - firstPair + 1,
                planeY: ws.planes[0], planeU: ws.planes[1], planeV: ws.planes[2],
                outY: ws.outputs[0], outU: ws.outputs[1], outV: ws.outputs[2],
                whole: whole, wholeC: wholeC,
                luma: ws.table(phase: phase, count: w), chroma: ws.table(phase: phaseC, count: cw),
                out: dst + y &* bpr, pairs: cw, yOffset: Int32(lo8), uOffset: Int32(co8))
            vf_warp_packed422_row(&row)
        }
    }

    /// Interleaved two-channel rows (NV12's UV plane): one stride-1 vertical pass over the bytes,
    /// then both channels resampled horizontally with the same table.
    static func pairTwoPass(source: UnsafeMutablePointer<UInt8>, dst: UnsafeMutablePointer<UInt8>, columns w: Int, rows h: Int, bytesPerRow bpr: Int, map m: AffineMap, ws: WarpWorkspace) {
        let p = m.c / m.a, q = m.d - m.b * m.c / m.a, r = m.ty - m.c * m.tx / m.a
        ws.prepare(scale: m.a)
        let span = m.a * Double(w - 1)
        let tmp = ws.row
        let sbase = UnsafePointer(source)
        let one = 65536.0
        let step = Int32((p * 0.5 * one).rounded())
        for y in 0..<h {
            let off = m.b * Double(y) + m.tx
            let minU = min(off, off + span), maxU = max(off, off + span)
            let c0 = Int(minU.rounded(.down)), c1 = Int(maxU.rounded(.down)) + 2
            let b0 = 2 * c0, b1 = 2 * c1 + 1
            let v0 = p * Double(c0) + q * Double(y) + r, v1 = p * Double(c1) + q * Double(y) + r
            guard minU >= 0, c1 < w, min(v0, v1) >= 0.05, max(v0, v1) < Double(h - 1) - 0.05 else {
                for c in 0..<2 {
                    rowGeneral(Channel(base: source + c, width: w, height: h, bytesPerRow: bpr, pixelStride: 2),
                               Channel(base: dst + c, width: w, height: h, bytesPerRow: bpr, pixelStride: 2), m, y, stride: 2)
                }
                continue
            }
            verticalPass(sbase, bytesPerRow: bpr, columns: b0...b1, stride: 1, start: Int32((v0 * one).rounded()), step: step, into: tmp)
            let rel = off - Double(c0)
            let (whole, phase) = WarpWorkspace.split(rel)
            // Split the two channels, resample each, interleave again.
            let pU = ws.planes[0], pV = ws.planes[1], oU = ws.outputs[0], oV = ws.outputs[1]
            let halfWords = UnsafeRawPointer(tmp)
            for k in 0..<(c1 - c0 + 1) {
                let v = halfWords.loadUnaligned(fromByteOffset: k &* 2, as: UInt16.self)
                pU[k] = UInt8(truncatingIfNeeded: v)
                pV[k] = UInt8(truncatingIfNeeded: v &>> 8)
            }
            ws.resample(pU + whole, into: oU, count: w, phase: phase)
            ws.resample(pV + whole, into: oV, count: w, phase: phase)
            let out = UnsafeMutableRawPointer(dst + y &* bpr)
            for x in 0..<w {
                out.storeBytes(of: UInt16(oU[x]) | UInt16(oV[x]) &<< 8, toByteOffset: x &* 2, as: UInt16.self)
            }
        }
    }

    /// The vertical pass over `columns` of one output row into `tmp[0...]`: the source row at
    /// column c is `start + (c − first)·step` (16.16 fixed point), split into runs of columns that
    /// share their two source rows, each blended as `(r0·(256 − w) + r1·w + 128) >> 8` with w bits
    /// 8–15 of the row position, in 16-bit lanes (`vf_warp_vertical` in CViewfinderKernels: the
    /// portable build and, where the CPU has it, an AVX2 one).
    @inline(__always)
    static func verticalPass(_ sbase: UnsafePointer<UInt8>, bytesPerRow bpr: Int, columns: ClosedRange<Int>, stride s: Int, start: Int32, step: Int32, into tmp: UnsafeMutablePointer<UInt8>) {
        vf_warp_vertical(sbase, bpr, columns.lowerBound, columns.upperBound, s, start, step, tmp)
    }

    /// One output row by the per-pixel path, clamping at the source's edges.
    static func rowGeneral(_ src: Channel, _ dst: Channel, _ m: AffineMap, _ y: Int, stride s: Int) {
        let w = src.width, h = src.height
        let maxX = Double(w - 1) - 1e-6, maxY = Double(h - 1) - 1e-6
        let bpr = src.bytesPerRow
        let sbase = UnsafePointer(src.base)
        let out = dst.base + y &* dst.bytesPerRow
        for x in 0..<w {
            let pt = m.apply(Double(x), Double(y))
            let sx = min(max(pt.x, 0), maxX), sy = min(max(pt.y, 0), maxY)
            let ix = Int(sx), iy = Int(sy)
            let wx = Int32((sx - Double(ix)) * 256), wy = Int32((sy - Double(iy)) * 256)
            let q = sbase + (iy &* bpr &+ ix &* s)
            let v00 = Int32(q[0]), v01 = Int32(q[s]), v10 = Int32(q[bpr]), v11 = Int32(q[bpr &+ s])
            let top = (v00 &<< 8) &+ (v01 &- v00) &* wx
            let bot = (v10 &<< 8) &+ (v11 &- v10) &* wx
            out[x &* s] = UInt8(truncatingIfNeeded: ((top &<< 8) &+ (bot &- top) &* wy &+ 32768) &>> 16)
        }
    }

    @inline(__always)
    static func run(_ src: Channel, _ dst: Channel, _ m: AffineMap, stride s: Int) {
        let w = src.width, h = src.height
        guard w >= 2, h >= 2 else { return }
        let one = 65536.0
        let ax = Int32((m.a * one).rounded()), cx = Int32((m.c * one).rounded())
        let maxX = Double(w - 1) - 1e-6, maxY = Double(h - 1) - 1e-6
        let bpr = src.bytesPerRow
        let sbase = UnsafePointer(src.base)
        for y in 0..<min(h, dst.height) {
            let p0 = m.apply(0, Double(y))
            let p1 = m.apply(Double(w - 1), Double(y))
            let out = dst.base + y &* dst.bytesPerRow
            if min(p0.x, p1.x) >= 0, max(p0.x, p1.x) < maxX, min(p0.y, p1.y) >= 0, max(p0.y, p1.y) < maxY {
                // The whole row samples inside the source: no clamping.
                var fx = Int32((p0.x * one).rounded()), fy = Int32((p0.y * one).rounded())
                for x in 0..<w {
                    let ix = Int(fx &>> 16), iy = Int(fy &>> 16)
                    let wx = (fx &>> 8) & 0xFF, wy = (fy &>> 8) & 0xFF
                    let p = sbase + (iy &* bpr &+ ix &* s)
                    let v00 = Int32(p[0]), v01 = Int32(p[s]), v10 = Int32(p[bpr]), v11 = Int32(p[bpr &+ s])
                    let top = (v00 &<< 8) &+ (v01 &- v00) &* wx
                    let bot = (v10 &<< 8) &+ (v11 &- v10) &* wx
                    let v = ((top &<< 8) &+ (bot &- top) &* wy &+ 32768) &>> 16
                    out[x &* s] = UInt8(truncatingIfNeeded: v)
                    fx &+= ax; fy &+= cx
                }
            } else {
                for x in 0..<w {
                    let p = m.apply(Double(x), Double(y))
                    let sx = min(max(p.x, 0), maxX), sy = min(max(p.y, 0), maxY)
                    let ix = Int(sx), iy = Int(sy)
                    let wx = Int32((sx - Double(ix)) * 256), wy = Int32((sy - Double(iy)) * 256)
                    let q = sbase + (iy &* bpr &+ ix &* s)
                    let v00 = Int32(q[0]), v01 = Int32(q[s]), v10 = Int32(q[bpr]), v11 = Int32(q[bpr &+ s])
                    let top = (v00 &<< 8) &+ (v01 &- v00) &* wx
                    let bot = (v10 &<< 8) &+ (v11 &- v10) &* wx
                    out[x &* s] = UInt8(truncatingIfNeeded: ((top &<< 8) &+ (bot &- top) &* wy &+ 32768) &>> 16)
                }
            }
        }
    }

    /// Warps every channel of a frame's pixels from `source` (a copy of the frame's bytes with the
    /// same format) into `frame`, with `map` given in luma coordinates.
    public static func frame(_ frame: Frame, from source: UnsafeMutablePointer<UInt8>, map: AffineMap, workspace: WarpWorkspace? = nil) {
        let f = frame.format
        let dst = frame.data.assumingMemoryBound(to: UInt8.self)
        func ch(_ base: UnsafeMutablePointer<UInt8>, _ off: Int, _ w: Int, _ h: Int, _ bpr: Int, _ ps: Int) -> Channel {
            Channel(base: base + off, width: w, height: h, bytesPerRow: bpr, pixelStride: ps)
        }
        switch f.pixelFormat {
        case .grey:
            bilinear(from: ch(source, 0, f.width, f.height, f.bytesPerRow, 1), to: ch(dst, 0, f.width, f.height, f.bytesPerRow, 1), map: map, workspace: workspace)
        case .i420, .yuv422p, .nv12:
            let y = f.plane(0)
            bilinear(from: ch(source, y.offset, y.width, y.height, y.bytesPerRow, 1), to: ch(dst, y.offset, y.width, y.height, y.bytesPerRow, 1), map: map, workspace: workspace)
            let sy: Double = f.pixelFormat == .yuv422p ? 1 : 2
            let cm = map.subsampled(2, sy)
            if f.pixelFormat == .nv12 {
                let uv = f.plane(1)
                if let ws = workspace, ws.maxWidth >= uv.width, uv.width >= 4,
                   twoPassApplies(cm, Channel(base: dst, width: uv.width, height: uv.height, bytesPerRow: uv.bytesPerRow, pixelStride: 2)) {
                    pairTwoPass(source: source + uv.offset, dst: dst + uv.offset, columns: uv.width, rows: uv.height, bytesPerRow: uv.bytesPerRow, map: cm, ws: ws)
                    return
                }
                for k in 0..<2 {
                    bilinear(from: ch(source, uv.offset + k, uv.width, uv.height, uv.bytesPerRow, 2), to: ch(dst, uv.offset + k, uv.width, uv.height, uv.bytesPerRow, 2), map: cm, workspace: workspace)
                }
            } else {
                for i in 1...2 {
                    let p = f.plane(i)
                    bilinear(from: ch(source, p.offset, p.width, p.height, p.bytesPerRow, 1), to: ch(dst, p.offset, p.width, p.height, p.bytesPerRow, 1), map: cm, workspace: workspace)
                }
            }
        case .yuyv, .uyvy:
            let lumaOff = f.pixelFormat == .yuyv ? 0 : 1
            let chromaOff = f.pixelFormat == .yuyv ? 1 : 0
            if let ws = workspace, ws.maxWidth >= f.width, f.width >= 8, f.width % 2 == 0,
               twoPassApplies(map, Channel(base: dst, width: f.width, height: f.height, bytesPerRow: f.bytesPerRow, pixelStride: 2)) {
                packedTwoPass(source: source, dst: dst, width: f.width, height: f.height, bytesPerRow: f.bytesPerRow, lumaOffset: lumaOff, chromaOffset: chromaOff, map: map, ws: ws)
                return
            }
            bilinear(from: ch(source, lumaOff, f.width, f.height, f.bytesPerRow, 2), to: ch(dst, lumaOff, f.width, f.height, f.bytesPerRow, 2), map: map, workspace: workspace)
            let cm = map.subsampled(2, 1)
            for k in stride(from: 0, through: 2, by: 2) {
                bilinear(from: ch(source, chromaOff + k, f.width / 2, f.height, f.bytesPerRow, 4), to: ch(dst, chromaOff + k, f.width / 2, f.height, f.bytesPerRow, 4), map: cm, workspace: workspace)
            }
        case .rgb24, .bgr24:
            for k in 0..<3 {
                bilinear(from: ch(source, k, f.width, f.height, f.bytesPerRow, 3), to: ch(dst, k, f.width, f.height, f.bytesPerRow, 3), map: map, workspace: workspace)
            }
        case .bgra:
            for k in 0..<4 {
                bilinear(from: ch(source, k, f.width, f.height, f.bytesPerRow, 4), to: ch(dst, k, f.width, f.height, f.bytesPerRow, 4), map: map, workspace: workspace)
            }
        default:
            break // MJPEG and Bayer: warp the decoded view (`Frame.decoded`) instead
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
