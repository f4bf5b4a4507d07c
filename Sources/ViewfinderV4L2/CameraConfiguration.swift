#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder
import Logging

/// Configuration: formats, sizes and rates, the libv4lconvert fallback, opening the node again,
/// and mapping errors to `DeviceError`.
extension V4L2Camera {
    // MARK: Configuration

    /// Sets the format (`S_FMT` at the closest size the device offers) and rate (`S_PARM`).
    public func configure(_ request: StreamRequest) throws -> StreamConfiguration {
        if lock.withLock({ streaming }) { stop() }
        lock.withLock { conversion = nil; expandRange = false }
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
        let expand = options.expandLimitedRange && Self.isLimitedRange(request.pixelFormat, pix)
        lock.withLock { config = c; expandRange = expand }
        logger.debug("\(path): configured \(c.format) bytesPerRow \(c.format.bytesPerRow) at \(c.interval)")
        if expand {
            logger.info("\(path): the device's \(request.pixelFormat) is limited range (quantization \(pix.quantization), colorspace \(pix.colorspace)): stretched to full range")
        }
        return c
    }

    /// `S_PARM` for the requested rate; the rate the device runs at.
    func applyRate(_ request: StreamRequest, _ h: V4L2Handle) -> FrameInterval {
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
    func configureConverted(_ request: StreamRequest) throws -> StreamConfiguration? {
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
    func offered() -> [String] {
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

    func currentHandle() throws -> V4L2Handle {
        try lock.withLock { () throws -> V4L2Handle in
            if let h = handle { return h }
            return try reopenLocked()
        }
    }

    /// Opens the node again (after `stop` left buffers lent out, or for stall recovery). Lock held.
    func reopenLocked() throws -> V4L2Handle {
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

    func mapStreamError(_ e: Errno, operation: String, request: StreamRequest? = nil) -> DeviceError {
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
}
