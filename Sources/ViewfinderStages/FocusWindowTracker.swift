import CViewfinderKernels
/// Keeps the focus window on the same part of the scene while the camera shakes.
///
/// A hand-held camera moves the picture by a few pixels from frame to frame. Where the texture in
/// the window is uneven (flowers at its top, a lawn below), that shift alone moves the focus score
/// by as much as the lens does near focus: measured on a real photograph (Garden, sim shake 3 px,
/// lens held in focus) the Tenengrad went from 65 % to 100 % of its best as the vertical shake went
/// from +5 to −3 px. The tracker measures the picture's shift against a reference frame by integral
/// projections — the window's column sums and row sums, matched over ±`radius` pixels — and moves
/// the window with it, so the scan compares the same detail at every lens position.
///
/// Projections are sums over a whole band of the window: the defocus the scan itself brings in
/// barely changes them, and dividing each by its mean makes them indifferent to exposure. A match
/// at the edge of the search (a pan, not a shake) re-anchors the reference on the current frame.
struct FocusWindowTracker {
    /// The search range, pixels each way (limited further by the room around the window).
    let radius: Int
    /// The window's offset from its place at rest, pixels.
    private(set) var offsetX = 0, offsetY = 0
    /// Times the reference was re-anchored because the picture moved beyond the search.
    private(set) var reanchors = 0
    private var refCols: [Float] = [], refRows: [Float] = []
    private var cols: [Float] = [], rows: [Float] = []
    private var colSums: [Int32] = [], rowSums: [Int32] = []
    private var hasReference = false
    /// The window and margins the reference was taken with (a new one starts a new reference).
    private var key = PixelRect(x: 0, y: 0, width: 0, height: 0)
    private var keyWidth = 0, keyHeight = 0

    init(radius: Int) { self.radius = max(0, radius) }

    /// Smallest window side that is tracked, pixels.
    static let minimumSize = 48

    /// Forget the reference: the next frame is the new one (a new scan, a new scene).
    mutating func reset() {
        hasReference = false
        offsetX = 0; offsetY = 0
    }

    /// The window to measure in this frame: `base` moved by the picture's shift since the reference.
    mutating func track(_ luma: LumaView, base: PixelRect) -> PixelRect {
        let rx = min(radius, base.x, luma.width - base.x - base.width)
        let ry = min(radius, base.y, luma.height - base.y - base.height)
        // A window of a few dozen pixels has too little in its projections to match reliably.
        guard rx > 0 || ry > 0, base.width >= Self.minimumSize, base.height >= Self.minimumSize else { return base }
        if base != key || luma.width != keyWidth || luma.height != keyHeight {
            key = base; keyWidth = luma.width; keyHeight = luma.height
            hasReference = false
        }
        project(luma, base: base, rx: rx, ry: ry)
        guard hasReference else {
            swap(&refCols, &cols); swap(&refRows, &rows)
            hasReference = true
            offsetX = 0; offsetY = 0
            return base
        }
        let (dx, qx) = Self.bestShift(reference: refCols, current: cols, margin: rx, length: base.width)
        let (dy, qy) = Self.bestShift(reference: refRows, current: rows, margin: ry, length: base.height)
        if (rx > 0 && (abs(dx) == rx || qx > Self.matchLimit)) || (ry > 0 && (abs(dy) == ry || qy > Self.matchLimit)) {
            // Moved further than a shake: measure where the window is at rest from now on.
            swap(&refCols, &cols); swap(&refRows, &rows)
            reanchors += 1
            offsetX = 0; offsetY = 0
            return base
        }
        offsetX = dx; offsetY = dy
        return PixelRect(x: base.x + dx, y: base.y + dy, width: base.width, height: base.height)
    }

    /// Column sums over the window's rows for x in `base.x − rx ..< base.maxX + rx`, and row sums
    /// over its columns for y in `base.y − ry ..< base.maxY + ry`, each divided by its mean. (Every
    /// row and column: sampling every second one makes an odd shift along the other axis sum
    /// different pixels, which on fine detail is a different profile.)
    private mutating func project(_ luma: LumaView, base: PixelRect, rx: Int, ry: Int) {
        let nc = base.width + 2 * rx, nr = base.height + 2 * ry
        if colSums.count != nc { colSums = Array(repeating: 0, count: nc) }
        if rowSums.count != nr { rowSums = Array(repeating: 0, count: nr) }
        // C kernels (`vf_column_sums`, `vf_row_sums`): constant-stride loops the compiler vectorises.
        colSums.withUnsafeMutableBufferPointer { c in
            vf_column_sums(luma.pointer(x: base.x - rx, y: base.y), luma.bytesPerRow, luma.pixelStride, nc, base.height, c.baseAddress!)
        }
        rowSums.withUnsafeMutableBufferPointer { r in
            vf_row_sums(luma.pointer(x: base.x, y: base.y - ry), luma.bytesPerRow, luma.pixelStride, base.width, nr, r.baseAddress!)
        }
        Self.normalise(colSums, into: &cols)
        Self.normalise(rowSums, into: &rows)
    }

    private static func normalise(_ sums: [Int32], into out: inout [Float]) {
        if out.count != sums.count { out = Array(repeating: 0, count: sums.count) }
        var total: Int64 = 0
        for s in sums { total += Int64(s) }
        let mean = max(Float(total) / Float(max(sums.count, 1)), 1)
        for i in sums.indices { out[i] = Float(sums[i]) / mean }
    }

    /// The shift `d` in `−margin...margin` for which `current[margin + d + i]` best matches
    /// `reference[margin + i]` over the window's `length` samples (least sum of absolute
    /// differences, after removing each side's mean over the compared span), and how good the
    /// match is: its cost over the mean cost of all shifts (near 0: a clear match; near 1: none).
    static func bestShift(reference: [Float], current: [Float], margin: Int, length: Int) -> (shift: Int, quality: Float) {
        guard margin > 0 else { return (0, 0) }
        var refMean: Float = 0
        for i in 0..<length { refMean += reference[margin + i] }
        refMean /= Float(length)
        var best = 0
        var bestCost = Float.infinity, total: Float = 0
        for d in -margin...margin {
            var curMean: Float = 0
            for i in 0..<length { curMean += current[margin + d + i] }
            curMean /= Float(length)
            var cost: Float = 0
            for i in 0..<length { cost += abs((current[margin + d + i] - curMean) - (reference[margin + i] - refMean)) }
            total += cost
            // Ties go to the smaller shift.
            if cost < bestCost || (cost == bestCost && abs(d) < abs(best)) { bestCost = cost; best = d }
        }
        let mean = total / Float(2 * margin + 1)
        return (best, mean > 0 ? bestCost / mean : 0)
    }

    /// A best match costing more than this fraction of the mean over all shifts is no match: the
    /// picture moved beyond the search (or changed), and the reference is re-anchored.
    static let matchLimit: Float = 0.7
}
