import Logging
import Synchronization

/// What a session reports while it runs.
public enum SessionEvent: Sendable, CustomStringConvertible {
    case didStartRunning
    case didStopRunning
    /// The stream ended with an error (a disconnected camera, a stalled stream, a sink failure).
    case runtimeError(String)
    /// The device became unavailable (disconnected, taken by another program).
    case wasInterrupted(reason: String)
    case interruptionEnded

    public var description: String {
        switch self {
        case .didStartRunning: return "did start running"
        case .didStopRunning: return "did stop running"
        case .runtimeError(let e): return "runtime error: \(e)"
        case .wasInterrupted(let r): return "interrupted: \(r)"
        case .interruptionEnded: return "interruption ended"
        }
    }
}

/// Coordinates inputs and outputs (AVFoundation's `AVCaptureSession`).
///
/// - Add a ``CaptureDeviceInput`` and outputs; connections form automatically by media type.
/// - Change things between ``beginConfiguration()`` and ``commitConfiguration()``: the batch is
///   validated as a whole and applied atomically. An invalid batch is rejected with a clear error
///   and a running session keeps its old configuration.
/// - ``startRunning()`` resolves the preset against the device, builds the stage chain (the
///   device's exposure/focus modes become the `exposure`/`focus` stages when the registry has them,
///   followed by the session's own ``stages``) and starts the engine's threads.
public final class CaptureSession: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is guarded by `lock` (configuration, engine handle,
    // event subscribers); the engine runs on its own threads.
    public struct Configuration: Sendable {
        public var inputs: [CaptureInput] = []
        public var outputs: [any CaptureOutput] = []
        public var preset: SessionPreset = .high
        public var stages: [StageSpec] = []
        public var engineOptions = EngineOptions()
    }

    public let registry: StageRegistry
    public let logger: Logger
    private let lock = ConditionLock()
    private var committed = Configuration()
    private var pending: Configuration?
    private var connectionsStore: [CaptureConnection] = []
    private var engine: CaptureEngine?
    /// The counts of the last run, kept after it stops.
    private var lastStatistics: EngineStatistics?
    private var resolved: StreamConfiguration?
    /// Event handlers, under their own lock so that events can be emitted with `lock` held.
    private let handlers = LockedBox<[@Sendable (SessionEvent) -> Void]>([])
    private let relay = SettingsRelay()

    /// - Parameters:
    ///   - registry: the stages pipelines may name (`StageRegistry.builtIn` from ViewfinderKit).
    public init(registry: StageRegistry = StageRegistry([]), logger: Logger = Logger(label: "viewfinder.session")) {
        self.registry = registry
        self.logger = logger
    }

    // MARK: Events

    /// Registers a handler for session events (called on an engine thread).
    public func onEvent(_ handler: @escaping @Sendable (SessionEvent) -> Void) {
        handlers.withLock { $0.append(handler) }
    }

    /// Session events as an async sequence.
    public func events() -> AsyncStream<SessionEvent> {
        AsyncStream { continuation in onEvent { continuation.yield($0) } }
    }

    private func emit(_ e: SessionEvent) {
        let hs = handlers.withLock { $0 }
        for h in hs { h(e) }
    }

    // MARK: Configuration

    private func current() -> Configuration { pending ?? committed }

    /// Starts a batch of changes.
    public func beginConfiguration() {
        lock.withLock { if pending == nil { pending = committed } }
    }

    /// Validates and applies the batch as a whole. On error nothing changes.
    public func commitConfiguration() throws {
        try lock.withLock {
            guard let p = pending else { throw SessionError.notInConfiguration }
            pending = nil
            try apply(p)
        }
    }

    /// Runs a change: inside a batch it is staged, outside it is committed at once.
    private func change(_ body: (inout Configuration) throws -> Void) throws {
        try lock.withLock {
            if pending != nil {
                try body(&pending!)
            } else {
                var c = committed
                try body(&c)
                try apply(c)
            }
        }
    }

    /// Validates `c` and makes it the session's configuration (restarting a running engine).
    private func apply(_ c: Configuration) throws {
        try validate(c)
        let wasRunning = engine != nil
        let old = committed
        if wasRunning { stopEngine() }
        committed = c
        rebuildConnections()
        if wasRunning {
            do { try startEngine() } catch {
                logger.warning("new configuration failed to start, keeping the old one: \(error)")
                committed = old
                rebuildConnections()
                try? startEngine()
                throw error
            }
        }
    }

    private func validate(_ c: Configuration) throws {
        let videoInputs = c.inputs.compactMap { $0 as? CaptureDeviceInput }
        if videoInputs.count > 1 { throw SessionError.cannotAddInput(reason: "the session already has a video input (one camera per session)") }
        if let d = videoInputs.first?.device {
            guard c.preset.resolve(formats: d.formats, active: d.source.activeConfiguration, requested: d.settings.activeFormat) != nil else {
                throw SessionError.presetUnsupported(preset: c.preset.rawValue, device: d.uniqueID, available: Self.sizes(d.formats))
            }
        }
        // Every stage must exist and its options must be valid now, not at start.
        for s in c.stages where s.enabled { _ = try registry.makeStage(s) }
    }

    static func sizes(_ formats: [FormatDescription]) -> [String] {
        var seen: [String] = []
        for f in formats { for s in f.sizes { let m = s.maxSize; let t = "\(m.width)x\(m.height)"; if !seen.contains(t) { seen.append(t) } } }
        return seen
    }

    private func rebuildConnections() {
        for c in connectionsStore { c.output.sessionDidDisconnect(c) }
        connectionsStore = []
        for i in committed.inputs {
            for o in committed.outputs where o.acceptedMediaTypes.contains(i.mediaType) {
                let c = CaptureConnection(mediaType: i.mediaType, input: i, output: o)
                connectionsStore.append(c)
                o.sessionDidConnect(c)
            }
        }
    }

    /// The connections between inputs and outputs.
    public var connections: [CaptureConnection] { lock.withLock { connectionsStore } }

    public var inputs: [CaptureInput] { lock.withLock { current().inputs } }
    public var outputs: [any CaptureOutput] { lock.withLock { current().outputs } }

    public func canAddInput(_ input: CaptureInput) -> Bool {
        lock.withLock {
            let c = current()
            if c.inputs.contains(where: { $0 === input }) { return false }
            if input is CaptureDeviceInput && c.inputs.contains(where: { $0 is CaptureDeviceInput }) { return false }
            return true
        }
    }

    public func addInput(_ input: CaptureInput) throws {
        try change { c in
            if c.inputs.contains(where: { $0 === input }) { throw SessionError.cannotAddInput(reason: "it is already in the session") }
            if input is CaptureDeviceInput && c.inputs.contains(where: { $0 is CaptureDeviceInput }) {
                throw SessionError.cannotAddInput(reason: "the session already has a video input (one camera per session)")
            }
            c.inputs.append(input)
        }
    }

    public func removeInput(_ input: CaptureInput) {
        try? change { c in c.inputs.removeAll { $0 === input } }
    }

    public func canAddOutput(_ output: any CaptureOutput) -> Bool {
        lock.withLock { !current().outputs.contains { $0 === output } }
    }

    public func addOutput(_ output: any CaptureOutput) throws {
        try change { c in
            if c.outputs.contains(where: { $0 === output }) { throw SessionError.cannotAddOutput(reason: "it is already in the session") }
            c.outputs.append(output)
        }
    }

    public func removeOutput(_ output: any CaptureOutput) {
        try? change { c in c.outputs.removeAll { $0 === output } }
    }

    /// The preset in force (or staged).
    public var sessionPreset: SessionPreset { lock.withLock { current().preset } }

    /// Whether the preset can be used with the current inputs.
    public func canSetSessionPreset(_ preset: SessionPreset) -> Bool {
        lock.withLock {
            guard let d = current().inputs.compactMap({ $0 as? CaptureDeviceInput }).first?.device else { return true }
            return preset.resolve(formats: d.formats, active: d.source.activeConfiguration, requested: d.settings.activeFormat) != nil
        }
    }

    public func setSessionPreset(_ preset: SessionPreset) throws {
        try change { $0.preset = preset }
    }

    /// The session's own stages, after the device's control stages.
    public var stages: [StageSpec] { lock.withLock { current().stages } }

    public func setStages(_ specs: [StageSpec]) throws {
        try change { $0.stages = specs }
    }

    public func setEngineOptions(_ options: EngineOptions) throws {
        try change { $0.engineOptions = options }
    }

    // MARK: Running

    public var isRunning: Bool { lock.withLock { engine != nil && !(engine!.isFinished) } }

    /// What the device streams, once running.
    public var streamConfiguration: StreamConfiguration? { lock.withLock { resolved } }

    /// The running (or last) engine's counts.
    public var statistics: EngineStatistics? { lock.withLock { engine?.statistics ?? lastStatistics } }

    public func startRunning() throws {
        try lock.withLock {
            if let e = engine, !e.isFinished { throw SessionError.alreadyRunning }
            try startEngine()
        }
    }

    /// Stops capture; what was captured still reaches the outputs, which finish their files.
    public func stopRunning() {
        lock.withLock { stopEngine() }
    }

    /// Waits until the engine finishes by itself (frame or duration limit, end of a file, error).
    public func waitUntilFinished() {
        let e = lock.withLock { engine }
        e?.waitUntilFinished()
    }

    private func stopEngine() {
        guard let e = engine else { return }
        e.stop()
        e.waitUntilFinished()
        engine = nil
        emit(.didStopRunning)
    }

    private func startEngine() throws {
        let c = committed
        guard let input = c.inputs.compactMap({ $0 as? CaptureDeviceInput }).first else { throw SessionError.noVideoInput }
        let device = input.device
        guard let request = c.preset.resolve(formats: device.formats, active: device.source.activeConfiguration, requested: device.settings.activeFormat) else {
            throw SessionError.presetUnsupported(preset: c.preset.rawValue, device: device.uniqueID, available: Self.sizes(device.formats))
        }
        // The device's modes become control stages at the head of the chain, configured from the
        // device settings with points of interest mapped to sensor coordinates. They run inside
        // one `DeviceControlStages`, which rebuilds them between frames when the settings change.
        let videoConnection = connectionsStore.first { $0.mediaType == .video && $0.input === input }
        let settings = device.settings
        let registry = self.registry
        let build: @Sendable (DeviceSettings) throws -> [any Stage] = { [weak videoConnection] s in
            try CaptureSession.controlStageSpecs(s, connection: videoConnection, registry: registry, device: device).map { try registry.makeStage($0) }
        }
        var stages: [any Stage] = []
        // Only a device with exposure or focus controls can have modes to carry out.
        if device.isExposureModeSupported(.continuous) || device.isFocusModeSupported(.continuous) {
            stages.append(DeviceControlStages(relay: relay, initial: try build(settings), build: build, logger: logger))
        }
        for spec in c.stages where spec.enabled { stages.append(try registry.makeStage(spec)) }
        let consumers: [any FrameConsumer] = connectionsStore.filter { $0.input === input && $0.isEnabled }.map { $0.output }
        // Enough buffers for the look-ahead the stages hold and for every ring to fill.
        var sized = request
        sized.bufferCount = max(request.bufferCount, CaptureEngine.buffersNeeded(stages: stages, consumers: consumers, options: c.engineOptions))
        let cfg = try device.source.configure(sized)
        resolved = cfg

        relay.publish(settings)
        let relay = self.relay
        device.onSettingsChange = { s in relay.publish(s) }
        try applyManualControls(settings, device: device)

        let e = CaptureEngine(source: device.source, configuration: cfg, stages: stages, consumers: consumers, options: c.engineOptions, logger: logger)
        e.onRuntimeError = { [weak self] error in
            if case DeviceError.disconnected = error { self?.emit(.wasInterrupted(reason: "video device not available")) }
            self?.emit(.runtimeError("\(error)"))
        }
        try e.start()
        engine = e
        lastStatistics = e.statistics
        emit(.didStartRunning)
    }

    /// The `exposure` and `focus` stages that carry out the device's modes, when the registry has
    /// them and the device has the controls they drive. Settings changed while running are applied
    /// between frames by ``DeviceControlStages``.
    static func controlStageSpecs(_ s: DeviceSettings, connection: CaptureConnection?, registry: StageRegistry, device: CaptureDevice) -> [StageSpec] {
        func sensor(_ p: NormalizedPoint) -> JSONValue {
            let q = connection?.sensorPoint(fromUserPoint: p) ?? p
            return .array([.number(q.x), .number(q.y)])
        }
        var specs: [StageSpec] = []
        if s.exposureMode != .locked, registry.types["exposure"] != nil, device.isExposureModeSupported(s.exposureMode) {
            var o: [String: JSONValue] = ["mode": .string(s.exposureMode.rawValue), "bias": .number(s.exposureTargetBias)]
            if let p = s.exposurePointOfInterest { o["metering"] = .string("spot"); o["point"] = sensor(p) }
            if s.exposureMode == .custom, let us = s.customExposureDuration, let g = s.customGain {
                o["exposure_ms"] = .number(us / 1000); o["gain"] = .number(g)
            }
            specs.append(StageSpec(name: "exposure", options: o))
        }
        if s.focusMode != .locked, registry.types["focus"] != nil, device.isFocusModeSupported(s.focusMode) {
            var o: [String: JSONValue] = ["mode": .string(s.focusMode.rawValue)]
            if let p = s.focusPointOfInterest { o["region"] = .string("point"); o["point"] = sensor(p) }
            specs.append(StageSpec(name: "focus", options: o))
        }
        return specs
    }

    /// Locked and custom modes set the device's controls directly.
    private func applyManualControls(_ s: DeviceSettings, device: CaptureDevice) throws {
        guard let controls = device.controls else { return }
        if s.exposureMode == .custom, let us = s.customExposureDuration, let g = s.customGain {
            if controls.supports(.exposureAuto) { try? controls.set(.exposureAuto, to: 1) }
            if controls.supports(.exposureTime) { try controls.set(.exposureTime, to: Int64((us / 100).rounded())) }
            if controls.supports(.gain) { try controls.set(.gain, to: Int64((g * 100).rounded())) }
        }
        if s.focusMode == .locked, let p = s.lensPosition, controls.supports(.focusAbsolute) {
            if controls.supports(.focusAuto) { try? controls.set(.focusAuto, to: 0) }
            try controls.set(.focusAbsolute, to: Int64(p.rounded()))
        }
    }
}

/// Carries device settings from the user's thread to the stage thread.
final class SettingsRelay: Sendable {
    private let box = LockedBox<DeviceSettings>(DeviceSettings())
    private let generation = Atomic<Int>(0)

    func publish(_ s: DeviceSettings) {
        box.withLock { $0 = s }
        generation.add(1, ordering: .releasing)
    }

    @inline(__always) var currentGeneration: Int { generation.load(ordering: .acquiring) }
    var settings: DeviceSettings { box.withLock { $0 } }
}

/// First stage of a session's chain: runs the stages that carry out the device's exposure and
/// focus modes, and rebuilds them between frames when the device's settings change (the
/// `lockForConfiguration`/`unlockForConfiguration` model). Control stages read the applied
/// exposure and lens position from each frame's metadata, so a rebuilt stage picks up where the
/// device is. Nothing is allocated per frame; a rebuild allocates once per change.
final class DeviceControlStages: Stage {
    static let name = "device_controls"
    static let summary = "Runs the exposure/focus stages the device's modes ask for (made by the session)."
    private let relay: SettingsRelay
    private let build: @Sendable (DeviceSettings) throws -> [any Stage]
    private let logger: Logger
    private var stages: [any Stage]
    private var seen: Int
    private var prepared: (FrameFormat, StageContext)?

    init(relay: SettingsRelay, initial: [any Stage], build: @escaping @Sendable (DeviceSettings) throws -> [any Stage], logger: Logger) {
        self.relay = relay
        self.stages = initial
        self.build = build
        self.logger = logger
        self.seen = relay.currentGeneration
    }

    init(options: NoOptions) throws {
        throw SessionError.invalidConfiguration(reason: "the device control stages are made by the session, not by name")
    }

    func prepare(format: FrameFormat, context: StageContext) throws {
        prepared = (format, context)
        seen = relay.currentGeneration
        for s in stages { try s.prepare(format: format, context: context) }
    }

    func process(_ frame: Frame) -> StageVerdict {
        let g = relay.currentGeneration
        if g != seen {
            seen = g
            do {
                let fresh = try build(relay.settings)
                if let (f, c) = prepared { for s in fresh { try s.prepare(format: f, context: c) } }
                stages = fresh
            } catch {
                logger.error("new device settings could not be applied, keeping the previous ones: \(error)")
            }
        }
        for s in stages {
            let v = s.process(frame)
            // Control stages have no look-ahead: they forward or drop.
            if v != .forward { return v }
        }
        return .forward
    }
}
