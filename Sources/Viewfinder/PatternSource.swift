/// A source that cycles a few pre-rendered frames, as GStreamer's `videotestsrc` does: it costs
/// one memcpy per frame, so it measures the engine rather than a renderer.
///
/// Device string: `pattern:width=1920,height=1080,format=yuyv,fps=30,paced=false,frames=300`;
/// ``Options/fields`` documents every option (`viewfinder devices` prints it).
public final class PatternSource: CaptureSource, @unchecked Sendable {
    // @unchecked Sendable: `configure`/`start`/`stop` happen before/after streaming; `next` runs
    // only on the capture thread.
    public struct Options: DeviceOptionTable, Equatable {
        public var width = 1920, height = 1080
        public var format = PixelFormat.yuyv
        public var fps = 30.0
        public var paced = false
        /// End after this many frames; 0: never.
        public var frames: UInt64 = 0
        public var copy = true
        public var poolSize = 16
        public init() {}

        /// The formats the pattern renders (every uncompressed one).
        public static var formats: [PixelFormat] { PixelFormat.allCases.filter { !$0.isCompressed } }

        public static var fields: [OptionField<Options>] {
            [
                .int("width", \.width, range: 16...7680, unit: "pixels", "Frame width (even for 4:2:2 and 4:2:0 formats)"),
                .int("height", \.height, range: 16...4320, unit: "pixels", "Frame height (even for 4:2:0 formats)"),
                .pixelFormat("format", \.format, allowed: formats, "Pixel format"),
                .double("fps", \.fps, range: 0.01...1000, unit: "frames/s", "Nominal rate: paced, frames come and are stamped every 1/fps; unpaced, as fast as they are made, stamped when made"),
                .bool("paced", \.paced, "true: real time at fps (a live source); false: as fast as possible"),
                .int("frames", \.frames, unit: "frames", "End after this many frames (0: never)"),
                .bool("copy", \.copy, "false skips the per-frame copy (the frame keeps whatever pattern its buffer had)"),
                .int("buffers", \.poolSize, range: 2...64, unit: "frames", "Frames in the pattern's pool"),
            ]
        }

        public func validate() throws(OptionProblem) {
            if format.isSubsampled && width % 2 != 0 {
                throw .invalid(option: "width", reason: "\(format) has chroma at half horizontal resolution: expected an even width, got '\(width)'")
            }
            if [.nv12, .i420].contains(format) && height % 2 != 0 {
                throw .invalid(option: "height", reason: "\(format) has chroma at half vertical resolution: expected an even height, got '\(height)'")
            }
        }
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

    /// Parses `pattern` or `pattern:key=value,...`.
    public convenience init(deviceString s: String) throws(DeviceError) {
        let body: Substring = s.hasPrefix("pattern:") ? s.dropFirst(8) : ""
        self.init(options: try Options.decode(keyValues: body, device: s), id: s.isEmpty ? "pattern" : s)
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
        if options.frames > 0, sequence >= options.frames { return .endOfStream }
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

extension PatternProvider: DocumentedDeviceProvider {
    public var documentation: DeviceKindDocumentation {
        DeviceKindDocumentation(syntax: "pattern[:key=value,…]", summary: "A few pre-rendered frames, cycled with one copy per frame: measures the engine, not a renderer.", options: PatternSource.Options.self)
    }
}
