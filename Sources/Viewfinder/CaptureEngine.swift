import Synchronization
import Logging

/// Something at the end of the pipeline: a video data output, a file writer, a null sink.
///
/// Each consumer gets its own ring and thread: a slow one drops (live sources) or applies
/// back-pressure (non-live sources) on its own path without stalling capture or the others.
/// A consumer whose work per frame is short and never waits (a shared-memory ring's publish) may
/// instead run on the stage thread (``consumesOnStageThread``): no ring, no thread hand-off.
public protocol FrameConsumer: AnyObject, Sendable {
    var consumerName: String { get }
    /// Ring capacity toward this consumer (a power of two).
    var ringCapacity: Int { get }
    /// What happens when the consumer falls behind a live source.
    var overflowPolicy: OverflowPolicy { get }
    /// Whether to skip frames that are stale when the consumer gets to them (keep latest).
    var discardsLateFrames: Bool { get }
    /// Called on the consumer's thread before the first frame.
    func start(configuration: StreamConfiguration) throws
    /// Called on the consumer's thread for each frame, lent for the call: to keep it longer, keep a
    /// ``SampleBuffer`` made with ``SampleBuffer/init(retaining:)``.
    func consume(_ frame: Frame)
    /// Called on the consumer's thread after the last frame; `error` is the session's runtime
    /// error, if the stream ended with one.
    func finish(error: (any Error)?)
    /// Whether the consumer wants to be told of every frame it did not get
    /// (``didDrop(sequence:count:reason:)``): drops between the source and the stage chain's end as
    /// well as those on its own ring.
    var wantsDropNotices: Bool { get }
    /// Frames `sequence ..< sequence + count` were dropped for `reason` before reaching this
    /// consumer. Called on the consumer's thread, between frames, when ``wantsDropNotices``.
    func didDrop(sequence: UInt64, count: UInt64, reason: DropReason)
    /// Whether the consumer needs full-size YUV planes of every frame (a y4m or raw pipe): on MJPEG,
    /// RGB and Bayer streams the engine then gives each frame its full-size decoded view
    /// (``Frame/pixelFrame``), as it does for a stage that declares ``PixelNeed/read``.
    var needsPixels: Bool { get }
    /// Whether the consumer needs those planes on a stream of `format` (default: ``needsPixels``,
    /// whatever the format). An encoder that takes RGB as it is and passes a camera's JPEGs
    /// through, but cannot encode a Bayer mosaic, asks on Bayer streams only.
    func needsPixels(for format: PixelFormat) -> Bool
    /// How far this consumer may fall behind a live source, beyond its ring, before frames are
    /// dropped for it (``DropReason/storageBacklog``); nil: no further than its ring
    /// (``DropReason/ringFull``, by ``overflowPolicy``). The frames beyond the ring wait in memory
    /// of the consumer's own, never in the source's buffers. See ``BufferBudget``.
    var bufferBudget: BufferBudget? { get }
    /// Called on the consumer's thread just before ``consume(_:)``, on a live source only: how
    /// many frames are queued behind the one it is about to get (in its ring and, beyond it, in
    /// its ``bufferBudget``'s memory), that is how far behind the source the consumer is. An
    /// output that can trade work for speed (a dump storing frames uncompressed) uses it to keep
    /// up. Never called on a non-live source, which waits for its consumers instead.
    func willConsume(framesWaiting: Int)
    /// Whether the engine calls this consumer on the stage thread, as each frame leaves the stage
    /// chain and before the other consumers get it, instead of on a thread of its own behind a
    /// ring (default: false). It saves the thread hand-off — a wake-up, which on a busy or
    /// virtual machine can take a millisecond — for consumers whose latency matters. The
    /// consumer then has no ring: ``ringCapacity``, ``overflowPolicy``, ``discardsLateFrames``
    /// and ``bufferBudget`` are not used, it never drops a frame of its own, and its time per
    /// frame is the stage thread's (a slow one makes a live source drop before the stages,
    /// counted there). Only for work that is short and never waits. Every call
    /// (``start(configuration:)``, ``consume(_:)``, ``didDrop(sequence:count:reason:)``,
    /// ``willConsume(framesWaiting:)``, ``finish(error:)``) is then on the stage thread;
    /// ``willConsume(framesWaiting:)`` hears the frames queued before the stages.
    var consumesOnStageThread: Bool { get }
}

extension FrameConsumer {
    public var ringCapacity: Int { 8 }
    public var overflowPolicy: OverflowPolicy { .dropOldest }
    public var discardsLateFrames: Bool { false }
    public var needsPixels: Bool { false }
    public func needsPixels(for format: PixelFormat) -> Bool { needsPixels }
    public var wantsDropNotices: Bool { false }
    public var bufferBudget: BufferBudget? { nil }
    public func didDrop(sequence: UInt64, count: UInt64, reason: DropReason) {}
    public func willConsume(framesWaiting: Int) {}
    public var consumesOnStageThread: Bool { false }
    public func start(configuration: StreamConfiguration) throws {}
    public func finish(error: (any Error)?) {}
}

/// How full one ring of the engine is at a moment (``CaptureEngine/ringOccupancy``).
public struct RingOccupancy: Sendable, Equatable {
    /// `decode`, `stages`, or the consumer's name.
    public var name: String
    /// Frames queued.
    public var count: Int
    public var capacity: Int
    public init(name: String, count: Int, capacity: Int) { self.name = name; self.count = count; self.capacity = capacity }
}

/// Limits and sizes of a run.
public struct EngineOptions: Sendable {
    /// Stop after this many frames have been captured (nil: until stopped).
    public var frameLimit: UInt64?
    /// Stop after this many seconds (nil: until stopped). On a live source these are the camera's
    /// seconds, counted on the frames' own timestamps from the first frame (a device's start-up
    /// does not use them up): a frame is kept when at least half of its interval fits, as a
    /// movie's `maximumDuration` does, so 3 s at 30 fps is 90 frames; frames without a usable
    /// stamp are timed by their arrival, and stamps that go back end the run at the first frame's
    /// arrival plus the duration. On a source that is not live (an unpaced pattern or dump
    /// replay) they are seconds of wall time from the start; a paced replay is live.
    public var durationSeconds: Double?
    /// Capacity of the ring from the capture thread to the stage thread.
    public var stageRingCapacity: Int = 8
    /// What the capture thread does when the stage thread falls behind a live source.
    public var livePolicy: OverflowPolicy = .dropOldest
    /// No frame for this long is a stall (the source may restart itself before this).
    public var stallTimeoutSeconds: Double = 5
    public init(frameLimit: UInt64? = nil, durationSeconds: Double? = nil) {
        self.frameLimit = frameLimit
        self.durationSeconds = durationSeconds
    }
}

/// Counts of one consumer's path.
public final class ConsumerStatistics: Sendable {
    public let name: String
    public let drops = DropCounters()
    public let latency = LatencyHistogram()
    private let consumedCount = Atomic<UInt64>(0)
    public init(name: String) { self.name = name }
    public var consumed: UInt64 { consumedCount.load(ordering: .relaxed) }
    package func countConsumed() { consumedCount.add(1, ordering: .relaxed) }
}

/// Everything the engine counts. Safe to read from any thread while running.
public final class EngineStatistics: Sendable {
    private let capturedCount = Atomic<UInt64>(0)
    private let deliveredCount = Atomic<UInt64>(0)
    /// Drops between the source and the end of the stage chain, by reason.
    public let drops = DropCounters()
    /// Capture-to-end-of-chain latency.
    public let latency = LatencyHistogram()
    public let consumers: [ConsumerStatistics]
    public let stageNames: [String]
    /// Distribution of each stage's time per call (same order as ``stageNames``).
    public let stageTimeHistograms: [LatencyHistogram]
    private let stageTimes: LockedBox<[Double]>
    private let startTime = Atomic<UInt64>(0)
    private let endTime = Atomic<UInt64>(0)

    package init(stageNames: [String], consumerNames: [String]) {
        self.stageNames = stageNames
        self.consumers = consumerNames.map(ConsumerStatistics.init)
        self.stageTimes = LockedBox(Array(repeating: 0, count: stageNames.count))
        self.stageTimeHistograms = stageNames.map { _ in LatencyHistogram() }
    }

    /// Frames the source produced, including those it lost (sequence gaps, no buffer, corrupt).
    public var captured: UInt64 { capturedCount.load(ordering: .relaxed) }
    /// Frames that left the end of the stage chain.
    public var delivered: UInt64 { deliveredCount.load(ordering: .relaxed) }
    /// Mean time per frame in each stage, µs.
    public var stageMeanMicroseconds: [Double] { stageTimes.withLock { $0 } }

    /// Seconds since the start (to the end, once finished).
    public var elapsedSeconds: Double {
        let s = startTime.load(ordering: .relaxed)
        guard s > 0 else { return 0 }
        let e = endTime.load(ordering: .relaxed)
        return Double((e > 0 ? e : monotonicNanoseconds()) - s) / 1e9
    }

    private let decodeNs = Atomic<UInt64>(0)
    private let decodeCount = Atomic<UInt64>(0)
    private let decodeScaleValue = Atomic<Int>(0)
    /// Scale denominator of the decoded view the stages get (1 full size, 2/4/8 reduced); 0 when
    /// there is none (a YUV format, or no stage asked for pixels).
    public var decodeScale: Int { decodeScaleValue.load(ordering: .relaxed) }
    /// Mean time to make a frame's decoded view, µs (0 when there is none).
    public var decodeMeanMicroseconds: Double {
        let c = decodeCount.load(ordering: .relaxed)
        return c == 0 ? 0 : Double(decodeNs.load(ordering: .relaxed)) / Double(c) / 1000
    }
    func setDecodeScale(_ s: Int) { decodeScaleValue.store(s, ordering: .relaxed) }
    func countDecode(nanoseconds: UInt64) {
        decodeNs.add(nanoseconds, ordering: .relaxed)
        decodeCount.add(1, ordering: .relaxed)
    }

    package func countCaptured(_ n: UInt64 = 1) { capturedCount.add(n, ordering: .relaxed) }

    private let firstFrameTime = Atomic<UInt64>(0)
    private let lastFrameTime = Atomic<UInt64>(0)
    /// Notes a frame's arrival (capture thread).
    func noteFrameArrival(_ t: UInt64) {
        if firstFrameTime.load(ordering: .relaxed) == 0 { firstFrameTime.store(t, ordering: .relaxed) }
        lastFrameTime.store(t, ordering: .relaxed)
    }
    /// Seconds from the first frame's arrival to the last's (0 before a second frame): the span
    /// the rates are measured over, without the time to open and start the device.
    public var frameSpanSeconds: Double {
        let a = firstFrameTime.load(ordering: .relaxed), b = lastFrameTime.load(ordering: .relaxed)
        return a > 0 && b > a ? Double(b - a) / 1e9 : 0
    }
    private let capturedAtFirstArrival = Atomic<UInt64>(0)
    private let capturedAtLastArrival = Atomic<UInt64>(0)
    /// Notes, after a frame that arrived was counted, how many the camera has made (capture thread).
    func noteCapturedAtArrival() {
        let c = capturedCount.load(ordering: .relaxed)
        if capturedAtFirstArrival.load(ordering: .relaxed) == 0 { capturedAtFirstArrival.store(c, ordering: .relaxed) }
        capturedAtLastArrival.store(c, ordering: .relaxed)
    }
    /// The camera's rate: frames it made (the lost ones included) per second of
    /// ``frameSpanSeconds``, counted from the first frame that arrived to the last — frames lost
    /// before the first or after the last are outside the span (counting those made a camera
    /// that lost its last two frames of a second look faster than it is: 32.8 fps at 30).
    /// 0 before a second frame.
    public var capturedFps: Double {
        let span = frameSpanSeconds
        let a = capturedAtFirstArrival.load(ordering: .relaxed), b = capturedAtLastArrival.load(ordering: .relaxed)
        return span > 0 && b > a ? Double(b - a) / span : 0
    }
    /// Frames per second that left the stage chain, over the same span (below ``capturedFps``
    /// by the drops).
    public var deliveredFps: Double {
        // The share of the frames the camera made within the span that were delivered (the
        // delivered ones all arrived within it).
        let a = capturedAtFirstArrival.load(ordering: .relaxed), b = capturedAtLastArrival.load(ordering: .relaxed)
        guard b > a else { return 0 }
        return capturedFps * min(1, Double(delivered) / Double(b - a + 1))
    }
    package func countDelivered() { deliveredCount.add(1, ordering: .relaxed) }
    private let refusedMetadataCount = Atomic<UInt64>(0)
    /// Frames that left the stage chain with custom metadata keys refused (every one of the
    /// frame's ``CustomMetadata/capacity`` slots was taken: ``CustomMetadata/refused``).
    public var framesWithRefusedMetadata: UInt64 { refusedMetadataCount.load(ordering: .relaxed) }
    /// Counts a frame with refused keys; true for the run's first (to be logged once).
    func countRefusedMetadata() -> Bool { refusedMetadataCount.add(1, ordering: .relaxed).oldValue == 0 }
    func markStart() { startTime.store(monotonicNanoseconds(), ordering: .relaxed) }
    func markEnd() { endTime.store(monotonicNanoseconds(), ordering: .relaxed) }
    /// Copies the chain's per-stage means into the shared snapshot, in place: no allocation.
    func publishStageTimes(_ chain: StageChain) {
        stageTimes.withLock { t in
            for i in t.indices { t[i] = chain.meanMicroseconds(stage: i) }
        }
    }
}

/// Runs a source through a stage chain into consumers on dedicated threads:
///
/// ```text
/// capture thread ──ring──▶ stage thread (chain) ──ring──▶ consumer thread 1
///                                               └─ring──▶ consumer thread 2 …
/// ```
///
/// Live sources are never slowed: when a ring is full the frame is dropped and counted. Non-live
/// sources (files, dumps, the sim camera unpaced) get back-pressure instead. Every frame is
/// accounted for: `captured == delivered + drops.total` once the run has finished.
public final class CaptureEngine: @unchecked Sendable {
    // @unchecked Sendable: mutable state is confined — `chain` to the stage thread, each channel's
    // producer side to the stage thread — or guarded (`state`, `runtimeError`).
    public let source: any CaptureSource
    public let chain: StageChain
    public let consumers: [any FrameConsumer]
    public let options: EngineOptions
    public let statistics: EngineStatistics
    public private(set) var configuration: StreamConfiguration
    private let logger: Logger

    /// Control changes the stages queue; the capture thread writes them between frames. Nil when
    /// the source has no controls.
    public let controlRequests: ControlRequestQueue?
    /// The control values each frame was exposed with, from the writes made (capture thread).
    private let delayedControls: DelayedControls?
    private let stageChannel: FrameChannel
    /// Capture thread → decode thread, when the stages get decoded views (MJPEG, RGB, Bayer):
    /// the decode runs on a thread of its own, beside the stages, not before them on theirs.
    private var decodeChannel: FrameChannel?
    /// Set once ``start()`` has made every channel (``ringOccupancy`` reads them after it).
    private let ringsReady = Atomic<Bool>(false)
    private let consumerChannels: [FrameChannel]
    /// The consumers that run on threads of their own, by index (the others run on the stage
    /// thread, in `stageConsumers`).
    private let threadedConsumers: [Int]
    /// The consumers that run on the stage thread (``FrameConsumer/consumesOnStageThread``).
    private let stageConsumers: StageThreadConsumers?
    /// Per consumer with a ``FrameConsumer/bufferBudget`` on a live source: its own memory for
    /// the frames it is behind by beyond its ring.
    private let backlogs: [BacklogFrames?]
    /// Set on the stage thread once the source has ended and the stages give back what they
    /// hold: the outputs then take frames directly, waiting for room (no copy into a backlog: no
    /// source is waiting for its buffers).
    private let draining = DrainingFlag()
    private final class DrainingFlag: Sendable { let on = Atomic<Bool>(false) }
    /// Whether the source is live (read once, at init): consumers then hear how far behind they are.
    private let sourceIsLive: Bool
    /// Per consumer, the drops it is told about (nil when it does not want them).
    private let dropNotices: [DropNotices?]
    private var threads: [EngineThread] = []
    private let stopRequested = Atomic<Bool>(false)
    private let consumersLeft: Atomic<Int>
    private let finished = Atomic<Bool>(false)
    private let errorBox = LockedBox<(any Error)?>(nil)
    private let doneLock = ConditionLock()
    private var done = false
    private let pixelDecoders: StandardPixelDecoders
    /// The decoded views stages asked for (nil when none did, or the format has YUV planes).
    private var decodedViews: DecodedViewProvider?
    /// Called once, from an engine thread, when the stream ends with an error.
    public var onRuntimeError: (@Sendable (any Error) -> Void)?
    /// Called once, from an engine thread, when every thread has finished.
    public var onFinish: (@Sendable () -> Void)?

    /// An engine for `source` streaming `configuration` through `stages` into `consumers`.
    /// `pixelDecoders` decode formats without YUV planes for the stages that ask for pixels (MJPEG:
    /// ViewfinderKit's device directory carries TurboJPEG's); RGB and Bayer are converted by the
    /// core anyway.
    public init(source: any CaptureSource, configuration: StreamConfiguration, stages: [any Stage], consumers: [any FrameConsumer], options: EngineOptions = EngineOptions(),
                pixelDecoders: (any PixelDecoderFactory)? = nil, logger: Logger = Logger(label: "viewfinder.engine")) {
        self.source = source
        self.pixelDecoders = StandardPixelDecoders(pixelDecoders)
        self.configuration = configuration
        self.consumers = consumers
        self.consumersLeft = Atomic(consumers.count)
        self.options = options
        self.logger = logger
        self.statistics = EngineStatistics(stageNames: stages.map { type(of: $0).name }, consumerNames: consumers.map(\.consumerName))
        self.chain = StageChain(stages: stages, drops: statistics.drops, timeHistograms: statistics.stageTimeHistograms)
        let controls = source.controls
        self.controlRequests = controls.map { _ in ControlRequestQueue() }
        self.delayedControls = controls.map { DelayedControls(latency: $0.controlLatencyFrames) }
        let live = source.isLive
        self.sourceIsLive = live
        self.stageChannel = FrameChannel(name: "stages", capacity: options.stageRingCapacity, policy: live ? options.livePolicy : .wait, drops: statistics.drops)
        let backlogs: [BacklogFrames?] = consumers.map { c in
            guard live, !c.consumesOnStageThread, let budget = c.bufferBudget else { return nil }
            let n = budget.frames(frameBytes: configuration.format.maxByteCount, intervalNanoseconds: configuration.interval.nanoseconds)
            return n > 0 ? BacklogFrames(format: configuration.format, limit: n, maximumBytes: budget.maximumBytes) : nil
        }
        self.backlogs = backlogs
        self.consumerChannels = zip(consumers, statistics.consumers).enumerated().map { i, cs in
            let (c, s) = cs
            guard let b = backlogs[i] else {
                return FrameChannel(name: c.consumerName, capacity: c.ringCapacity, policy: live ? c.overflowPolicy : .wait, drops: s.drops)
            }
            // Room for the ring's frames and the whole backlog: the budget, not the ring, decides.
            var capacity = 2
            while capacity < c.ringCapacity + b.limit { capacity <<= 1 }
            return FrameChannel(name: c.consumerName, capacity: capacity, policy: .dropNewest, drops: s.drops)
        }
        let engineDrops = statistics.drops
        let notices: [DropNotices?] = zip(consumers, statistics.consumers).map { c, s in
            guard c.wantsDropNotices else { return nil }
            let n = DropNotices()
            s.drops.addObserver(n)
            engineDrops.addObserver(n)
            return n
        }
        self.dropNotices = notices
        self.threadedConsumers = consumers.indices.filter { !consumers[$0].consumesOnStageThread }
        let onStage = consumers.indices.filter { consumers[$0].consumesOnStageThread }
        let consumerStatistics = statistics.consumers
        self.stageConsumers = onStage.isEmpty ? nil
            : StageThreadConsumers(onStage.map { (consumers[$0], consumerStatistics[$0], notices[$0]) }, live: live)
    }

    /// Frames a source must be able to have in flight so that a run with these stages and
    /// consumers never runs out of buffers while every ring is merely full: the stage ring, the
    /// frame in the chain, the look-ahead the stages hold, and each consumer's ring and the frame
    /// it is working on, plus two for the source itself. Capped at `limit` (kernel drivers cap
    /// their buffer counts; beyond it, a live source counts `out_of_buffers` drops).
    /// A format without YUV planes (MJPEG, RGB, Bayer) adds the decode thread's ring and frame.
    public static func buffersNeeded(stages: [any Stage], consumers: [any FrameConsumer], options: EngineOptions, limit: Int = 64,
                                     pixelFormat: PixelFormat? = nil) -> Int {
        let delay = stages.reduce(0) { $0 + $1.delayFrames }
        let outputs = consumers.reduce(0) { $0 + ($1.consumesOnStageThread ? 0 : $1.ringCapacity + 1) }
        let decode = pixelFormat.map { $0.hasYUVPlanes ? 0 : decodeRingCapacity + 1 } ?? 0
        return min(limit, options.stageRingCapacity + 1 + delay + outputs + decode + 2)
    }

    /// Frames queued for the decode thread. Small: the decode keeps pace or a live source drops
    /// the oldest (counted), and every queued frame holds a camera buffer.
    static let decodeRingCapacity = 4

    /// The error the run ended with, if any.
    public var runtimeError: (any Error)? { errorBox.withLock { $0 } }

    /// Prepares the stages and consumers and starts the threads.
    public func start() throws {
        let format = configuration.format
        let needed = CaptureEngine.buffersNeeded(stages: chain.stages, consumers: consumers, options: options, limit: .max, pixelFormat: format.pixelFormat)
        let decoder = format.pixelFormat.hasYUVPlanes ? nil : pixelDecoders.makeDecoder(for: format)
        let requests = PixelRequests(format: format, available: format.pixelFormat.hasYUVPlanes || decoder != nil)
        let context = StageContext(format: format, frameIntervalNanoseconds: configuration.interval.nanoseconds, controls: source.controls,
                                   controlRequests: controlRequests, isLive: source.isLive, sourceBuffers: configuration.bufferCount, buffersNeeded: needed,
                                   pixels: requests)
        let channels = consumerChannels
        let stats = statistics
        let backlogs = self.backlogs
        let direct = consumers.map(\.ringCapacity)
        let threaded = threadedConsumers
        let onStage = stageConsumers
        let stageRing = stageChannel
        let logger = self.logger
        let draining = self.draining
        try chain.prepare(format: configuration.format, context: context) { frame in
            // Lent by the chain: consumers on the stage thread use it during their call, each
            // channel gets a reference of its own.
            stats.countDelivered()
            stats.latency.record(nanoseconds: CaptureEngine.age(of: frame))
            if frame.metadata.custom.refused != 0, stats.countRefusedMetadata() {
                logger.warning("frame \(frame.sequence): \(frame.metadata.custom.refused) custom metadata key(s) not stored: all \(CustomMetadata.capacity) slots taken (\(frame.metadata.custom.entries.map { $0.0.description }.joined(separator: ", "))); counted in framesWithRefusedMetadata")
            }
            onStage?.consume(frame, waiting: stageRing.count)
            let n = threaded.count
            if n == 0 { return }
            frame.retain(n)
            for i in threaded {
                let ch = channels[i]
                guard let backlog = backlogs[i], !draining.on.load(ordering: .relaxed), ch.count >= direct[i] || backlog.unmarkedDrops > 0 else { ch.send(frame); continue }
                // The consumer is a ring behind (its disk stalls): this frame waits in the
                // consumer's own memory, and the source's buffer goes back to the source. The
                // copy is this consumer's alone, so it can carry the drops before it in its
                // metadata (the shared frame cannot: the other consumers read it).
                if let copy = backlog.copy(frame) {
                    frame.release()
                    copy.metadata.droppedBefore &+= backlog.unmarkedDrops
                    backlog.unmarkedDrops = 0
                    ch.send(copy)
                } else if ch.count < direct[i] {
                    // Not copyable (larger than the format's largest frame, or every copy still
                    // in use while the ring has room): sent as it is. The shared frame cannot carry
                    // the drops before it, so the next copy does (they were once lost here).
                    ch.send(frame)
                } else {
                    let seq = frame.sequence
                    frame.release()
                    backlog.unmarkedDrops &+= 1
                    stats.consumers[i].drops.count(.storageBacklog, from: seq)
                }
            }
        }
        for c in consumers where c.needsPixels(for: format.pixelFormat) && !format.pixelFormat.hasYUVPlanes {
            // Without a decoder the consumer gets the stream as it is and says so itself.
            if requests.available { try requests.need(.read, stage: c.consumerName) }
        }
        if let decoder, let scale = requests.scale(width: format.width, available: decoder.scaleDenominators) {
            // Every frame in flight may carry its view: as many as the pipeline holds, plus slack.
            decodedViews = DecodedViewProvider(decoder: decoder, format: format, scale: scale, limit: needed + 4)
            statistics.setDecodeScale(scale)
            decodeChannel = FrameChannel(name: "decode", capacity: Self.decodeRingCapacity, policy: source.isLive ? options.livePolicy : .wait,
                                         drops: statistics.drops)
        }
        // Releasing: pairs with `ringOccupancy`'s acquiring load, which then sees `decodeChannel`.
        ringsReady.store(true, ordering: .releasing)
        seedDelayedControls()
        statistics.markStart()
        try source.start()

        for i in threadedConsumers {
            let c = consumers[i]
            let ch = consumerChannels[i]
            let st = statistics.consumers[i]
            let notices = dropNotices[i]
            let cfg = configuration
            threads.append(EngineThread(name: "vf-out-\(c.consumerName)") { [self] in
                self.consumerLoop(c, channel: ch, stats: st, notices: notices, configuration: cfg)
            })
        }
        let stageConfiguration = configuration
        threads.append(EngineThread(name: "vf-stages") { [self] in self.stageLoop(configuration: stageConfiguration) })
        if let views = decodedViews, let input = decodeChannel {
            threads.append(EngineThread(name: "vf-decode") { [self] in self.decodeLoop(views, input: input) })
        }
        threads.append(EngineThread(name: "vf-capture") { [self] in self.captureLoop() })
    }

    /// Asks the engine to stop; frames already captured still go through to the consumers.
    public func stop() { stopRequested.store(true, ordering: .relaxed) }

    public var isFinished: Bool { finished.load(ordering: .acquiring) }

    /// Waits until every thread has finished (after `stop()`, a frame/duration limit, the end of
    /// the source, or a runtime error).
    public func waitUntilFinished() {
        doneLock.lock()
        while !done { doneLock.wait() }
        doneLock.unlock()
        for t in threads { t.join() }
    }

    /// Waits up to `seconds`; returns whether the run finished.
    public func waitUntilFinished(timeoutSeconds seconds: Double) -> Bool {
        let deadline = monotonicNanoseconds() &+ UInt64(seconds * 1e9)
        doneLock.lock()
        while !done { if !doneLock.wait(untilMonotonicNanoseconds: deadline) { break } }
        let d = done
        doneLock.unlock()
        if d { for t in threads { t.join() } }
        return d
    }

    /// How full each of the engine's rings is now: the decode ring (formats without YUV planes,
    /// when a stage or sink needs pixels), the stage ring, then one per consumer (by its name).
    /// Relaxed snapshots, for monitoring from any thread; empty before ``start()``.
    public var ringOccupancy: [RingOccupancy] {
        guard ringsReady.load(ordering: .acquiring) else { return [] }
        var out: [RingOccupancy] = []
        if let d = decodeChannel { out.append(RingOccupancy(name: d.name, count: d.count, capacity: d.ring.capacity)) }
        out.append(RingOccupancy(name: stageChannel.name, count: stageChannel.count, capacity: stageChannel.ring.capacity))
        for c in consumerChannels { out.append(RingOccupancy(name: c.name, count: c.count, capacity: c.ring.capacity)) }
        return out
    }

    /// Age of a frame now: from its capture timestamp when that is on CLOCK_MONOTONIC, else from
    /// when the engine received it.
    @inline(__always)
    public static func age(of frame: Frame) -> UInt64 {
        let now = monotonicNanoseconds()
        let t = frame.timestamp.clock == .monotonic && frame.timestamp.nanoseconds > 0 ? frame.timestamp.nanoseconds : frame.receiveTime
        return now > t ? now - t : 0
    }

    /// The values in effect before streaming (stages may have written some in `prepare`).
    private func seedDelayedControls() {
        guard let d = delayedControls, let c = source.controls else { return }
        var v = ExposedControls()
        for std in ExposedControls.tracked where c.supports(std) { v[std] = try? c.value(of: std) }
        d.reset(v)
    }

    /// Capture side of the control path, between frames: writes what the stages queued.
    @inline(__always)
    private func applyControlRequests(_ controls: (any DeviceControlling)?, lastSequence: UInt64?) {
        guard let q = controlRequests, let controls, q.pending > 0 else { return }
        q.apply(to: controls, afterFrame: lastSequence, delayed: delayedControls)
    }

    private func fail(_ error: any Error) {
        let first = errorBox.withLock { e -> Bool in
            if e == nil { e = error; return true }
            return false
        }
        if first {
            logger.error("runtime error: \(error)")
            onRuntimeError?(error)
        }
    }

    // MARK: Threads

    private func captureLoop() {
        let limit = options.frameLimit
        // (A duration beyond ~30 years, or not finite, is no deadline: UInt64 would trap.)
        let duration = options.durationSeconds.flatMap { $0.isFinite && $0 < 1e9 ? max(0, $0) : nil }
        // A source that is not live: seconds of wall time from the start. A live one: the
        // camera's time, from the first frame (see `EngineOptions.durationSeconds`), with a wall
        // deadline a quarter second past it for a source that goes quiet.
        var cameraTime = source.isLive
        var deadline = duration.flatMap { cameraTime ? nil : monotonicNanoseconds() &+ UInt64($0 * 1e9) }
        var firstTimestamp: UInt64? = nil, lastTimestamp: UInt64 = 0
        let nominalInterval = configuration.interval.nanoseconds
        let stallNs = UInt64(options.stallTimeoutSeconds * 1e9)
        var lastFrameAt = monotonicNanoseconds()
        var lastSequence: UInt64? = nil
        /// Frames reported lost since the last frame that came (placed after its stamp).
        var lostSinceStamp = 0
        let controls = source.controls
        let firstChannel = decodeChannel ?? stageChannel
        captureLoop: while !stopRequested.load(ordering: .relaxed) {
            applyControlRequests(controls, lastSequence: lastSequence)
            if let limit, statistics.captured >= limit { break }
            if let deadline, monotonicNanoseconds() >= deadline { break }
            let event: SourceEvent
            do {
                event = try source.next(timeoutNanoseconds: 200_000_000)
            } catch {
                fail(error)
                break
            }
            switch event {
            case .frame(let f):
                if f.receiveTime == 0 { f.receiveTime = monotonicNanoseconds() }
                if cameraTime, let duration {
                    // The sensor's time where the source gives one; the arrival time where it
                    // does not (a clock it cannot name, no stamp at all).
                    let stamped = f.timestamp.clock != .unknown && f.timestamp.nanoseconds != 0
                    let ts = stamped ? f.timestamp.nanoseconds : f.receiveTime
                    if let first = firstTimestamp {
                        if ts < lastTimestamp {
                            // Stamps that go back cannot measure the run: its end is the wall
                            // deadline set at the first frame from here on.
                            cameraTime = false
                        } else {
                            // Kept when at least half of its interval fits (a movie's own rule);
                            // the interval is the nominal one at most (a gap before the frame,
                            // a dropped frame, does not widen it).
                            var interval = ts - lastTimestamp
                            if nominalInterval > 0 { interval = min(interval, nominalInterval) }
                            if Double(ts - first) / 1e9 >= duration - Double(interval) / 2e9 {
                                f.release()
                                break captureLoop
                            }
                        }
                    } else {
                        firstTimestamp = ts
                        deadline = f.receiveTime &+ UInt64((duration + 0.25) * 1e9)
                    }
                    lastTimestamp = ts
                }
                lastFrameAt = f.receiveTime
                lostSinceStamp = 0
                statistics.noteFrameArrival(f.receiveTime)
                if let last = lastSequence, f.sequence > last &+ 1 {
                    // A gap the source did not report itself.
                    let gap = f.sequence - last - 1
                    statistics.countCaptured(gap)
                    statistics.drops.count(.driverGap, gap, from: last &+ 1)
                    f.metadata.droppedBefore &+= UInt32(truncatingIfNeeded: gap)
                }
                lastSequence = f.sequence
                if let d = delayedControls {
                    let exposed = d.values(forFrame: f.sequence)
                    if f.metadata.exposedWith.isEmpty { f.metadata.exposedWith = exposed }
                }
                statistics.countCaptured()
                statistics.noteCapturedAtArrival()
                firstChannel.send(f)
            case .lost(let reason, var n):
                // On the camera's time, lost frames are placed at the nominal interval after the
                // last stamp: those from the duration's end on are not the run's, and the run ends
                // there (a camera that loses its last frames counted them past the duration:
                // 92 captured in a 3 s run at 30 fps, and an fps above the camera's).
                var pastTheEnd = false
                if cameraTime, let duration, let first = firstTimestamp, nominalInterval > 0 {
                    var within = 0
                    while within < n {
                        let ts = lastTimestamp &+ UInt64(lostSinceStamp + within + 1) &* nominalInterval
                        if Double(ts - first) / 1e9 >= duration - Double(nominalInterval) / 2e9 { break }
                        within += 1
                    }
                    pastTheEnd = within < n
                    n = within
                }
                if n > 0 {
                    statistics.countCaptured(UInt64(n))
                    statistics.drops.count(reason, UInt64(n), from: lastSequence.map { $0 &+ 1 } ?? 0)
                    // A source reports each lost frame once and it used up a sequence number (a
                    // V4L2 driver gap, a buffer the driver had no room for, a corrupt buffer): move
                    // past it so the next frame is not counted again as a gap.
                    if let last = lastSequence { lastSequence = last &+ UInt64(n) }
                    lostSinceStamp += n
                }
                if pastTheEnd { break captureLoop }
            case .timeout:
                firstChannel.flush()
                if monotonicNanoseconds() &- lastFrameAt > stallNs {
                    fail(DeviceError.stalled(device: source.info.id, seconds: options.stallTimeoutSeconds))
                    break captureLoop
                }
            case .endOfStream:
                break captureLoop
            }
        }
        source.stop()
        firstChannel.close()
    }

    /// Makes each frame's decoded view (the decoder is used by this thread only) and hands the
    /// frame to the stages. A frame that cannot be decoded (a corrupt JPEG) or that finds no free
    /// view is dropped and counted.
    private func decodeLoop(_ views: DecodedViewProvider, input: FrameChannel) {
        loop: while true {
            switch input.receive(timeoutNanoseconds: 100_000_000) {
            case .frame(let f):
                let t0 = monotonicNanoseconds()
                if let reason = views.attach(to: f) {
                    statistics.drops.count(reason, from: f.sequence)
                    f.release()
                    continue loop
                }
                statistics.countDecode(nanoseconds: monotonicNanoseconds() &- t0)
                stageChannel.send(f)
            case .timeout:
                stageChannel.flush()
            case .closed:
                break loop
            }
        }
        stageChannel.close()
    }

    private func stageLoop(configuration: StreamConfiguration) {
        stageConsumers?.start(configuration: configuration) { self.fail($0) }
        var n = 0
        loop: while true {
            switch stageChannel.receive(timeoutNanoseconds: 100_000_000) {
            case .frame(let f):
                chain.run(f)
                n &+= 1
                if n & 15 == 0 { statistics.publishStageTimes(chain) }
            case .timeout:
                for ch in consumerChannels { ch.flush() }
                stageConsumers?.tellDrops()
            case .closed:
                break loop
            }
        }
        // The source has ended: the frames the stages still hold (a stabiliser's look-ahead) come
        // out in a burst with no camera to keep up with, so the outputs take them all, waiting
        // for room (with a live source's policies a look-ahead of 30 lost 27 of 60 frames at a
        // file output's ring).
        for ch in consumerChannels { ch.waitFromNowOn() }
        draining.on.store(true, ordering: .relaxed)
        chain.finish()
        statistics.publishStageTimes(chain)
        for ch in consumerChannels { ch.close() }
        if let sc = stageConsumers {
            sc.finish(error: runtimeError)
            if consumersLeft.subtract(sc.count, ordering: .acquiringAndReleasing).newValue == 0 { allDone() }
        }
        if consumers.isEmpty { allDone() }
    }


    private func consumerLoop(_ consumer: any FrameConsumer, channel: FrameChannel, stats: ConsumerStatistics, notices: DropNotices?,
                              configuration: StreamConfiguration) {
        @inline(__always) func tellDrops() {
            notices?.drain { consumer.didDrop(sequence: $0.sequence, count: $0.count, reason: $0.reason) }
        }
        var startError: (any Error)?
        do { try consumer.start(configuration: configuration) } catch { startError = error; fail(error) }
        let live = sourceIsLive
        loop: while true {
            switch channel.receive(timeoutNanoseconds: 100_000_000) {
            case .frame(var f):
                if startError != nil { let seq = f.sequence; f.release(); stats.drops.count(.stage, from: seq); continue }
                if consumer.discardsLateFrames {
                    // Keep latest: anything newer already queued supersedes this frame.
                    while channel.count > 0, case .frame(let newer) = channel.receive(timeoutNanoseconds: 0) {
                        let seq = f.sequence
                        f.release()
                        // Counted for this consumer only (it hears of it through `didDrop`). The
                        // frame is shared by every consumer: marking `newer.metadata.droppedBefore`
                        // here made the movie and the dump count this output's late drops as their
                        // own (the soak found a movie holding every frame that reported 37 dropped),
                        // and wrote metadata other consumer threads were reading.
                        stats.drops.count(.late, from: seq)
                        f = newer
                    }
                }
                stats.latency.record(nanoseconds: CaptureEngine.age(of: f))
                tellDrops()
                if live { consumer.willConsume(framesWaiting: channel.count) }
                consumer.consume(f)
                stats.countConsumed()
                f.release()
            case .timeout:
                tellDrops()
                continue
            case .closed:
                break loop
            }
        }
        tellDrops()
        consumer.finish(error: runtimeError)
        if consumersLeft.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { allDone() }
    }

    private func allDone() {
        statistics.markEnd()
        finished.store(true, ordering: .releasing)
        doneLock.withLock {
            done = true
            doneLock.broadcast()
        }
        onFinish?()
    }
}

/// The consumers that run on the stage thread (``FrameConsumer/consumesOnStageThread``), with
/// their counts and drop notices. Confined to the stage thread.
final class StageThreadConsumers: @unchecked Sendable {
    // @unchecked Sendable: made on the engine's thread, then used by the stage thread only.
    private let consumers: [any FrameConsumer]
    private let statistics: [ConsumerStatistics]
    private let notices: [DropNotices?]
    /// Consumers whose ``FrameConsumer/start(configuration:)`` threw: their frames are dropped
    /// (counted as ``DropReason/stage`` on their path), as for a consumer on its own thread.
    private var failed: [Bool]
    private let live: Bool
    var count: Int { consumers.count }

    init(_ entries: [(any FrameConsumer, ConsumerStatistics, DropNotices?)], live: Bool) {
        consumers = entries.map(\.0)
        statistics = entries.map(\.1)
        notices = entries.map(\.2)
        failed = Array(repeating: false, count: entries.count)
        self.live = live
    }

    func start(configuration: StreamConfiguration, fail: (any Error) -> Void) {
        for i in consumers.indices {
            do { try consumers[i].start(configuration: configuration) } catch { failed[i] = true; fail(error) }
        }
    }

    func tellDrops() {
        for i in consumers.indices {
            let c = consumers[i]
            notices[i]?.drain { c.didDrop(sequence: $0.sequence, count: $0.count, reason: $0.reason) }
        }
    }

    /// Gives each consumer the lent frame; `waiting` frames are queued before the stages.
    func consume(_ frame: Frame, waiting: Int) {
        for i in consumers.indices {
            let s = statistics[i]
            if failed[i] { s.drops.count(.stage, from: frame.sequence); continue }
            let c = consumers[i]
            s.latency.record(nanoseconds: CaptureEngine.age(of: frame))
            notices[i]?.drain { c.didDrop(sequence: $0.sequence, count: $0.count, reason: $0.reason) }
            if live { c.willConsume(framesWaiting: waiting) }
            c.consume(frame)
            s.countConsumed()
        }
    }

    func finish(error: (any Error)?) {
        tellDrops()
        for c in consumers { c.finish(error: error) }
    }
}
