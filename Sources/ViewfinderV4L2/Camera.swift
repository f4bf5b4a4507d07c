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
    }

    private enum SlotState { case queued, engine, idle }
    private struct Slot {
        let frame: Frame
        let address: UnsafeMutableRawPointer
        let length: Int
        var state: SlotState
    }
    private struct Mapping { let address: UnsafeMutableRawPointer; let length: Int }

    public let path: String
    public let info: DeviceInfo
    public let capability: V4L2Capability
    public let options: Options
    public let v4l2Controls: V4L2Controls
    public var isLive: Bool { true }
    public var controls: (any DeviceControlling)? { v4l2Controls }

    private let syscalls: any V4L2Syscalls
    private let logger: Logger
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var handle: V4L2Handle?
    private var config: StreamConfiguration?
    private var slots: [Slot] = []
    private var orphans: [ObjectIdentifier: Mapping] = [:]
    private var streaming = false
    private var queuedCount = 0
    private var starved = false
    private var counterState = Counters()
    /// A re-queue found the device gone (ENODEV/EIO) while the engine held every buffer.
    private var deviceGone = false
    /// Set when the requested format comes from libv4lconvert (the device lacks it).
    private var conversion: Conversion?

    /// A libv4lconvert conversion: kernel buffers stay with the camera, each frame is converted
    /// into a frame of `pool` (one copy, unavoidable for a format change).
    private final class Conversion {
        var converter: V4L2Converter
        var source: v4l2_format
        var destination: v4l2_format
        let format: FrameFormat
        let pool: FramePool
        init(converter: V4L2Converter, source: v4l2_format, destination: v4l2_format, format: FrameFormat, pool: FramePool) {
            self.converter = converter; self.source = source; self.destination = destination; self.format = format; self.pool = pool
        }
    }

    /// The device format behind the stream when libv4lconvert converts it (nil when native).
    public var convertedFrom: UInt32? { lock.withLock { conversion?.source.fmt.pix.pixelformat } }

    // MARK: capture thread
    private var pending: [SourceEvent] = []
    private var pendingHead = 0
    private var lastKernelSequence: UInt32?
    private var lastEngineSequence: UInt64?
    private var lastFrameAt: UInt64 = 0
    private var stallStage = 0
    private var stallSince: UInt64 = 0

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
    private static func activeConfiguration(_ h: V4L2Handle) -> StreamConfiguration? {
        guard case .success(let pix) = h.getFormat(), let pf = PixelFormat(fourcc: pix.pixelformat),
              pix.width > 0, pix.height > 0 else { return nil }
        let interval = (try? h.getInterval().get()) ?? FrameInterval(numerator: 1, denominator: 30)
        return StreamConfiguration(format: frameFormat(pf, pix), interval: interval, bufferCount: 8)
    }

    private static func frameFormat(_ pf: PixelFormat, _ pix: v4l2_pix_format) -> FrameFormat {
        let bpl = Int(pix.bytesperline)
        let minimum = FrameFormat.minimumBytesPerRow(pf, width: Int(pix.width))
        return FrameFormat(pf, width: Int(pix.width), height: Int(pix.height), bytesPerRow: pf == .mjpeg ? 0 : max(bpl, minimum))
    }

    public var activeConfiguration: StreamConfiguration? { lock.withLock { config } }

    /// What the camera counted so far (restarts, reopens, losses by reason).
    public var counters: Counters { lock.withLock { counterState } }

    /// Buffers the kernel holds now (queued for capture), for diagnostics and tests.
    public var buffersQueuedInKernel: Int { lock.withLock { queuedCount } }

    // MARK: Configuration

    /// Sets the format (`S_FMT` at the closest size the device offers) and rate (`S_PARM`).
    public func configure(_ request: StreamRequest) throws -> StreamConfiguration {
        if lock.withLock({ streaming }) { stop() }
        lock.withLock { conversion = nil }
        guard let fmt = info.formats.first(where: { $0.fourcc == request.pixelFormat.fourcc }) else {
            if let c = try configureConverted(request) { return c }
            throw DeviceError.unsupportedFormat(device: path, requested: "\(request.pixelFormat) \(request.width)x\(request.height)", available: offered())
        }
        let size = Self.closestSize(in: fmt.sizes, width: request.width, height: request.height)
        let h = try currentHandle()
        let pix: v4l2_pix_format
        switch h.setFormat(fourcc: fmt.fourcc, width: size.width, height: size.height) {
        case .success(let p): pix = p
        case .failure(let e): throw mapStreamError(e, operation: "VIDIOC_S_FMT", request: request)
        }
        guard pix.pixelformat == fmt.fourcc, pix.width > 0, pix.height > 0 else {
            throw DeviceError.unsupportedFormat(device: path, requested: "\(request.pixelFormat) \(request.width)x\(request.height)", available: offered())
        }
        let interval = applyRate(request, h)
        // What REQBUFS will grant: videobuf2 caps a queue at 32 buffers (VB2_MAX_FRAME before
        // Linux 6.8; uvcvideo keeps 32), so stages that hold frames plan with the real count.
        let c = StreamConfiguration(format: Self.frameFormat(request.pixelFormat, pix), interval: interval,
                                    bufferCount: min(Self.maximumBuffers, max(options.minimumBuffers, request.bufferCount)))
        lock.withLock { config = c }
        logger.info("\(path): configured \(c.format) bytesPerRow \(c.format.bytesPerRow) at \(c.interval)")
        return c
    }

    /// `S_PARM` for the requested rate; the rate the device runs at.
    private func applyRate(_ request: StreamRequest, _ h: V4L2Handle) -> FrameInterval {
        var interval: FrameInterval
        if let fps = request.fps, fps > 0 {
            switch h.setInterval(FrameInterval(fps: fps)) {
            case .success(let i) where i.numerator > 0 && i.denominator > 0: interval = i
            case .success, .failure:
                interval = (try? h.getInterval().get()) ?? FrameInterval(fps: fps)
                logger.warning("\(path): could not set \(fps) fps; the device runs at \(interval)")
            }
        } else {
            interval = (try? h.getInterval().get()) ?? FrameInterval(numerator: 1, denominator: 30)
        }
        if interval.numerator == 0 || interval.denominator == 0 { interval = FrameInterval(numerator: 1, denominator: 30) }
        return interval
    }

    /// The libv4lconvert fallback: the device lacks the requested format, libv4lconvert makes it
    /// (RGB24 or YU12) from one the device has (Bayer, RGB565, YVYU, MJPEG, …). Nil when it can't.
    private func configureConverted(_ request: StreamRequest) throws -> StreamConfiguration? {
        guard V4L2Converter.engineDestinations.contains(request.pixelFormat) else { return nil }
        let h = try currentHandle()
        guard let converter = V4L2Converter(handle: h),
              let plan = converter.plan(fourcc: request.pixelFormat.fourcc, width: request.width, height: request.height),
              plan.source.fmt.pix.pixelformat != request.pixelFormat.fourcc else { return nil }
        let srcFourcc = plan.source.fmt.pix.pixelformat
        let pix: v4l2_pix_format
        switch h.setFormat(fourcc: srcFourcc, width: Int(plan.source.fmt.pix.width), height: Int(plan.source.fmt.pix.height)) {
        case .success(let p): pix = p
        case .failure(let e): throw mapStreamError(e, operation: "VIDIOC_S_FMT", request: request)
        }
        guard pix.pixelformat == srcFourcc, pix.width > 0, pix.height > 0 else { return nil }
        var source = v4l2_format()
        source.type = V4L2.bufTypeVideoCapture
        source.fmt.pix = pix
        let format = FrameFormat(request.pixelFormat, width: Int(pix.width), height: Int(pix.height))
        let interval = applyRate(request, h)
        let count = max(options.minimumBuffers, request.bufferCount)
        let conv = Conversion(converter: converter, source: source, destination: V4L2Converter.v4l2Format(format), format: format,
                              pool: FramePool(format: format, count: count))
        let c = StreamConfiguration(format: format, interval: interval, bufferCount: count)
        lock.withLock { config = c; conversion = conv }
        logger.info("\(path): \(request.pixelFormat) is not a device format: converting \(fourCCString(srcFourcc)) \(pix.width)x\(pix.height) to \(format) with libv4lconvert")
        return c
    }

    /// Formats and sizes the device offers, for error messages.
    private func offered() -> [String] {
        info.formats.map { f in
            let sizes = f.sizes.map { s -> String in
                switch s {
                case .discrete(let w, let h, _): return "\(w)x\(h)"
                case .stepwise(let a, let b, _, let c, let d, _, _): return "\(a)x\(c)-\(b)x\(d)"
                }
            }
            let name = f.pixelFormat.map { "\($0)" } ?? "\(fourCCString(f.fourcc)) (not handled by the engine)"
            return "\(name) \(sizes.joined(separator: "/"))"
        }
    }

    /// The size in `sizes` closest to the request (discrete: least area and aspect difference;
    /// stepwise: clamped and snapped to the step grid).
    static func closestSize(in sizes: [FrameSizeRange], width: Int, height: Int) -> (width: Int, height: Int) {
        var best: (width: Int, height: Int) = (width, height)
        var bestScore = Double.infinity
        for s in sizes {
            let cand: (width: Int, height: Int)
            switch s {
            case .discrete(let w, let h, _): cand = (w, h)
            case .stepwise(let a, let b, let sw, let c, let d, let sh, _):
                func snap(_ v: Int, _ lo: Int, _ hi: Int, _ step: Int) -> Int {
                    let clamped = min(max(v, lo), hi)
                    let st = max(step, 1)
                    return min(lo + ((clamped - lo + st / 2) / st) * st, hi)
                }
                cand = (snap(width, a, b, sw), snap(height, c, d, sh))
            }
            let score = Double(abs(cand.width - width)) + Double(abs(cand.height - height))
                + (cand.width < width || cand.height < height ? 0.5 : 0) // prefer not to upscale
            if score < bestScore { bestScore = score; best = cand }
        }
        return best
    }

    private func currentHandle() throws -> V4L2Handle {
        try lock.withLock { () throws -> V4L2Handle in
            if let h = handle { return h }
            return try reopenLocked()
        }
    }

    /// Opens the node again (after `stop` left buffers lent out, or for stall recovery). Lock held.
    private func reopenLocked() throws -> V4L2Handle {
        if let old = handle { old.close() }
        handle = nil
        switch V4L2Handle.open(path, syscalls: syscalls) {
        case .success(let h):
            handle = h
            v4l2Controls.rebind(h)
            return h
        case .failure(let e):
            v4l2Controls.rebind(nil)
            throw V4L2Enumerator.mapOpenError(e, device: path, operation: "open")
        }
    }

    private func mapStreamError(_ e: Errno, operation: String, request: StreamRequest? = nil) -> DeviceError {
        switch e {
        case .busy: return .busy(device: path)
        case .noSpace where operation == "VIDIOC_STREAMON": return .bandwidth(device: path)
        case .invalidArgument where request != nil:
            return .unsupportedFormat(device: path, requested: "\(request!.pixelFormat) \(request!.width)x\(request!.height)", available: offered())
        case _ where e.meansDisconnected: return .disconnected(device: path)
        case .permissionDenied, .notPermitted: return .permissionDenied(device: path)
        default: return .io(device: path, operation: operation, errno: e.rawValue, message: e.message)
        }
    }

    // MARK: Streaming

    public func start() throws {
        try lock.withLock { () throws -> Void in
            guard !streaming else { return }
            guard config != nil else { throw DeviceError.notRunning(device: "\(path) (not configured: no format the engine handles is active)") }
            try startLocked()
        }
        lastKernelSequence = nil
        lastFrameAt = monotonicNanoseconds()
        stallStage = 0
    }

    /// REQBUFS, QUERYBUF + mmap, QBUF all, subscribe, STREAMON. Lock held.
    private func startLocked() throws {
        guard let cfg = config else { throw DeviceError.notRunning(device: path) }
        var h = try handle ?? reopenLocked()
        if !orphans.isEmpty || !slots.isEmpty {
            // Buffers of the previous run are still lent out (mapped): a fresh open gets a fresh queue.
            for s in slots where s.state != .engine { _ = syscalls.munmap(s.address, length: s.length) }
            for s in slots where s.state == .engine { orphans[ObjectIdentifier(s.frame)] = Mapping(address: s.address, length: s.length) }
            slots = []
            h = try reopenLocked()
            if conversion == nil, case .failure(let e) = h.setFormat(fourcc: cfg.format.pixelFormat.fourcc, width: cfg.format.width, height: cfg.format.height) {
                throw mapStreamError(e, operation: "VIDIOC_S_FMT")
            }
            _ = h.setInterval(cfg.interval)
        }
        if let conv = conversion, conv.converter.fd != h.fd {
            // libv4lconvert keeps the descriptor it was created with.
            guard let c = V4L2Converter(handle: h) else {
                throw DeviceError.io(device: path, operation: "v4lconvert_create", errno: 0, message: "libv4lconvert could not attach to the reopened device")
            }
            conv.converter = c
            if case .failure(let e) = h.setFormat(fourcc: conv.source.fmt.pix.pixelformat, width: Int(conv.source.fmt.pix.width), height: Int(conv.source.fmt.pix.height)) {
                throw mapStreamError(e, operation: "VIDIOC_S_FMT")
            }
        }
        let n: Int
        switch h.requestBuffers(cfg.bufferCount) {
        case .success(let c): n = c
        case .failure(let e): throw mapStreamError(e, operation: "VIDIOC_REQBUFS")
        }
        guard n >= 2 else {
            _ = h.requestBuffers(0)
            throw DeviceError.io(device: path, operation: "VIDIOC_REQBUFS", errno: Errno.noMemory.rawValue, message: "the driver granted \(n) buffers (at least 2 needed)")
        }
        var made: [Slot] = []
        made.reserveCapacity(n)
        func undo() {
            for s in made { _ = syscalls.munmap(s.address, length: s.length) }
            _ = h.requestBuffers(0)
        }
        for i in 0..<n {
            let b: v4l2_buffer
            switch h.queryBuffer(i) {
            case .success(let x): b = x
            case .failure(let e): undo(); throw mapStreamError(e, operation: "VIDIOC_QUERYBUF")
            }
            let length = Int(b.length)
            switch retryingInterrupts({ syscalls.mmap(length: length, fd: h.fd, offset: Int(b.m.offset)) }) {
            case .success(let p):
                made.append(Slot(frame: Frame(borrowing: p, capacity: length, format: cfg.format, index: i, recycler: self),
                                 address: p, length: length, state: .idle))
            case .failure(let e): undo(); throw mapStreamError(e, operation: "mmap")
            }
        }
        for i in 0..<n {
            if case .failure(let e) = h.queueBuffer(i) { undo(); throw mapStreamError(e, operation: "VIDIOC_QBUF") }
            made[i].state = .queued
        }
        if options.subscribeEvents {
            _ = h.subscribe(type: V4L2.eventSourceChange, id: 0)
            _ = v4l2Controls.subscribeEvents()
        }
        if case .failure(let e) = h.streamOn() {
            undo()
            throw mapStreamError(e, operation: "VIDIOC_STREAMON")
        }
        slots = made
        queuedCount = n
        starved = false
        streaming = true
        logger.info("\(path): streaming \(cfg.format) with \(n) mmap buffers")
    }

    /// STREAMOFF; buffers still lent out stay mapped until released. Idempotent.
    public func stop() {
        lock.withLock {
            guard streaming || !slots.isEmpty else { return }
            streaming = false
            if let h = handle { _ = h.streamOff() }
            var lent = 0
            for s in slots {
                if s.state == .engine {
                    orphans[ObjectIdentifier(s.frame)] = Mapping(address: s.address, length: s.length)
                    lent += 1
                } else {
                    _ = syscalls.munmap(s.address, length: s.length)
                }
            }
            slots = []
            queuedCount = 0
            if lent == 0, let h = handle { _ = h.requestBuffers(0) }
            lock.broadcast()
        }
        pending.removeAll(keepingCapacity: true)
        pendingHead = 0
    }

    /// Opens the node again after a disconnection — the camera was plugged back in — so that the
    /// next `configure` and `start` stream from it; throws while the node is absent. A session
    /// calls it while interrupted (`ReconnectableSource`).
    public func reconnect() throws {
        try lock.withLock { () throws -> Void in
            guard !streaming else { return }
            _ = try reopenLocked()
            deviceGone = false
        }
    }

    /// Stops streaming and closes the device node. Frames still lent out stay valid until released.
    public func close() {
        stop()
        lock.withLock {
            handle?.close()
            handle = nil
            v4l2Controls.rebind(nil)
        }
    }

    // MARK: Giving buffers back

    /// Queues the buffer behind `frame` back to the kernel (called by `Frame.release()` on any thread).
    public func recycle(_ frame: Frame) {
        lock.lock()
        defer { lock.unlock() }
        let i = frame.index
        if i < slots.count, slots[i].frame === frame {
            guard slots[i].state == .engine else { return }
            if streaming, let h = handle {
                switch h.queueBuffer(i) {
                case .success:
                    slots[i].state = .queued
                    queuedCount &+= 1
                    if queuedCount == 1 { lock.signal() }
                case .failure(let e):
                    slots[i].state = .idle
                    if e.meansDisconnected { deviceGone = true; lock.signal() }
                    logger.debug("\(path): QBUF \(i) failed: \(e)")
                }
            } else {
                slots[i].state = .idle
            }
        } else if let m = orphans.removeValue(forKey: ObjectIdentifier(frame)) {
            _ = syscalls.munmap(m.address, length: m.length)
        }
    }

    // MARK: Capture

    @inline(__always)
    private func popPending() -> SourceEvent? {
        guard pendingHead < pending.count else { return nil }
        let e = pending[pendingHead]
        pendingHead &+= 1
        if pendingHead == pending.count { pending.removeAll(keepingCapacity: true); pendingHead = 0 }
        return e
    }

    public func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        if let e = popPending() { return e }
        let start = monotonicNanoseconds()
        lock.lock()
        guard streaming, let h = handle else {
            lock.unlock()
            throw DeviceError.notRunning(device: path)
        }
        if queuedCount == 0 {
            if deviceGone {
                lock.unlock()
                throw DeviceError.disconnected(device: path)
            }
            if !slots.contains(where: { $0.state == .engine }) {
                // Nothing lent out, nothing queued: a re-queue failed. Queue the buffers again.
                for i in slots.indices where slots[i].state == .idle {
                    switch h.queueBuffer(i) {
                    case .success:
                        slots[i].state = .queued
                        queuedCount &+= 1
                    case .failure(let e):
                        lock.unlock()
                        throw mapStreamError(e, operation: "VIDIOC_QBUF")
                    }
                }
                lock.unlock()
                return .timeout
            }
            // The engine holds every buffer: nothing for the kernel to fill. Wait for a release
            // (the driver meanwhile drops frames; the gap is counted as out-of-buffers).
            lock.wait(untilMonotonicNanoseconds: start &+ timeoutNanoseconds)
            let gone = deviceGone
            lock.unlock()
            if gone { throw DeviceError.disconnected(device: path) }
            lastFrameAt = monotonicNanoseconds()
            return .timeout
        }
        lock.unlock()
        let ms = Int32(clamping: (timeoutNanoseconds &+ 999_999) / 1_000_000)
        let ev: PollEvents
        switch h.poll(events: [.input, .priority], timeoutMilliseconds: ms) {
        case .success(let e): ev = e
        case .failure(let e):
            if e.meansDisconnected { throw DeviceError.disconnected(device: path) }
            throw DeviceError.io(device: path, operation: "poll", errno: e.rawValue, message: e.message)
        }
        if ev.contains(.priority) { try drainEvents(h) }
        if ev.contains(.input) || ev.contains(.error) || ev.contains(.hangup) {
            if let e = try dequeue(h, pollSaidError: !ev.contains(.input)) { return e }
            return .timeout
        }
        if ev.isEmpty { try checkStall(now: monotonicNanoseconds()) }
        return .timeout
    }

    /// DQBUF and turn the buffer into an event. Capture thread only.
    @inline(__always)
    private func dequeue(_ h: V4L2Handle, pollSaidError: Bool) throws -> SourceEvent? {
        var b = v4l2_buffer()
        switch h.dequeueBuffer(into: &b) {
        case .success: break
        case .failure(let e):
            if e == .wouldBlock {
                if pollSaidError {
                    // POLLERR without a buffer: find out whether the device is gone, else back off.
                    if case .failure(let q) = h.queryCapability(), q.meansDisconnected { throw DeviceError.disconnected(device: path) }
                    sleepUntil(monotonicNanoseconds: monotonicNanoseconds() &+ 2_000_000)
                }
                return nil
            }
            if e.meansDisconnected { throw DeviceError.disconnected(device: path) }
            if e == .pipe { return .endOfStream }
            throw DeviceError.io(device: path, operation: "VIDIOC_DQBUF", errno: e.rawValue, message: e.message)
        }
        let receive = monotonicNanoseconds()
        let i = Int(b.index)
        lock.lock()
        guard i < slots.count, slots[i].state == .queued else {
            lock.unlock()
            throw DeviceError.io(device: path, operation: "VIDIOC_DQBUF", errno: Errno.invalidArgument.rawValue, message: "the driver returned buffer \(i), which was not queued")
        }
        slots[i].state = .engine
        queuedCount &-= 1
        counterState.dequeued &+= 1
        let wasStarved = starved
        starved = queuedCount == 0
        let frame = slots[i].frame
        let format = config?.format ?? frame.format
        let conv = conversion
        lock.unlock()

        lastFrameAt = receive
        stallStage = 0

        // Sequence: report a gap once, with its cause, before the frame.
        let seq = b.sequence
        var gap: UInt64 = 0
        if let last = lastKernelSequence {
            let d = seq &- last
            if d >= 1 && d < 0x4000_0000 { gap = UInt64(d - 1) }
        }
        lastKernelSequence = seq
        let engineSeq = lastEngineSequence.map { $0 &+ 1 &+ gap } ?? UInt64(seq)
        lastEngineSequence = engineSeq
        if gap > 0 {
            let reason: DropReason = wasStarved ? .outOfBuffers : .driverGap
            lock.withLock {
                if wasStarved { counterState.outOfBuffers &+= gap } else { counterState.driverGaps &+= gap }
            }
            pending.append(.lost(reason, count: Int(gap)))
        }

        let used = b.bytesused == 0 ? Int(b.length) : Int(b.bytesused)
        if let conv { return convert(conv, kernelFrame: frame, used: used, buffer: b, sequence: engineSeq, gap: gap, receive: receive) }

        // Corrupt: flagged by the driver, truncated, or not a JPEG.
        var corrupt = b.flags & V4L2.bufFlagError != 0
        if format.pixelFormat == .mjpeg {
            if used < 4 || frame.data.load(as: UInt8.self) != 0xFF || frame.data.load(fromByteOffset: 1, as: UInt8.self) != 0xD8 { corrupt = true }
        } else if used < format.maxByteCount {
            corrupt = true
        }
        if corrupt {
            lock.withLock { counterState.corrupt &+= 1 }
            frame.retain()
            frame.release() // straight back to the kernel
            pending.append(.lost(.corrupt, count: 1))
            return popPending()
        }

        frame.reset()
        frame.format = format
        frame.bytesUsed = min(used, frame.capacity)
        frame.sequence = engineSeq
        let ns = UInt64(max(b.timestamp.tv_sec, 0)) &* 1_000_000_000 &+ UInt64(max(b.timestamp.tv_usec, 0)) &* 1_000
        let clock: ClockSource = b.flags & V4L2.bufFlagTimestampMask == V4L2.bufFlagTimestampMonotonic ? .monotonic : .unknown
        frame.timestamp = Timestamp(nanoseconds: ns, clock: clock)
        frame.receiveTime = receive
        frame.metadata.droppedBefore = UInt32(truncatingIfNeeded: gap)
        frame.retain()
        if gap > 0 {
            pending.append(.frame(frame))
            return popPending()
        }
        return .frame(frame)
    }

    /// libv4lconvert path: convert the kernel buffer into a pool frame and give the buffer back.
    private func convert(_ conv: Conversion, kernelFrame: Frame, used: Int, buffer b: v4l2_buffer, sequence: UInt64, gap: UInt64, receive: UInt64) -> SourceEvent? {
        var lost: DropReason? = b.flags & V4L2.bufFlagError != 0 ? .corrupt : nil
        var out: Frame? = nil
        if lost == nil {
            if let f = conv.pool.acquire() {
                switch conv.converter.convert(source: &conv.source, destination: &conv.destination, from: kernelFrame.data, count: used,
                                              to: f.data, capacity: f.capacity) {
                case .success: out = f
                case .failure(let e):
                    logger.debug("\(path): libv4lconvert: \(e.message)")
                    f.release()
                    lost = .corrupt
                }
            } else {
                lost = .outOfBuffers
            }
        }
        kernelFrame.retain()
        kernelFrame.release() // the kernel buffer goes straight back
        guard let out else {
            lock.withLock { if lost == .corrupt { counterState.corrupt &+= 1 } else { counterState.outOfBuffers &+= 1 } }
            pending.append(.lost(lost ?? .corrupt, count: 1))
            return popPending()
        }
        out.format = conv.format
        out.bytesUsed = conv.format.maxByteCount
        out.sequence = sequence
        let ns = UInt64(max(b.timestamp.tv_sec, 0)) &* 1_000_000_000 &+ UInt64(max(b.timestamp.tv_usec, 0)) &* 1_000
        out.timestamp = Timestamp(nanoseconds: ns, clock: b.flags & V4L2.bufFlagTimestampMask == V4L2.bufFlagTimestampMonotonic ? .monotonic : .unknown)
        out.receiveTime = receive
        out.metadata.droppedBefore = UInt32(truncatingIfNeeded: gap)
        if gap > 0 {
            pending.append(.frame(out))
            return popPending()
        }
        return .frame(out)
    }

    /// Reads every pending event (control changes, source changes). Capture thread only.
    private func drainEvents(_ h: V4L2Handle) throws {
        for _ in 0..<64 {
            switch h.dequeueEvent() {
            case .success(let ev):
                if ev.type == V4L2.eventCtrl {
                    v4l2Controls.apply(ev)
                    lock.withLock { counterState.controlEvents += 1 }
                } else if ev.type == V4L2.eventSourceChange {
                    lock.withLock { counterState.sourceChanges += 1 }
                    logger.warning("\(path): the source changed (resolution or signal); frames keep the configured format")
                }
            case .failure(let e):
                if e.meansDisconnected { throw DeviceError.disconnected(device: path) }
                return
            }
        }
    }

    /// Stall recovery: restart streaming, then reopen, then give up. Capture thread only.
    private func checkStall(now: UInt64) throws {
        guard options.recoverStalls else { return }
        let limit = UInt64(options.stallTimeoutSeconds * 1e9)
        guard now &- lastFrameAt > limit else { return }
        if stallStage == 0 { stallSince = lastFrameAt }
        let seconds = Double(now &- stallSince) / 1e9
        switch stallStage {
        case 0:
            logger.warning("\(path): no frame for \(options.stallTimeoutSeconds) s: restarting the stream")
            try lock.withLock { () throws -> Void in
                counterState.restarts += 1
                guard let h = handle else { return }
                _ = h.streamOff()
                for i in slots.indices where slots[i].state == .queued { slots[i].state = .idle }
                queuedCount = 0
                for i in slots.indices where slots[i].state == .idle {
                    if case .failure(let e) = h.queueBuffer(i) { throw mapStreamError(e, operation: "VIDIOC_QBUF") }
                    slots[i].state = .queued
                    queuedCount += 1
                }
                if case .failure(let e) = h.streamOn() { throw mapStreamError(e, operation: "VIDIOC_STREAMON") }
            }
        case 1:
            logger.warning("\(path): still no frame after a restart: reopening the device")
            try lock.withLock { () throws -> Void in
                counterState.reopens += 1
                if let h = handle { _ = h.streamOff() }
                streaming = false
                for s in slots {
                    if s.state == .engine { orphans[ObjectIdentifier(s.frame)] = Mapping(address: s.address, length: s.length) }
                    else { _ = syscalls.munmap(s.address, length: s.length) }
                }
                slots = []
                queuedCount = 0
                let h = try reopenLocked()
                if let cfg = config {
                    if conversion == nil, case .failure(let e) = h.setFormat(fourcc: cfg.format.pixelFormat.fourcc, width: cfg.format.width, height: cfg.format.height) {
                        throw mapStreamError(e, operation: "VIDIOC_S_FMT")
                    }
                    _ = h.setInterval(cfg.interval)
                }
                try startLocked()
            }
        default:
            throw DeviceError.stalled(device: path, seconds: (seconds * 10).rounded() / 10)
        }
        stallStage += 1
        lastKernelSequence = nil
        lastFrameAt = now
    }
}
