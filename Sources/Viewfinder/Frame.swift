import Synchronization

/// Something that takes a frame back when its last user releases it: a buffer pool, or a device
/// that re-queues the kernel buffer behind it.
public protocol FrameRecycler: AnyObject, Sendable {
    func recycle(_ frame: Frame)
}

/// One video frame: its pixels (owned by a pool or lent by a device) and everything known about it.
///
/// Frames are preallocated and reused: nothing is allocated per frame in steady state. A frame is
/// reference counted *explicitly* (``retain(_:)``/``release()``) on top of ARC: when the last
/// consumer releases it, it goes back to its ``FrameRecycler``.
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

    private let references = Atomic<Int>(0)
    private let ownsMemory: Bool
    /// Where the frame goes back to when released.
    public let recycler: (any FrameRecycler)?

    /// A frame over its own memory of `capacity` bytes (64-byte aligned).
    public init(capacity: Int, format: FrameFormat, index: Int = 0, recycler: (any FrameRecycler)? = nil) {
        self.data = UnsafeMutableRawPointer.allocate(byteCount: max(capacity, 1), alignment: 64)
        self.capacity = capacity
        self.ownsMemory = true
        self.format = format
        self.bytesUsed = format.pixelFormat.isCompressed ? 0 : format.maxByteCount
        self.sequence = 0
        self.timestamp = .zero
        self.receiveTime = 0
        self.metadata = FrameMetadata()
        self.index = index
        self.recycler = recycler
    }

    /// A frame over memory someone else owns (a V4L2 mmap buffer).
    public init(borrowing data: UnsafeMutableRawPointer, capacity: Int, format: FrameFormat, index: Int, recycler: (any FrameRecycler)?) {
        self.data = data
        self.capacity = capacity
        self.ownsMemory = false
        self.format = format
        self.bytesUsed = 0
        self.sequence = 0
        self.timestamp = .zero
        self.receiveTime = 0
        self.metadata = FrameMetadata()
        self.index = index
        self.recycler = recycler
    }

    deinit {
        if ownsMemory { data.deallocate() }
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
        metadata = FrameMetadata()
        pixelsModified = false
        bytesUsed = format.pixelFormat.isCompressed ? 0 : format.maxByteCount
    }

    // MARK: Explicit references

    /// Current number of holders (for tests and diagnostics).
    public var referenceCount: Int { references.load(ordering: .relaxed) }

    /// Marks the frame as held by `count` more users. Call before handing it to them.
    @inline(__always)
    public func retain(_ count: Int = 1) {
        // Relaxed: the hand-off to the new holders is ordered by the ring's release/acquire.
        references.add(count, ordering: .relaxed)
    }

    /// Gives up one hold; the last one sends the frame back to its recycler.
    @inline(__always)
    public func release() {
        // acquiringAndReleasing: every holder's reads happen before the recycler reuses the memory.
        let (old, _) = references.subtract(1, ordering: .acquiringAndReleasing)
        precondition(old > 0, "Frame released more often than retained")
        if old == 1 { recycler?.recycle(self) }
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
