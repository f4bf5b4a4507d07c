import Logging
import Viewfinder

/// Publishes every frame that leaves the stage chain into a POSIX shared-memory ring
/// (`/dev/shm/NAME`) for other local programs — a Python `FrameReader`, another engine — to read
/// without a copy on their side. See <doc:SharedMemoryRing> for the layout.
///
/// The ring's writer never waits for readers. By default the output publishes on the engine's
/// stage thread, as each frame leaves the stage chain (`FrameConsumer.consumesOnStageThread`):
/// the publish is one copy of the frame (~0.25 ms at 1080p YUYV) and never waits, and no thread
/// hand-off stands between the stages and the readers (on a 2-core VM that hand-off's wake-up was
/// most of the latency's tail). With `onStageThread: false` it runs on a thread of its own behind
/// a ring, with the engine's usual rules: a live source drops (counted) if the copy ever falls
/// behind, a non-live one waits.
/// The ring is created in ``start(configuration:)`` (replacing a stale one from a killed run) and
/// removed from /dev/shm when the run ends.
public final class SharedMemoryOutput: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: `writer` is confined to the thread that publishes (stage or consumer); what others read is in `state`.
    public let consumerName: String
    public let ringName: String
    public let slotCount: Int
    public var ringCapacity: Int { 4 }
    /// Whether frames are published on the stage thread (the default) or on a thread of the
    /// output's own.
    public let consumesOnStageThread: Bool
    private let logger: Logger
    private var writer: ShmRingWriter?
    private struct Published { var frames: UInt64 = 0; var mismatched: UInt64 = 0; var replacedStale: Int32?; var error: (any Error)? }
    private let state = LockedBox(Published())

    public init(name ringName: String, slots: Int = 8, consumerName: String = "shm", onStageThread: Bool = true,
                logger: Logger = Logger(label: "viewfinder.shm")) {
        self.consumesOnStageThread = onStageThread
        self.ringName = ringName
        self.slotCount = slots
        self.consumerName = consumerName
        self.logger = logger
    }

    /// Frames published into the ring.
    public var framesPublished: UInt64 { state.withLock { $0.frames } }
    /// Frames not published because their format differs from the ring's (the stream changed format).
    public var framesMismatched: UInt64 { state.withLock { $0.mismatched } }
    /// The pid of the killed or finished run whose ring this output replaced, if any.
    public var replacedStaleWriter: Int32? { state.withLock { $0.replacedStale } }
    public var error: (any Error)? { state.withLock { $0.error } }

    public func start(configuration: StreamConfiguration) throws {
        do {
            let w = try ShmRingWriter(name: ringName, format: configuration.format, interval: configuration.interval, slotCount: slotCount)
            writer = w
            if let pid = w.replacedStaleWriter {
                logger.notice("shared-memory ring '\(ringName)': replaced a stale ring left by pid \(pid)")
                state.withLock { $0.replacedStale = pid }
            }
        } catch {
            state.withLock { $0.error = error }
            throw error
        }
    }

    public func consume(_ frame: Frame) {
        let taken = monotonicNanoseconds()
        guard let w = writer else { return }
        let f = frame.format, r = w.format
        guard f.pixelFormat == r.pixelFormat, f.width == r.width, f.height == r.height, f.bytesPerRow == r.bytesPerRow else {
            state.withLock { $0.mismatched += 1 }
            return
        }
        w.publish(frame, outputNanoseconds: taken)
        let n = w.published
        state.withLock { $0.frames = n }
    }

    public func finish(error: (any Error)?) {
        writer?.close(unlink: true)
        writer = nil
    }
}
