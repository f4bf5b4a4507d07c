import Viewfinder

/// Options of ``StabiliseStage``.
public struct StabiliseOptions: StageOptions {
    /// Frames of look-ahead (the stage's delay).
    public var lookahead: Int = 15
    /// Time constant of the planned camera path, frames: motion slower than a period of about
    /// 2π × this follows the camera, faster motion is removed (as long as the crop allows).
    public var smoothing: Double = 30
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
            .int("lookahead", \.lookahead, range: 0...60, unit: "frames", "Look-ahead of the path smoothing; the stage delays frames by this much (timestamps stay with their frames). 15 for live use; 40-45 when a delay of 1.5 s is acceptable (recording) takes fast pans' starts and stops as smoothly as a path that knew the future"),
            .double("smoothing", \.smoothing, range: 1...120, unit: "frames", "Time constant of the planned camera path: motion slower than a period of about 2π times this is followed, faster motion removed while the crop allows (the crop window is a hard limit of the plan)"),
            .double("keep", \.keep, range: 0.85...1, unit: "fraction", "Part of the picture kept by the crop/zoom that hides the borders (0.85 keeps 85 %)"),
            .bool("rotation", \.rotation, "Correct rotation as well as translation"),
            .double("min_confidence", \.minConfidence, range: 0...1, "Estimates below this confidence count as no motion"),
            .choice("copy_frames", \.copyFrames, "Hold copies in the stage's own buffers so the source's go back at once: auto (only when the source has fewer buffers than the pipeline needs with this look-ahead), always, never. Warped frames go to the stage's own buffers (lookahead + 10, enough for a downstream ring of 8); when they run out, frames are warped in place"),
        ]
    }
}

/// Video stabilisation: global motion estimation on luma, a camera-path planner that treats the
/// crop window as a hard limit, and a warp with a fixed crop/zoom that hides the borders.
///
/// For each frame the ``MotionEstimator`` measures translation, rotation (and scale) from the
/// previous frame (`metadata.motion`); the camera path is their composition. The stage holds
/// `lookahead` frames; when a frame has its look-ahead, a small quadratic program plans the path
/// over the frames it knows and a short predicted stretch beyond them (model-predictive, in the
/// spirit of the L1-optimal camera paths of Grundmann, Kwatra & Essa, CVPR 2011): least
/// curvature (steady pans are free, so the path follows them without lag), a weak pull toward
/// the camera (time constant `smoothing`), and on every frame the correction bounded so the
/// crop stays inside the picture — the plan bends ahead of the crop edge instead of being
/// clamped at it, and joins the path already shown, so there are no hold/follow switches. The
/// angle is planned first, then each axis with the margin that rotation leaves. The frame is
/// warped by (planned − actual) pose, zoomed by 1/`keep` (`metadata.correction`, its `scale`
/// the zoom); a final check shrinks a correction that would still show a border.
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
    public static let summary = "Video stabilisation: pyramid block matching + Lucas-Kanade motion (translation, rotation) weighted by texture, camera-path planner with the crop window as a hard limit (look-ahead + predicted window), crop/zoom warp."

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
    /// Path planners per axis (x, y in pixels, angle in radians).
    private var planX: CameraPathPlanner
    private var planY: CameraPathPlanner
    private var angle: CameraPathPlanner
    /// Frames whose planned correction still had to be shrunk to keep the crop covered.
    private(set) var coverageCuts = 0

    public init(options: StabiliseOptions) {
        self.options = options
        zoom = 1 / options.keep
        planX = CameraPathPlanner(maxLookahead: options.lookahead, timeConstant: options.smoothing)
        planY = planX
        angle = planX
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
            throw ConfigurationError.unsupportedStream(stage: Self.name, reason: "\(format.width)x\(format.height) is too small to stabilise (at least 64x48)")
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
        planX.reset(); planY.reset(); angle.reset()
        coverageCuts = 0
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
            // Cannot happen with lookahead <= 60 (capacity 256); pass the frame on rather than overflow.
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
        let cap = Self.capacity
        // Frame t and the look-ahead measured after it; frames before t still in the path ring.
        let known = max(1, newest - t + 1)
        let past = max(0, min(t, t - (newest - cap + 2)))
        let w = frame.format.width, h = frame.format.height
        // The crop window (half sizes) inside the frame (half sizes): a correction (d, θ) keeps
        // it covered while |dx| + cw·|cos θ| + ch·|sin θ| ≤ W/2 and |dy| + cw·|sin θ| + ch·|cos θ| ≤ H/2.
        let halfW = Double(w - 1) / 2, halfH = Double(h - 1) / 2
        let cw = halfW / zoom, ch = halfH / zoom
        // Rotation may use up to a third of the vertical margin (the tighter one at 16:9).
        let angleMargin = options.rotation ? (halfH - ch) / 3 / max(cw, 1) : 0
        // Plan the angle first, then each translation axis with the margin the planned
        // rotation leaves on every frame of the window.
        var ca0 = 0.0
        if options.rotation {
            let sa = angle.plan(known: known, camera: { self.pathA[(t + $0 + cap) % cap] }, margin: { _ in angleMargin }, past: past)
            ca0 = sa - pathA[t % cap]
        }
        func correctionAngle(_ k: Int) -> Double {
            guard options.rotation else { return 0 }
            if k == 0 { return ca0 }
            let a = angle.planned(k)
            // Predicted frames: the camera's angle held at the last measured one.
            return a - pathA[(t + min(k, known - 1)) % cap]
        }
        // The camera's position in the corrected frame's axes: R(θ)·T (see the correction below).
        func cameraX(_ k: Int) -> Double {
            let a = correctionAngle(max(0, k)), i = (t + k + cap) % cap
            return cos(a) * pathX[i] + sin(a) * pathY[i]
        }
        func cameraY(_ k: Int) -> Double {
            let a = correctionAngle(max(0, k)), i = (t + k + cap) % cap
            return -sin(a) * pathX[i] + cos(a) * pathY[i]
        }
        func marginX(_ k: Int) -> Double {
            let a = abs(correctionAngle(k)); return halfW - cw * cos(a) - ch * sin(a) - 0.5
        }
        func marginY(_ k: Int) -> Double {
            let a = abs(correctionAngle(k)); return halfH - cw * sin(a) - ch * cos(a) - 0.5
        }
        let sx = planX.plan(known: known, camera: cameraX, margin: marginX, past: past)
        let sy = planY.plan(known: known, camera: cameraY, margin: marginY, past: past)
        let s = t % cap
        // Turn the frame to the planned angle (ca), then move it so its pose becomes the planned
        // one: d = T̄ − R(ca)·T, R the rotation as seen (y down).
        var ca = ca0
        var co = cos(ca), si = sin(ca)
        var cx = sx - (co * pathX[s] + si * pathY[s])
        var cy = sy - (-si * pathX[s] + co * pathY[s])
        // The plan keeps the crop covered; should rounding or a large rotation still show a
        // border, shrink the correction (continuously, by bisection) until it is covered.
        var map = AffineMap.correction(dx: cx, dy: cy, angle: ca, zoom: zoom, width: w, height: h)
        if !covers(map, w, h) {
            var lo = 0.0, hi = 1.0
            for _ in 0..<20 {
                let mid = (lo + hi) / 2
                if covers(AffineMap.correction(dx: cx * mid, dy: cy * mid, angle: ca * mid, zoom: zoom, width: w, height: h), w, h) { lo = mid } else { hi = mid }
            }
            cx *= lo; cy *= lo; ca *= lo
            map = AffineMap.correction(dx: cx, dy: cy, angle: ca, zoom: zoom, width: w, height: h)
            coverageCuts += 1
            co = cos(ca); si = sin(ca)
        }
        // What is shown is what the next plans join onto.
        if options.rotation { angle.record(shown: pathA[s] + ca) }
        planX.record(shown: cx + co * pathX[s] + si * pathY[s])
        planY.record(shown: cy - si * pathX[s] + co * pathY[s])
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
