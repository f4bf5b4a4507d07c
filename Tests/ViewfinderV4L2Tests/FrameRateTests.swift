import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// The frame rate changed while streaming: S_PARM mid-stream, or a restart around it.
@Suite struct FrameRateTests {
    func streamingCamera(_ kernel: FakeV4L2Kernel) throws -> V4L2Camera {
        let cam = try makeCamera(kernel)
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480, fps: 30))
        try cam.start()
        kernel.produce(1)
        if let f = expectFrame(try nextEvent(cam)) { f.release() }
        return cam
    }

    @Test func sParmWhileStreamingIsTakenWithoutARestart() throws {
        let kernel = makeKernel()
        let cam = try streamingCamera(kernel)
        defer { cam.close() }
        let change = try cam.setFrameInterval(FrameInterval(numerator: 1, denominator: 15))
        #expect(change == .appliedWhileStreaming(FrameInterval(numerator: 1, denominator: 15)))
        #expect(kernel.frameInterval() == FrameInterval(numerator: 1, denominator: 15))
        #expect(cam.activeConfiguration?.interval == FrameInterval(numerator: 1, denominator: 15))
        kernel.produce(1)
        let f = expectFrame(try nextEvent(cam))
        #expect(f?.sequence == 1) // the same stream, no gap
        f?.release()
        #expect(kernel.statistics().streamOnCount == 1 && cam.counters.rateRestarts == 0)
    }

    @Test func aDriverThatRefusesMidStreamGetsARestartBetweenFrames() throws {
        let kernel = makeKernel()
        kernel.refuseIntervalWhileStreaming(true)
        let cam = try streamingCamera(kernel)
        defer { cam.close() }
        let change = try cam.setFrameInterval(FrameInterval(numerator: 1, denominator: 15))
        #expect(change == .restartingStream(FrameInterval(numerator: 1, denominator: 15)))
        #expect(kernel.frameInterval() == FrameInterval(numerator: 1, denominator: 30)) // not yet
        // The capture thread restarts before waiting for the next frame.
        if case .frame(let f) = try cam.next(timeoutNanoseconds: 1_000_000) { f.release() }
        #expect(kernel.frameInterval() == FrameInterval(numerator: 1, denominator: 15))
        #expect(kernel.statistics().streamOnCount == 2 && cam.counters.rateRestarts == 1)
        #expect(cam.activeConfiguration?.interval == FrameInterval(numerator: 1, denominator: 15))
        // Frames flow again, with engine sequences continuing.
        kernel.produce(1)
        let f = expectFrame(try nextEvent(cam))
        #expect((f?.sequence ?? 0) >= 1)
        f?.release()
    }

    @Test func aSessionAppliesANewMinFrameDurationWhileRunning() throws {
        let kernel = makeKernel()
        kernel.autoProduce = true
        let device = CaptureDevice(source: try makeCamera(kernel))
        let session = CaptureSession(logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: device))
        try session.addOutput(NullConsumer())
        try session.setSessionPreset(.inputPriority)
        try device.configure { $0.activeFormat = StreamRequest(pixelFormat: .yuyv, width: 640, height: 480) }
        try session.startRunning()
        defer { session.stopRunning() }
        #expect(device.activeVideoMinFrameDuration == FrameInterval(numerator: 1, denominator: 30))
        #expect(device.supportedFrameIntervals == [FrameInterval(numerator: 1, denominator: 30), FrameInterval(numerator: 1, denominator: 15)])
        try device.lockForConfiguration()
        // 25 fps is not among the format's rates.
        #expect(throws: SessionError.self) { try device.setActiveVideoMinFrameDuration(FrameInterval(numerator: 1, denominator: 25)) }
        try device.setActiveVideoMinFrameDuration(FrameInterval(numerator: 1, denominator: 15))
        #expect(throws: SessionError.self) { try device.setActiveVideoMaxFrameDuration(FrameInterval(numerator: 1, denominator: 30)) }
        device.unlockForConfiguration()
        #expect(device.lastFrameRateChange == .appliedWhileStreaming(FrameInterval(numerator: 1, denominator: 15)))
        #expect(kernel.frameInterval() == FrameInterval(numerator: 1, denominator: 15))
        #expect(kernel.statistics().streamOnCount == 1)
        #expect(session.isRunning)
        // The session's account of the stream follows (it said 30 fps after the change).
        #expect(session.streamConfiguration?.interval == FrameInterval(numerator: 1, denominator: 15))
    }
}
