import Foundation
import Prometheus
import Synchronization
import ViewfinderKit

/// Builds the statistics message (one JSON object) the page's charts and readouts use.
///
/// Fields: `fps` (frames the camera made per second over about the last second of frame
/// arrivals), `captured`, `delivered`,
/// `drops` (engine drops by reason), `outputs` (per output: frames, drops by reason), `stages`
/// (name, mean µs per frame), `latency_ms` (capture to delivery, p50/p99), `preview` (viewers,
/// pictures, drops by reason, capture-to-preview latency p50/p99 ms), the newest frame's
/// `exposure_us`, `gain`, `lens`, `focus_score`, `ae_state`, `af_state`, `metered_luma`,
/// `motion`, `spot` (user-facing, normalised), `samples` (every frame since the last message, for
/// the charts), `histogram` (64 luma bins), `recording`, `recording_error` (how the last recording
/// ended when it ended on its own: a full disk), `stage_switches`, `frame`.
final class StatisticsBuilder: @unchecked Sendable {
    // @unchecked Sendable: used by one task at a time (the ticker, or one request).
    /// (span of frame arrivals, frames captured) of the messages of about the last second.
    private var history: [(span: Double, captured: UInt64)] = []
    private var run: EngineStatistics?
    /// When a frame last arrived as these messages saw it (monotonic ns).
    private var lastArrivalSeen: UInt64 = 0

    func message(server: PreviewServer) -> String {
        var d: [String: Any] = [:]
        let output = server.output
        if let s = server.session.statistics {
            let n = s.captured
            // The rate over about the last second of frame arrivals (not of these messages' own
            // times: a 0.25 s tick saw 7 or 8 frames of a 30 fps camera, 27.7 or 31.7 fps).
            if run !== s { run = s; history.removeAll() }
            let span = s.frameSpanSeconds
            let now = monotonicNanoseconds()
            if let last = history.last, last.span == span {
                // No frame since the last message: nothing new to measure (and a stalled camera
                // would otherwise keep showing its last second's rate, its history growing).
                history[history.count - 1].captured = max(last.captured, n)
            } else {
                history.append((span, n))
                lastArrivalSeen = now
            }
            while history.count > 2, span - history[1].span >= 1 { history.removeFirst() }
            let old = history[0]
            let stalled = now &- lastArrivalSeen > 1_000_000_000
            d["fps"] = !stalled && span > old.span && n >= old.captured ? Double(n - old.captured) / (span - old.span) : 0
            d["captured"] = n
            d["delivered"] = s.delivered
            d["drops"] = s.drops.byName
            d["seconds"] = s.elapsedSeconds
            d["stages"] = zip(s.stageNames, s.stageMeanMicroseconds).map { ["name": $0.0, "mean_us": finiteOrZero($0.1)] as [String: Any] }
            d["latency_ms"] = ["p50": Double(s.latency.quantile(0.5)) / 1e6, "p99": Double(s.latency.quantile(0.99)) / 1e6]
            d["outputs"] = s.consumers.map { ["name": $0.name, "frames": $0.consumed, "drops": $0.drops.byName] as [String: Any] }
        }
        var drops: [String: UInt64] = [:]
        for (r, c) in output.counters.drops { drops[r] = c }
        d["preview"] = [
            "viewers": output.broadcaster.viewerCount,
            "pictures": output.counters.encoded.load(ordering: .relaxed),
            "sent": output.counters.sent.load(ordering: .relaxed),
            "drops": drops,
            "latency_ms": ["p50": Double(server.previewLatency.quantile(0.5)) / 1e6, "p99": Double(server.previewLatency.quantile(0.99)) / 1e6],
        ] as [String: Any]
        let (samples, latest, histogram, w, h, pf) = output.drainSamples()
        d["frame"] = ["width": w, "height": h, "pixel_format": pf, "sequence": latest.sequence] as [String: Any]
        d["exposure_us"] = optional(latest.exposureMicroseconds)
        d["gain"] = optional(latest.gain)
        d["lens"] = optional(latest.lensPosition)
        d["focus_score"] = optional(latest.focusScore)
        d["ae_state"] = latest.exposureState ?? NSNull()
        d["af_state"] = latest.focusState ?? NSNull()
        d["metered_luma"] = optional(latest.meteredLuma)
        d["motion"] = latest.motionX.map { ["dx": finiteOrZero($0), "dy": finiteOrZero(latest.motionY ?? 0)] as [String: Any] } ?? NSNull()
        if let x = latest.spotX, let y = latest.spotY { d["spot"] = ["x": finiteOrZero(x), "y": finiteOrZero(y)] } else { d["spot"] = NSNull() }
        d["samples"] = samples.map { s -> [String: Any] in
            ["seq": s.sequence, "exposure_us": optional(s.exposureMicroseconds), "gain": optional(s.gain), "lens": optional(s.lensPosition),
             "focus_score": optional(s.focusScore), "raw_x": finiteOrZero(s.rawPathX), "raw_y": finiteOrZero(s.rawPathY),
             "smooth_x": optional(s.smoothPathX), "smooth_y": optional(s.smoothPathY)]
        }
        d["histogram"] = histogram.map { Int($0) }
        d["recording"] = server.controls.currentRecording ?? NSNull()
        d["recording_error"] = server.controls.lastRecordingError ?? NSNull()
        d["stage_switches"] = server.controls.stages.map { ["name": $0.name, "enabled": $0.enabled] as [String: Any] }
        d["running"] = server.session.isRunning
        guard let data = try? JSONSerialization.data(withJSONObject: d, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

private func finiteOrZero(_ v: Double) -> Double { v.isFinite ? v : 0 }
private func optional(_ v: Double?) -> Any { v.flatMap { $0.isFinite ? $0 : nil } ?? NSNull() }

/// The Prometheus registry of `/metrics`: the engine's totals are copied in at each scrape (so
/// the counters equal the session's own counts), the preview latency is recorded as it happens.
///
/// Names: `viewfinder_frames_captured_total`, `viewfinder_frames_delivered_total`,
/// `viewfinder_frames_dropped_total{reason}`, `viewfinder_output_frames_total{output}`,
/// `viewfinder_output_frames_dropped_total{output,reason}`, `viewfinder_stage_time_seconds{stage}`
/// (mean per frame), `viewfinder_latency_seconds{quantile}` (capture to delivery),
/// `viewfinder_preview_latency_seconds` (histogram, capture to the picture written to a viewer),
/// `viewfinder_preview_viewers`, `viewfinder_preview_pictures_total`,
/// `viewfinder_preview_frames_dropped_total{reason}`, `viewfinder_exposure_seconds`,
/// `viewfinder_gain`, `viewfinder_focus_score`, `viewfinder_lens_position`.
final class PreviewMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    /// The session's runs (a stage switch or a camera that came back starts a new one), as the
    /// session reported each start (``CaptureSession/onRunStarted(_:)``): the counters are the
    /// sums over every run, so they only ever grow and no run is missed however quickly the
    /// restarts come. The newest ``liveRuns`` are kept (their counts may still move); older ones
    /// are folded into `ended`, so a camera that comes back thousands of times costs nothing more.
    /// A leaf lock: taken with the session's lock held, and never around a call into the session.
    private let runs = LockedBox<(live: [EngineStatistics], ended: RunTotals)>(([], RunTotals()))
    /// Runs kept apart before they are folded: a run this many starts old has long finished.
    static let liveRuns = 8
    /// Stages whose time gauge is published (a stage switched off has its gauge removed); held
    /// for the whole scrape, one at a time (the registry's counters are reset and set).
    private let stageGauges = Mutex<[String: Gauge]>([:])
    private let previewLatency: DurationHistogram

    init() {
        previewLatency = registry.makeDurationHistogram(
            descriptor: Self.descriptor("viewfinder_preview_latency_seconds", "Capture to the preview picture written to a viewer's connection"),
            buckets: [.milliseconds(5), .milliseconds(10), .milliseconds(20), .milliseconds(35), .milliseconds(50), .milliseconds(75),
                      .milliseconds(100), .milliseconds(150), .milliseconds(250), .milliseconds(500), .seconds(1)])
    }

    /// The whole name as the metric name (the unit is already in it).
    static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    func recordPreviewLatency(nanoseconds: UInt64) {
        previewLatency.recordNanoseconds(Int64(min(nanoseconds, UInt64(Int64.max))))
    }

    private func setCounter(_ name: String, labels: [(String, String)] = [], _ value: UInt64, help: String) {
        let d = Self.descriptor(name, help)
        let c = labels.isEmpty ? registry.makeCounter(descriptor: d) : registry.makeCounter(descriptor: d, labels: labels)
        c.reset()
        c.increment(by: Int64(min(value, UInt64(Int64.max))))
    }

    private func setGauge(_ name: String, labels: [(String, String)] = [], _ value: Double, help: String) {
        let d = Self.descriptor(name, help)
        let g = labels.isEmpty ? registry.makeGauge(descriptor: d) : registry.makeGauge(descriptor: d, labels: labels)
        g.set(value.isFinite ? value : 0)
    }

    /// The session started a run.
    func runStarted(_ s: EngineStatistics) {
        runs.withLock { r in
            guard !r.live.contains(where: { $0 === s }) else { return }
            r.live.append(s)
            while r.live.count > Self.liveRuns { r.ended.add(r.live.removeFirst()) }
        }
    }

    /// The counts summed over every run, and the newest run (nil before the first).
    func sums() -> (RunTotals, newest: EngineStatistics?) {
        let (live, ended) = runs.withLock { ($0.live, $0.ended) }
        var t = ended
        for s in live { t.add(s) }
        return (t, live.last)
    }

    /// Runs kept apart (the rest are folded into one sum).
    var keptRuns: Int { runs.withLock { $0.live.count } }

    /// Frames captured, delivered and dropped over every run.
    func totals() -> (captured: UInt64, delivered: UInt64, dropped: UInt64) {
        let t = sums().0
        return (t.captured, t.delivered, t.drops.values.reduce(0, &+))
    }

    /// Copies the session's and the preview's counts in and renders the text format.
    func scrape(server: PreviewServer) -> [UInt8] {
        stageGauges.withLock { gauges in
            let (t, newest) = sums()
            if let s = newest {
                setCounter("viewfinder_frames_captured_total", t.captured, help: "Frames captured from the device")
                setCounter("viewfinder_frames_delivered_total", t.delivered, help: "Frames that left the stage chain for the outputs")
                for r in DropReason.allCases {
                    setCounter("viewfinder_frames_dropped_total", labels: [("reason", r.name)], t.drops[r] ?? 0,
                               help: "Frames dropped before the outputs, by reason")
                }
                // Every output any run had (an output's counts go on across runs).
                for (name, n) in t.consumed {
                    setCounter("viewfinder_output_frames_total", labels: [("output", name)], n, help: "Frames an output consumed")
                    for r in DropReason.allCases {
                        setCounter("viewfinder_output_frames_dropped_total", labels: [("output", name), ("reason", r.name)],
                                   t.consumerDrops[name]?[r] ?? 0, help: "Frames dropped on the way to an output, by reason")
                    }
                }
                let d = Self.descriptor("viewfinder_stage_time_seconds", "Mean time per frame in a stage")
                for (name, us) in zip(s.stageNames, s.stageMeanMicroseconds) {
                    let g = gauges[name] ?? registry.makeGauge(descriptor: d, labels: [("stage", name)])
                    gauges[name] = g
                    g.set(us.isFinite ? us / 1e6 : 0)
                }
                // A stage no longer in the chain has no time now (its last figure stayed).
                for (name, g) in gauges where !s.stageNames.contains(name) {
                    registry.unregisterGauge(g)
                    gauges[name] = nil
                }
                for q in [0.5, 0.9, 0.99] {
                    setGauge("viewfinder_latency_seconds", labels: [("quantile", String(q))], Double(s.latency.quantile(q)) / 1e9,
                             help: "Capture to delivery to the outputs (log-scale buckets, upper bound)")
                }
            }
            let o = server.output
            setGauge("viewfinder_preview_viewers", Double(o.broadcaster.viewerCount), help: "Open /stream connections")
            setCounter("viewfinder_preview_pictures_total", o.counters.encoded.load(ordering: .relaxed), help: "Preview pictures made (encoded or passed through)")
            for (reason, n) in o.counters.drops {
                setCounter("viewfinder_preview_frames_dropped_total", labels: [("reason", reason)], n, help: "Preview pictures not shown, by reason")
            }
            let latest = o.latestSample
            if let e = latest.exposureMicroseconds { setGauge("viewfinder_exposure_seconds", e / 1e6, help: "Exposure time of the newest frame") }
            if let g = latest.gain { setGauge("viewfinder_gain", g, help: "Analogue gain of the newest frame (1 = unity)") }
            if let f = latest.focusScore { setGauge("viewfinder_focus_score", f, help: "Focus measure of the newest frame (variance of the Laplacian, normalised)") }
            if let l = latest.lensPosition { setGauge("viewfinder_lens_position", l, help: "Lens position of the newest frame, device units") }
            return registry.emitToBuffer()
        }
    }
}

/// Counts summed over runs of the session (``PreviewMetrics``).
struct RunTotals: Sendable {
    var captured: UInt64 = 0
    var delivered: UInt64 = 0
    var drops: [DropReason: UInt64] = [:]
    /// Per output, by name (an output's counts go on across runs).
    var consumed: [String: UInt64] = [:]
    var consumerDrops: [String: [DropReason: UInt64]] = [:]

    mutating func add(_ s: EngineStatistics) {
        captured &+= s.captured
        delivered &+= s.delivered
        for r in DropReason.allCases { drops[r, default: 0] &+= s.drops[r] }
        for c in s.consumers {
            consumed[c.name, default: 0] &+= c.consumed
            for r in DropReason.allCases { consumerDrops[c.name, default: [:]][r, default: 0] &+= c.drops[r] }
        }
    }
}
