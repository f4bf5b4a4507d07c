#if canImport(Glibc)
import Glibc
#endif

/// How far an output may fall behind a live source before it drops frames: the memory it may
/// fill with frames waiting for it (a file output whose disk stalls: a throttled device, an
/// `fsync` taking seconds).
///
/// The first ``FrameConsumer/ringCapacity`` frames an output is behind by wait in its ring as
/// they came from the source (a camera's own buffers). Beyond them, each further frame is copied
/// into memory of the output's own, which grows (once, then is reused) up to the budget, so a
/// stalled output never keeps the camera's buffers from the camera or the other outputs. Past the
/// budget, new frames are dropped for that output only and counted as
/// ``DropReason/storageBacklog``; the frames already queued are kept, in order.
///
/// A non-live source (a file, the sim unpaced) never drops: it waits for the output instead, and
/// the budget does not apply.
public struct BufferBudget: Sendable, Equatable, Codable {
    /// Seconds of the stream the output may be behind by (at the stream's nominal frame rate).
    public var seconds: Double
    /// At most this much memory for the frames waiting, bytes (each frame counts as the
    /// stream's largest frame, `FrameFormat.maxByteCount`, and an MJPEG frame's decoded picture,
    /// copied with it when a stage changed it, counts too).
    public var maximumBytes: Int

    /// A budget of `seconds` of the stream, in at most `maximumBytes` of memory.
    public init(seconds: Double, maximumBytes: Int = BufferBudget.defaultMaximumBytes) {
        self.seconds = max(0, seconds)
        self.maximumBytes = max(0, maximumBytes)
    }

    /// No memory beyond the output's ring: a stalled output drops as soon as its ring is full.
    public static let none = BufferBudget(seconds: 0, maximumBytes: 0)

    /// The default of the file outputs: 2 s of the stream, in at most ``defaultMaximumBytes``.
    public static var standard: BufferBudget { BufferBudget(seconds: 2) }

    /// 512 MiB, or an eighth of the machine's memory if that is less.
    public static let defaultMaximumBytes: Int = {
        let pages = sysconf(Int32(_SC_PHYS_PAGES)), size = sysconf(Int32(_SC_PAGESIZE))
        let eighth = pages > 0 && size > 0 ? pages / 8 * size : Int.max
        return min(512 << 20, eighth)
    }()

    /// Frames this budget holds for a stream of `frameBytes`-byte frames every
    /// `intervalNanoseconds` (0 or less when the budget holds none).
    public func frames(frameBytes: Int, intervalNanoseconds: UInt64) -> Int {
        guard seconds > 0, maximumBytes > 0, frameBytes > 0 else { return 0 }
        let byTime = intervalNanoseconds > 0 ? Int((seconds * 1e9 / Double(intervalNanoseconds)).rounded()) : Int(seconds * 30)
        return max(0, min(byTime, maximumBytes / frameBytes))
    }
}

/// The frames an output is behind by beyond its ring, in memory of its own (its
/// ``BufferBudget``): made when first needed, up to `limit`, and reused after.
///
/// The engine's stage thread takes frames (``copy(_:)``); the output's thread gives them back
/// by releasing them. Frames point back here weakly (as a pool's do).
final class BacklogFrames: FrameRecycler, @unchecked Sendable {
    // @unchecked Sendable: `free`, `all`, `views` and `bytesMade` are only touched with `lock` held.
    let limit: Int
    /// The memory the frames and their decoded views may grow to, bytes.
    let maximumBytes: Int
    private var bytesMade = 0
    private let frameCapacity: Int
    private let format: FrameFormat
    private var free: [Frame] = []
    private var all: [Frame] = []
    private let lock = ConditionLock()
    /// Copies of decoded views (MJPEG with a stage's changes), made and reused the same way.
    private var views: [Frame] = []
    private let viewRecycler: ViewRecycler
    /// Frames dropped for the budget since the last frame sent (stage thread only): the next
    /// copy carries them in its `droppedBefore`.
    var unmarkedDrops: UInt32 = 0

    /// Up to `limit` frames of `format`, and the decoded views they carry, in at most
    /// `maximumBytes` together (an MJPEG frame's decoded picture is larger than the frame).
    init(format: FrameFormat, limit: Int, maximumBytes: Int) {
        self.limit = limit
        self.maximumBytes = maximumBytes
        self.format = format
        self.frameCapacity = format.maxByteCount
        free.reserveCapacity(limit)
        all.reserveCapacity(limit)
        views.reserveCapacity(limit)
        viewRecycler = ViewRecycler()
    }

    /// Frames made so far.
    var made: Int { lock.withLock { all.count } }

    /// The memory this backlog has grown to (its frames and decoded views), bytes.
    var bytes: Int { lock.withLock { bytesMade } }

    /// A copy of `frame` (pixels, attributes, and its decoded view if it has one) in this
    /// backlog's memory, with one reference; nil when the budget is used up.
    func copy(_ frame: Frame) -> Frame? {
        guard frame.bytesUsed <= frameCapacity else { return nil }
        lock.lock()
        var f = free.popLast()
        if f == nil && all.count < limit && bytesMade + frameCapacity <= maximumBytes {
            bytesMade += frameCapacity
            let made = Frame(capacity: frameCapacity, format: format, index: all.count, recycler: self)
            all.append(made)
            f = made
        }
        lock.unlock()
        guard let f else { return nil }
        f.retain()
        f.reset()
        f.copyAttributes(from: frame)
        if frame.bytesUsed > 0 { f.data.copyMemory(from: frame.data, byteCount: frame.bytesUsed) }
        if let d = frame.decoded {
            // The decoded view lives in the engine's decode pool: it is copied too, or the copy
            // would keep that pool's memory from the stages.
            guard let v = viewCopy(d) else { f.release(); return nil }
            f.setDecoded(v)
        }
        return f
    }

    private func viewCopy(_ d: Frame) -> Frame? {
        let bytes = max(d.bytesUsed, d.format.maxByteCount)
        lock.lock()
        var v: Frame?
        if let i = views.firstIndex(where: { $0.referenceCount == 0 && $0.capacity >= bytes }) { v = views[i] }
        else if views.count < limit && bytesMade + bytes <= maximumBytes {
            bytesMade += bytes
            let made = Frame(capacity: bytes, format: d.format, recycler: viewRecycler)
            views.append(made)
            v = made
        }
        lock.unlock()
        guard let v else { return nil }
        v.retain()
        v.reset()
        v.copyAttributes(from: d)
        v.data.copyMemory(from: d.data, byteCount: min(bytes, d.capacity, v.capacity))
        return v
    }

    func recycle(_ frame: Frame) {
        lock.withLock { free.append(frame) }
    }

    /// Views are found free by their reference count: nothing to do when one comes back.
    private final class ViewRecycler: FrameRecycler, Sendable {
        func recycle(_ frame: Frame) {}
    }
}
