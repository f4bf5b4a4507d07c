import Testing
import Foundation
import Synchronization
@testable import Viewfinder

/// Test stages, defined here and used by name through a registry built in code.
final class DropEveryOther: Stage {
    static let name = "drop_every_other"
    static let summary = "Drops odd sequence numbers."
    struct Options: StageOptions {
        var phase = 1
        init() {}
        static var fields: [OptionField<Options>] { [.int("phase", \.phase, range: 0...1, "which parity to drop")] }
    }
    let phase: UInt64
    init(options: Options) { phase = UInt64(options.phase) }
    func process(_ frame: Frame) -> StageVerdict { frame.sequence % 2 == phase ? .drop(.stage) : .forward }
}

/// Holds frames for `delay` frames, then hands them on in order (a look-ahead stage).
final class DelayStage: Stage {
    static let name = "delay"
    static let summary = "Delays frames."
    struct Options: StageOptions {
        var frames = 3
        init() {}
        static var fields: [OptionField<Options>] { [.int("frames", \.frames, range: 0...30, unit: "frames", "look-ahead")] }
    }
    let delay: Int
    var held: [Frame] = []
    var finishing = false
    init(options: Options) { delay = options.frames; held.reserveCapacity(options.frames + 1) }
    var delayFrames: Int { delay }
    func process(_ frame: Frame) -> StageVerdict { held.append(frame); return .hold }
    func nextReady() -> Frame? {
        if held.count > delay || (finishing && !held.isEmpty) { return held.removeFirst() }
        return nil
    }
    func finish() { finishing = true }
}

final class CollectingConsumer: FrameConsumer, @unchecked Sendable {
    let consumerName: String
    let delayNs: UInt64
    let policy: OverflowPolicy
    let discardLate: Bool
    private let box = LockedBox<[UInt64]>([])
    private let finishedWith = LockedBox<String?>(nil)
    init(name: String = "collect", delayNs: UInt64 = 0, policy: OverflowPolicy = .dropOldest, discardLate: Bool = false) {
        consumerName = name; self.delayNs = delayNs; self.policy = policy; self.discardLate = discardLate
    }
    var overflowPolicy: OverflowPolicy { policy }
    var discardsLateFrames: Bool { discardLate }
    func consume(_ frame: Frame) {
        box.withLock { $0.append(frame.sequence) }
        if delayNs > 0 { sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + delayNs) }
    }
    func finish(error: (any Error)?) { finishedWith.withLock { $0 = error.map { "\($0)" } ?? "ok" } }
    var sequences: [UInt64] { box.withLock { $0 } }
    var finishReason: String? { finishedWith.withLock { $0 } }
}

@Suite struct EngineTests {
    func source(_ s: String) throws -> PatternSource { try PatternSource(deviceString: s) }

    func run(_ src: PatternSource, stages: [any Stage] = [], consumers: [any FrameConsumer], options: EngineOptions = EngineOptions()) throws -> CaptureEngine {
        let cfg = try src.configure(StreamRequest(pixelFormat: src.options.format, width: src.options.width, height: src.options.height, fps: src.options.fps, bufferCount: src.options.poolSize))
        let e = CaptureEngine(source: src, configuration: cfg, stages: stages, consumers: consumers, options: options)
        try e.start()
        #expect(e.waitUntilFinished(timeoutSeconds: 30))
        return e
    }

    @Test func nonLiveSourceLosesNothingToASlowConsumer() throws {
        let src = try source("pattern:width=64,height=32,frames=200,buffers=8")
        let slow = CollectingConsumer(delayNs: 200_000)
        let e = try run(src, consumers: [slow])
        #expect(e.statistics.captured == 200)
        #expect(e.statistics.delivered == 200)
        #expect(e.statistics.drops.total == 0)
        #expect(slow.sequences == Array(0..<200))
        #expect(slow.finishReason == "ok")
    }

    @Test func liveSourceNeverStallsAndTheBooksBalance() throws {
        // 500 fps paced source, a consumer 2x slower than capture.
        let src = try source("pattern:width=64,height=32,fps=500,paced=true,frames=400,buffers=16")
        let slow = CollectingConsumer(delayNs: 4_000_000)
        let fast = CollectingConsumer(name: "fast")
        let e = try run(src, consumers: [slow, fast])
        let s = e.statistics
        #expect(s.captured == 400)
        #expect(s.captured == s.delivered + s.drops.total)
        // The fast consumer is not held back by the slow one.
        #expect(fast.sequences.count + Int(s.consumers[1].drops.total) == Int(s.delivered))
        #expect(fast.sequences.count > slow.sequences.count)
        // The slow one got what it could and every other frame is counted as dropped on its path.
        #expect(UInt64(slow.sequences.count) + s.consumers[0].drops.total == s.delivered)
        #expect(slow.sequences == slow.sequences.sorted())
        // Capture kept pace: 400 frames at 500 fps take about 0.8 s, not 1.6 s.
        #expect(s.elapsedSeconds < 1.5)
    }

    /// `--duration` on a live source is the camera's time from its first frame: a device's
    /// start-up does not use it up, and 0.5 s at 30 fps is 15 frames (the 29 Nov sweep got 91
    /// frames from `dump --duration 3`: wall time from the start, a frame at each end).
    @Test func aLiveSourcesDurationIsTheCamerasTimeFromItsFirstFrame() throws {
        for fps in [30.0, 25.0] {
            let src = try source("pattern:width=64,height=32,fps=\(Int(fps)),paced=true,buffers=8")
            let c = CollectingConsumer()
            let e = try run(src, consumers: [c], options: EngineOptions(durationSeconds: 0.5))
            let s = e.statistics
            #expect(s.captured == UInt64(fps / 2), "fps \(fps): \(s.captured) frames in 0.5 s")
            #expect(s.captured == s.delivered + s.drops.total)
            #expect(UInt64(c.sequences.count) == s.delivered)
        }
        // Not live: seconds of wall time, as many frames as fit.
        let unpaced = try source("pattern:width=64,height=32,fps=30,paced=false")
        let e = try run(unpaced, consumers: [CollectingConsumer()], options: EngineOptions(durationSeconds: 0.3))
        #expect(e.statistics.captured > 30, "an unpaced pattern ran \(e.statistics.captured) frames in 0.3 s")
    }

    @Test func stageDropsAreCountedWithTheirReason() throws {
        let src = try source("pattern:width=64,height=32,frames=100")
        let c = CollectingConsumer()
        let e = try run(src, stages: [DropEveryOther(options: .init())], consumers: [c])
        #expect(e.statistics.drops[.stage] == 50)
        #expect(e.statistics.delivered == 50)
        #expect(c.sequences == stride(from: 0, to: 100, by: 2).map(UInt64.init))
    }

    @Test func lookAheadStageKeepsOrderAndFlushesAtTheEnd() throws {
        let src = try source("pattern:width=64,height=32,frames=50")
        let c = CollectingConsumer()
        let e = try run(src, stages: [DelayStage(options: .init()), DropEveryOther(options: .init())], consumers: [c])
        #expect(e.statistics.delivered == 25)
        #expect(c.sequences == stride(from: 0, to: 50, by: 2).map(UInt64.init))
    }

    @Test func discardingLateFramesKeepsTheNewest() throws {
        let src = try source("pattern:width=64,height=32,fps=400,paced=true,frames=200")
        let c = CollectingConsumer(delayNs: 10_000_000, policy: .dropOldest, discardLate: true)
        let e = try run(src, consumers: [c])
        let cs = e.statistics.consumers[0]
        #expect(cs.drops[.late] > 0)
        #expect(UInt64(c.sequences.count) + cs.drops.total == e.statistics.delivered)
        #expect(c.sequences.last == 199)
    }

    @Test func poolFramesAllComeBack() throws {
        let src = try source("pattern:width=64,height=32,frames=300,buffers=6")
        let e = try run(src, stages: [DelayStage(options: .init())], consumers: [CollectingConsumer(), CollectingConsumer(name: "b", delayNs: 100_000)])
        #expect(e.statistics.delivered == 300)
    }
}

@Suite struct StageOptionTests {
    let registry: StageRegistry
    init() throws { registry = try StageRegistry([DropEveryOther.self, DelayStage.self]) }

    @Test func unknownStageNamesItAndTheKnownOnes() {
        #expect(throws: ConfigurationError.unknownStage("blur", known: ["delay", "drop_every_other"])) {
            try registry.makeStage(StageSpec(name: "blur"))
        }
    }

    @Test func unknownOptionNamesIt() {
        #expect(throws: ConfigurationError.unknownOption(stage: "delay", option: "frame", known: ["frames"])) {
            try registry.makeStage(StageSpec(name: "delay", options: ["frame": .number(3)]))
        }
    }

    @Test func outOfRangeAndWrongTypeAreRejected() throws {
        #expect(throws: ConfigurationError.self) { try registry.makeStage(StageSpec(name: "delay", options: ["frames": .number(31)])) }
        #expect(throws: ConfigurationError.self) { try registry.makeStage(StageSpec(name: "delay", options: ["frames": .string("many")])) }
        #expect(throws: ConfigurationError.self) { try registry.makeStage(StageSpec(name: "delay", options: ["frames": .number(2.5)])) }
        let s = try registry.makeStage(StageSpec(name: "delay", options: ["frames": .number(7)]))
        #expect(s.delayFrames == 7)
    }

    @Test func commandLineListParses() throws {
        let specs = try StageSpec.parseList("delay:frames=4,drop_every_other:phase=0")
        #expect(specs == [StageSpec(name: "delay", options: ["frames": .number(4)]), StageSpec(name: "drop_every_other", options: ["phase": .number(0)])])
        #expect(throws: ConfigurationError.self) { try StageSpec.parseList("delay:frames") }
    }

    @Test func defaultsAreDocumented() {
        let doc = DelayStage.optionDocumentation
        #expect(doc == [OptionDocumentation(name: "frames", type: "integer", defaultValue: "3", range: "0...30", unit: "frames", summary: "look-ahead")])
    }

    @Test func pipelineFilesAreValidated() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vf-\(UUID())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func write(_ s: String) -> String { let p = dir.appendingPathComponent("\(UUID()).json").path; _ = FileManager.default.createFile(atPath: p, contents: Data(s.utf8)); return p }
        let good = try PipelineConfiguration.load(path: write(#"{"device":"sim","stages":[{"name":"delay","options":{"frames":2}},{"name":"drop_every_other","enabled":false}]}"#))
        #expect(good.device == "sim")
        #expect(good.stages.count == 2 && good.stages[1].enabled == false)
        for bad in [#"{"stages":[{"name":"delay"}"#, #"[1,2]"#, #"{"stagez":[]}"#, #"{"stages":[{"options":{}}]}"#, #"{"stages":[{"name":"delay","option":{}}]}"#, #"{"stages":"delay"}"#] {
            let p = write(bad)
            #expect(throws: ConfigurationError.self, "\(bad)") { try PipelineConfiguration.load(path: p) }
        }
        #expect(throws: ConfigurationError.invalidConfigFile(path: "/nonexistent.json", reason: "cannot read the file")) { try PipelineConfiguration.load(path: "/nonexistent.json") }
    }
}

extension EngineTests {
    /// The frames a look-ahead stage still holds when a live source ends come out in a burst; the
    /// outputs take every one, waiting for room (2 Dec: `run --stages stabilise:lookahead=30
    /// --output f.y4m` lost 27 of 60 frames at the file's ring, and said "dropped 0").
    @Test func theLookAheadsLastFramesReachEveryOutputOfALiveSource() throws {
        let src = try source("pattern:width=64,height=32,frames=60,buffers=48,fps=120,paced=true")
        #expect(src.isLive)
        var o = DelayStage.Options(); o.frames = 30
        let slow = CollectingConsumer(name: "slow", delayNs: 2_000_000)
        let e = try run(src, stages: [DelayStage(options: o)], consumers: [slow])
        #expect(e.statistics.captured == 60)
        #expect(slow.sequences == Array(0..<60), "\(slow.sequences.count) of 60 frames: \(slow.sequences.suffix(8))")
        #expect(e.statistics.consumers[0].drops.total == 0)
    }

    /// The same for an output with a buffer budget (a movie, a dump): the burst goes to it
    /// directly, not through its backlog's copies, which a small budget runs out of (2 Dec
    /// review: dropped as storage_backlog).
    @Test func theLookAheadsLastFramesReachAnOutputWithABufferBudget() throws {
        final class Budgeted: FrameConsumer, @unchecked Sendable {
            let consumerName = "budgeted"
            let seen = LockedBox<[UInt64]>([])
            var bufferBudget: BufferBudget? { BufferBudget(seconds: 0.05) }
            func consume(_ frame: Frame) {
                seen.withLock { $0.append(frame.sequence) }
                sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + 2_000_000)
            }
        }
        let src = try source("pattern:width=64,height=32,frames=60,buffers=48,fps=120,paced=true")
        var o = DelayStage.Options(); o.frames = 30
        let out = Budgeted()
        let e = try run(src, stages: [DelayStage(options: o)], consumers: [out])
        #expect(out.seen.withLock { $0 } == Array(0..<60), "\(out.seen.withLock { $0 }.count) of 60")
        #expect(e.statistics.consumers[0].drops.total == 0)
    }
}

/// A live GREY camera that delivers frames from 0, loses `lost` from `lossAt` on (reported once,
/// as a driver gap) and ends at `end`. Not paced by the clock, its stamps say the time (one
/// interval apart); paced, it delivers a frame every interval and stamps it with the clock.
final class LosingSource: CaptureSource, @unchecked Sendable {
    let info: DeviceInfo
    var isLive: Bool { true }
    var controls: (any DeviceControlling)? { nil }
    var activeConfiguration: StreamConfiguration?
    private let fps: Double, lossAt: UInt64, lost: UInt64, end: UInt64, pacedByClock: Bool
    private var next: UInt64 = 0
    private var pool: FramePool?

    init(fps: Double, lossAt: UInt64, lost: UInt64, end: UInt64, pacedByClock: Bool) {
        (self.fps, self.lossAt, self.lost, self.end, self.pacedByClock) = (fps, lossAt, lost, end, pacedByClock)
        info = DeviceInfo(id: "losing", name: "Losing", driver: "test", bus: "test",
                          formats: [FormatDescription(pixelFormat: .grey, fourcc: PixelFormat.grey.fourcc, description: "GREY", compressed: false, sizes: [.discrete(width: 16, height: 16, intervals: [FrameInterval(fps: fps)])])],
                          controls: [], isLive: true)
    }
    func configure(_ r: StreamRequest) throws -> StreamConfiguration {
        let c = StreamConfiguration(format: FrameFormat(.grey, width: 16, height: 16), interval: FrameInterval(fps: fps), bufferCount: 8)
        activeConfiguration = c
        return c
    }
    func start() throws { pool = FramePool(format: activeConfiguration!.format, count: 8) }
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        if next == lossAt { next += lost; return .lost(.driverGap, count: Int(lost)) }
        guard next < end else { return .endOfStream }
        if pacedByClock && next > 0 { usleep(UInt32(1e6 / fps)) }
        guard let f = pool?.acquire(timeoutNanoseconds: 1_000_000_000) else { return .timeout }
        f.sequence = next
        let stamp = pacedByClock ? monotonicNanoseconds() : 1_000_000_000 + next * UInt64(1e9 / fps)
        f.timestamp = Timestamp(nanoseconds: stamp, clock: .monotonic)
        f.receiveTime = pacedByClock ? stamp : monotonicNanoseconds()
        f.bytesUsed = 256
        next += 1
        return .frame(f)
    }
    func stop() {}
}

extension EngineTests {
    /// Frames a camera loses past the duration's end are not the run's (2 Dec: a 3 s run at 30 fps
    /// whose camera lost its last frames counted 92 captured, 49 of them lost).
    @Test func framesLostPastTheDurationAreNotCaptured() throws {
        // Frames 0…79, 80…94 lost, then 95…99.
        let src = LosingSource(fps: 30, lossAt: 80, lost: 15, end: 100, pacedByClock: false)
        let cfg = try src.configure(StreamRequest(pixelFormat: .grey, width: 16, height: 16, fps: 30))
        let sink = CollectingConsumer(policy: .wait)
        let e = CaptureEngine(source: src, configuration: cfg, stages: [], consumers: [sink], options: EngineOptions(durationSeconds: 3))
        try e.start()
        #expect(e.waitUntilFinished(timeoutSeconds: 30))
        #expect(e.statistics.captured == 90, "captured \(e.statistics.captured)")
        #expect(e.statistics.drops[.driverGap] == 10)
        #expect(sink.sequences == Array(0..<80))
    }
}

extension EngineTests {
    /// The camera's rate counts the frames between the first and the last that arrived: frames
    /// lost after the last are outside the span they are measured over (2 Dec, third session,
    /// sweep: a camera at 30 fps that lost its last two frames of a 1 s run read 32.8 fps). Frames
    /// come at most every 10 ms here (sleeps only lengthen), so no true rate is above 100 fps; the
    /// lost ten counted in would read about 134.
    @Test func framesLostAfterTheLastArrivalDoNotRaiseTheRate() throws {
        // Frames 0…29 every 10 ms, then 30…39 lost.
        let src = LosingSource(fps: 100, lossAt: 30, lost: 10, end: 40, pacedByClock: true)
        let cfg = try src.configure(StreamRequest(pixelFormat: .grey, width: 16, height: 16, fps: 100))
        let sink = CollectingConsumer(policy: .wait)
        let e = CaptureEngine(source: src, configuration: cfg, stages: [], consumers: [sink], options: EngineOptions())
        try e.start()
        #expect(e.waitUntilFinished(timeoutSeconds: 30))
        #expect(e.statistics.captured == 40)
        #expect(e.statistics.capturedFps > 20 && e.statistics.capturedFps <= 101, "\(e.statistics.capturedFps) fps")
        // Every frame that arrived was delivered: the delivered rate is the camera's.
        #expect(sink.sequences.count == 30)
        #expect(abs(e.statistics.deliveredFps - e.statistics.capturedFps) < 0.01, "\(e.statistics.deliveredFps) delivered")
    }
}
