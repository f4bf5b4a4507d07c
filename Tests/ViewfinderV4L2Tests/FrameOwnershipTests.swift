import Testing
import Foundation
import CV4L2
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// The fake kernel, recording which thread writes controls.
final class ControlThreadRecorder: V4L2Syscalls, @unchecked Sendable {
    let kernel: FakeV4L2Kernel
    let writers = LockedBox<[String]>([])
    init(_ kernel: FakeV4L2Kernel) { self.kernel = kernel }
    func open(_ path: String, flags: Int32) -> Result<Int32, Errno> { kernel.open(path, flags: flags) }
    func close(_ fd: Int32) -> Result<Void, Errno> { kernel.close(fd) }
    func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) -> Result<Int32, Errno> {
        if request == VF_VIDIOC_S_EXT_CTRLS { writers.withLock { $0.append(Thread.current.name ?? "?") } }
        return kernel.ioctl(fd, request, arg)
    }
    func mmap(length: Int, fd: Int32, offset: Int) -> Result<UnsafeMutableRawPointer, Errno> { kernel.mmap(length: length, fd: fd, offset: offset) }
    func munmap(_ address: UnsafeMutableRawPointer, length: Int) -> Result<Void, Errno> { kernel.munmap(address, length: length) }
    func poll(_ fd: Int32, events: PollEvents, timeoutMilliseconds: Int32) -> Result<PollEvents, Errno> { kernel.poll(fd, events: events, timeoutMilliseconds: timeoutMilliseconds) }
    func listDirectory(_ path: String) -> [String] { kernel.listDirectory(path) }
    func resolveLink(_ path: String) -> String? { kernel.resolveLink(path) }
}

/// Asks for a new exposure time on every frame, from `process`, and records what each frame says
/// it was exposed with.
final class ExposureSweep: Stage {
    static let name = "exposure-sweep"
    static let summary = "Requests a new exposure time every frame."
    var requests: ControlRequestQueue?
    var next: Int64 = 10
    init(options: NoOptions) {}
    func prepare(format: FrameFormat, context: StageContext) throws { requests = context.controlRequests }
    func process(_ frame: Frame) -> StageVerdict {
        requests?.request(.exposureTime, to: next)
        requests?.request(.focusAbsolute, to: (next % 50) * 5)
        next = next >= 2000 ? 10 : next + 10
        return .forward
    }
}

final class ExposedRecorder: FrameConsumer, @unchecked Sendable {
    let consumerName = "exposed"
    let seen = LockedBox<[(UInt64, ExposedControls)]>([])
    func consume(_ frame: Frame) { let e = (frame.sequence, frame.metadata.exposedWith); seen.withLock { $0.append(e) } }
}

@Suite struct V4L2FrameOwnershipTests {
    @Test func aSampleBufferReleasedByARCRequeuesTheKernelBuffer() async throws {
        let kernel = makeKernel()
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try cam.start()
        #expect(kernel.produce(1) == 1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(kernel.statistics().queued == 3)
        // The user-facing output hands out sample buffers; the engine lets go of its own reference.
        let output = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        let stream = output.frames()
        output.consume(f)
        output.finish(error: nil)
        f.release()
        #expect(kernel.statistics().queued == 3, "the sample buffer still holds the kernel buffer")
        var iterator = stream.makeAsyncIterator()
        var buffer = await iterator.next()
        #expect(buffer?.sequence == 0)
        #expect(kernel.statistics().queued == 3)
        buffer = nil
        // Its last reference gone, the buffer is back with the driver (QBUF), exactly once.
        #expect(kernel.statistics().queued == 4)
        #expect(await iterator.next() == nil)
        #expect(kernel.statistics().queued == 4)
    }

    @Test func controlsQueuedByAStageAreWrittenOnTheCaptureThreadAndFramesCarryTheirValues() throws {
        let kernel = makeKernel()
        let recorder = ControlThreadRecorder(kernel)
        let cam = try V4L2Camera(path: "/dev/video0", syscalls: recorder, logger: quietLogger)
        defer { cam.close() }
        let cfg = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 16))
        let out = ExposedRecorder()
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [ExposureSweep(options: NoOptions())], consumers: [out],
                                   options: EngineOptions(frameLimit: 80), logger: quietLogger)
        try engine.start()
        // A driver producing a frame every 3 ms, so that capture and stages run side by side.
        let driver = PacedDriver(kernel) { _ in }
        #expect(engine.waitUntilFinished(timeoutSeconds: 20))
        driver.stop()
        let writers = recorder.writers.withLock { $0 }
        #expect(!writers.isEmpty)
        #expect(writers.allSatisfy { $0 == "vf-capture" }, "control writes made on \(Set(writers))")
        #expect(engine.controlRequests?.applied ?? 0 > 0)
        #expect(engine.controlRequests?.failed == 0)
        let seen = out.seen.withLock { $0 }
        #expect(seen.count == Int(engine.statistics.consumers[0].consumed))
        // Every frame says what it was exposed with: the device's value before any write, then the
        // swept values, each from `latency` frames after the frame it was written after.
        #expect(seen.allSatisfy { $0.1.exposureTime != nil && $0.1.focus != nil && $0.1.gain != nil })
        #expect(seen.first?.1.exposureTime == 250)
        // The sweep shows in the metadata, in the order it was written (how many distinct values
        // depends on how far capture runs ahead of the stages: writes made between two frames
        // coalesce to the latest).
        let exposures = seen.map { $0.1.exposureTime! }
        let swept = exposures.drop { $0 == 250 }
        #expect(!swept.isEmpty)
        #expect(swept.allSatisfy { $0 % 10 == 0 && $0 <= 2000 })
        #expect(zip(swept, swept.dropFirst()).allSatisfy { $0 <= $1 })
        // A write made after frame k lands on frame k + latency (3 for V4L2) at the earliest.
        #expect(cam.controls?.controlLatencyFrames == 3)
        #expect(seen.filter { $0.0 < 3 }.allSatisfy { $0.1.exposureTime == 250 && $0.1.focus == 0 })
    }
}
