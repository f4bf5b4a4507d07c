/// A frame rate as V4L2 gives it: a frame interval `numerator/denominator` seconds.
public struct FrameInterval: Sendable, Equatable, Hashable, Codable, CustomStringConvertible {
    public var numerator: UInt32
    public var denominator: UInt32
    public init(numerator: UInt32, denominator: UInt32) { self.numerator = numerator; self.denominator = denominator }
    /// The interval for `fps` frames per second (exact for integer rates).
    public init(fps: Double) {
        if fps == fps.rounded() { self.init(numerator: 1, denominator: UInt32(fps)) }
        else { self.init(numerator: 1000, denominator: UInt32((fps * 1000).rounded())) }
    }
    public var fps: Double { numerator == 0 ? 0 : Double(denominator) / Double(numerator) }
    public var nanoseconds: UInt64 { denominator == 0 ? 0 : UInt64(numerator) * 1_000_000_000 / UInt64(denominator) }
    public var description: String {
        let f = fps
        return f == f.rounded() ? "\(Int(f)) fps" : String(format3(f)) + " fps"
    }
}

func format3(_ d: Double) -> String {
    let r = (d * 1000).rounded() / 1000
    return r == r.rounded() ? String(Int(r)) : String(r)
}

/// Frame sizes a device offers for one format.
public enum FrameSizeRange: Sendable, Equatable, Codable {
    /// One fixed size, with its frame intervals.
    case discrete(width: Int, height: Int, intervals: [FrameInterval])
    /// Any size in the range on the step grid (V4L2 stepwise/continuous), with typical intervals.
    case stepwise(minWidth: Int, maxWidth: Int, stepWidth: Int, minHeight: Int, maxHeight: Int, stepHeight: Int, intervals: [FrameInterval])

    public func contains(width: Int, height: Int) -> Bool {
        switch self {
        case .discrete(let w, let h, _): return w == width && h == height
        case .stepwise(let a, let b, let s, let c, let d, let t, _):
            return width >= a && width <= b && (width - a) % max(s, 1) == 0 && height >= c && height <= d && (height - c) % max(t, 1) == 0
        }
    }

    public var intervals: [FrameInterval] {
        switch self { case .discrete(_, _, let i), .stepwise(_, _, _, _, _, _, let i): return i }
    }

    /// The largest size in the range.
    public var maxSize: (width: Int, height: Int) {
        switch self { case .discrete(let w, let h, _): return (w, h); case .stepwise(_, let w, _, _, let h, _, _): return (w, h) }
    }
}

/// One pixel format a device offers, with its sizes and rates.
public struct FormatDescription: Sendable, Equatable, Codable {
    /// The engine's format, when it handles it natively; nil for formats only libv4lconvert knows.
    public var pixelFormat: PixelFormat?
    public var fourcc: UInt32
    public var description: String
    public var compressed: Bool
    public var sizes: [FrameSizeRange]
    public init(pixelFormat: PixelFormat?, fourcc: UInt32, description: String, compressed: Bool, sizes: [FrameSizeRange]) {
        self.pixelFormat = pixelFormat; self.fourcc = fourcc; self.description = description
        self.compressed = compressed; self.sizes = sizes
    }
}

/// What a device is: its identity and capabilities.
public struct DeviceInfo: Sendable, Equatable, Codable {
    /// The string that opens it (`sim`, `/dev/video0`, `dump:FILE`).
    public var id: String
    /// A human name (V4L2 `card`).
    public var name: String
    /// Driver name (`vivid`, `uvcvideo`, `viewfinder-sim`).
    public var driver: String
    /// Bus (`platform:vivid-000`, `usb-0000:00:14.0-1`).
    public var bus: String
    /// Stable identifiers (`/dev/v4l/by-id/...`, `/dev/v4l/by-path/...`).
    public var stableIDs: [String]
    public var formats: [FormatDescription]
    public var controls: [ControlDescriptor]
    public var isLive: Bool
    public init(id: String, name: String, driver: String, bus: String, stableIDs: [String] = [], formats: [FormatDescription], controls: [ControlDescriptor], isLive: Bool) {
        self.id = id; self.name = name; self.driver = driver; self.bus = bus; self.stableIDs = stableIDs
        self.formats = formats; self.controls = controls; self.isLive = isLive
    }
}

/// What the engine asks a device to stream.
public struct StreamRequest: Sendable, Equatable {
    public var pixelFormat: PixelFormat
    public var width: Int
    public var height: Int
    /// Frames per second; nil keeps the device's rate.
    public var fps: Double?
    /// Buffers the device should queue (V4L2 REQBUFS count), at least 4.
    public var bufferCount: Int
    public init(pixelFormat: PixelFormat, width: Int, height: Int, fps: Double? = nil, bufferCount: Int = 8) {
        self.pixelFormat = pixelFormat; self.width = width; self.height = height; self.fps = fps; self.bufferCount = bufferCount
    }
}

/// What the device actually streams after configuration.
public struct StreamConfiguration: Sendable, Equatable {
    public var format: FrameFormat
    public var interval: FrameInterval
    public var bufferCount: Int
    public init(format: FrameFormat, interval: FrameInterval, bufferCount: Int) {
        self.format = format; self.interval = interval; self.bufferCount = bufferCount
    }
}

/// What the capture thread gets from a source.
public enum SourceEvent {
    /// A frame, holding one reference that the engine now owns.
    case frame(Frame)
    /// Nothing arrived in time.
    case timeout
    /// Frames were lost before reaching the engine (driver sequence gap, out of buffers, corrupt).
    case lost(DropReason, count: Int)
    /// The source has no more frames (end of a file; a finished simulation).
    case endOfStream
}

/// A source of frames: the sim camera, a V4L2 device, a dump being replayed.
///
/// `configure` and `start`/`stop` are called by the session; `next` only by the capture thread.
public protocol CaptureSource: AnyObject, Sendable {
    var info: DeviceInfo { get }
    /// A live source is paced by a clock and must never be slowed down by consumers.
    var isLive: Bool { get }
    /// The device's controls, if it has any.
    var controls: (any DeviceControlling)? { get }
    /// The format the device streams now (its active format), if it has one.
    var activeConfiguration: StreamConfiguration? { get }
    /// Sets the stream format; returns what the device actually chose, or throws when it can't.
    func configure(_ request: StreamRequest) throws -> StreamConfiguration
    func start() throws
    /// Waits up to `timeoutNanoseconds` for the next event. A frame's reference passes to the
    /// engine, which alone can give it back; code driving a source by hand uses
    /// ``nextSample(timeoutNanoseconds:)`` instead.
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent
    func stop()
    /// Changes the frame interval, streaming or not (a session calls it when
    /// `CaptureDevice.activeVideoMinFrameDuration` changes). The default throws
    /// `SessionError.unsupportedMode`: the source cannot change its rate.
    func setFrameInterval(_ interval: FrameInterval) throws -> FrameRateChange
}

/// How a source carried out a frame-interval change (``CaptureSource/setFrameInterval(_:)``).
public enum FrameRateChange: Sendable, Equatable {
    /// Taken while streaming (`VIDIOC_S_PARM` accepted mid-stream): no frame lost, the interval
    /// is what the device chose.
    case appliedWhileStreaming(FrameInterval)
    /// The driver refused mid-stream (`EBUSY`): between the next two frames the stream stops,
    /// takes the interval and starts again on the same buffers (frames held downstream stay valid).
    case restartingStream(FrameInterval)
    /// Not streaming: the interval is set for the next start.
    case appliedAtNextStart(FrameInterval)

    /// The interval asked for or chosen.
    public var interval: FrameInterval {
        switch self { case .appliedWhileStreaming(let i), .restartingStream(let i), .appliedAtNextStart(let i): return i }
    }
}

extension CaptureSource {
    public func setFrameInterval(_ interval: FrameInterval) throws -> FrameRateChange {
        throw SessionError.unsupportedMode(device: info.id, mode: "frame interval \(interval)", reason: "the source cannot change its rate")
    }
}

// MARK: - Controls

/// Standard controls the engine knows the meaning of (named as V4L2 names them).
public enum StandardControl: String, Sendable, CaseIterable, Codable {
    /// Menu: 0 auto, 1 manual, 2 shutter priority, 3 aperture priority (`V4L2_CID_EXPOSURE_AUTO`).
    case exposureAuto = "auto_exposure"
    /// Exposure time in 100 µs units (`V4L2_CID_EXPOSURE_ABSOLUTE`).
    case exposureTime = "exposure_time_absolute"
    /// Gain (`V4L2_CID_GAIN`), device units; the sim uses 1/100 (100 = unity).
    case gain = "gain"
    /// Boolean continuous autofocus (`V4L2_CID_FOCUS_AUTO`).
    case focusAuto = "focus_automatic_continuous"
    /// Lens position (`V4L2_CID_FOCUS_ABSOLUTE`), device units.
    case focusAbsolute = "focus_absolute"
    /// Boolean (`V4L2_CID_AUTO_WHITE_BALANCE`).
    case whiteBalanceAuto = "white_balance_automatic"
    /// Kelvin (`V4L2_CID_WHITE_BALANCE_TEMPERATURE`).
    case whiteBalanceTemperature = "white_balance_temperature"
    /// Menu: 0 disabled, 1 50 Hz, 2 60 Hz, 3 auto (`V4L2_CID_POWER_LINE_FREQUENCY`).
    case powerLineFrequency = "power_line_frequency"
    case brightness = "brightness"
    case contrast = "contrast"
    case saturation = "saturation"
    /// Menu: 0 none, 1 flash, 2 torch (`V4L2_CID_FLASH_LED_MODE`).
    case flashLEDMode = "led_mode"
    /// Menu: 0 software, 1 external (`V4L2_CID_FLASH_STROBE_SOURCE`).
    case flashStrobeSource = "strobe_source"
    /// Button: fire the flash (`V4L2_CID_FLASH_STROBE`).
    case flashStrobe = "strobe"
    /// Button: end the strobe early (`V4L2_CID_FLASH_STROBE_STOP`).
    case flashStrobeStop = "stop_strobe"
    /// Flash intensity in the flash mode, device units (mA on most LED drivers; `V4L2_CID_FLASH_INTENSITY`).
    case flashIntensity = "intensity"
    /// Intensity in the torch mode, device units (`V4L2_CID_FLASH_TORCH_INTENSITY`).
    case torchIntensity = "torch_intensity"
    /// Read-only bitmask of the flash's faults (`V4L2_CID_FLASH_FAULT`; ``FlashFaults``).
    case flashFault = "faults"
    /// Optical zoom position, device units (`V4L2_CID_ZOOM_ABSOLUTE`).
    case zoomAbsolute = "zoom_absolute"
}

/// The kind of a control.
public enum ControlKind: String, Sendable, Codable {
    case integer, boolean, menu, integerMenu, button, integer64, string, other
}

/// A device control: its name, range, step, default and (for menus) items.
public struct ControlDescriptor: Sendable, Equatable, Codable {
    /// The V4L2 control id (`V4L2_CID_*`) or the sim's own id.
    public var id: UInt32
    /// Lower-case name with underscores, as `v4l2-ctl` prints it.
    public var name: String
    public var kind: ControlKind
    public var minimum: Int64
    public var maximum: Int64
    public var step: Int64
    public var defaultValue: Int64
    /// Menu items by value.
    public var menu: [Int64: String]
    /// The meaning, when it is a standard control.
    public var standard: StandardControl?
    /// Whether it is inactive or read-only now (e.g. exposure time while exposure is auto).
    public var flags: Set<String>
    public init(id: UInt32, name: String, kind: ControlKind, minimum: Int64, maximum: Int64, step: Int64, defaultValue: Int64, menu: [Int64: String] = [:], standard: StandardControl? = nil, flags: Set<String> = []) {
        self.id = id; self.name = name; self.kind = kind; self.minimum = minimum; self.maximum = maximum
        self.step = step; self.defaultValue = defaultValue; self.menu = menu; self.standard = standard; self.flags = flags
    }
    public var range: ClosedRange<Int64> { minimum...max(minimum, maximum) }
}

/// The controls of a device. Thread-safe (the session configures from any thread while the capture
/// thread streams). Stages do not call them while frames flow: they queue changes on
/// ``StageContext/controlRequests`` and the capture side writes them between frames; a change
/// applies after ``controlLatencyFrames`` frames.
public protocol DeviceControlling: AnyObject, Sendable {
    var descriptors: [ControlDescriptor] { get }
    func value(of name: String) throws -> Int64
    func set(_ name: String, to value: Int64) throws
    /// Writes a control and returns when the device took the value (CLOCK_MONOTONIC ns, the
    /// clock of frames' `receiveTime`) where the device knows that moment — the sim reads its
    /// clock under the lock it hands frames out under — or nil where it does not (a V4L2 driver
    /// takes the value somewhere inside its ioctl). The bench counts a control's latency from the
    /// newest frame received before that moment. The default calls `set(name, to: value)` and returns nil.
    func setReportingTime(_ name: String, to value: Int64) throws -> UInt64?
    /// Writes a standard control. The capture side calls this for every queued request: a device
    /// should do it without allocating (the default looks the descriptor up by name).
    func set(_ standard: StandardControl, to value: Int64) throws
    /// Frames between a `set` and the first frame it affects (the sim's setting; estimated for V4L2).
    var controlLatencyFrames: Int { get }
}

extension DeviceControlling {
    public func descriptor(_ standard: StandardControl) -> ControlDescriptor? {
        descriptors.first(where: { $0.standard == standard })
    }
    public func supports(_ standard: StandardControl) -> Bool { descriptor(standard) != nil }
    public func value(of standard: StandardControl) throws -> Int64 {
        guard let d = descriptor(standard) else { throw DeviceError.unknownControl(device: "device", control: standard.rawValue, known: descriptors.map(\.name)) }
        return try value(of: d.name)
    }
    public func set(_ standard: StandardControl, to value: Int64) throws {
        guard let d = descriptor(standard) else { throw DeviceError.unknownControl(device: "device", control: standard.rawValue, known: descriptors.map(\.name)) }
        try set(d.name, to: value)
    }
    public func setReportingTime(_ name: String, to value: Int64) throws -> UInt64? {
        try set(name, to: value)
        return nil
    }
}

/// Opens devices of one kind and lists those present.
public protocol DeviceProvider: Sendable {
    /// Whether this provider handles the device string (`sim…`, `/dev/video…`, `dump:…`).
    func handles(_ device: String) -> Bool
    func open(_ device: String) throws -> any CaptureSource
    /// Devices present now.
    func discover() -> [DeviceInfo]
}
