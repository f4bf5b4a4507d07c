import Viewfinder

/// The byte layout of a shared-memory frame ring (`/dev/shm/NAME`): a 4096-byte header, then
/// `slotCount` slots of `slotStride` bytes. All integers are little-endian. The article
/// <doc:SharedMemoryRing> describes it for readers in other languages; `python/` implements it.
public enum ShmRingLayout {
    /// The first eight bytes of every ring.
    public static let magic: [UInt8] = Array("VFRING01".utf8)
    public static let version: UInt32 = 1
    public static let headerSize = 4096
    public static let slotHeaderSize = 256
    public static let pageSize = 4096
    /// Up to this many planes are described in the header.
    public static let maxPlanes = 3

    /// Header field offsets.
    public enum Header {
        public static let magic = 0              // 8 bytes "VFRING01"
        public static let version = 8            // u32
        public static let headerSize = 12        // u32 (4096)
        public static let slotCount = 16         // u32
        public static let slotHeaderSize = 20    // u32 (256)
        public static let slotStride = 24        // u64: bytes from one slot to the next
        public static let metadataCapacity = 32  // u32: bytes of metadata room per slot
        public static let pixelOffset = 36       // u32: offset of the pixels inside a slot
        public static let pixelCapacity = 40     // u64: bytes of pixel room per slot
        public static let fourcc = 48            // u32: V4L2 fourcc of the pixel format
        public static let width = 52             // u32
        public static let height = 56            // u32
        public static let planeCount = 60        // u32 (1…3)
        public static let planes = 64            // 3 × 16 bytes: offset, bytes per row, width, height (u32 each)
        public static let formatName = 112       // 16 bytes, ASCII, NUL-padded ("yuyv", "nv12", …)
        public static let intervalNumerator = 128   // u32: frame interval = numerator/denominator s
        public static let intervalDenominator = 132 // u32
        public static let writerPID = 136        // u32
        public static let state = 140            // u32: 1 running, 2 finished (the writer ended the run)
        public static let writerStartTicks = 144 // u64: the writer's start time (/proc/PID/stat field 22)
        public static let createdRealtimeNs = 152 // u64: CLOCK_REALTIME when the ring was made
        public static let published = 192        // u64, own cache line: frames published so far
        public static let futexWord = 200        // u32: low 32 bits of `published`; futex-woken on each publish
    }

    /// Slot header field offsets (from the start of the slot).
    public enum Slot {
        public static let seq = 0                // u64 seqlock: 2n+1 while frame n is written, 2n+2 once complete, 0 never used
        public static let index = 8              // u64: n, the ring's own frame count (gaps = frames this reader missed)
        public static let sequence = 16          // u64: the source's sequence number
        public static let timestampNs = 24       // u64: capture time
        public static let clock = 32             // u32: 0 monotonic, 1 monotonic_raw, 2 realtime, 3 boottime, 4 unknown
        public static let droppedBefore = 36     // u32: frames dropped upstream just before this one
        public static let receiveNs = 40         // u64: CLOCK_MONOTONIC when the engine received it
        public static let publishNs = 48         // u64: CLOCK_MONOTONIC when the slot was completed
        public static let bytesUsed = 56         // u64: valid pixel bytes
        public static let metadataLength = 64    // u32: bytes of metadata JSON
        public static let flags = 68             // u32: bit 0 metadata did not fit (length 0), bit 1 pixels modified by a stage
        public static let outputNs = 72          // u64: CLOCK_MONOTONIC when the output took the frame from its ring
    }

    public static let stateRunning: UInt32 = 1
    public static let stateFinished: UInt32 = 2

    public static func clockCode(_ c: ClockSource) -> UInt32 {
        switch c {
        case .monotonic: return 0
        case .monotonicRaw: return 1
        case .realtime: return 2
        case .boottime: return 3
        case .unknown: return 4
        }
    }

    public static func clock(code: UInt32) -> ClockSource {
        switch code {
        case 0: return .monotonic
        case 1: return .monotonicRaw
        case 2: return .realtime
        case 3: return .boottime
        default: return .unknown
        }
    }

    static func roundUp(_ n: Int, _ to: Int) -> Int { (n + to - 1) / to * to }

    /// The geometry of a ring for frames of `format`.
    public struct Geometry: Sendable, Equatable {
        public var slotCount: Int
        public var metadataCapacity: Int
        public var pixelCapacity: Int
        public var pixelOffset: Int { ShmRingLayout.roundUp(ShmRingLayout.slotHeaderSize + metadataCapacity, ShmRingLayout.pageSize) }
        public var slotStride: Int { pixelOffset + ShmRingLayout.roundUp(max(pixelCapacity, 1), ShmRingLayout.pageSize) }
        public var totalSize: Int { ShmRingLayout.headerSize + slotCount * slotStride }
        public func slotOffset(_ i: Int) -> Int { ShmRingLayout.headerSize + i * slotStride }

        public init(format: FrameFormat, slotCount: Int, metadataCapacity: Int = 8192) {
            self.slotCount = slotCount
            self.metadataCapacity = metadataCapacity
            self.pixelCapacity = format.maxByteCount
        }
    }
}

/// Errors of the shared-memory ring.
public enum ShmRingError: Error, Equatable, CustomStringConvertible {
    /// The name is not a valid POSIX shared-memory name.
    case invalidName(String, reason: String)
    /// A live run already publishes under this name.
    case inUse(name: String, pid: Int32)
    /// `/dev/shm/NAME` exists and is not a Viewfinder ring: it is left alone.
    case notARing(name: String)
    /// The ring does not exist (readers).
    case notFound(name: String)
    /// A system call failed.
    case system(name: String, operation: String, errno: Int32, message: String)
    /// The slot count or the format cannot make a ring.
    case invalidGeometry(String)

    public var description: String {
        switch self {
        case .invalidName(let n, let r): return "shared-memory name '\(n)': \(r)"
        case .inUse(let n, let p): return "shared-memory ring '\(n)' is in use by a running writer (pid \(p))"
        case .notARing(let n): return "/dev/shm/\(n) exists and is not a Viewfinder frame ring; refusing to replace it"
        case .notFound(let n): return "no shared-memory ring '\(n)' (/dev/shm/\(n))"
        case .system(let n, let op, let e, let m): return "shared-memory ring '\(n)': \(op) failed: \(m) (errno \(e))"
        case .invalidGeometry(let s): return "shared-memory ring: \(s)"
        }
    }

    static func fromErrno(_ name: String, _ op: String, _ e: Int32 = errno) -> ShmRingError {
        .system(name: name, operation: op, errno: e, message: String(cString: strerror(e)))
    }

    /// Checks a name given without the leading slash (`viewfinder`, `cam0-feed`).
    static func validate(name: String) throws {
        if name.isEmpty { throw ShmRingError.invalidName(name, reason: "empty") }
        if name.utf8.count > 200 { throw ShmRingError.invalidName(name, reason: "longer than 200 bytes") }
        if name.contains("/") { throw ShmRingError.invalidName(name, reason: "must not contain '/' (give the bare name; it lives in /dev/shm)") }
        if name == "." || name == ".." { throw ShmRingError.invalidName(name, reason: "not a file name") }
    }
}

#if canImport(Glibc)
import Glibc
#endif
