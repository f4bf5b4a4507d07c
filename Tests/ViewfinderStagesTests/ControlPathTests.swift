import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderStages
import ViewfinderSim

/// A device whose every control write takes `delay` (a slow USB control transfer), recording the
/// threads that write.
final class SlowControls: DeviceControlling, @unchecked Sendable {
    let inner: any DeviceControlling
    let delayMicroseconds: UInt32
    let writers = LockedBox<[String]>([])
    init(_ inner: any DeviceControlling, delayMilliseconds: UInt32) { self.inner = inner; delayMicroseconds = delayMilliseconds * 1000 }
    var descriptors: [ControlDescriptor] { inner.descriptors }
    func value(of name: String) throws -> Int64 { try inner.value(of: name) }
    func set(_ name: String, to value: Int64) throws {
        writers.withLock { $0.append(Thread.current.name ?? "?") }
        if delayMicroseconds > 0 { usleep(delayMicroseconds) }
        try inner.set(name, to: value)
    }
    func set(_ standard: StandardControl, to value: Int64) throws {
        guard let d = inner.descriptor(standard) else { throw DeviceError.unknownControl(device: "slow", control: standard.rawValue, known: []) }
        try set(d.name, to: value)
    }
    var controlLatencyFrames: Int { inner.controlLatencyFrames }
}

/// The sim camera behind slow controls.
final class SlowControlSource: CaptureSource, @unchecked Sendable {
    let sim: SimCamera
    let slow: SlowControls
    init(_ sim: SimCamera, delayMilliseconds: UInt32) { self.sim = sim; slow = SlowControls(sim.simControls, delayMilliseconds: delayMilliseconds) }
    var info: DeviceInfo { sim.info }
    var isLive: Bool { sim.isLive }
    var controls: (any DeviceControlling)? { slow }
    var activeConfiguration: StreamConfiguration? { sim.activeConfiguration }
    func configure(_ request: StreamRequest) throws -> StreamConfiguration { try sim.configure(request) }
    func start() throws { try sim.start() }
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent { try sim.next(timeoutNanoseconds: timeoutNanoseconds) }
    func stop() { sim.stop() }
}

final class ControlRecord: FrameConsumer, @unchecked Sendable {
    struct Entry { var exposed: ExposedControls; var truth: SimulationTruth?; var stageNs: UInt64; var error: Double? }
    let consumerName = "record"
    let entries = LockedBox<[Entry]>([])
    func consume(_ frame: Frame) {
        let m = frame.metadata
        entries.withLock { $0.append(Entry(exposed: m.exposedWith, truth: m.truth, stageNs: m.stageNanoseconds, error: m.exposureError)) }
    }
}

@Suite("Controls off the stage thread")
struct ControlPathTests {
    @Test("AE+AF through the engine: writes on the capture thread, a 50 ms write does not hold up the stages, frames carry the values they were exposed with",
          arguments: [UInt32(0), 50])
    func slowControlWrites(delayMilliseconds: UInt32) throws {
        let sim = try SimCamera(deviceString: "sim:width=320,height=240,paced=false,exposure=10,gain=16,latency=2,subject=0.5")
        let src = SlowControlSource(sim, delayMilliseconds: delayMilliseconds)
        let cfg = try src.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, fps: 30))
        var fo = FocusOptions(); fo.mode = .continuous
        let stages: [any Stage] = [ExposureStage(options: ExposureOptions()), FocusStage(options: fo)]
        let rec = ControlRecord()
        let engine = CaptureEngine(source: src, configuration: cfg, stages: stages, consumers: [rec], options: EngineOptions(frameLimit: 40))
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 60))
        let entries = rec.entries.withLock { $0 }
        // Frames keep flowing: every one is delivered (the sim unpaced applies back-pressure).
        #expect(entries.count == 40)
        #expect(engine.statistics.delivered == 40)
        // Every write after `prepare` came from the capture thread, none from the stage thread.
        let writers = src.slow.writers.withLock { $0 }
        #expect(!writers.contains("vf-stages"))
        #expect(writers.filter { $0 == "vf-capture" }.count == Int(engine.controlRequests?.applied ?? 0))
        #expect((engine.controlRequests?.applied ?? 0) > 5)
        // No write is paid for on the stage thread. Had the stages made the writes, every applied
        // write would have put one frame at or above the write's own length; a frame may still be
        // descheduled that long on a loaded machine (CI's unit step runs beside other builds), so
        // the test counts such frames against the writes instead of bounding the slowest frame —
        // a wall-clock bound failed at 32 ms with no delay at all (stop 32's CI log).
        if delayMilliseconds > 0 {
            let writeNs = UInt64(delayMilliseconds) * 1_000_000
            let slow = entries.filter { $0.stageNs >= writeNs }.count
            let applied = Int(engine.controlRequests?.applied ?? 0)
            #expect(slow * 2 < applied, "\(slow) of \(entries.count) frames spent a whole write (\(delayMilliseconds) ms) in the stages; \(applied) writes applied")
        }
        // Each frame's metadata carries the values the sim really exposed it with.
        for (i, e) in entries.enumerated() {
            let t = try #require(e.truth)
            #expect(e.exposed.exposureTime.map { Double($0) * 100 } == t.appliedExposure, "frame \(i)")
            #expect(e.exposed.gain.map { Double($0) / 100 } == t.appliedGain, "frame \(i)")
            #expect(e.exposed.focus.map(Double.init) == t.appliedLensPosition, "frame \(i)")
        }
        // And the loop still converges from 4 EV over.
        #expect(abs(entries.last?.error ?? 9) < 1.0 / 6)
    }
}
