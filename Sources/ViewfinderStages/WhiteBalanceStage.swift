import Viewfinder
import CViewfinderKernels
#if canImport(Glibc)
import Glibc
#endif

/// How the white-balance stage corrects the picture.
public enum WhiteBalanceCorrection: String, OptionChoice {
    /// The device's `white_balance_temperature` control when it has one, else software gains.
    case auto
    /// Drive the device's `white_balance_temperature` (its automatic white balance switched off);
    /// what is beyond the control's range is corrected in software.
    case device
    /// Gains on the chroma of each frame (on MJPEG, RGB and Bayer streams on the frame's
    /// full-size decoded view, which the sinks encode).
    case software
    /// Measure and report only.
    case none
    /// The device's own automatic white balance (`white_balance_automatic` on); the stage only
    /// switches it on and passes the frames' own `whiteBalance` through.
    case deviceAutomatic = "device_automatic"
}

/// Options of ``WhiteBalanceStage``.
public struct WhiteBalanceOptions: StageOptions {
    public var mode: WhiteBalanceMode = .continuous
    /// Light temperature for `locked`, and where `auto`/`continuous` start, K.
    public var temperatureK: Double = WhiteBalanceModel.nativeTemperature
    /// Tint for `locked` (-150 magenta … +150 green).
    public var tint: Double = 0
    public var correction: WhiteBalanceCorrection = .auto
    /// The temperature the camera balances for when neither the frame nor a device control says
    /// (a camera without white-balance controls), K.
    public var cameraBalanceK: Double = WhiteBalanceModel.nativeTemperature
    /// Measure every n-th chroma sample in x and y.
    public var subsample: Int = 4
    /// Fraction of the remaining error taken per frame in `auto`/`continuous` (1: no smoothing).
    public var speed: Double = 0.35
    /// Error below which the loop calls itself converged, mired.
    public var toleranceMired: Double = 4
    /// Chroma off the black-body locus (per unit of luma) beyond which a pixel cannot be a
    /// neutral surface under any light on the locus.
    public var offLocus: Double = 0.05
    /// Lights the estimate may report, K (a prior: no real light is bluer than deep shade or
    /// warmer than a candle).
    public var minimumK: Double = 2000
    public var maximumK: Double = 12000

    public init() {}

    public static var fields: [OptionField<WhiteBalanceOptions>] {
        [
            .choice("mode", \.mode, "locked: hold temperature_k; auto: estimate the light until converged, then hold; continuous: keep estimating"),
            .double("temperature_k", \.temperatureK, range: 1500...15000, unit: "kelvin", "Light temperature in locked mode; the starting point of auto and continuous"),
            .double("tint", \.tint, range: -150...150, "Tint in locked mode (negative magenta, positive green)"),
            .choice("correction", \.correction, "auto: the device's white_balance_temperature if it has one, else software; device; software (gains on the chroma); none (measure only); device_automatic (the device's own loop)"),
            .double("camera_balance_k", \.cameraBalanceK, range: 1500...15000, unit: "kelvin", "What the camera balances for when neither the frame nor a device control says"),
            .int("subsample", \.subsample, range: 1...16, unit: "chroma samples", "Measure every n-th chroma sample in x and y"),
            .double("speed", \.speed, range: 0.05...1, unit: "fraction per frame", "Share of the remaining error taken per frame (1: no smoothing)"),
            .double("tolerance_mired", \.toleranceMired, range: 0.5...50, unit: "mired", "Error below which the loop is converged"),
            .double("off_locus", \.offLocus, range: 0.01...0.3, unit: "chroma per luma", "Chroma off the black-body locus beyond which a pixel is not taken for a neutral surface"),
            .double("min_k", \.minimumK, range: 1500...15000, unit: "kelvin", "Warmest light the estimate may report"),
            .double("max_k", \.maximumK, range: 1500...15000, unit: "kelvin", "Bluest light the estimate may report"),
        ]
    }

    public func validate(stage: String) throws {
        if minimumK >= maximumK {
            throw ConfigurationError.invalidOption(stage: stage, option: "min_k", reason: "must be below max_k (\(maximumK) K)")
        }
    }
}

/// The light one frame shows, as ``WhiteBalanceEstimator`` measured it.
public struct WhiteBalanceMeasurement: Sendable, Equatable {
    /// The cast along the black-body locus, mired (positive: the light is bluer than the balance).
    public var castMired: Double
    /// Weight of the pixels the estimate rests on, as a fraction of all the weight measured (0–1):
    /// low on scenes without neutral surfaces.
    public var support: Double
    /// Samples taken.
    public var samples: Int
}

/// Estimates the cast of the light from a frame's YCbCr pixels.
///
/// In the model the sim camera renders and real sensors approximate (`WhiteBalanceModel`), a
/// light off the balance shifts every pixel's chroma-per-luma `(Cb/Y, Cr/Y)` by the same amount
/// along the black-body locus, `(+κΔ, −κΔ)`. So each pixel's position along the locus
/// `p = (Cb/Y − Cr/Y)/2` is its surface's colour plus `κΔ`, and its position across the locus
/// `q = (Cb/Y + Cr/Y)/2` does not depend on the light at all.
///
/// Grey-world (the mean of `p`) fails when one colour fills the picture; white-patch (the
/// brightest pixels) fails on coloured highlights and clipping. This estimator combines three
/// selections and a robust statistic:
/// 1. Pixels far across the locus (`|q| > off_locus`: greens, purples, saturated reds) can be no
///    neutral surface under any light on the locus; they are left out.
/// 2. Pixels whose `p` implies a light outside `min_k … max_k` are left out (deep blue sky, orange
///    wood and skin under a neutral light are not lights).
/// 3. Each remaining pixel is weighted by the luma contrast around it (grey-edge: large uniform
///    areas — a blue wall, a lawn, sky — count little, textured detail counts much) and by its
///    brightness (bright near-neutral pixels are the likeliest whites), and dark or clipped pixels
///    (luma outside 24…240, chroma at its limits) are left out.
///
/// The estimate is then the mode of a score over `p` in which each luma band's weight is capped
/// (1 % of all the weight): grey surfaces of every reflectance share one `p`, so the neutral axis
/// scores in many bands, while a large coloured area — a blue sky, a wooden wall, which lie on the
/// locus like a light does — scores in one or two and cannot outvote it by its size. The peak is
/// refined by the weighted mean of `p` within ±4 bins (±7 mired). A mean or median would be pulled
/// by every colour; a mode is not. Fixed storage; no allocation per frame.
public final class WhiteBalanceEstimator {
    /// Histogram bin width, chroma per luma (about 1.7 mired).
    static let binWidth = 0.001
    static let bins = 700
    /// `p` of bin 0.
    static let origin = -0.35
    /// Luma bands (32 levels each) the histogram is split into.
    static let bands = 8
    /// Most a band may add to a bin's score, as a fraction of all the weight.
    static let bandCap = 0.01
    /// Weight by bin of p and luma band (`bin * bands + band`).
    private var histogram: [Double]

    public init() {
        histogram = Array(repeating: 0, count: Self.bins * Self.bands)
    }

    /// Measures `pixels` balanced for `balance` K. nil when no pixel can be a neutral surface (a
    /// grey picture, a scene of pure colours).
    public func measure(_ px: FramePixels, balance: Double, options o: WhiteBalanceOptions) -> WhiteBalanceMeasurement? {
        guard let cb = px.cb, let cr = px.cr else { return nil }
        for i in histogram.indices { histogram[i] = 0 }
        let kappa = WhiteBalanceModel.chromaPerMired
        // The range of p a light in min_k…max_k gives a neutral surface (plus a little slack).
        let pLo = kappa * WhiteBalanceModel.castMired(light: o.minimumK, balance: balance) - 0.01
        let pHi = kappa * WhiteBalanceModel.castMired(light: o.maximumK, balance: balance) + 0.01
        let luma = px.luma
        let sx = px.chromaStepX, sy = px.chromaStepY
        let step = max(1, o.subsample / max(1, px.scale))
        // Rows at the same luma spacing whatever the chroma's vertical subsampling: 4:2:0 (a
        // chroma row per two luma rows) and 4:2:2 sample the same places of one picture, so they
        // agree (3 Dec: stepping chroma rows put 4:2:0's samples twice as far apart; on a sim of
        // Kleiber at 3500 K NV12 settled at 3721 K, YUYV at 3506 K).
        let stepY = max(1, step / max(1, sy))
        let d = max(1, 2 / max(1, px.scale))   // gradient reach, luma pixels
        let w = luma.width, h = luma.height
        var total = 0.0, samples = 0
        var cy = 0
        while cy < cb.height {
            let y = min(h - 1, cy * sy)
            if y < d || y + d >= h { cy += stepY; continue }
            var cx = 0
            while cx < cb.width {
                let x = min(w - 1, cx * sx)
                defer { cx += step }
                if x < d || x + d >= w { continue }
                // The luma the chroma sample covers (both pixels of a 4:2:2 pair).
                var yv = Int(luma[x, y])
                if sx == 2 { yv = (yv + Int(luma[x + 1, y]) + 1) >> 1 }
                guard yv >= 24 && yv <= 240 else { continue }
                let u = Int(cb[cx, cy]), v = Int(cr[cx, cy])
                guard u > 1 && u < 254 && v > 1 && v < 254 else { continue }
                samples += 1
                let gx = abs(Int(luma[x + d, y]) - Int(luma[x - d, y]))
                let gy = abs(Int(luma[x, y + d]) - Int(luma[x, y - d]))
                // Grey-edge: flat areas (noise only) count nothing, detail counts by its contrast.
                let g = min(gx + gy, 64) - 6
                guard g > 0 else { continue }
                let weight = Double(g * g) * Double(yv)
                total += weight
                let inv = 1 / Double(yv)
                let a = Double(u - 128) * inv, b = Double(v - 128) * inv
                let q = (a + b) * 0.5
                guard abs(q) <= o.offLocus else { continue }
                let p = (a - b) * 0.5
                guard p >= pLo && p <= pHi else { continue }
                let bin = Int(((p - Self.origin) / Self.binWidth).rounded())
                guard bin >= 0 && bin < Self.bins else { continue }
                histogram[bin * Self.bands + min(Self.bands - 1, yv >> 5)] += weight
            }
            cy += stepY
        }
        guard total > 0 else { return nil }
        var inside = 0.0
        for i in 0..<Self.bins { for k in 0..<Self.bands { inside += histogram[i * Self.bands + k] } }
        guard inside > 0 else { return nil }
        // Score each p: per luma band, the smoothed weight (a 7-bin triangle, about ±6 mired) capped
        // at `bandCap` of all the weight, summed over bands. Grey surfaces of every reflectance
        // share one p, so the neutral axis fills many bands; a large coloured area (sky, a wall)
        // fills one or two and cannot outvote it by sheer size.
        let cap = Self.bandCap * inside * 16
        var best = -1, bestValue = 0.0
        for i in 0..<Self.bins {
            var score = 0.0
            for k in 0..<Self.bands {
                var s = 0.0
                for j in -3...3 where i + j >= 0 && i + j < Self.bins { s += histogram[(i + j) * Self.bands + k] * Double(4 - abs(j)) }
                score += min(s, cap)
            }
            if score > bestValue { bestValue = score; best = i }
        }
        guard best >= 0 else { return nil }
        // Refine: the weighted mean of p within ±4 bins of the peak.
        var sw = 0.0, sp = 0.0
        for j in -4...4 where best + j >= 0 && best + j < Self.bins {
            var c = 0.0
            for k in 0..<Self.bands { c += histogram[(best + j) * Self.bands + k] }
            sw += c; sp += c * (Self.origin + Double(best + j) * Self.binWidth)
        }
        let p = sw > 0 ? sp / sw : Self.origin + Double(best) * Self.binWidth
        return WhiteBalanceMeasurement(castMired: p / kappa, support: inside / total, samples: samples)
    }
}

/// Auto white balance: estimates the light's colour temperature from the picture
/// (``WhiteBalanceEstimator``) and corrects for it — by driving the device's
/// `white_balance_temperature` (its own automatic white balance off), or with gains on the chroma
/// when the device has no such control (``WhiteBalanceCorrection``).
///
/// Each frame leaves with `whiteBalance` set to the light the stage believes in (the estimate, or
/// the locked setting) and `whiteBalanceState`. Where the frame was balanced for is read from the
/// frame's metadata (a source that knows: the sim camera), else from what the stage commanded
/// once the device's control latency passed, else `camera_balance_k`.
public final class WhiteBalanceStage: Stage {
    public static let name = "white_balance"
    public static let onePerPipeline = true
    public static let summary = "Auto white balance: estimates the light's colour temperature (near-neutral, edge-weighted, robust) and drives the device's white_balance_temperature or applies chroma gains."

    public let options: WhiteBalanceOptions
    private let estimator = WhiteBalanceEstimator()
    private var requests: ControlRequestQueue?
    private var temperatureControl: ControlDescriptor?
    private var useDevice = false
    private var applySoftware = false
    private var latency = 0
    /// The light the loop believes in, mired.
    private var targetMired: Double
    /// What the device was last asked to balance for, K, and frames until that certainly landed.
    private var commandedK: Double
    private var knownK: Double
    private var framesUntilLanded = 0
    private var state: ControlLoopState = .adjusting
    /// Correction table: chroma change per luma value, for the cast being removed now.
    private var lut = [Int16](repeating: 0, count: 256)
    private var lutCast = 0.0
    private var lutTint = 0.0
    /// Frames measured, and frames on which no neutral surface was found.
    public private(set) var measured = 0
    public private(set) var unmeasurable = 0
    /// Frames the stage could not correct in software (no YUV planes to change: MJPEG).
    public private(set) var uncorrected = 0
    public private(set) var commandsSent = 0
    /// Control writes the device refused.
    public private(set) var controlErrors = 0

    public init(options: WhiteBalanceOptions) {
        self.options = options
        targetMired = 1e6 / options.temperatureK
        commandedK = options.cameraBalanceK
        knownK = options.cameraBalanceK
    }

    /// The light the stage believes in, K.
    public var temperature: Double { 1e6 / targetMired }
    public var loopState: ControlLoopState { state }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        requests = context.controlRequests
        latency = context.controls?.controlLatencyFrames ?? 0
        temperatureControl = context.controls?.descriptor(.whiteBalanceTemperature)
        useDevice = temperatureControl != nil && (options.correction == .auto || options.correction == .device)
        // With the device driven, software removes what lies beyond the control's range.
        applySoftware = options.correction != .none && options.correction != .deviceAutomatic
        if options.correction == .deviceAutomatic {
            guard let c = context.controls, c.supports(.whiteBalanceAuto) else {
                throw ConfigurationError.invalidOption(stage: Self.name, option: "correction", reason: "device_automatic needs a device with a white_balance_automatic control")
            }
            // A refusal (a busy or inactive control) leaves the device as it is: counted, not fatal.
            if (try? c.set(.whiteBalanceAuto, to: 1)) == nil { controlErrors += 1 }
            state = .converged
            return
        }
        // A monochrome stream has no colour to measure or correct (2 Dec: the stage ran, stayed
        // at its start and said "adjusting" for ever).
        if format.pixelFormat == .grey {
            throw ConfigurationError.unsupportedStream(stage: Self.name, reason: "GREY frames have no colour to balance")
        }
        try context.needStatistics(Self.name, minimumWidth: 160)
        // Corrected in software on MJPEG, RGB or Bayer frames: the gains go on the full-size
        // decoded view (which the sinks then encode instead of the camera's bytes).
        if applySoftware && !useDevice && !format.pixelFormat.hasYUVPlanes && context.pixels.available {
            try context.pixels.need(.modify, stage: Self.name)
        }
        targetMired = 1e6 / options.temperatureK
        state = options.mode == .locked ? .locked : .adjusting
        if let c = context.controls, let d = temperatureControl {
            if useDevice {
                // Before streaming: the device's own balance off, ours on.
                if c.supports(.whiteBalanceAuto) { try? c.set(.whiteBalanceAuto, to: 0) }
                let k = deviceValue(options.temperatureK, d)
                if (try? c.set(.whiteBalanceTemperature, to: k)) != nil { commandedK = Double(k) }
                else if let v = try? c.value(of: .whiteBalanceTemperature) { commandedK = Double(v) }
                knownK = commandedK
            } else if let v = try? c.value(of: .whiteBalanceTemperature),
                      (try? c.value(of: .whiteBalanceAuto)) != 1 {
                knownK = Double(v)
            }
        }
        framesUntilLanded = 0
    }

    private func deviceValue(_ k: Double, _ d: ControlDescriptor) -> Int64 {
        let step = max(1, d.step)
        let v = Int64((k / Double(step)).rounded()) * step
        return min(d.maximum, max(d.minimum, v))
    }

    public func process(_ frame: Frame) -> StageVerdict {
        if options.correction == .deviceAutomatic {
            frame.metadata.whiteBalanceState = state
            return .forward
        }
        if framesUntilLanded > 0 {
            framesUntilLanded -= 1
            if framesUntilLanded == 0 { knownK = commandedK }
        }
        // What this frame is balanced for.
        let sourceK = frame.metadata.whiteBalance
        let balance = sourceK ?? knownK
        let settling = sourceK == nil && framesUntilLanded > 0

        if options.mode != .locked && state != .locked && !settling, let px = frame.pixels {
            if let m = estimator.measure(measuredPixels(px, of: frame), balance: balance, options: options), m.support > 0.002 {
                measured += 1
                let lightMired = 1e6 / balance - m.castMired
                let lo = 1e6 / options.maximumK, hi = 1e6 / options.minimumK
                let measuredMired = min(hi, max(lo, lightMired))
                let err = measuredMired - targetMired
                targetMired += options.speed * err
                if abs(err) <= options.toleranceMired {
                    state = options.mode == .auto ? .locked : .converged
                } else if abs(err) > 3 * options.toleranceMired {
                    state = .adjusting
                }
            } else {
                unmeasurable += 1
            }
        }
        let target = 1e6 / targetMired
        // Drive the device towards the light.
        if useDevice, let d = temperatureControl, let q = requests {
            let want = deviceValue(target, d)
            if abs(1e6 / Double(want) - 1e6 / commandedK) >= 2, Double(want) != commandedK {
                if q.request(.whiteBalanceTemperature, to: want) {
                    commandedK = Double(want)
                    framesUntilLanded = latency + 1
                    commandsSent += 1
                }
            }
        }
        // Remove what the balance leaves of the cast.
        if applySoftware {
            let cast = WhiteBalanceModel.castMired(light: target, balance: balance)
            let tint = options.mode == .locked ? options.tint : 0
            if abs(cast) >= 1 || abs(tint) >= 1 {
                if let mp = frame.mutablePixels() { correct(mp, castMired: cast, tint: tint) } else { uncorrected += 1 }
            }
        }
        frame.metadata.whiteBalance = target
        frame.metadata.whiteBalanceState = state
        return .forward
    }

    /// Removes a cast of `castMired` (and a tint) from the chroma: `Cb −= κΔ·Y`, `Cr += κΔ·Y`
    /// (`WhiteBalanceModel`), through a table per luma value.
    public func correct(_ px: MutableFramePixels, castMired: Double, tint: Double) {
        guard let cb = px.cb, let cr = px.cr else { return }
        if castMired != lutCast || tint != lutTint || lut.allSatisfy({ $0 == 0 }) {
            let k = WhiteBalanceModel.chromaPerMired * castMired
            // Green tint: both chroma channels moved down by the light; remove it.
            let t = tint * WhiteBalanceModel.tintPerUnit * 0.5
            for yv in 0..<256 { lut[yv] = Int16((k * Double(yv)).rounded()) }
            lutCast = castMired
            lutTint = tint
            tintLut = (0..<256).map { Int16((t * Double($0)).rounded()) }
        }
        let luma = px.luma
        let sx = px.chromaStepX, sy = px.chromaStepY
        let lb = luma.unsafeBaseAddress, lbpr = luma.bytesPerRow, ls = luma.sampleStride
        let ub = cb.unsafeBaseAddress, ubpr = cb.bytesPerRow, us = cb.sampleStride
        let vb = cr.unsafeBaseAddress, vbpr = cr.bytesPerRow, vs = cr.sampleStride
        let lw = luma.width
        lut.withUnsafeBufferPointer { dl in
            tintLut.withUnsafeBufferPointer { tl in
                for cy in 0..<cb.height {
                    let lrow = lb + min(luma.height - 1, cy * sy) * lbpr
                    let urow = ub + cy * ubpr, vrow = vb + cy * vbpr
                    for cx in 0..<cb.width {
                        let x = min(lw - 1, cx * sx)
                        var yv = Int(lrow[x * ls])
                        if sx == 2 && x + 1 < lw { yv = (yv + Int(lrow[(x + 1) * ls]) + 1) >> 1 }
                        let dc = Int(dl[yv]), dt = Int(tl[yv])
                        let u = Int(urow[cx * us]) - dc + dt
                        let v = Int(vrow[cx * vs]) + dc + dt
                        urow[cx * us] = UInt8(clamping: u)
                        vrow[cx * vs] = UInt8(clamping: v)
                    }
                }
            }
        }
    }
    private var tintLut = [Int16](repeating: 0, count: 256)

    // MARK: A camera JPEG's full-size picture, measured reduced

    /// What the estimator measures: the frame's pixels, or — for a camera JPEG decoded at (or near)
    /// full size, because a sink or this stage's own correction wants every pixel — the same
    /// picture area-averaged to the size the engine's reduced decode would have had (at least 160
    /// wide, as `prepare` asks). JPEG's quantised chroma rings at edges, where the grey-edge
    /// estimate looks: at full size an MJPEG sim under 3000 K read 5090 K and said converged, on
    /// its reduced decode 2982 K (3 Dec sweep: `run --output` changed the camera's balance).
    func measuredPixels(_ px: FramePixels, of frame: Frame) -> FramePixels {
        guard frame.format.pixelFormat == .mjpeg, let cb = px.cb, let cr = px.cr,
              px.luma.sampleStride == 1, cb.sampleStride == 1, cr.sampleStride == 1 else { return px }
        let frameWidth = px.luma.width * px.scale
        guard let target = [8, 4, 2].first(where: { frameWidth / $0 >= 160 }), target > px.scale else { return px }
        let f = target / px.scale
        let pf: PixelFormat = px.chromaStepY == 2 ? .i420 : .yuv422p
        let reduced = FrameFormat(pf, width: max(2, px.luma.width / f) & ~1, height: max(2, px.luma.height / f) & ~1)
        if reducedCapacity < reduced.maxByteCount {
            reducedBuffer?.deallocate()
            reducedBuffer = .allocate(byteCount: reduced.maxByteCount, alignment: 64)
            reducedBuffer!.initializeMemory(as: UInt8.self, repeating: 0, count: reduced.maxByteCount)
            reducedCapacity = reduced.maxByteCount
        }
        if reduceRowCapacity < reduced.width * f {
            reduceRow?.deallocate()
            reduceRow = .allocate(capacity: reduced.width * f)
            reduceRowCapacity = reduced.width * f
        }
        guard let base = reducedBuffer, let acc = reduceRow else { return px }
        for (i, src) in [px.luma, cb, cr].enumerated() {
            let p = reduced.plane(i)
            // The blocks that fit whole (a ragged right or bottom edge left out).
            let w = min(p.width, src.width / f), h = min(p.height, src.height / f)
            vf_box_reduce(src.unsafeBaseAddress, src.bytesPerRow, Int32(f), (base + p.offset).assumingMemoryBound(to: UInt8.self),
                          p.bytesPerRow, w, h, acc)
        }
        return FramePixels(format: reduced, data: UnsafeRawPointer(base), capacity: reduced.maxByteCount, scale: target) ?? px
    }
    /// The reduced copy's memory (and the box filter's row of column sums), kept from frame to
    /// frame and allocated again only when it must grow; the stage's own, freed with it.
    private var reducedBuffer: UnsafeMutableRawPointer?
    private var reducedCapacity = 0
    private var reduceRow: UnsafeMutablePointer<UInt16>?
    private var reduceRowCapacity = 0

    deinit {
        reducedBuffer?.deallocate()
        reduceRow?.deallocate()
    }
}
