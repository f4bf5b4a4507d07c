#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder
import Logging

/// A V4L2 video capture device streaming through mmap buffers.
///
/// Dequeued kernel buffers are lent to the engine as `Frame`s over the mapped memory (no copy);
/// when the last holder releases a frame the camera (its `FrameRecycler`) queues the buffer back
/// to the kernel, from whatever thread released it. When the engine holds every buffer the driver
/// drops frames; the camera sees the sequence gap and reports it as `DropReason.outOfBuffers`.
/// Other gaps are `DropReason.driverGap`, buffers flagged with `V4L2_BUF_FLAG_ERROR` (and
/// truncated or non-JPEG MJPEG payloads) are `DropReason.corrupt`. Every lost frame is reported
/// once, as `SourceEvent.lost`, before the next frame; the engine never sees a gap itself.
///
/// Faults: `EBUSY` → `DeviceError.busy(device:)`; `ENOSPC` on `STREAMON` →
/// `DeviceError.bandwidth(device:)`; no frame within ``Options/stallTimeoutSeconds`` while the
/// device holds buffers → streaming restart, then a reopen, then `DeviceError.stalled(device:seconds:)`;
/// `ENODEV`/`EIO` mid-stream → `DeviceError.disconnected(device:)` from ``next(timeoutNanoseconds:)``.
public final class V4L2Camera: ReconnectableSource, FrameRecycler, @unchecked Sendable {
    /// The most buffers a capture queue gets (videobuf2's VB2_MAX_FRAME before Linux 6.8).
    public static let maximumBuffers = 32
    // @unchecked Sendable: the stream state (`handle`, `config`, `slots`, `orphans`, `streaming`,
    // `queuedCount`, `starved`, `counters`) is only touched with `lock` held; the per-frame
    // bookkeeping below `MARK: capture thread` is only touched by the one thread that calls `next`
    // (the engine's capture thread), and by `start` before that thread exists.

    public struct Options: Sendable {
        /// No frame for this long while the device holds buffers: restart streaming, then reopen.
        public var stallTimeoutSeconds: Double = 1.5
        /// Whether to restart/reopen a stalled stream (else the engine's own stall timeout applies).
        public var recoverStalls: Bool = true
        /// Subscribe to control and source-change events.
        public var subscribeEvents: Bool = true
        /// Fewest buffers to request (V4L2 REQBUFS).
        public var minimumBuffers: Int = 4
        /// Stretch limited-range YUV (luma 16–235, chroma 16–240: what the driver reports as
        /// `V4L2_QUANTIZATION_LIM_RANGE`, and what its default means for YUV in every colorspace
        /// but JPEG's — a UVC webcam's YUYV) to the full range the engine's YUV is everywhere else
        /// (JPEG's), in place in the kernel buffer before the frame is handed over. Off: the
        /// driver's bytes untouched, read as full range (lifted blacks, paler colours).
        public var expandLimitedRange: Bool = true
        public init() {}
    }

    /// What the camera counted (all also reported to the engine as drops where they lose frames).
    public struct Counters: Sendable, Equatable {
        /// Buffers dequeued from the kernel (frames handed over plus corrupt ones).
        public var dequeued: UInt64 = 0
        public var driverGaps: UInt64 = 0
        public var outOfBuffers: UInt64 = 0
        public var corrupt: UInt64 = 0
        public var restarts: Int = 0
        public var reopens: Int = 0
        public var controlEvents: Int = 0
        public var sourceChanges: Int = 0
        /// Stream restarts made to change the frame interval (the driver refused `S_PARM` mid-stream).
        public var rateRestarts: Int = 0
    }

    enum SlotState { case queued, engine, idle }
    struct Slot {
        let frame: Frame
        let address: UnsafeMutableRawPointer
        let length: Int
        var state: SlotState
    }
    struct Mapping { let address: UnsafeMutableRawPointer; let length: Int }

    public let path: String
    public let info: DeviceInfo
    public let capability: V4L2Capability
    public let options: Options
    public let v4l2Controls: V4L2Controls
    public var isLive: Bool { true }
    public var controls: (any DeviceControlling)? { v4l2Controls }

    let syscalls: any V4L2Syscalls
    let logger: Logger
    let lock = ConditionLock()
    // Guarded by `lock`.
    var handle: V4L2Handle?
    var config: StreamConfiguration?
    var slots: [Slot] = []
    var orphans: [ObjectIdentifier: Mapping] = [:]
    var streaming = false
    var queuedCount = 0
    var starved = false
    var counterState = Counters()
    /// A re-queue found the device gone (ENODEV/EIO) while the engine held every buffer.
    var deviceGone = false
    /// A frame interval to apply with a stream restart before the next frame (the driver refused
    /// `S_PARM` while streaming).
    var pendingInterval: FrameInterval?
    /// Set when the requested format comes from libv4lconvert (the device lacks it).
    var conversion: Conversion?
    /// The device's YUV is limited range and is stretched to full range as frames are dequeued
    /// (false: the range is full, or not said, or the option is off).
    var expandRange = false

    /// A libv4lconvert conversion: kernel buffers stay with the camera, each frame is converted
    /// into a frame of `pool` (one copy, unavoidable for a format change).
    final class Conversion {
        var converter: V4L2Converter
        var source: v4l2_format
        var destination: v4l2_format
        let format: FrameFormat
        let pool: FramePool
        init(converter: V4L2Converter, source: v4l2_format, destination: v4l2_format, format: FrameFormat, pool: FramePool) {
            self.converter = converter; self.source = source; self.destination = destination; self.format = format; self.pool = pool
        }
    }

    /// Whether the device delivers limited-range YUV that the camera stretches to full range
    /// (``Options/expandLimitedRange``).
    public var expandsLimitedRange: Bool { lock.withLock { expandRange } }

    /// The device format behind the stream when libv4lconvert converts it (nil when native).
    public var convertedFrom: UInt32? { lock.withLock { conversion?.source.fmt.pix.pixelformat } }

    // MARK: capture thread
    var pending: [SourceEvent] = []
    var pendingHead = 0
    var lastKernelSequence: UInt32?
    var lastEngineSequence: UInt64?
    var lastFrameAt: UInt64 = 0
    var stallStage = 0
    var stallSince: UInt64 = 0

    /// Opens the capture node at `path` and reads its capabilities, formats and controls.
    public init(path: String, syscalls: any V4L2Syscalls = LinuxSyscalls.shared, options: Options = Options(),
                logger: Logger = Logger(label: "viewfinder.v4l2")) throws {
        self.path = path
        self.syscalls = syscalls
        self.options = options
        self.logger = logger
        let h: V4L2Handle
        switch V4L2Handle.open(path, syscalls: syscalls) {
        case .success(let x): h = x
        case .failure(let e): throw V4L2Enumerator.mapOpenError(e, device: path, operation: "open")
        }
        switch V4L2Enumerator.describe(path: path, handle: h) {
        case .success(let (info, cap, ctrls)):
            self.info = info
            self.capability = cap
            self.v4l2Controls = V4L2Controls(device: path, handle: h, controls: ctrls, logger: logger)
        case .failure(let e):
            h.close()
            throw e
        }
        self.handle = h
        self.config = Self.activeConfiguration(h)
        pending.reserveCapacity(8)
    }

    deinit {
        // Reached once streaming has stopped (the lent frames hold the camera as their recycler).
        handle?.close()
    }

    /// The device's current format and rate (`G_FMT`, `G_PARM`), when the engine handles the format.
    static func activeConfiguration(_ h: V4L2Handle) -> StreamConfiguration? {
        guard case .success(let pix) = h.getFormat(), let pf = PixelFormat(fourcc: pix.pixelformat),
              pix.width > 0, pix.height > 0 else { return nil }
        let interval = (try? h.getInterval().get()) ?? FrameInterval(numerator: 1, denominator: 30)
        return StreamConfiguration(format: frameFormat(pf, pix), interval: interval, bufferCount: 8)
    }

    static func frameFormat(_ pf: PixelFormat, _ pix: v4l2_pix_format) -> FrameFormat {
        let bpl = Int(pix.bytesperline)
        let minimum = FrameFormat.minimumBytesPerRow(pf, width: Int(pix.width))
        return FrameFormat(pf, width: Int(pix.width), height: Int(pix.height), bytesPerRow: pf == .mjpeg ? 0 : max(bpl, minimum))
    }

    /// Whether a driver's format is limited-range YUV: `V4L2_QUANTIZATION_LIM_RANGE`, or the default
    /// for YUV (limited in every colorspace but JPEG's, as `V4L2_MAP_QUANTIZATION_DEFAULT` says) when
    /// the driver names a colorspace. Grey is taken as limited only when said: monochrome sensors
    /// leave the default and deliver the whole range.
    static func isLimitedRange(_ pf: PixelFormat, _ pix: v4l2_pix_format) -> Bool {
        switch pf {
        case .yuyv, .uyvy, .nv12, .i420, .yuv422p:
            if pix.quantization == 2 { return true }
            return pix.quantization == 0 && pix.colorspace != 0 && pix.colorspace != 7 // DEFAULT, JPEG
        case .grey:
            return pix.quantization == 2
        default:
            return false
        }
    }

    public var activeConfiguration: StreamConfiguration? { lock.withLock { config } }

    /// What the camera counted so far (restarts, reopens, losses by reason).
    public var counters: Counters { lock.withLock { counterState } }

    /// Buffers the kernel holds now (queued for capture), for diagnostics and tests.
    public var buffersQueuedInKernel: Int { lock.withLock { queuedCount } }

}
