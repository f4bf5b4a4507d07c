import Testing
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

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

/// A camera "driver" producing a frame every `intervalMicroseconds` on its own thread; `plan` runs
/// before each frame with the frame's ordinal (to inject faults at known points).
final class PacedDriver: Sendable {
    let stopFlag = LockedBox(false)
    let thread: EngineThread
    init(_ kernel: FakeV4L2Kernel, intervalMicroseconds: UInt64 = 3000, plan: @escaping @Sendable (Int) -> Void) {
        let flag = stopFlag
        thread = EngineThread(name: "fake-driver") {
            var n = 0
            var next = monotonicNanoseconds()
            while !flag.withLock({ $0 }) {
                plan(n)
                kernel.produce(1)
                n += 1
                next &+= intervalMicroseconds * 1000
                sleepUntil(monotonicNanoseconds: next)
            }
        }
    }
    func stop() { stopFlag.withLock { $0 = true }; thread.join() }
}

/// The camera inside the engine: every frame accounted for, gaps counted exactly once, an unplug
/// ends the run with a runtime error that reaches the sinks.
@Suite struct EngineTests {
    func run(_ kernel: FakeV4L2Kernel, frames: UInt64, consumer: RecordingConsumer, plan: @escaping @Sendable (Int) -> Void) throws -> CaptureEngine {
        let cam = try makeCamera(kernel)
        let cfg = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 32))
        var options = EngineOptions(frameLimit: frames)
        options.stallTimeoutSeconds = 5
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [], consumers: [consumer], options: options, logger: quietLogger)
        try engine.start()
        let driver = PacedDriver(kernel, plan: plan)
        let finished = engine.waitUntilFinished(timeoutSeconds: 20)
        driver.stop()
        #expect(finished)
        return engine
    }

    @Test func everyFrameIsAccountedForAndGapsCountOnce() throws {
        let kernel = makeKernel()
        let consumer = RecordingConsumer()
        let engine = try run(kernel, frames: 150, consumer: consumer) { n in
            if n == 10 { kernel.skipFrames(3) }
            if n == 20 { kernel.flagErrors(2) }
        }
        let s = engine.statistics
        #expect(engine.runtimeError == nil)
        #expect(s.captured >= 150)
        // The driver lost 3 frames on purpose, plus any it had no queued buffer for (only when
        // this machine starves the capture thread for tens of milliseconds); each counted once.
        let starvedDrops = UInt64(kernel.statistics().droppedNoBuffer)
        #expect(s.drops[.driverGap] + s.drops[.outOfBuffers] == 3 + starvedDrops, "drops: \(s.drops.byName)")
        if starvedDrops == 0 { #expect(s.drops[.driverGap] == 3) }
        #expect(s.drops[.corrupt] == 2, "drops: \(s.drops.byName)")
        #expect(s.captured == s.delivered + s.drops.total)
        let seqs = consumer.sequences.withLock { $0 }
        #expect(seqs.count == Int(s.consumers[0].consumed))
        #expect(seqs.count + Int(s.consumers[0].drops.total) == Int(s.delivered))
        #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 })
        #expect(consumer.finished.withLock { $0 })
    }

    @Test func unplugEndsTheRunWithARuntimeErrorThatReachesTheSinks() throws {
        let kernel = makeKernel()
        let consumer = RecordingConsumer()
        let engine = try run(kernel, frames: 10_000, consumer: consumer) { n in if n == 30 { kernel.disconnect() } }
        #expect(engine.runtimeError as? DeviceError == .disconnected(device: "/dev/video0"))
        #expect(consumer.finishError.withLock { $0 } == "device '/dev/video0' was disconnected")
        #expect(consumer.finished.withLock { $0 })
        #expect(consumer.sequences.withLock { $0.count } >= 20)
    }
}
