import Testing
import Foundation
@testable import Viewfinder

/// A consumer the engine calls on the stage thread: records each call's thread and what it got.
final class StageThreadRecorder: FrameConsumer, @unchecked Sendable {
    let consumerName: String
    let failStart: Bool
    var consumesOnStageThread: Bool { true }
    var wantsDropNotices: Bool { true }
    private struct Log { var sequences: [UInt64] = []; var threads: Set<String> = []; var started = 0; var finished: String?; var dropped: UInt64 = 0 }
    private let log = LockedBox(Log())
    init(name: String = "inline", failStart: Bool = false) { consumerName = name; self.failStart = failStart }
    private func note(_ body: (inout Log) -> Void) {
        let name = Thread.current.name ?? "?"
        log.withLock { body(&$0); $0.threads.insert(name) }
    }
    func start(configuration: StreamConfiguration) throws {
        note { $0.started += 1 }
        if failStart { throw EngineTestError.refused }
    }
    func consume(_ frame: Frame) {
        note { $0.sequences.append(frame.sequence) }
    }
    func didDrop(sequence: UInt64, count: UInt64, reason: DropReason) { note { $0.dropped += count } }
    func finish(error: (any Error)?) { note { $0.finished = error.map { "\($0)" } ?? "ok" } }
    var sequences: [UInt64] { log.withLock { $0.sequences } }
    var threads: Set<String> { log.withLock { $0.threads } }
    var started: Int { log.withLock { $0.started } }
    var finished: String? { log.withLock { $0.finished } }
    var dropped: UInt64 { log.withLock { $0.dropped } }
}

enum EngineTestError: Error { case refused }

@Suite struct StageThreadConsumerTests {
    func run(_ s: String, stages: [any Stage] = [], consumers: [any FrameConsumer]) throws -> CaptureEngine {
        let src = try PatternSource(deviceString: s)
        let cfg = try src.configure(StreamRequest(pixelFormat: src.options.format, width: src.options.width, height: src.options.height, fps: src.options.fps, bufferCount: src.options.poolSize))
        let e = CaptureEngine(source: src, configuration: cfg, stages: stages, consumers: consumers)
        try e.start()
        #expect(e.waitUntilFinished(timeoutSeconds: 30))
        return e
    }

    @Test func everyFrameInOrderOnTheStageThreadBesideAThreadedConsumer() throws {
        let inline = StageThreadRecorder()
        let threaded = CollectingConsumer(name: "threaded")
        let e = try run("pattern:width=64,height=32,frames=300", consumers: [inline, threaded])
        #expect(inline.sequences == Array(0..<300))
        #expect(threaded.sequences == Array(0..<300))
        // Every call, start and finish included, came from the stage thread.
        #expect(inline.threads == ["vf-stages"])
        #expect(inline.started == 1)
        #expect(inline.finished == "ok")
        let s = e.statistics
        #expect(s.consumers[0].consumed == 300)
        #expect(s.consumers[0].drops.total == 0)
        #expect(s.consumers[1].consumed == 300)
        #expect(s.captured == s.delivered + s.drops.total)
    }

    @Test func aRunWithOnlyStageThreadConsumersFinishes() throws {
        let a = StageThreadRecorder(name: "a"), b = StageThreadRecorder(name: "b")
        let e = try run("pattern:width=64,height=32,frames=50", consumers: [a, b])
        #expect(a.sequences == Array(0..<50))
        #expect(b.sequences == Array(0..<50))
        #expect(a.finished == "ok" && b.finished == "ok")
        #expect(e.statistics.consumers.map(\.consumed) == [50, 50])
    }

    @Test func stageDropsReachItAsNotices() throws {
        let inline = StageThreadRecorder()
        let e = try run("pattern:width=64,height=32,frames=100", stages: [DropEveryOther(options: .init())], consumers: [inline])
        #expect(inline.sequences == stride(from: 0, to: 100, by: 2).map(UInt64.init))
        #expect(inline.dropped == 50)
        #expect(e.statistics.drops[.stage] == 50)
    }

    @Test func aConsumerThatFailsToStartHasItsFramesCountedAndTheOthersGoOn() throws {
        let broken = StageThreadRecorder(name: "broken", failStart: true)
        let threaded = CollectingConsumer(name: "threaded")
        let e = try run("pattern:width=64,height=32,frames=40", consumers: [broken, threaded])
        #expect(broken.sequences.isEmpty)
        #expect(e.statistics.consumers[0].drops[.stage] == 40)
        #expect(threaded.sequences == Array(0..<40))
        #expect(e.runtimeError is EngineTestError)
        #expect(broken.finished != nil)
    }

    @Test func itHoldsNoRingSoTheSourceNeedsNoBuffersForIt() {
        let options = EngineOptions()
        let without = CaptureEngine.buffersNeeded(stages: [], consumers: [CollectingConsumer()], options: options, limit: .max)
        let with = CaptureEngine.buffersNeeded(stages: [], consumers: [CollectingConsumer(), StageThreadRecorder()], options: options, limit: .max)
        #expect(with == without)
    }
}
