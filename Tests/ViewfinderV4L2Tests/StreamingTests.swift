import Testing
import CV4L2
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// The capture path against the fake kernel: configuration, zero-copy lending, re-queueing,
/// sequence gaps, out-of-buffers, corrupt buffers, timestamps, EINTR.
@Suite struct StreamingTests {
    let kernel = makeKernel()

    @Test func configurePicksTheClosestSupportedSizeAndRate() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        let c = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 700, height: 500, fps: 14))
        #expect(c.format == FrameFormat(.yuyv, width: 640, height: 480, bytesPerRow: 1280))
        #expect(c.interval == FrameInterval(numerator: 1, denominator: 15))
        #expect(cam.activeConfiguration == c)
        // Stepwise sizes snap to the step grid.
        let n = try cam.configure(StreamRequest(pixelFormat: .nv12, width: 1000, height: 601))
        #expect(n.format.width == 1008 && n.format.height == 600)
        #expect(n.format.pixelFormat == .nv12)
    }

    @Test func unsupportedFormatListsWhatTheDeviceOffers() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        do {
            _ = try cam.configure(StreamRequest(pixelFormat: .uyvy, width: 640, height: 480))
            Issue.record("UYVY accepted")
        } catch let DeviceError.unsupportedFormat(device, requested, available) {
            #expect(device == "/dev/video0")
            #expect(requested == "UYVY 640x480")
            #expect(available.contains("YUYV 640x480/1280x720/320x240"))
            #expect(available.contains("SBGGR8 640x480/1280x720/320x240"))
        }
    }

    @Test func framesAreLentWithoutCopyAndRequeuedOnRelease() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480, bufferCount: 4))
        try cam.start()
        #expect(kernel.statistics().queued == 4)
        #expect(kernel.statistics().mapped == 4)
        #expect(kernel.produce(3) == 3)
        var frames: [Frame] = []
        var addresses: Set<UnsafeMutableRawPointer> = []
        for expected in 0..<3 {
            let f = try #require(expectFrame(try nextEvent(cam)))
            #expect(f.sequence == UInt64(expected))
            // The driver wrote the sequence into the buffer: the frame points at that very memory.
            #expect(f.data.load(as: UInt32.self) == UInt32(expected))
            #expect(f.bytesUsed == 640 * 480 * 2)
            #expect(f.format.pixelFormat == .yuyv)
            #expect(f.timestamp.clock == .monotonic)
            #expect(f.timestamp.nanoseconds > 0 && f.timestamp.nanoseconds <= f.receiveTime)
            #expect(f.referenceCount == 1)
            addresses.insert(f.data)
            frames.append(f)
        }
        #expect(addresses.count == 3)
        #expect(kernel.statistics().queued == 1)
        #expect(cam.buffersQueuedInKernel == 1)
        frames[1].release()
        #expect(kernel.statistics().queued == 2)
        frames[0].release(); frames[2].release()
        #expect(kernel.statistics().queued == 4)
        // The same buffers come round again.
        kernel.produce(4)
        for _ in 0..<4 {
            let f = try #require(expectFrame(try nextEvent(cam)))
            #expect(addresses.contains(f.data) || addresses.count < 4)
            addresses.insert(f.data)
            f.release()
        }
        #expect(addresses.count == 4)
    }

    @Test func nothingReadyIsATimeoutNotASpin() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480))
        try cam.start()
        let dq = kernel.calls(VF_VIDIOC_DQBUF)
        let t0 = monotonicNanoseconds()
        let e = try cam.next(timeoutNanoseconds: 30_000_000)
        let waited = monotonicNanoseconds() - t0
        guard case .timeout = e else { Issue.record("expected timeout, got \(e)"); return }
        #expect(waited >= 25_000_000)
        // poll() waited; DQBUF was not tried in a loop.
        #expect(kernel.calls(VF_VIDIOC_DQBUF) == dq)
    }

    @Test func sequenceGapIsReportedOnceAsDriverGap() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        kernel.produce(1)
        kernel.skipFrames(2)
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(cam)))?.release()
        expectLost(try nextEvent(cam), .driverGap, 2)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.sequence == 3)
        #expect(f.metadata.droppedBefore == 2)
        f.release()
        #expect(cam.counters.driverGaps == 2)
        #expect(cam.counters.outOfBuffers == 0)
    }

    @Test func consumersHoldingEveryBufferCountsOutOfBuffersWithoutStalling() throws {
        var options = V4L2Camera.Options()
        options.stallTimeoutSeconds = 0.02
        let cam = try makeCamera(kernel, options: options)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try cam.start()
        kernel.produce(4)
        var held: [Frame] = []
        for _ in 0..<4 { held.append(try #require(expectFrame(try nextEvent(cam)))) }
        // The driver has no buffer: these three frames are lost.
        #expect(kernel.produce(3) == 0)
        // With every buffer lent out, next() waits for a release instead of declaring a stall.
        for _ in 0..<3 {
            guard case .timeout = try cam.next(timeoutNanoseconds: 30_000_000) else { Issue.record("expected timeout"); break }
        }
        #expect(cam.counters.restarts == 0)
        held.removeFirst().release()
        kernel.produce(1)
        expectLost(try nextEvent(cam), .outOfBuffers, 3)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.sequence == 7)
        f.release()
        for h in held { h.release() }
        #expect(cam.counters.outOfBuffers == 3)
        #expect(cam.counters.driverGaps == 0)
    }

    @Test func errorFlaggedBufferIsACorruptDropAndGoesStraightBack() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try cam.start()
        kernel.flagErrors(1)
        kernel.produce(2)
        expectLost(try nextEvent(cam), .corrupt, 1)
        #expect(kernel.statistics().queued == 3) // the flagged buffer is queued again at once
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.sequence == 1)
        f.release()
        #expect(cam.counters.corrupt == 1)
    }

    @Test func shortBufferIsCorrupt() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        kernel.setPayload { _, _ in 1000 } // far less than 320*240*2
        kernel.produce(1)
        expectLost(try nextEvent(cam), .corrupt, 1)
    }

    @Test func unknownTimestampClockIsReported() throws {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.monotonicTimestamps = false
        let k = makeKernel([spec])
        let cam = try makeCamera(k)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .grey, width: 320, height: 240))
        try cam.start()
        k.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        #expect(f.timestamp.clock == .unknown)
        #expect(f.bytesUsed == 320 * 240)
        f.release()
    }

    @Test func interruptedCallsAreRetried() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        kernel.interruptCalls(3)
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 640, height: 480))
        kernel.interruptCalls(2)
        try cam.start()
        kernel.produce(1)
        kernel.interruptCalls(2) // poll, then DQBUF
        try #require(expectFrame(try nextEvent(cam)))?.release()
    }

    @Test func stopWithFramesLentOutKeepsThemValidUntilReleased() throws {
        let cam = try makeCamera(kernel)
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try cam.start()
        kernel.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        cam.stop()
        #expect(kernel.statistics().mapped == 1)
        #expect(f.data.load(as: UInt32.self) == 0) // still readable
        f.release()
        #expect(kernel.statistics().mapped == 0)
        // And it can stream again.
        try cam.start()
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(cam)))?.release()
        cam.close()
        #expect(kernel.statistics().openFiles == 0)
    }

    @Test func restartAfterStopWithLentFramesReopens() throws {
        let cam = try makeCamera(kernel)
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try cam.start()
        kernel.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        cam.stop()
        try cam.start() // REQBUFS would be EBUSY on the old queue while f is mapped
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(cam)))?.release()
        f.release()
        cam.close()
        #expect(kernel.statistics().mapped == 0)
    }

    /// Regression (issue 15): `stop()` skipped REQBUFS(0) while frames were in flight, so the
    /// queue stayed owned by the first camera's file — which its mapped buffers keep alive after
    /// `close()` — and a second session on the same device got EBUSY.
    @Test func secondCameraOpensWhileFirstStillHoldsFrames() throws {
        let first = try makeCamera(kernel)
        _ = try first.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try first.start()
        kernel.produce(2)
        let a = try #require(expectFrame(try nextEvent(first)))
        let b = try #require(expectFrame(try nextEvent(first)))
        first.stop()
        first.close()
        #expect(kernel.statistics().mapped == 2)
        #expect(a.data.load(as: UInt32.self) == 0) // the lent frames stay readable
        #expect(b.data.load(as: UInt32.self) == 1)

        let second = try makeCamera(kernel)
        _ = try second.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try second.start()
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(second)))?.release()
        a.release()
        b.release()
        second.close()
        #expect(kernel.statistics().mapped == 0)
        #expect(kernel.statistics().openFiles == 0)
    }

    /// The same with `stop()` only (the first camera stays open): the queue is free for another.
    @Test func stopWithFramesInFlightReleasesTheQueue() throws {
        let first = try makeCamera(kernel)
        defer { first.close() }
        _ = try first.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try first.start()
        kernel.produce(1)
        let a = try #require(expectFrame(try nextEvent(first)))
        first.stop()
        let second = try makeCamera(kernel)
        defer { second.close() }
        _ = try second.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, bufferCount: 4))
        try second.start()
        kernel.produce(1)
        try #require(expectFrame(try nextEvent(second)))?.release()
        a.release()
        second.stop()
        #expect(kernel.statistics().mapped == 0)
    }
}
