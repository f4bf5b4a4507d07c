import Viewfinder
import CTurboJPEG
import CViewfinderKernels
#if canImport(Glibc)
import Glibc
#endif

/// Everything physical about one frame: what the sensor, lens and hand did.
public struct SimFrameState: Sendable, Equatable {
    public var sequence: UInt64 = 0
    /// Nominal capture time since the stream started, seconds (drives shake and flicker).
    public var time: Double = 0
    /// Exposure time actually used, µs (after clamping to the frame interval and anti-flicker).
    public var exposureMicroseconds: Double = 10_000
    /// Analogue gain, 1 = unity.
    public var gain: Double = 1
    /// Lens position, 0...1000.
    public var lensPosition: Double = 400
    /// White balance temperature the camera corrects for, K.
    public var whiteBalance: Double = 5200
    public var shakeX: Double = 0
    public var shakeY: Double = 0
    public var shakeAngle: Double = 0
    /// Tone adjustments (controls `brightness`, `contrast`, `saturation`).
    public var brightness: Int = 0
    public var contrast: Int = 100
    public var saturation: Int = 100
    public init() {}
}

/// Renders the sim camera's frames: a physical model of lens, hand and sensor over a stored scene.
///
/// Per frame: the scene (linear radiance) is warped by the hand-shake (rotation + translation,
/// bilinear, split into a horizontal and a vertical pass with 16.16 fixed-point coordinates that
/// vectorise), blurred by defocus (a separable box of fractional radius, running sums, so the cost
/// does not depend on the radius and the blur changes continuously with the lens position),
/// exposed (radiance x exposure x light, row by row through the rolling shutter so flickering light
/// makes bands), clipped at full well, given shot and read noise (from a table of gaussian deviates
/// at a random offset per row), amplified by the gain, clipped by the ADC, and tone-mapped to 8 bits
/// through a LUT. Chroma comes from the scene at half resolution. The result is packed straight
/// into the frame's format (MJPEG through TurboJPEG from planar 4:2:2).
///
/// Not thread-safe: one renderer per capture thread.
public final class SimRenderer {
    public let format: FrameFormat
    public let options: SimOptions
    /// Frame interval, seconds.
    public let interval: Double
    public let shake: SimShakePath
    /// Lens position at which the subject is sharp.
    public let inFocusPosition: Double
    /// Defocus blur radius (pixels) per unit of lens position away from focus.
    public let blurPerLensUnit: Double
    /// Rolling-shutter readout time (top row to bottom row), seconds.
    public let readoutTime: Double

    // Sensor constants.
    static let fullWell: Float = 10_000      // electrons
    static let readNoise: Float = 3          // electrons RMS
    static let adcMax: Float = 16383         // 14-bit scale feeding the tone LUT

    let scene: SimScene
    let W: Int, H: Int
    let SW: Int, SH: Int
    let maxPad: Int
    let rowA: UnsafeMutablePointer<UInt16>
    let bufB: UnsafeMutablePointer<UInt16>
    let bufC: UnsafeMutablePointer<UInt16>
    let bufCRows: Int
    let colSum: UnsafeMutablePointer<UInt32>
    let idx: UnsafeMutablePointer<Int32>
    let yRow: UnsafeMutablePointer<UInt8>
    let noise: UnsafeMutablePointer<Float>
    static let noiseCount = 1 << 16
    let tone: UnsafeMutablePointer<UInt8>
    private var toneKey: (Double, Int, Int) = (-1, 0, 0)
    // MJPEG
    private var tj: tjhandle?
    private let planes: UnsafeMutablePointer<UInt8>?
    private let planePointers: UnsafeMutablePointer<UnsafePointer<UInt8>?>
    private let planeStrides: UnsafeMutablePointer<Int32>
    /// Worst-case size of one compressed frame (tjBufSize), for the pool's buffers.
    public let compressedCapacity: Int

    /// Mean of the last frame's luma (0–255) and scene luminance in view (relative to mid grey).
    public private(set) var lastMeanLuma: Double = 0
    public private(set) var lastSceneLuminance: Double = 0
    /// Time the last frame spent in each phase, ns: warp+horizontal blur, vertical warp,
    /// exposure+noise+vertical blur, tone LUT, chroma+packing, JPEG.
    /// Only filled in when ``measuresPhases`` is set (the clock reads cost about 2 %).
    public private(set) var lastPhaseNanoseconds: [UInt64] = [0, 0, 0, 0, 0, 0]
    public var measuresPhases = false

    /// Builds the scene (procedural, or from `image`) and every buffer: nothing is allocated per frame.
    init(options: SimOptions, format: FrameFormat, interval: FrameInterval, image: SimImage?) throws {
        self.options = options
        self.format = format
        self.interval = Double(interval.numerator) / Double(max(interval.denominator, 1))
        W = format.width
        H = format.height
        shake = SimShakePath(amplitude: options.shake, seed: options.seed)
        inFocusPosition = SimOptions.inFocusPosition(subjectDistance: options.subject)
        blurPerLensUnit = Double(W) / 100_000
        readoutTime = min(0.9 * self.interval, 0.030)
        let rmax = blurPerLensUnit * 1000
        maxPad = Int(rmax.rounded(.up)) + 2
        let rotationReach = shake.angleBound * Double(W + H) / 2 * 1.1
        let margin = Int((shake.translationBound + rotationReach + Double(maxPad)).rounded(.up)) + 6
        SW = W + 2 * margin
        SH = H + 2 * margin
        if let image {
            scene = SimScene.fromImage(image, width: SW, height: SH)
        } else {
            scene = SimScene.cachedProcedural(width: SW, height: SH, unit: Double(H), seed: options.seed)
        }
        rowA = .allocate(capacity: W + 2 * maxPad + 64); rowA.initialize(repeating: 0, count: W + 2 * maxPad + 64)
        bufB = .allocate(capacity: SW * SH + 64); bufB.initialize(repeating: 0, count: SW * SH + 64)
        bufCRows = H + 2 * maxPad + 2
        bufC = .allocate(capacity: bufCRows * W + 64); bufC.initialize(repeating: 0, count: bufCRows * W + 64)
        colSum = .allocate(capacity: W + 16); colSum.initialize(repeating: 0, count: W + 16)
        idx = .allocate(capacity: W + 16); idx.initialize(repeating: 0, count: W + 16)
        yRow = .allocate(capacity: W + 16); yRow.initialize(repeating: 0, count: W + 16)
        noise = .allocate(capacity: SimRenderer.noiseCount + W + 16)
        var rng = SplitMix64(seed: options.seed ^ 0x4E015E)
        for i in 0..<(SimRenderer.noiseCount + W + 16) { noise[i] = Float(rng.gaussian()) }
        tone = .allocate(capacity: Int(SimRenderer.adcMax) + 16); tone.initialize(repeating: 0, count: Int(SimRenderer.adcMax) + 16)
        planePointers = .allocate(capacity: 3); planePointers.initialize(repeating: nil, count: 3)
        planeStrides = .allocate(capacity: 3); planeStrides.initialize(repeating: 0, count: 3)
        if format.pixelFormat == .mjpeg {
            let p = UnsafeMutablePointer<UInt8>.allocate(capacity: W * H * 2 + 64)
            p.initialize(repeating: 128, count: W * H * 2 + 64)
            planes = p
            planePointers[0] = UnsafePointer(p); planePointers[1] = UnsafePointer(p + W * H); planePointers[2] = UnsafePointer(p + W * H + (W / 2) * H)
            planeStrides[0] = Int32(W); planeStrides[1] = Int32(W / 2); planeStrides[2] = Int32(W / 2)
            tj = tjInitCompress()
            guard tj != nil else { throw DeviceError.io(device: "sim", operation: "tjInitCompress", errno: 0, message: "TurboJPEG failed to initialise") }
            compressedCapacity = Int(tjBufSize(Int32(W), Int32(H), Int32(TJSAMP_422.rawValue)))
        } else {
            planes = nil
            tj = nil
            compressedCapacity = format.maxByteCount
        }
    }

    deinit {
        rowA.deallocate(); bufB.deallocate(); bufC.deallocate(); colSum.deallocate(); idx.deallocate()
        yRow.deallocate(); noise.deallocate(); tone.deallocate()
        planes?.deallocate(); planePointers.deallocate(); planeStrides.deallocate()
        if let tj { tjDestroy(tj) }
    }

    /// The defocus blur radius (pixels) at a lens position.
    public func defocusBlur(lensPosition: Double) -> Double { abs(lensPosition - inFocusPosition) * blurPerLensUnit }

    /// Flicker gain of one row: the light's mean over the row's exposure window.
    @inline(__always)
    func flickerFactor(rowStart t: Double, exposure e: Double) -> Double {
        guard options.flicker > 0, options.flickerDepth > 0 else { return 1 }
        let w = 2 * Double.pi * 2 * Double(options.flicker)
        let phase = 0.7 // light phase at t = 0
        if e < 1e-7 { return 1 + options.flickerDepth * sin(w * t + phase) }
        return 1 + options.flickerDepth * (cos(w * t + phase) - cos(w * (t + e) + phase)) / (w * e)
    }

    private func buildTone(gamma: Double, brightness: Int, contrast: Int) {
        if toneKey == (gamma, brightness, contrast) { return }
        toneKey = (gamma, brightness, contrast)
        let n = Int(SimRenderer.adcMax)
        let c = Double(contrast) / 100
        for i in 0...n {
            var v = 255 * pow(Double(i) / Double(n), 1 / gamma)
            v = (v - 128) * c + 128 + Double(brightness)
            tone[i] = UInt8(max(0, min(255, v.rounded())))
        }
        for i in (n + 1)..<(n + 16) { tone[i] = tone[n] }
    }

    // MARK: Kernels

    // The row kernels (cubic resampling, box blur, sensor model, tone curve, chroma packing) are C
    // loops in CViewfinderKernels: a portable build and an AVX2 one chosen at run time.

    // MARK: Rendering

    /// Renders the frame described by `state` into `frame` (whose format must be ``format``) and
    /// fills its metadata. Returns false if an MJPEG encode failed (the frame is then unusable).
    @discardableResult
    public func render(_ state: SimFrameState, into frame: Frame, sceneLight: Double? = nil) -> Bool {
        let light = sceneLight ?? options.light
        // Local copies: pointers read from `self` inside a loop are reloaded after every store
        // (the store might alias the object), which stops the loops from vectorising.
        let W = self.W, H = self.H, SW = self.SW
        let rowA = self.rowA, bufB = self.bufB, bufC = self.bufC, colSum = self.colSum, idx = self.idx
        let yRow = self.yRow, noise = self.noise, tone = self.tone
        let sceneLuma = scene.luma
        let th = state.shakeAngle, s = sin(th), c = cos(th)
        let tx = state.shakeX, ty = state.shakeY
        let alpha = c + s * s
        let ocx = Double(W - 1) / 2, ocy = Double(H - 1) / 2
        let scx = Double(SW - 1) / 2, scy = Double(SH - 1) / 2

        // Defocus.
        let r = defocusBlur(lensPosition: state.lensPosition)
        let blur = r >= 0.001
        let n = blur ? min(Int(r), maxPad - 2) : 0
        let f = blur ? min(r - Double(n), 0.999) : 0
        let pad = blur ? n + 1 : 0
        let norm = Double(2 * n + 1) + 2 * f
        let w = UInt32((32768 / norm).rounded(.down))
        let wf = UInt32((32768 * f / norm).rounded(.down))

        // Pass B geometry: scene row of output (x, y) = vBase + y + s*x.
        let vBase = scy - ocy - s * ocx - s * tx - c * ty
        let vlo = max(0, Int((vBase - Double(pad) - abs(s) * Double(W)).rounded(.down)) - 2)
        let vhi = min(SH - 2, Int((vBase + Double(H + pad) + abs(s) * Double(W)).rounded(.up)) + 2)
        // Pass A geometry: scene column of (u, v) = hBase + alpha*u - s*v.
        let K = -s * s * tx - s * c * ty - c * tx + s * ty
        let hBase = scx - alpha * ocx + s * scy + K
        let dp = Int32((alpha * 65536).rounded())
        let timing = measuresPhases
        let tStart = timing ? monotonicNanoseconds() : 0
        for v in vlo...vhi {
            let src = UnsafePointer(sceneLuma + v * SW)
            let p0 = Int32(((hBase - s * Double(v) - alpha * Double(pad)) * 65536).rounded())
            if blur {
                vf_sim_cubic_row(src, rowA, W + 2 * pad, p0, dp)
                vf_sim_box_row(rowA, bufB + v * W, W, n, w, wf)
            } else {
                vf_sim_cubic_row(src, bufB + v * W, W, p0, dp)
            }
        }
        // Pass B: rows -pad ..< H+pad into bufC; sum the visible radiance.
        let dv = Int32((s * 65536).rounded())
        let tA = timing ? monotonicNanoseconds() : 0
        var radianceSum: UInt64 = 0
        for y in -pad..<(H + pad) {
            let v0 = Int32(((vBase + Double(y)) * 65536).rounded())
            let dst = bufC + (y + pad) * W
            vf_sim_cubic_columns(bufB, W, dst, W, v0, dv)
            if y >= 0 && y < H {
                var rs: UInt32 = 0
                for x in 0..<W { rs &+= UInt32(dst[x]) }
                radianceSum &+= UInt64(rs)
            }
        }
        let sceneLuminance = Double(radianceSum) / Double(W * H) / SimScene.midGrey * light

        // Sensor constants for this frame.
        buildTone(gamma: options.gamma, brightness: state.brightness, contrast: state.contrast)
        let eSec = state.exposureMicroseconds / 1e6
        let kBase = 0.18 * Double(SimRenderer.fullWell) * (state.exposureMicroseconds / 10_000) * light / SimScene.midGrey
        let G = SimRenderer.adcMax / SimRenderer.fullWell * Float(state.gain)
        let ns = Float(options.noise)
        let fw = SimRenderer.fullWell
        let r2 = SimRenderer.readNoise * SimRenderer.readNoise
        let adcMax = SimRenderer.adcMax
        let invNorm = Float(1 / norm)
        let ff = Float(f)
        var rng = SplitMix64(seed: options.seed &* 0x2545_F491_4F6C_DD1D ^ state.sequence)
        // Chroma constants.
        let satK = Int32(state.saturation * 128 / 100)
        let mired = 1e6 / state.whiteBalance - 1e6 / options.colorTemperature
        // The cast as `WhiteBalanceModel` defines it: chroma moves by κ·Δ·Y (κ in Q15 of Y/2 here).
        let kappa = WhiteBalanceModel.chromaPerMired
        let castU = Int32((kappa * mired * 32768).rounded()), castV = Int32((-kappa * mired * 32768).rounded())
        let cw = W / 2
        let pf = format.pixelFormat
        let hasChroma = pf != .grey
        let chroma420 = pf == .nv12 || pf == .i420

        let tB = timing ? monotonicNanoseconds() : 0
        var tTone: UInt64 = 0, tPack: UInt64 = 0
        if blur {
            for x in 0..<W { colSum[x] = 0 }
            for rr in 1...(2 * n + 1) {
                let row = bufC + rr * W
                for x in 0..<W { colSum[x] &+= UInt32(row[x]) }
            }
        }
        var lumaSum: UInt64 = 0
        let rowStartBase = state.time
        for y in 0..<H {
            // Exposure, noise, ADC for this row (rolling shutter: row y starts y/H of the readout later).
            let tRow = rowStartBase + Double(y) / Double(H) * readoutTime
            let k = Float(kBase * flickerFactor(rowStart: tRow, exposure: eSec))
            let z = noise + Int(rng.next() % UInt64(SimRenderer.noiseCount))
            var sensor = vf_sim_sensor(k: k, fullWell: fw, readNoise2: r2, noiseScale: ns, gain: G, adcMax: adcMax, blurFraction: ff, blurInvNorm: invNorm)
            if blur {
                vf_sim_sensor_row(&sensor, nil, colSum, bufC + y * W, bufC + (y + 2 * n + 2) * W, bufC + (y + 1) * W, z, idx, W)
            } else {
                vf_sim_sensor_row(&sensor, bufC + y * W, nil, nil, nil, nil, z, idx, W)
            }
            let t1 = timing ? monotonicNanoseconds() : 0
            // Tone curve into the luma destination.
            let yDst: UnsafeMutablePointer<UInt8>
            switch pf {
            case .nv12, .i420, .yuv422p, .grey:
                yDst = frame.data.assumingMemoryBound(to: UInt8.self) + y * format.bytesPerRow
            case .mjpeg:
                yDst = planes! + y * W
            default:
                yDst = yRow
            }
            lumaSum &+= UInt64(vf_sim_tone_row(idx, tone, yDst, W))
            let t2 = timing ? monotonicNanoseconds() : 0
            if timing { tTone &+= t2 &- t1 }
            defer { if timing { tPack &+= monotonicNanoseconds() &- t2 } }

            guard hasChroma, !(chroma420 && y & 1 == 1) else { continue }
            // Chroma from the scene at half resolution, shifted with the view (rotation ignored).
            let vRowPos = vBase + Double(y) + s * ocx
            let hPos = hBase + alpha * 0 - s * vRowPos
            let crow = min(scene.chromaHeight - 1, max(0, Int((vRowPos / 2).rounded(.down))))
            let ccol = min(scene.chromaWidth - cw - 1, max(0, Int((hPos / 2).rounded())))
            let cuRow = scene.cu + crow * scene.chromaWidth + ccol
            let cvRow = scene.cv + crow * scene.chromaWidth + ccol
            // Chroma and packing in one pass.
            let out = frame.data.assumingMemoryBound(to: UInt8.self)
            var dst = out, dstV: UnsafeMutablePointer<UInt8>? = nil
            let layout: Int32
            switch pf {
            case .yuyv, .uyvy:
                layout = pf == .yuyv ? 0 : 1
                dst = out + y * format.bytesPerRow
            case .nv12:
                layout = 2
                let p1 = format.plane(1)
                dst = out + p1.offset + (y / 2) * p1.bytesPerRow
            case .i420, .yuv422p:
                layout = 3
                let p1 = format.plane(1), p2 = format.plane(2), row = pf == .i420 ? y / 2 : y
                dst = out + p1.offset + row * p1.bytesPerRow
                dstV = out + p2.offset + row * p2.bytesPerRow
            default: // MJPEG: planar 4:2:2 for the encoder
                layout = 3
                dst = planes! + W * H + y * cw
                dstV = planes! + W * H + cw * H + y * cw
            }
            vf_sim_chroma_row(yDst, cuRow, cvRow, satK, castU, castV, layout, dst, dstV, cw)
        }
        let tEnd = timing ? monotonicNanoseconds() : 0
        if timing {
            lastPhaseNanoseconds[0] = tA - tStart
            lastPhaseNanoseconds[1] = tB - tA
            lastPhaseNanoseconds[3] = tTone
            lastPhaseNanoseconds[4] = tPack
            lastPhaseNanoseconds[2] = (tEnd - tB) - tTone - tPack
        }
        let meanLuma = Double(lumaSum) / Double(W * H)
        lastMeanLuma = meanLuma
        lastSceneLuminance = sceneLuminance

        var ok = true
        if pf == .mjpeg, let tj {
            var jpeg: UnsafeMutablePointer<UInt8>? = frame.data.assumingMemoryBound(to: UInt8.self)
            var size = UInt(frame.capacity)
            let rc = tjCompressFromYUVPlanes(tj, planePointers, Int32(W), planeStrides, Int32(H), Int32(TJSAMP_422.rawValue), &jpeg, &size, Int32(options.quality), Int32(TJFLAG_NOREALLOC))
            if rc != 0 || size > UInt(frame.capacity) { ok = false; frame.bytesUsed = 0 } else { frame.bytesUsed = Int(size) }
        } else {
            frame.bytesUsed = format.maxByteCount
        }
        if timing { lastPhaseNanoseconds[5] = monotonicNanoseconds() - tEnd }

        var truth = SimulationTruth()
        truth.shakeX = tx
        truth.shakeY = ty
        truth.shakeAngle = th
        truth.inFocusLensPosition = inFocusPosition
        truth.sceneLuminance = sceneLuminance
        truth.appliedExposure = state.exposureMicroseconds
        truth.appliedGain = state.gain
        truth.appliedLensPosition = state.lensPosition
        truth.defocusBlur = blur ? r : 0
        truth.renderedMeanLuma = meanLuma
        truth.colorTemperature = options.colorTemperature
        frame.metadata.truth = truth
        frame.metadata.exposureTime = state.exposureMicroseconds
        frame.metadata.gain = state.gain
        frame.metadata.lensPosition = state.lensPosition
        frame.metadata.whiteBalance = state.whiteBalance
        return ok
    }
}
