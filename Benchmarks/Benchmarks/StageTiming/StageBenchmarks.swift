import ViewfinderKit
import ViewfinderTestSupport

/// Timing of the stage kernels on a synthetic textured frame, for `Benchmarks/` and reports.
///
/// Each kernel runs `iterations` times after a warm-up; the median thread CPU time is reported. Build with
/// `-c release`: debug timings mean nothing. (Moved here from ViewfinderStages: timing code is not
/// part of the library.)
public enum StageBenchmarks {
    public struct Result: Sendable, CustomStringConvertible {
        public var name: String
        /// Median time per call, ms.
        public var milliseconds: Double
        public var description: String {
            let r = (milliseconds * 1000).rounded() / 1000
            return "\(name): \(r) ms"
        }
    }

    /// A frame with a deterministic texture (sums of integer sines and a hash) so kernels do work.
    public static func makeFrame(_ format: FrameFormat, seed: UInt64 = 1, shiftX: Int = 0, shiftY: Int = 0) -> Frame {
        TexturedFrames.make(format, seed: seed, shiftX: shiftX, shiftY: shiftY)
    }

    /// CPU time of the calling thread, ns: unlike wall time it does not count the time the thread
    /// waited for a core, so timings stay meaningful while other work shares the machine.
    public static func threadCPUNanoseconds() -> UInt64 {
        TexturedFrames.threadCPUNanoseconds()
    }

    static func median(_ iterations: Int, _ body: () -> Void) -> Double {
        body()
        var t: [Double] = []
        t.reserveCapacity(iterations)
        for _ in 0..<iterations {
            let a = threadCPUNanoseconds()
            body()
            t.append(Double(threadCPUNanoseconds() - a) / 1e6)
        }
        t.sort()
        return t[t.count / 2]
    }

    /// Runs every kernel on `pixelFormat` frames of `width`×`height`.
    public static func run(width: Int = 1920, height: Int = 1080, pixelFormat: PixelFormat = .grey, iterations: Int = 50) -> [Result] {
        let format = FrameFormat(pixelFormat, width: width, height: height)
        let frame = makeFrame(format)
        guard let luma = LumaView(frame) else { return [] }
        var out: [Result] = []
        let h = LumaHistogram()
        var sink = 0.0
        out.append(Result(name: "luma histogram, full frame (\(pixelFormat))", milliseconds: median(iterations) { h.reset(); h.add(luma) }))
        out.append(Result(name: "luma histogram, 4x4 subsample (\(pixelFormat))", milliseconds: median(iterations) { h.reset(); h.add(luma, step: 4) }))
        out.append(Result(name: "variance of Laplacian, full frame (\(pixelFormat))", milliseconds: median(iterations) { sink += FocusMeasures.laplacianVariance(luma).variance }))
        out.append(Result(name: "Tenengrad, full frame (\(pixelFormat))", milliseconds: median(iterations) { sink += FocusMeasures.tenengrad(luma).value }))

        // Exposure and focus stages per frame (their default metering/regions).
        let context = StageContext(format: format, frameIntervalNanoseconds: 33_333_333)
        let ae = ExposureStage(options: ExposureOptions())
        try? ae.prepare(format: format, context: context)
        out.append(Result(name: "exposure stage (centre-weighted, 4x4 subsample)", milliseconds: median(iterations) { _ = ae.process(frame) }))
        let af = FocusStage(options: FocusOptions())
        try? af.prepare(format: format, context: context)
        out.append(Result(name: "focus stage (default window \(Int(FocusOptions().size * 100)) %, both measures)", milliseconds: median(iterations) { _ = af.process(frame) }))
        for size in [0.3, 0.5] where size != FocusOptions().size {
            var o = FocusOptions()
            o.size = size
            let other = FocusStage(options: o)
            try? other.prepare(format: format, context: context)
            out.append(Result(name: "focus stage (\(Int(size * 100)) % window)", milliseconds: median(iterations) { _ = other.process(frame) }))
        }
        var fullResolution = FocusOptions()
        fullResolution.scale = 1
        let afFull = FocusStage(options: fullResolution)
        try? afFull.prepare(format: format, context: context)
        out.append(Result(name: "focus stage (default window, full resolution: scale=1)", milliseconds: median(iterations) { _ = afFull.process(frame) }))
        var still = FocusOptions()
        still.track = false
        still.window = .box
        let afStill = FocusStage(options: still)
        try? afStill.prepare(format: format, context: context)
        out.append(Result(name: "focus stage, window neither tracked nor tapered (track=false, window=box)", milliseconds: median(iterations) { _ = afStill.process(frame) }))

        // Motion estimation alone (two alternating frames shifted by (3, 2)), then the whole stage.
        let other = makeFrame(format, shiftX: 3, shiftY: 2)
        let est = MotionEstimator(width: width, height: height)
        var flip = false
        out.append(Result(name: "motion estimation (\(pixelFormat))", milliseconds: median(iterations) {
            flip.toggle()
            sink += est.estimate(LumaView(flip ? other : frame)!).dx
        }))
        if pixelFormat != .rgb24 {
            let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: format.maxByteCount)
            scratch.update(from: frame.data.assumingMemoryBound(to: UInt8.self), count: format.maxByteCount)
            let map = AffineMap.correction(dx: 2.3, dy: -1.7, angle: 0.004, zoom: 1.1, width: width, height: height)
            let map2 = AffineMap.correction(dx: 2.1, dy: -1.6, angle: 0.0043, zoom: 1.1, width: width, height: height)
            let ws = WarpWorkspace(maxWidth: width)
            // Two maps in turn, as a stabiliser's change every frame (its tables are rebuilt).
            out.append(Result(name: "warp, all planes (\(pixelFormat))", milliseconds: median(iterations) {
                flip.toggle()
                Warp.frame(frame, from: scratch, map: flip ? map : map2, workspace: ws)
            }))
            out.append(Result(name: "warp, all planes, per-pixel path (\(pixelFormat))", milliseconds: median(max(3, iterations / 8)) { Warp.frame(frame, from: scratch, map: map) }))
            scratch.deallocate()
            // The whole stage, copying incoming frames (a source with few buffers) and not (the
            // session gave the source buffers to spare).
            // Look-ahead 15 copying and not; 45 (the recording setting since 25 Nov: a longer
            // window for the planner's plan, 46 -> 76 variables) not copying.
            for (spare, lookahead) in [(false, 15), (true, 15), (true, 45)] {
                out.append(stabilise(frame, other, lookahead: lookahead, spareBuffers: spare, iterations: iterations))
            }
        }
        if sink == 12345.678 { out.append(Result(name: "unlikely", milliseconds: sink)) }
        return out
    }
    /// The whole stabilise stage per frame on two alternating textured frames, copying incoming
    /// frames (a source with few buffers) or not (the session gave the source buffers to spare).
    /// With `consume`, each frame the stage hands on is read whole at once (a byte sum, as a sink
    /// reading it would): the stage's time and its effect on the next reader's, in one figure.
    public static func stabilise(width: Int = 1920, height: Int = 1080, pixelFormat: PixelFormat = .yuyv,
                                 lookahead: Int = 15, spareBuffers: Bool = true, iterations: Int = 50,
                                 consume: Bool = false) -> Result {
        let format = FrameFormat(pixelFormat, width: width, height: height)
        return stabilise(makeFrame(format), makeFrame(format, shiftX: 3, shiftY: 2), lookahead: lookahead,
                         spareBuffers: spareBuffers, iterations: iterations, consume: consume)
    }

    /// `count` distinct frames, copies of `a` and `b` in turn: a stabiliser's look-ahead holds each
    /// frame once at a time, so it needs distinct ones.
    public static func alternatingCopies(of a: Frame, _ b: Frame, count: Int) -> [Frame] {
        (0..<count).map { i in
            let src = i % 2 == 0 ? a : b
            let f = Frame(capacity: src.format.maxByteCount, format: src.format)
            f.copyAttributes(from: src)
            f.data.copyMemory(from: src.data, byteCount: src.format.maxByteCount)
            return f
        }
    }

    /// The whole stabilise stage per frame on `frame` and `other` in turn (of one format: two
    /// views of a picture, say), as ``stabilise(width:height:pixelFormat:lookahead:spareBuffers:iterations:consume:)``.
    public static func stabilise(_ frame: Frame, _ other: Frame, lookahead: Int, spareBuffers spare: Bool, iterations: Int,
                                 consume: Bool = false) -> Result {
        stabilise(frames: alternatingCopies(of: frame, other, count: lookahead + 9), lookahead: lookahead, spareBuffers: spare,
                  iterations: iterations, consume: consume)
    }

    /// The whole stabilise stage per frame on `frames` in order (a filmed sequence, or copies of
    /// two views in turn), as ``stabilise(width:height:pixelFormat:lookahead:spareBuffers:iterations:consume:)``;
    /// after the last frame the first comes again. `frames` must be distinct and more than
    /// `lookahead` + 2 (the stage holds its look-ahead's frames).
    public static func stabilise(frames: [Frame], lookahead: Int, spareBuffers spare: Bool, iterations: Int,
                                 consume: Bool = false) -> Result {
        precondition(frames.count > lookahead + 2, "the stage holds its look-ahead's frames")
        let format = frames[0].format
        var o = StabiliseOptions()
        o.lookahead = lookahead
        let st = StabiliseStage(options: o)
        var c = StageContext(format: format, frameIntervalNanoseconds: 33_333_333)
        if spare { c.sourceBuffers = lookahead + 49; c.buffersNeeded = lookahead + 25 }
        // The stage runs in a chain of its own, which keeps its holds (a stage holds a
        // given frame once at a time, so the look-ahead gets distinct frames).
        let chain = StageChain(stages: [st], drops: DropCounters())
        var consumed: UInt64 = 0
        try? chain.prepare(format: format, context: c) { f in
            guard consume else { return }
            let words = UnsafeRawPointer(f.data).assumingMemoryBound(to: UInt64.self)
            var sum: UInt64 = 0
            for i in 0..<(f.bytesUsed / 8) { sum &+= words[i] }
            consumed &+= sum
        }
        var next = 0
        let step = {
            _ = chain.submit(frames[next])
            next = (next + 1) % frames.count
        }
        // Fill the look-ahead first: only then does every call estimate, copy and warp.
        for _ in 0..<(o.lookahead + 2) { step() }
        let r = Result(name: "stabilise stage per frame, look-ahead \(lookahead), \(spare ? "no copy" : "copying")\(consume ? ", then read whole" : "") (\(format.pixelFormat))", milliseconds: median(iterations, step))
        chain.finish()
        if consumed == 0x5EED_5EED { print("(unlikely byte sum)") }
        return r
    }
}

#if canImport(Glibc)
import Glibc
#endif
