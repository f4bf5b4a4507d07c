import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

@Suite struct SessionInterruptionTests {
    /// A session on a fake camera that produces frames as fast as they are taken.
    func cameraSession() throws -> (FakeV4L2Kernel, CaptureSession) {
        let kernel = makeKernel()
        kernel.autoProduce = true
        let session = CaptureSession(logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: try makeCamera(kernel))))
        try session.addOutput(NullConsumer())
        try session.setSessionPreset(.inputPriority)
        return (kernel, session)
    }

    /// Unplugging the camera interrupts the session; plugging it back in ends the interruption
    /// and the session streams again by itself.
    @Test func anUnpluggedCameraThatComesBackEndsTheInterruption() throws {
        let (kernel, session) = try cameraSession()
        let events = LockedBox<[SessionEvent]>([])
        session.onEvent { e in events.withLock { $0.append(e) } }
        func waitFor(_ what: String, count: Int = 1) -> Bool {
            let deadline = Date().addingTimeInterval(10)
            while events.withLock({ $0.filter { $0.description == what }.count }) < count {
                if Date() > deadline { return false }
                usleep(5000)
            }
            return true
        }
        func delivered() -> UInt64 { session.statistics?.delivered ?? 0 }
        func waitForFrames(_ n: UInt64) -> Bool {
            let deadline = Date().addingTimeInterval(10)
            while delivered() < n { if Date() > deadline { return false }; usleep(5000) }
            return true
        }

        try session.startRunning()
        #expect(waitForFrames(20))
        kernel.disconnect()
        #expect(waitFor("interrupted: video device not available"))
        #expect(waitFor("did stop running"))
        #expect(session.isInterrupted)
        // While unplugged the session keeps trying, and nothing comes back.
        usleep(300_000)
        #expect(!events.withLock { $0.contains { $0.description == "interruption ended" } })
        kernel.reconnect()
        #expect(waitFor("interruption ended"))
        #expect(waitFor("did start running", count: 2))
        #expect(!session.isInterrupted)
        // The new run streams from the replugged camera.
        #expect(waitForFrames(20))
        #expect(session.isRunning)
        session.stopRunning()
        let names = events.withLock { $0.map(\.description) }
        #expect(names == ["did start running", "interrupted: video device not available", "runtime error: device '/dev/video0' was disconnected",
                          "did stop running", "interruption ended", "did start running", "did stop running"])
        // The runtime error kept its type.
        let typed = events.withLock { $0.compactMap { $0.error as? DeviceError } }
        #expect(typed == [.disconnected(device: "/dev/video0")])
    }

    /// Stopping an interrupted session stops the watching: a later replug starts nothing.
    @Test func stoppingAnInterruptedSessionStopsWatching() throws {
        let (kernel, session) = try cameraSession()
        try session.startRunning()
        let deadline = Date().addingTimeInterval(10)
        while (session.statistics?.delivered ?? 0) < 5 && Date() < deadline { usleep(5000) }
        kernel.disconnect()
        while !session.isInterrupted && Date() < deadline { usleep(5000) }
        #expect(session.isInterrupted)
        session.stopRunning()
        #expect(!session.isInterrupted)
        kernel.reconnect()
        usleep(300_000)
        #expect(!session.isRunning)
    }
}
