#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder
import Logging

/// Recovery of a stalled stream: restart streaming, then reopen the device, then give up.
extension V4L2Camera {
    /// Stall recovery: restart streaming, then reopen, then give up. Capture thread only.
    func checkStall(now: UInt64) throws {
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

extension V4L2Camera {
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
}

// MARK: - Frame rate while streaming

extension V4L2Camera {
    /// Changes the frame interval. Streaming: `VIDIOC_S_PARM` at once where the driver takes it
    /// mid-stream (`FrameRateChange.appliedWhileStreaming`, the interval the driver chose);
    /// when it answers `EBUSY`, the capture thread restarts the stream around `S_PARM` before the
    /// next frame (`FrameRateChange.restartingStream`; counted in ``Counters/rateRestarts``).
    /// Not streaming: `S_PARM` for the next start.
    /// - Throws: `DeviceError` for other failures (`EINVAL`: the driver has no settable rate).
    public func setFrameInterval(_ interval: FrameInterval) throws -> FrameRateChange {
        try lock.withLock { () throws -> FrameRateChange in
            let h: V4L2Handle
            if let x = handle { h = x } else { h = try reopenLocked() }
            switch h.setInterval(interval) {
            case .success(let got):
                let chosen = got.numerator > 0 && got.denominator > 0 ? got : interval
                config?.interval = chosen
                logger.debug("\(path): frame interval \(chosen)\(streaming ? " while streaming" : "")")
                return streaming ? .appliedWhileStreaming(chosen) : .appliedAtNextStart(chosen)
            case .failure(.busy) where streaming:
                pendingInterval = interval
                return .restartingStream(interval)
            case .failure(let e):
                throw mapStreamError(e, operation: "VIDIOC_S_PARM")
            }
        }
    }

    /// STREAMOFF, `S_PARM`, the camera's own buffers queued again, STREAMON (`lock` held, capture
    /// thread). Frames the engine holds stay valid; they are queued when released.
    func restartLocked(_ h: V4L2Handle, interval: FrameInterval) throws {
        counterState.rateRestarts += 1
        _ = h.streamOff()
        for i in slots.indices where slots[i].state == .queued { slots[i].state = .idle }
        queuedCount = 0
        switch h.setInterval(interval) {
        case .success(let got): config?.interval = got.numerator > 0 && got.denominator > 0 ? got : interval
        case .failure(let e): logger.warning("\(path): S_PARM \(interval) failed after stopping the stream: \(e.message); keeping \(config?.interval.description ?? "the old rate")")
        }
        for i in slots.indices where slots[i].state == .idle {
            if case .failure(let e) = h.queueBuffer(i) { throw mapStreamError(e, operation: "VIDIOC_QBUF") }
            slots[i].state = .queued
            queuedCount += 1
        }
        if case .failure(let e) = h.streamOn() { throw mapStreamError(e, operation: "VIDIOC_STREAMON") }
        // The driver counts sequences from 0 again.
        lastKernelSequence = nil
    }
}
