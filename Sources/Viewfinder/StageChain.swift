/// The chain of stages, run on one thread (the stage thread, or the caller's for file processing).
///
/// Built once; per frame it makes one existential call per stage and no allocation. Stages with
/// look-ahead hold frames (``StageVerdict/hold``) and hand them on later through
/// ``Stage/nextReady()``.
public final class StageChain {
    public let stages: [any Stage]
    public let names: [String]
    /// Time spent in each stage, ns, and calls, for the status line and summary.
    public private(set) var stageNanoseconds: [UInt64]
    public private(set) var stageCalls: [UInt64]
    /// Per-stage drop counts.
    public private(set) var stageDrops: [UInt64]
    private let drops: DropCounters
    /// Called for each frame that leaves the end of the chain (the caller owns its reference).
    private var deliver: (Frame) -> Void = { $0.release() }

    public init(stages: [any Stage], drops: DropCounters) {
        self.stages = stages
        self.names = stages.map { type(of: $0).name }
        self.stageNanoseconds = Array(repeating: 0, count: stages.count)
        self.stageCalls = Array(repeating: 0, count: stages.count)
        self.stageDrops = Array(repeating: 0, count: stages.count)
        self.drops = drops
    }

    /// Total delay of the chain, frames.
    public var delayFrames: Int { stages.reduce(0) { $0 + $1.delayFrames } }

    public func prepare(format: FrameFormat, context: StageContext, deliver: @escaping (Frame) -> Void) throws {
        self.deliver = deliver
        for s in stages { try s.prepare(format: format, context: context) }
    }

    /// Runs `frame` (whose reference the chain takes) through every stage.
    @inline(__always)
    public func run(_ frame: Frame) {
        run(frame, from: 0)
    }

    private func run(_ frame: Frame, from start: Int) {
        var i = start
        let n = stages.count
        while i < n {
            let stage = stages[i]
            let t0 = monotonicNanoseconds()
            let verdict = stage.process(frame)
            let dt = monotonicNanoseconds() &- t0
            stageNanoseconds[i] &+= dt
            stageCalls[i] &+= 1
            switch verdict {
            case .forward:
                frame.metadata.stageNanoseconds &+= dt
                if stage.delayFrames > 0 { drainReady(i) }
                i += 1
            case .drop(let reason):
                drops.count(reason)
                stageDrops[i] &+= 1
                frame.release()
                if stage.delayFrames > 0 { drainReady(i) }
                return
            case .hold:
                // The stage owns the frame now (it may already have released it): do not touch it.
                drainReady(i)
                return
            }
        }
        deliver(frame)
    }

    private func drainReady(_ i: Int) {
        while let ready = stages[i].nextReady() { run(ready, from: i + 1) }
    }

    /// End of stream: every stage gives back what it holds, in order.
    public func finish() {
        for i in stages.indices {
            stages[i].finish()
            drainReady(i)
        }
    }

    /// Mean time per call of stage `i`, µs.
    @inline(__always)
    public func meanMicroseconds(stage i: Int) -> Double {
        stageCalls[i] == 0 ? 0 : Double(stageNanoseconds[i]) / Double(stageCalls[i]) / 1000
    }

    /// Mean time per call of each stage, µs.
    public var meanMicroseconds: [Double] { stages.indices.map(meanMicroseconds(stage:)) }
}
