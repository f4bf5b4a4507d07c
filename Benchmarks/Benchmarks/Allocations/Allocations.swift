// Allocation thresholds checked in CI (scripts/check-allocations.sh):
//
//   cd Benchmarks && swift package benchmark thresholds check --target Allocations
//
// exits non-zero when a benchmark allocates more than its stored threshold
// (Thresholds/Allocations.<name>.p90.json) plus the tolerance below.
import Benchmark
import Foundation
import ViewfinderKit
import ViewfinderTestSupport

/// A V4L2 capture on the fake kernel (320x240 YUYV, as fast as the engine takes frames) through
/// the auto-exposure and autofocus stages into a null sink, started and warmed up before the
/// measurement. The fake "sensor" alternates between a dark and a bright textured picture every
/// 45 frames, so the exposure loop keeps adjusting and control requests keep flowing: from the
/// stage thread through the queue to the capture thread, which writes them (S_EXT_CTRLS) and
/// stamps each frame with the values it was exposed with.
final class ControlledCapture {
    let kernel: FakeV4L2Kernel
    let camera: V4L2Camera
    let engine: CaptureEngine

    init() throws {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.formats = [FakeV4L2Kernel.Format(fourcc: PixelFormat.yuyv.fourcc, description: "YUYV 4:2:2",
                                              sizes: [.discrete(width: 320, height: 240)], intervals: [FrameInterval(numerator: 1, denominator: 30)])]
        kernel = FakeV4L2Kernel(devices: [spec])
        kernel.setPayload { buffer, sequence in
            let level: UInt8 = (sequence / 45) % 2 == 0 ? 40 : 190
            let n = min(buffer.count, 320 * 240 * 2)
            var i = 0
            while i < n {
                // Luma with a texture (so focus has something to measure), neutral chroma.
                buffer[i] = level &+ UInt8(truncatingIfNeeded: ((i >> 1) ^ (i >> 9)) & 31)
                buffer[i + 1] = 128
                i &+= 2
            }
            return n
        }
        kernel.autoProduce = true
        // Without event subscriptions: the fake kernel's own event queue allocates when it posts a
        // control-change event (a real kernel's does not, in this process).
        var options = V4L2Camera.Options()
        options.subscribeEvents = false
        camera = try V4L2Camera(path: "/dev/video0", syscalls: kernel, options: options)
        let cfg = try camera.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, fps: 30, bufferCount: 16))
        var exposure = ExposureOptions()
        exposure.mode = .continuous
        var focus = FocusOptions()
        focus.mode = .continuous
        engine = CaptureEngine(source: camera, configuration: cfg,
                               stages: [ExposureStage(options: exposure), FocusStage(options: focus)],
                               consumers: [NullConsumer()])
        try engine.start()
        waitForFrames(300)
    }

    /// Waits until `n` more frames have left the stage chain (no allocation while waiting).
    func waitForFrames(_ n: UInt64) {
        let target = engine.statistics.delivered &+ n
        while engine.statistics.delivered < target { usleep(200) }
    }

    /// Control writes the capture thread has made.
    var controlWrites: UInt64 { engine.controlRequests?.applied ?? 0 }

    func stop() {
        engine.stop()
        engine.waitUntilFinished()
        camera.close()
    }
}

let benchmarks: @Sendable () -> Void = {
    // The stored threshold is 0 allocations (Thresholds/*.p90.json); the tolerance is 0: any
    // allocation in the measured steady state fails the check.
    let noAllocations: [BenchmarkMetric: BenchmarkThresholds] = [.mallocCountTotal: .init(relative: [.p90: 0], absolute: [.p90: 0])]

    Benchmark("FakeV4L2ExposureFocus500Frames",
              configuration: .init(metrics: [.mallocCountTotal, .wallClock], warmupIterations: 1, maxDuration: .seconds(30), maxIterations: 10,
                                   thresholds: noAllocations)) { benchmark in
        let capture = try ControlledCapture()
        let writesBefore = capture.controlWrites
        benchmark.startMeasurement()
        capture.waitForFrames(500)
        benchmark.stopMeasurement()
        let writes = capture.controlWrites &- writesBefore
        capture.stop()
        precondition(writes > 0, "no control writes during the measurement: the benchmark would not test the control path")
        FileHandle.standardError.write("control writes during the 500 measured frames: \(writes)\n".data(using: .utf8)!)
    }
}
