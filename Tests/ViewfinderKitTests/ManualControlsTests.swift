import Testing
import Foundation
@testable import ViewfinderKit
@testable import Viewfinder

/// Records what every frame was taken with and runs scripted device changes at given frames
/// (on the output's thread, while the session runs).
final class AppliedRecorder: VideoDataOutputDelegate, @unchecked Sendable {
    struct Applied: Equatable {
        var lens: Double?; var exposure: Double?; var gain: Double?
        /// What the capture side recorded as written (`exposedWith`: 100 µs units, gain × 100).
        var exposedTime: Int64? = nil; var exposedGain: Int64? = nil
    }
    let frames = LockedBox<[Applied]>([])
    let errors = LockedBox<[String]>([])
    let actions: [Int: @Sendable () throws -> Void]
    init(_ actions: [Int: @Sendable () throws -> Void]) { self.actions = actions }
    func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
        let m = sampleBuffer.frame.metadata
        let n = frames.withLock { f -> Int in f.append(Applied(lens: m.lensPosition, exposure: m.exposureTime, gain: m.gain, exposedTime: m.exposedWith.exposureTime, exposedGain: m.exposedWith.gain)); return f.count }
        if let a = actions[n] {
            do { try a() } catch { errors.withLock { $0.append("frame \(n): \(error)") } }
        }
    }
}

/// Runs `device` (already opened on the sim, a fixed number of frames) to its end with `actions`.
func runScripted(_ device: CaptureDevice, _ actions: [Int: @Sendable () throws -> Void]) throws -> AppliedRecorder {
    let (session, out) = try continuousExposureSession(device)
    let r = AppliedRecorder(actions)
    out.setDelegate(r, queue: nil)
    try session.startRunning()
    session.waitUntilFinished()
    session.stopRunning()
    return r
}

/// Locks, runs `body`, unlocks (even when it throws).
func locked(_ d: CaptureDevice, _ body: () throws -> Void) throws {
    try d.lockForConfiguration()
    defer { d.unlockForConfiguration() }
    try body()
}

@Suite struct ManualLensPositionTests {
    /// The sim's `focus_absolute` is 0…1000: 0.75 on AVFoundation's scale is 750. Set on a running
    /// session, the lens is there a few frames later (the sim's control latency is 2 frames), and
    /// ``CaptureDevice/currentLensPosition`` then keeps it there.
    @Test func aLensPositionSetWhileRunningMovesTheLensOnTheNextFrames() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=60,latency=2", directory: .standard)
        #expect(dev.lensPositionRange == 0...1000)
        let r = try runScripted(dev, [
            20: { try locked(dev) { try dev.setFocusModeLocked(normalizedLensPosition: 0.75) } },
            40: { try locked(dev) { try dev.setFocusModeLocked(normalizedLensPosition: CaptureDevice.currentLensPosition) } },
        ])
        #expect(r.errors.withLock { $0 }.isEmpty, "\(r.errors.withLock { $0 })")
        let lens = r.frames.withLock { $0 }.map { $0.lens ?? -1 }
        #expect(lens.count == 60)
        #expect(lens[0..<20].allSatisfy { $0 != 750 }, "the lens was at 750 before it was asked: \(lens)")
        // Frames 21…: the change applies between frames; within the sim's latency plus the
        // stage/capture hand-over the lens is there, and stays.
        let arrived = lens.indices.first { $0 >= 20 && lens[$0] == 750 }
        #expect(arrived.map { $0 <= 28 } == true, "lens positions: \(lens)")
        if let a = arrived { #expect(lens[a...].allSatisfy { $0 == 750 }, "lens positions: \(lens)") }
        #expect(abs(dev.lensPosition - 0.75) < 1e-9 && dev.lensPositionInDeviceUnits == 750)
        #expect(dev.settings.focusMode == .locked && dev.settings.lensPosition == 750)
    }

    @Test func outOfRangePositionsAreTypedErrors() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=1", directory: .standard)
        try locked(dev) {
            #expect(throws: SessionError.invalidConfiguration(reason: "lens position 1.5 is outside 0...1")) { try dev.setFocusModeLocked(normalizedLensPosition: 1.5) }
            #expect(throws: SessionError.invalidConfiguration(reason: "lens position nan is outside 0...1")) { try dev.setFocusModeLocked(normalizedLensPosition: .nan) }
            try dev.setFocusModeLocked(normalizedLensPosition: 0.5)
        }
        #expect(dev.settings.lensPosition == 500)
        // Without the lock: the usual typed error.
        #expect(throws: SessionError.notLockedForConfiguration(device: dev.uniqueID)) { try dev.setFocusModeLocked(normalizedLensPosition: 0.2) }
    }
}

@Suite struct ISOTests {
    /// The sim's `gain` is 100…1600 (1×…16×): ISO 100…1600.
    @Test func isoRangeFollowsTheGainControl() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=1", directory: .standard)
        #expect(dev.minISO == 100 && dev.maxISO == 1600)
        try locked(dev) {
            #expect(throws: SessionError.invalidConfiguration(reason: "ISO 50.0 is outside 100.0...1600.0")) { try dev.setExposureModeCustom(durationMicroseconds: 10_000, iso: 50) }
            #expect(throws: SessionError.invalidConfiguration(reason: "ISO 3200.0 is outside 100.0...1600.0")) { try dev.setExposureModeCustom(durationMicroseconds: 10_000, iso: 3200) }
            #expect(throws: SessionError.invalidConfiguration(reason: "exposure duration 0.0 µs is not positive")) { try dev.setExposureModeCustom(durationMicroseconds: 0, iso: 200) }
            try dev.setExposureModeCustom(durationMicroseconds: 10_000, iso: 400)
        }
        #expect(dev.settings.exposureMode == .custom && dev.settings.customGain == 4 && dev.settings.customExposureDuration == 10_000)
    }

    /// Custom exposure by ISO on a running session: the frames are taken with gain ISO/100; the
    /// "current" sentinels keep the duration or the gain in use while the other changes.
    @Test func customISOAppliesWhileRunningAndTheCurrentSentinelsKeepValues() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=75,latency=2", directory: .standard)
        let r = try runScripted(dev, [
            20: { try locked(dev) { try dev.setExposureModeCustom(durationMicroseconds: 10_000, iso: 400) } },
            40: { try locked(dev) { try dev.setExposureModeCustom(durationMicroseconds: CaptureDevice.currentExposureDuration, iso: 800) } },
            55: { try locked(dev) { try dev.setExposureModeCustom(durationMicroseconds: 5_000, iso: CaptureDevice.currentISO) } },
        ])
        #expect(r.errors.withLock { $0 }.isEmpty, "\(r.errors.withLock { $0 })")
        let f = r.frames.withLock { $0 }
        #expect(f.count == 75)
        func settled(_ range: Range<Int>) -> Set<[Double]> { Set(f[range].map { [$0.exposure ?? -1, $0.gain ?? -1] }) }
        // Each step has a few frames to arrive (latency 2 plus the hand-over), then holds.
        #expect(settled(30..<40) == [[10_000, 4]], "\(f.map { ($0.exposure, $0.gain) })")
        #expect(settled(48..<55) == [[10_000, 8]], "\(f.map { ($0.exposure, $0.gain) })")
        #expect(settled(65..<75) == [[5_000, 8]], "\(f.map { ($0.exposure, $0.gain) })")
        #expect(dev.iso == 800 && dev.exposureDurationMicroseconds == 5_000)
        // The capture side's record of what each frame was exposed with follows too (it kept
        // the values from before the first change: the custom values were written around it).
        func exposed(_ range: Range<Int>) -> Set<[Int64]> { Set(f[range].map { [$0.exposedTime ?? -1, $0.exposedGain ?? -1] }) }
        #expect(exposed(30..<40) == [[100, 400]], "\(f.map { ($0.exposedTime, $0.exposedGain) })")
        #expect(exposed(48..<55) == [[100, 800]])
        #expect(exposed(65..<75) == [[50, 800]])
    }
}

@Suite struct AdjustingStateTests {
    /// A sim camera starting far too bright: the exposure loop reports adjusting, then settled; a
    /// +1 EV bias step at frame 70 makes it adjust and settle again. The stream yields only changes.
    @Test func theExposureLoopReportsAdjustingThenSettled() async throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=140,exposure=8,latency=2", directory: .standard)
        let events = LockedBox<[DeviceAdjustingState]>([])
        let stream = dev.stateChanges
        let reader = Task { for await s in stream { events.withLock { $0.append(s) } } }
        let r = try runScripted(dev, [70: { try dev.configure { $0.exposureTargetBias = 1 } }])
        #expect(r.frames.withLock { $0.count } == 140)
        // Let the reader take what is buffered, then stop it.
        for _ in 0..<100 where events.withLock({ $0.last?.isAdjustingExposure != false }) { try await Task.sleep(nanoseconds: 10_000_000) }
        reader.cancel()
        let e = events.withLock { $0 }
        #expect(zip(e, e.dropFirst()).allSatisfy { $0 != $1 }, "a repeated state: \(e)")
        let exposure = e.map(\.isAdjustingExposure)
        // Settlings: adjusting followed by settled.
        let settlings = zip(exposure, exposure.dropFirst()).filter { $0 && !$1 }.count
        #expect(exposure.first == true && exposure.last == false, "exposure states: \(exposure)")
        #expect(settlings >= 2, "the loop settled \(settlings) times (initial convergence and after the bias step): \(exposure)")
        #expect(!dev.isAdjustingExposure && !dev.adjustingState.isAdjustingExposure)
    }
}

@Suite struct SubjectAreaChangeTests {
    /// Counts subject-area changes on a 120-frame sim run, the scene's light changed at `step` (if any).
    func changes(lightAt step: Int?) async throws -> Int {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=120,latency=2", directory: .standard)
        try locked(dev) { try dev.setSubjectAreaChangeMonitoringEnabled(true) }
        #expect(dev.isSubjectAreaChangeMonitoringEnabled)
        let count = LockedBox(0)
        let stream = dev.subjectAreaChanges
        let reader = Task { for await _ in stream { count.withLock { $0 += 1 } } }
        var actions: [Int: @Sendable () throws -> Void] = [:]
        if let step, let sim = dev.source as? SimCamera { actions[step] = { sim.setSceneLight(0.25) } }
        let r = try runScripted(dev, actions)
        #expect(r.frames.withLock { $0.count } == 120)
        try await Task.sleep(nanoseconds: 200_000_000)
        reader.cancel()
        return count.withLock { $0 }
    }

    /// The light drops to a quarter (−2 EV) at frame 60 after the exposure loop settled: one
    /// change, although the loop then brings the luma back (it is not compared while re-settling).
    @Test func aSceneChangeFiresOnce() async throws {
        #expect(try await changes(lightAt: 60) == 1)
    }

    /// A steady scene (sensor noise only): never.
    @Test func aSteadySceneNeverFires() async throws {
        #expect(try await changes(lightAt: nil) == 0)
    }

    @Test func enablingNeedsTheLock() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=1", directory: .standard)
        #expect(throws: SessionError.notLockedForConfiguration(device: dev.uniqueID)) { try dev.setSubjectAreaChangeMonitoringEnabled(true) }
        #expect(!dev.isSubjectAreaChangeMonitoringEnabled)
    }
}
