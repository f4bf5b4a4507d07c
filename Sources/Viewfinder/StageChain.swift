/// The chain of stages, run on one thread (the stage thread, or the caller's for file processing).
///
/// Built once; per frame it makes one existential call per stage and no allocation. Stages with
/// look-ahead hold frames (``StageVerdict/hold``) and hand them on later through
/// ``Stage/nextReady()``. The chain keeps each stage's holds in a ledger: a frame handed back that
/// the stage does not hold is ignored (``misreturned``), and one the stage never hands back is
/// reclaimed (``reclaimed``, and a ``DropReason/stage`` drop) — at ``finish()``, or as soon as the
/// stage holds more than its ``Stage/delayFrames`` plus ``holdSlack`` frames.
public final class StageChain {
    public let stages: [any Stage]
    public let names: [String]
    /// Time spent in each stage, ns, and calls, for the status line and summary.
    public private(set) var stageNanoseconds: [UInt64]
    public private(set) var stageCalls: [UInt64]
    /// Per-stage drop counts (reclaimed frames included).
    public private(set) var stageDrops: [UInt64]
    /// Frames each stage held and never handed back, reclaimed by the chain.
    public private(set) var reclaimed: [UInt64]
    /// Frames each stage handed back through ``Stage/nextReady()`` without holding them (a second
    /// hand-back of one frame, or a frame it was never given): ignored.
    public private(set) var misreturned: [UInt64]
    /// Holds a stage may keep beyond its declared ``Stage/delayFrames`` before the oldest is reclaimed.
    public static let holdSlack = 16
    private var ledgers: [HoldLedger]
    private let drops: DropCounters
    /// Called for each frame that leaves the end of the chain; the frame is lent for the call.
    private var deliver: (Frame) -> Void = { _ in }

    /// Where each stage's time per call is recorded (one histogram per stage), when given.
    private let timeHistograms: [LatencyHistogram]

    /// A chain of `stages` that counts its drops in `drops` and, when `timeHistograms` has one
    /// histogram per stage, records each call's time there (the engine's
    /// ``EngineStatistics/stageTimeHistograms``).
    public init(stages: [any Stage], drops: DropCounters, timeHistograms: [LatencyHistogram] = []) {
        precondition(timeHistograms.isEmpty || timeHistograms.count == stages.count, "one time histogram per stage")
        self.timeHistograms = timeHistograms
        self.stages = stages
        self.names = stages.map { type(of: $0).name }
        self.stageNanoseconds = Array(repeating: 0, count: stages.count)
        self.stageCalls = Array(repeating: 0, count: stages.count)
        self.stageDrops = Array(repeating: 0, count: stages.count)
        self.reclaimed = Array(repeating: 0, count: stages.count)
        self.misreturned = Array(repeating: 0, count: stages.count)
        self.ledgers = stages.map { HoldLedger(capacity: max(0, $0.delayFrames) + StageChain.holdSlack) }
        self.drops = drops
    }

    /// Total delay of the chain, frames.
    public var delayFrames: Int { stages.reduce(0) { $0 + $1.delayFrames } }

    /// Prepares every stage. `deliver` sees each frame that leaves the end of the chain, lent for
    /// the call (keep it with ``SampleBuffer/init(retaining:)``).
    public func prepare(format: FrameFormat, context: StageContext, deliver: @escaping (Frame) -> Void) throws {
        self.deliver = deliver
        var context = context
        context.upstreamDelayFrames = 0
        for (i, s) in stages.enumerated() {
            try s.prepare(format: format, context: context)
            ledgers[i].reserve(max(0, s.delayFrames) + StageChain.holdSlack)
            context.upstreamDelayFrames += max(0, s.delayFrames)
        }
    }

    /// Runs `frame` through every stage, taking over the caller's reference.
    @inline(__always)
    package func run(_ frame: Frame) {
        run(frame, from: 0)
    }

    /// Runs a frame the caller lends (one of its own, a ``FrameLease``'s, or one lent to it) through
    /// every stage: the chain takes a hold of its own for as long as it needs the frame. False, and
    /// nothing run, when the frame is held by nobody (it went back to its pool or device).
    @discardableResult
    public func submit(_ frame: Frame) -> Bool {
        if !frame.isRecycled { frame.retain() } else if !frame.retainIfHeld() { return false }
        frame.holder = -1
        run(frame, from: 0)
        return true
    }

    private func run(_ frame: Frame, from start: Int) {
        var i = start
        let n = stages.count
        while i < n {
            let stage = stages[i]
            frame.holder = i
            let t0 = monotonicNanoseconds()
            let verdict = stage.process(frame)
            let dt = monotonicNanoseconds() &- t0
            stageNanoseconds[i] &+= dt
            stageCalls[i] &+= 1
            if !timeHistograms.isEmpty { timeHistograms[i].record(nanoseconds: dt) }
            switch verdict {
            case .forward:
                frame.holder = -1
                frame.metadata.stageNanoseconds &+= dt
                if stage.delayFrames > 0 { drainReady(i) }
                i += 1
            case .drop(let reason):
                frame.holder = -1
                drops.count(reason, from: frame.sequence)
                stageDrops[i] &+= 1
                frame.release()
                if stage.delayFrames > 0 { drainReady(i) }
                return
            case .hold:
                // The stage has the frame now; the chain keeps the hold in the stage's ledger
                // (unless a built-in stage already gave it up, having copied it into a buffer of
                // its own: then `holder` is no longer `i`).
                if frame.holder == i { hold(frame, stage: i) }
                drainReady(i)
                return
            }
        }
        deliver(frame)
        frame.release()
    }

    private func hold(_ frame: Frame, stage i: Int) {
        if ledgers[i].contains(frame) { return }
        if ledgers[i].isFull {
            ledgers[i].removeStale(holder: i)
            if ledgers[i].isFull, let oldest = ledgers[i].removeFirst() { reclaim(oldest, stage: i) }
        }
        ledgers[i].append(frame)
    }

    private func reclaim(_ frame: Frame, stage i: Int) {
        frame.holder = -1
        reclaimed[i] &+= 1
        stageDrops[i] &+= 1
        drops.count(.stage, from: frame.sequence)
        frame.release()
    }

    private func drainReady(_ i: Int) {
        while let ready = stages[i].nextReady() {
            if ready.holder == i {
                ledgers[i].remove(ready)
                ready.holder = -1
            } else if ready.holder == Frame.stageOwned {
                // A frame the stage filled from a pool of its own: its reference passes on.
                ready.holder = -1
            } else {
                // Not held by this stage: a second hand-back, or a frame it was never given.
                misreturned[i] &+= 1
                return
            }
            run(ready, from: i + 1)
        }
    }

    /// End of stream: every stage gives back what it holds, in order; what a stage still holds
    /// afterwards is reclaimed and counted.
    public func finish() {
        for i in stages.indices {
            stages[i].finish()
            drainReady(i)
            while let f = ledgers[i].removeFirst() {
                if f.holder == i { reclaim(f, stage: i) }
            }
        }
    }

    /// Frames stage `i` holds for the engine now.
    public func heldFrames(stage i: Int) -> Int { ledgers[i].count(holder: i) }

    /// Mean time per call of stage `i`, µs.
    @inline(__always)
    public func meanMicroseconds(stage i: Int) -> Double {
        stageCalls[i] == 0 ? 0 : Double(stageNanoseconds[i]) / Double(stageCalls[i]) / 1000
    }

    /// Mean time per call of each stage, µs.
    public var meanMicroseconds: [Double] { stages.indices.map(meanMicroseconds(stage:)) }
}

/// The frames one stage holds for the engine, oldest first, in storage reserved up front. Entries
/// whose frame the stage has since given up itself (``Frame/holder`` no longer its index) are stale
/// and are dropped when room is needed.
struct HoldLedger {
    private var frames: [Frame?]
    private(set) var count = 0

    init(capacity: Int) { frames = Array(repeating: nil, count: max(1, capacity)) }

    mutating func reserve(_ capacity: Int) {
        if capacity > frames.count { frames.append(contentsOf: repeatElement(nil, count: capacity - frames.count)) }
    }

    var isFull: Bool { count == frames.count }

    func contains(_ f: Frame) -> Bool {
        for k in 0..<count where frames[k] === f { return true }
        return false
    }

    func count(holder: Int) -> Int {
        var n = 0
        for k in 0..<count where frames[k]?.holder == holder { n += 1 }
        return n
    }

    mutating func append(_ f: Frame) {
        frames[count] = f
        count += 1
    }

    mutating func remove(_ f: Frame) {
        for k in 0..<count where frames[k] === f {
            for j in k..<(count - 1) { frames[j] = frames[j + 1] }
            count -= 1
            frames[count] = nil
            return
        }
    }

    mutating func removeFirst() -> Frame? {
        guard count > 0 else { return nil }
        let f = frames[0]
        for j in 0..<(count - 1) { frames[j] = frames[j + 1] }
        count -= 1
        frames[count] = nil
        return f
    }

    mutating func removeStale(holder: Int) {
        var keep = 0
        for k in 0..<count {
            if let f = frames[k], f.holder == holder { frames[keep] = f; keep += 1 }
        }
        for k in keep..<count { frames[k] = nil }
        count = keep
    }
}
