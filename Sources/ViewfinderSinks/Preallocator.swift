import Synchronization
import Viewfinder
#if canImport(Glibc)
import Glibc
#endif

/// Reserves file space ahead of an append-only writer on a helper thread
/// (`fallocate(FALLOC_FL_KEEP_SIZE)`), so that the writer's `write` lands on pages that already
/// exist.
///
/// On tmpfs (/dev/shm) allocating and zeroing fresh pages is most of the cost of a write: a 4 MB
/// frame costs about 3 ms into new pages and 0.6 ms into reserved ones. Reserving on the other
/// core takes that off the writer's thread. The file's size is unchanged (KEEP_SIZE), so readers
/// and crash recovery never see the reservation; ``finish()`` gives back what was not used.
final class Preallocator: @unchecked Sendable {
    // @unchecked Sendable: `wanted`, `stopping` and `failed` are guarded by `lock`; `reserved` is atomic.
    let fd: Int32
    let chunk: Int64
    private let lock = ConditionLock()
    private var wanted: Int64 = 0
    private var stopping = false
    private var failed = false
    private let reservedEnd = Atomic<Int64>(0)
    private var thread: EngineThread?

    /// The most one `fallocate` call reserves.
    static let step: Int64 = 4 << 20

    init(fd: Int32, chunk: Int64 = 64 << 20) {
        self.fd = fd
        self.chunk = chunk
        thread = EngineThread(name: "vf-prealloc") { [self] in self.run() }
    }

    /// Tells the helper the writer is at `offset`; it keeps two chunks reserved beyond it.
    @inline(__always)
    func advance(to offset: Int64) {
        if offset + chunk < reservedEnd.load(ordering: .relaxed) { return }
        lock.withLock {
            if !failed && offset + 2 * chunk > wanted { wanted = offset + 2 * chunk; lock.signal() }
        }
    }

    /// glibc's `fallocate` (declared only under _GNU_SOURCE, so Swift's Glibc module does not
    /// import it), looked up once at run time.
    typealias FallocateFunction = @convention(c) (Int32, Int32, off_t, off_t) -> Int32
    static let fallocate: FallocateFunction? = {
        guard let sym = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate") else { return nil }
        return unsafeBitCast(sym, to: FallocateFunction.self)
    }()

    private func run() {
        lock.lock()
        while !stopping {
            let end = reservedEnd.load(ordering: .relaxed)
            if wanted <= end { lock.wait(); continue }
            // In steps of `Preallocator.step`: `fallocate` holds the file's inode lock while it
            // allocates, and the writer's `pwrite` needs that lock, so one call for a whole chunk
            // (64 MiB, ~10 ms of page clearing on tmpfs) stalled the writer for that long.
            let target = min(wanted, end + Preallocator.step)
            lock.unlock()
            let rc = Preallocator.fallocate.map { $0(fd, 1 /* FALLOC_FL_KEEP_SIZE */, off_t(end), off_t(target - end)) } ?? -1
            lock.lock()
            if rc != 0 { failed = true; break }  // not supported, or no space: writes go on without it
            reservedEnd.store(target, ordering: .relaxed)
        }
        lock.unlock()
    }

    /// Stops the helper and releases the reservation beyond `size` (the data's end).
    func finish(size: Int64) {
        lock.withLock { stopping = true; lock.broadcast() }
        thread?.join()
        thread = nil
        if reservedEnd.load(ordering: .relaxed) > size { _ = ftruncate(fd, off_t(size)) }
    }
}
