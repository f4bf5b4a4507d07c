import ViewfinderKit

/// Turns recorded frames and engine counters into the report's summaries.
public enum BenchAnalysis {
    /// The camera's timing from `samples` (in arrival order) against `nominalFps`. Sequences in
    /// `pipelineDrops` (first, count: frames the pipeline dropped before the recorder, see
    /// ``FrameRecorder/pipelineDrops``) are not counted as the camera's gaps.
    public static func camera(_ samples: [FrameSample], nominalFps: Double, pipelineDrops: [(first: UInt64, count: UInt64)] = []) -> CameraSummary {
        let ordered = samples.sorted { $0.sequence < $1.sequence }
        let dropped = pipelineDrops.filter { $0.count > 0 }.sorted { $0.first < $1.first }
        /// How many of the sequences a..<b the pipeline dropped.
        func droppedByPipeline(_ a: UInt64, _ b: UInt64) -> UInt64 {
            var n: UInt64 = 0
            for d in dropped {
                let lo = max(a, d.first), hi = min(b, d.first &+ d.count)
                if hi > lo { n += hi - lo }
            }
            return n
        }
        var intervals: [Double] = []
        var gaps = 0
        var missing: UInt64 = 0
        for (a, b) in zip(ordered, ordered.dropFirst()) {
            guard b.sequence > a.sequence else { continue }
            if b.sequence == a.sequence + 1 {
                intervals.append(Double(Int64(bitPattern: b.timestamp &- a.timestamp)) / 1e6)
            } else {
                let lost = (b.sequence - a.sequence - 1) - min(b.sequence - a.sequence - 1, droppedByPipeline(a.sequence + 1, b.sequence))
                if lost > 0 { gaps += 1; missing += lost }
            }
        }
        var measured = 0.0
        var delivered = 0.0
        var jitter = 0.0
        if let first = ordered.first, let last = ordered.last, last.timestamp > first.timestamp, last.sequence > first.sequence {
            measured = Double(last.sequence - first.sequence) / (Double(last.timestamp - first.timestamp) / 1e9)
            delivered = Double(ordered.count - 1) / (Double(last.timestamp - first.timestamp) / 1e9)
            let xs = ordered.map { Double($0.sequence - first.sequence) }
            let ys = ordered.map { Double(Int64(bitPattern: $0.timestamp &- first.timestamp)) / 1e6 }
            jitter = LineFit(xs: xs, ys: ys)?.residualRMS ?? 0
        }
        let nominalMs = nominalFps > 0 ? 1000 / nominalFps : 0
        let d2p = samples.map { Double(Int64(bitPattern: $0.received &- $0.timestamp)) / 1e6 }
        return CameraSummary(nominalFps: nominalFps, measuredFps: measured, deliveredFps: delivered, frames: samples.count, sequenceGaps: gaps, framesMissing: missing,
                             intervalMs: Distribution(intervals), intervalHistogramMs: Histogram(intervals, bins: 40),
                             intervalErrorMs: Distribution(intervals.map { abs($0 - nominalMs) }), timestampJitterMs: jitter,
                             driverToProcessMs: Distribution(d2p), openToFirstFrameMs: nil, startToFirstFrameMs: nil)
    }

    /// The pipeline's counts, stage times, sinks and threads.
    public static func pipeline(_ stats: EngineStatistics, samples: [FrameSample], threads: [(String, Double)], wallSeconds: Double, timeline: [TimelinePoint], ringCapacities: [String: Int] = [:]) -> PipelineSummary {
        let means = stats.stageMeanMicroseconds
        let stages = stats.stageNames.indices.map { i -> StageTimeSummary in
            let h = stats.stageTimeHistograms[i]
            return StageTimeSummary(name: stats.stageNames[i], calls: h.count, meanUs: i < means.count ? means[i] : 0,
                                    p50Us: Double(h.quantile(0.5)) / 1000, p99Us: Double(h.quantile(0.99)) / 1000, maxUs: Double(h.maximum) / 1000,
                                    buckets: h.occupiedBuckets.map { [Double($0.lowerNanoseconds) / 1000, Double($0.upperNanoseconds) / 1000, Double($0.count)] })
        }
        let outputs = stats.consumers.map {
            OutputSummary(name: $0.name, consumed: $0.consumed, drops: $0.drops.byName, latencyP50Ms: Double($0.latency.quantile(0.5)) / 1e6,
                          latencyP99Ms: Double($0.latency.quantile(0.99)) / 1e6, latencyMaxMs: Double($0.latency.maximum) / 1e6)
        }
        // Threads of the same name (e.g. the sampler's reads) are summed; idle ones are left out.
        var byName: [String: Double] = [:]
        for (n, s) in threads { byName[n, default: 0] += s }
        let threadSummaries = byName.filter { $0.value > 0 }.sorted { $0.value > $1.value }.map {
            ThreadSummary(name: $0.key, cpuSeconds: $0.value, cpuPercent: wallSeconds > 0 ? 100 * $0.value / wallSeconds : 0)
        }
        return PipelineSummary(captured: stats.captured, delivered: stats.delivered, drops: stats.drops.byName, stages: stages, outputs: outputs,
                               captureToOutputMs: Distribution(samples.map { Double(Int64(bitPattern: $0.consumed &- $0.timestamp)) / 1e6 }),
                               threads: threadSummaries, timeline: timeline, ringCapacities: ringCapacities)
    }

    /// Per-frame series, in sequence order.
    public static func series(_ samples: [FrameSample]) -> FrameSeries {
        let s = samples.sorted { $0.sequence < $1.sequence }
        let t0 = s.first?.timestamp ?? 0
        var intervals: [Double] = []
        for i in s.indices {
            if i > 0, s[i].sequence == s[i - 1].sequence + 1 { intervals.append(Double(Int64(bitPattern: s[i].timestamp &- s[i - 1].timestamp)) / 1e6) }
            else { intervals.append(0) }
        }
        return FrameSeries(sequence: s.map(\.sequence), seconds: s.map { Double(Int64(bitPattern: $0.timestamp &- t0)) / 1e9 }, intervalMs: intervals,
                           driverToProcessMs: s.map { Double(Int64(bitPattern: $0.received &- $0.timestamp)) / 1e6 },
                           captureToOutputMs: s.map { Double(Int64(bitPattern: $0.consumed &- $0.timestamp)) / 1e6 })
    }
}
