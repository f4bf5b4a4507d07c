import CFutex
import CViewfinderKernels
import Foundation
import Synchronization
import Viewfinder

/// A mapping of a ring's memory, with typed little-endian access to its fields.
struct ShmMapping: @unchecked Sendable {
    // @unchecked Sendable: plain memory shared with other processes; ordering is the seqlock's.
    let base: UnsafeMutableRawPointer
    let size: Int

    func u32(_ off: Int) -> UInt32 { UInt32(littleEndian: base.loadUnaligned(fromByteOffset: off, as: UInt32.self)) }
    func u64(_ off: Int) -> UInt64 { UInt64(littleEndian: base.loadUnaligned(fromByteOffset: off, as: UInt64.self)) }
    func set(_ off: Int, _ v: UInt32) { base.storeBytes(of: v.littleEndian, toByteOffset: off, as: UInt32.self) }
    func set(_ off: Int, _ v: UInt64) { base.storeBytes(of: v.littleEndian, toByteOffset: off, as: UInt64.self) }
    /// An 8-byte-aligned word used atomically (seqlock sequence, published count).
    func atomic64(_ off: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
        (base + off).assumingMemoryBound(to: Atomic<UInt64>.self)
    }
    func atomic32(_ off: Int) -> UnsafeMutablePointer<Atomic<UInt32>> {
        (base + off).assumingMemoryBound(to: Atomic<UInt32>.self)
    }

    static func map(fd: Int32, size: Int, writable: Bool, name: String) throws -> ShmMapping {
        let prot = writable ? PROT_READ | PROT_WRITE : PROT_READ
        // The writer's mapping is populated at once: otherwise the first frame into each slot
        // takes a page fault per 4 KiB (~1000 for a 1080p frame, ~2 ms) and those first frames
        // are the latency tail (p99 of a 600-frame run is its 6th slowest frame).
        let flags = writable ? MAP_SHARED | MAP_POPULATE : MAP_SHARED
        guard let p = mmap(nil, size, prot, flags, fd, 0), p != MAP_FAILED else { throw ShmRingError.fromErrno(name, "mmap") }
        return ShmMapping(base: p, size: size)
    }

    func unmap() { munmap(base, size) }
}

/// Publishes frames into a POSIX shared-memory ring, `/dev/shm/NAME` (see <doc:SharedMemoryRing>).
///
/// The writer never waits for readers: frame n goes to slot n mod N under that slot's seqlock, and
/// a reader that falls more than N frames behind sees the gap in the ring's frame indices. Readers
/// map the ring read-only; there is no per-reader state in the ring, so any number can attach,
/// detach or die without the writer noticing.
///
/// Not thread-safe: one thread publishes (the output's consumer thread).
public final class ShmRingWriter {
    public let name: String
    public let geometry: ShmRingLayout.Geometry
    public let format: FrameFormat
    /// The pid of the writer whose stale ring this one replaced (its process is gone), if any.
    public private(set) var replacedStaleWriter: Int32?
    public private(set) var published: UInt64 = 0
    private let map: ShmMapping
    private var closed = false

    /// Creates the ring. An existing ring of a finished run, or of a writer that no longer runs
    /// (killed), is replaced; one whose writer still runs is ``ShmRingError/inUse(name:pid:)``; a
    /// file that is not a ring is left alone (``ShmRingError/notARing(name:)``).
    public init(name: String, format: FrameFormat, interval: FrameInterval, slotCount: Int = 8, metadataCapacity: Int = 8192) throws {
        try ShmRingError.validate(name: name)
        guard (2...1024).contains(slotCount) else { throw ShmRingError.invalidGeometry("slot count \(slotCount) is outside 2…1024") }
        guard format.planeCount <= ShmRingLayout.maxPlanes else { throw ShmRingError.invalidGeometry("\(format) has more planes than the header describes") }
        self.name = name
        self.format = format
        let g = ShmRingLayout.Geometry(format: format, slotCount: slotCount, metadataCapacity: metadataCapacity)
        self.geometry = g
        var fd = shm_open("/" + name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        if fd < 0 && errno == EEXIST {
            replacedStaleWriter = try Self.removeStale(name: name)
            fd = shm_open("/" + name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        }
        guard fd >= 0 else { throw ShmRingError.fromErrno(name, "shm_open") }
        defer { Glibc.close(fd) }
        // Reserve the memory now: a full /dev/shm is an error here, not a SIGBUS mid-run.
        let r = posix_fallocate(fd, 0, off_t(g.totalSize))
        guard r == 0 else { shm_unlink("/" + name); throw ShmRingError.fromErrno(name, "reserve \(g.totalSize) bytes", r) }
        do { map = try ShmMapping.map(fd: fd, size: g.totalSize, writable: true, name: name) } catch { shm_unlink("/" + name); throw error }
        writeHeader(interval: interval)
    }

    deinit { close(unlink: true) }

    private func writeHeader(interval: FrameInterval) {
        typealias H = ShmRingLayout.Header
        let g = geometry
        map.set(H.version, ShmRingLayout.version)
        map.set(H.headerSize, UInt32(ShmRingLayout.headerSize))
        map.set(H.slotCount, UInt32(g.slotCount))
        map.set(H.slotHeaderSize, UInt32(ShmRingLayout.slotHeaderSize))
        map.set(H.slotStride, UInt64(g.slotStride))
        map.set(H.metadataCapacity, UInt32(g.metadataCapacity))
        map.set(H.pixelOffset, UInt32(g.pixelOffset))
        map.set(H.pixelCapacity, UInt64(g.pixelCapacity))
        map.set(H.fourcc, format.pixelFormat.fourcc)
        map.set(H.width, UInt32(format.width))
        map.set(H.height, UInt32(format.height))
        map.set(H.planeCount, UInt32(format.planeCount))
        for i in 0..<format.planeCount {
            let p = format.plane(i)
            let o = H.planes + 16 * i
            map.set(o, UInt32(p.offset)); map.set(o + 4, UInt32(p.bytesPerRow)); map.set(o + 8, UInt32(p.width)); map.set(o + 12, UInt32(p.height))
        }
        for (i, b) in format.pixelFormat.rawValue.utf8.prefix(15).enumerated() { map.base.storeBytes(of: b, toByteOffset: H.formatName + i, as: UInt8.self) }
        map.set(H.intervalNumerator, interval.numerator)
        map.set(H.intervalDenominator, interval.denominator)
        map.set(H.writerPID, UInt32(bitPattern: getpid()))
        map.set(H.writerStartTicks, ShmProcess.startTicks(pid: getpid()) ?? 0)
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        map.set(H.createdRealtimeNs, UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
        map.set(H.state, ShmRingLayout.stateRunning)
        // The magic goes last: a reader that sees it sees a complete header.
        atomicMemoryFence(ordering: .releasing)
        for (i, b) in ShmRingLayout.magic.enumerated() { map.base.storeBytes(of: b, toByteOffset: H.magic + i, as: UInt8.self) }
    }

    /// Checks, without changing anything, that a ring `name` could be created now: throws
    /// ``ShmRingError/inUse(name:pid:)`` while another running writer holds it and
    /// ``ShmRingError/notARing(name:)`` for a file that is not a ring — what the initializer
    /// would throw once the stream starts. (A ring of a finished or killed run is fine: it is replaced.)
    /// For a command that should refuse before it captures anything.
    public static func checkAvailable(name: String) throws {
        try ShmRingError.validate(name: name)
        _ = try inspectExisting(name: name)
    }

    /// An existing ring's writer pid when its writer no longer runs (nil: there is no ring);
    /// throws `inUse` while it runs, `notARing` for another file.
    private static func inspectExisting(name: String) throws -> Int32? {
        let fd = shm_open("/" + name, O_RDONLY | O_CLOEXEC, 0)
        if fd < 0 && errno == ENOENT { return nil }
        guard fd >= 0 else { throw ShmRingError.fromErrno(name, "shm_open existing") }
        defer { Glibc.close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ShmRingError.fromErrno(name, "fstat") }
        guard st.st_size >= ShmRingLayout.headerSize else { throw ShmRingError.notARing(name: name) }
        let m = try ShmMapping.map(fd: fd, size: ShmRingLayout.headerSize, writable: false, name: name)
        defer { m.unmap() }
        let magic = (0..<8).map { m.base.load(fromByteOffset: $0, as: UInt8.self) }
        guard magic == ShmRingLayout.magic else { throw ShmRingError.notARing(name: name) }
        let pid = Int32(bitPattern: m.u32(ShmRingLayout.Header.writerPID))
        let running = m.u32(ShmRingLayout.Header.state) == ShmRingLayout.stateRunning
        if running && ShmProcess.isAlive(pid: pid, startTicks: m.u64(ShmRingLayout.Header.writerStartTicks)) {
            throw ShmRingError.inUse(name: name, pid: pid)
        }
        return pid
    }

    /// Removes a ring left by a run that ended or was killed; returns that writer's pid (nil when
    /// the ring went meanwhile).
    private static func removeStale(name: String) throws -> Int32? {
        guard let pid = try inspectExisting(name: name) else { return nil }
        guard shm_unlink("/" + name) == 0 || errno == ENOENT else { throw ShmRingError.fromErrno(name, "shm_unlink stale ring") }
        return pid
    }

    /// Publishes one frame: its pixels, its metadata JSON (`metadata`, or the frame's own) and its
    /// timing. Never waits.
    public func publish(_ frame: Frame, metadataJSON: String? = nil, outputNanoseconds: UInt64 = 0) {
        typealias S = ShmRingLayout.Slot
        let g = geometry
        let n = published
        let slot = ShmMapping(base: map.base + g.slotOffset(Int(n % UInt64(g.slotCount))), size: g.slotStride)
        let seq = slot.atomic64(S.seq)
        seq.pointee.store(2 &* n &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)

        let bytes = min(frame.bytesUsed, g.pixelCapacity, frame.capacity)
        // Cache-bypassing stores: the slot is read by another process, not by this thread, and a
        // 1080p frame goes in ~0.24 ms instead of ~0.42 ms (this copy is most of the latency from
        // the stage chain to a reader). The kernel fences its stores before the seqlock's release.
        vf_copy_streaming(slot.base + g.pixelOffset, frame.data, bytes)
        var json = metadataJSON ?? frame.metadataJSON()
        var flags: UInt32 = frame.pixelsModified ? 2 : 0
        let length = json.utf8.count
        if length <= g.metadataCapacity {
            json.withUTF8 { u in (slot.base + ShmRingLayout.slotHeaderSize).copyMemory(from: u.baseAddress!, byteCount: u.count) }
            slot.set(S.metadataLength, UInt32(length))
        } else {
            flags |= 1
            slot.set(S.metadataLength, UInt32(0))
        }
        slot.set(S.index, n)
        slot.set(S.sequence, frame.sequence)
        slot.set(S.timestampNs, frame.timestamp.nanoseconds)
        slot.set(S.clock, ShmRingLayout.clockCode(frame.timestamp.clock))
        slot.set(S.droppedBefore, frame.metadata.droppedBefore)
        slot.set(S.receiveNs, frame.receiveTime)
        slot.set(S.bytesUsed, UInt64(bytes))
        slot.set(S.flags, flags)
        slot.set(S.outputNs, outputNanoseconds)
        slot.set(S.publishNs, monotonicNanoseconds())

        seq.pointee.store(2 &* n &+ 2, ordering: .releasing)
        published = n &+ 1
        map.atomic64(ShmRingLayout.Header.published).pointee.store(published, ordering: .releasing)
        let word = map.atomic32(ShmRingLayout.Header.futexWord)
        word.pointee.store(UInt32(truncatingIfNeeded: published), ordering: .releasing)
        _ = vf_futex_wake_all(UnsafeMutableRawPointer(word).assumingMemoryBound(to: UInt32.self))
    }

    /// Marks the run finished (readers stop after the last frame), wakes readers, and removes the
    /// name from /dev/shm (readers that have it mapped keep their mapping).
    public func close(unlink: Bool = true) {
        guard !closed else { return }
        closed = true
        map.atomic32(ShmRingLayout.Header.state).pointee.store(ShmRingLayout.stateFinished, ordering: .releasing)
        let word = map.atomic32(ShmRingLayout.Header.futexWord)
        word.pointee.add(1, ordering: .releasing)  // waiters wake and see the state
        _ = vf_futex_wake_all(UnsafeMutableRawPointer(word).assumingMemoryBound(to: UInt32.self))
        if unlink { shm_unlink("/" + name) }
        map.unmap()
    }
}

/// Whether a process still runs, and when it started (to tell a reused pid from the writer).
enum ShmProcess {
    /// Field 22 of /proc/PID/stat: start time in clock ticks after boot.
    static func startTicks(pid: Int32) -> UInt64? {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = s.lastIndex(of: ")") else { return nil }
        // Fields after the command name (which may hold spaces) start at field 3.
        let fields = s[s.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }

    static func isAlive(pid: Int32, startTicks: UInt64) -> Bool {
        guard pid > 0 else { return false }
        if kill(pid, 0) != 0 && errno == ESRCH { return false }
        // A zombie (killed, not yet reaped) no longer writes.
        if let s = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let c = s.lastIndex(of: ")"),
           s[s.index(after: c)...].split(separator: " ").first == "Z" { return false }
        guard startTicks != 0, let now = Self.startTicks(pid: pid) else { return true }
        return now == startTicks
    }
}
