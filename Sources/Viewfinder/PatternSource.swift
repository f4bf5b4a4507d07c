/// A source that cycles a few pre-rendered frames, as GStreamer's `videotestsrc` does: it costs
/// one memcpy per frame, so it measures the engine rather than a renderer.
///
/// Device string: `pattern:width=1920,height=1080,format=yuyv,fps=30,paced=false,frames=300`.
/// - `width`, `height`: pixels (default 1920x1080).
/// - `format`: yuyv, uyvy, nv12, i420, yuv422p, grey, rgb24 (default yuyv).
/// - `fps`: nominal rate (default 30); timestamps advance by 1/fps.
/// - `paced`: true paces in real time (a live source); false (default) runs as fast as possible.
/// - `frames`: end after this many frames (default: never).
/// - `copy`: false skips the per-frame copy (the frame keeps whatever pattern its buffer had).
public final class PatternSource: CaptureSource, @unchecked Sendable {
    // @unchecked Sendable: `configure`/`start`/`stop` happen before/after streaming; `next` runs
    // only on the capture thread.
    public struct Options: Sendable, Equatable {
        public var width = 1920, height = 1080
        public var format = PixelFormat.yuyv
        public var fps = 30.0
        public var paced = false
        public var frames: UInt64?
        public var copy = true
        public var poolSize = 16
        public init() {}
    }

    public let options: Options
    public let info: DeviceInfo
    public var isLive: Bool { options.paced }
    public var controls: (any DeviceControlling)? { nil }
    public private(set) var activeConfiguration: StreamConfiguration?
    private var pool: FramePool?
    private var patterns: [UnsafeMutableRawBufferPointer] = []
    private var sequence: UInt64 = 0
    private var startNs: UInt64 = 0

    public init(options: Options = Options(), id: String = "pattern") {
        self.options = options
        let sizes = [FrameSizeRange.stepwise(minWidth: 16, maxWidth: 7680, stepWidth: 2, minHeight: 16, maxHeight: 4320, stepHeight: 2, intervals: [FrameInterval(fps: options.fps)])]
        let formats = PixelFormat.allCases.filter { !$0.isCompressed }.map {
            FormatDescription(pixelFormat: $0, fourcc: $0.fourcc, description: "\($0) test pattern", compressed: false, sizes: sizes)
        }
        info = DeviceInfo(id: id, name: "Viewfinder test pattern", driver: "viewfinder-pattern", bus: "virtual", formats: formats, controls: [], isLive: options.paced)
        activeConfiguration = StreamConfiguration(format: FrameFormat(options.format, width: options.width, height: options.height), interval: FrameInterval(fps: options.fps), bufferCount: options.poolSize)
    }

    /// Parses `pattern:key=value,...`.
    public convenience init(deviceString s: String) throws {
        var o = Options()
        let body = s.hasPrefix("pattern:") ? String(s.dropFirst(8)) : ""
        for item in body.split(separator: ",") where !item.isEmpty {
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2 else { throw DeviceError.invalidDeviceOption(device: s, option: String(item), reason: "expected key=value") }
            let (k, v) = (kv[0], kv[1])
            func int() throws -> Int {
                guard let i = Int(v), i > 0 else { throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "expected a positive integer, got '\(v)'") }
                return i
            }
            func bool() throws -> Bool {
                guard let b = Bool(v) else { throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "expected true or false, got '\(v)'") }
                return b
            }
            switch k {
            case "width": o.width = try int()
            case "height": o.height = try int()
            case "fps":
                guard let f = Double(v), f > 0, f <= 1000 else { throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "expected a rate in (0, 1000], got '\(v)'") }
                o.fps = f
            case "format":
                guard let f = PixelFormat(name: v), !f.isCompressed else {
                    throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "expected an uncompressed format (yuyv, uyvy, nv12, i420, yuv422p, grey, rgb24), got '\(v)'")
                }
                o.format = f
            case "paced": o.paced = try bool()
            case "frames": o.frames = UInt64(try int())
            case "copy": o.copy = try bool()
            case "buffers": o.poolSize = try int()
            default:
                throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "unknown option (known: width, height, format, fps, paced, frames, copy, buffers)")
            }
        }
        self.init(options: o, id: s.isEmpty ? "pattern" : s)
    }

    deinit { for p in patterns { p.deallocate() } }

    public func configure(_ request: StreamRequest) throws -> StreamConfiguration {
        guard !request.pixelFormat.isCompressed else {
            throw DeviceError.unsupportedFormat(device: info.id, requested: "\(request.pixelFormat)", available: info.formats.map(\.description))
        }
        let cfg = StreamConfiguration(format: FrameFormat(request.pixelFormat, width: request.width, height: request.height), interval: FrameInterval(fps: request.fps ?? options.fps), bufferCount: max(request.bufferCount, options.poolSize))
        activeConfiguration = cfg
        return cfg
    }

    public func start() throws {
        guard let cfg = activeConfiguration else { return }
        pool = FramePool(format: cfg.format, count: cfg.bufferCount)
        for p in patterns { p.deallocate() }
        patterns = (0..<4).map { k in
            let b = UnsafeMutableRawBufferPointer.allocate(byteCount: cfg.format.maxByteCount, alignment: 64)
            var x: UInt32 = 0x9E37_79B9 &* UInt32(k + 1)
            for i in 0..<b.count {
                x ^= x << 13; x ^= x >> 17; x ^= x << 5
                b[i] = UInt8(truncatingIfNeeded: (i % 251) &+ Int(x & 15))
            }
            return b
        }
        sequence = 0
        startNs = monotonicNanoseconds()
    }

    public func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        guard let pool, let cfg = activeConfiguration else { throw DeviceError.notRunning(device: info.id) }
        if let limit = options.frames, sequence >= limit { return .endOfStream }
        let interval = cfg.interval.nanoseconds
        let due = startNs &+ sequence &* interval
        if options.paced {
            let now = monotonicNanoseconds()
            if due > now {
                if due - now > timeoutNanoseconds { sleepUntil(monotonicNanoseconds: now + timeoutNanoseconds); return .timeout }
                sleepUntil(monotonicNanoseconds: due)
            }
        }
        let frame: Frame
        if options.paced {
            guard let f = pool.acquire() else { sequence &+= 1; return .lost(.outOfBuffers, count: 1) }
            frame = f
        } else {
            guard let f = pool.acquire(timeoutNanoseconds: timeoutNanoseconds) else { return .timeout }
            frame = f
        }
        if options.copy {
            let src = patterns[Int(sequence & 3)]
            frame.data.copyMemory(from: src.baseAddress!, byteCount: min(src.count, frame.capacity))
        }
        frame.sequence = sequence
        frame.timestamp = Timestamp(nanoseconds: options.paced ? due : monotonicNanoseconds(), clock: .monotonic)
        frame.receiveTime = 0
        sequence &+= 1
        return .frame(frame)
    }

    public func stop() {}
}

/// Opens `pattern:` devices.
public struct PatternProvider: DeviceProvider {
    public init() {}
    public func handles(_ device: String) -> Bool { device == "pattern" || device.hasPrefix("pattern:") }
    public func open(_ device: String) throws -> any CaptureSource { try PatternSource(deviceString: device) }
    public func discover() -> [DeviceInfo] { [] }
}
