import Testing
import Foundation
import Dispatch
@testable import Viewfinder

/// A stage given to sessions as a type, never by name: counts the instances built and the frames
/// seen, and has a cross-field rule in its options.
final class TaggingStage: Stage {
    static let name = "tagging"
    static let summary = "Counts frames; options checked across fields."
    struct Options: StageOptions {
        var every = 1
        var limit = 10
        init() {}
        static var fields: [OptionField<Options>] {
            [.int("every", \.every, range: 1...100, "count every n-th frame"), .int("limit", \.limit, range: 1...1000, "most frames")]
        }
        func validate(stage: String) throws {
            if every > limit { throw ConfigurationError.invalidOption(stage: stage, option: "every", reason: "must not exceed limit (\(limit))") }
        }
    }
    static let built = LockedBox(0)
    static let frames = LockedBox(0)
    let every: Int
    init(options: Options) {
        every = options.every
        TaggingStage.built.withLock { $0 += 1 }
    }
    func process(_ frame: Frame) -> StageVerdict {
        if Int(frame.sequence) % every == 0 { TaggingStage.frames.withLock { $0 += 1 } }
        return .forward
    }
}

/// Another stage type that claims the name `drop_every_other`.
final class ImpostorStage: Stage {
    static let name = "drop_every_other"
    static let summary = "Claims a name that is taken."
    init(options: NoOptions) {}
    func process(_ frame: Frame) -> StageVerdict { .forward }
}

/// Collects a session's events; waits for one.
final class EventLog: Sendable {
    let events = LockedBox<[SessionEvent]>([])
    let changed = DispatchSemaphore(value: 0)
    init(_ session: CaptureSession, also: (@Sendable (SessionEvent) -> Void)? = nil) {
        session.onEvent { [events, changed] e in
            events.withLock { $0.append(e) }
            also?(e)
            changed.signal()
        }
    }
    var descriptions: [String] { events.withLock { $0.map(\.description) } }
    func count(_ d: String) -> Int { descriptions.filter { $0 == d }.count }
    /// Waits up to `seconds` until `predicate` holds.
    func wait(seconds: Double = 10, until predicate: ([String]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !predicate(descriptions) {
            if Date() > deadline { return false }
            _ = changed.wait(timeout: .now() + 0.05)
        }
        return true
    }
}

func patternSession(_ device: String, output: (any CaptureOutput)? = nil) throws -> CaptureSession {
    let session = CaptureSession()
    session.beginConfiguration()
    try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: try PatternSource(deviceString: device))))
    try session.addOutput(output ?? NullConsumer())
    try session.setSessionPreset(.inputPriority)
    try session.commitConfiguration()
    return session
}

@Suite(.serialized) struct TypedSessionTests {
    @Test func typedStagesAreBuiltAfreshOnEachStartWithoutARegistry() throws {
        let session = try patternSession("pattern:width=64,height=32,frames=20")
        TaggingStage.built.withLock { $0 = 0 }
        TaggingStage.frames.withLock { $0 = 0 }
        // The session's registry is empty: the typed spec builds itself.
        #expect(session.registry.names.isEmpty)
        let spec = StageSpec.stage(TaggingStage.self) { $0.every = 2 }
        #expect(spec.name == "tagging" && spec.isTyped && spec.options == ["every": .number(2)])
        #expect(spec.options(of: TaggingStage.self)?.every == 2)
        try session.setStages([spec])
        let builtAtCommit = TaggingStage.built.withLock { $0 }
        for _ in 0..<2 {
            try session.startRunning()
            session.waitUntilFinished()
            session.stopRunning()
        }
        // One instance per start (plus the one validation built at commit).
        #expect(TaggingStage.built.withLock { $0 } == builtAtCommit + 2)
        #expect(TaggingStage.frames.withLock { $0 } == 20)
        #expect(session.stages == [spec])
    }

    @Test func typedOptionsGetTheStagesCrossFieldCheckAtCommit() throws {
        let session = try patternSession("pattern:width=64,height=32,frames=5")
        var o = TaggingStage.Options()
        o.every = 50
        o.limit = 5
        #expect(throws: ConfigurationError.invalidOption(stage: "tagging", option: "every", reason: "must not exceed limit (5)")) {
            try session.setStages([.stage(TaggingStage.self, options: o)])
        }
        #expect(session.stages.isEmpty)
    }

    @Test func typedOptionsAreHeldToTheFieldsRangesAsTheSameOptionsByName() throws {
        let session = try patternSession("pattern:width=64,height=32,frames=5")
        // By name the range refuses 500; set in code it is refused the same, with the same words
        // (a stage may size its tables from the documented range).
        let registry = try StageRegistry([TaggingStage.self])
        #expect(throws: ConfigurationError.invalidOption(stage: "tagging", option: "every", reason: "500 is outside 1...100")) {
            _ = try registry.makeStage(StageSpec(name: "tagging", options: ["every": .number(500), "limit": .number(1000)]))
        }
        #expect(throws: ConfigurationError.invalidOption(stage: "tagging", option: "every", reason: "500 is outside 1...100")) {
            try session.setStages([.stage(TaggingStage.self) { $0.every = 500; $0.limit = 1000 }])
        }
        #expect(throws: ConfigurationError.invalidOption(stage: "tagging", option: "limit", reason: "0 is outside 1...1000")) {
            try session.setStages([.stage(TaggingStage.self) { $0.limit = 0 }])
        }
        #expect(session.stages.isEmpty)
        // An integer beyond what a double holds exactly reads back as itself (a 64-bit seed).
        struct Seeded: OptionTable, Equatable {
            var seed: UInt64 = 0
            static var fields: [OptionField<Seeded>] { [.int("seed", \.seed, "a seed")] }
        }
        var big = Seeded()
        big.seed = UInt64.max - 12
        #expect(throws: Never.self) { try big.checkFields() }
        #expect(try Seeded.decodeTable(big.encoded()) == big)
        // Within the ranges it is made as before.
        try session.setStages([.stage(TaggingStage.self) { $0.every = 100; $0.limit = 1000 }])
        #expect(session.stages.count == 1)
    }

    @Test func typedSpecsEncodeAsTheirNameAndChangedOptions() throws {
        let spec = StageSpec.stage(DelayStage.self) { $0.frames = 7 }
        let data = try JSONEncoder().encode(spec)
        let back = try JSONDecoder().decode(StageSpec.self, from: data)
        #expect(back.name == "delay" && back.options == ["frames": .number(7)] && !back.isTyped)
        // Built by name from what it encoded, it is the same stage.
        let registry = try StageRegistry([DelayStage.self])
        #expect(try registry.makeStage(back).delayFrames == 7)
        #expect(try registry.makeStage(spec).delayFrames == 7)
    }

    @Test func aRegistryRefusesTwoStagesWithOneName() throws {
        #expect(throws: ConfigurationError.duplicateStage("drop_every_other", types: ["DropEveryOther", "ImpostorStage"])) {
            try StageRegistry([DropEveryOther.self, ImpostorStage.self])
        }
        // Merging: the same type twice is fine, another type under a taken name is not.
        let a = try StageRegistry([DropEveryOther.self, DelayStage.self])
        let same = try a.merging(try StageRegistry([DelayStage.self]))
        #expect(same.names == ["delay", "drop_every_other"])
        #expect(throws: ConfigurationError.duplicateStage("drop_every_other", types: ["DropEveryOther", "ImpostorStage"])) {
            try a.merging(try StageRegistry([ImpostorStage.self]))
        }
        // A generated registry cannot throw where it is made: every use of it does.
        let generated = StageRegistry(generated: [DropEveryOther.self, ImpostorStage.self])
        #expect(generated.conflicts.count == 1)
        #expect(throws: ConfigurationError.self) { try generated.type(named: "drop_every_other") }
        #expect(throws: ConfigurationError.self) { try generated.makeStage(StageSpec(name: "drop_every_other")) }
        #expect(throws: ConfigurationError.self) { try a.merging(generated) }
    }
}

@Suite(.serialized) struct SessionEventTests {
    /// A handler that stops the session and reads its configuration from inside an event.
    @Test func aHandlerMayCallBackIntoTheSession() throws {
        let session = try patternSession("pattern:width=64,height=32,paced=true,fps=200")
        let seen = LockedBox<(inputs: Int, running: Bool?)>((0, nil))
        let log = EventLog(session) { [weak session] e in
            guard let session, case .didStartRunning = e else { return }
            seen.withLock { $0.inputs = session.inputs.count; $0.running = session.isRunning }
            _ = session.stages
            session.stopRunning()
        }
        try session.startRunning()
        #expect(log.wait { $0.contains("did stop running") }, "events: \(log.descriptions)")
        #expect(!session.isRunning)
        #expect(seen.withLock { $0.inputs } == 1)
        #expect(log.descriptions == ["did start running", "did stop running"])
    }

    @Test func aHandlerMayStopTheSessionOnARuntimeError() throws {
        let session = CaptureSession()
        try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: FailingSource(after: 5))))
        try session.setSessionPreset(.inputPriority)
        try session.addOutput(NullConsumer())
        let log = EventLog(session) { [weak session] e in
            if case .runtimeError(let error as DeviceError) = e, case .disconnected = error { session?.stopRunning() }
        }
        try session.startRunning()
        #expect(log.wait { $0.contains("did stop running") }, "events: \(log.descriptions)")
        let events = log.events.withLock { $0 }
        // The error keeps its type through the event.
        #expect(events.contains { if case .runtimeError(let e as DeviceError) = $0 { return e == .disconnected(device: "failing") }; return false })
        #expect(events.contains { if case .wasInterrupted(.videoDeviceNotAvailable) = $0 { return true }; return false })
    }

    @Test func didStopRunningWhenTheEngineEndsByItselfExactlyOnce() throws {
        let session = try patternSession("pattern:width=64,height=32,frames=25")
        let log = EventLog(session)
        try session.startRunning()
        // No stopRunning(): the finite source ends the run.
        #expect(log.wait { $0.contains("did stop running") }, "events: \(log.descriptions)")
        #expect(!session.isRunning)
        session.stopRunning()
        #expect(log.descriptions == ["did start running", "did stop running"])
    }

    /// Runs so short (one frame, not paced) that the engine ends while `startRunning` is still
    /// returning: the handlers must still see the start before the stop, each once. CI saw
    /// ["did stop running", "did start running"] once (27 Nov, the test above, under load).
    @Test func aRunThatEndsAtOnceIsStillReportedStartThenStop() throws {
        var outOfOrder = 0
        for _ in 0..<200 {
            let session = try patternSession("pattern:width=16,height=16,frames=1")
            let log = EventLog(session)
            try session.startRunning()
            #expect(log.wait { $0.contains("did stop running") }, "events: \(log.descriptions)")
            session.stopRunning()
            if log.descriptions != ["did start running", "did stop running"] { outOfOrder += 1 }
        }
        #expect(outOfOrder == 0, "\(outOfOrder) of 200 runs reported out of order")
    }

    /// A frame delegate reads the session while another thread stops it.
    @Test func outputDelegatesMayReadTheSessionWhileItStops() throws {
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        let session = try patternSession("pattern:width=64,height=32,paced=true,fps=500", output: out)
        final class Reader: VideoDataOutputDelegate, @unchecked Sendable {
            weak var session: CaptureSession?
            let reads = LockedBox(0)
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                guard let s = session else { return }
                _ = s.inputs; _ = s.outputs; _ = s.sessionPreset; _ = s.connections
                sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + 2_000_000)
                reads.withLock { $0 += 1 }
            }
        }
        let reader = Reader()
        reader.session = session
        out.setDelegate(reader, queue: nil)
        try session.startRunning()
        let deadline = Date().addingTimeInterval(10)
        while reader.reads.withLock({ $0 }) < 10 && Date() < deadline { usleep(2000) }
        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async { session.stopRunning(); stopped.signal() }
        #expect(stopped.wait(timeout: .now() + 10) == .success)
        #expect(reader.reads.withLock { $0 } >= 10)
    }
}

/// Delivers `after` frames, then fails as an unplugged camera does.
final class FailingSource: CaptureSource, @unchecked Sendable {
    let info = DeviceInfo(id: "failing", name: "f", driver: "t", bus: "t", formats: PatternSource().info.formats, controls: [], isLive: true)
    var isLive: Bool { true }
    var controls: (any DeviceControlling)? { nil }
    var activeConfiguration: StreamConfiguration? { StreamConfiguration(format: FrameFormat(.grey, width: 16, height: 16), interval: FrameInterval(fps: 30), bufferCount: 4) }
    let pool = FramePool(format: FrameFormat(.grey, width: 16, height: 16), count: 8)
    let after: UInt64
    var n: UInt64 = 0
    init(after: UInt64) { self.after = after }
    func configure(_ r: StreamRequest) throws -> StreamConfiguration { activeConfiguration! }
    func start() throws { n = 0 }
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        n += 1
        if n > after { throw DeviceError.disconnected(device: "failing") }
        let f = pool.acquire()!; f.sequence = n; return .frame(f)
    }
    func stop() {}
}

@Suite struct DeviceOptionTableTests {
    @Test func patternOptionsAreRefusedWithTheOptionAndTheReason() {
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:width=63", option: "width", reason: "YUYV has chroma at half horizontal resolution: expected an even width, got '63'")) {
            try PatternSource(deviceString: "pattern:width=63")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:height=31,format=nv12", option: "height", reason: "NV12 has chroma at half vertical resolution: expected an even height, got '31'")) {
            try PatternSource(deviceString: "pattern:height=31,format=nv12")
        }
        // Odd sizes are fine where there is no chroma subsampling.
        #expect(throws: Never.self) { try PatternSource(deviceString: "pattern:width=63,height=31,format=grey") }
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:paced=maybe", option: "paced", reason: "expected true or false, got 'maybe'")) {
            try PatternSource(deviceString: "pattern:paced=maybe")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:fps=5,fps=6", option: "fps", reason: "given twice")) {
            try PatternSource(deviceString: "pattern:fps=5,fps=6")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:colour=red", option: "colour", reason: "unknown option (known: width, height, format, fps, paced, frames, copy, buffers)")) {
            try PatternSource(deviceString: "pattern:colour=red")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:format=mjpeg", option: "format", reason: "expected one of yuyv, uyvy, nv12, i420, yuv422p, grey, rgb24, bgr24, sbggr8, sgbrg8, sgrbg8, srggb8, bgra, got 'mjpeg'")) {
            try PatternSource(deviceString: "pattern:format=mjpeg")
        }
    }

    @Test func valuesParseFromTextAndJSONAlike() throws {
        let p = try PatternSource.Options.decode(keyValues: "frames=30,buffers=4,fps=12.5,format=i420,paced=true", device: "pattern")
        #expect(p.frames == 30 && p.poolSize == 4 && p.fps == 12.5 && p.format == .i420 && p.paced)
        let j = try PatternSource.Options.decode(["frames": .number(30), "buffers": .string("4"), "fps": .number(12.5), "format": .string("yu12"), "paced": .bool(true)], device: "pattern")
        #expect(j == p)
        // What a table encodes, it reads back.
        #expect(try PatternSource.Options.decode(p.encoded(), device: "pattern") == p)
        #expect(p.encoded() == ["frames": .number(30), "buffers": .number(4), "fps": .number(12.5), "format": .string("i420"), "paced": .bool(true)])
    }

    @Test func everyDeviceOptionIsDocumented() {
        let kinds = DeviceDirectory(providers: [PatternProvider()]).kinds
        #expect(kinds.map(\.syntax) == ["pattern[:key=value,…]"])
        #expect(kinds[0].options.map(\.name) == PatternSource.Options.fields.map(\.name))
        for o in kinds[0].options { #expect(!o.summary.isEmpty && !o.defaultValue.isEmpty, "\(o.name)") }
        #expect(kinds[0].options.first { $0.name == "width" } == OptionDocumentation(name: "width", type: "integer", defaultValue: "1920", range: "16...7680", unit: "pixels", summary: "Frame width (even for 4:2:2 and 4:2:0 formats)"))
    }
}
