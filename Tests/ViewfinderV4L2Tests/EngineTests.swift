import Testing
@testable import Viewfinder
@testable import ViewfinderV4L2

/// A consumer that records what it sees and can act on a given frame.
final class RecordingConsumer: FrameConsumer {
    let consumerName = "recorder"
    let sequences = LockedBox<[UInt64]>([])
    let finishError = LockedBox<String?>(nil)
    let finished = LockedBox(false)
    let action: @Sendable (UInt64) -> Void
    init(action: @escaping @Sendable (UInt64) -> Void = { _ in }) { self.action = action }
    func consume(_ frame: Frame) {
        let s = frame.sequence
        sequences.withLock { $0.append(s) }
        action(s)
    }
    func finish(error: (any Error)?) {
        finishError.withLock { $0 = error.map { "\($0)" } }
        finished.withLock { $0 = true }
    }
}

/// The camera inside the engine: every frame accounted for, gaps counted exactly once, an unplug
/// ends the run with a runtime error that reaches the sinks.
@Suite struct EngineTests {
    func run(_ kernel: FakeV4L2Kernel, frames: UInt64, consumer: RecordingConsumer) throws -> CaptureEngine {
        kernel.autoProduce = true
        let cam = try makeCamera(kernel)
        let cfg = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 6))
        var options = EngineOptions(frameLimit: frames)
        options.stallTimeoutSeconds = 5
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [], consumers: [consumer], options: options, logger: quietLogger)
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 20))
        return engine
    }

    @Test func everyFrameIsAccountedForAndGapsCountOnce() throws {
        let kernel = makeKernel()
        let consumer = RecordingConsumer { seq in
            if seq == 10 { kernel.skipFrames(3) }
            if seq == 20 { kernel.flagErrors(2) }
        }
        let engine = try run(kernel, frames: 200, consumer: consumer)
        let s = engine.statistics
        #expect(engine.runtimeError == nil)
        #expect(s.captured >= 200)
        #expect(s.drops[.driverGap] == 3)
        #expect(s.drops[.corrupt] == 2)
        #expect(s.captured == s.delivered + s.drops.total)
        let seqs = consumer.sequences.withLock { $0 }
        #expect(seqs.count == Int(s.statistics_consumed(0)))
        #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 })
        #expect(consumer.finished.withLock { $0 })
    }

    @Test func unplugEndsTheRunWithARuntimeErrorThatReachesTheSinks() throws {
        let kernel = makeKernel()
        let consumer = RecordingConsumer { seq in if seq == 30 { kernel.disconnect() } }
        let engine = try run(kernel, frames: 10_000, consumer: consumer)
        #expect(engine.runtimeError as? DeviceError == .disconnected(device: "/dev/video0"))
        #expect(consumer.finishError.withLock { $0 } == "device '/dev/video0' was disconnected")
        #expect(consumer.finished.withLock { $0 })
        #expect(consumer.sequences.withLock { $0.count } >= 31)
    }

    @Test func benchmarkRunsOnTheFakeDevice() throws {
        let r = try V4L2Benchmark.fakeCapture(frames: 500, width: 640, height: 480)
        #expect(r.frames == 500)
        #expect(r.captureNanosecondsPerFrame.isFinite && r.captureNanosecondsPerFrame > 0)
        #expect(r.requeueNanosecondsPerFrame.isFinite && r.requeueNanosecondsPerFrame > 0)
    }
}

extension EngineStatistics {
    func statistics_consumed(_ i: Int) -> UInt64 { consumers[i].consumed }
}
