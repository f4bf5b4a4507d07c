import Foundation
import Testing
@testable import Viewfinder
import ViewfinderKit

/// A change of configuration on a running session restarts its engine; whoever waits for the
/// session to finish must not take that restart for the end (the browser preview's stage
/// switches ended the whole preview).
@Suite struct SessionRestartTests {
    @Test func switchingAStageOffWhileRunningIsNotTheEnd() throws {
        let device = try CaptureDevice.open("sim:width=160,height=120", directory: .standard)
        let session = CaptureSession(registry: .builtIn)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: device))
        try session.setStages(StageSpec.parseList("exposure,focus"))
        try session.commitConfiguration()
        try session.startRunning()
        defer { session.stopRunning() }
        let returned = LockedBox(false)
        let waiter = Thread { session.waitUntilFinished(); returned.withLock { $0 = true } }
        waiter.start()
        usleep(300_000)
        var specs = session.stages
        specs[1].enabled = false
        try session.setStages(specs)
        usleep(300_000)
        specs[1].enabled = true
        try session.setStages(specs)
        usleep(300_000)
        #expect(session.isRunning)
        #expect(returned.withLock { $0 } == false, "the wait ended at a restart")
        // Stopping the session does end the wait.
        session.stopRunning()
        let deadline = monotonicNanoseconds() + 5_000_000_000
        while !returned.withLock({ $0 }) && monotonicNanoseconds() < deadline { usleep(10_000) }
        #expect(returned.withLock { $0 }, "the wait did not end when the session stopped")
    }

    @Test func aSessionThatEndsByItselfStillEndsTheWait() throws {
        let device = try CaptureDevice.open("pattern:width=64,height=32,frames=5", directory: .standard)
        let session = CaptureSession(registry: .builtIn)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: device))
        try session.commitConfiguration()
        try session.startRunning()
        session.waitUntilFinished()
        #expect(session.statistics?.captured == 5)
        session.stopRunning()
    }
}
