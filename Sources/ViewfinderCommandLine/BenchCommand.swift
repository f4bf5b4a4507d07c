import ArgumentParser
import Foundation
import ViewfinderBench
import ViewfinderKit

/// `viewfinder bench`: measures a camera and a pipeline; JSON for machines, HTML for people.
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure a camera and a pipeline: rate, jitter, gaps, latencies, control latency, stage time distributions.",
        discussion: """
        Three runs, each opening the device afresh: the pipeline run (--duration seconds with --stages: frame \
        timing from the buffer timestamps, per-stage time distributions, drops, threads' CPU), the \
        control run (steps exposure, gain and focus and finds, in the pictures, how many frames \
        each takes to show) and, with --sweep, every listed mode at its fastest listed rate.
        """)

    @Option(help: "Device: sim[:options], /dev/videoN, dump:FILE, pattern[:options].") var device: String = "sim"
    @Option(help: "Stages of the measured pipeline, e.g. exposure:mode=continuous,focus.") var stages: String?
    @Option(parsing: .unconditional, help: "Seconds of the pipeline run.") var duration: Double = 5
    @OptionGroup var stream: StreamRequestOptions
    @Option(help: "Controls to step for the control latency: \(SteppedControl.allCases.map(\.rawValue).joined(separator: ", ")), or none.")
    var controls: String = "exposure,gain,focus"
    @Option(parsing: .unconditional, help: "Steps per control (alternately away from the current value and back). Default: 3.") var steps: Int?
    @Option(parsing: .unconditional, help: "The largest control latency looked for, frames.") var maxControlLatency: Int = 10
    @Flag(help: "Also measure every listed mode (format and size at its fastest listed rate).") var sweep = false
    @Option(parsing: .unconditional, help: "Seconds per mode of --sweep. Default: 1.5.") var sweepSeconds: Double?
    @Flag(help: "Print the report as JSON (a stable schema) instead of a summary.") var json = false
    @Option(help: "Write the HTML report (self-contained, with SVG plots) to this file.") var report: String?
    @Option(help: "Compare with an earlier --json report and mark regressions beyond the measured noise.") var baseline: String?
    @Flag(help: "Exit 1 when the comparison with --baseline finds a regression.") var failOnRegression = false

    func validate() throws {
        // The bench keeps every frame's record in memory: an hour per run is its limit.
        try checkDuration(duration, limit: 3600)
        try checkDuration(sweepSeconds, option: "--sweep-seconds", limit: 600)
        if let steps, !(1...30).contains(steps) { throw ValidationError("--steps must be 1...30, got \(steps)") }
        // Options of a part that does not run are refused, not ignored.
        if sweepSeconds != nil && !sweep { throw ValidationError("--sweep-seconds needs --sweep") }
        if try steps != nil && steppedControls().isEmpty { throw ValidationError("--steps needs a control to step (--controls is none)") }
        if !(1...60).contains(maxControlLatency) { throw ValidationError("--max-control-latency must be 1...60 frames, got \(maxControlLatency)") }
        _ = try steppedControls()
        if failOnRegression && baseline == nil { throw ValidationError("--fail-on-regression needs --baseline") }
    }

    func steppedControls() throws -> [SteppedControl] {
        if controls == "none" || controls.isEmpty { return [] }
        return try controls.split(separator: ",").map {
            if $0 == "none" { throw ValidationError("'none' stands alone in --controls (no control is stepped), not in a list") }
            guard let c = SteppedControl(rawValue: String($0)) else {
                throw ValidationError("unknown control '\($0)' (known: \(SteppedControl.allCases.map(\.rawValue).joined(separator: ", ")), none)")
            }
            return c
        }
    }

    func run() throws {
        // Read the baseline and check the report's folder first: a bad one is found before a
        // long run, not after it.
        let old = try baseline.map { try BenchReport.load(path: $0) }
        // A baseline that was itself cut short has parts missing: compared with, they would read
        // as changes (or hide them).
        if let old, let during = old.interruptedDuring, let baseline {
            throw ValidationError("the baseline '\(baseline)' is a bench interrupted during \(during): a comparison needs a whole one")
        }
        if let report { try refuseEmptyPath(report); try Self.checkWritable(report) }
        var cfg = BenchConfiguration(device: device)
        cfg.stages = stages ?? ""
        cfg.registry = ViewfinderCommandLine.stages
        cfg.durationSeconds = duration
        cfg.pixelFormat = try stream.pixelFormat
        cfg.width = stream.width; cfg.height = stream.height; cfg.fps = stream.fps
        cfg.controls = try steppedControls()
        cfg.stepsPerControl = steps ?? 3
        cfg.maxControlLatencyFrames = maxControlLatency
        cfg.sweep = sweep
        cfg.sweepSeconds = sweepSeconds ?? 1.5
        // Ctrl-C (or SIGTERM) ends the measurements where they are and prints what was measured.
        let runner = BenchRunner(configuration: cfg)
        let interrupt = onInterrupt(runner.interrupter)
        defer { interrupt.cancel() }
        var result = try runner.run()
        // A bench cut short is not compared: its missing parts would read as changes.
        if let old, result.interruptedDuring == nil { result.comparison = result.compared(with: old) }
        if old != nil, let during = result.interruptedDuring {
            StandardStreams.error("viewfinder: the bench was interrupted during \(during): not compared with the baseline\n")
        }
        // The measurements first: a report that cannot be written does not lose them.
        if json {
            print(String(decoding: try result.jsonData(), as: UTF8.self))
        } else {
            print(BenchCommand.summary(result))
        }
        if let report {
            do { try AtomicFile.write(Array(HTMLReport.render(result).utf8), to: report, overwrite: true) } catch {
                throw BenchError.cannotWrite(path: report, reason: Self.reason(error))
            }
        }
        if failOnRegression, old != nil, let during = result.interruptedDuring {
            throw RuntimeFailure(message: "interrupted during \(during): nothing was compared with \(baseline ?? "the baseline") (--fail-on-regression needs a whole bench)")
        }
        if failOnRegression, let c = result.comparison, c.regressions > 0 {
            throw RuntimeFailure(message: "\(c.regressions) regression(s) against \(baseline ?? "the baseline"): " + c.metrics.filter { $0.verdict == .regression }.map(\.metric).joined(separator: ", "))
        }
    }

    /// Whether `path` can take the report (`AtomicFile`'s rule, where it will be written).
    static func checkWritable(_ path: String) throws {
        do { try AtomicFile.checkWritable(path) } catch { throw BenchError.cannotWrite(path: path, reason: reason(error)) }
    }

    /// Why a file could not be written, without its path (the message names it once).
    static func reason(_ error: any Error) -> String {
        switch error {
        case StreamFileError.cannotOpen(_, let e, let m): return "\(m) (errno \(e))"
        case SinkError.io(_, let op, let e, let m): return "\(op) failed: \(m) (errno \(e))"
        case SinkError.diskFull: return "no space left on the device"
        default: return "\(error)"
        }
    }

    static func summary(_ r: BenchReport) -> String {
        let c = r.camera
        var s = r.device
        if let f = r.format { s += ": \(f.pixelFormat) \(f.width)x\(f.height) at \(String(format: "%.2f", f.nominalFps)) fps nominal" }
        // Intervals are between consecutive sequence numbers only (a gap's span is in the gaps).
        let intervals = c.intervalMs.count == 0
            ? "interval between consecutive frames: none (every pair had a gap)"
            : String(format: "interval between consecutive frames (%d) p50 %.2f p99 %.2f max %.2f ms", c.intervalMs.count, c.intervalMs.p50, c.intervalMs.p99, c.intervalMs.max)
        s += String(format: "\n  measured %.3f fps (%.3f delivered) over %d frames; %d gaps (%llu missing); %@; timestamp jitter %.3f ms",
                    c.measuredFps, c.deliveredFps, c.frames, c.sequenceGaps, c.framesMissing, intervals, c.timestampJitterMs)
        if let during = r.interruptedDuring {
            s += "\n  interrupted (Ctrl-C or SIGTERM) during \(during): the figures cover what was measured until then"
        }
        if let n = c.endedEarlyAfterFrames {
            s += "\n  ended early, after \(n) frames (\(String(format: "%.2f", r.durationSeconds)) s): the source delivered faster than its nominal rate and filled the frames kept for the duration asked; the figures cover those frames"
        }
        s += String(format: "\n  driver to process p50 %.2f p99 %.2f ms; capture to output p50 %.2f p99 %.2f ms", c.driverToProcessMs.p50, c.driverToProcessMs.p99,
                    r.pipeline.captureToOutputMs.p50, r.pipeline.captureToOutputMs.p99)
        if let o = c.openToFirstFrameMs { s += String(format: "; open to first frame %.1f ms", o) }
        for ctl in r.controls {
            s += "\n  control \(ctl.control.rawValue): " + (ctl.latencyFrames.map { "\($0) frames (\(ctl.agreeingSteps) of \(ctl.steps.count) steps agree)" } ?? "not measured: \(ctl.error ?? "")")
        }
        for st in r.pipeline.stages { s += String(format: "\n  stage %@: p50 %.1f p99 %.1f max %.1f µs", st.name, st.p50Us, st.p99Us, st.maxUs) }
        if !r.pipeline.drops.isEmpty { s += "\n  dropped: " + r.pipeline.drops.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") }
        for e in r.sweep { s += "\n  mode \(e.pixelFormat) \(e.width)x\(e.height) @ \(String(format: "%.1f", e.nominalFps)): " + (e.deliveredFps.map { String(format: "%.2f fps delivered%@", $0, e.deliversNominalRate ? "" : " (short)") } ?? "failed: \(e.error ?? "")") }
        if let cmp = r.comparison {
            s += "\n  against the baseline: \(cmp.regressions) regression(s) in \(cmp.metrics.count) metrics compared"
            for change in cmp.setupChanges ?? [] { s += "\n    measured differently — \(change)" }
            for m in cmp.metrics where m.verdict != .unchanged { s += String(format: "\n    %@ %@: %.3f → %.3f (allowed ±%.3f)", m.verdict.rawValue, m.metric, m.baseline, m.current, m.noise) }
            if let n = cmp.notCompared, !n.isEmpty { s += "\n    not compared (in one run only): " + n.joined(separator: ", ") }
        }
        return s
    }
}
