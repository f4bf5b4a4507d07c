import Benchmark
import DequeModule
import Synchronization
import ViewfinderKit

/// A mutex-guarded Deque: the baseline the lock-free ring is compared with.
final class MutexDeque: @unchecked Sendable {
    // @unchecked Sendable: `items` is only touched under `mutex`.
    let mutex = Mutex<Deque<Int>>(Deque(minimumCapacity: 1024))
    let capacity: Int
    init(capacity: Int) { self.capacity = capacity }
    func push(_ v: Int) -> Bool { mutex.withLock { d in if d.count >= capacity { return false }; d.append(v); return true } }
    func pop() -> Int? { mutex.withLock { $0.popFirst() } }
}

/// Passes `n` integers from a producer thread to the calling thread.
func ringTransfer(_ n: Int, capacity: Int = 1024) -> Int {
    let r = SPSCRing<Int>(capacity: capacity)
    let t = EngineThread(name: "bench-producer") { var i = 0; while i < n { if r.push(i) == nil { i &+= 1 } } }
    var sum = 0, got = 0
    while got < n { if let v = r.pop() { sum &+= v; got &+= 1 } }
    t.join()
    return sum
}

func mutexTransfer(_ n: Int) -> Int {
    let q = MutexDeque(capacity: 1024)
    let t = EngineThread(name: "bench-producer") { var i = 0; while i < n { if q.push(i) { i &+= 1 } } }
    var sum = 0, got = 0
    while got < n { if let v = q.pop() { sum &+= v; got &+= 1 } }
    t.join()
    return sum
}

/// Runs `frames` 1920x1080 YUYV frames from a source that cycles pre-rendered frames through
/// four no-op stages into a null sink, with every thread and ring of a real run.
func pipelineRun(frames: Int, copy: Bool) throws {
    let src = try PatternSource(deviceString: "pattern:width=1920,height=1080,format=yuyv,frames=\(frames),copy=\(copy)")
    let cfg = try src.configure(StreamRequest(pixelFormat: .yuyv, width: 1920, height: 1080, fps: 30, bufferCount: 16))
    let stages: [any Stage] = try (0..<4).map { _ in try StageRegistry.builtIn.makeStage(StageSpec(name: "null")) }
    let e = CaptureEngine(source: src, configuration: cfg, stages: stages, consumers: [NullConsumer()])
    try e.start()
    e.waitUntilFinished()
    precondition(e.statistics.delivered == UInt64(frames))
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .throughput, .mallocCountTotal], warmupIterations: 1, maxDuration: .seconds(10), maxIterations: 20)

    Benchmark("SPSC ring, two threads (items)", configuration: .init(scalingFactor: .mega)) { benchmark in
        blackHole(ringTransfer(benchmark.scaledIterations.count))
    }
    Benchmark("Mutex+Deque baseline, two threads (items)", configuration: .init(scalingFactor: .mega, maxIterations: 5)) { benchmark in
        blackHole(mutexTransfer(benchmark.scaledIterations.count))
    }
    Benchmark("Frame pool acquire+release", configuration: .init(scalingFactor: .mega)) { benchmark in
        let pool = FramePool(format: FrameFormat(.grey, width: 16, height: 16), count: 8)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { if let lease = pool.lease() { blackHole(lease.frame.index) } }
    }
    // Engine overhead: pool, ring hops, 4 no-op stages, a null sink (frames in steady state).
    // Allocations per frame = mallocCountTotal / 1000 once the fixed start-up cost is subtracted
    // (compare the 1000- and 2000-frame runs).
    Benchmark("Pipeline 1080p, 4 null stages, 1000 frames (no copy)", configuration: .init(metrics: [.wallClock, .mallocCountTotal, .cpuTotal], maxIterations: 10)) { _ in
        try pipelineRun(frames: 1000, copy: false)
    }
    Benchmark("Pipeline 1080p, 4 null stages, 2000 frames (no copy)", configuration: .init(metrics: [.wallClock, .mallocCountTotal, .cpuTotal], maxIterations: 10)) { _ in
        try pipelineRun(frames: 2000, copy: false)
    }
    Benchmark("Pipeline 1080p, 4 null stages, 1000 frames (memcpy per frame)", configuration: .init(metrics: [.wallClock, .mallocCountTotal], maxIterations: 10)) { _ in
        try pipelineRun(frames: 1000, copy: true)
    }
    Benchmark("Sim camera full render 1080p YUYV (frames)", configuration: .init(metrics: [.wallClock, .throughput, .mallocCountTotal], maxIterations: 300)) { benchmark in
        let cam = try SimCamera(deviceString: "sim:width=1920,height=1080,format=yuyv,paced=false,shake=3,flicker=50,focus=300")
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 1920, height: 1080, fps: 30))
        try cam.start()
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            if case .sample(let s) = try cam.nextSample(timeoutNanoseconds: 1_000_000_000) { blackHole(s) }
        }
        benchmark.stopMeasurement()
        cam.stop()
    }
}
