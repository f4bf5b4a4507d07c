import Testing
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// Every fault the backend handles, against the fake kernel: busy, refused format, USB bandwidth,
/// stalled stream (restart, reopen, give up) and unplug.
@Suite struct FaultTests {
    let kernel = makeKernel()

    @Test func busyDevice() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        kernel.setBusy(true)
        #expect(throws: DeviceError.busy(device: "/dev/video0")) {
            try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480))
        }
        kernel.setBusy(false)
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480))
        kernel.setBusy(true)
        #expect(throws: DeviceError.busy(device: "/dev/video0")) { try cam.start() }
        #expect(DeviceError.busy(device: "/dev/video0").description.contains("another program"))
        // A second camera on the same node while the first streams: EBUSY too.
        kernel.setBusy(false)
        try cam.start()
        let other = try makeCamera(kernel)
        defer { other.close() }
        #expect(throws: DeviceError.busy(device: "/dev/video0")) {
            try other.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480))
        }
    }

    @Test func bandwidthErrorExplainsWhatToDo() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 1280, height: 720))
        kernel.failStreamOn(with: .noSpace)
        do {
            try cam.start()
            Issue.record("STREAMON succeeded")
        } catch let e as DeviceError {
            #expect(e == .bandwidth(device: "/dev/video0"))
            #expect(e.description.contains("USB bandwidth"))
            #expect(e.description.contains("MJPEG"))
        }
        // Nothing left mapped or allocated; a retry works once bandwidth is there.
        #expect(kernel.statistics().mapped == 0)
        kernel.failStreamOn(with: nil)
        try cam.start()
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(cam)))?.release()
    }

    @Test func stalledStreamIsRestarted() throws {
        var options = V4L2Camera.Options()
        options.stallTimeoutSeconds = 0.02
        let cam = try makeCamera(kernel, options: options)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(cam)))?.release()
        kernel.setStalled(true)
        var spins = 0
        while cam.counters.restarts == 0 && spins < 100 { _ = try cam.next(timeoutNanoseconds: 10_000_000); spins += 1 }
        #expect(cam.counters.restarts == 1)
        #expect(kernel.statistics().streamOnCount == 2)
        kernel.setStalled(false)
        kernel.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.sequence == 1) // continues, although the driver restarted at 0
        f.release()
        #expect(cam.counters.reopens == 0)
    }

    @Test func deadStreamIsReopenedThenReportedStalled() throws {
        var options = V4L2Camera.Options()
        options.stallTimeoutSeconds = 0.02
        let cam = try makeCamera(kernel, options: options)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        kernel.setStalled(true)
        var thrown: (any Error)?
        for _ in 0..<200 {
            do { _ = try cam.next(timeoutNanoseconds: 10_000_000) } catch { thrown = error; break }
        }
        guard case DeviceError.stalled(let device, let seconds)? = thrown else { Issue.record("expected stalled, got \(String(describing: thrown))"); return }
        #expect(device == "/dev/video0")
        #expect(seconds > 0)
        #expect(cam.counters.restarts == 1)
        #expect(cam.counters.reopens == 1)
        #expect(kernel.statistics().openFiles == 1) // the old descriptor was closed
    }

    @Test func unplugMidStreamThrowsDisconnected() throws {
        let cam = try makeCamera(kernel)
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        kernel.produce(1)
        let held = try #require(expectFrame(try nextEvent(cam)))
        kernel.disconnect()
        #expect(throws: DeviceError.disconnected(device: "/dev/video0")) { try cam.next(timeoutNanoseconds: 50_000_000) }
        #expect(throws: DeviceError.disconnected(device: "/dev/video0")) { try cam.v4l2Controls.value(of: "brightness") }
        held.release() // QBUF fails with ENODEV: no crash, no hang
        cam.stop()
        cam.close()
    }

    @Test func unplugWhileTheEngineHoldsEveryBufferIsStillNoticed() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try cam.start()
        kernel.produce(4)
        var held: [Frame] = []
        for _ in 0..<4 { held.append(try #require(expectFrame(try nextEvent(cam)))) }
        kernel.disconnect()
        for f in held { f.release() } // every QBUF fails with ENODEV
        #expect(throws: DeviceError.disconnected(device: "/dev/video0")) { try cam.next(timeoutNanoseconds: 50_000_000) }
    }

    @Test func openingAnUnpluggedDeviceFails() throws {
        kernel.disconnect()
        #expect(throws: DeviceError.disconnected(device: "/dev/video0")) { try makeCamera(kernel) }
    }
}
