import Foundation

/// The people's report: one self-contained HTML page (inline CSS and SVG, no script, nothing
/// fetched) with the summary tables and the plots — frame-interval histogram, intervals and
/// latencies over time, stage time distributions, drops over time, control step responses.
public enum HTMLReport {
    /// The page for `report`.
    public static func render(_ report: BenchReport) -> String {
        var h = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8">
        <title>viewfinder bench: \(esc(report.device))</title>
        <style>
        body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1360px; }
        h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ccc; }
        table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
        td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; } th { background: #f2f2f2; }
        td:first-child, th:first-child { text-align: left; }
        .plots { display: flex; flex-wrap: wrap; gap: 12px; }
        .regression { background: #fdd; } .improvement { background: #dfd; } .note { color: #555; font-size: 13px; }
        </style></head><body>
        <h1>viewfinder bench: \(esc(report.device))</h1>

        """
        if let f = report.format {
            h += "<p>\(esc(f.pixelFormat)) \(f.width)×\(f.height) at \(num(f.nominalFps)) fps nominal; stages: \(report.stages.isEmpty ? "none" : esc(report.stages.joined(separator: ", "))); pipeline run \(num(report.durationSeconds)) s.</p>\n"
        }
        h += cameraSection(report)
        h += controlSection(report)
        h += pipelineSection(report)
        if !report.sweep.isEmpty { h += sweepSection(report.sweep) }
        if let c = report.comparison { h += comparisonSection(c) }
        h += "<p class=\"note\">Written by <code>viewfinder bench</code>; the same numbers are in its <code>--json</code> output (schema \(report.schemaVersion)).</p>\n</body></html>\n"
        return h
    }

    static func esc(_ s: String) -> String { SVGPlot.escape(s) }
    static func num(_ v: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", v) }
    static func row(_ cells: [String], header: Bool = false, cls: String? = nil) -> String {
        let t = header ? "th" : "td"
        return "<tr\(cls.map { " class=\"\($0)\"" } ?? "")>" + cells.map { "<\(t)>\($0)</\(t)>" }.joined() + "</tr>\n"
    }
    static func distRow(_ name: String, _ d: Distribution) -> String {
        row([name, "\(d.count)", num(d.p50), num(d.p90), num(d.p99), num(d.max), num(d.mean), num(d.stddev)])
    }
    static let distHeader = row(["ms", "n", "p50", "p90", "p99", "max", "mean", "std dev"], header: true)

    static func cameraSection(_ r: BenchReport) -> String {
        let c = r.camera
        var h = "<h2>Camera</h2>\n<table>\n"
        h += row(["nominal rate", "\(num(c.nominalFps)) fps"]) + row(["measured rate (sequence over timestamps)", "\(num(c.measuredFps, 3)) fps"])
        if let during = r.interruptedDuring {
            h += row(["interrupted", "Ctrl-C during \(during): the figures cover what was measured until then"])
        }
        if let n = c.endedEarlyAfterFrames {
            h += row(["ended early", "after \(n) frames: the source delivered faster than its nominal rate and filled the frames kept for the duration asked; the figures cover those frames"])
        }
        h += row(["delivered rate (frames received over timestamps)", "\(num(c.deliveredFps, 3)) fps"])
        h += row(["frames received", "\(c.frames)"]) + row(["sequence gaps", "\(c.sequenceGaps) (\(c.framesMissing) frames missing)"])
        h += row(["timestamp jitter (RMS from a straight line)", "\(num(c.timestampJitterMs, 3)) ms"])
        if let o = c.openToFirstFrameMs { h += row(["open to first frame", "\(num(o, 1)) ms"]) }
        if let s = c.startToFirstFrameMs { h += row(["session start to first frame", "\(num(s, 1)) ms"]) }
        h += "</table>\n<table>\n" + distHeader + distRow("frame interval", c.intervalMs) + distRow("|interval − nominal|", c.intervalErrorMs)
        h += distRow("driver to process", c.driverToProcessMs) + distRow("capture to output", r.pipeline.captureToOutputMs) + "</table>\n<div class=\"plots\">\n"

        // Interval histogram.
        let hist = c.intervalHistogramMs
        let bins = hist.counts.enumerated().map { (x0: hist.start + Double($0.offset) * hist.binWidth, x1: hist.start + Double($0.offset + 1) * hist.binWidth, y: Double($0.element)) }
        let nominalMs = c.nominalFps > 0 ? 1000 / c.nominalFps : 0
        let lo = min(bins.first?.x0 ?? 0, nominalMs > 0 ? nominalMs : .infinity), hi = max(bins.last?.x1 ?? 1, nominalMs)
        var p = SVGPlot(title: "Frame interval histogram", xLabel: "interval between consecutive frames (ms)", yLabel: "frames",
                        x: (lo - (hi - lo) * 0.05)...(hi + (hi - lo) * 0.05), y: 0...Double(max(1, hist.counts.max() ?? 1)) * 1.1)
        p.bars(bins)
        if nominalMs > 0 { p.verticalMark(nominalMs, label: "nominal \(num(nominalMs)) ms") }
        h += p.svg

        // Intervals over time.
        let s = r.series
        let idx = s.intervalMs.indices.filter { s.intervalMs[$0] > 0 }
        let iv = idx.map { s.intervalMs[$0] }, it = idx.map { s.seconds[$0] }
        var q = SVGPlot(title: "Frame interval over time", xLabel: "time from the first frame (s)", yLabel: "interval (ms)",
                        x: 0...(s.seconds.last ?? 1), y: 0...max(iv.max() ?? 1, nominalMs) * 1.1)
        q.line(it, iv)
        if nominalMs > 0 { q.horizontalMark(nominalMs, label: "nominal") }
        h += q.svg

        // Latencies over time.
        let top = max(s.captureToOutputMs.max() ?? 1, s.driverToProcessMs.max() ?? 1, 0.001) * 1.1
        var l = SVGPlot(title: "Latency over time", xLabel: "time from the first frame (s)", yLabel: "latency (ms)", x: 0...(s.seconds.last ?? 1), y: 0...top)
        l.line(s.seconds, s.driverToProcessMs, colour: 0, name: "driver to process")
        l.line(s.seconds, s.captureToOutputMs, colour: 1, name: "capture to output")
        l.legend(["driver to process", "capture to output"])
        h += l.svg
        return h + "</div>\n"
    }

    static func controlSection(_ r: BenchReport) -> String {
        guard !r.controls.isEmpty else { return "" }
        var h = "<h2>Control latency</h2>\n<p class=\"note\">Each control is stepped right after a frame arrives (offset 0); the latency is the first frame at least half-way to the new level, the median over the steps.</p>\n<table>\n"
        h += row(["control", "device control", "measure", "latency (frames)", "steps agreeing", "note"], header: true)
        for c in r.controls {
            h += row([c.control.rawValue, esc(c.name ?? "—"), c.measure.rawValue, c.latencyFrames.map(String.init) ?? "—",
                      "\(c.agreeingSteps) of \(c.steps.count)", esc(c.error ?? "")])
        }
        h += "</table>\n<div class=\"plots\">\n"
        for c in r.controls where !c.steps.isEmpty {
            let all = c.steps.flatMap(\.values)
            let offs = c.steps.flatMap(\.offsets)
            guard let ymin = all.min(), let ymax = all.max(), let xmin = offs.min(), let xmax = offs.max() else { continue }
            let pad = max((ymax - ymin) * 0.1, 0.5)
            var p = SVGPlot(width: 440, height: 280, title: "\(c.control.rawValue) step response", xLabel: "frames after the set", yLabel: c.measure == .luma ? "mean luma" : "focus score (Laplacian variance)",
                            x: Double(xmin)...Double(xmax), y: (ymin - pad)...(ymax + pad))
            for (i, s) in c.steps.enumerated() {
                p.line(s.offsets.map(Double.init), s.values, colour: i, name: "\(s.from) → \(s.to)")
                p.points(s.offsets.map(Double.init), s.values, colour: i)
            }
            p.verticalMark(0, label: "set")
            if let l = c.latencyFrames { p.verticalMark(Double(l), label: "latency \(l)", colour: 1) }
            p.legend(c.steps.map { "\($0.from) → \($0.to)" })
            h += p.svg
        }
        return h + "</div>\n"
    }

    static func pipelineSection(_ r: BenchReport) -> String {
        let pl = r.pipeline
        var h = "<h2>Pipeline</h2>\n<table>\n" + row(["captured", "\(pl.captured)"]) + row(["delivered by the stages", "\(pl.delivered)"])
        h += row(["dropped", pl.drops.isEmpty ? "none" : pl.drops.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")]) + "</table>\n"
        if !pl.stages.isEmpty {
            h += "<table>\n" + row(["stage", "calls", "mean µs", "p50 µs", "p99 µs", "max µs"], header: true)
            for s in pl.stages { h += row([esc(s.name), "\(s.calls)", num(s.meanUs, 1), num(s.p50Us, 1), num(s.p99Us, 1), num(s.maxUs, 1)]) }
            h += "</table>\n<p class=\"note\">Stage quantiles are bucket upper bounds (buckets 9 % wide); max is exact.</p>\n"
        }
        h += "<table>\n" + row(["output", "consumed", "dropped", "latency p50 ms", "p99 ms", "max ms"], header: true)
        for o in pl.outputs {
            h += row([esc(o.name), "\(o.consumed)", o.drops.isEmpty ? "0" : esc(o.drops.map { "\($0.key) \($0.value)" }.joined(separator: ", ")), num(o.latencyP50Ms), num(o.latencyP99Ms), num(o.latencyMaxMs)])
        }
        h += "</table>\n<table>\n" + row(["thread", "CPU s", "% of a core"], header: true)
        for t in pl.threads { h += row([esc(t.name), num(t.cpuSeconds, 3), num(t.cpuPercent, 1)]) }
        h += "</table>\n<div class=\"plots\">\n"

        for s in pl.stages where !s.buckets.isEmpty {
            let hi = s.buckets.map { $0[1] }.max() ?? 1
            let bins = s.buckets.map { (x0: $0[0], x1: $0[1], y: $0[2]) }
            var p = SVGPlot(width: 440, height: 260, title: "Stage \(s.name): time per frame", xLabel: "µs", yLabel: "frames", x: 0...hi, y: 0...(bins.map(\.y).max() ?? 1) * 1.1)
            p.bars(bins, colour: 2)
            p.verticalMark(s.p50Us, label: "p50")
            p.verticalMark(s.p99Us, label: "p99", colour: 1)
            h += p.svg
        }

        if pl.timeline.count >= 2 {
            let t = pl.timeline
            let reasons = Array(Set(t.flatMap { $0.drops.keys })).sorted()
            let xs = t.map(\.seconds)
            // Frames per second delivered, from consecutive samples.
            var rate: [Double] = [0]
            for (a, b) in zip(t, t.dropFirst()) { rate.append(b.seconds > a.seconds ? Double(b.delivered &- a.delivered) / (b.seconds - a.seconds) : 0) }
            var p = SVGPlot(title: "Delivered rate over time", xLabel: "time from start (s)", yLabel: "frames/s", x: 0...(xs.last ?? 1), y: 0...max(rate.max() ?? 1, r.camera.nominalFps) * 1.15)
            p.line(Array(xs.dropFirst()), Array(rate.dropFirst()))
            if r.camera.nominalFps > 0 { p.horizontalMark(r.camera.nominalFps, label: "nominal") }
            h += p.svg
            let maxDrops = Double(t.last.map { $0.drops.values.max() ?? 0 } ?? 0)
            var d = SVGPlot(title: reasons.isEmpty ? "Drops over time (none)" : "Drops over time", xLabel: "time from start (s)", yLabel: "frames dropped so far", x: 0...(xs.last ?? 1), y: 0...max(maxDrops * 1.1, 1))
            if reasons.isEmpty { d.line(xs, xs.map { _ in 0 }, colour: 2, name: "no drops") }
            for (i, reason) in reasons.enumerated() { d.line(xs, t.map { Double($0.drops[reason] ?? 0) }, colour: i, name: reason) }
            d.legend(reasons.isEmpty ? ["no drops"] : reasons)
            h += d.svg
            let rings = pl.ringCapacities.keys.sorted()
            let cap = Double(pl.ringCapacities.values.max() ?? 1)
            var o = SVGPlot(title: "Ring occupancy over time", xLabel: "time from start (s)", yLabel: "frames queued", x: 0...(xs.last ?? 1), y: 0...max(cap, 1))
            if rings.isEmpty { o.line(xs, xs.map { _ in 0 }, colour: 2, name: "no rings") }
            for (i, ring) in rings.enumerated() { o.line(xs, t.map { Double($0.rings[ring] ?? 0) }, colour: i, name: "\(ring) (capacity \(pl.ringCapacities[ring] ?? 0))") }
            o.legend(rings.isEmpty ? ["no rings"] : rings.map { "\($0) (of \(pl.ringCapacities[$0] ?? 0))" })
            h += o.svg
        }
        return h + "</div>\n"
    }

    static func sweepSection(_ sweep: [SweepEntry]) -> String {
        var h = "<h2>Modes</h2>\n<table>\n" + row(["format", "size", "nominal fps", "measured fps", "delivered fps", "frames", "missing", "delivers nominal", "error"], header: true)
        for e in sweep {
            h += row([esc(e.pixelFormat), "\(e.width)×\(e.height)", num(e.nominalFps), e.measuredFps.map { num($0) } ?? "—", e.deliveredFps.map { num($0) } ?? "—", "\(e.frames)", "\(e.framesMissing)", e.deliversNominalRate ? "yes" : "no", esc(e.error ?? "")],
                     cls: e.deliversNominalRate ? nil : "regression")
        }
        return h + "</table>\n"
    }

    static func comparisonSection(_ c: BaselineComparison) -> String {
        var h = "<h2>Against the baseline</h2>\n<p>\(c.regressions) regression(s) beyond the allowed change (baseline device \(esc(c.baselineDevice))).</p>\n"
        if let changes = c.setupChanges, !changes.isEmpty {
            h += "<p>The baseline was measured differently: " + changes.map(esc).joined(separator: "; ") + ".</p>\n"
        }
        if let n = c.notCompared, !n.isEmpty { h += "<p>Not compared (in one run only): " + n.map(esc).joined(separator: ", ") + ".</p>\n" }
        h += "<table>\n"
        h += row(["metric", "baseline", "now", "change", "allowed change (±)", "verdict"], header: true)
        for m in c.metrics {
            let change = m.baseline != 0 ? String(format: "%+.1f %%", 100 * (m.current - m.baseline) / abs(m.baseline)) : "—"
            h += row([esc(m.metric), num(m.baseline, 3), num(m.current, 3), change, num(m.noise, 3), m.verdict.rawValue], cls: m.verdict == .unchanged ? nil : m.verdict.rawValue)
        }
        return h + "</table>\n"
    }
}
