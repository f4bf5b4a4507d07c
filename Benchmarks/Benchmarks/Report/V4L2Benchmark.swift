import Foundation
import Logging
import ViewfinderKit
import ViewfinderTestSupport

/// Capture-thread cost of the V4L2 backend, measured against the fake kernel.
public enum V4L2Benchmark {
    public struct Result: Sendable, CustomStringConvertible {
        public var frames: Int
        /// Mean time in `next()`: poll, DQBUF, bookkeeping, filling the Frame (the capture thread's cost).
        public var captureNanosecondsPerFrame: Double
        /// Mean time to give the buffer back (release → QBUF), paid by whichever thread releases.
        public var requeueNanosecondsPerFrame: Double
        public var description: String {
            "\(frames) frames: capture \(String(format: "%.3f", captureNanosecondsPerFrame / 1000)) µs/frame (poll+DQBUF+Frame), requeue \(String(format: "%.3f", requeueNanosecondsPerFrame / 1000)) µs/frame"
        }
    }

    /// Streams `frames` frames from an infinitely fast fake camera (1920x1080 YUYV by default) and
    /// times the capture path. The fake kernel's own work (its lock, marking a buffer done) is
    /// included, so the figure is an upper bound of the backend's cost; the pixels are not touched
    /// (a real driver DMAs them), exactly as in the real path, which copies nothing.
    public static func fakeCapture(frames: Int, pixelFormat: PixelFormat = .yuyv, width: Int = 1920, height: Int = 1080) throws -> Result {
        let kernel = FakeV4L2Kernel(devices: [fakeDevice(pixelFormat: pixelFormat, width: width, height: height)])
        kernel.autoProduce = true
        var logger = Logger(label: "viewfinder.v4l2.benchmark")
        logger.logLevel = .warning
        let cam = try V4L2Camera(path: "/dev/video0", syscalls: kernel, logger: logger)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: pixelFormat, width: width, height: height, fps: 30, bufferCount: 8))
        try cam.start()
        // Warm up.
        for _ in 0..<64 { if case .frame(let f) = try cam.next(timeoutNanoseconds: 1_000_000_000) { f.release() } }
        var captureNs: UInt64 = 0, requeueNs: UInt64 = 0
        var got = 0
        while got < frames {
            let t0 = monotonicNanoseconds()
            let e = try cam.next(timeoutNanoseconds: 1_000_000_000)
            let t1 = monotonicNanoseconds()
            guard case .frame(let f) = e else { continue }
            f.release()
            let t2 = monotonicNanoseconds()
            captureNs &+= t1 &- t0
            requeueNs &+= t2 &- t1
            got += 1
        }
        return Result(frames: frames, captureNanosecondsPerFrame: Double(captureNs) / Double(frames),
                      requeueNanosecondsPerFrame: Double(requeueNs) / Double(frames))
    }

    /// Capture-thread cost per frame in µs (DQBUF to the Frame handed over), on the fake device.
    public static func benchmarkFakeCapture(frames: Int) -> Double {
        (try? fakeCapture(frames: frames).captureNanosecondsPerFrame / 1000) ?? .nan
    }

    static func fakeDevice(pixelFormat: PixelFormat, width: Int, height: Int) -> FakeV4L2Kernel.DeviceSpec {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.formats = [FakeV4L2Kernel.Format(fourcc: pixelFormat.fourcc, description: "\(pixelFormat)", compressed: pixelFormat.isCompressed,
                                              sizes: [.discrete(width: width, height: height)], intervals: [FrameInterval(numerator: 1, denominator: 30)])]
        return spec
    }
}

extension V4L2Benchmark {
    /// Mean TurboJPEG decode time (ms) of a camera-like 4:2:2 q85 JPEG of `width`x`height` at
    /// 1/`scaleDenominator` scale, through ``MJPEGDecoder`` (what a consumer needing pixels pays).
    public static func mjpegDecodeMilliseconds(width: Int = 1920, height: Int = 1080, scaleDenominator: Int = 1, iterations: Int = 50) throws -> Double {
        // A textured scene with sensor-like noise (so the entropy decoder has work), encoded 4:2:2 q85.
        let (_, source) = BenchmarkFrames.make(width: width, height: height, count: 1, noise: 8)
        defer { source[0].release() }
        let encoder = try JPEGEncoder()
        let jpeg = try encoder.encode(source[0], quality: 85, subsampling: .s422)
        let decoder = try MJPEGDecoder()
        let fmt = try decoder.outputFormat(for: try decoder.header(jpeg), scaleDenominator: scaleDenominator)
        let target = Frame(capacity: fmt.maxByteCount, format: fmt)
        try decoder.decode(jpeg, scaleDenominator: scaleDenominator, into: target)
        let t0 = monotonicNanoseconds()
        for _ in 0..<iterations { try decoder.decode(jpeg, scaleDenominator: scaleDenominator, into: target) }
        withExtendedLifetime(encoder) {}
        return Double(monotonicNanoseconds() - t0) / Double(iterations) / 1e6
    }
}
