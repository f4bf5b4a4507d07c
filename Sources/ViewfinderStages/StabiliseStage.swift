import Viewfinder

/// Options of ``StabiliseStage``.
public struct StabiliseOptions: StageOptions {
    /// Frames of look-ahead (the stage's delay).
    public var lookahead: Int = 15
    /// Gaussian smoothing of the camera path, frames (sigma). The window reaches 3 sigma into the
    /// past (up to 224 frames) and `lookahead` frames into the future.
    public var smoothing: Double = 90
    /// Fraction of the picture kept after the crop that hides the borders (zoom = 1/keep).
    public var keep: Double = 0.9
    /// Whether to correct rotation as well as translation.
    public var rotation: Bool = true
    /// Motion estimates below this confidence (0–1) count as no motion.
    public var minConfidence: Double = 0.15
    /// When to hold copies in the stage's own buffers (giving the source's buffer back at once)
    /// rather than the source's frames: a device with few buffers (V4L2 often has 4) must not be
    /// starved by the look-ahead, but a copy costs a frame of memory traffic.
    public var copyFrames: CopyPolicy = .auto

    /// When ``StabiliseStage`` copies frames it holds for its look-ahead.
    public enum CopyPolicy: String, Sendable, CaseIterable, OptionChoice {
        /// Copy unless the source has buffers to spare for the pipeline (`StageContext.sourceHasBuffersToSpare`).
        case auto
        /// Always copy.
        case always
        /// Never copy (the look-ahead holds the source's buffers).
        case never
    }

    public init() {}

    public static var fields: [OptionField<StabiliseOptions>] {
        [
            .int("lookahead", \.lookahead, range: 0...30, unit: "frames", "Look-ahead of the path smoothing; the stage delays frames by this much (timestamps stay with their frames)"),
            .double("smoothing", \.smoothing, range: 1...120, unit: "frames", "Sigma of the Gaussian path smoothing (window: 3 sigma of past, up to 224 frames, and lookahead of future, tapered to zero at its end)"),
            .double("keep", \.keep, range: 0.85...1, unit: "fraction", "Part of the picture kept by the crop/zoom that hides the borders (0.85 keeps 85 %)"),
            .bool("rotation", \.rotation, "Correct rotation as well as translation"),
            .double("min_confidence", \.minConfidence, range: 0...1, "Estimates below this confidence count as no motion"),
            .choice("copy_frames", \.copyFrames, "Hold copies in the stage's own buffers so the source's go back at once: auto (only when the source has fewer buffers than the pipeline needs with this look-ahead), always, never. Warped frames go to the stage's own buffers (lookahead + 10, enough for a downstream ring of 8); when they run out, frames are warped in place"),
        ]
    }
}

/// Video stabilisation: global motion estimation on luma, path smoothing with look-ahead, and a
/// warp with a fixed crop/zoom that hides the borders.
///
/// For each frame the ``MotionEstimator`` measures translation, rotation (and scale) from the
/// previous frame (`metadata.motion`); the camera path is their sum. The stage holds
/// `lookahead` frames; when a frame has its look-ahead, the path is smoothed with Gaussian weights
/// (sigma `smoothing`) over up to 3 sigma of past and `lookahead` frames of future — a weighted
/// mean, blended toward a local linear fit when a deliberate pan would push the correction past
/// half the crop margin — and the frame is warped by (smoothed − actual) path, zoomed by
/// 1/`keep`, the correction clamped so no border shows (`metadata.correction`, its `scale` the zoom).
/// Supports YUYV, UYVY, NV12, I420, YUV422P and GREY in place, and MJPEG, RGB and Bayer through
/// the full-size decoded view it asks the engine for (`PixelNeed/modify`): the warped view goes
/// to the sinks, which encode it, while the frame's own bytes stay the camera's.
///
/// Memory: warped frames go to the stage's own buffers (look-ahead + 10). The frames it holds for
/// the look-ahead are the source's own when the source has buffers to spare for the whole
/// pipeline (the session sizes them so; `StageContext.sourceHasBuffersToSpare`), and copies
/// otherwise (`copy_frames`), so a V4L2 device with 4 buffers is never starved. Not copying
/// saves a frame of memory traffic (0.3–0.4 ms at 1080p YUYV).
public final class StabiliseStage: Stage {
    public static let name = "stabilise"
    public static let summary = "Video stabilisation: pyramid block matching + Lucas-Kanade motion (translation, rotation) weighted by texture, Gaussian path smoothing with look-ahead, crop/zoom warp."

    public let options: StabiliseOptions
    private var estimator: MotionEstimator?
    private var scratch: UnsafeMutableRawPointer?
    private var scratchBytes = 0
    private var workspace: WarpWorkspace?
    private var pool: FramePool?
    /// Whether incoming frames are copied (``StabiliseOptions/copyFrames`` resolved in `prepare`).
    private var copying = true
    private var format: FrameFormat?
    /// Whether frames are warped through their decoded view (MJPEG, RGB, Bayer).
    private var decodedPath = false
    private let zoom: Double
    private let sigma: Double

    static let capacity = 256
    /// Camera path by frame number (mod capacity).
    private var pathX = [Double](repeating: 0, count: capacity)
    private var pathY = [Double](repeating: 0, count: capacity)
    private var pathA = [Double](repeating: 0, count: capacity)
    /// Held frames, oldest first, as a ring; `warped` of them at the head are ready.
    private var held = [Frame?](repeating: nil, count: capacity)
    private var heldIndex = [Int](repeating: 0, count: capacity)
    private var head = 0
    private var count = 0
    private var warped = 0
    private var frameNumber = 0
    private var finishing = false
    /// Share of the pan-following estimate in the smoothed path (see `warpNext`).
    private var blend = 0.0

    public init(options: StabiliseOptions) {
        self.options = options
        zoom = 1 / options.keep
        sigma = options.smoothing
    }

    deinit {
        for i in 0..<count { held[(head + i) % Self.capacity]?.releaseHold() }
        scratch?.deallocate()
    }

    public var delayFrames: Int { options.lookahead }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        // YUV formats are warped in their own layout; MJPEG, RGB and Bayer through the full-size
        // decoded view the engine makes (the camera's bytes stay as they came, for the raw dump).
        decodedPath = !format.pixelFormat.hasYUVPlanes
        if decodedPath { try context.pixels.need(.modify, stage: Self.name) }
        guard format.width >= 64, format.height >= 48 else {
            throw ConfigurationError.invalidOption(stage: Self.name, option: "format", reason: "\(format.width)x\(format.height) is too small to stabilise (at least 64x48)")
        }
        if self.format != format || estimator == nil {
            estimator = MotionEstimator(width: format.width, height: format.height)
            scratch?.deallocate()
            // Room for the frame, or for its decoded view (4:2:2 planar at most).
            scratchBytes = max(format.maxByteCount, FrameFormat(.yuv422p, width: format.width, height: format.height, bytesPerRow: (format.width + 1) & ~1).maxByteCount)
            scratch = .allocate(byteCount: scratchBytes, alignment: 64)
            workspace = WarpWorkspace(maxWidth: format.width)
            pool = FramePool(format: format, count: options.lookahead + 10)
        }
        switch options.copyFrames {
        case .always: copying = true
        case .never: copying = false
        case .auto: copying = !context.sourceHasBuffersToSpare
        }
        self.format = format
        estimator?.reset()
        frameNumber = 0
        blend = 0
        finishing = false
    }

    public func process(_ frame: Frame) -> StageVerdict {
        guard let est = estimator, frame.format == format, let px = frame.pixels, px.scale == 1 else { return .forward }
        var m = est.estimate(LumaView(px.luma))
        if m.confidence < options.minConfidence || !m.dx.isFinite || !m.dy.isFinite || !m.angle.isFinite {
            m = MotionEstimate(dx: 0, dy: 0, angle: 0, scale: 1, confidence: m.confidence)
        }
        if !options.rotation { m.angle = 0 }
        frame.metadata.motion = m
        let n = frameNumber
        let slot = n % Self.capacity
        let prevSlot = (n + Self.capacity - 1) % Self.capacity
        if n == 0 {
            pathX[slot] = 0; pathY[slot] = 0; pathA[slot] = 0
        } else {
            // Poses compose: this frame is the previous one turned by the frame's angle about the
            // centre and moved, so the previous translation turns too. (Adding translations as
            // if they did not is fine for shake alone, but during a pan of hundreds of pixels the
            // shake's rotation times that translation shows up as jitter.)
            let co = cos(m.angle), si = sin(m.angle)
            let px = pathX[prevSlot], py = pathY[prevSlot]
            pathX[slot] = co * px + si * py + m.dx
            pathY[slot] = -si * px + co * py + m.dy
            pathA[slot] = pathA[prevSlot] + m.angle
        }
        frameNumber += 1
        if count == Self.capacity {
            // Cannot happen with lookahead <= 30; pass the frame on rather than overflow.
            return .forward
        }
        var frame = frame
        // Give the source its buffer back: hold a copy (keeping one of our buffers for the warp).
        if copying, let pool, pool.available > 1, frame.bytesUsed <= pool.frameCapacity, let own = pool.acquireForStage() {
            own.copyAttributes(from: frame)
            own.data.copyMemory(from: frame.data, byteCount: min(frame.bytesUsed, own.capacity))
            frame.moveDecoded(to: own)
            frame.releaseHold()
            frame = own
        }
        let tail = (head + count) % Self.capacity
        held[tail] = frame
        heldIndex[tail] = n
        count += 1
        // The frame `lookahead` back now has its look-ahead.
        while count - warped > options.lookahead { warpNext(newest: n) }
        return .hold
    }

    private func warpNext(newest: Int) {
        let pos = (head + warped) % Self.capacity
        guard var frame = held[pos] else { return }
        let t = heldIndex[pos]
        let L = options.lookahead
        // Past frames up to 3 sigma (as far as the history reaches), future up to the look-ahead.
        let past = min(Int(3 * sigma), Self.capacity - L - 2)
        let lo = max(0, t - past, newest - Self.capacity + 1)
        let hi = min(newest, t + L)
        var sx = smooth(pathX, t, lo, hi), sy = smooth(pathY, t, lo, hi), sa = smooth(pathA, t, lo, hi)
        // The weighted mean (best against shake) lags behind a deliberate pan; when its correction
        // nears the crop margin, blend toward the local linear fit, which follows pans.
        let w = frame.format.width, h = frame.format.height
        let marginX = Double(w) * (1 - options.keep) / 2, marginY = Double(h) * (1 - options.keep) / 2
        let slot = t % Self.capacity
        let use = max(abs(sx.mean - pathX[slot]) / max(marginX, 1), abs(sy.mean - pathY[slot]) / max(marginY, 1))
        // The handover moves by at most 1/15 per frame, eased (raised cosine): switching at once
        // jumps the picture by the mean's lag (15 px on a test pan) between two frames, and a
        // linear ramp starts and stops the extra motion abruptly.
        let target = min(1, max(0, (use - 0.5) / 0.5))
        blend += min(1.0 / 15, max(-1.0 / 15, target - blend))
        let b = 0.5 * (1 - cos(Double.pi * blend))
        sx.mean += b * (sx.linear - sx.mean); sy.mean += b * (sy.linear - sy.mean); sa.mean += b * (sa.linear - sa.mean)
        let s = t % Self.capacity
        // Turn the frame to the smoothed angle (ca), then move it so its pose becomes the smoothed
        // one: d = T̄ − R(ca)·T, R the rotation as seen (y down).
        var ca = options.rotation ? sa.mean - pathA[s] : 0
        let co = cos(ca), si = sin(ca)
        var cx = sx.mean - (co * pathX[s] + si * pathY[s])
        var cy = sy.mean - (-si * pathX[s] + co * pathY[s])
        // Shrink the correction until the zoomed picture covers the frame (no border shows).
        // The largest share of the correction that still covers, by bisection: continuous in
        // the correction, so reaching the margin bends the picture's path instead of jumping it.
        var map = AffineMap.correction(dx: cx, dy: cy, angle: ca, zoom: zoom, width: w, height: h)
        if !covers(map, w, h) {
            var lo = 0.0, hi = 1.0
            for _ in 0..<20 {
                let mid = (lo + hi) / 2
                if covers(AffineMap.correction(dx: cx * mid, dy: cy * mid, angle: ca * mid, zoom: zoom, width: w, height: h), w, h) { lo = mid } else { hi = mid }
            }
            cx *= lo; cy *= lo; ca *= lo
            map = AffineMap.correction(dx: cx, dy: cy, angle: ca, zoom: zoom, width: w, height: h)
        }
        if decodedPath {
            // The decoded view is this frame's alone: warp it in place from a copy.
            if let d = frame.decoded, let scratch, d.bytesUsed <= scratchBytes, d.format.width == w, d.format.height == h {
                scratch.copyMemory(from: d.data, byteCount: d.bytesUsed)
                Warp.frame(d, from: scratch.assumingMemoryBound(to: UInt8.self), map: map, workspace: workspace)
                frame.pixelsModified = true
            }
        } else if let out = pool?.acquireForStage() {
            // Warp into a fresh buffer of ours; the source frame goes back to its owner.
            out.copyAttributes(from: frame)
            Warp.frame(out, from: frame.data.assumingMemoryBound(to: UInt8.self), map: map, workspace: workspace)
            out.pixelsModified = true
            frame.releaseHold()
            frame = out
            held[pos] = out
        } else if let scratch, frame.bytesUsed <= scratchBytes {
            scratch.copyMemory(from: frame.data, byteCount: min(frame.bytesUsed, scratchBytes))
            Warp.frame(frame, from: scratch.assumingMemoryBound(to: UInt8.self), map: map, workspace: workspace)
            frame.pixelsModified = true
        }
        frame.metadata.correction = MotionEstimate(dx: cx, dy: cy, angle: ca, scale: zoom, confidence: frame.metadata.motion?.confidence ?? 0)
        warped += 1
    }

    /// The path at frame `t` smoothed over frames lo...hi with Gaussian weights: the weighted mean,
    /// and the local linear fit (unbiased for steady pans even with a lopsided window).
    private func smooth(_ path: [Double], _ t: Int, _ lo: Int, _ hi: Int) -> (mean: Double, linear: Double) {
        var s0 = 0.0, s1 = 0.0, s2 = 0.0, y0 = 0.0, y1 = 0.0
        let inv = 1 / (2 * sigma * sigma)
        // The window ends where the look-ahead does. Cut there, the Gaussian would let each new
        // frame enter with nearly full weight, and its shake with it; the square root of a raised
        // cosine takes the future weights smoothly to zero at the end (simulated on the sim's
        // shake model, 1/f amplitudes 0.3–6 Hz: 6.1 % of the jitter left becomes 2.8 % with
        // sigma 90 and 224 frames of past, at the same look-ahead and the same crop).
        let ahead = Double(hi - t + 1)
        for k in lo...hi {
            let d = Double(k - t)
            var w = exp(-d * d * inv)
            if d > 0 { w *= (0.5 * (1 + cos(Double.pi * d / ahead))).squareRoot() }
            let v = path[k % Self.capacity]
            s0 += w; s1 += w * d; s2 += w * d * d; y0 += w * v; y1 += w * d * v
        }
        let det = s0 * s2 - s1 * s1
        guard det > 1e-9 * s0 * s0 else { return (y0 / s0, y0 / s0) }
        return (y0 / s0, (s2 * y0 - s1 * y1) / det)
    }

    private func covers(_ m: AffineMap, _ w: Int, _ h: Int) -> Bool {
        let mx = Double(w - 1) - 1e-3, my = Double(h - 1) - 1e-3
        for i in 0..<4 {
            let p = m.apply(i & 1 == 0 ? 0 : Double(w - 1), i < 2 ? 0 : Double(h - 1))
            if p.x < 0 || p.y < 0 || p.x >= mx || p.y >= my { return false }
        }
        return true
    }

    public func nextReady() -> Frame? {
        guard warped > 0, count > 0 else { return nil }
        let f = held[head]
        held[head] = nil
        head = (head + 1) % Self.capacity
        count -= 1
        warped -= 1
        return f
    }

    public func finish() {
        finishing = true
        let newest = frameNumber - 1
        while warped < count { warpNext(newest: newest) }
    }
}

#if canImport(Glibc)
import Glibc
#endif
