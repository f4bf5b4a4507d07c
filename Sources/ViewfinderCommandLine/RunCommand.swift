import ArgumentParser
import Dispatch
import Foundation
import ViewfinderKit

/// The stream a command asks a device for (`run`, `record`, `dump`, `snap`, `preview` through
/// ``DeviceOptions``; `bench` on its own), held to the same limits everywhere.
struct StreamRequestOptions: ParsableArguments {
    @Option(help: "Pixel format to request (yuyv, nv12, mjpeg, …).") var format: String?
    @Option(parsing: .unconditional, help: "Width to request, pixels.") var width: Int?
    @Option(parsing: .unconditional, help: "Height to request, pixels.") var height: Int?
    @Option(parsing: .unconditional, help: "Frame rate to request, frames per second.") var fps: Double?

    func validate() throws {
        // (`--width -5` is read as the value -5 and refused here, not as a missing value.)
        try checkStreamRequest(width: width, height: height, fps: fps)
        _ = try pixelFormat
    }

    /// Whether any part of the stream was asked for.
    var isEmpty: Bool { format == nil && width == nil && height == nil && fps == nil }

    /// `--format` as a pixel format (nil when not given); an unknown name is a usage error.
    var pixelFormat: PixelFormat? {
        get throws {
            guard let f = format else { return nil }
            guard let p = PixelFormat(name: f) else { throw ValidationError("unknown pixel format '\(f)' (known: \(PixelFormat.allCases.map(\.rawValue).joined(separator: ", ")))") }
            return p
        }
    }
}

/// Options shared by the commands that open a device.
struct DeviceOptions: ParsableArguments {
    @Option(name: .long, help: "Device: sim[:options], /dev/videoN, dump:FILE, pattern[:options]. Default: the pipeline file's device, else sim.")
    var device: String?
    @Option(help: "Session preset: \(SessionPreset.allCases.map(\.rawValue).joined(separator: ", ")). Default: inputPriority (the device's own format).")
    var preset: String?
    @OptionGroup var stream: StreamRequestOptions

    func validate() throws {
        // A preset chooses the whole stream: with a part of it asked for as well, one of the two
        // would be ignored (the preset was, silently).
        if let p = preset, p != SessionPreset.inputPriority.rawValue, !stream.isEmpty {
            let given = [("--format", stream.format != nil), ("--width", stream.width != nil), ("--height", stream.height != nil), ("--fps", stream.fps != nil)]
                .filter(\.1).map(\.0).joined(separator: ", ")
            throw ValidationError("--preset \(p) chooses the size, rate and format; give it or \(given), not both")
        }
    }

    /// Opens the device and makes a session with it as the input.
    func makeSession(defaultDevice: String?, registry: StageRegistry) throws -> (CaptureSession, CaptureDevice) {
        let id = device ?? defaultDevice ?? "sim"
        let dev = try CaptureDevice.open(id, directory: .standard)
        let session = CaptureSession(registry: registry)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: dev))
        let presetValue: SessionPreset
        if let p = preset {
            guard let v = SessionPreset(rawValue: p) else {
                throw ValidationError("unknown preset '\(p)' (known: \(SessionPreset.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            presetValue = v
        } else { presetValue = .inputPriority }
        if !stream.isEmpty {
            let active = dev.source.activeConfiguration
            let pf = try stream.pixelFormat ?? active?.format.pixelFormat ?? .yuyv
            let req = StreamRequest(pixelFormat: pf, width: stream.width ?? active?.format.width ?? 1280, height: stream.height ?? active?.format.height ?? 720,
                                    fps: stream.fps ?? active?.interval.fps)
            try dev.configure { s in
                s.activeFormat = req
                s.exposureMode = .locked
                s.focusMode = .locked
            }
            try session.setSessionPreset(.inputPriority)
        } else {
            try dev.configure { s in s.exposureMode = .locked; s.focusMode = .locked }
            try session.setSessionPreset(presetValue)
        }
        try session.commitConfiguration()
        return (session, dev)
    }
}

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Capture from a device through stages; print a live status line and a summary.")

    @OptionGroup var deviceOptions: DeviceOptions
    @Option(help: "Stages, e.g. exposure:mode=continuous,focus,deadline:max_age_ms=50.") var stages: String?
    @Option(help: "A pipeline file (JSON: {\"device\": ..., \"stages\": [{\"name\": ..., \"options\": {...}}]}).") var config: String?
    @Option(parsing: .unconditional, help: "Stop after this many frames have been captured.") var frames: UInt64?
    @Option(parsing: .unconditional, help: "Stop after this many seconds.") var duration: Double?
    @Flag(help: "Print the summary as one JSON object.") var json = false
    @Option(help: "Write one JSON line of metadata per frame to this file.") var metadata: String?
    @OptionGroup var frameOutput: FrameOutputOptions
    @Flag(help: "Overwrite existing --output and --metadata files (a fifo or a device is written into either way).")
    var force = false
    @OptionGroup var audioOptions: AudioOptions

    func validate() throws {
        if stages != nil && config != nil { throw ValidationError("give --stages or --config, not both") }
        if let f = frames, f == 0 { throw ValidationError("--frames must be at least 1") }
        if force && frameOutput.output == nil && metadata == nil { throw ValidationError("--force needs --output or --metadata") }
        try checkDuration(duration)
    }

    func run() throws {
        var specs: [StageSpec] = []
        var fileDevice: String?
        if let config {
            let p = try PipelineConfiguration.load(path: config)
            specs = p.stages
            fileDevice = p.device
        } else if let stages {
            specs = try StageSpec.parseList(stages)
        }
        let source = inputFile(ofDevice: deviceOptions.device ?? fileDevice)
        try refuseOverwritingInput(frameOutput.output, inputs: [source])
        try refuseOverwritingInput(metadata, inputs: [source, config], what: "metadata file")
        try refuseOneFileForTwoOutputs(("--output", frameOutput.output), ("--metadata", metadata))
        try refuseExistingRegularFile(frameOutput.output, force: force)
        try refuseExistingRegularFile(metadata, force: force)
        // Checked before anything is captured, by the rule the writer opens it by (`StreamFile`).
        if let metadata {
            do { try StreamFile.checkWritable(metadata) } catch {
                throw RuntimeFailure.cannotCreate("metadata file", metadata, error)
            }
        }
        if let output = frameOutput.output, output != "-" {
            do { try StreamFile.checkWritable(output) } catch {
                throw RuntimeFailure.cannotCreate("output", output, error)
            }
        }
        let (session, dev) = try deviceOptions.makeSession(defaultDevice: fileDevice, registry: ViewfinderCommandLine.stages)
        session.beginConfiguration()
        try session.setStages(specs)
        var options = EngineOptions(frameLimit: frames, durationSeconds: duration)
        if !dev.source.isLive { options.stallTimeoutSeconds = 30 }
        try session.setEngineOptions(options)
        let null = NullConsumer(name: "null")
        try session.addOutput(null)
        let frameOutputs = try frameOutput.addOutputs(to: session)
        var writer: MetadataWriter?
        if let metadata {
            let w = MetadataWriter(path: metadata)
            // Said when it happens (the capture and the other outputs go on), and again at the end.
            w.onFailure = { StandardStreams.error("viewfinder: warning: \($0); the run goes on without it\n") }
            writer = w
            try session.addOutput(w)
        }
        try audioOptions.attach(to: session, camera: dev)
        try session.commitConfiguration()

        // A runtime error ends the run (the command exits 1 with it anyway): an output that could
        // not start — a ring /dev/shm has no room for, a fifo with no reader — used to leave the
        // camera capturing into it, every frame dropped, until Ctrl-C.
        let errors = LockedBox<[any Error]>([])
        session.onEvent { [weak session] e in
            guard let error = e.error else { return }
            errors.withLock { $0.append(error) }
            // A microphone that fails or goes is the sound's: the video goes on (the command
            // still exits 1 with it at the end).
            if !(error is AudioError) { session?.requestStop() }
        }

        // Ctrl-C or SIGTERM stops capture; what was captured still flows out — to a pipe's reader
        // too, unless it stopped reading (then the output gives up after a second).
        let pipe = frameOutputs.pipe
        let interrupt = onInterrupt {
            pipe?.stopWaitingForTheReader(after: 1)
            session.stopRunning()
        }
        defer { interrupt.cancel() }

        try session.startRunning()
        // Ctrl-C while the session was starting: stop now, not at the limit.
        if interrupt.requested { session.stopRunning() }
        let showStatus = !json && isatty(STDERR_FILENO) != 0
        let status = showStatus ? StatusLine(session: session) : nil
        session.waitUntilFinished()
        status?.stop()
        session.stopRunning()

        guard let stats = session.statistics else { return }
        let cfg = session.streamConfiguration
        let runErrors = errors.withLock { $0 }
        var summary = Summary(device: dev.uniqueID, configuration: cfg, stats: stats, errors: runErrors.map { "\($0)" }, metadataLines: writer?.lines, metadataPath: metadata)
        summary.audio = session.audioStatistics
        let outputsSummary = frameOutputs.summary(stats)
        let report = json ? jsonString(summary.dictionary.merging(outputsSummary) { a, _ in a }) : summary.text + frameOutputs.text(stats)
        FrameOutputs.printSummary(report, toStderr: frameOutput.usesStdout)
        if let w = writer, let f = w.failure { throw RuntimeFailure(message: "writing the metadata file '\(w.path)' failed after \(w.lines) lines: \(f)") }
        // The run's first error, with its type: the exit code follows from it.
        if let e = runErrors.first { throw e }
        try frameOutputs.checkFailures()
    }
}


/// The live status line on a terminal: fps, drops by reason, per-stage time, latency.
final class StatusLine: @unchecked Sendable {
    // @unchecked Sendable: `thread` is only touched by the creating thread.
    private let stopFlag = LockedBox(false)
    private var thread: EngineThread?

    init(session: CaptureSession) {
        let stopFlag = self.stopFlag
        thread = EngineThread(name: "vf-status") {
            var lastCount: UInt64 = 0
            var lastTime = monotonicNanoseconds()
            while !stopFlag.withLock({ $0 }) {
                sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + 500_000_000)
                guard let s = session.statistics else { continue }
                let now = monotonicNanoseconds()
                let n = s.captured
                let fps = Double(n - lastCount) / (Double(now - lastTime) / 1e9)
                lastCount = n; lastTime = now
                var line = String(format: "\r%6.1f fps  captured %llu  delivered %llu", fps, n, s.delivered)
                let drops = s.drops.byName
                if !drops.isEmpty { line += "  dropped " + drops.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
                for (name, us) in zip(s.stageNames, s.stageMeanMicroseconds) { line += String(format: "  %@ %.0fµs", name, us) }
                line += String(format: "  latency p50 %.1f p99 %.1f ms  ", Double(s.latency.quantile(0.5)) / 1e6, Double(s.latency.quantile(0.99)) / 1e6)
                if let a = session.audioStatistics { line += audioText(a, live: true) + "  " }
                StandardStreams.error(line)
            }
            StandardStreams.error("\n")
        }
    }

    func stop() {
        stopFlag.withLock { $0 = true }
        thread?.join()
    }
}

/// The end-of-run summary.
struct Summary {
    let device: String
    let configuration: StreamConfiguration?
    let stats: EngineStatistics
    let errors: [String]
    let metadataLines: Int?
    let metadataPath: String?
    var audio: AudioStatistics? = nil

    var dictionary: [String: Any] {
        var d: [String: Any] = [
            "device": device,
            "captured": stats.captured,
            "delivered": stats.delivered,
            "dropped": stats.drops.byName,
            "dropped_total": stats.drops.total,
            "seconds": stats.elapsedSeconds,
            // Rates over the span from the first frame to the last (not the device's start-up).
            "fps": stats.capturedFps,
            "delivered_fps": stats.deliveredFps,
            "frames_seconds": stats.frameSpanSeconds,
            "latency_ms": ["p50": Double(stats.latency.quantile(0.5)) / 1e6, "p99": Double(stats.latency.quantile(0.99)) / 1e6],
            "stages": zip(stats.stageNames, stats.stageMeanMicroseconds).map { ["name": $0.0, "mean_us": $0.1] },
            "outputs": stats.consumers.map { ["name": $0.name, "consumed": $0.consumed, "dropped": $0.drops.byName] as [String: Any] },
        ]
        if let c = configuration {
            d["format"] = ["pixel_format": c.format.pixelFormat.rawValue, "width": c.format.width, "height": c.format.height, "fps": c.interval.fps]
        }
        if stats.decodeScale > 0 { d["decode"] = ["scale": "1/\(stats.decodeScale)", "mean_us": stats.decodeMeanMicroseconds] }
        if !errors.isEmpty { d["errors"] = errors }
        if let audio { d["audio"] = audioDictionary(audio) }
        if let metadataPath { d["metadata"] = ["path": metadataPath, "lines": metadataLines ?? 0] }
        if stats.framesWithRefusedMetadata > 0 { d["frames_with_refused_metadata"] = stats.framesWithRefusedMetadata }
        return d
    }

    var json: String { jsonString(dictionary) }

    var text: String {
        var s = "\(device)"
        if let c = configuration { s += ": \(c.format) at \(c.interval)" }
        s += "\n  captured \(stats.captured), delivered \(stats.delivered), dropped \(stats.drops.total)"
        let drops = stats.drops.byName
        if !drops.isEmpty { s += " (" + drops.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")" }
        s += String(format: "\n  %.2f s (frames over %.2f s): %.1f fps from the camera, %.1f delivered; latency p50 %.2f ms, p99 %.2f ms",
                    stats.elapsedSeconds, stats.frameSpanSeconds, stats.capturedFps, stats.deliveredFps,
                    Double(stats.latency.quantile(0.5)) / 1e6, Double(stats.latency.quantile(0.99)) / 1e6)
        if stats.decodeScale > 0 { s += String(format: "\n  decoded view for the stages (1/%d): %.1f µs/frame", stats.decodeScale, stats.decodeMeanMicroseconds) }
        for (n, us) in zip(stats.stageNames, stats.stageMeanMicroseconds) { s += String(format: "\n  stage %@: %.1f µs/frame", n, us) }
        for c in stats.consumers where c.name != "null" {
            s += "\n  output \(c.name): \(c.consumed) frames"
            if c.drops.total > 0 { s += ", \(c.drops)" }
        }
        if let audio { s += "\n  " + audioText(audio) + "  samples \(audio.frames)" }
        if let metadataPath { s += "\n  metadata: \(metadataLines ?? 0) lines in \(metadataPath)" }
        if stats.framesWithRefusedMetadata > 0 {
            s += "\n  custom metadata: keys refused on \(stats.framesWithRefusedMetadata) frames (all \(CustomMetadata.capacity) slots taken)"
        }
        for e in errors { s += "\n  error: \(e)" }
        return s
    }
}
