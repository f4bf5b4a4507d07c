import Foundation
import Logging
import ViewfinderKit

/// What to measure and for how long.
public struct BenchConfiguration: Sendable {
    /// The device string (`sim:latency=3`, `/dev/video0`, …).
    public var device: String
    /// The pipeline's stages, in `--stages` syntax (empty: none).
    public var stages: String = ""
    /// The stages `stages` names (the built-in ones; merge yours in to measure them).
    public var registry: StageRegistry = .builtIn
    /// Seconds of the pipeline run (camera timing and stage times).
    public var durationSeconds: Double = 5
    /// The mode to request (nil fields: the device's own).
    public var pixelFormat: PixelFormat?
    public var width: Int?
    public var height: Int?
    public var fps: Double?
    /// Controls to step for the control latency (those the device lacks are reported as such).
    public var controls: [SteppedControl] = [.exposure, .gain, .focus]
    /// Steps per control (alternately away and back).
    public var stepsPerControl: Int = 3
    /// The largest control latency looked for, frames (the window watched after each step).
    public var maxControlLatencyFrames: Int = 10
    /// Measure every listed mode (format × size at its fastest listed rate) for `sweepSeconds`.
    public var sweep = false
    public var sweepSeconds: Double = 1.5

    public init(device: String) { self.device = device }
}

/// Runs a bench: the pipeline run (camera timing, stage times, drops, threads), the control run
/// (steps and their responses in the pictures) and optionally the mode sweep, one after another,
/// each on the device opened afresh.
public struct BenchRunner {
    public let configuration: BenchConfiguration
    /// Called on the bench's thread as the control steps get done, with how many are (tests
    /// interrupt at a known step with it).
    var onControlStepsDone: (@Sendable (Int) -> Void)?
    public let logger: Logger
    private let stop = StopSwitch()

    /// Asks for the measurements to end (Ctrl-C): the run that is going on stops at its next frame
    /// and the later ones are not started; ``run()`` returns the report of what was measured, its
    /// ``BenchReport/interruptedDuring`` saying where it ended (control steps cut short are left
    /// out whole). From any thread. The request stays: a runner is for one bench.
    public func interrupt() { stop.trip() }

    /// ``interrupt()`` as a closure another thread or a signal handler can keep.
    public var interrupter: @Sendable () -> Void { { [stop] in stop.trip() } }

    /// The interruption flag and the session it stops (shared by the copies of the runner).
    private final class StopSwitch: @unchecked Sendable {
        private let state = LockedBox<(tripped: Bool, session: CaptureSession?)>((false, nil))
        var tripped: Bool { state.withLock { $0.tripped } }
        func trip() { state.withLock { $0.tripped = true; return $0.session }?.requestStop() }
        /// Runs `session` under the switch: stopped at once if it was tripped before.
        func watch(_ session: CaptureSession?) {
            if state.withLock({ s -> Bool in s.session = session; return s.tripped }) { session?.requestStop() }
        }
    }

    public init(configuration: BenchConfiguration, logger: Logger = Logger(label: "viewfinder.bench")) {
        self.configuration = configuration
        self.logger = logger
    }

    public func run() throws -> BenchReport {
        let c = configuration
        let specs = c.stages.isEmpty ? [] : try StageSpec.parseList(c.stages)
        let openedAt = monotonicNanoseconds()
        let device = try CaptureDevice.open(c.device, directory: .standard)

        // 1. The pipeline run.
        let (session, recorder) = try makeSession(device: device, specs: specs, request: requestedMode(device), duration: c.durationSeconds, recorder: { fps in
            FrameRecorder(capacity: Int(c.durationSeconds * max(fps, 1) * 1.5) + 256)
        })
        // A source faster than its nominal rate (an unpaced one) fills the frames kept for the
        // duration asked: the run ends there and the report says so, rather than measuring the
        // first part of the run as if it were all of it.
        recorder.whenFull { [weak session] in session?.requestStop() }
        let before = ThreadCPU.sample()
        let startedAt = monotonicNanoseconds()
        try session.startRunning()
        stop.watch(session)
        let sampler = RunSampler(session: session, start: startedAt, before: before)
        session.waitUntilFinished()
        stop.watch(nil)
        session.stopRunning()
        sampler.stop()
        let wall = Double(monotonicNanoseconds() - startedAt) / 1e9
        let cfg = session.streamConfiguration
        let nominal = cfg?.interval.fps ?? 0
        let samples = recorder.samples
        guard let stats = session.statistics, samples.count >= 2 else {
            // Who is to blame for no measurement: a Ctrl-C, a --duration shorter than two frames
            // of the device's own rate, or the device.
            if stop.tripped { throw BenchError.interruptedBeforeFrames(device: c.device, seconds: wall, frames: samples.count) }
            if nominal > 0 && c.durationSeconds < 2.5 / nominal {
                throw BenchError.durationTooShort(device: c.device, seconds: c.durationSeconds, frames: samples.count, nominalFps: nominal)
            }
            throw BenchError.noFrames(device: c.device, seconds: wall)
        }
        var camera = BenchAnalysis.camera(samples, nominalFps: nominal, pipelineDrops: recorder.pipelineDrops)
        if recorder.overflow > 0 { camera.endedEarlyAfterFrames = samples.count }
        camera.openToFirstFrameMs = samples.first.map { Double($0.received &- openedAt) / 1e6 }
        camera.startToFirstFrameMs = samples.first.map { Double($0.received &- startedAt) / 1e6 }
        let pipeline = BenchAnalysis.pipeline(stats, samples: samples, threads: sampler.cpu.values.map { ($0.name, $0.last - $0.first) }, wallSeconds: wall, timeline: sampler.points, ringCapacities: sampler.ringCapacities)
        let deviceID = device.uniqueID
        BenchRunner.close(device)

        var interrupted: String? = stop.tripped ? "the pipeline run" : nil

        // 2. The control run, on the device opened again (see `close(_:)`).
        // A control whose steps were cut short is no measurement and is left out whole; those
        // whose steps had all been done before the interruption are kept.
        let measured = interrupted == nil ? try measureControls() : (results: [], cutShort: false)
        let controls = measured.results
        if interrupted == nil && measured.cutShort { interrupted = "the control steps" }

        // 3. The sweep.
        let sweep = c.sweep && interrupted == nil ? sweepModes(formats: device.formats) : []
        if interrupted == nil && stop.tripped && c.sweep { interrupted = "the mode sweep" }

        var report = BenchReport(
            device: deviceID, stages: specs.map(\.description),
            format: cfg.map { FormatSummary(pixelFormat: $0.format.pixelFormat.rawValue, width: $0.format.width, height: $0.format.height, nominalFps: $0.interval.fps) },
            durationSeconds: wall, camera: camera, controls: controls, pipeline: pipeline, sweep: sweep,
            series: BenchAnalysis.series(samples), comparison: nil)
        report.interruptedDuring = interrupted
        return report
    }

    /// The mode the configuration asks for, completed from the device's active one (nil: keep it).
    func requestedMode(_ device: CaptureDevice) -> StreamRequest? {
        let c = configuration
        guard c.pixelFormat != nil || c.width != nil || c.height != nil || c.fps != nil else { return nil }
        let active = device.source.activeConfiguration
        return StreamRequest(pixelFormat: c.pixelFormat ?? active?.format.pixelFormat ?? .yuyv,
                             width: c.width ?? active?.format.width ?? 1280, height: c.height ?? active?.format.height ?? 720,
                             fps: c.fps ?? active?.interval.fps)
    }

    /// A session on `device` with `specs`, exposure and focus locked (no loop fights the steps),
    /// and a recorder made for the mode's rate.
    func makeSession(device: CaptureDevice, specs: [StageSpec], request: StreamRequest?, duration: Double,
                     recorder make: (Double) -> FrameRecorder) throws -> (CaptureSession, FrameRecorder) {
        let session = CaptureSession(registry: configuration.registry, logger: logger)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: device))
        try device.configure { s in
            if let request { s.activeFormat = request }
            s.exposureMode = .locked
            s.focusMode = .locked
        }
        try session.setSessionPreset(.inputPriority)
        try session.setStages(specs)
        var options = EngineOptions(durationSeconds: duration)
        if !device.source.isLive { options.stallTimeoutSeconds = 30 }
        try session.setEngineOptions(options)
        let fps = request?.fps ?? device.source.activeConfiguration?.interval.fps ?? 30
        let recorder = make(fps)
        try session.addOutput(recorder)
        try session.commitConfiguration()
        return (session, recorder)
    }

    /// Closes a V4L2 camera once its run is over. A session stopped with frames still in its
    /// rings leaves the kernel's buffers allocated, and a second session on the same open node
    /// then fails with EBUSY (seen with vivid); each run therefore opens the device afresh and
    /// closes it after. Other sources need nothing.
    static func close(_ device: CaptureDevice) {
        (device.source as? V4L2Camera)?.close()
    }

    /// Steps each control and reads its latency from the pictures.
    /// Each control's latency, stepped as configured. Interrupted, only the controls whose steps
    /// were all done (`cutShort` then).
    func measureControls() throws -> (results: [ControlLatencyResult], cutShort: Bool) {
        let c = configuration
        guard !c.controls.isEmpty else { return ([], false) }
        let device = try CaptureDevice.open(c.device, directory: .standard)
        defer { BenchRunner.close(device) }
        guard let dc = device.controls else {
            return (c.controls.map { ControlLatencyAnalysis.result(control: $0, name: nil, responses: []) }, false)
        }
        var cutShort = false
        let stepper = ControlStepper(device: dc, controls: c.controls, repeats: c.stepsPerControl, maxLatencyFrames: c.maxControlLatencyFrames)
        var results: [ControlLatencyResult] = []
        var responses: [StepResponse] = []
        var samples: [FrameSample] = []
        if !stepper.steps.isEmpty {
            let fps = device.source.activeConfiguration?.interval.fps ?? 30
            let frames = Double(stepper.steps.count * (stepper.baselineFrames + stepper.window + 1))
            // Twice the planned time, plus start-up: the run ends as soon as the steps are done.
            let limit = 2 * frames / max(fps, 1) + 3
            let (session, recorder) = try makeSession(device: device, specs: [], request: requestedMode(device), duration: limit, recorder: { _ in
                FrameRecorder(name: "bench-controls", capacity: Int(frames * 2) + 64, stepper: stepper)
            })
            try session.startRunning()
            var seen = 0
            while !recorder.stepsDone && session.isRunning && !stop.tripped {
                sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + 20_000_000)
                let done = recorder.stepsCompleted
                if done != seen { seen = done; onControlStepsDone?(done) }
            }
            session.stopRunning()
            session.waitUntilFinished()
            cutShort = stop.tripped && !recorder.stepsDone
            let completed = recorder.stepsCompleted
            samples = recorder.samples
            for step in recorder.steps {
                let minimum = step.control.measure == .luma ? 1.0 : 0
                responses.append(ControlLatencyAnalysis.response(of: step, in: samples, baselineFrames: stepper.baselineFrames, window: stepper.window, minimumChange: minimum))
            }
            // Put the controls back where they were.
            var firstFrom: [String: Int64] = [:]
            for s in recorder.steps where firstFrom[s.name] == nil { firstFrom[s.name] = s.from }
            for (name, v) in firstFrom { try? dc.set(name, to: v) }
            let steps = recorder.steps
            for control in c.controls {
                let idx = steps.indices.filter { steps[$0].control == control }
                if cutShort && !idx.allSatisfy({ $0 < completed }) { continue }
                let name = dc.descriptor(control.standard)?.name
                results.append(ControlLatencyAnalysis.result(control: control, name: name, responses: idx.map { responses[$0] }))
            }
        } else {
            for control in c.controls {
                results.append(ControlLatencyAnalysis.result(control: control, name: dc.descriptor(control.standard)?.name, responses: []))
            }
        }
        return (results, cutShort)
    }

    /// Each listed format and size at its fastest listed rate, for `sweepSeconds` each (the
    /// device opened afresh for each mode).
    func sweepModes(formats: [FormatDescription]) -> [SweepEntry] {
        var out: [SweepEntry] = []
        // Formats this build cannot name (an unknown fourcc) cannot be requested: left out.
        for f in formats {
            guard let pf = f.pixelFormat else { continue }
            for size in f.sizes where !stop.tripped {
                guard case .discrete(let w, let h, let intervals) = size, let best = intervals.max(by: { $0.fps < $1.fps }) else { continue }
                var e = SweepEntry(pixelFormat: pf.rawValue, width: w, height: h, nominalFps: best.fps, measuredFps: nil, frames: 0, framesMissing: 0, deliveredFps: nil, deliversNominalRate: false, error: nil)
                do {
                    let req = StreamRequest(pixelFormat: pf, width: w, height: h, fps: best.fps)
                    let seconds = configuration.sweepSeconds
                    let device = try CaptureDevice.open(configuration.device, directory: .standard)
                    defer { BenchRunner.close(device) }
                    let (session, recorder) = try makeSession(device: device, specs: [], request: req, duration: seconds, recorder: { fps in
                        FrameRecorder(name: "bench-sweep", capacity: Int(seconds * max(fps, 1) * 2) + 64)
                    })
                    try session.startRunning()
                    stop.watch(session)
                    session.waitUntilFinished()
                    stop.watch(nil)
                    session.stopRunning()
                    if stop.tripped {
                        e.error = "interrupted (Ctrl-C or SIGTERM) before the mode's \(seconds) s"
                        out.append(e)
                        break
                    }
                    let cam = BenchAnalysis.camera(recorder.samples, nominalFps: session.streamConfiguration?.interval.fps ?? best.fps, pipelineDrops: recorder.pipelineDrops)
                    e.nominalFps = cam.nominalFps
                    e.frames = cam.frames
                    e.framesMissing = cam.framesMissing
                    if cam.frames >= 2 {
                        e.measuredFps = cam.measuredFps
                        e.deliveredFps = cam.deliveredFps
                    } else {
                        e.error = "\(cam.frames) frame(s) in \(seconds) s"
                    }
                    e.deliversNominalRate = cam.deliversNominalRate
                } catch {
                    e.error = "\(error)"
                }
                out.append(e)
            }
        }
        return out
    }
}
