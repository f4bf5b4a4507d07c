import Viewfinder

// The modes are the session's own `FocusMode` (Viewfinder core), so the stage and
// `CaptureDevice` speak the same type.

/// Which part of the picture the focus stage measures.
public enum FocusRegion: String, OptionChoice {
    /// A window of `size` around `point`.
    case point
    /// The normalised rectangle `rect`.
    case rect
}

/// Which measure drives the autofocus (both are published).
public enum FocusMeasureKind: String, OptionChoice {
    case tenengrad
    case laplacian
}

/// Options of ``FocusStage``.
public struct FocusOptions: StageOptions {
    public var mode: FocusMode = .continuous
    /// Lens position for `locked` mode (device units); negative leaves the lens where it is.
    public var position: Double = -1
    public var region: FocusRegion = .point
    public var point: NormalizedPoint = .center
    /// Window size around `point`, fraction of the picture's width and height (the window is
    /// moved inside the picture where `point` is near an edge). Half the width and height by
    /// default: on a soft, low-contrast subject (a sky of clouds) the score's frame-to-frame noise
    /// with the lens still (sensor noise, the shake resampling the detail) shrinks with the number
    /// of samples, and at 0.5 it is about twice as far below the focus signal as at 0.3 (signal
    /// over noise 8.2 against 3.4 on Storm), which is what lets every autofocus run end within 2 %
    /// of the range (`Benchmarks/results/af-window-size-2026-11-26.txt`). A smaller window (0.2–0.3)
    /// picks a subject out of a scene with depth, at the cost of a noisier score.
    public var size: Double = 0.5
    /// Normalised rectangle x/y/w/h for `region=rect`.
    public var rect: [Double] = [0.25, 0.25, 0.5, 0.5]
    public var measure: FocusMeasureKind = .tenengrad
    /// 2: measure a half-resolution copy of the region (binomially pre-filtered), so the score
    /// works around a quarter of the picture's Nyquist frequency, where the picture moving by a
    /// fraction of a pixel (a shaking camera) barely changes it; 1: the full-resolution region.
    /// A region under 98×66 pixels is measured at full resolution either way.
    public var scale: Int = 2
    /// How the region's samples are weighted: a Hann taper (the default) keeps the camera's
    /// shake from moving the score; `box` weights them all alike.
    public var window: FocusWindow = .hann
    /// Move the window with the picture under the camera's shake (integral projections against
    /// the frame the scan began with), so that every lens position is scored on the same detail.
    public var track: Bool = true
    /// Lens positions of the coarse scan across the whole range.
    public var coarseSteps: Int = 9
    /// Lens positions of the fine scan around the coarse peak.
    public var fineSteps: Int = 5
    /// Positions added at the end of the fine scan, either side of the peak fitted to the frames
    /// in so far (half a fine step away). They take the frames the lens would otherwise spend at
    /// the last fine position waiting for its frame, so they cost at most a frame or two.
    public var refineSteps: Int = 2
    /// While the coarse sweep's last frames are on their way, visit either side of the best peak
    /// seen so far instead of waiting at the sweep's end; while the fine pass's are, wait at the
    /// peak fitted so far.
    public var speculate: Bool = true
    /// Fit the final peak again over the fine positions around the first fit's vertex.
    public var localFit: Bool = true
    /// Relative change of the focus score that counts as a scene change (continuous mode).
    public var changeThreshold: Double = 0.35
    /// Consecutive frames beyond the threshold before a re-scan.
    public var patience: Int = 8
    /// Frames after a scan before a new one may start.
    public var minInterval: Int = 30

    public init() {}

    public static var fields: [OptionField<FocusOptions>] {
        [
            .choice("mode", \.mode, "locked: measure only (move to position if given); auto: scan once then lock; continuous: re-scan on scene change"),
            .double("position", \.position, range: -1...100_000, unit: "device focus units", "Lens position for locked mode (-1: leave the lens)"),
            .choice("region", \.region, "point: window of size around point; rect: the rectangle rect"),
            .point("point", \.point, "Point of interest"),
            .double("size", \.size, range: 0.05...1, unit: "fraction of width/height", "Window size around point"),
            .doubles("rect", \.rect, range: 0...1, unit: "normalised x/y/w/h", "Focus rectangle for region=rect"),
            .choice("measure", \.measure, "Measure that drives the lens (both are published)"),
            .int("scale", \.scale, range: 1...2, "2: measure a half-resolution copy of the region (the score barely moves when the picture shifts by a fraction of a pixel); 1: the full-resolution region"),
            .bool("track", \.track, "Move the focus window with the picture under the camera's shake, so the scan scores the same detail at every lens position"),
            .choice("window", \.window, "hann: weight the region by a Hann taper (shake at its border barely moves the score); box: all samples alike"),
            .int("coarse_steps", \.coarseSteps, range: 3...32, unit: "positions", "Lens positions in the coarse scan"),
            .int("fine_steps", \.fineSteps, range: 3...15, unit: "positions", "Lens positions in the fine scan"),
            .bool("speculate", \.speculate, "While the coarse sweep's last frames are on their way, visit either side of the best peak so far"),
            .bool("local_fit", \.localFit, "Fit the peak again over the fine positions around the first fit (narrow peaks on a plateau)"),
            .int("refine_steps", \.refineSteps, range: 0...8, unit: "positions", "Positions either side of the fitted peak at the end of the fine scan"),
            .double("change_threshold", \.changeThreshold, range: 0.05...0.95, unit: "fraction", "Relative score change that counts as a scene change"),
            .int("patience", \.patience, range: 1...120, unit: "frames", "Frames beyond the threshold before a re-scan"),
            .int("min_interval", \.minInterval, range: 0...10_000, unit: "frames", "Frames after a scan before another may start"),
        ]
    }

    public func validate(stage: String) throws {
        if rect.count != 4 || rect[2] <= 0 || rect[3] <= 0 {
            throw ConfigurationError.invalidOption(stage: stage, option: "rect", reason: "expected x/y/w/h with w and h > 0")
        }
    }
}

/// Contrast-detect autofocus and focus measurement.
///
/// Every frame gets the variance of the Laplacian and the Tenengrad of the focus region,
/// normalised by the mean luma squared (`metadata.focus`), and the loop state (`focusState`:
/// `.scanning` while the lens is moving, so analysis can skip those frames). The scan is pipelined:
/// a new lens position is sent every frame and each frame's score is attributed to the lens
/// position it was actually taken with (its metadata; else the command `controlLatencyFrames`
/// earlier). Coarse scan over the range, fine scan around the coarse peak, then the lens goes to
/// the peak of a Gaussian (a parabola on the log score) fitted by least squares to every frame
/// measured near it.
///
/// The lens control lags a few frames, and the frames a pass would spend waiting for its last
/// position's frame are used: while the coarse sweep's are in flight the lens visits either side of
/// the best peak so far (``FocusOptions/speculate``); the fine pass ends with positions either side
/// of the peak fitted so far (``FocusOptions/refineSteps``) and then waits at that peak; the final
/// peak is fitted again over the fine positions around the first fit (``FocusOptions/localFit``).
///
/// Noisy scores (a soft or low-contrast subject, sky, shake) are handled by using every frame:
/// frames taken at the same lens position are averaged (not maxed: a maximum picks the noise), the
/// fit runs over all positions near the best instead of three, and a pass ends when the frame at
/// its last position has arrived — a position the lens passed without a frame (the camera's timing
/// slipped) costs nothing, its neighbours' frames stand in for it.
public final class FocusStage: Stage {
    public static let name = "focus"
    public static let onePerPipeline = true
    public static let summary = "Focus measures (Laplacian variance, Tenengrad) and contrast-detect autofocus: locked, auto (coarse-to-fine scan), continuous (re-scan on scene change)."

    public let options: FocusOptions

    enum Phase { case idle, coarse, fine, moving, locked, monitoring }
    private var phase: Phase = .idle
    private var controls: (any DeviceControlling)?
    /// Where `process` queues lens moves (the capture side writes them).
    private var requests: ControlRequestQueue?
    private var latency = 0
    private var lensMin = 0.0, lensMax = 1000.0
    /// The focus control's step (device units): positions are sent on its grid.
    private var lensStep = 1.0
    private var region = PixelRect(x: 0, y: 0, width: 1, height: 1)
    /// Follows the picture's shift (``FocusOptions/track``).
    private var tracker = FocusWindowTracker(radius: 0)
    /// The picture size `region` is for.
    private var regionWidth = 0, regionHeight = 0
    /// Scan targets, and whether a frame taken at each has come in (the scores themselves are in
    /// the samples).
    private var targets: [Double] = []
    private var seen: [Bool] = []
    /// Every frame of the current scan: the lens position it was taken with and its score.
    private var samplePositions: [Double] = []
    private var sampleScores: [Double] = []
    /// Samples grouped by position (mean score per position), sorted by position, for `peak()`.
    private var sortedPositions: [Double] = []
    private var sortedScores: [Double] = []
    private var sortedCounts: [Int] = []
    /// Most frames one scan keeps.
    static let sampleCapacity = 128
    private var nextTarget = 0
    /// Refine positions added to the current fine pass.
    private var refined = 0
    /// Positions sent while the coarse sweep's last frames are on their way (alternating sides).
    private var speculative = 0
    /// Frames since the pass's last target was sent.
    private var waited = 0
    /// The fine pass's spacing (device units).
    private var fineSpacing = 0.0
    private var coarseStep: Double { (lensMax - lensMin) / Double(max(options.coarseSteps - 1, 1)) }
    private var commanded = 0.0
    /// Lens commands by frame count, for frames without lens metadata.
    private var history: [Double] = Array(repeating: 0, count: 64)
    private var frameCount = 0
    private var framesInPhase = 0
    private var finalTarget = 0.0
    private var reference = 0.0
    private var referenceFrames = 0
    private var outside = 0
    private var sinceScan = 0
    /// Scans started (the first one included).
    public private(set) var scanCount = 0
    public private(set) var controlErrors = 0
    private let targetKey = MetadataKey("af.lens_target")
    /// The half-resolution copy of the measured region (``FocusOptions/scale`` 2), sized in
    /// `prepare` for the whole picture: no allocation on the stage thread.
    private var halfBuffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 1)
    private var halfCapacity = 0

    public init(options: FocusOptions) {
        self.options = options
        targets.reserveCapacity(32)
        seen.reserveCapacity(32)
        samplePositions.reserveCapacity(Self.sampleCapacity)
        sampleScores.reserveCapacity(Self.sampleCapacity)
        sortedPositions.reserveCapacity(Self.sampleCapacity)
        sortedScores.reserveCapacity(Self.sampleCapacity)
        sortedCounts.reserveCapacity(Self.sampleCapacity)
    }

    deinit { halfBuffer.deallocate() }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        // A focus score compares frames with each other: a reduced MJPEG decode serves as long as
        // it keeps the detail the lens brings in and out (measured: `SimClosedLoopTests`).
        // A small window keeps the default window's samples (160 across): `size=0.1` on a
        // 320-wide view was 32, halved again for the score, and autofocus on an MJPEG camera
        // ended 25 % of the range off where YUYV locked (3 Dec sweep).
        try context.needStatistics(Self.name, minimumWidth: Self.measuringWidth(for: options))
        region = focusRegion(width: format.width, height: format.height)
        regionWidth = format.width; regionHeight = format.height
        let need = (format.width / 2 + 1) * (format.height / 2 + 1)
        if options.scale == 2, need > halfCapacity {
            halfBuffer.deallocate()
            halfBuffer = .allocate(capacity: need)
            halfCapacity = need
        }
        controls = context.controls
        requests = context.controlRequests
        latency = context.controls?.controlLatencyFrames ?? 0
        frameCount = 0
        phase = .idle
        tracker = FocusWindowTracker(radius: Self.trackingRadius(width: format.width))
        if let c = controls, let d = c.descriptor(.focusAbsolute) {
            lensMin = Double(d.minimum); lensMax = Double(max(d.maximum, d.minimum + 1))
            lensStep = Double(max(d.step, 1))
            commanded = (try? c.value(of: .focusAbsolute)).map(Double.init) ?? lensMin
            for i in history.indices { history[i] = commanded }
            if options.mode != .locked || options.position >= 0, c.supports(.focusAuto) { try? c.set(.focusAuto, to: 0) }
            switch options.mode {
            case .locked:
                if options.position >= 0 { move(to: options.position) }
                phase = .locked
            case .auto, .continuous:
                startScan()
            }
        } else {
            controls = nil
            phase = .locked
        }
    }

    /// How far the window may follow the picture: 1/48 of the width each way (20 px at 960).
    static func trackingRadius(width: Int) -> Int { max(2, width / 48) }

    /// Narrowest picture the focus measure works on (a reduced MJPEG decode at least this wide).
    public static let measuringWidth = 320

    /// The narrowest view on which `options`' window keeps the default window's 160 samples
    /// across: the window is `size` of the picture's width for `region=point`, the rectangle's
    /// own width for `rect` (a small rectangle was measured on the 1/4 view too).
    static func measuringWidth(for options: FocusOptions) -> Int {
        let fraction = options.region == .rect ? options.rect[2] : options.size
        return max(measuringWidth, Int((Double(measuringWidth) * 0.5 / max(fraction, 1e-3)).rounded(.up)))
    }

    private func focusRegion(width: Int, height: Int) -> PixelRect {
        switch options.region {
        case .point: return PixelRect.around(options.point, fraction: options.size, width: width, height: height)
        case .rect: return PixelRect.normalised(options.rect[0], options.rect[1], options.rect[2], options.rect[3], width: width, height: height)
        }
    }

    /// The score that drives the loop.
    @inline(__always)
    func score(_ m: FocusMeasure) -> Double {
        options.measure == .tenengrad ? m.tenengrad : m.laplacianVariance
    }

    public func process(_ frame: Frame) -> StageVerdict {
        guard let px = frame.pixels else { return .forward }
        if px.width != regionWidth || px.height != regionHeight {
            // A reduced decoded view: the same region in its coordinates (computed once per size).
            region = focusRegion(width: px.width, height: px.height)
            regionWidth = px.width; regionHeight = px.height
            tracker = FocusWindowTracker(radius: Self.trackingRadius(width: px.width))
        }
        let luma = LumaView(px.luma)
        let measured = options.track ? tracker.track(luma, base: region) : region
        let stats: FocusMeasures.Statistics
        if options.scale == 2, let half = FocusMeasures.halfResolution(luma, region: measured, into: halfBuffer, capacity: halfCapacity) {
            stats = FocusMeasures.measure(half, region: nil, window: options.window)
        } else {
            stats = FocusMeasures.measure(luma, region: measured, window: options.window)
        }
        let m = stats.normalised
        frame.metadata.focus = m
        let s = score(m)
        // The lens position this frame was taken with.
        let lens = frame.metadata.lensPosition ?? frame.metadata.exposedWith.focus.map(Double.init) ?? frame.metadata.truth?.appliedLensPosition
            ?? history[(frameCount - latency + history.count * 4) % history.count]
        frameCount += 1
        framesInPhase += 1
        sinceScan += 1

        switch phase {
        case .coarse, .fine:
            record(lens: lens, score: s)
            // The lens visits the targets in order: once the frame at the last one is in, the
            // sweep is complete (a target passed without a frame of its own is not waited for).
            // The next pass's first position is sent on this same frame.
            // A frame slip can lose the frame at the last position while the lens has moved on
            // (a speculative or waiting position): then the pass ends at most two frames after
            // that frame was due.
            if seen[seen.count - 1] || waited > latency + 1 || framesInPhase > targets.count + latency + 6 {
                finishPass()
            }
            if phase == .coarse || phase == .fine {
                if nextTarget == targets.count, phase == .fine, refined < options.refineSteps {
                    // Either side of the peak the frames so far give, alternately.
                    let side = refined % 2 == 0 ? -1.0 : 1.0
                    let p = finePeak()
                    targets.append(snap(p + side * 0.5 * fineSpacing)); seen.append(false)
                    refined += 1
                }
                waited = nextTarget < targets.count ? 0 : waited + 1
                if nextTarget < targets.count {
                    move(to: targets[nextTarget]); nextTarget += 1
                } else if phase == .coarse && options.speculate {
                    // The coarse sweep's last frames are still on their way: rather than wait at
                    // its end, the lens visits either side of the best peak seen so far (their
                    // frames join the fine pass's fit wherever the peak turns out to be near).
                    let side = speculative % 2 == 0 ? -1.0 : 1.0
                    move(to: peak(radius: 1.01 * coarseStep).position + side * 0.3 * coarseStep)
                    speculative += 1
                } else if phase == .fine && options.speculate {
                    // The fine pass's last frames are on their way: wait where the peak is likely
                    // to be, so the lens has less far to go when the final fit is in.
                    move(to: finePeak())
                } else {
                    move(to: commanded)
                }
            }
            frame.metadata.focusState = .scanning
        case .moving:
            move(to: finalTarget)
            if abs(lens - finalTarget) <= 0.5 || framesInPhase > latency + 4 {
                phase = options.mode == .auto ? .locked : .monitoring
                reference = 0; referenceFrames = 0; outside = 0; sinceScan = 0
                frame.metadata.focusState = phase == .locked ? .locked : .converged
                if phase == .monitoring { updateReference(s) }
            } else {
                frame.metadata.focusState = .scanning
            }
        case .monitoring:
            move(to: commanded)
            frame.metadata.focusState = .converged
            if referenceFrames < 4 { updateReference(s); break }
            let change = abs(s - reference) / max(reference, 1e-12)
            if change > options.changeThreshold { outside += 1 } else {
                outside = 0
                // Follow slow drift (lighting, noise level) without re-scanning.
                reference += 0.02 * (s - reference)
            }
            if outside >= options.patience && sinceScan >= options.minInterval {
                startScan()
                frame.metadata.focusState = .scanning
            }
        case .locked, .idle:
            if controls != nil { move(to: commanded) }
            frame.metadata.focusState = .locked
        }
        frame.metadata.custom.set(targetKey, commanded)
        return .forward
    }

    private func updateReference(_ s: Double) {
        referenceFrames += 1
        reference += (s - reference) / Double(referenceFrames)
    }

    private func startScan() {
        scanCount += 1
        // The scan compares frames with the one it begins on.
        tracker.reset()
        phase = .coarse
        framesInPhase = 0
        let n = options.coarseSteps
        targets.removeAll(keepingCapacity: true)
        seen.removeAll(keepingCapacity: true)
        samplePositions.removeAll(keepingCapacity: true)
        sampleScores.removeAll(keepingCapacity: true)
        // Start from the end nearer the lens.
        let fromLow = commanded - lensMin <= lensMax - commanded
        for i in 0..<n {
            let t = lensMin + (lensMax - lensMin) * Double(i) / Double(n - 1)
            targets.append(snap(t))
            seen.append(false)
        }
        if !fromLow { targets.reverse() }
        nextTarget = 0
        speculative = 0
        waited = 0
        move(to: targets[0]); nextTarget = 1
    }

    private func record(lens: Double, score: Double) {
        // Only targets already sent: a frame at the same position before that (a speculative
        // frame, a target clamped to the range's end) does not complete the pass.
        for i in 0..<nextTarget where abs(targets[i] - lens) <= 0.5 { seen[i] = true }
        guard score.isFinite, samplePositions.count < Self.sampleCapacity else { return }
        samplePositions.append(lens)
        sampleScores.append(score)
    }

    /// The peak of the scan's samples within `radius` of the best position: the samples are grouped
    /// by lens position (mean score of each), the best group is found, and a parabola is fitted by
    /// least squares to the log scores of the groups within `radius` of it (a Gaussian fit); its
    /// vertex, kept inside the span those groups cover, is the peak. Each group weighs its frame
    /// count times its score relative to the best, squared: near the peak the Gaussian holds, far
    /// down its flanks (where a sharp subject's score is at the noise floor) it does not. With
    /// fewer than three groups, or no maximum in the fit, the best position itself. `centre`, when
    /// given, is where the fit is centred instead (and what it returns when it fails).
    private func peak(radius: Double, around centre: Double? = nil) -> (position: Double, best: Double) {
        // Group by position, sorted, into reserved storage: no allocation on the stage thread.
        sortedPositions.removeAll(keepingCapacity: true)
        sortedScores.removeAll(keepingCapacity: true)
        sortedCounts.removeAll(keepingCapacity: true)
        for i in samplePositions.indices {
            let t = samplePositions[i], v = sampleScores[i]
            if let g = sortedPositions.firstIndex(where: { abs($0 - t) <= 0.5 }) {
                sortedScores[g] += v; sortedCounts[g] += 1
                continue
            }
            var k = sortedPositions.count
            sortedPositions.append(t); sortedScores.append(v); sortedCounts.append(1)
            while k > 0 && sortedPositions[k - 1] > t {
                sortedPositions[k] = sortedPositions[k - 1]; sortedScores[k] = sortedScores[k - 1]; sortedCounts[k] = sortedCounts[k - 1]
                k -= 1
            }
            sortedPositions[k] = t; sortedScores[k] = v; sortedCounts[k] = 1
        }
        guard !sortedPositions.isEmpty else { return (commanded, commanded) }
        for g in sortedScores.indices { sortedScores[g] /= Double(sortedCounts[g]) }
        var best = 0
        for g in sortedScores.indices where sortedScores[g] > sortedScores[best] { best = g }
        let x0 = centre ?? sortedPositions[best]
        // Least squares of log score = a + b·u + c·u² (u = (x − x0) / radius).
        var s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, t0 = 0.0, t1 = 0.0, t2 = 0.0
        var lo = x0, hi = x0, groups = 0
        for g in sortedPositions.indices where abs(sortedPositions[g] - x0) <= radius {
            let r = sortedScores[g] / max(sortedScores[best], 1e-300)  // ≤ 1
            let u = (sortedPositions[g] - x0) / radius, w = Double(sortedCounts[g]) * r * r
            let y = log(max(sortedScores[g], 1e-12))
            s0 += w; s1 += w * u; s2 += w * u * u; s3 += w * u * u * u; s4 += w * u * u * u * u
            t0 += w * y; t1 += w * u * y; t2 += w * u * u * y
            lo = min(lo, sortedPositions[g]); hi = max(hi, sortedPositions[g]); groups += 1
        }
        guard groups >= 3 else { return (x0, sortedPositions[best]) }
        // Normal equations [s0 s1 s2; s1 s2 s3; s2 s3 s4]·(a, b, c) = (t0, t1, t2), by Cramer's rule.
        func det(_ a: Double, _ b: Double, _ c: Double, _ d: Double, _ e: Double, _ f: Double, _ g: Double, _ h: Double, _ i: Double) -> Double {
            a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
        }
        let d = det(s0, s1, s2, s1, s2, s3, s2, s3, s4)
        guard abs(d) > 1e-12 else { return (x0, sortedPositions[best]) }
        let b = det(s0, t0, s2, s1, t1, s3, s2, t2, s4) / d
        let c = det(s0, s1, t0, s1, s2, t1, s2, s3, t2) / d
        guard c < 0 else { return (x0, sortedPositions[best]) }
        let vertex = x0 + radius * (-b / (2 * c))
        return (min(hi, max(lo, vertex)), sortedPositions[best])
    }

    /// The peak once the fine pass has frames: the fit over a coarse step either side of the
    /// best position, then again over a step and a half of the fine spacing around that fit's
    /// vertex. A soft subject's score can be a narrow peak on a broad plateau (Storm's clouds:
    /// 3 % down 30 units away, then flat); a parabola through the plateau's frames puts its
    /// vertex toward whichever flank has more of them, the local fit follows the peak itself.
    private func finePeak() -> Double {
        let wide = peak(radius: 1.01 * coarseStep).position
        guard options.localFit, fineSpacing > 0 else { return wide }
        return peak(radius: 1.5 * fineSpacing, around: wide).position
    }

    private func finishPass() {
        framesInPhase = 0
        waited = 0
        if phase == .coarse {
            // Fine scan around the coarse peak (a fit through the best position and its
            // neighbours either side), nearest end first.
            let p = peak(radius: 1.01 * coarseStep)
            // A coarse neighbour of the best that has no frame (the camera's timing slipped and
            // the lens passed it) leaves the peak's side unknown: the fine scan then covers the
            // whole cell on both sides, with two positions more.
            func unseen(_ x: Double) -> Bool {
                x >= lensMin - 0.5 && x <= lensMax + 0.5 && !samplePositions.contains { abs($0 - x) <= 0.5 * lensStep + 0.5 }
            }
            let missing = unseen(p.best - coarseStep) || unseen(p.best + coarseStep)
            let n = options.fineSteps + (missing ? 2 : 0)
            let centre = missing ? p.best : p.position
            let half = (missing ? 1.0 : 0.6) * coarseStep
            targets.removeAll(keepingCapacity: true)
            seen.removeAll(keepingCapacity: true)
            for i in 0..<n {
                // Positions clamped to the range's end or snapped together are visited once.
                let t = snap(min(lensMax, max(lensMin, centre - half + 2 * half * Double(i) / Double(n - 1))))
                if targets.last.map({ abs($0 - t) > 0.5 }) ?? true {
                    targets.append(t)
                    seen.append(false)
                }
            }
            if abs(targets[targets.count - 1] - commanded) < abs(targets[0] - commanded) { targets.reverse() }
            phase = .fine
            nextTarget = 0
            refined = 0
            fineSpacing = 2 * half / Double(n - 1)
        } else {
            // Every frame of the scan within a coarse step of the best position: the fine
            // positions and the coarse neighbours (weighted by score, so a sharp subject's peak is
            // fitted by its fine positions, a soft subject's broad one by both).
            finalTarget = snap(finePeak())
            phase = .moving
            move(to: finalTarget)
        }
    }

    /// The nearest position on the control's grid, within its range.
    @inline(__always)
    private func snap(_ x: Double) -> Double {
        let v = lensMin + ((x - lensMin) / lensStep).rounded() * lensStep
        return min(lensMax, max(lensMin, v))
    }

    private func move(to position: Double) {
        let p = snap(position)
        history[frameCount % history.count] = p
        guard controls != nil else { return }
        if p != commanded || phase == .coarse || phase == .fine {
            // Queued for the capture side to write: no device call on the stage thread.
            if !(requests?.request(.focusAbsolute, to: Int64(p)) ?? false) { controlErrors += 1 }
        }
        commanded = p
    }

    public var loopPhase: String { "\(phase)" }
    /// The lens position last commanded.
    public var lensTarget: Double { commanded }
}

#if canImport(Glibc)
import Glibc
#endif
