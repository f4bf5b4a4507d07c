import Foundation
import ViewfinderKit

/// Per-call cost of the hot kernels (the ones issue 9 asks to keep fast without a target-CPU flag), with
/// their spread: every kernel is timed in `repeats` rounds of `iterations` calls; a round gives the
/// median thread CPU time per call, and the figure is the median of the rounds with the lowest and highest
/// round as the spread.
///
///   cd Benchmarks && swift run -c release viewfinder-report --kernels [--quick]
public enum KernelTimings {
    public struct Figure: Sendable, CustomStringConvertible {
        public var kernel: String
        public var pixelFormat: PixelFormat
        /// Median over the rounds of each round's median time per call, ms.
        public var median: Double
        /// The fastest and slowest round, ms.
        public var low: Double, high: Double
        public var description: String {
            let name = "\(kernel) (\(pixelFormat))"
            return name.padding(toLength: 44, withPad: " ", startingAt: 0)
                + String(format: "%8.3f ms   [%.3f .. %.3f]", median, low, high)
        }
    }

    /// Runs `body` `repeats` × `iterations` times after one warm-up call.
    static func measure(_ kernel: String, _ pf: PixelFormat, repeats: Int, iterations: Int, _ body: () -> Void) -> Figure {
        body()
        var rounds: [Double] = []
        for _ in 0..<repeats { rounds.append(StageBenchmarks.median(iterations, body)) }
        rounds.sort()
        return Figure(kernel: kernel, pixelFormat: pf, median: rounds[rounds.count / 2], low: rounds.first!, high: rounds.last!)
    }

    /// Every kernel on one pixel format (GREY or YUYV) at `width`×`height`.
    public static func run(width: Int = 1920, height: Int = 1080, pixelFormat pf: PixelFormat, repeats: Int = 7, scale: Int = 1) throws -> [Figure] {
        let format = FrameFormat(pf, width: width, height: height)
        let frame = StageBenchmarks.makeFrame(format), other = StageBenchmarks.makeFrame(format, shiftX: 3, shiftY: 2)
        guard let luma = LumaView(frame) else { return [] }
        var out: [Figure] = []
        var sink = 0.0
        func time(_ kernel: String, _ iterations: Int, _ body: () -> Void) {
            out.append(measure(kernel, pf, repeats: repeats, iterations: max(3, iterations / scale), body))
        }
        let h = LumaHistogram()
        time("luma histogram, full frame", 60) { h.reset(); _ = h.add(luma) }
        time("luma histogram, 4x4 subsample", 200) { h.reset(); _ = h.add(luma, step: 4) }
        time("variance of Laplacian", 60) { sink += FocusMeasures.laplacianVariance(luma).variance }
        time("Tenengrad", 60) { sink += FocusMeasures.tenengrad(luma).value }

        let est = MotionEstimator(width: width, height: height)
        var flip = false
        _ = est.estimate(luma)
        time("motion estimation", 60) {
            flip.toggle()
            sink += est.estimate(LumaView(flip ? other : frame)!).dx
        }

        let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: format.maxByteCount)
        defer { scratch.deallocate() }
        scratch.update(from: frame.data.assumingMemoryBound(to: UInt8.self), count: format.maxByteCount)
        let map = AffineMap.correction(dx: 2.3, dy: -1.7, angle: 0.004, zoom: 1.1, width: width, height: height)
        let map2 = AffineMap.correction(dx: 2.1, dy: -1.6, angle: 0.0043, zoom: 1.1, width: width, height: height)
        let ws = WarpWorkspace(maxWidth: width)
        // Two maps in turn, as a stabiliser's change every frame (its tables are rebuilt).
        time("warp, all planes", 40) {
            flip.toggle()
            Warp.frame(frame, from: scratch, map: flip ? map : map2, workspace: ws)
        }

        if pf == .yuyv || pf == .uyvy {
            let y = UnsafeMutablePointer<UInt8>.allocate(capacity: width * height)
            let u = UnsafeMutablePointer<UInt8>.allocate(capacity: width * height / 2)
            let v = UnsafeMutablePointer<UInt8>.allocate(capacity: width * height / 2)
            defer { y.deallocate(); u.deallocate(); v.deallocate() }
            let src = UnsafePointer(frame.data.assumingMemoryBound(to: UInt8.self))
            time("YUYV split to planar 4:2:2", 60) {
                YUVSplit.packed422(src, bytesPerRow: format.bytesPerRow, width: width, height: height, order: .yuyv, y: y, u: u, v: v)
            }
        }

        // A limited-range camera's frames are stretched in place as they are dequeued (the values
        // clip after the first call; the cost is the same).
        time("limited to full range, in place", 60) { YUVRange.expandToFull(frame) }

        let sim = try SimRender(width: width, height: height, format: pf)
        time("sim camera, full render", 12) { sim.renderNext() }
        if sink == 12345.678 { print(sink) }
        return out
    }
}

/// The sim camera's full physical model (shake, defocus, exposure, noise, flicker, packing) rendered
/// frame after frame on the calling thread, as a paced camera would but without waiting.
///
/// Everything is exercised: 3 px shake, 50 Hz flicker with a 3 ms exposure, and a lens `defocus`
/// units from focus (a fractional blur of about 1.2 px at 1920 wide).
public final class SimRender {
    let camera: SimCamera
    let renderer: SimRenderer
    let frame: Frame
    var state = SimFrameState()
    var k = 0

    public init(width: Int = 1920, height: Int = 1080, format: PixelFormat = .yuyv, defocus: Double = 60) throws {
        var o = SimOptions()
        o.width = width; o.height = height; o.format = format; o.shake = 3; o.flicker = 50; o.paced = false
        camera = try SimCamera(options: o)
        _ = try camera.configure(StreamRequest(pixelFormat: format, width: width, height: height, fps: 30))
        try camera.start()
        renderer = camera.currentRenderer!
        frame = Frame(capacity: renderer.compressedCapacity, format: renderer.format)
        state.exposureMicroseconds = 3000
        state.lensPosition = renderer.inFocusPosition + defocus
    }

    deinit { camera.stop() }

    /// Renders the next frame of the stream into the same buffer.
    public func renderNext() {
        state.sequence = UInt64(k)
        state.time = Double(k) / 30
        let s = renderer.shake.at(state.time)
        state.shakeX = s.dx; state.shakeY = s.dy; state.shakeAngle = s.angle
        _ = renderer.render(state, into: frame)
        k += 1
    }

    /// Frames per second over `frames` frames (wall time, one thread).
    public func framesPerSecond(frames: Int) -> Double {
        renderNext()
        let t0 = monotonicNanoseconds()
        for _ in 0..<frames { renderNext() }
        return Double(frames) / (Double(monotonicNanoseconds() - t0) / 1e9)
    }
}
