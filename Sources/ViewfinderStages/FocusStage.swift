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
    /// Window size around `point`, fraction of the picture's width and height.
    public var size: Double = 0.3
    /// Normalised rectangle x/y/w/h for `region=rect`.
    public var rect: [Double] = [0.25, 0.25, 0.5, 0.5]
    public var measure: FocusMeasureKind = .tenengrad
    /// Lens positions of the coarse scan across the whole range.
    public var coarseSteps: Int = 9
    /// Lens positions of the fine scan around the coarse peak.
    public var fineSteps: Int = 5
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
            .int("coarse_steps", \.coarseSteps, range: 3...32, unit: "positions", "Lens positions in the coarse scan"),
            .int("fine_steps", \.fineSteps, range: 3...15, unit: "positions", "Lens positions in the fine scan"),
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
/// earlier). Coarse scan over the range, fine scan around the best coarse position, a Gaussian
/// (parabola on log score) fit through the best three, then the lens goes to the peak.
public final class FocusStage: Stage {
    public static let name = "focus"
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
    /// The picture size `region` is for.
    private var regionWidth = 0, regionHeight = 0
    /// Scan targets and the score seen at each (NaN until seen).
    private var targets: [Double] = []
    private var scores: [Double] = []
    /// Scan positions and scores sorted by position, for `peak()` (storage reserved up front).
    private var sortedPositions: [Double] = []
    private var sortedScores: [Double] = []
    private var nextTarget = 0
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

    public init(options: FocusOptions) {
        self.options = options
        targets.reserveCapacity(32)
        scores.reserveCapacity(32)
        sortedPositions.reserveCapacity(32)
        sortedScores.reserveCapacity(32)
    }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        // A focus score compares frames with each other: a reduced MJPEG decode serves as long as
        // it keeps the detail the lens brings in and out (measured: `SimClosedLoopTests`).
        try context.needStatistics(Self.name, minimumWidth: Self.measuringWidth)
        region = focusRegion(width: format.width, height: format.height)
        regionWidth = format.width; regionHeight = format.height
        controls = context.controls
        requests = context.controlRequests
        latency = context.controls?.controlLatencyFrames ?? 0
        frameCount = 0
        phase = .idle
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

    /// Narrowest picture the focus measure works on (a reduced MJPEG decode at least this wide).
    public static let measuringWidth = 320

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
        }
        let stats = FocusMeasures.measure(LumaView(px.luma), region: region)
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
            if nextTarget < targets.count {
                move(to: targets[nextTarget]); nextTarget += 1
            } else {
                move(to: commanded)
            }
            if scores.allSatisfy({ !$0.isNaN }) || framesInPhase > targets.count + latency + 6 {
                finishPass()
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
        phase = .coarse
        framesInPhase = 0
        let n = options.coarseSteps
        targets.removeAll(keepingCapacity: true)
        scores.removeAll(keepingCapacity: true)
        // Start from the end nearer the lens.
        let fromLow = commanded - lensMin <= lensMax - commanded
        for i in 0..<n {
            let t = lensMin + (lensMax - lensMin) * Double(i) / Double(n - 1)
            targets.append(snap(t))
            scores.append(.nan)
        }
        if !fromLow { targets.reverse() }
        nextTarget = 0
        move(to: targets[0]); nextTarget = 1
    }

    private func record(lens: Double, score: Double) {
        for i in targets.indices where abs(targets[i] - lens) <= 0.5 {
            scores[i] = scores[i].isNaN ? score : max(scores[i], score)
        }
    }

    /// The interpolated peak of the scores: a parabola through the logs of the best and its
    /// neighbours (a Gaussian fit), clamped to half a step either side.
    private func peak() -> (position: Double, best: Double, step: Double) {
        // Insertion sort by position into reserved storage: no allocation on the stage thread.
        sortedPositions.removeAll(keepingCapacity: true)
        sortedScores.removeAll(keepingCapacity: true)
        for i in targets.indices {
            let t = targets[i], v = scores[i].isNaN ? 0 : scores[i]
            var k = sortedPositions.count
            sortedPositions.append(t); sortedScores.append(v)
            while k > 0 && sortedPositions[k - 1] > t {
                sortedPositions[k] = sortedPositions[k - 1]; sortedScores[k] = sortedScores[k - 1]
                k -= 1
            }
            sortedPositions[k] = t; sortedScores[k] = v
        }
        let pos = sortedPositions, sc = sortedScores
        var best = 0
        for i in sc.indices where sc[i] > sc[best] { best = i }
        let step = pos.count > 1 ? (pos[pos.count - 1] - pos[0]) / Double(pos.count - 1) : 0
        guard best > 0, best < pos.count - 1 else { return (pos[best], pos[best], step) }
        let a = log(max(sc[best - 1], 1e-12)), b = log(max(sc[best], 1e-12)), c = log(max(sc[best + 1], 1e-12))
        let denom = a - 2 * b + c
        var offset = 0.0
        if denom < 0 { offset = 0.5 * (a - c) / denom }
        offset = min(0.5, max(-0.5, offset))
        return (pos[best] + offset * step, pos[best], step)
    }

    private func finishPass() {
        let p = peak()
        framesInPhase = 0
        if phase == .coarse {
            // Fine scan over the best coarse cell (± one coarse step), nearest end first.
            let n = options.fineSteps
            let centre = p.best
            let half = 0.6 * p.step
            targets.removeAll(keepingCapacity: true)
            scores.removeAll(keepingCapacity: true)
            for i in 0..<n {
                let t = min(lensMax, max(lensMin, centre - half + 2 * half * Double(i) / Double(n - 1)))
                targets.append(snap(t))
                scores.append(.nan)
            }
            if abs(targets[n - 1] - commanded) < abs(targets[0] - commanded) { targets.reverse() }
            phase = .fine
            nextTarget = 0
        } else {
            finalTarget = snap(p.position)
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
