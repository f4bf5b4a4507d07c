import Testing
@testable import Viewfinder

// What user code can do with frames. It cannot release one: `retain`, `release`, `referenceCount`,
// `FramePool.acquire` and `FrameRecycler` are `package`, so outside this package
// `frame.release()` does not compile ("'release' is inaccessible due to 'package' protection
// level"); scripts/check-frame-api.sh type-checks such a file against the built modules and
// expects exactly that. These tests cover the ways it can hold frames instead.

/// Holds every frame and never hands one back.
private final class Hoarder: Stage {
    static let name = "hoarder"
    static let summary = "Holds every frame forever."
    var seen: [Frame] = []
    init(options: NoOptions) {}
    func process(_ frame: Frame) -> StageVerdict { seen.append(frame); return .hold }
}

/// Holds one frame, then hands it back twice.
private final class DoubleReturner: Stage {
    static let name = "double-returner"
    static let summary = "Hands a held frame back twice."
    var last: Frame?
    var returns = 0
    init(options: NoOptions) {}
    var delayFrames: Int { 1 }
    func process(_ frame: Frame) -> StageVerdict { last = frame; returns = 2; return .hold }
    func nextReady() -> Frame? {
        guard returns > 0 else { return nil }
        returns -= 1
        return last
    }
}

@Suite struct FrameOwnershipTests {
    let format = FrameFormat(.grey, width: 32, height: 16)

    @Test func aStageThatHoldsFramesForeverHasThemReclaimedAndCounted() throws {
        let pool = FramePool(format: format, count: 24)
        let drops = DropCounters()
        let stage = Hoarder(options: NoOptions())
        let chain = StageChain(stages: [stage], drops: drops)
        var delivered = 0
        try chain.prepare(format: format, context: StageContext(format: format)) { _ in delivered += 1 }
        // 40 frames through a pool of 24: the stage may hold its delay (0) plus the slack (16);
        // beyond that the oldest hold is reclaimed, so the pool never runs dry.
        for i in 0..<40 {
            let f = try #require(pool.acquire(), "the pool ran dry at frame \(i): a hold leaked")
            f.sequence = UInt64(i)
            chain.run(f)
        }
        #expect(chain.heldFrames(stage: 0) == StageChain.holdSlack)
        #expect(chain.reclaimed[0] == UInt64(40 - StageChain.holdSlack))
        #expect(pool.available == 24 - StageChain.holdSlack)
        chain.finish()
        // At the end of the stream everything still held comes back, counted as dropped.
        #expect(pool.available == 24)
        #expect(chain.reclaimed[0] == 40)
        #expect(drops[.stage] == 40)
        #expect(delivered == 0)
        #expect(stage.seen.allSatisfy { $0.referenceCount == 0 })
    }

    @Test func aFrameHandedBackTwiceGoesOnOnceAndIsReleasedOnce() throws {
        let pool = FramePool(format: format, count: 4)
        let chain = StageChain(stages: [DoubleReturner(options: NoOptions())], drops: DropCounters())
        var delivered: [UInt64] = []
        try chain.prepare(format: format, context: StageContext(format: format)) { delivered.append($0.sequence) }
        let f = try #require(pool.acquire())
        f.sequence = 7
        chain.run(f)
        #expect(delivered == [7])
        #expect(chain.misreturned[0] == 1)
        #expect(f.referenceCount == 0)
        #expect(pool.available == 4)
        chain.finish()
        #expect(pool.available == 4)
        #expect(chain.reclaimed[0] == 0)
    }

    @Test func anEngineWithAHoardingStageBalancesItsBooksAndGetsEveryBufferBack() throws {
        let src = try PatternSource(deviceString: "pattern:width=32,height=16,format=grey,frames=60,buffers=20")
        let cfg = try src.configure(StreamRequest(pixelFormat: .grey, width: 32, height: 16, bufferCount: 20))
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [Hoarder(options: NoOptions())], consumers: [NullConsumer()])
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 20))
        let s = engine.statistics
        #expect(s.captured == 60)
        #expect(s.delivered == 0)
        #expect(s.drops[.stage] == 60)
        #expect(engine.chain.reclaimed[0] == 60)
        #expect(s.captured == s.delivered + s.drops.total)
    }

    @Test func aPoolNobodyHoldsIsFreedWithItsFramesAndAFrameThatOutlivesItIsJustFreed() throws {
        // Frames point back at their pool weakly: with a strong reference both ways every pool
        // of a finished session stayed alive with all its pictures (~145 MB per 1080p session).
        weak var weakPool: FramePool?
        weak var weakFreeFrame: Frame?
        var held: Frame?
        do {
            let pool = FramePool(format: format, count: 3)
            weakPool = pool
            held = try #require(pool.acquire())
            let other = try #require(pool.acquire())
            other.release()
            weakFreeFrame = other
            #expect(pool.available == 2)
        }
        #expect(weakPool == nil)
        #expect(weakFreeFrame == nil)
        let f = try #require(held)
        #expect(f.isRecycled)
        #expect(f.recycler == nil)
        // Still usable and counted as before; its last release goes nowhere instead of into a
        // freed pool.
        f.bytes[0] = 7
        #expect(f.retainIfHeld())
        f.release()
        f.release()
        #expect(f.referenceCount == 0)
        held = nil
    }

    @Test func aPoolFramesPagesBecomeResidentOnlyWhenFilledAndAreCountedWithTheMappings() throws {
        // What the soak separates from a leak: a large frame is its own mapping, resident only
        // once written, and counted in the mapped and resident totals until it is freed.
        let big = FrameFormat(.grey, width: 1024, height: 1024)   // 1 MiB: over the mapping threshold
        let pool = FramePool(format: big, count: 2)
        let f = try #require(pool.acquire())
        defer { f.release() }
        #expect(f.residentMappedBytes == 0)
        for i in stride(from: 0, to: 512 * 1024, by: 4096) { f.bytes[i] = 1 }
        // At least what was written (a transparent huge page may bring in more), never past the frame.
        #expect(f.residentMappedBytes >= 512 * 1024 && f.residentMappedBytes <= f.capacity)
        #expect(Frame.mappedFrameBytes >= 2 * 1024 * 1024)
        #expect(Frame.residentFrameBytes() >= 512 * 1024)
        // Small frames live on the heap: no mapping to count.
        let small = try #require(FramePool(format: format, count: 1).acquire())
        #expect(small.residentMappedBytes == 0)
        small.release()
    }

    @Test func aLeaseGivesItsFrameBackExactlyOnceWhenItEnds() throws {
        let pool = FramePool(format: format, count: 2)
        do {
            guard let lease = pool.lease() else { Issue.record("no frame"); return }
            #expect(pool.available == 1)
            lease.frame.sequence = 3
            let shared = lease.share()
            #expect(lease.frame.referenceCount == 2)
            _ = shared
        }
        #expect(pool.available == 2)
        // A sample buffer outlives the lease it was shared from.
        var kept: SampleBuffer?
        do {
            guard let lease = pool.lease() else { Issue.record("no frame"); return }
            kept = lease.share()
        }
        #expect(pool.available == 1)
        #expect(kept?.frame.referenceCount == 1)
        kept = nil
        #expect(pool.available == 2)
    }

    @Test func aSampleBufferCannotBringBackAFrameThatWentBackToItsPool() throws {
        let pool = FramePool(format: format, count: 1)
        let f: Frame
        do {
            guard let lease = pool.lease() else { Issue.record("no frame"); return }
            f = lease.frame
        }
        #expect(pool.available == 1)
        // A stale reference: the frame is free, so it cannot be held again (no double release later).
        #expect(SampleBuffer(retaining: f) == nil)
        #expect(pool.available == 1)
        // A frame of the caller's own (no pool) can always be kept.
        let own = Frame(capacity: format.maxByteCount, format: format)
        let b = try #require(SampleBuffer(retaining: own))
        #expect(b.frame === own)
    }

    @Test func delayedControlsGiveEachFrameTheValuesItWasExposedWith() {
        let d = DelayedControls(latency: 2)
        d.reset(ExposedControls(exposureTime: 100, gain: 100, focus: 0))
        #expect(d.values(forFrame: 10) == ExposedControls(exposureTime: 100, gain: 100, focus: 0))
        // Written after frame 10 was handed out: lands on frame 12.
        d.record(.exposureTime, 200, afterFrame: 10)
        d.record(.focusAbsolute, 50, afterFrame: 10)
        #expect(d.values(forFrame: 11).exposureTime == 100)
        #expect(d.values(forFrame: 12) == ExposedControls(exposureTime: 200, gain: 100, focus: 50))
        // Two writes before either lands: each takes effect on its own frame.
        d.record(.gain, 300, afterFrame: 12)
        d.record(.gain, 400, afterFrame: 13)
        #expect(d.values(forFrame: 14).gain == 300)
        #expect(d.values(forFrame: 15).gain == 400)
        // Controls it does not track are ignored.
        d.record(.brightness, 5, afterFrame: 15)
        #expect(d.values(forFrame: 20) == ExposedControls(exposureTime: 200, gain: 400, focus: 50))
    }

    @Test func theControlQueueKeepsTheLatestValueOfEachControlAndCountsWhatDoesNotFit() {
        let q = ControlRequestQueue(capacity: 4)
        for v in 1...4 { #expect(q.request(.exposureTime, to: Int64(v))) }
        #expect(!q.request(.gain, to: 9))
        #expect(q.dropped == 1)
        final class Recorder: DeviceControlling, @unchecked Sendable {
            var writes: [(StandardControl, Int64)] = []
            var descriptors: [ControlDescriptor] { [] }
            func value(of name: String) throws -> Int64 { 0 }
            func set(_ name: String, to value: Int64) throws {}
            func set(_ standard: StandardControl, to value: Int64) throws { writes.append((standard, value)) }
            var controlLatencyFrames: Int { 1 }
        }
        let r = Recorder()
        let d = DelayedControls(latency: 1)
        d.reset(ExposedControls())
        #expect(q.apply(to: r, afterFrame: 5, delayed: d) == 1)
        #expect(r.writes.count == 1 && r.writes[0].0 == .exposureTime && r.writes[0].1 == 4)
        #expect(d.values(forFrame: 6).exposureTime == 4)
        #expect(q.apply(to: r, afterFrame: 6, delayed: d) == 0)
    }
}
