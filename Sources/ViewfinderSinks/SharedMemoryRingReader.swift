import CFutex
import Synchronization
import Viewfinder

/// One frame read from a shared-memory ring (pixels copied out of the slot).
public struct ShmFrame: Sendable {
    /// The ring's own count: frame n of this run. A jump of more than one is a gap this reader missed.
    public var index: UInt64
    public var sequence: UInt64
    public var timestamp: Timestamp
    public var receiveNanoseconds: UInt64
    public var outputNanoseconds: UInt64
    public var publishNanoseconds: UInt64
    public var droppedBefore: UInt32
    public var pixelsModified: Bool
    /// The metadata JSON (the same object as `--metadata` writes); nil when it did not fit the slot.
    public var metadataJSON: String?
    public var pixels: [UInt8]
}

/// Reads a shared-memory frame ring (see <doc:SharedMemoryRing>), read-only. A reader that
/// attaches mid-stream starts at the newest complete frame; one that falls more than a ring behind
/// skips to the newest frame and counts what it missed in ``missed``.
public final class ShmRingReader {
    public enum Result: Sendable {
        case frame(ShmFrame)
        case timeout
        /// The writer finished the run and every frame up to the last was offered.
        case finished
    }

    public let name: String
    public let format: FrameFormat
    public let interval: FrameInterval
    public let slotCount: Int
    public let writerPID: Int32
    /// Frames skipped because the writer overwrote them before this reader got to them.
    public private(set) var missed: UInt64 = 0
    /// The next frame index this reader wants.
    public private(set) var nextIndex: UInt64
    private let map: ShmMapping
    private let slotStride: Int
    private let pixelOffset: Int
    private let metadataCapacity: Int

    public init(name: String) throws {
        try ShmRingError.validate(name: name)
        self.name = name
        let fd = shm_open("/" + name, O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { throw errno == ENOENT ? ShmRingError.notFound(name: name) : ShmRingError.fromErrno(name, "shm_open") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ShmRingError.fromErrno(name, "fstat") }
        guard st.st_size >= ShmRingLayout.headerSize else { throw ShmRingError.notARing(name: name) }
        let m = try ShmMapping.map(fd: fd, size: Int(st.st_size), writable: false, name: name)
        typealias H = ShmRingLayout.Header
        let magic = (0..<8).map { m.base.load(fromByteOffset: $0, as: UInt8.self) }
        atomicMemoryFence(ordering: .acquiring)
        guard magic == ShmRingLayout.magic, m.u32(H.version) == ShmRingLayout.version,
              let pf = PixelFormat(fourcc: m.u32(H.fourcc)), m.u32(H.width) > 0, m.u32(H.height) > 0 else { m.unmap(); throw ShmRingError.notARing(name: name) }
        slotCount = Int(m.u32(H.slotCount))
        slotStride = Int(m.u64(H.slotStride))
        pixelOffset = Int(m.u32(H.pixelOffset))
        metadataCapacity = Int(m.u32(H.metadataCapacity))
        guard slotCount > 0, ShmRingLayout.headerSize + slotCount * slotStride <= m.size else { m.unmap(); throw ShmRingError.notARing(name: name) }
        let width = Int(m.u32(H.width)), height = Int(m.u32(H.height))
        format = FrameFormat(pf, width: width, height: height, bytesPerRow: pf.isCompressed ? nil : Int(m.u32(H.planes + 4)))
        interval = FrameInterval(numerator: m.u32(H.intervalNumerator), denominator: m.u32(H.intervalDenominator))
        writerPID = Int32(bitPattern: m.u32(H.writerPID))
        map = m
        let published = m.atomic64(H.published).pointee.load(ordering: .acquiring)
        nextIndex = published > 0 ? published - 1 : 0
    }

    deinit { map.unmap() }

    /// Frames the writer has published so far.
    public var published: UInt64 { map.atomic64(ShmRingLayout.Header.published).pointee.load(ordering: .acquiring) }
    /// Whether the writer has ended the run.
    public var isFinished: Bool { map.atomic32(ShmRingLayout.Header.state).pointee.load(ordering: .acquiring) == ShmRingLayout.stateFinished }

    /// The next frame, waiting up to `timeoutNanoseconds` for it.
    public func next(timeoutNanoseconds: UInt64) -> Result {
        let deadline = monotonicNanoseconds() &+ timeoutNanoseconds
        while true {
            let word = map.atomic32(ShmRingLayout.Header.futexWord)
            let seen = word.pointee.load(ordering: .acquiring)
            let pub = published
            if pub > nextIndex {
                if pub - nextIndex > UInt64(slotCount) { skip(to: pub - 1) }
                if let f = readSlot(nextIndex) { nextIndex += 1; return .frame(f) }
                skip(to: published - 1)   // overwritten while we read it
                continue
            }
            if isFinished { return .finished }
            let now = monotonicNanoseconds()
            if now >= deadline { return .timeout }
            _ = vf_futex_wait(UnsafeRawPointer(word).assumingMemoryBound(to: UInt32.self), seen, Int64(min(deadline - now, 100_000_000)))
        }
    }

    private func skip(to index: UInt64) {
        guard index > nextIndex else { return }
        missed += index - nextIndex
        nextIndex = index
    }

    /// Reads frame `n` under its slot's seqlock; nil when the writer has moved past it.
    private func readSlot(_ n: UInt64) -> ShmFrame? {
        typealias S = ShmRingLayout.Slot
        let slot = ShmMapping(base: map.base + ShmRingLayout.headerSize + Int(n % UInt64(slotCount)) * slotStride, size: slotStride)
        let seq = slot.atomic64(S.seq)
        let before = seq.pointee.load(ordering: .acquiring)
        guard before == 2 &* n &+ 2 else { return nil }
        let bytes = min(Int(slot.u64(S.bytesUsed)), slotStride - pixelOffset)
        let pixels = [UInt8](UnsafeRawBufferPointer(start: slot.base + pixelOffset, count: bytes))
        let mlen = min(Int(slot.u32(S.metadataLength)), metadataCapacity)
        let flags = slot.u32(S.flags)
        let json = flags & 1 != 0 ? nil : String(decoding: UnsafeRawBufferPointer(start: slot.base + ShmRingLayout.slotHeaderSize, count: mlen), as: UTF8.self)
        let f = ShmFrame(index: slot.u64(S.index), sequence: slot.u64(S.sequence),
                         timestamp: Timestamp(nanoseconds: slot.u64(S.timestampNs), clock: ShmRingLayout.clock(code: slot.u32(S.clock))),
                         receiveNanoseconds: slot.u64(S.receiveNs), outputNanoseconds: slot.u64(S.outputNs), publishNanoseconds: slot.u64(S.publishNs),
                         droppedBefore: slot.u32(S.droppedBefore), pixelsModified: flags & 2 != 0, metadataJSON: json, pixels: pixels)
        atomicMemoryFence(ordering: .acquiring)
        guard seq.pointee.load(ordering: .relaxed) == before else { return nil }
        return f
    }
}

#if canImport(Glibc)
import Glibc
#endif
