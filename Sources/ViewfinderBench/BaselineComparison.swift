import Foundation

/// One metric of two runs side by side.
public struct MetricComparison: Codable, Sendable, Equatable {
    public enum Verdict: String, Codable, Sendable { case regression, improvement, unchanged }
    /// Dotted path of the metric (`camera.interval_ms.p99`, `stage.exposure.p50_us`, …).
    public var metric: String
    public var baseline: Double
    public var current: Double
    /// The change allowed (the threshold, not the measured noise: three times the larger run's
    /// own noise, at least 10 % of the baseline and the metric's floor): a change within it is
    /// `unchanged`. (Named `noise` in the JSON since schema 1.)
    public var noise: Double
    public var higherIsBetter: Bool
    public var verdict: Verdict
}

/// A run compared with an earlier one (`--baseline old.json`).
public struct BaselineComparison: Codable, Sendable, Equatable {
    public var baselineDevice: String
    public var metrics: [MetricComparison]
    /// How the baseline was measured differently (device, mode, stages), one line each, e.g.
    /// `stages: exposure → exposure, stabilise`: the figures then compare unlike runs. Empty when
    /// alike. (Absent in reports before it was added.)
    public var setupChanges: [String]? = nil
    /// Metrics in one run only (a stage or a control measured in one of them), not compared.
    public var notCompared: [String]? = nil
    public var regressions: Int { metrics.filter { $0.verdict == .regression }.count }
}

/// A metric of one run, with the noise measured in that run.
public struct BenchMetric: Sendable, Equatable {
    public var name: String
    public var value: Double
    /// Half the range of the metric over the run's four quarters (per-frame series), or the
    /// resolution of the measurement (bucketed stage times: two buckets, 19 %), whichever is larger.
    public var noise: Double
    public var higherIsBetter: Bool
}

extension BenchReport {
    /// The metrics a baseline comparison looks at, each with its own noise.
    public var metrics: [BenchMetric] {
        var m: [BenchMetric] = []
        let s = series
        func quarterNoise(_ values: [Double], _ stat: ([Double]) -> Double) -> Double {
            let v = values
            guard v.count >= 8 else { return 0 }
            let q = v.count / 4
            let parts = (0..<4).map { stat(Array(v[($0 * q)..<($0 == 3 ? v.count : ($0 + 1) * q)])) }
            return ((parts.max() ?? 0) - (parts.min() ?? 0)) / 2
        }
        let intervals = s.intervalMs.filter { $0 > 0 }
        func p(_ q: Double) -> ([Double]) -> Double { { Distribution.quantile(sorted: $0.sorted(), q) } }
        if camera.measuredFps > 0 {
            // The rate over a quarter, from the quarter's mean interval.
            let fpsNoise = quarterNoise(intervals) { v in let mean = v.reduce(0, +) / Double(max(v.count, 1)); return mean > 0 ? 1000 / mean : 0 }
            m.append(BenchMetric(name: "camera.measured_fps", value: camera.measuredFps, noise: fpsNoise, higherIsBetter: true))
        }
        m.append(BenchMetric(name: "camera.interval_ms.p99", value: camera.intervalMs.p99, noise: quarterNoise(intervals, p(0.99)), higherIsBetter: false))
        m.append(BenchMetric(name: "camera.timestamp_jitter_ms", value: camera.timestampJitterMs, noise: quarterNoise(intervals) { Distribution($0).stddev / 2.0.squareRoot() }, higherIsBetter: false))
        m.append(BenchMetric(name: "camera.driver_to_process_ms.p50", value: camera.driverToProcessMs.p50, noise: quarterNoise(s.driverToProcessMs, p(0.5)), higherIsBetter: false))
        m.append(BenchMetric(name: "camera.driver_to_process_ms.p99", value: camera.driverToProcessMs.p99, noise: quarterNoise(s.driverToProcessMs, p(0.99)), higherIsBetter: false))
        m.append(BenchMetric(name: "pipeline.capture_to_output_ms.p50", value: pipeline.captureToOutputMs.p50, noise: quarterNoise(s.captureToOutputMs, p(0.5)), higherIsBetter: false))
        m.append(BenchMetric(name: "pipeline.capture_to_output_ms.p99", value: pipeline.captureToOutputMs.p99, noise: quarterNoise(s.captureToOutputMs, p(0.99)), higherIsBetter: false))
        let dropped = Double(pipeline.drops.values.reduce(0, +))
        m.append(BenchMetric(name: "pipeline.dropped_fraction", value: pipeline.captured > 0 ? dropped / Double(pipeline.captured) : 0, noise: pipeline.captured > 0 ? 1 / Double(pipeline.captured) : 0, higherIsBetter: false))
        for st in pipeline.stages {
            m.append(BenchMetric(name: "stage.\(st.name).p50_us", value: st.p50Us, noise: st.p50Us * 0.19, higherIsBetter: false))
            m.append(BenchMetric(name: "stage.\(st.name).p99_us", value: st.p99Us, noise: st.p99Us * 0.19, higherIsBetter: false))
        }
        for c in controls {
            if let l = c.latencyFrames { m.append(BenchMetric(name: "control.\(c.control.rawValue).latency_frames", value: Double(l), noise: 0, higherIsBetter: false)) }
        }
        return m
    }

    /// This run against `baseline`: a metric regressed when it moved the wrong way by more than
    /// the allowed noise: three times the larger of the two runs' own noise, and at least 10 % of
    /// the baseline and the metric's floor (``noiseFloor(_:)``) — within-run spread understates
    /// the spread between runs on a shared machine.
    public func compared(with baseline: BenchReport) -> BaselineComparison {
        let old = Dictionary(baseline.metrics.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        var out: [MetricComparison] = []
        for m in metrics {
            guard let b = old[m.name] else { continue }
            let noise = max(3 * max(m.noise, b.noise), abs(b.value) * 0.10, BenchReport.noiseFloor(m.name))
            let change = m.value - b.value
            let worse = m.higherIsBetter ? change < -noise : change > noise
            let better = m.higherIsBetter ? change > noise : change < -noise
            out.append(MetricComparison(metric: m.name, baseline: b.value, current: m.value, noise: noise, higherIsBetter: m.higherIsBetter,
                                        verdict: worse ? .regression : better ? .improvement : .unchanged))
        }
        var changes: [String] = []
        if baseline.device != device { changes.append("device: \(baseline.device) → \(device)") }
        func mode(_ f: FormatSummary?) -> String { f.map { "\($0.pixelFormat) \($0.width)x\($0.height) at \(String(format: "%.2f", $0.nominalFps)) fps" } ?? "unknown" }
        if baseline.format != format { changes.append("mode: \(mode(baseline.format)) → \(mode(format))") }
        func list(_ s: [String]) -> String { s.isEmpty ? "none" : s.joined(separator: ", ") }
        if baseline.stages != stages { changes.append("stages: \(list(baseline.stages)) → \(list(stages))") }
        if baseline.camera.endedEarlyAfterFrames != nil || camera.endedEarlyAfterFrames != nil {
            changes.append("ended early: \(baseline.camera.endedEarlyAfterFrames.map { "after \($0) frames" } ?? "no") → \(camera.endedEarlyAfterFrames.map { "after \($0) frames" } ?? "no")")
        }
        let names = Set(metrics.map(\.name))
        let oneSided = Set(old.keys).symmetricDifference(names).sorted()
        return BaselineComparison(baselineDevice: baseline.device, metrics: out, setupChanges: changes, notCompared: oneSided)
    }

    /// The smallest change of a metric that counts, by its unit: 0.2 ms for times in ms (a
    /// scheduler tick's worth of wake-up jitter), 2 µs for stage times, one frame for control
    /// latencies, one frame in a thousand for the drop fraction.
    public static func noiseFloor(_ metric: String) -> Double {
        if metric.hasSuffix("_us") { return 2 }
        if metric.hasSuffix("latency_frames") { return 1 }
        if metric.contains("_ms") { return 0.2 }
        if metric.hasSuffix("dropped_fraction") { return 0.001 }
        return 0
    }
}
