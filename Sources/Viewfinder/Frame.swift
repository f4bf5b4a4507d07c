#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Something that takes a frame back when its last user releases it: a buffer pool, or a device
/// that re-queues the kernel buffer behind it. Internal to the package: only the engine's own
/// reference counting gives frames back.
package protocol FrameRecycler: AnyObject, Sendable {
    func recycle(_ frame: Frame)
}

/// One video frame: its pixels (owned by a pool or lent by a device) and everything known about it.
///
/// Frames are preallocated and reused: nothing is allocated per frame in steady state. Inside the
/// engine a frame is reference counted explicitly on top of ARC: when its last holder lets go it
/// goes back to its `FrameRecycler` (a pool, or a V4L2 device that re-queues its kernel buffer).
/// That count is internal to the package: code outside it cannot retain or release a frame, so it
/// can neither release one twice nor keep a kernel buffer from going back. It sees frames in three
/// ways, none of which needs a count:
///
/// - lent for the duration of a call (``Stage/process(_:)``, ``FrameConsumer/consume(_:)``);
/// - held by a stage that answers ``StageVerdict/hold``: the engine keeps the hold and tracks it,
///   gets the frame back through ``Stage/nextReady()``, and reclaims (and counts) any the stage
///   never hands back;
/// - owned through a ``SampleBuffer`` (ARC: holding it holds the frame, its `deinit` gives the
///   frame back) or a ``FrameLease`` (`~Copyable`: exactly one owner, given back at its end).
///
/// A frame's pixels are only valid while it is lent or owned in one of those ways.
///
/// Threading: a frame is mutated by one thread at a time — the source fills it, the stage thread
/// runs the chain on it, then sinks only read it. Hand-offs go through ``SPSCRing``, whose
/// release/acquire pair orders the writes before the reads. That discipline is why the class is
/// `@unchecked Sendable`.
public final class Frame: @unchecked Sendable {
    /// Start of the pixel data.
    public private(set) var data: UnsafeMutableRawPointer
    /// Bytes available at ``data``.
    public private(set) var capacity: Int
    /// Bytes of valid data (for MJPEG, the compressed size).
    public var bytesUsed: Int
    public var format: FrameFormat
    /// Sequence number from the source (V4L2 sequence, sim frame counter).
    public var sequence: UInt64
    /// When the sensor captured the frame (start of exposure or end of readout, as the source says).
    public var timestamp: Timestamp
    /// When the engine received the frame from the source, CLOCK_MONOTONIC ns.
    public var receiveTime: UInt64
    public var metadata: FrameMetadata
    /// Index of this buffer in its pool or among the device's kernel buffers.
    public let index: Int
    /// True when the pixels were changed by a stage (so an MJPEG pass-through is no longer valid).
    public var pixelsModified: Bool = false
    /// The decoded view of a frame without YUV planes (MJPEG, RGB, Bayer), made by the engine when
    /// a stage asked for pixels: a pooled frame in a YUV format, full size or reduced. When a stage
    /// changes the pixels it changes this view, and the frame's own bytes stay what the camera
    /// sent (the raw dump stores them; movie and stills encode this view instead of passing the
    /// JPEG through). Given back with the frame.
    public private(set) var decoded: Frame?

    private let references = Atomic<Int>(0)
    /// Which stage has the frame (its index in the chain: lent during `process`, then held after a
    /// `.hold`), ``stageOwned`` for a frame a stage took from a pool of its own, or -1. Read and
    /// written by the stage thread only (sources never touch it, so a recycled frame may carry a
    /// stale value; the chain sets it before each use).
    package var holder: Int = -1
    /// ``holder`` of a frame a stage acquired itself (from its own pool) to hand on later.
    package static let stageOwned = -2
    /// Who frees `data`: nobody here (borrowed), the heap, or `munmap` (`mappedBytes` > 0).
    private let ownsMemory: Bool
    private let mappedBytes: Int
    /// Frames at least this large get their own anonymous mapping instead of heap memory: freed,
    /// their pages go straight back to the system. From the heap, glibc serves picture-sized
    /// blocks from its arenas once its adaptive mmap threshold has risen past them (it does after
    /// the first such free) and keeps them for reuse; measured in the soak, the resident set grew
    /// by 30-70 MB per 1080p session while the heap in use stayed flat.
    static let mappingThreshold = 256 << 10
    private static let mappedTotal = Atomic<Int>(0)
    /// Every live frame mapping (address → length), for ``residentFrameBytes()``. Touched only when
    /// a frame of a pool is made or freed (a session's start and end), never per frame.
    private static let mappings = LockedBox<[UInt: Int]>([:])
    /// Bytes of frame memory mapped now, across every pool (what the heap figures do not show).
    package static var mappedFrameBytes: Int { mappedTotal.load(ordering: .relaxed) }
    /// Bytes of frame mappings that are resident now (`mincore`). A pool's frames are touched
    /// lazily: a frame's pages become resident the first time it is filled, and with the pools'
    /// last-in-first-out reuse only as many frames as the deepest backlog so far ever are. So the
    /// resident set rises in steps of one frame, up to the pools' size, as deeper backlogs occur —
    /// bounded, and not a leak; this separates it from the rest of the resident set.
    package static func residentFrameBytes() -> Int {
        mappings.withLock { all in all.reduce(0) { $0 + residentBytes(UnsafeMutableRawPointer(bitPattern: $1.key)!, $1.value) } }
    }
    /// Bytes of this frame's own mapping that are resident now (0 for heap or borrowed memory).
    package var residentMappedBytes: Int { mappedBytes > 0 ? Self.residentBytes(data, mappedBytes) : 0 }
    private static func residentBytes(_ address: UnsafeMutableRawPointer, _ length: Int) -> Int {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let pages = (length + page - 1) / page
        var vec = [UInt8](repeating: 0, count: pages)
        guard vec.withUnsafeMutableBufferPointer({ mincore(address, length, $0.baseAddress) }) == 0 else { return 0 }
        return vec.reduce(0) { $0 + ($1 & 1 != 0 ? page : 0) }
    }
    /// Where the frame goes back to when released. A device that lends its memory (a V4L2 mmap
    /// buffer) is held strongly: that memory must outlive the frame. A pool is held weakly: it
    /// holds its frames, so a strong reference back would keep every pool of a finished session
    /// alive with all its pictures (measured: ~145 MB per 1080p session in the soak). A frame that
    /// outlives its pool is simply freed when its last holder lets go.
    package var recycler: (any FrameRecycler)? { lender ?? pool }
    private let lender: (any FrameRecycler)?
    private weak var pool: (any FrameRecycler)?
    /// Whether the frame was made with a recycler (a pool's or a device's frame, counted with
    /// ``retain(_:)``/``release()``), as opposed to a frame owned by ARC alone. Stays true after its
    /// pool is gone, so the frame keeps the counting rules it was handed out under.
    package let isRecycled: Bool

    /// A frame over its own memory of `capacity` bytes (64-byte aligned), owned by ARC alone (it
    /// belongs to no pool): for tests, files and stages' scratch pictures.
    public convenience init(capacity: Int, format: FrameFormat, index: Int = 0) {
        self.init(capacity: capacity, format: format, index: index, recycler: nil)
    }

    /// A frame over its own memory that goes back to `recycler` when its last holder lets go.
    package init(capacity: Int, format: FrameFormat, index: Int = 0, recycler: (any FrameRecycler)?) {
        if capacity >= Self.mappingThreshold,
           let m = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), m != MAP_FAILED {
            self.data = m
            self.mappedBytes = capacity
            Self.mappedTotal.add(capacity, ordering: .relaxed)
            Self.mappings.withLock { $0[UInt(bitPattern: m)] = capacity }
        } else {
            self.data = UnsafeMutableRawPointer.allocate(byteCount: max(capacity, 1), alignment: 64)
            self.mappedBytes = 0
        }
        self.capacity = capacity
        self.ownsMemory = true
        self.format = format
        self.bytesUsed = format.pixelFormat.isCompressed ? 0 : format.maxByteCount
        self.sequence = 0
        self.timestamp = .zero
        self.receiveTime = 0
        self.metadata = FrameMetadata()
        self.index = index
        self.lender = nil
        self.pool = recycler
        self.isRecycled = recycler != nil
    }

    /// A frame over memory someone else owns (a V4L2 mmap buffer).
    package init(borrowing data: UnsafeMutableRawPointer, capacity: Int, format: FrameFormat, index: Int, recycler: (any FrameRecycler)?) {
        self.data = data
        self.capacity = capacity
        self.ownsMemory = false
        self.mappedBytes = 0
        self.format = format
        self.bytesUsed = 0
        self.sequence = 0
        self.timestamp = .zero
        self.receiveTime = 0
        self.metadata = FrameMetadata()
        self.index = index
        self.lender = recycler
        self.pool = nil
        self.isRecycled = recycler != nil
    }

    deinit {
        if mappedBytes > 0 {
            Self.mappings.withLock { _ = $0.removeValue(forKey: UInt(bitPattern: data)) }
            munmap(data, mappedBytes)
            Self.mappedTotal.subtract(mappedBytes, ordering: .relaxed)
        } else if ownsMemory { data.deallocate() }
    }

    /// The valid bytes.
    @inlinable
    public var bytes: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: data, count: bytesUsed) }

    /// The valid bytes of plane `index`.
    public func plane(_ index: Int) -> UnsafeMutableRawBufferPointer {
        let g = format.plane(index)
        return UnsafeMutableRawBufferPointer(start: data + g.offset, count: min(g.byteCount, max(0, capacity - g.offset)))
    }

    /// Clears per-use state before a source fills the frame again.
    @inline(__always)
    public func reset() {
        if let d = decoded { decoded = nil; d.release() }
        metadata = FrameMetadata()
        pixelsModified = false
        bytesUsed = format.pixelFormat.isCompressed ? 0 : format.maxByteCount
    }

    // MARK: Explicit references

    // Internal to the package: outside it, frames are lent, held through the engine, or owned by a
    // `SampleBuffer`/`FrameLease`, so no user code can unbalance the count.

    /// Current number of holders (for tests and diagnostics).
    package var referenceCount: Int { references.load(ordering: .relaxed) }

    /// Marks the frame as held by `count` more users. Call before handing it to them.
    @inline(__always)
    package func retain(_ count: Int = 1) {
        // Relaxed: the hand-off to the new holders is ordered by the ring's release/acquire.
        references.add(count, ordering: .relaxed)
    }

    /// Gives up one hold; the last one sends the frame back to its recycler.
    @inline(__always)
    package func release() {
        // acquiringAndReleasing: every holder's reads happen before the recycler reuses the memory.
        let (old, _) = references.subtract(1, ordering: .acquiringAndReleasing)
        precondition(old > 0, "Frame released more often than retained")
        if old == 1 {
            if let d = decoded { decoded = nil; d.release() }
            recycler?.recycle(self)
        }
    }

    /// Attaches a decoded view (the engine's or a stage's; the frame takes over its reference),
    /// giving back the one it replaces.
    package func setDecoded(_ d: Frame?) {
        let old = decoded
        decoded = d
        old?.release()
    }

    /// Moves the decoded view to `other` (a stage that copies a frame it holds).
    package func moveDecoded(to other: Frame) {
        other.setDecoded(decoded)
        decoded = nil
    }

    // MARK: Pixels

    /// The pixels as luma and chroma planes, the same for every format: the frame's own planes
    /// for YUV formats and GREY, else the decoded view the engine made because a stage declared a
    /// ``PixelNeed`` (full size or reduced: see ``FramePixels/scale``). Nil when there is none.
    public var pixels: FramePixels? {
        if format.pixelFormat.hasYUVPlanes { return FramePixels(format: format, data: data, capacity: capacity) }
        guard let d = decoded else { return nil }
        return FramePixels(format: d.format, data: d.data, capacity: d.capacity, scale: max(1, format.width / max(1, d.format.width)))
    }

    /// The pixels to change, full size: the frame's own planes for YUV formats, else its
    /// full-size decoded view (a stage that declared ``PixelNeed/modify``). Marks the frame
    /// ``pixelsModified``. Nil when there are none.
    public func mutablePixels() -> MutableFramePixels? {
        let target: Frame
        if format.pixelFormat.hasYUVPlanes { target = self }
        else if let d = decoded, d.format.width == format.width, d.format.height == format.height { target = d }
        else { return nil }
        guard let p = MutableFramePixels(format: target.format, data: target.data, capacity: target.capacity) else { return nil }
        pixelsModified = true
        return p
    }

    /// The frame whose memory holds the current pixels in a YUV layout: this frame, or its
    /// decoded view (nil when neither: MJPEG, RGB or Bayer without a decoded view).
    public var pixelFrame: Frame? { format.pixelFormat.hasYUVPlanes ? self : decoded }

    /// Takes one more reference only if the frame is held by someone now (never resurrects a frame
    /// that went back to its recycler). Returns whether it did.
    @inline(__always)
    package func retainIfHeld() -> Bool {
        var current = references.load(ordering: .relaxed)
        while current > 0 {
            let (exchanged, original) = references.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// A stage gives up a frame it holds (for the engine or from its own pool): the engine no
    /// longer tracks it, and the reference goes.
    @inline(__always)
    package func releaseHold() {
        holder = -1
        release()
    }

    /// Copies everything but the pixels from `other` (format, timing, metadata).
    public func copyAttributes(from other: Frame) {
        format = other.format
        bytesUsed = other.bytesUsed
        sequence = other.sequence
        timestamp = other.timestamp
        receiveTime = other.receiveTime
        metadata = other.metadata
        pixelsModified = other.pixelsModified
    }
}
