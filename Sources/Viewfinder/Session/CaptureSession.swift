import Dispatch
import Foundation
import Logging
import Synchronization

/// Coordinates inputs and outputs (AVFoundation's `AVCaptureSession`).
///
/// - Add a ``CaptureDeviceInput`` and outputs; connections form automatically by media type.
/// - Change things between ``beginConfiguration()`` and ``commitConfiguration()``: the batch is
///   validated as a whole and applied atomically. An invalid batch is rejected with a clear error
///   and a running session keeps its old configuration.
/// - Stages are ``StageSpec``s: typed (`.stage(StabiliseStage.self) { $0.lookahead = 15 }`) or by
///   name with untyped options (the command line, a pipeline file). Each start builds them afresh.
/// - ``startRunning()`` resolves the preset against the device, builds the stage chain (the
///   device's exposure/focus modes become the stages its ``DeviceControlStageProvider`` makes,
///   followed by the session's own ``stages``) and starts the engine's threads.
/// - Events (``SessionEvent``) reach handlers on the session's own event queue, in order and
///   outside the session's lock: a handler may call back into the session.
public final class CaptureSession: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is guarded by `lock` (configuration, engine handle,
    // run identity, interruption watcher); events go through `hub`; the engine runs on its own
    // threads.
    public struct Configuration: Sendable {
        public var inputs: [CaptureInput] = []
        public var outputs: [any CaptureOutput] = []
        public var preset: SessionPreset = .high
        public var stages: [StageSpec] = []
        public var engineOptions = EngineOptions()
    }

    public let registry: StageRegistry
    /// Makes the stages that carry out the device's exposure and focus modes (nil: none run).
    public let controlStages: (any DeviceControlStageProvider)?
    public let logger: Logger
    /// How often an interrupted session tries to reopen its device.
    public let reconnectIntervalSeconds: Double = 0.1
    private let lock = ConditionLock()
    /// Serialises starting, stopping and restarting the engine. Held while waiting for engine
    /// threads (which `lock` never is), so getters and outputs' delegates never wait for a stop.
    private let transition = ConditionLock()
    private var committed = Configuration()
    private var pending: Configuration?
    private var connectionsStore: [CaptureConnection] = []
    private var engine: CaptureEngine?
    /// The counts of the last run, kept after it stops.
    private var lastStatistics: EngineStatistics?
    private var resolved: StreamConfiguration?
    /// The frame interval the running stream has now (set at the start, changed by a new frame
    /// duration while running; the settings callback compares requests with it); its own lock,
    /// since the device's settings callback sets it.
    private let liveInterval = LockedBox<FrameInterval?>(nil)
    private let hub = SessionEventHub()
    private let relay = SettingsRelay()
    /// Counts starts and stops: a run's callbacks act only while their run is the current one.
    /// Atomic, and the watcher has its own lock, because engine threads read them: they must never
    /// wait for `lock`, which `stopRunning()` holds while it waits for those threads.
    private let runID = Atomic<Int>(0)
    private let watcher = LockedBox<InterruptionWatcher?>(nil)
    /// The microphone's engine while running, and the counts of the last audio run. Its own lock:
    /// the video engine's `onFinish` (an engine thread) stops the microphone.
    let audioRun = LockedBox<AudioRun>(AudioRun())

    /// - Parameters:
    ///   - registry: the stages pipelines may name (`StageRegistry.builtIn` from ViewfinderKit).
    ///   - controlStages: makes the stages for the device's exposure/focus modes; default: the
    ///     registry's ``StageRegistry/controlStages`` (ViewfinderKit's `.builtIn` has one).
    ///   - logger: where the session and its engine log.
    public init(registry: StageRegistry = StageRegistry(generated: []), controlStages: (any DeviceControlStageProvider)? = nil,
                logger: Logger = Logger(label: "viewfinder.session")) {
        self.registry = registry
        self.controlStages = controlStages ?? registry.controlStages
        self.logger = logger
    }

    /// A session whose last reference goes while it runs stops, as AVFoundation's does: the
    /// device is released, the outputs finish (their recordings complete) and are disconnected.
    /// The deinit waits for that, so the outputs and the device are free for another session when
    /// it returns — except on one of the engine's own threads (a delegate called without a queue),
    /// which cannot wait for itself: there a helper thread waits. Either way the outputs stay
    /// claimed (no other session can take them) until the engine is done.
    deinit {
        let (e, w, conns, config) = lock.withLock { (engine, watcher.withLock { $0 }, connectionsStore, committed) }
        guard e != nil || w != nil || !conns.isEmpty else { return }
        e?.stop()
        w?.cancel()
        let end: @Sendable () -> Void = {
            e?.waitUntilFinished()
            w?.join()
            // The connections' inputs and outputs are `unowned`: `config` holds them until here.
            withExtendedLifetime(config) { for c in conns { c.output.sessionDidDisconnect(c) } }
        }
        // Claimed by the ending run from here (the session's own claim went with its last
        // reference) until its engine is done: no other session may take an output before.
        let token = OutputClaims.hold(config.outputs)
        guard EngineThread.isCurrent else { end(); OutputClaims.release(token); return }
        EngineThread(name: "vf-session-end") {
            end()
            OutputClaims.release(token)
        }.detach()
    }

    // MARK: Events

    /// Registers a handler for session events. Handlers run on the session's event queue, one
    /// event at a time and in order, never with the session's lock held: they may call the
    /// session (`stopRunning()` included).
    public func onEvent(_ handler: @escaping @Sendable (SessionEvent) -> Void) {
        hub.add(handler)
    }

    /// Calls `observer` with each run's statistics as the run starts (the first start, a restart
    /// for a configuration change, a camera that came back), synchronously, before
    /// ``SessionEvent/didStartRunning`` is posted and with the session's lock held: it must only
    /// take the statistics (no call into the session). Unlike the event, which is delivered later
    /// and may find a newer run already started, every run is seen — a preview's counters add
    /// them all up.
    package func onRunStarted(_ observer: @escaping @Sendable (EngineStatistics) -> Void) {
        runObservers.withLock { $0.append(observer) }
    }
    private let runObservers = LockedBox<[@Sendable (EngineStatistics) -> Void]>([])

    /// Session events as an async sequence.
    public func events() -> AsyncStream<SessionEvent> {
        AsyncStream { continuation in onEvent { continuation.yield($0) } }
    }

    /// Waits until every event so far has reached the handlers (``stopRunning()`` does this).
    public func deliverPendingEvents() { hub.drain() }

    // MARK: Configuration

    private func current() -> Configuration { pending ?? committed }

    /// Starts a batch of changes.
    public func beginConfiguration() {
        lock.withLock { if pending == nil { pending = committed } }
    }

    /// Validates and applies the batch as a whole. On error nothing changes.
    public func commitConfiguration() throws {
        try transition.withLock {
            let p: Configuration = try lock.withLock {
                guard let p = pending else { throw SessionError.notInConfiguration }
                pending = nil
                return p
            }
            try apply(p)
        }
    }

    /// Runs a change: inside a batch it is staged, outside it is committed at once.
    private func change(_ body: (inout Configuration) throws -> Void) throws {
        try transition.withLock {
            let staged: Configuration? = try lock.withLock {
                if pending != nil { try body(&pending!); return nil }
                var c = committed
                try body(&c)
                return c
            }
            if let c = staged { try apply(c) }
        }
    }

    /// Validates `c` and makes it the session's configuration (restarting a running engine).
    /// `transition` held; the old engine is waited for without `lock`.
    private func apply(_ c: Configuration) throws {
        try validate(c)
        // A run stopped on its engine's thread finishes its outputs before they are reconnected.
        waitForStopsFromEngineThreads()
        // Checked and taken at once: two sessions committing one output together cannot both win.
        try OutputClaims.claim(c.outputs, for: self)
        let (old, running) = lock.withLock { (committed, detachEngine()) }
        if let running { finish(running) }
        lock.withLock { committed = c; rebuildConnections() }
        guard running != nil else { return }
        // The camera's input removed while running: the run ends there (the outputs finish their
        // files, `didStopRunning` is posted) and the session stays stopped without it until an
        // input is added and `startRunning()` called — a run needs its camera. (The removal was
        // refused before, silently, with the engine restarted around it.)
        if !c.inputs.contains(where: { $0 is CaptureDeviceInput }) {
            logger.info("the session's video input was removed while running: the run ends")
            // Nor is a camera that went away waited for any more.
            lock.withLock { cancelWatcher() }?.detach()
            return
        }
        do { try lock.withLock { try startEngine() } } catch {
            logger.warning("new configuration failed to start, keeping the old one: \(error)")
            lock.withLock {
                committed = old
                rebuildConnections()
                try? startEngine()
            }
            try? OutputClaims.claim(old.outputs, for: self)
            throw error
        }
    }

    private func validate(_ c: Configuration) throws {
        try validateAudio(c)
        let videoInputs = c.inputs.compactMap { $0 as? CaptureDeviceInput }
        if videoInputs.count > 1 { throw SessionError.cannotAddInput(reason: "the session already has a video input (one camera per session)") }
        if let d = videoInputs.first?.device {
            guard c.preset.resolve(formats: d.formats, active: d.source.activeConfiguration, requested: d.settings.activeFormat) != nil else {
                throw SessionError.presetUnsupported(preset: c.preset.rawValue, device: d.uniqueID, available: Self.sizes(d.formats))
            }
        }
        // Every stage must exist and its options must be valid now, not at start (typed stages
        // are built too: their options get the same cross-field validation).
        for s in c.stages where s.enabled { _ = try registry.makeStage(s) }
        try registry.checkRepeats(c.stages)
    }

    static func sizes(_ formats: [FormatDescription]) -> [String] {
        var seen: [String] = []
        for f in formats { for s in f.sizes { let m = s.maxSize; let t = "\(m.width)x\(m.height)"; if !seen.contains(t) { seen.append(t) } } }
        return seen
    }

    /// Makes the connections match the committed inputs and outputs. A pair that stays keeps its
    /// connection object, and with it the rotation, mirroring and enabled flag the app set (as
    /// AVFoundation's connections do across `commitConfiguration`); only the pairs that go are
    /// disconnected and only the new ones connected.
    private func rebuildConnections() {
        var old = connectionsStore
        var kept: [CaptureConnection] = [], added: [CaptureConnection] = []
        for i in committed.inputs {
            for o in committed.outputs where o.acceptedMediaTypes.contains(i.mediaType) {
                if let k = old.firstIndex(where: { $0.input === i && $0.output === o && $0.mediaType == i.mediaType }) {
                    kept.append(old.remove(at: k))
                } else {
                    let c = CaptureConnection(mediaType: i.mediaType, input: i, output: o)
                    kept.append(c)
                    added.append(c)
                }
            }
        }
        for c in old { c.output.sessionDidDisconnect(c) }
        connectionsStore = kept
        for c in added { c.output.sessionDidConnect(c) }
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

    /// Removes an input. The camera's input removed while the session runs ends the run (the
    /// outputs finish their files, ``SessionEvent/didStopRunning`` is posted): the session stays
    /// stopped until an input is added and ``startRunning()`` is called.
    public func removeInput(_ input: CaptureInput) {
        try? change { c in c.inputs.removeAll { $0 === input } }
    }

    public func canAddOutput(_ output: any CaptureOutput) -> Bool {
        lock.withLock { !current().outputs.contains { $0 === output } } && !OutputClaims.isHeld(output, byAnotherThan: self)
    }

    public func addOutput(_ output: any CaptureOutput) throws {
        // One session at a time, as AVFoundation: two engines would feed one output's thread and
        // delegate with two streams interleaved.
        if OutputClaims.isHeld(output, byAnotherThan: self) { throw SessionError.cannotAddOutput(reason: "it is in another session (remove it there first)") }
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
    public var streamConfiguration: StreamConfiguration? {
        guard var cfg = lock.withLock({ resolved }) else { return nil }
        // A frame duration changed while running (setActiveVideoMinFrameDuration) is the stream's now.
        if let iv = liveInterval.withLock({ $0 }) { cfg.interval = iv }
        return cfg
    }

    /// The running (or last) engine's counts.
    public var statistics: EngineStatistics? { lock.withLock { engine?.statistics ?? lastStatistics } }

    /// How full the running engine's rings are (empty when not running):
    /// ``CaptureEngine/ringOccupancy``.
    public var ringOccupancy: [RingOccupancy] { lock.withLock { engine?.ringOccupancy ?? [] } }

    /// The microphone's counts: running, or of the last run (nil when that run had no microphone).
    public var audioStatistics: AudioStatistics? { audioRun.withLock { $0.engine?.statistics ?? $0.last } }

    /// Starts capture: the device streams, and its frames go through the stages to the outputs.
    /// Throws when the session is running already, inside a configuration batch, or when the
    /// device, a stage or an output cannot start.
    ///
    /// Called on one of Viewfinder's engine threads (a video delegate without a queue, after a
    /// ``stopRunning()`` there; a stage), it waits for nothing: the old run's outputs are still
    /// busy on that very thread, and a new run would feed them from a second one at once. It throws at
    /// once when the session runs or a batch is open; otherwise the start is made on a thread of
    /// its own as soon as the old run's outputs are done, and this returns. That start's error,
    /// if it has one, is posted as ``SessionEvent/runtimeError(_:)``; a ``stopRunning()`` or
    /// ``requestStop()`` made before it (from any thread) cancels it, and
    /// ``waitUntilFinished()`` waits for the run it starts.
    public func startRunning() throws {
        if EngineThread.isCurrent {
            // Not `transition`: another thread's stop or change may hold it while it waits for
            // this very thread.
            try lock.withLock { try refuseStart() }
            let generation = stopGeneration.load(ordering: .acquiring)
            let hub = self.hub, group = deferredStarts
            group.enter()
            Thread { [self] in
                defer { group.leave() }
                do { try startNow(unlessStoppedSince: generation) } catch SessionError.alreadyRunning {
                    // Started meanwhile by someone else: what was asked for.
                } catch { hub.post(.runtimeError(error)) }
            }.start()
            return
        }
        deferredStarts.wait()
        try startNow()
    }

    /// Why the session cannot start now, if it cannot (under `lock`).
    private func refuseStart() throws {
        if let e = engine, !e.isFinished { throw SessionError.alreadyRunning }
        // As AVFoundation: not between begin and commit (the batch is not the session's
        // configuration yet; this said "no video input" with one staged).
        if pending != nil {
            throw SessionError.invalidConfiguration(reason: "startRunning() inside a configuration batch: call commitConfiguration() first")
        }
    }

    /// The start itself, off the engine's threads: once the runs stopped on them are done. A
    /// start deferred from an engine thread passes the stop count it saw: a stop asked for since
    /// (``stopRunning()``, ``requestStop()``) cancels it — checked under `lock`, where a
    /// `requestStop()` either sees the new engine or is seen here.
    private func startNow(unlessStoppedSince generation: UInt64? = nil) throws {
        waitForStopsFromEngineThreads()
        try transition.withLock {
            try lock.withLock {
                try refuseStart()
                if let generation, stopGeneration.load(ordering: .acquiring) != generation { return }
                // Not joined here: its thread may be waiting for `transition` to resume the
                // session (it will see the cancel and return). Unjoined, it would be a thread
                // leak (ThreadSanitizer's report on the whole suite, 26 Nov).
                cancelWatcher()?.detach()
                try startEngine()
            }
        }
    }

    /// Stops capture; what was captured still reaches the outputs, which finish their files.
    /// Returns once ``SessionEvent/didStopRunning`` has reached the handlers (at once when called
    /// from a handler).
    ///
    /// Called on one of the engine's own threads (a video delegate without a queue, a stage, an
    /// output's callback), which it cannot wait for, it stops the capture and returns at once; a
    /// thread of its own waits for the outputs to finish, and the next ``startRunning()`` or
    /// ``stopRunning()`` waits for that (one on an engine thread starts the session once they
    /// are done).
    public func stopRunning() {
        stopGeneration.add(1, ordering: .acquiringAndReleasing)   // a restart asked for before is cancelled
        if EngineThread.isCurrent {
            // Not `transition`: a stop or a change on another thread may hold it while it waits
            // for this very thread to end. The engine is taken out and noted as finishing at once,
            // under `lock` (which no one holds while waiting for an engine).
            let (e, w) = lock.withLock { () -> (CaptureEngine?, InterruptionWatcher?) in
                let e = detachEngine()
                if let e { stopsFromEngineThreads.withLock { $0.append(e) } }
                return (e, cancelWatcher())
            }
            guard e != nil || w != nil else { return }
            e?.stop()
            EngineThread(name: "vf-session-stop") { [stops = stopsFromEngineThreads] in
                e?.waitUntilFinished()
                w?.join()
                if let e { stops.withLock { $0.removeAll { $0 === e } } }
            }.detach()
            return
        }
        deferredStarts.wait()
        waitForStopsFromEngineThreads()
        let w: InterruptionWatcher? = transition.withLock {
            let (e, w) = lock.withLock { (detachEngine(), cancelWatcher()) }
            if let e { finish(e) }
            return w
        }
        w?.join()
        hub.drain()
    }

    /// Engines stopped by ``stopRunning()`` on one of their own threads, until their outputs are done.
    private let stopsFromEngineThreads = LockedBox<[CaptureEngine]>([])
    /// Starts asked for on an engine thread, until they are made.
    private let deferredStarts = DispatchGroup()
    /// Counts the stops asked for: a deferred start made after another stop does not start.
    private let stopGeneration = Atomic<UInt64>(0)

    /// Waits for them (not on an engine thread, which may be one of theirs).
    private func waitForStopsFromEngineThreads() {
        guard !EngineThread.isCurrent else { return }
        for e in stopsFromEngineThreads.withLock({ $0 }) { e.waitUntilFinished() }
    }

    /// Asks the running capture to end, from any thread — an output's, a stage's or a delegate's
    /// own, where ``stopRunning()`` (which waits for them) cannot be called — and returns at once:
    /// the camera stops, what was captured still reaches the outputs, and
    /// ``waitUntilFinished()`` returns. The program then calls ``stopRunning()`` from its own
    /// thread, which finishes the files. Nothing happens when the session is not running.
    public func requestStop() {
        lock.withLock {
            stopGeneration.add(1, ordering: .acquiringAndReleasing)
            return engine
        }?.stop()
    }

    /// Waits until the engine finishes by itself (frame or duration limit, end of a file, error),
    /// or the session is stopped. A change of configuration while running (stages switched on or
    /// off, a new preset) restarts the engine: that is not the end, and the wait goes on with the
    /// new engine.
    public func waitUntilFinished() {
        defer { waitForStopsFromEngineThreads() }
        var waited: CaptureEngine?
        while true {
            // A restart a delegate asked for (``startRunning()`` on an engine thread) is made
            // once the old run is done: the wait goes on with its run.
            if !EngineThread.isCurrent { deferredStarts.wait() }
            // A change in progress holds `transition` from taking the old engine out until the
            // new one runs: wait for it to finish, then see which engine the session has.
            let e = transition.withLock { lock.withLock { engine } }
            guard let e, e !== waited else { return }
            e.waitUntilFinished()
            waited = e
        }
    }

    /// Whether the session is waiting for its disconnected device to come back.
    public var isInterrupted: Bool { watcher.withLock { $0 != nil } }

    /// Cancels the interruption watcher, if any; returns it (to join outside the locks).
    private func cancelWatcher() -> InterruptionWatcher? {
        runID.add(1, ordering: .sequentiallyConsistent)
        return watcher.withLock { w in
            let old = w
            old?.cancel()
            w = nil
            return old
        }
    }

    /// Takes the engine out of the session (`lock` held); the caller then ``finish(_:)``es it
    /// without the lock, so that outputs' delegates may read the session meanwhile.
    private func detachEngine() -> CaptureEngine? {
        runID.add(1, ordering: .sequentiallyConsistent)
        guard let e = engine else { return nil }
        engine = nil
        lastStatistics = e.statistics
        return e
    }

    /// Stops a detached engine and waits for its threads; its `onFinish` reports the stop.
    private func finish(_ e: CaptureEngine) {
        e.stop()
        e.waitUntilFinished()
    }

    private func startEngine() throws {
        let c = committed
        guard let input = c.inputs.compactMap({ $0 as? CaptureDeviceInput }).first else { throw SessionError.noVideoInput }
        let device = input.device
        guard let request = c.preset.resolve(formats: device.formats, active: device.source.activeConfiguration, requested: device.settings.activeFormat) else {
            throw SessionError.presetUnsupported(preset: c.preset.rawValue, device: device.uniqueID, available: Self.sizes(device.formats))
        }
        var stages = try controlStageChain(device: device, input: input)
        for spec in c.stages where spec.enabled { stages.append(try registry.makeStage(spec)) }
        let consumers: [any FrameConsumer] = connectionsStore.filter { $0.input === input && $0.isEnabled }.map { $0.output }
        // Enough buffers for the look-ahead the stages hold and for every ring to fill.
        var sized = request
        sized.bufferCount = max(request.bufferCount, CaptureEngine.buffersNeeded(stages: stages, consumers: consumers, options: c.engineOptions, pixelFormat: request.pixelFormat))
        if let iv = device.settings.activeVideoMinFrameDuration { sized.fps = iv.fps }
        let cfg = try device.source.configure(sized)
        resolved = cfg

        var settings = device.settings
        if settings.activeVideoMinFrameDuration != nil { settings.activeVideoMinFrameDuration = cfg.interval }
        relay.publish(settings)
        let relay = self.relay
        let liveInterval = self.liveInterval
        liveInterval.withLock { $0 = cfg.interval }
        let logger = self.logger, hub = self.hub, source = device.source
        // Software white balance on frames without YUV planes corrects the full-size decoded
        // view, whose size the engine picks at its start: a balance first chosen while running
        // is measured, not applied, until the next start. Said once, when it happens.
        let balanceNeedsRestart = !cfg.format.pixelFormat.hasYUVPlanes && !(device.controls?.supports(.whiteBalanceTemperature) ?? false)
        let balanceAtStart = LockedBox(settings.whiteBalanceMode)
        device.onSettingsChange = { [weak device] s in
            var s = s
            if balanceNeedsRestart, s.whiteBalanceMode != .locked, balanceAtStart.withLock({ m in defer { m = s.whiteBalanceMode }; return m == .locked }) {
                logger.warning("\(source.info.id): white balance \(s.whiteBalanceMode) chosen while running on \(cfg.format.pixelFormat) frames: measured, and applied to the picture from the next startRunning() (choose it before starting)")
            }
            // A new frame duration on a running session: the source changes its rate now (S_PARM
            // mid-stream, or a restart around it); the control stages get the interval it chose.
            if let iv = s.activeVideoMinFrameDuration, liveInterval.withLock({ $0 != iv }) {
                do {
                    let change = try source.setFrameInterval(iv)
                    device?.noteFrameRateChange(change)
                    liveInterval.withLock { $0 = change.interval }
                    s.activeVideoMinFrameDuration = change.interval
                    logger.debug("\(source.info.id): frame interval \(change)")
                } catch {
                    logger.error("\(source.info.id): the frame interval \(iv) could not be applied: \(error)")
                    s.activeVideoMinFrameDuration = liveInterval.withLock { $0 }
                    hub.post(.runtimeError(error))
                }
            }
            relay.publish(s)
        }
        try applyManualControls(settings, device: device)

        let audio = try prepareAudio(c, connections: connectionsStore)
        for case let v as any PixelDecodingOutput in consumers { v.setPixelDecoders(device.pixelDecoders) }
        let e = CaptureEngine(source: device.source, configuration: cfg, stages: stages, consumers: consumers, options: c.engineOptions,
                              pixelDecoders: device.pixelDecoders, logger: logger)
        let run = runID.add(1, ordering: .sequentiallyConsistent).newValue
        e.onRuntimeError = { [weak self] error in
            if case DeviceError.disconnected = error {
                hub.post(.wasInterrupted(reason: .videoDeviceNotAvailable))
                self?.watchForReconnection(device: device, run: run)
            }
            hub.post(.runtimeError(error))
        }
        // The microphone runs as long as the video: the video engine's end stops it (after the
        // movie had the sound of its last frames), then every run that started reports its end
        // once, whoever ended it.
        // A short run (a finite source, unpaced) can end before this thread has posted its start:
        // the end is then posted here, after the start, so that the handlers always see start
        // before stop (a run of 25 pattern frames ended first in CI, 27 Nov).
        let audioRun = self.audioRun
        let order = LockedBox<(started: Bool, finished: Bool)>((false, false))
        e.onFinish = {
            CaptureSession.stopAudio(audio, run: audioRun)
            if order.withLock({ o in o.finished = true; return o.started }) { hub.post(.didStopRunning) }
        }
        try startAudio(audio, hub: hub)
        do { try e.start() } catch {
            CaptureSession.stopAudio(audio, run: audioRun)
            throw error
        }
        engine = e
        lastStatistics = e.statistics
        for observe in runObservers.withLock({ $0 }) { observe(e.statistics) }
        hub.post(.didStartRunning)
        if order.withLock({ o in o.started = true; return o.finished }) { hub.post(.didStopRunning) }
    }

    /// The first stage of the chain: the stages the provider makes for the device's modes, rebuilt
    /// between frames when the settings change. Empty when there is no provider or the device has
    /// no exposure or focus control. A kind the pipeline runs a stage of itself (`exposure`,
    /// `focus`, `white_balance` among the session's stages) is left to that stage: the device's
    /// mode carried out beside it would be a second loop driving the same control.
    private func controlStageChain(device: CaptureDevice, input: CaptureDeviceInput) throws -> [any Stage] {
        guard let provider = controlStages else { return [] }
        let pipelineRuns = Set(committed.stages.filter(\.enabled).map(\.name))
        // Zoom needs the control stage too: optical (zoom_absolute) or digital (the provider's).
        let digitalZoom = device.hasOpticalZoom ? nil : provider.makeDigitalZoom()
        guard device.isExposureModeSupported(.continuous) || device.isFocusModeSupported(.continuous)
              || device.hasOpticalZoom || digitalZoom != nil else { return [] }
        let connection = connectionsStore.first { $0.mediaType == .video && $0.input === input }
        let registry = self.registry
        let build: @Sendable (DeviceSettings) throws -> [any Stage] = { [weak connection, weak device] s in
            let mapping = connection
            guard let device else { return [] }
            // A point in the (digitally zoomed) picture the user sees: undo rotation and
            // mirroring, then the zoom, so the stages meter the full frame under it.
            let zoomTo = s.videoZoomFactor
            return try provider.controlStages(for: s, device: device, sensorPoint: { [weak device] p in
                let q = mapping?.sensorPoint(fromUserPoint: p) ?? p
                return device?.unzoomedPoint(q, factor: zoomTo) ?? q
            }).filter { !pipelineRuns.contains($0.name) }.map { try registry.makeStage($0) }
        }
        return [DeviceControlStages(relay: relay, initial: try build(device.settings), build: build, device: device, digitalZoom: digitalZoom, logger: logger)]
    }

    /// After a disconnection: retries the device until it is back, then reports the end of the
    /// interruption and starts again — unless the session was stopped or restarted meanwhile.
    private func watchForReconnection(device: CaptureDevice, run: Int) {
        guard let source = device.source as? any ReconnectableSource else { return }
        let interval = reconnectIntervalSeconds
        watcher.withLock { w in
            guard run == self.runID.load(ordering: .sequentiallyConsistent), w == nil else { return }
            w = InterruptionWatcher(source: source, intervalSeconds: interval) { [weak self] in
                self?.resumeAfterInterruption(run: run)
            }
        }
    }

    private func resumeAfterInterruption(run: Int) {
        transition.withLock {
            let current = watcher.withLock { w -> InterruptionWatcher? in
                guard run == runID.load(ordering: .sequentiallyConsistent), let x = w, !x.isCancelled else { return nil }
                w = nil
                return x
            }
            // On the watcher's own thread, which ends after this; nobody else holds the watcher
            // now, so nobody would join it.
            guard let finished = current else { return }
            finished.detach()
            hub.post(.interruptionEnded)
            if let old = lock.withLock({ detachEngine() }) { finish(old) }
            do { try lock.withLock { try startEngine() } } catch {
                logger.error("the device came back but the session could not start again: \(error)")
                hub.post(.runtimeError(error))
            }
        }
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

/// Which session holds each output: an output is in one session at a time. Weak both ways, so an
/// output or a session that goes frees its claim (and a new object at the same address is not
/// taken for the old one).
enum OutputClaims {
    /// Held by a session (weakly), or by a session's end still under way (`ending`, strongly).
    private struct Claim { weak var output: AnyObject?; weak var session: CaptureSession?; var ending: Ending? }
    /// The claim of a session that is gone while its engine still finishes.
    final class Ending: Sendable {}
    private static let claims = LockedBox<[ObjectIdentifier: Claim]>([:])

    private static func holder(_ c: [ObjectIdentifier: Claim], _ output: any CaptureOutput) -> AnyObject? {
        guard let claim = c[ObjectIdentifier(output)], claim.output === output else { return nil }
        return claim.session ?? claim.ending
    }

    /// Whether something other than `session` holds `output`: a live session, or the end of one.
    static func isHeld(_ output: any CaptureOutput, byAnotherThan session: CaptureSession) -> Bool {
        claims.withLock { c in holder(c, output).map { $0 !== session } ?? false }
    }

    /// Makes `outputs` the ones `session` holds (its configuration's), or throws, changing
    /// nothing, when another holds one of them.
    static func claim(_ outputs: [any CaptureOutput], for session: CaptureSession) throws {
        try claims.withLock { c in
            if outputs.contains(where: { o in holder(c, o).map { $0 !== session } ?? false }) {
                throw SessionError.cannotAddOutput(reason: "an output of the batch is in another session (remove it there first)")
            }
            c = c.filter { $0.value.output != nil && ($0.value.session != nil || $0.value.ending != nil) && $0.value.session !== session }
            for o in outputs { c[ObjectIdentifier(o)] = Claim(output: o, session: session, ending: nil) }
        }
    }

    /// Holds `outputs` for a session's end that is still under way; ``release(_:)`` frees them.
    static func hold(_ outputs: [any CaptureOutput]) -> Ending {
        let token = Ending()
        claims.withLock { c in for o in outputs { c[ObjectIdentifier(o)] = Claim(output: o, session: nil, ending: token) } }
        return token
    }

    static func release(_ token: Ending) {
        claims.withLock { c in c = c.filter { $0.value.ending !== token } }
    }
}
