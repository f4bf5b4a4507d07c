#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder
import Logging

/// Streaming: buffers in and out of the kernel, lending them to the engine, and turning each
/// dequeued buffer into a frame or a counted loss. `next` and what it calls run on the capture
/// thread only.
extension V4L2Camera {
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
    func startLocked() throws {
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
        logger.debug("\(path): streaming \(cfg.format) with \(n) mmap buffers")
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
            // Free the queue even with frames still lent out: since Linux 5.0 videobuf2 orphans
            // mapped buffers (they stay valid until unmapped) and releases the queue's ownership.
            // Skipping this while frames were in flight kept this open file the queue's owner —
            // and a mapping keeps the file alive after close() — so the next session on the
            // device got EBUSY. Older kernels refuse with EBUSY; after close() the queue is then
            // released with the last lent frame's mapping (which holds the file).
            if let h = handle, case .failure(let e) = h.requestBuffers(0) {
                logger.debug("\(path): REQBUFS(0) with \(lent) frames lent out failed: \(e)")
            }
            lock.broadcast()
        }
        pending.removeAll(keepingCapacity: true)
        pendingHead = 0
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
    package func recycle(_ frame: Frame) {
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
    func popPending() -> SourceEvent? {
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
        if let iv = pendingInterval {
            pendingInterval = nil
            do { try restartLocked(h, interval: iv) } catch { lock.unlock(); throw error }
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
    func dequeue(_ h: V4L2Handle, pollSaidError: Bool) throws -> SourceEvent? {
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
        let expand = expandRange
        lock.unlock()

        lastFrameAt = receive
        stallStage = 0

        let (engineSeq, gap) = accountSequence(b.sequence, wasStarved: wasStarved)
        let used = b.bytesused == 0 ? Int(b.length) : Int(b.bytesused)
        if let conv { return convert(conv, kernelFrame: frame, used: used, buffer: b, sequence: engineSeq, gap: gap, receive: receive) }

        if isCorrupt(frame, buffer: b, used: used, format: format) {
            lock.withLock { counterState.corrupt &+= 1 }
            frame.retain()
            frame.release() // straight back to the kernel
            pending.append(.lost(.corrupt, count: 1))
            return popPending()
        }

        if expand { YUVRange.expand(frame.data, capacity: frame.capacity, format: format) }
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

    /// The engine's sequence number for a buffer with the kernel's `seq`; a gap is reported once,
    /// with its cause (out of buffers when the kernel had none queued, else the driver's), before
    /// the frame. Capture thread only.
    @inline(__always)
    func accountSequence(_ seq: UInt32, wasStarved: Bool) -> (sequence: UInt64, gap: UInt64) {
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
        return (engineSeq, gap)
    }

    /// Flagged by the driver, truncated, or (MJPEG) not a JPEG.
    @inline(__always)
    func isCorrupt(_ frame: Frame, buffer b: v4l2_buffer, used: Int, format: FrameFormat) -> Bool {
        if b.flags & V4L2.bufFlagError != 0 { return true }
        if format.pixelFormat == .mjpeg {
            return used < 4 || frame.data.load(as: UInt8.self) != 0xFF || frame.data.load(fromByteOffset: 1, as: UInt8.self) != 0xD8
        }
        return used < format.maxByteCount
    }

    /// libv4lconvert path: convert the kernel buffer into a pool frame and give the buffer back.
    func convert(_ conv: Conversion, kernelFrame: Frame, used: Int, buffer b: v4l2_buffer, sequence: UInt64, gap: UInt64, receive: UInt64) -> SourceEvent? {
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
    func drainEvents(_ h: V4L2Handle) throws {
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
}
