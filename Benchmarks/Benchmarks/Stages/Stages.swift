import Benchmark
import StageTiming
import ViewfinderKit

// Per-stage cost at 1920x1080 (package-benchmark): the kernels the issue names next to their C
// floors (NOTES.md: histogram 0.44 ms, variance of Laplacian 0.17 ms, Tenengrad 0.28 ms, C -O3
// -march=native), the four stages per frame, and allocations per frame (mallocCountTotal over
// all iterations; 0 in steady state). `cd Benchmarks && swift package benchmark --target Stages`.

/// Everything a stage benchmark needs for one pixel format, built once.
final class StageBench: @unchecked Sendable {
    // @unchecked Sendable: used by one benchmark at a time, on its thread.
    let format: FrameFormat
    let frame: Frame
    let other: Frame
    let luma: LumaView
    let histogram = LumaHistogram()
    let context: StageContext
    let source: UnsafeMutablePointer<UInt8>
    let workspace: WarpWorkspace
    var flip = false

    init(_ pf: PixelFormat) {
        format = FrameFormat(pf, width: 1920, height: 1080)
        frame = StageBenchmarks.makeFrame(format)
        other = StageBenchmarks.makeFrame(format, shiftX: 3, shiftY: 2)
        luma = LumaView(frame)!
        context = StageContext(format: format, frameIntervalNanoseconds: 33_333_333)
        source = .allocate(capacity: format.maxByteCount)
        source.update(from: frame.data.assumingMemoryBound(to: UInt8.self), count: format.maxByteCount)
        workspace = WarpWorkspace(maxWidth: 1920)
    }

    /// Distinct frames for the stabiliser's look-ahead (a frame is held once at a time), made on
    /// first use: alternately `frame` and `other`.
    lazy var lookahead: [Frame] = StageBenchmarks.alternatingCopies(of: frame, other, count: 24)
    var next = 0

    /// The stabiliser in a chain of its own (which keeps its holds), as the engine runs it.
    func chain(_ st: StabiliseStage, context: StageContext) throws -> StageChain {
        let chain = StageChain(stages: [st], drops: DropCounters())
        try chain.prepare(format: format, context: context) { _ in }
        return chain
    }

    /// Feeds the stabiliser the next frame; returns after each ready frame has gone through.
    func stabilise(_ chain: StageChain) {
        let f = lookahead[next]
        next = (next + 1) % lookahead.count
        chain.submit(f)
    }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .cpuUser, .mallocCountTotal], warmupIterations: 3, maxDuration: .seconds(5), maxIterations: 200)

    for pf in [PixelFormat.grey, .yuyv] {
        let b = StageBench(pf)
        Benchmark("luma histogram, full frame (\(pf))") { benchmark in
            for _ in benchmark.scaledIterations { b.histogram.reset(); b.histogram.add(b.luma) }
            blackHole(b.histogram)
        }
        Benchmark("luma histogram, 4x4 subsample (\(pf))") { benchmark in
            for _ in benchmark.scaledIterations { b.histogram.reset(); b.histogram.add(b.luma, step: 4) }
            blackHole(b.histogram)
        }
        Benchmark("variance of Laplacian (\(pf))") { benchmark in
            for _ in benchmark.scaledIterations { blackHole(FocusMeasures.laplacianVariance(b.luma).variance) }
        }
        Benchmark("Tenengrad (\(pf))") { benchmark in
            for _ in benchmark.scaledIterations { blackHole(FocusMeasures.tenengrad(b.luma).value) }
        }
        Benchmark("exposure stage per frame (\(pf))") { benchmark in
            let ae = ExposureStage(options: ExposureOptions())
            try ae.prepare(format: b.format, context: b.context)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations { blackHole(ae.process(b.frame)) }
        }
        Benchmark("focus stage per frame (\(pf))") { benchmark in
            let af = FocusStage(options: FocusOptions())
            try af.prepare(format: b.format, context: b.context)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations { blackHole(af.process(b.frame)) }
        }
        Benchmark("motion estimation (\(pf))") { benchmark in
            let est = MotionEstimator(width: 1920, height: 1080)
            _ = est.estimate(b.luma) // a previous frame to match against
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                b.flip.toggle()
                blackHole(est.estimate(LumaView(b.flip ? b.other : b.frame)!))
            }
        }
        Benchmark("warp, all planes (\(pf))") { benchmark in
            let m1 = AffineMap.correction(dx: 2.3, dy: -1.7, angle: 0.004, zoom: 1.1, width: 1920, height: 1080)
            let m2 = AffineMap.correction(dx: 2.1, dy: -1.6, angle: 0.0043, zoom: 1.1, width: 1920, height: 1080)
            for _ in benchmark.scaledIterations {
                b.flip.toggle()
                Warp.frame(b.frame, from: b.source, map: b.flip ? m1 : m2, workspace: b.workspace)
            }
        }
        for spare in [true, false] {
            Benchmark("stabilise stage per frame, look-ahead 15, \(spare ? "no copy" : "copying") (\(pf))") { benchmark in
                var o = StabiliseOptions()
                o.lookahead = 15
                let st = StabiliseStage(options: o)
                var c = b.context
                if spare { c.sourceBuffers = 64; c.buffersNeeded = 40 }
                let chain = try b.chain(st, context: c)
                for _ in 0..<20 { b.stabilise(chain) } // fill the look-ahead
                benchmark.startMeasurement()
                for _ in benchmark.scaledIterations { b.stabilise(chain) }
                benchmark.stopMeasurement()
                chain.finish()
            }
        }
        Benchmark("deadline stage per frame (\(pf))") { benchmark in
            let d = DeadlineStage(options: DeadlineOptions())
            try d.prepare(format: b.format, context: b.context)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations { blackHole(d.process(b.frame)) }
        }
    }
}
