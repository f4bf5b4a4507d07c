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

    /// Packed 4:2:2 (`vf_halve_packed422` in CViewfinderKernels: 16 outputs per step from 64 bytes
    /// of each row with the chroma masked off where the CPU has AVX2, a plain loop elsewhere; the
    /// same bits either way). The frame is read once here, straight from the camera's layout.
    static func halvePacked(_ luma: LumaView, _ out: GreyImage) {
        let w = min(out.width, luma.width / 2), h = min(out.height, luma.height / 2)
        guard w > 1, h > 0 else { halve(luma, out, stride: 2); return }
        vf_halve_packed422(luma.base, luma.bytesPerRow, w, h, out.pixels, out.width)
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

    /// Planar luma (`vf_halve_grey` in CViewfinderKernels: 16 outputs a step from 32 bytes of each
    /// row as 16-bit lanes holding a pixel pair each, so a pair's sum is (lane & 0xFF) + (lane >> 8)).
    static func halvePlanar(_ luma: LumaView, _ out: GreyImage) {
        let w = min(out.width, luma.width / 2), h = min(out.height, luma.height / 2)
        guard w > 0, h > 0 else { return }
        vf_halve_grey(luma.base, luma.bytesPerRow, w, h, out.pixels, out.width)
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
/// Luma is reduced to a pyramid (1/2, 1/4, 1/8; and 1/16 on pictures 800 px wide or more).
/// Blocks are placed on the previous frame's most
/// textured places (corners first). Their SAD surfaces, summed, give a robust coarse shift at 1/8,
/// refined at 1/4 the same way and then by one similarity over all blocks at 1/4 (on pictures
/// 800 px wide or more found first at 1/16 and 1/8, where a turn moves them fewer pixels), whose
/// translation is searched once more at 1/2 on pictures under 800 px wide (each block's window
/// placed by the similarity); each block is
/// then refined by Lucas–Kanade at 1/4, 1/2 and full resolution from the similarity's
/// displacement at its centre; blocks without texture are skipped. A similarity
/// (translation, rotation, scale) is fitted to the block displacements by least squares, outliers
/// are rejected and the fit repeated. Then the similarity is refined over every textured pixel of
/// the picture, coarse to fine (a dense step): always on pictures under 800 px wide, and
/// where few blocks are textured both ways on larger ones (down to full resolution under
/// 1200 px wide, to 1/2 from there). A dense result
/// that costs well above the recent frames' (a wrong basin: a sky with a few thin cables, shaken
/// quickly) is checked against a scan of translations at 1/2 resolution (at 1/4 on pictures
/// 1200 px wide or more). Before anything, a change of the frames' brightness (exposure, gain)
/// beyond 4 % is matched (`matchBrightness()`). Everything is
/// preallocated when the size is known.
public final class MotionEstimator {
    /// A similarity in full-resolution pixels about the picture centre: displacement
    /// (tx − θ·y + k·x, ty + θ·x + k·y) at (x, y).
    typealias Similarity = (tx: Double, ty: Double, theta: Double, k: Double)

    public let width: Int
    public let height: Int
    /// Pyramid levels of the previous and the current frame: 1/2, 1/4, 1/8.
    private var prev: [GreyImage]
    private var cur: [GreyImage]
    /// Full-resolution luma of the previous and the current frame, kept on pictures narrower
    /// than ``fullResolutionBelowWidth`` for the dense refinement's last level.
    private var prevFull: GreyImage?
    private var curFull: GreyImage?
    private var hasPrevious = false
    /// Block centres at 1/2 resolution, chosen on the previous frame, strongest texture first.
    private var centres: [(x: Int, y: Int)] = []
    /// Where blocks may go (1/2 resolution), each one's texture on the newest frame, and which
    /// are taken.
    private var candidates: [(x: Int, y: Int)] = []
    private var candidateScores: [Float] = []
    private var chosen: [Bool] = []
    private var candidateTensors: [(Float, Float, Float)] = []
    /// Per block, the structure tensor of its 13 × 13 window at 1/4 on the frame it was chosen
    /// on (the next match's previous frame): the choice measured it, the joint step and the 1/4
    /// Lucas–Kanade use it.
    private var blockTensors: [(Float, Float, Float)] = []
    /// The same at 1/8 or 1/16, for the joint similarity there (measured once per call).
    private var coarseTensors: [(Float, Float, Float)] = []
    /// Per block: displacement (full-resolution pixels), the structure tensor of its texture
    /// (per pixel) that weights it in the fit, and whether it is used.
    struct BlockMotion { var dx = 0.0, dy = 0.0, gxx = 0.0, gxy = 0.0, gyy = 0.0, ok = false }
    private var disp: [BlockMotion] = []
    /// One block's SAD surface, and the sum of the normalised surfaces of the blocks used
    /// ((2 × `sadRange` + 1)² entries).
    private var blockSurface = [Int](repeating: 0, count: 225)
    private var surface = [Double](repeating: 0, count: 225)
    private var res: [Double] = []
    /// The coarse search's pull toward the last frame's motion, per block at the edge of its
    /// range (``summedSADMinimum``).
    static let searchPrior = 0.5
    /// Half-size of an LK block at 1/2 resolution (so 2*half+1 pixels square).
    let half2 = 12
    let sadHalf = 6
    let sadRange = 7
    /// Range of the 1/2-resolution search around the similarity (1c in ``match``), pixels at 1/2.
    let halfSearchRange = 6
    /// The small pictures' path — the 1/2-resolution search, the dense step on every frame down
    /// to full resolution, the wrong-basin scan at 1/2 — runs on pictures narrower than this;
    /// wider ones take the large pictures' (the similarity from 1/16, the dense step only where
    /// few blocks have texture both ways, the scan at 1/4 from 1200 px wide). The 1/2 search is of use where the
    /// 1/4 level is small (160 px wide at 640x360) and thin edges vanish from it. The small
    /// path's cost grows with the area: at 1280x720 it cost 9.6–12.7 ms per frame
    /// (`VF_STAB_SCALE=2 viewfinder-report --diagnose-motion`, Bridge and Dragonfly, 60 frames),
    /// the large path 0.5–0.7 ms on Dragonfly at the same error (0.017–0.083 px RMS per frame)
    /// and 2.6–3.6 ms on Bridge's sparse sky at 0.10–0.13 px instead of 0.03–0.09 px; at
    /// 960x540 (`VF_STAB_SCALE=1.5`, 40 frames) 6.2–11.7 ms against 0.5–0.8 ms on Dragonfly at
    /// the same error, and on Bridge the same error for 7.9–8.8 ms instead of 11.1–11.7 ms with
    /// the dense step down to full resolution and the scan at 1/2 there
    /// (``fullResolutionBelowWidth``). (Until 27 Nov
    /// the limit was 1600 px, then 1200 px.)
    let halfSearchBelowWidth = 800
    /// On large pictures narrower than this the dense step on sparse pictures goes down to full
    /// resolution (from 1200 px wide, 1/2 is as fine as 640x360's full resolution and the step
    /// stops there): at 960x540 stopping at 1/2 left Bridge 0.14–0.25 px off per frame against
    /// 0.04–0.08 px.
    let fullResolutionBelowWidth = 1200

    private let blocksX: Int

    public init(width: Int, height: Int, blocksX: Int = 8, blocksY: Int = 6) {
        self.blocksX = max(1, blocksX)
        self.width = width
        self.height = height
        let w2 = width / 2, h2 = height / 2
        // 1/2, 1/4, 1/8, and 1/16 (made on pictures at least ``halfSearchBelowWidth`` wide only).
        prev = [GreyImage(width: w2, height: h2), GreyImage(width: w2 / 2, height: h2 / 2), GreyImage(width: w2 / 4, height: h2 / 4), GreyImage(width: w2 / 8, height: h2 / 8)]
        cur = [GreyImage(width: w2, height: h2), GreyImage(width: w2 / 2, height: h2 / 2), GreyImage(width: w2 / 4, height: h2 / 4), GreyImage(width: w2 / 8, height: h2 / 8)]
        // Candidate block centres at 1/2 resolution: a grid twice as dense each way as the blocks,
        // over the picture less a margin (4 % and the blocks' own reach). Each frame the blocks
        // go to the most textured candidates (``selectBlocks()``); until then, to an even grid.
        let mx = Double(w2) * 0.04 + Double(half2 + 8), my = Double(h2) * 0.04 + Double(half2 + 8)
        let cx = 2 * self.blocksX, cy = 2 * max(1, blocksY)
        for j in 0..<cy {
            for i in 0..<cx {
                let x = mx + max(0, Double(w2) - 2 * mx) * (Double(i) + 0.5) / Double(cx)
                let y = my + max(0, Double(h2) - 2 * my) * (Double(j) + 0.5) / Double(cy)
                candidates.append((Int(x), Int(y)))
            }
        }
        for j in 0..<cy where j % 2 == 1 {
            for i in 0..<cx where i % 2 == 1 { centres.append(candidates[j * cx + i]) }
        }
        candidateScores = Array(repeating: 0, count: candidates.count)
        candidateTensors = Array(repeating: (0, 0, 0), count: candidates.count)
        chosen = Array(repeating: false, count: candidates.count)
        placed = Array(repeating: false, count: candidates.count)
        cellBest = Array(repeating: -1, count: self.blocksX * max(1, blocksY))
        disp = Array(repeating: BlockMotion(), count: centres.count)
        savedOK = Array(repeating: false, count: centres.count)
        votingBlocks = Array(repeating: VotingBlock(), count: centres.count)
        blockTensors = Array(repeating: (0, 0, 0), count: centres.count)
        coarseTensors = Array(repeating: (0, 0, 0), count: centres.count)
        res.reserveCapacity(centres.count)
    }

    /// Forgets the previous frame (the next estimate is zero motion).
    public func reset() { hasPrevious = false; lastMotion = (0, 0, 0, 0); objectTracked = false }

    /// Motion from the previous frame given to this estimator to `luma` (content displacement:
    /// positive dx means the picture content moved right), about the picture centre.
    public func estimate(_ luma: LumaView) -> MotionEstimate {
        swap(&prev, &cur)
        swap(&prevFull, &curFull)
        if width < fullResolutionBelowWidth {
            if curFull == nil { curFull = GreyImage(width: width, height: height) }
            let g = curFull!
            vf_gather_samples(luma.base, luma.bytesPerRow, luma.pixelStride, min(width, luma.width), min(height, luma.height), g.pixels, g.width)
        }
        Pyramid.halve(luma, into: cur[0])
        Pyramid.halve(cur[0], into: cur[1])
        Pyramid.halve(cur[1], into: cur[2])
        if width >= halfSearchBelowWidth { Pyramid.halve(cur[2], into: cur[3]) }
        swap(&prevHistogram, &curHistogram)
        Self.histogram(cur[2], into: &curHistogram)
        if hasPrevious { matchBrightness() }
        defer {
            hasPrevious = true
            selectBlocks()
            savePatches(luma)
        }
        guard hasPrevious else { return MotionEstimate(confidence: 0) }
        return match(luma)
    }

    // MARK: Brightness

    /// Grey-level histograms of the previous and the current frame's 1/8 level.
    private var prevHistogram = [Int32](repeating: 0, count: 256)
    private var curHistogram = [Int32](repeating: 0, count: 256)
    /// The brightness ratio between the current and the previous frame (`brightnessGain(previous:current:)`)
    /// applied to the previous frame's levels and patches, or 1.
    public private(set) var lastBrightnessGain = 1.0
    /// Brightness ratios closer to 1 than this are left alone: on frames of one exposure the
    /// ratio measured stays within 2.9 % of 1 where motion brings new content in (eight real
    /// photographs — Bridge, sunset, Dragonfly, Storm, Garden, Kite, EveningGlow, ColdRipple —
    /// each under a pan, a fast pan, a tilt, quick shake, rotation shake and zoom at 640x360, 120
    /// frames each: mean 0.1–0.5 %, worst 0.6–2.9 %, the worst where a tilt moves a dark
    /// horizon), and those frames' estimates stay what they were. A change just under it costs
    /// about 0.1 px (a rendered scene, ±2.8 % per frame: 0.10 / 0.13 px at 640 / 1280 px wide
    /// against 0.03 / 0.04 px matched).
    static let brightnessTolerance = 0.04

    static func histogram(_ img: GreyImage, into h: inout [Int32]) {
        h.withUnsafeMutableBufferPointer { b in
            b.update(repeating: 0)
            let n = img.width &* img.height
            for k in 0..<n { b[Int(img.pixels[k])] &+= 1 }
        }
    }

    /// The brightness ratio of two frames from their grey-level histograms: the median of the
    /// ratios of their 5th, 10th … 95th percentiles, those inside (4, 245) in both (clipped
    /// highlights and the black floor do not scale). Frames of different exposure are not
    /// aligned yet, so pixels cannot be compared; percentiles barely move with a shift — except
    /// one that falls in a gap of the histogram (a dark pier in fog), which the median leaves out
    /// where a least-squares fit through the deciles read 4 % on plasma's ColdRipple between
    /// frames of one exposure. Nil where fewer than five percentiles are usable (a flat or
    /// clipped picture).
    static func brightnessGain(previous a: [Int32], current b: [Int32]) -> Double? {
        let total = a.reduce(0, +)
        guard total > 0, total == b.reduce(0, +) else { return nil }
        var ratios = InlineArray<19, Double>(repeating: 0)
        var used = 0
        var ia = 0, ib = 0, ca = Int(a[0]), cb = Int(b[0])
        for q in 1...19 {
            let rank = Int(total) * q / 20
            while ca <= rank, ia < 255 { ia += 1; ca += Int(a[ia]) }
            while cb <= rank, ib < 255 { ib += 1; cb += Int(b[ib]) }
            guard ia > 4, ia < 245, ib > 4, ib < 245 else { continue }
            // Within its grey level, where the rank falls among the level's pixels: on dark
            // pictures a whole level is several percent.
            @inline(__always) func within(_ level: Int, _ through: Int, _ h: [Int32]) -> Double {
                let n = Double(h[level]), below = Double(through) - n
                return Double(level) - 0.5 + (Double(rank) - below + 0.5) / n
            }
            ratios[used] = within(ib, cb, b) / within(ia, ca, a); used += 1
        }
        guard used >= 5 else { return nil }
        // Insertion sort of the few ratios, then the median.
        for i in 1..<used {
            let v = ratios[i]
            var j = i - 1
            while j >= 0, ratios[j] > v { ratios[j + 1] = ratios[j]; j -= 1 }
            ratios[j + 1] = v
        }
        return used % 2 == 1 ? ratios[used / 2] : (ratios[used / 2 - 1] + ratios[used / 2]) / 2
    }

    /// An exposure or gain change between two frames (an exposure loop converging, a light
    /// switched on) scales every grey level; the searches and Gauss–Newton steps compare raw
    /// grey levels and took such a step for motion (the demo's run at 1280x720: exposure 2 →
    /// 8.2 ms between two frames, mean luma 60 → 114, estimated 51.7 px with confidence 1
    /// against a true −2 px). Where the frames' brightness differs by more than
    /// ``brightnessTolerance`` the previous frame's levels, full-resolution copy and patches are
    /// scaled to the current one's (through a table, clipped at 255 as the camera clips), and
    /// the blocks' structure tensors with them. The previous frame is the estimator's own copy;
    /// the current one stays as the camera gave it and is the next frame's reference.
    private func matchBrightness() {
        lastBrightnessGain = 1
        guard let g = Self.brightnessGain(previous: prevHistogram, current: curHistogram), abs(g - 1) > Self.brightnessTolerance else { return }
        lastBrightnessGain = g
        var table = [UInt8](repeating: 0, count: 256)
        for v in 0..<256 { table[v] = UInt8(min(255, (Double(v) * g).rounded())) }
        func apply(_ p: UnsafeMutablePointer<UInt8>, _ n: Int) {
            table.withUnsafeBufferPointer { t in
                for k in 0..<n { p[k] = t[Int(p[k])] }
            }
        }
        for (level, img) in prev.enumerated() where level < 3 || width >= halfSearchBelowWidth {
            apply(img.pixels, img.width * img.height)
        }
        if let full = prevFull { apply(full.pixels, full.width * full.height) }
        let side = patchSide
        for (i, valid) in patchValid.enumerated() where valid { apply(patches + i * side * side, side * side) }
        let g2 = Float(g * g)
        for i in blockTensors.indices {
            blockTensors[i] = (blockTensors[i].0 * g2, blockTensors[i].1 * g2, blockTensors[i].2 * g2)
        }
    }

    /// Puts the blocks where the newest frame has texture in two directions (the smaller
    /// eigenvalue of the structure tensor of a 13 × 13 window at 1/4: corners first, then the
    /// strongest edges), best first: first one to each cell of 2 × 2 candidates whose best has
    /// texture at all (``spreadTexture``), then the rest to the most textured candidates left.
    /// A regular grid wasted most blocks on sky where a picture's texture is a few cables and a
    /// clamp (lomiri's Bridge: 9 of 48 blocks had texture, all on parallel cables, so the shift
    /// along them was guessed); the most textured candidates alone put every block on a
    /// high-contrast thing moving across soft mountains (aitzgorri with a textured object over
    /// 10 % of the picture: 48 of 48 blocks on it, the estimate its motion, 4.1 px RMS per
    /// frame), where one block per textured cell leaves the background enough blocks to be
    /// told apart (``dominantMotion(_:cx:cy:)``; 0.13 px). The next frame's motion is measured
    /// at these blocks.
    private func selectBlocks() {
        let img = cur[1], half = half2 / 2, n = 2 * half + 1
        // The arrays the selection loops over, as locals (swapped out and back: no copy, no
        // allocation), so their accesses in the loops need no dynamic exclusivity checks.
        var candidateScores: [Float] = [], chosen: [Bool] = [], placed: [Bool] = [], cellBest: [Int] = []
        swap(&candidateScores, &self.candidateScores)
        swap(&chosen, &self.chosen)
        swap(&placed, &self.placed)
        swap(&cellBest, &self.cellBest)
        defer {
            swap(&candidateScores, &self.candidateScores)
            swap(&chosen, &self.chosen)
            swap(&placed, &self.placed)
            swap(&cellBest, &self.cellBest)
        }
        let candidates = self.candidates, blocks = centres.count
        for (k, c) in candidates.enumerated() {
            let x = c.x / 2, y = c.y / 2
            chosen[k] = false
            guard x - half - 1 >= 0, y - half - 1 >= 0, x + half + 1 < img.width, y + half + 1 < img.height else {
                candidateScores[k] = -1; candidateTensors[k] = (0, 0, 0); continue
            }
            let (gxx, gxy, gyy) = Self.tensor(UnsafePointer(img.pixels + ((y &- half) &* img.width &+ x &- half)), rowStride: img.width, size: n)
            candidateTensors[k] = (gxx, gxy, gyy)
            candidateScores[k] = (gxx + gyy) - Self.largestEigenvalue(gxx, gxy, gyy)
        }
        // First one block to each cell (2 × 2 candidates) that has texture both ways at all
        // (``spreadTexture``), the most textured cells first; the rest to the most textured
        // candidates left. Then all in order of texture.
        let cellsX = blocksX
        for c in cellBest.indices { cellBest[c] = -1 }
        for k in candidates.indices where candidateScores[k] >= Self.spreadTexture * 169 {
            let c = (k / (2 * cellsX)) / 2 * cellsX + (k % (2 * cellsX)) / 2
            if cellBest[c] < 0 || candidateScores[k] > candidateScores[cellBest[c]] { cellBest[c] = k }
        }
        var taken = 0
        while taken < blocks {
            var bestCell = -1
            for c in cellBest.indices where cellBest[c] >= 0 && (bestCell < 0 || candidateScores[cellBest[c]] > candidateScores[cellBest[bestCell]]) { bestCell = c }
            guard bestCell >= 0 else { break }
            chosen[cellBest[bestCell]] = true
            cellBest[bestCell] = -1
            taken += 1
        }
        while taken < blocks {
            var best = -1
            for k in 0..<candidates.count where !chosen[k] && (best < 0 || candidateScores[k] > candidateScores[best]) { best = k }
            guard best >= 0 else { break }
            chosen[best] = true
            taken += 1
        }
        for k in candidates.indices { placed[k] = false }
        for i in 0..<blocks {
            var best = -1
            for k in 0..<candidates.count where chosen[k] && !placed[k] && (best < 0 || candidateScores[k] > candidateScores[best]) { best = k }
            guard best >= 0 else { break }
            placed[best] = true
            centres[i] = candidates[best]
            blockTensors[i] = candidateTensors[best]
        }
    }
    /// Per cell of 2 × 2 candidates, its most textured candidate (``selectBlocks()``), and which
    /// candidates have been given a block.
    private var cellBest: [Int] = []
    private var placed: [Bool] = []
    /// Texture both ways (the smaller eigenvalue of the structure tensor at 1/4, per pixel of
    /// the 13 × 13 window) a cell needs to be given one of the spread blocks. A blue sky or a
    /// flat wall measures 0–2 (sensor noise); soft mountains, clouds and grass 4–25; cables and
    /// branches 20–300; a high-contrast pattern 400.
    static let spreadTexture: Float = 4

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
            // As in the refinement: the next patch's rows, a patch of work ahead.
            if i + 1 < centres.count { prefetchRefinement(luma, centre: centres[i + 1], (0, 0)) }
            let x = c.x * 2, y = c.y * 2
            guard x - r >= 0, y - r >= 0, x + r < luma.width, y + r < luma.height else { patchValid[i] = false; continue }
            vf_gather_samples(luma.pointer(x: x - r, y: y - r), luma.bytesPerRow, luma.pixelStride, side, side, patches + i * side * side, side)
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

    /// Prefetches the part of `luma` that ``refine(_:_:dx:dy:)`` reads for the block at `centre`
    /// (in 1/2-level units) displaced by `d` (full resolution), with a pixel of slack all round.
    private func prefetchRefinement(_ luma: LumaView, centre: (x: Int, y: Int), _ d: (Double, Double)) {
        guard d.0.isFinite, d.1.isFinite, abs(d.0) < 1e6, abs(d.1) < 1e6 else { return }
        let reach = half0 + 2
        let px = centre.x * 2 + Int(d.0.rounded()), py = centre.y * 2 + Int(d.1.rounded())
        let x0 = max(0, px - reach), y0 = max(0, py - reach)
        let x1 = min(luma.width - 1, px + reach), y1 = min(luma.height - 1, py + reach)
        guard x0 <= x1, y0 <= y1 else { return }
        vf_prefetch_rows(luma.pointer(x: x0, y: y0), luma.bytesPerRow, (x1 - x0) * luma.pixelStride + 1, y1 - y0 + 1)
    }

    private func match(_ luma: LumaView) -> MotionEstimate {
        // 1. Coarse: SAD search at 1/8 per block, the surfaces normalised and summed
        // (``summedSADMinimum``).
        let coarse = summedSADMinimum(prev[2], cur[2], level: 4, around: (0, 0), range: sadRange, quarterFirst: true,
                                      prior: (lastMotion.tx / 8, lastMotion.ty / 8))
        let n = coarse.blocks
        var gx = Double(coarse.dx) * 8, gy = Double(coarse.dy) * 8 // 1/8 resolution → full
        // 1a. The same search at 1/4 within ±3 of the coarse shift (±12 px), over the most
        // textured half of the blocks, to a fraction of a pixel (a parabola through the summed
        // surface's minimum and its neighbours). At 1/8 a thin edge is a fraction of a pixel wide and its valley is faint:
        // on a sky crossed by cables in two directions (lomiri's Bridge) the 1/8 minimum can lie
        // a step (8 px) off along the stronger cables, and the refinement that follows moves each
        // block across its own edge only, so such an error stayed (2.4 px RMS per frame there).
        if n > 0 {
            let fine = summedSADMinimum(prev[1], cur[1], level: 2, around: (2 * coarse.dx, 2 * coarse.dy), range: 3, quarterFirst: false, limit: centres.count / 2)
            if fine.blocks >= 3 {
                gx = (Double(fine.dx) + fine.fx) * 4; gy = (Double(fine.dy) + fine.fy) * 4
            }
        }
        // 1b. Then one similarity over every textured block at 1/4 (Gauss–Newton on the blocks'
        // pixels together, as step 4 does at full resolution): rotation moves blocks far from
        // the centre by pixels the shift alone cannot give them, and each block's refinement
        // below starts from the similarity's displacement at its own centre. A step further than
        // the search's own precision is not trusted.
        var seed = (tx: gx, ty: gy, theta: 0.0, k: 0.0)
        // On pictures 800 px wide or more the same similarity first at 1/16 and 1/8: a turn
        // moves the blocks by three times as many pixels at 1080p as at 640x360. At 1/4 a frame
        // turned by 1.2° or more puts the outer blocks 5 px or more from where the shift alone
        // puts them, beyond where Gauss–Newton on a 13 × 13 window converges, and the summed
        // searches, which assume one shift for all blocks, land up to 15 px off. (At 1920x1080,
        // real photographs under 1° rotation shake: 2.4 px error per frame before, every frame
        // turned by 1.2° or more wrong by 4–10 px.) The coarse similarity must stay within the
        // 1/8 search's reach of its shift, and the 1/4 step within 4 px of where it starts.
        var start = seed, coarseSimilarity = false
        if n > 0, width >= halfSearchBelowWidth {
            for level in [3, 2] {
                if let j = jointSimilarity(start, level: level, iterations: 4),
                   abs(j.tx - gx) <= 24, abs(j.ty - gy) <= 24, abs(j.theta) < 0.1, abs(j.k) < 0.05 {
                    start = j
                    coarseSimilarity = true
                }
            }
        }
        if n > 0, let j = jointSimilarity(start, level: 1, iterations: coarseSimilarity ? 3 : 2),
           abs(j.tx - start.tx) <= 4, abs(j.ty - start.ty) <= 4, abs(j.theta) < (coarseSimilarity ? 0.1 : 0.05), abs(j.k) < 0.05 {
            seed = j
        } else if coarseSimilarity {
            seed = start
        }
        // 1c. The summed SAD search once more at 1/2, each block's window centred where the
        // similarity puts it (so rotation does not smear the sum), for a common shift of ±12 px:
        // at 1/4 a thin edge is a fraction of a pixel wide, so on a sky crossed by cables the
        // 1/4 steps above can land several pixels off along them, which the per-block
        // refinement below cannot undo; at 1/2 the cables are a pixel or two wide. lomiri's
        // Bridge at 640x360, error per frame: 0.59 → 0.50 px RMS still, 2.60 → 1.62 px in a
        // 4 px/frame pan, 0.80 → 0.51 px under 1° rotation shake; textured photographs are
        // unchanged (0.02 px). Where every cable in view is parallel the motion along them is
        // not in the picture, and no search finds it.
        if n > 0, width < halfSearchBelowWidth {
            let half = summedSADMinimum(prev[0], cur[0], level: 1, around: (0, 0), range: halfSearchRange, quarterFirst: false, seed: seed)
            if half.blocks >= 3 {
                seed.tx = (Double(half.dx) + half.fx) * 2
                seed.ty = (Double(half.dy) + half.fy) * 2
            }
        }
        gx = seed.tx; gy = seed.ty
        // 2. Per block: LK at 1/4 from the seed's displacement there, then at 1/2, then at full
        // resolution.
        let cx = Double(width) / 2, cy = Double(height) / 2
        func seeded(_ c: (x: Int, y: Int)) -> (Double, Double) {
            let pcx = Double(c.x * 2) - cx, pcy = Double(c.y * 2) - cy
            return (seed.tx - seed.theta * pcy + seed.k * pcx, seed.ty + seed.theta * pcx + seed.k * pcy)
        }
        var next = centres.isEmpty ? (0, 0) : seeded(centres[0])
        for (i, c) in centres.enumerated() {
            let (sx, sy) = next
            // The frame's full-resolution bytes that the next block's refinement will read are
            // still in memory, not in the cache (the frame arrived once, by DMA or a copy): ask
            // for them a block of work ahead, where the seed puts them.
            if i + 1 < centres.count {
                next = seeded(centres[i + 1])
                prefetchRefinement(luma, centre: centres[i + 1], next)
            }
            var m = BlockMotion(dx: sx, dy: sy)
            if let r = lk(prev[1], cur[1], c.x / 2, c.y / 2, half: half2 / 2, dx: sx / 4, dy: sy / 4, iterations: 3, tensor: blockTensors[i]) {
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
        var fit = fitSimilarity(cx: cx, cy: cy)
        maskActive = false
        votePointsFresh = false
        if separatesMovingObjects, let f = fit, dominantMotion(f, cx: cx, cy: cy) {
            // The winner's blocks make the fit; where the object had every block, its motion.
            let left = centres.indices.reduce(0) { $0 + (disp[$1].ok ? 1 : 0) }
            fit = left >= 8 ? fitSimilarity(cx: cx, cy: cy) ?? maskKeep : maskKeep
        }
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
        var strong = 0
        for d in disp where d.ok {
            let lmax = Self.largestEigenvalue(Float(d.gxx), Float(d.gxy), Float(d.gyy))
            let lmin = Float(d.gxx + d.gyy) - lmax
            if lmin > 0.1 * lmax && lmax > 4 * Self.minTexture { strong += 1 }
        }
        let inliers = disp.reduce(0) { $0 + ($1.ok ? 1 : 0) }
        // A dozen consistent textured blocks pin a similarity down; fewer, less surely.
        var confidence = min(1, Double(inliers) / 12)
        // 4. Every pixel with texture, coarse to fine (``denseRefine``): on every frame of a
        // picture under 800 px wide (1/8, 1/4, 1/2 and full resolution), and on larger ones
        // where fewer than 16 blocks are textured both ways (down to full resolution under
        // 1200 px wide; from there 1/8, 1/4 and 1/2: at 1920x1080 the
        // 1/2 level is finer than 640x360's full resolution; stopping at 1/4 left lomiri's
        // Bridge 0.29 / 0.58 / 0.56 px off per frame still / in a 12 px/frame pan / under slowly
        // decaying shake, against 0.07 / 0.08 / 0.06 px with it, for about 2.5 ms more per
        // frame on such pictures only). Where the texture is
        // a few places (a kite and clouds in a blue sky, soft clouds over a guard rail, cables
        // across a sky) the blocks cluster on them and rotation and the shift along edges are
        // guessed; all the picture's textured pixels pin them down. Error per frame at 640x360
        // (`viewfinder-report --diagnose-motion`, still camera): Kite 1.47 → 0.07 px, Storm
        // 0.77 → 0.10 px, Bridge 0.50 → 0.10 px; under 1° rotation shake Kite 4.05 → 0.09 px,
        // Wood 0.63 → 0.06 px; other photographs unchanged (0.02–0.03 px).
        var denseUsed = 0
        if strong < 16 || width < halfSearchBelowWidth {
            // Under 1200 px wide both full-resolution frames are kept (``estimate``).
            let finest = width < fullResolutionBelowWidth ? -1 : 0
            // One pixel per 4 × 4 cell; at full resolution per `fullResolutionCell` square.
            for level in stride(from: 2, through: finest, by: -1) {
                // `dominantMotion` chose this frame's 1/4 pixels already (left as chosen).
                if votePointsFresh && level == Self.voteLevel {
                    if maskActive { applyMotionMask(&densePoints[level + 1], level: level) }
                    continue
                }
                selectDensePixels(level < 0 ? prevFull! : prev[level], minGradient2: level < 0 ? 2 * Self.denseMinGradient2 : Self.denseMinGradient2,
                                  cell: level < 0 ? fullResolutionCell(halfLevelPoints: densePoints[1].count) : denseCell, into: &densePoints[level + 1])
                if maskActive { applyMotionMask(&densePoints[level + 1], level: level) }
            }
            // Starts: the blocks' fit (or, without one, the searches' shift), the last frame's
            // motion (a pan goes on) and no motion; each runs through every level, and the one
            // with the lowest robust cost at the finest wins (compared at 1/4 or 1/2 the thin
            // cables across lomiri's Bridge are too faint to tell them apart). Where the picture
            // has almost no texture at 1/8 (a sky with thin cables) the searches can be 10–40 px
            // off, and a start that far away converges to a wrong place whose cost shows it.
            let blockStart: Similarity = fit ?? (tx: gx, ty: gy, theta: seed.theta, k: seed.k)
            // With 16 or more blocks textured both ways their fit is sound: it alone is refined.
            let starts: [Similarity] = strong >= 16 ? [blockStart] : [blockStart, lastMotion, (0, 0, 0, 0)]
            var best: (f: Similarity, used: Int, cost: Double)?
            denseVisited.removeAll(keepingCapacity: true)
            // Until five frames have been solved there is no floor yet (0): every start runs, and
            // the scan below always.
            let floor = recentDenseCostMedian()
            for (i, start) in starts.enumerated() {
                // A start that ended at a cost the scan below would not doubt ends the search.
                // Running the other starts anyway gave the same estimate on every frame of 58
                // sequences (`--diagnose-motion`: Bridge, Kite and Storm under the eleven motions
                // at 1080p; those and RainDrops and LadyBird under five at 640x360); ending here
                // costs Bridge filmed hand-held at 1080p 5 % fewer instructions (the dense
                // passes' a third fewer).
                if i > 0, let b = best, floor > 0, b.cost <= Self.denseCostDoubt * floor { break }
                if i > 0, abs(start.tx - blockStart.tx) + abs(start.ty - blockStart.ty) < 1 { continue }
                guard let r = denseCoarseToFine(from: start, coarsest: 2, finest: finest) else { continue }
                // A later start must be clearly better (3 %): where the picture cannot tell
                // the motion along its edges the costs tie, and the blocks' fit, then a pan
                // going on, are the likelier motions.
                if best == nil || r.cost < 0.97 * best!.cost { best = r }
            }
            // Every start can end in a wrong basin where the picture is a sky crossed by a few
            // thin lines and the frame moved several pixels (Bridge's cables under quick shake):
            // the winner then costs well above the frames before it. There, translations are
            // scanned at 1/2 resolution (±20 px), and the scan's best few places run through the
            // finer levels as further starts. The scan holds rotation and scale: at the wrong
            // winner's, and — when that is a turn or a zoom of its own — at none as well. A wrong
            // basin often has a wrong scale or turn too (Bridge, a 4 px/frame pan: a 2.4 % zoom
            // in one frame), and at it the right translation is no minimum of the scan
            // (`viewfinder-report --diagnose-motion`: frames 11 and 29 ended 5.4 and 2.0 px off
            // with costs 2.5 and 1.8 times the truth's).
            // On pictures 1200 px wide or more the scan runs at 1/4 (±40 px): the shake and the
            // pans are three times as many pixels at 1080p as at 640x360 (Bridge filmed at
            // 1080p in a 12 px/frame pan: frames 10 px off in wrong basins, 2.6 px RMS). Under
            // 1200 px it stays at 1/2: at 960x540 the 1/4 level is 240 px wide and Bridge's
            // cables fade from it (zoomed 1.4×, a frame ended 12 px off at 1/4, 0.4 px at 1/2).
            if let b = best {
                let scanLevel = width < fullResolutionBelowWidth ? 0 : 1
                if floor == 0 || b.cost > Self.denseCostDoubt * floor {
                    // Rotation and scale moving the picture's corners less than a pixel are none.
                    let turnsOrZooms = cornerShift(theta: b.f.theta, k: b.f.k) > 1
                    // Without a turn or zoom of its own the scan holds none (its grid is whole
                    // pixels of 1/4 or 1/2 resolution): a translation-only scan is one sweep of the
                    // points (`vf_dense_scan`) instead of a dense pass at each of 441 translations.
                    for pass in 0..<(turnsOrZooms ? 2 : 1) {
                        let holdsTurn = pass == 0 && turnsOrZooms
                        let theta = holdsTurn ? b.f.theta : 0, k = holdsTurn ? b.f.k : 0
                        for start in translationScan(theta: theta, k: k, radius: 10, level: scanLevel) {
                            if pass == 0 && abs(start.tx - b.f.tx) + abs(start.ty - b.f.ty) < 1.5 * Double(1 << scanLevel) { continue }
                            guard let r = denseCoarseToFine(from: start, coarsest: scanLevel, finest: finest) else { continue }
                            if r.cost < 0.97 * best!.cost { best = r }
                        }
                    }
                }
            }
            if let best {
                rememberDenseCost(best.cost)
                fit = best.f
                denseUsed = best.used
                confidence = max(confidence, min(1, Double(best.used) / 300))
            }
        }
        guard var f = fit else {
            return MotionEstimate(dx: gx, dy: gy, confidence: n > 0 ? 0.2 : 0)
        }
        // 5. Where the dense step did not run or found too few pixels: all inlier patches at full
        // resolution at once, one similarity fitted to every pixel of them (Gauss–Newton). With
        // enough blocks textured both ways the block fit is already as good (0.01 px on
        // photographs) and this is skipped.
        for _ in 0..<(strong >= 16 || denseUsed > 0 ? 0 : 2) {
            guard let g = refineJointly(luma, f, cx: cx, cy: cy) else { break }
            let step = abs(g.tx - f.tx) + abs(g.ty - f.ty)
            f = g
            if step < 0.01 { break }
        }
        lastMotion = f
        return MotionEstimate(dx: f.tx, dy: f.ty, angle: -f.theta, scale: 1 + f.k, confidence: confidence)
    }

    // MARK: Moving objects

    /// Whether a moving object — a car, a person, anything textured crossing the picture, even
    /// one that takes every block from a soft background — is told apart from the picture's
    /// motion and followed from frame to frame (`dominantMotion`); true by default. Off, the
    /// blocks' fit and the dense step take every block and pixel (the estimator before 27 Nov),
    /// for comparison.
    public var separatesMovingObjects = true

    /// Whether ``dominantMotion(_:cx:cy:)`` found a moving thing this frame (the dense step
    /// then leaves out its pixels); its scratch: the blocks' flags while a motion is refitted,
    /// and the pixels that voted for each motion.
    private var maskActive = false
    private var savedOK: [Bool] = []
    private var voteSplit = [DensePoints(), DensePoints()]
    private var voteCells: [Int16] = []
    struct VotingBlock { var px = 0.0, py = 0.0, dx = 0.0, dy = 0.0, nxx = 0.0, nxy = 0.0, nyy = 0.0, weight = 0, strong = false, free = true }
    private var votingBlocks: [VotingBlock] = []
    /// Blocks further than this from a motion (pixels at 640 px wide, in proportion above) do
    /// not move with it.
    static let dominantTolerance = 1.0

    /// Where the blocks disagree — a car, a person, a waving branch crossing the picture — the
    /// least-squares fit settles between the motions, and the later rejection of the blocks
    /// furthest from it keeps the side with more blocks: the moving thing's, when it is the
    /// most textured part of the picture (blocks are placed by texture). Here the blocks are
    /// split into the two motions most of them share (each a similarity two blocks textured
    /// both ways define, or one block's shift at the fit's turn and scale; a block along an
    /// edge agrees with any motion along it and counts a fifth), each refitted to its blocks.
    /// Then the picture's textured pixels decide: at 1/4 resolution, the level's dense pixels
    /// (one per 4 × 4 cell wherever there is texture) each vote for the motion they match
    /// better by ``voteMargin`` grey levels, each motion is refined on its voters and the vote
    /// taken again (twice: the blocks on the background started from a seed the object pulled
    /// and can be a pixel off), and the motion more 8 × 8 cells of the level voted for wins (a
    /// textured object has a decided pixel everywhere, a soft background only here and there).
    /// The blocks off the winner are taken off the fit, and the dense step leaves out the
    /// pixels that match the loser better (``applyMotionMask(_:level:)``).
    /// The block motions are sought when a fifth of the blocks in use lie off the first fit by
    /// more than ``dominantTolerance``. Where they agree instead (or the second motion has too
    /// few blocks) the picture's pixels may still not: a textured object can take every block
    /// from a soft background. Then the 1/4 pixels the fit (sharpened on them) leaves more than
    /// ``unexplainedResidual`` off, taken from the 8 × 8 cells where most are, are scanned for
    /// a motion of their own when they are a fifth of all — on pictures with texture in 40 % of
    /// the level's cells, and at 800 px wide or more only where the dense step chooses these
    /// pixels anyway. The cells then decide as above. A thing told apart is carried to the next
    /// frame (its cells; see the tracking branch), and two motions are kept only where they
    /// explain the 1/4 pixels far better than one (``robustCost(_:)``). Returns whether the
    /// dense step is to leave the thing's pixels out.
    ///
    /// A photograph's luma as the scene (Dragonfly, as `largeTurnsAt1080p` renders it) with a
    /// textured rectangle over 30 % of the picture moving 6 px/frame across the shaken camera
    /// (`StabiliseTests` "a textured object moving across a photograph"): 2.4 / 2.6 px RMS per
    /// frame at 640x360 / 1280x720 before (the estimate followed the object or settled
    /// between), 0.06 / 0.05 px with this and the spread blocks (``selectBlocks()``). Over a soft
    /// background (mate's Garden, lomiri's Wine; the object over 30 %): 5.36 / 5.26 px without
    /// separation, 0.039 / 0.018 px (`StabiliseTests`). Not solved: where the background is a sky
    /// with a few thin cables (lomiri's Bridge) or a blue sky (plasma's Kite) there is nothing
    /// to make a motion of its own from, and the frames before a thing is told apart the first
    /// time (aitzgorri under the report's periodic object: up to 8 frames; README, "A moving
    /// object over a soft background").
    private func dominantMotion(_ f: Similarity, cx: Double, cy: Double) -> Bool {
        let tol = Self.dominantTolerance * max(1, Double(width) / 640)
        var used = 0, off = 0
        for (i, c) in centres.enumerated() where disp[i].ok {
            used += 1
            if residual(f, i, c, cx, cy) > tol { off += 1 }
        }
        guard used >= 6 else { return false }
        // Per block, what the searches below read many times: its position from the centre,
        // its displacement, its tensor over its largest eigenvalue (the residual's form: a
        // block's misfit along the direction its texture measures), and its weight — a block
        // along an edge agrees with any motion along it and counts a fifth of one textured both
        // ways; blocks not in use count nothing.
        let tol2 = tol * tol
        for (i, c) in centres.enumerated() {
            let d = disp[i]
            let lmax = Self.largestEigenvalue(Float(d.gxx), Float(d.gxy), Float(d.gyy))
            let strong = Float(d.gxx + d.gyy) - lmax > 0.1 * lmax && lmax > 4 * Self.minTexture
            let n = 1 / max(Double(lmax), 1e-9)
            votingBlocks[i] = VotingBlock(px: Double(c.x * 2) - cx, py: Double(c.y * 2) - cy, dx: d.dx, dy: d.dy,
                                          nxx: d.gxx * n, nxy: d.gxy * n, nyy: d.gyy * n, weight: d.ok ? (strong ? 5 : 1) : 0, strong: d.ok && strong, free: true)
        }
        @inline(__always) func fits(_ h: Similarity, _ b: VotingBlock) -> Bool {
            let ex = h.tx - h.theta * b.py + h.k * b.px - b.dx, ey = h.ty + h.theta * b.px + h.k * b.py - b.dy
            return ex * ex * b.nxx + 2 * ex * ey * b.nxy + ey * ey * b.nyy <= tol2
        }
        // The blocks a motion explains (weighted), among those `free` (not explained by the
        // first motion when the second is sought).
        @inline(__always) func score(_ h: Similarity) -> Int {
            var blocks = 0
            for b in votingBlocks where b.weight > 0 && b.free && fits(h, b) { blocks += b.weight }
            return blocks
        }
        func best(excluding other: Similarity?) -> (f: Similarity, blocks: Int) {
            for i in votingBlocks.indices { votingBlocks[i].free = other.map { !fits($0, votingBlocks[i]) } ?? true }
            var best = f, bestScore = other == nil ? score(f) : 0
            let minSeparation2 = Double(width * width) / 64
            for i in votingBlocks.indices where votingBlocks[i].strong && votingBlocks[i].free {
                let bi = votingBlocks[i]
                let single: Similarity = (bi.dx + f.theta * bi.py - f.k * bi.px, bi.dy - f.theta * bi.px - f.k * bi.py, f.theta, f.k)
                let s1 = score(single)
                if s1 > bestScore { best = single; bestScore = s1 }
                for j in (i + 1)..<votingBlocks.count where votingBlocks[j].strong {
                    let bj = votingBlocks[j]
                    let ex = bj.px - bi.px, ey = bj.py - bi.py
                    let d2 = ex * ex + ey * ey
                    guard d2 >= minSeparation2 else { continue }
                    let ddx = bj.dx - bi.dx, ddy = bj.dy - bi.dy
                    let k = (ex * ddx + ey * ddy) / d2, theta = (ex * ddy - ey * ddx) / d2
                    guard abs(theta) < Self.denseMaxRotation / 2, abs(k) < Self.denseMaxScale / 2 else { continue }
                    let pair: Similarity = (bi.dx + theta * bi.py - k * bi.px, bi.dy - theta * bi.px - k * bi.py, theta, k)
                    let s2 = score(pair)
                    if s2 > bestScore { best = pair; bestScore = s2 }
                }
            }
            return (best, bestScore)
        }
        // Each motion fitted again to its own blocks (a similarity two blocks define carries
        // their errors; the tolerance lets it lie up to a pixel off).
        func refit(_ h: Similarity) -> Similarity {
            for i in centres.indices { savedOK[i] = disp[i].ok; disp[i].ok = disp[i].ok && residual(h, i, centres[i], cx, cy) <= tol }
            let g = fitSimilarity(cx: cx, cy: cy)
            for i in centres.indices { disp[i].ok = savedOK[i] }
            return g ?? h
        }
        var first: (f: Similarity, blocks: Int) = (f, 0), second: (f: Similarity, blocks: Int) = (f, 0)
        var found = false
        // On large pictures the pixels' own tests below run only where the dense step chooses
        // the 1/4 pixels anyway (fewer than 16 blocks textured both ways): at 1080p with enough
        // blocks it does not run, and this would add its choice and scan to every frame.
        let pixelTests = width < halfSearchBelowWidth || votingBlocks.reduce(0, { $0 + ($1.strong ? 1 : 0) }) < 16
        let tracking = objectTracked && pixelTests
        objectTracked = false
        if !tracking && 5 * off >= used {
            first = best(excluding: nil)
            second = best(excluding: first.f)
            if first.blocks >= 15, second.blocks >= 15 {
                first.f = refit(refit(first.f))
                second.f = refit(refit(second.f))
                found = true
            }
        }
        if !found && !pixelTests { return false }
        // Which motion more of the picture's texture follows: each textured pixel at 1/4 votes
        // for the motion it matches clearly better.
        selectDensePixels(prev[Self.voteLevel], minGradient2: Self.denseMinGradient2, cell: denseCell, into: &densePoints[Self.voteLevel + 1])
        votePointsFresh = true
        guard densePoints[Self.voteLevel + 1].count >= 24 else { return false }
        let grid = 8, level = cur[Self.voteLevel], gw = (level.width + grid - 1) / grid, gh = (level.height + grid - 1) / grid
        if voteCells.count < gw * gh { voteCells = [Int16](repeating: 0, count: gw * gh) }
        if objectCells.count != gw * gh { objectCells = [Bool](repeating: false, count: gw * gh); objectRegion = objectCells }
        /// The 8 × 8 cell of the level that dense pixel `n` of `p` lies in.
        @inline(__always) func cellOf(_ p: DensePoints, _ n: Int) -> Int { min(gh - 1, Int(p.y[n]) / grid) * gw + min(gw - 1, Int(p.x[n]) / grid) }
        if tracking && !found {
            // A moving thing found on the frame before: its cells, widened by one (it moved a
            // few pixels since), hold it; the picture's motion is sought on the pixels outside
            // them and the thing's on those inside — whether or not this frame's motions are far
            // enough apart to leave pixels unexplained.
            for c in 0..<(gw * gh) {
                let x = c % gw, y = c / gw
                var near = false
                for dy in -1...1 { for dx in -1...1 where (0..<gw).contains(x + dx) && (0..<gh).contains(y + dy) && objectCells[(y + dy) * gw + x + dx] { near = true } }
                objectRegion[c] = near
            }
            let all = densePoints[Self.voteLevel + 1]
            voteSplit[0].removeAll(); voteSplit[1].removeAll()
            for n in 0..<all.count {
                let c = cellOf(all, n)
                if !objectRegion[c] { voteSplit[0].append(all, at: n) } else if objectCells[c] { voteSplit[1].append(all, at: n) }
            }
            if voteSplit[0].count >= 24, voteSplit[1].count >= 24 {
                // The picture's motion: the blocks' fit, the last frame's, and the scan's places,
                // each refined on the outside pixels; the thing's: the fit and its last motion.
                // The scan reaches ±24 px at 640 wide here (±40 px to find a thing the first
                // time): the same results on every case measured, a third of the instructions
                // telling the motions apart cost (callgrind, Garden under a 30 % object).
                let outside = bestRefined([f, maskKeep], scan: (f.theta, f.k, 6), on: &voteSplit[0])
                let inside = bestRefined([f, maskDrop], scan: nil, on: &voteSplit[1])
                if let o = outside, let i = inside, abs(o.tx - i.tx) + abs(o.ty - i.ty) > tol / 2 {
                    first = (o, 0); second = (i, 0); found = true
                }
            }
        }
        if !found {
            // Only where the level has texture over much of the picture (a sky crossed by a few
            // cables gives too few pixels to tell two motions by: lomiri's Bridge, 15 % of cells).
            let m = 2, cells = ((cur[Self.voteLevel].width - 2 * m) / denseCell) * ((cur[Self.voteLevel].height - 2 * m) / denseCell)
            guard 5 * densePoints[Self.voteLevel + 1].count >= 2 * cells else { return false }
            // The blocks agree (or the second motion has too few); the picture's pixels may not.
            let all = densePoints[Self.voteLevel + 1]
            // Pixels a motion leaves unexplained, from the 8 × 8 cells of the level where most
            // are: a moving thing's region is compact, the pixels of a fit a fraction of a pixel
            // off (a high-contrast object) or of fine noisy texture are scattered everywhere.
            func unexplained(by g: Similarity, into split: inout DensePoints) -> Int {
                let limit = Self.unexplainedResidual
                for c in 0..<(gw * gh) { voteCells[c] = 0 }
                for n in 0..<all.count { voteCells[cellOf(all, n)] += abs(denseResidual(all, n, level: Self.voteLevel, g)) > limit ? 1 : -1 }
                var count = 0
                split.removeAll()
                for n in 0..<all.count where voteCells[cellOf(all, n)] > 0 && abs(denseResidual(all, n, level: Self.voteLevel, g)) > limit {
                    split.append(all, at: n); count += 1
                }
                return count
            }
            guard 5 * unexplained(by: f, into: &voteSplit[0]) >= all.count else { return false }
            // The blocks' fit sharpened on the pixels (it settles between where some blocks lie
            // on the rest of the picture), so that its own pixels are explained.
            let h = denseRefine(level: Self.voteLevel, f, iterations: 4)?.f ?? f
            _ = unexplained(by: h, into: &voteSplit[0])
            guard voteSplit[0].count >= 24, 5 * voteSplit[0].count >= all.count else { return false }
            guard let o = bestRefined([], scan: (f.theta, f.k, 10), on: &voteSplit[0]), abs(o.tx - h.tx) + abs(o.ty - h.ty) > tol else { return false }
            first = (h, 0); second = (o, 0)
        }
        // Each motion refined on the pixels that match it better (the blocks off the first fit
        // started from a seed the other motion pulled, and can be a pixel off), then counted.
        var votes1 = 0, votes2 = 0
        for round in 0..<3 {
            votes1 = 0; votes2 = 0
            voteSplit[0].removeAll(); voteSplit[1].removeAll()
            let all = densePoints[Self.voteLevel + 1]
            for n in 0..<all.count {
                let r1 = abs(denseResidual(all, n, level: Self.voteLevel, first.f)), r2 = abs(denseResidual(all, n, level: Self.voteLevel, second.f))
                let side = r1 + Self.voteMargin < r2 ? 0 : r2 + Self.voteMargin < r1 ? 1 : -1
                if side < 0 { continue }
                if side == 0 { votes1 += 1 } else { votes2 += 1 }
                voteSplit[side].append(all, at: n)
            }
            guard round < 2 else { break }
            for side in 0..<2 {
                swap(&densePoints[Self.voteLevel + 1], &voteSplit[side])
                if let r = denseRefine(level: Self.voteLevel, side == 0 ? first.f : second.f, iterations: 4) {
                    if side == 0 { first.f = r.f } else { second.f = r.f }
                }
                swap(&densePoints[Self.voteLevel + 1], &voteSplit[side])
            }
        }
        // Two motions must explain the pixels far better than one: each pixel's robust cost at
        // the motion it matches better against the best single motion's (the blocks' fit
        // refined on all pixels, or either motion alone) under 0.4 — 0.6 to keep a thing
        // carried from the frame before. A moving object over 10–30 %
        // gives 0.05–0.34; a foggy pier with no moving thing (plasma's ColdRipple) 0.47–0.65, two
        // motions fitted to noise and to parts of a picture that moves as one.
        let chosen = densePoints[Self.voteLevel + 1]
        let single = denseRefine(level: Self.voteLevel, f, iterations: 6)?.f ?? f
        var cost1: Float = 0, cost2: Float = 0, costSingle: Float = 0, costPair: Float = 0
        for n in 0..<chosen.count {
            let c1 = Self.robustCost(levelResidual(chosen.x[n], chosen.y[n], chosen.t[n], level: Self.voteLevel, first.f))
            let c2 = Self.robustCost(levelResidual(chosen.x[n], chosen.y[n], chosen.t[n], level: Self.voteLevel, second.f))
            costSingle += Self.robustCost(levelResidual(chosen.x[n], chosen.y[n], chosen.t[n], level: Self.voteLevel, single))
            cost1 += c1; cost2 += c2; costPair += min(c1, c2)
        }
        guard costPair < (tracking && found ? 0.6 : 0.4) * min(costSingle, cost1, cost2) else { return false }
        // Counted by area: each 8 × 8 cell of the level goes to the motion under which all its
        // pixels — soft ones too, not only the textured pixels that voted above — match
        // clearly better (summed squared residuals, each capped at 10 levels, apart by more
        // than 1.5·√n: sensor noise at 1/4 gives each pixel's difference a variance of about
        // 0.5). A soft background has few decided pixels but its cells still lean to its own
        // motion; counting only cells with a decided pixel gave a textured object over 30 % of
        // the picture as many cells as the rest (mate's Garden: 79 and 79 of 240).
        var cells1 = 0, cells2 = 0
        for cy in 0..<gh {
            for cx in 0..<gw {
                var s1: Float = 0, s2: Float = 0, n = 0
                for y in (cy * grid)..<min(level.height - 1, cy * grid + grid) {
                    for x in (cx * grid)..<min(level.width - 1, cx * grid + grid) {
                        let t = Float(prev[Self.voteLevel].pixels[y * level.width + x])
                        guard let r1 = levelResidual(Float(x), Float(y), t, level: Self.voteLevel, first.f),
                              let r2 = levelResidual(Float(x), Float(y), t, level: Self.voteLevel, second.f) else { continue }
                        s1 += min(r1 * r1, 100); s2 += min(r2 * r2, 100); n += 1
                    }
                }
                voteCells[cy * gw + cx] = 0
                guard n > 16 else { continue }
                let margin = 1.5 * Float(n).squareRoot()
                if s2 - s1 > margin { cells1 += 1; voteCells[cy * gw + cx] = 1 } else if s1 - s2 > margin { cells2 += 1; voteCells[cy * gw + cx] = 2 }
            }
        }
        // With a thing carried from the frame before, the picture's motion is the one fitted
        // outside it, as long as it keeps most of the cells.
        let secondWins = tracking && found ? cells2 > 2 * cells1 : cells2 != cells1 ? cells2 > cells1 : votes2 > votes1
        let (winner, loser) = secondWins ? (second.f, first.f) : (first.f, second.f)
        // The thing's cells, carried to the next frame: those going to the loser, while they are
        // under half of the decided cells (more would be the picture itself).
        var lost = 0
        for c in 0..<(gw * gh) {
            objectCells[c] = voteCells[c] == (secondWins ? 1 : 2)
            if objectCells[c] { lost += 1 }
        }
        objectTracked = lost >= 4 && 2 * lost < cells1 + cells2
        var taken = 0
        for (i, c) in centres.enumerated() where disp[i].ok && residual(winner, i, c, cx, cy) > tol {
            disp[i].ok = false; taken += 1
        }
        maskKeep = winner; maskDrop = loser
        maskActive = taken > 0 || objectTracked
        return maskActive
    }
    /// Of `starts` and, with `scan`, the places a translation scan at the vote level finds (that
    /// turn and scale held, `radius` level pixels), each refined on `points` (the 1/4 level's
    /// dense pixels for the while) — or kept where the refinement fails — the one of least
    /// cost there, in that order on ties.
    private func bestRefined(_ starts: [Similarity], scan: (theta: Double, k: Double, radius: Int)?, on points: inout DensePoints) -> Similarity? {
        swap(&densePoints[Self.voteLevel + 1], &points)
        defer { swap(&densePoints[Self.voteLevel + 1], &points) }
        var best: Similarity?, bestCost = Double.infinity
        let scanned = scan.map { translationScan(theta: $0.theta, k: $0.k, radius: $0.radius, level: Self.voteLevel) } ?? []
        for start in starts + scanned {
            let g = denseRefine(level: Self.voteLevel, start, iterations: 6)?.f ?? start
            let c = levelCost(Self.voteLevel, g)
            if c < bestCost { bestCost = c; best = g }
        }
        return best
    }

    /// Huber's cost (at 4 grey levels) of a residual; a pixel moved out of the picture costs as
    /// a residual of 12 levels (as ``penalisedCost(sum:used:count:)``).
    @inline(__always)
    static func robustCost(_ r: Float?) -> Float {
        guard let r else { return 4 * (12 - 2) }
        let a = abs(r)
        return a <= 4 ? a * a / 2 : 4 * (a - 2)
    }

    /// The motions a moving object's pixels are told from the picture's by.
    private var maskKeep: Similarity = (0, 0, 0, 0), maskDrop: Similarity = (0, 0, 0, 0)
    /// The moving thing's 8 × 8 cells of the 1/4 level on the last frame (``dominantMotion``),
    /// whether it is carried to the next, and that frame's widened region (scratch).
    private var objectCells: [Bool] = [], objectRegion: [Bool] = []
    private var objectTracked = false
    /// The level the pixels vote at (1/4).
    static let voteLevel = 1
    /// A 1/4-level pixel further than this (grey levels) from the blocks' fit is not explained by it.
    static let unexplainedResidual: Float = 4
    /// Whether the 1/4 level's dense pixels were chosen this frame (by ``dominantMotion(_:cx:cy:)``).
    private var votePointsFresh = false
    /// A pixel votes for a motion whose residual is this many grey levels below the other's.
    static let voteMargin: Float = 2

    /// The residual (grey levels) of dense pixel `n` of `level` at similarity `f`, as
    /// `vf_dense_pass` computes it; 0 outside the picture.
    private func denseResidual(_ p: DensePoints, _ n: Int, level: Int, _ f: Similarity) -> Float {
        levelResidual(p.x[n], p.y[n], p.t[n], level: level, f) ?? 0
    }

    /// The current frame at where similarity `f` moves the previous frame's pixel (x, y) of
    /// `level` (bilinear), minus that pixel's value `t`; nil outside the picture.
    @inline(__always)
    private func levelResidual(_ x: Float, _ y: Float, _ t: Float, level: Int, _ f: Similarity) -> Float? {
        let b = level < 0 ? curFull! : cur[level]
        let s = Float(1 << (level + 1)), half = (s - 1) / 2
        let px = x * s + half - Float(width) / 2, py = y * s + half - Float(height) / 2
        let u = x + (Float(f.tx) + (-Float(f.theta) * py + Float(f.k) * px)) / s
        let v = y + (Float(f.ty) + (Float(f.theta) * px + Float(f.k) * py)) / s
        guard u >= 0, v >= 0, u < Float(b.width - 1) - 0.001, v < Float(b.height - 1) - 0.001 else { return nil }
        let iu = Int(u), iv = Int(v), fu = u - Float(iu), fv = v - Float(iv)
        let q = b.pixels + (iv * b.width + iu)
        let top = Float(q[0]) + (Float(q[1]) - Float(q[0])) * fu
        let bot = Float(q[b.width]) + (Float(q[b.width + 1]) - Float(q[b.width])) * fu
        return top + (bot - top) * fv - t
    }

    /// Leaves out of a level's dense pixels those that match the moving thing's motion
    /// (``dominantMotion(_:cx:cy:)``) clearly better than the picture's: they would pull the
    /// robust cost toward it.
    private func applyMotionMask(_ p: inout DensePoints, level: Int) {
        var kept = 0
        for n in 0..<p.count {
            let keep = abs(denseResidual(p, n, level: level, maskKeep)), drop = abs(denseResidual(p, n, level: level, maskDrop))
            if drop + Self.voteMargin < keep { continue }
            p.x[kept] = p.x[n]; p.y[kept] = p.y[n]; p.t[kept] = p.t[n]; p.gx[kept] = p.gx[n]; p.gy[kept] = p.gy[n]
            kept += 1
        }
        let cut = p.count - kept
        if cut > 0 {
            p.x.removeLast(cut); p.y.removeLast(cut); p.t.removeLast(cut); p.gx.removeLast(cut); p.gy.removeLast(cut)
        }
    }

    // MARK: Dense refinement

    /// Pixels of the previous frame chosen on one level by ``selectDensePixels``: position (level
    /// pixels), value and Sobel gradient, structure of arrays.
    struct DensePoints {
        var x: [Float] = [], y: [Float] = [], t: [Float] = [], gx: [Float] = [], gy: [Float] = []
        var count: Int { x.count }
        /// Appends pixel `n` of `p`.
        mutating func append(_ p: DensePoints, at n: Int) {
            x.append(p.x[n]); y.append(p.y[n]); t.append(p.t[n]); gx.append(p.gx[n]); gy.append(p.gy[n])
        }
        mutating func removeAll() {
            x.removeAll(keepingCapacity: true); y.removeAll(keepingCapacity: true); t.removeAll(keepingCapacity: true)
            gx.removeAll(keepingCapacity: true); gy.removeAll(keepingCapacity: true)
        }
    }
    /// Per level, index level + 1 (full resolution, 1/2, 1/4, 1/8).
    private var densePoints = [DensePoints](repeating: DensePoints(), count: 4)
    /// Counts of the last pass's absolute residuals (quarter grey levels) for the robust scale.
    private var denseHistogram = [Int32](repeating: 0, count: 256)
    /// The last frame's motion (a start for the next: a pan goes on).
    private var lastMotion: Similarity = (0, 0, 0, 0)

    /// Cell side (level pixels) of the dense pixel choice: one pixel, the steepest, per cell.
    let denseCell = 4

    /// The dense choice's cell side at full resolution (pictures under 1200 px wide), from how
    /// many 1/2-resolution cells had a textured pixel: 8 (as many pixels as at 1/2) where the
    /// texture is everywhere, down to 3 where it is sparse, so the full-resolution pass gets
    /// about as many pixels as the 1/2 level has cells either way. Sparse texture needs the
    /// extra pixels; everywhere-texture does not (per-frame error at 640x360,
    /// `viewfinder-report --diagnose-motion`, still camera, 8 px → these cells: Bridge 0.101 →
    /// 0.049 px, Kite 0.067 → 0.056 px, Storm 0.096 → 0.091 px; textured photographs the same
    /// to ±0.002 px), for about 0.4–0.7 ms more per 640x360 frame on the sparse ones.
    func fullResolutionCell(halfLevelPoints: Int) -> Int {
        let m = 2
        let cells = max(1, ((width / 2 - 2 * m) / denseCell) * ((height / 2 - 2 * m) / denseCell))
        let side = Double(2 * denseCell) * (Double(halfLevelPoints) / (0.83 * Double(cells))).squareRoot()
        return max(3, min(2 * denseCell, Int(side.rounded())))
    }
    /// A chosen pixel's squared Sobel gradient must exceed this (grey levels² per pixel²): the
    /// sensor noise of a 1/2-resolution level (σ ≈ 1 level) gives about 0.4 on a flat sky, and
    /// the steepest of a cell's 16 noise gradients stays under 3. At full resolution (noise σ ≈ 2)
    /// the threshold is doubled.
    static let denseMinGradient2: Float = 6
    /// Rotation and scale change per frame beyond which a dense solution is not believed (about
    /// 3.4° and 3 %; hand shake turns the camera well under 1° from frame to frame and a fast
    /// zoom scales by under 1 %): a step there means the pixels matched the wrong places.
    static let denseMaxRotation = 0.06
    /// A level's result is kept unless it costs more than this times its start. Near the right
    /// answer the robust cost is flat to a few per cent (sensor noise; bilinear sampling at a
    /// fractional offset averages it down), so a strict "lower" threw away sub-pixel steps that
    /// were right (Storm, still: 0.091 → 0.077 px; Kite 0.056 → 0.055 px per frame, 640x360),
    /// while a step into a wrong place costs several times more.
    static let denseCostTolerance = 1.04
    static let denseMaxScale = 0.03

    /// The previous frame's steepest pixel in each `cell`² cell of `a` with a squared gradient
    /// above `minGradient2`: on a picture with a few textured places (a kite and clouds in a blue
    /// sky, soft storm clouds over a guard rail) these are every place the picture can be aligned
    /// by, spread over its whole width, so rotation has the lever arm that blocks clustered in
    /// one corner lack.
    private func selectDensePixels(_ a: GreyImage, minGradient2: Float, cell: Int, into p: inout DensePoints) {
        p.removeAll()
        let w = a.width, h = a.height, m = 2
        guard w > 2 * m + cell + 16, h > 2 * m + cell else { return }
        let cellsX = (w - 2 * m) / cell
        if denseMagnitude.count < w { denseMagnitude = [Int16](repeating: 0, count: w) }
        if denseCellBest.count < cellsX {
            denseCellBest = [Int16](repeating: 0, count: cellsX); denseCellAt = [Int32](repeating: 0, count: cellsX)
        }
        // The cell's steepest pixel by |gx| + |gy| of the Sobel sums (8 × the gradient), which
        // fit in 16-bit lanes (`vf_dense_cell_maxima`); the threshold in the same units (the L1
        // norm is at least the L2 norm).
        let threshold = Int16(min(32000, (minGradient2.squareRoot() * 8).rounded(.up)))
        // The scratch rows through their buffers for the whole choice: per access on the
        // instance's arrays each paid an exclusivity check and a uniqueness check.
        if densePointScratch.count < 5 * cellsX { densePointScratch = [Float](repeating: 0, count: 5 * cellsX) }
        denseMagnitude.withUnsafeMutableBufferPointer { mag in
            denseCellBest.withUnsafeMutableBufferPointer { best in
                denseCellAt.withUnsafeMutableBufferPointer { at in
                    densePointScratch.withUnsafeMutableBufferPointer { scratchBuffer in
                        let scratch = scratchBuffer.baseAddress!
                        var y0 = m
                        while y0 + cell <= h - m {
                            best.baseAddress!.update(repeating: threshold, count: cellsX)
                            vf_dense_cell_maxima(a.pixels, w, y0, cell, m, cell, cellsX, mag.baseAddress!, best.baseAddress!, at.baseAddress!)
                            // The band's pixels (position, value, gradient) into the scratch, then
                            // appended five arrays at a time.
                            let n = vf_dense_points(a.pixels, w, best.baseAddress!, at.baseAddress!, cellsX, threshold,
                                                    scratch, scratch + cellsX, scratch + 2 * cellsX, scratch + 3 * cellsX, scratch + 4 * cellsX)
                            if n > 0 {
                                p.x.append(contentsOf: UnsafeBufferPointer(start: scratch, count: n))
                                p.y.append(contentsOf: UnsafeBufferPointer(start: scratch + cellsX, count: n))
                                p.t.append(contentsOf: UnsafeBufferPointer(start: scratch + 2 * cellsX, count: n))
                                p.gx.append(contentsOf: UnsafeBufferPointer(start: scratch + 3 * cellsX, count: n))
                                p.gy.append(contentsOf: UnsafeBufferPointer(start: scratch + 4 * cellsX, count: n))
                            }
                            y0 += cell
                        }
                    }
                }
            }
        }
    }
    private var denseMagnitude: [Int16] = []
    /// One band's chosen pixels (x, y, value, gx, gy: five runs of as many entries as cells).
    private var densePointScratch: [Float] = []
    private var denseCellBest: [Int16] = []
    private var denseCellAt: [Int32] = []

    /// One pass over `level`'s chosen pixels at similarity `f`: each is sought in the current
    /// frame's level at its displaced position (bilinear). With `eq`, adds the robust (Huber at
    /// `huber` grey levels) Gauss–Newton terms, the previous frame's gradient standing in for the
    /// current one's (inverse compositional), and counts the absolute residuals in
    /// `denseHistogram`. Returns the pixels used and their mean robust cost (Huber at 4 levels).
    private func densePass(level: Int, _ f: Similarity, huber: Float, into eq: UnsafeMutablePointer<NormalEquations4>?) -> (used: Int, cost: Double) {
        let b = level < 0 ? curFull! : cur[level]
        let s = Float(1 << (level + 1))
        if eq != nil { for k in 0..<256 { denseHistogram[k] = 0 } }
        var used = 0, cost = 0.0
        var o = InlineArray<14, Float>(repeating: 0)
        withUnsafeMutablePointer(to: &o) { op in
            (used, cost) = densePassSums(densePoints[level + 1], in: b, scale: s, tx: Float(f.tx) / s, ty: Float(f.ty) / s, theta: Float(f.theta), k: Float(f.k),
                                         huber: huber, sums: eq != nil ? UnsafeMutableRawPointer(op).assumingMemoryBound(to: Float.self) : nil)
        }
        if let eq {
            eq.pointee.h = [Double(o[0]), Double(o[1]), Double(o[2]), Double(o[3]), 0, Double(o[4]), Double(o[5]), Double(o[6]), 0, 0, Double(o[7]), Double(o[8]), 0, 0, 0, Double(o[9])]
            eq.pointee.g = [Double(o[10]), Double(o[11]), Double(o[12]), Double(o[13])]
        }
        return (used, used > 0 ? cost / Double(used) : .infinity)
    }

    /// `vf_dense_pass` over the chosen pixels `p` of a level `scale` times smaller than the
    /// picture, sought in `b` (that level of the current frame) at the similarity (tx, ty in level
    /// pixels). With `sums`, the normal equations go there and the absolute residuals to
    /// `denseHistogram` (added to). Returns the pixels used and their summed robust cost.
    private func densePassSums(_ p: DensePoints, in b: GreyImage, scale s: Float, tx: Float, ty: Float, theta: Float, k: Float,
                               huber: Float, sums: UnsafeMutablePointer<Float>?) -> (used: Int, cost: Double) {
        let half = (s - 1) / 2, cx = Float(width) / 2, cy = Float(height) / 2
        let maxU = Float(b.width - 1) - 0.001, maxV = Float(b.height - 1) - 0.001
        var used = 0, cost = 0.0
        p.x.withUnsafeBufferPointer { xs in p.y.withUnsafeBufferPointer { ys in p.t.withUnsafeBufferPointer { ts in
            p.gx.withUnsafeBufferPointer { gxs in p.gy.withUnsafeBufferPointer { gys in
                denseHistogram.withUnsafeMutableBufferPointer { hist in
                    vf_dense_pass(xs.baseAddress, ys.baseAddress, ts.baseAddress, gxs.baseAddress, gys.baseAddress, p.count,
                                  b.pixels, b.width, maxU, maxV, s, half, cx, cy, tx, ty, theta, k, 1000, huber,
                                  sums != nil ? hist.baseAddress : nil, sums, &used, &cost)
                }
            } }
        } } }
        return (used, cost)
    }

    /// The mean robust cost over `count` chosen pixels when `used` of them, in the picture, summed
    /// `sum`: each pixel the similarity moves out of the picture counts as a residual of 12 levels
    /// (a wrong solution must not look good by pushing its worst pixels off the edge).
    static func penalisedCost(sum: Double, used: Int, count n: Int) -> Double {
        guard used > 0 else { return .infinity }
        return (sum + Double(n - used) * 4 * (12 - 2)) / Double(max(n, 1))
    }

    /// The similarity refined from `f0` by robust Gauss–Newton over the pixels chosen on the
    /// previous frame's `level` (-1: full resolution, 0: 1/2, 1: 1/4, 2: 1/8). Residuals beyond
    /// a Huber threshold (1.345 × the residuals' robust spread, at least 2 levels) weigh less, so
    /// a moving object or a picture edge coming into view pulls little. Nil when fewer than 24
    /// pixels have texture, the step is not pinned down, the solution turns or scales by more than
    /// ``denseMaxRotation`` or ``denseMaxScale``, or it costs more than ``denseCostTolerance``
    /// times `f0` (the caller keeps `f0`).
    private func denseRefine(level: Int, _ f0: Similarity, iterations: Int) -> (f: Similarity, used: Int)? {
        guard densePoints[level + 1].count >= 24 else { return nil }
        let s = Double(1 << (level + 1))
        var f = f0
        var huber: Float = 8
        var used = 0
        var eq = NormalEquations4()
        var startCost = Double.infinity
        for i in 0..<iterations {
            let pass = withUnsafeMutablePointer(to: &eq) { densePass(level: level, f, huber: huber, into: $0) }
            used = pass.used
            if i == 0 { startCost = levelCost(level, pass) }
            guard used >= 24, let d = eq.solve() else { return nil }
            f = (f.tx + d[0], f.ty + d[1], f.theta + d[2] / 1000, f.k + d[3] / 1000)
            guard f.tx.isFinite, f.ty.isFinite, f.theta.isFinite, f.k.isFinite,
                  abs(f.theta) <= Self.denseMaxRotation, abs(f.k) <= Self.denseMaxScale else { return nil }
            // The robust spread from the median absolute residual.
            var seen: Int32 = 0, k = 0
            while k < 255 && seen + denseHistogram[k] < Int32(used / 2) { seen += denseHistogram[k]; k += 1 }
            huber = max(2, 1.345 * 1.4826 * (Float(k) + 0.5) / 4)
            if abs(d[0]) + abs(d[1]) < 0.01 * s { break }
        }
        // Gauss–Newton on few pixels can walk off to a worse place than it started from.
        guard levelCost(level, f) < startCost * Self.denseCostTolerance else { return nil }
        return (f, used)
    }

    /// The last 15 frames' winning dense costs (at the finest level), a ring, for the median a
    /// frame's result is compared with.
    private var denseCostHistory = InlineArray<15, Double>(repeating: 0)
    private var denseCostCount = 0
    private var scanPoints = DensePoints()
    private var scanCosts = [Double](repeating: 0, count: 21 * 21)
    /// `vf_dense_scan`'s scratch and results for the scan's 21 × 21 translations.
    private var scanLanes = [Double](repeating: 0, count: 21 * 21 * 8)
    private var scanSums = [Double](repeating: 0, count: 21 * 21)
    private var scanUsed = [Int](repeating: 0, count: 21 * 21)

    private func rememberDenseCost(_ c: Double) {
        denseCostHistory[denseCostCount % 15] = c
        denseCostCount += 1
    }

    /// Median of the remembered dense costs; 0 until five frames are remembered.
    private func recentDenseCostMedian() -> Double {
        let n = min(denseCostCount, 15)
        guard n >= 5 else { return 0 }
        var v = InlineArray<15, Double>(repeating: .infinity)
        for i in 0..<n { v[i] = denseCostHistory[i] }
        for i in 1..<n { var j = i; while j > 0 && v[j - 1] > v[j] { v.swapAt(j - 1, j); j -= 1 } }
        return v[n / 2]
    }

    /// Translations within `radius` pixels of 1/2 resolution (every whole pixel there, two at
    /// full resolution) scored by the robust cost of at most 600 of that level's chosen pixels
    /// (every n-th; pixels moved out of the picture count as in ``penalisedCost(sum:used:count:)``),
    /// rotation and scale held; the three lowest local minima, best first, as full-resolution
    /// similarities.
    private func translationScan(theta: Double, k: Double, radius: Int, level: Int = 0) -> [Similarity] {
        let all = densePoints[level + 1]
        let scale = Float(2 << level)
        guard all.count >= 24, radius <= 10 else { return [] }
        let step = max(1, all.count / 600)
        scanPoints.removeAll()
        for i in stride(from: 0, to: all.count, by: step) {
            scanPoints.append(all, at: i)
        }
        let side = 2 * radius + 1, n = scanPoints.count
        if theta == 0 && k == 0 {
            // Whole translations alone: every sample a pixel, all of them in one sweep of the
            // points (`vf_dense_scan`, the same costs as a dense pass at each).
            let b = cur[level]
            scanPoints.x.withUnsafeBufferPointer { xs in scanPoints.y.withUnsafeBufferPointer { ys in scanPoints.t.withUnsafeBufferPointer { ts in
                scanLanes.withUnsafeMutableBufferPointer { lanes in scanSums.withUnsafeMutableBufferPointer { sums in scanUsed.withUnsafeMutableBufferPointer { used in
                    vf_dense_scan(xs.baseAddress, ys.baseAddress, ts.baseAddress, n, b.pixels, b.width, b.height, -radius, -radius, side,
                                  lanes.baseAddress, sums.baseAddress, used.baseAddress)
                } } }
            } } }
            for s in 0..<(side * side) {
                scanCosts[s] = Self.penalisedCost(sum: scanSums[s], used: scanUsed[s], count: n)
            }
        } else {
            for j in 0..<side {
                for i in 0..<side {
                    let pass = densePassSums(scanPoints, in: cur[level], scale: scale, tx: Float(i - radius), ty: Float(j - radius), theta: Float(theta), k: Float(k),
                                             huber: 4, sums: nil)
                    scanCosts[j * side + i] = Self.penalisedCost(sum: pass.cost, used: pass.used, count: n)
                }
            }
        }
        // The three lowest places lower than their eight neighbours (kept sorted, no allocation).
        var cost = InlineArray<3, Double>(repeating: .infinity), at = InlineArray<3, Int>(repeating: 0)
        for j in 1..<(side - 1) {
            for i in 1..<(side - 1) {
                let c = scanCosts[j * side + i]
                guard c < cost[2] else { continue }
                var lowest = true
                for dj in -1...1 { for di in -1...1 where (di != 0 || dj != 0) && scanCosts[(j + dj) * side + i + di] < c { lowest = false } }
                guard lowest else { continue }
                var r = 2
                while r > 0 && cost[r - 1] > c { cost[r] = cost[r - 1]; at[r] = at[r - 1]; r -= 1 }
                cost[r] = c; at[r] = j * side + i
            }
        }
        scanStarts.removeAll(keepingCapacity: true)
        for r in 0..<3 where cost[r].isFinite {
            scanStarts.append((tx: Double(scale) * Double(at[r] % side - radius), ty: Double(scale) * Double(at[r] / side - radius), theta: theta, k: k))
        }
        return scanStarts
    }
    private var scanStarts: [Similarity] = {
        var a: [Similarity] = []
        a.reserveCapacity(3)
        return a
    }()

    /// ``denseRefine`` from `start` through the levels from `coarsest` to `finest`, each level starting
    /// where the coarser one ended. Returns the result, its pixel count and its mean robust cost
    /// at `finest` (Huber at 4 grey levels, over all the level's chosen pixels); nil when no level
    /// could be solved.
    ///
    /// Starts that meet: after each level the solution is compared with where this frame's
    /// earlier starts stood after the same level (``denseVisited``); within
    /// ``denseSameBasin`` of one, the finer levels would refine it to that start's end, so
    /// this start stops there and returns nil (on Bridge filmed hand-held at 1080p, a fifth of the
    /// dense passes outside the scan were such starts' finer levels).
    private func denseCoarseToFine(from start: Similarity, coarsest: Int, finest: Int) -> (f: Similarity, used: Int, cost: Double)? {
        var g = start, used = 0
        let mark = denseVisited.count
        for level in stride(from: coarsest, through: finest, by: -1) {
            if let r = denseRefine(level: level, g, iterations: 6) { g = r.f; used = r.used }
            if level > finest {
                for i in 0..<mark where denseVisited[i].level == level && sameBasin(denseVisited[i].f, g) { return nil }
                denseVisited.append((level, g))
            }
        }
        // No level could improve on the start: where the start was already right (the blocks'
        // fit on a picture they pin down) it still competes, at its own cost.
        let pass = densePass(level: finest, g, huber: 4, into: nil)
        guard used > 0 || pass.used >= 24 else { return nil }
        return (g, used > 0 ? used : pass.used, levelCost(finest, pass))
    }

    /// Where this frame's dense starts stood after each level but the finest (cleared per frame;
    /// at most 15 entries — three starts through three levels and six scan starts — capacity
    /// kept, so no allocation per frame).
    private var denseVisited: [(level: Int, f: Similarity)] = {
        var a: [(level: Int, f: Similarity)] = []
        a.reserveCapacity(32)
        return a
    }()
    /// Two solutions closer than this (full-resolution pixels, at the picture's corners) are in
    /// one basin: the finer levels start a fraction of their pixel apart.
    static let denseSameBasin = 0.5
    /// A frame's dense solution costing more than this times the recent frames' median cost is
    /// doubted (a wrong basin costs 1.8–2.5 times the truth's: the translation scan runs); one at
    /// or under it is believed (no further start is tried).
    static let denseCostDoubt = 1.25

    private func sameBasin(_ a: Similarity, _ b: Similarity) -> Bool {
        abs(a.tx - b.tx) + abs(a.ty - b.ty) + cornerShift(theta: a.theta - b.theta, k: a.k - b.k) < Self.denseSameBasin
    }

    /// About how far a turn by `theta` and a zoom by `k` move the picture's corners
    /// (full-resolution pixels).
    private func cornerShift(theta: Double, k: Double) -> Double {
        (abs(theta) + abs(k)) * Double(max(width, height)) / 2
    }

    /// The mean robust cost of `level`'s chosen pixels at `f` (Huber at 4 grey levels). Pixels
    /// the similarity moves out of the picture count as a residual of 12 levels: a wrong solution
    /// must not look good by pushing its worst pixels off the edge.
    private func levelCost(_ level: Int, _ f: Similarity) -> Double {
        levelCost(level, densePass(level: level, f, huber: 4, into: nil))
    }

    private func levelCost(_ level: Int, _ pass: (used: Int, cost: Double)) -> Double {
        Self.penalisedCost(sum: pass.cost * Double(pass.used), used: pass.used, count: densePoints[level + 1].count)
    }

    /// One Gauss–Newton step of the similarity over the saved full-resolution patches of the inlier
    /// blocks: previous-frame patch pixel X is sought in `luma` at X + d(X), d the similarity's
    /// displacement; the template's own gradients stand in for the frame's (inverse compositional).
    private func refineJointly(_ luma: LumaView, _ f: Similarity, cx: Double, cy: Double) -> Similarity? {
        var eq = NormalEquations4()
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
            Self.accumulateSimilarity(t + side + 1, rowStride: side, luma.pointer(x: ix, y: iy), bytesPerRow: bpr, pixelStride: s, size: 2 * h + 1,
                                      fx: fx, fy: fy, px0: px0, py0: py0, step: 1 / unit, into: &eq)
            used += 1
        }
        guard used >= 3, let d = eq.solve(translationOnlyIfNeeded: false) else { return nil }
        let u = Double(unit)
        let out = (tx: f.tx + d[0], ty: f.ty + d[1], theta: f.theta + d[2] / u, k: f.k + d[3] / u)
        // A step this large means the patches disagree with the blocks: keep the block fit.
        guard abs(d[0]) < 1, abs(d[1]) < 1, out.tx.isFinite, out.theta.isFinite else { return nil }
        return out
    }

    /// A block's misfit along the direction its texture measures, pixels: sqrt(eᵀGe / λmax(G)).
    private func residual(_ f: Similarity, _ i: Int, _ c: (x: Int, y: Int), _ cx: Double, _ cy: Double) -> Double {
        let px = Double(c.x * 2) - cx, py = Double(c.y * 2) - cy
        let d = disp[i]
        let ex = f.tx - f.theta * py + f.k * px - d.dx
        let ey = f.ty + f.theta * px + f.k * py - d.dy
        let lmax = Double(Self.largestEigenvalue(Float(d.gxx), Float(d.gxy), Float(d.gyy)))
        return ((ex * ex * d.gxx + 2 * ex * ey * d.gxy + ey * ey * d.gyy) / max(lmax, 1e-9)).squareRoot()
    }

    /// Least squares for dx = tx − θ·py + k·px, dy = ty + θ·px + k·py over the blocks in use,
    /// each weighted by its 2×2 structure tensor. Nil when the blocks do not pin the motion down.
    private func fitSimilarity(cx: Double, cy: Double) -> Similarity? {
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
        // In C (`psadbw` on x86): the Swift SIMD version called the generic pointwiseMin and
        // pointwiseMax out of line, 13 calls a block (a third of the searches' instructions).
        return Int(vf_sad16_rows(UnsafePointer(a.pixels + ((y &- h) &* w &+ x &- h)), w,
                                 UnsafePointer(b.pixels + ((y &- h &+ dy) &* w &+ x &+ dx &- h)), w, side, side))
    }

    /// The shift at which the blocks' SAD surfaces, each normalised to its own contrast (0 at its
    /// minimum, 1 at its mean) and summed, are lowest: `around` ± `range` in the pixels of one
    /// pyramid level (`level`: the block centres, kept at 1/2 resolution, divided by it), with a
    /// sub-pixel offset from a parabola through the minimum and its neighbours (each within ±0.5).
    /// Along an edge a block's surface is a valley whose lowest point is anywhere along it, but
    /// valleys of edges at different angles, and the pits of textured blocks, meet only at the
    /// true shift (a median of per-block minima is pulled along the valleys). Blocks whose
    /// surface is flat (no texture: the minimum is noise) are left out; `blocks` counts the rest.
    /// With `quarterFirst` a quarter of the blocks (the most textured) are searched first
    /// and the rest only when fewer than four of those have a clear minimum; only the first
    /// `limit` blocks (the most textured) are searched.
    /// With `seed` (a similarity in full-resolution pixels about the picture centre) the search
    /// is about the seed's translation (`around` is then ignored) and each block's window is
    /// moved on by what the seed's rotation and scale move that block (rounded to this level's
    /// pixels), so the surfaces of a turned picture still meet at one shift: the translation.
    private func summedSADMinimum(_ a: GreyImage, _ b: GreyImage, level: Int, around o: (x: Int, y: Int), range: Int, quarterFirst: Bool, limit: Int = .max, seed: Similarity? = nil,
                                  prior: (x: Double, y: Double)? = nil) -> (dx: Int, dy: Int, fx: Double, fy: Double, blocks: Int) {
        let fullCx = Double(width) / 2, fullCy = Double(height) / 2
        let unitPixels = Double(2 * level)
        // Seeded: the seed's translation in this level's pixels; each block adds what rotation
        // and scale move it by.
        let o: (x: Int, y: Int) = seed.map { (Int(($0.tx / unitPixels).rounded()), Int(($0.ty / unitPixels).rounded())) } ?? o
        let area = (2 * sadHalf + 1) * (2 * sadHalf + 1)
        let side = 2 * range + 1
        // The two surfaces as locals for the search, swapped out of the instance and back (no
        // copy, no allocation): an instance array read or written in the loops below paid a
        // dynamic exclusivity check per access (2 % of the stabiliser's instructions).
        var surface: [Double] = [], blockSurface: [Int] = []
        swap(&surface, &self.surface)
        swap(&blockSurface, &self.blockSurface)
        defer {
            swap(&surface, &self.surface)
            swap(&blockSurface, &self.blockSurface)
        }
        precondition(side * side <= surface.count, "the SAD surfaces hold at most (2 × sadRange + 1)² shifts")
        for k in 0..<(side * side) { surface[k] = 0 }
        var n = 0
        for pass in 0..<(quarterFirst ? 2 : 1) where pass == 0 || n < 4 {
            for (idx, c) in centres.enumerated() where idx < limit && (!quarterFirst || (idx < centres.count / 4) == (pass == 0)) {
                let x = c.x / level, y = c.y / level
                var bo = o
                if let f = seed {
                    let pcx = Double(c.x * 2) - fullCx, pcy = Double(c.y * 2) - fullCy
                    let rx = -f.theta * pcy + f.k * pcx, ry = f.theta * pcx + f.k * pcy
                    bo = (o.x + Int((rx / unitPixels).rounded()), o.y + Int((ry / unitPixels).rounded()))
                }
                let r = sadHalf + range + 1
                guard x + bo.x - r >= 0, y + bo.y - r >= 0, x + bo.x + r < b.width, y + bo.y + r < b.height,
                      x - r >= 0, y - r >= 0, x + r < a.width, y + r < a.height else { continue }
                var best = Int.max, total = 0
                // Through the buffers: a write to a local array checks it is unique each time.
                blockSurface.withUnsafeMutableBufferPointer { blockSurface in
                    for dy in -range...range {
                        for dx in -range...range {
                            let s = sad(a, b, x, y, bo.x + dx, bo.y + dy, sadHalf)
                            blockSurface[(dy + range) * side + dx + range] = s
                            total += s
                            best = min(best, s)
                        }
                    }
                }
                // A flat surface's minimum is noise: the mean must stand clear of it (less far
                // over a narrow search, whose shifts are all near the minimum).
                let mean = total / (side * side)
                guard mean - best > (range >= sadRange ? 3 : 1) * area else { continue }
                let scale = 1 / Double(mean - best)
                surface.withUnsafeMutableBufferPointer { surface in
                    blockSurface.withUnsafeBufferPointer { blockSurface in
                        for k in 0..<(side * side) { surface[k] += Double(blockSurface[k] - best) * scale }
                    }
                }
                n += 1
            }
        }
        guard n > 0 else { return (o.x, o.y, 0, 0, 0) }
        // With a prior (the last frame's motion: a camera's motion changes little from one frame
        // to the next), each shift pays ``searchPrior`` per block times its squared distance
        // from it over the range's. Each block's surface is normalised to a mean of about 1
        // over its minimum, so the true minimum of a textured picture stands several units per
        // block below every other place and pays nothing that matters; where the picture
        // repeats (a row of windows, a chart) the places a period apart tie within a fraction
        // of a unit, and the one nearest the last motion wins. (The sim's town at 1280x720:
        // windows 40 px apart, two frames of 150 taken 31–37 px off with confidence 1.)
        var best = Double.infinity, bestScore = Double.infinity, bx = 0, by = 0
        let priorWeight = prior == nil ? 0 : Self.searchPrior * Double(n) / Double(range * range)
        for dy in -range...range {
            for dx in -range...range {
                let s = surface[(dy + range) * side + dx + range]
                var score = s
                if let p = prior {
                    let ex = Double(o.x + dx) - p.x, ey = Double(o.y + dy) - p.y
                    score += priorWeight * (ex * ex + ey * ey)
                }
                if score < bestScore - 1e-9 || (abs(score - bestScore) <= 1e-9 && abs(dx) + abs(dy) < abs(bx) + abs(by)) { bestScore = score; best = s; bx = dx; by = dy }
            }
        }
        func vertex(_ l: Double, _ m: Double, _ r: Double) -> Double {
            let c = l - 2 * m + r
            return c > 1e-12 ? max(-0.5, min(0.5, (l - r) / (2 * c))) : 0
        }
        let at = (by + range) * side + bx + range
        let fx = abs(bx) < range ? vertex(surface[at - 1], best, surface[at + 1]) : 0
        let fy = abs(by) < range ? vertex(surface[at - side], best, surface[at + side]) : 0
        return (o.x + bx, o.y + by, fx, fy, n)
    }

    /// A similarity (full-resolution units, about the picture centre) refined from `f0` by
    /// Gauss–Newton over the textured blocks at pyramid `level` (1: 1/4, 2: 1/8, 3: 1/16; 13 × 13
    /// windows; at 1/4 the tensors ``selectBlocks()`` measured, measured here at the others).
    /// Without rotation and scale when the blocks cannot tell them apart. Nil when fewer than
    /// three blocks have texture and stay inside the picture.
    private func jointSimilarity(_ f0: Similarity, level: Int = 1, iterations: Int) -> Similarity? {
        let a = prev[level], b = cur[level], scale = Double(2 << level), half = half2 / 2
        let down = 1 << level  // block centres are at 1/2
        let w = a.width, n = 2 * half + 1
        let npx = Float(n * n)
        // Positions in units of 1000 full-resolution pixels keep the normal equations balanced.
        let unit = 1000 / scale
        let lcx = Double(width) / 2 / scale, lcy = Double(height) / 2 / scale
        // The templates do not change between iterations: their tensors once.
        if level != 1 {
            for (i, c) in centres.enumerated() {
                let x = c.x / down, y = c.y / down
                guard x - half - 1 >= 0, y - half - 1 >= 0, x + half + 1 < a.width, y + half + 1 < a.height else { continue }
                coarseTensors[i] = Self.tensor(UnsafePointer(a.pixels + ((y &- half) &* w &+ x &- half)), rowStride: w, size: n)
            }
        }
        var f = f0
        for _ in 0..<iterations {
            var eq = NormalEquations4()
            var used = 0
            for (i, c) in centres.enumerated() {
                let x = c.x / down, y = c.y / down
                guard x - half - 1 >= 0, y - half - 1 >= 0, x + half + 1 < a.width, y + half + 1 < a.height else { continue }
                let t = UnsafePointer(a.pixels + ((y &- half) &* w &+ x &- half))
                let (gxx, gxy, gyy) = level == 1 ? blockTensors[i] : coarseTensors[i]
                guard Self.largestEigenvalue(gxx, gxy, gyy) / npx > Self.minTexture else { continue }
                // The similarity's displacement at the block's centre, in this level's pixels.
                let pcx = Double(x) - lcx, pcy = Double(y) - lcy
                let dx = f.tx / scale - f.theta * pcy + f.k * pcx, dy = f.ty / scale + f.theta * pcx + f.k * pcy
                let x0 = Double(x - half) + dx, y0 = Double(y - half) + dy
                guard x0 >= 1, y0 >= 1, x0 + Double(n) < Double(b.width - 2), y0 + Double(n) < Double(b.height - 2) else { continue }
                let ix = Int(x0), iy = Int(y0)
                Self.accumulateSimilarity(t, rowStride: w, UnsafePointer(b.pixels + (iy &* b.width &+ ix)), bytesPerRow: b.width, pixelStride: 1, size: n,
                                          fx: Float(x0 - Double(ix)), fy: Float(y0 - Double(iy)),
                                          px0: Float((Double(x - half) - lcx) / unit), py0: Float((Double(y - half) - lcy) / unit), step: Float(1 / unit), into: &eq)
                used += 1
            }
            guard used >= 3, let d = eq.solve() else { return nil }
            f = (f.tx + d[0] * scale, f.ty + d[1] * scale, f.theta + d[2] / unit, f.k + d[3] / unit)
            guard f.tx.isFinite, f.ty.isFinite, f.theta.isFinite, f.k.isFinite else { return nil }
            if d[0] * d[0] + d[1] * d[1] < 1e-4 { break }
        }
        return f
    }

    /// The normal equations of a similarity's Gauss–Newton step (tx, ty, θ, k).
    struct NormalEquations4 {
        var h = InlineArray<16, Double>(repeating: 0)
        var g = InlineArray<4, Double>(repeating: 0)

        /// The step (only the upper triangle of `h` is kept); with `translationOnlyIfNeeded`,
        /// translation alone when rotation and scale are not pinned down. Nil when the step is not.
        func solve(translationOnlyIfNeeded: Bool = true) -> InlineArray<4, Double>? {
            var m = h
            for r in 0..<4 { for c in 0..<r { m[r * 4 + c] = m[c * 4 + r] } }
            let trace = m[0] + m[5] + m[10] + m[15]
            if let d = MotionEstimator.solve4(m, g, minPivot: 1e-9 * trace) { return d }
            return translationOnlyIfNeeded ? solveTranslation() : nil
        }

        /// The step of translation alone (rotation and scale kept).
        func solveTranslation() -> InlineArray<4, Double>? {
            let trace = h[0] + h[5]
            let det = h[0] * h[5] - h[1] * h[1]
            guard det > 1e-9 * trace * trace else { return nil }
            return [(h[5] * g[0] - h[1] * g[1]) / det, (h[0] * g[1] - h[1] * g[0]) / det, 0, 0]
        }
    }

    /// Adds one block to the similarity's normal equations: template `t` (size × size, one sample
    /// of border read all round for its gradients) against the image sampled bilinearly at
    /// (k + fx, j + fy) from `img`; the template's own gradients stand in for the image's
    /// (inverse compositional). `px0`, `py0`: the template's top-left position relative to the
    /// picture centre and `step` one sample, in the units the rotation and scale are solved in.
    static func accumulateSimilarity(_ t: UnsafePointer<UInt8>, rowStride side: Int, _ img: UnsafePointer<UInt8>, bytesPerRow bpr: Int, pixelStride s: Int, size n: Int,
                                     fx: Float, fy: Float, px0: Float, py0: Float, step: Float, into eq: inout NormalEquations4) {
        // In C (`vf_lk_similarity`, eight float lanes, the same in both builds): the scalar Swift
        // loop was a fifth of the estimator's instructions at 1080p.
        var o = InlineArray<14, Float>(repeating: 0)
        withUnsafeMutablePointer(to: &o) {
            vf_lk_similarity(t, side, img, bpr, s, n, n, fx, fy, px0, py0, step, UnsafeMutableRawPointer($0).assumingMemoryBound(to: Float.self))
        }
        eq.h[0] += Double(o[0]); eq.h[1] += Double(o[1]); eq.h[2] += Double(o[2]); eq.h[3] += Double(o[3])
        eq.h[5] += Double(o[4]); eq.h[6] += Double(o[5]); eq.h[7] += Double(o[6])
        eq.h[10] += Double(o[7]); eq.h[11] += Double(o[8]); eq.h[15] += Double(o[9])
        eq.g[0] += Double(o[10]); eq.g[1] += Double(o[11]); eq.g[2] += Double(o[12]); eq.g[3] += Double(o[13])
    }

    /// Lucas–Kanade translation of the block of half-size `half` at (x, y) in `a`, found in `b`
    /// starting from (dx, dy), with the block's structure tensor per pixel. Nil when the block has
    /// no texture or leaves the picture; along an edge the block keeps its starting displacement.
    private func lk(_ a: GreyImage, _ b: GreyImage, _ x: Int, _ y: Int, half: Int, dx: Double, dy: Double, iterations: Int, tensor known: (Float, Float, Float)? = nil) -> BlockMotion? {
        guard x - half - 1 >= 0, y - half - 1 >= 0, x + half + 1 < a.width, y + half + 1 < a.height else { return nil }
        let w = a.width, n = 2 * half + 1
        // The block's top-left sample in `a`.
        let t = UnsafePointer(a.pixels + ((y &- half) &* w &+ x &- half))
        let (gxx, gxy, gyy) = known ?? Self.tensor(t, rowStride: w, size: n)
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
