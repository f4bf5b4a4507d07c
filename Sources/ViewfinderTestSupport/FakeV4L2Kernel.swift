#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder
import ViewfinderV4L2

/// A fake V4L2 kernel behind the syscall shim, for tests and the capture benchmark.
///
/// It follows the V4L2 contract the backend relies on: buffers move dequeued → queued (QBUF) →
/// done (the "driver" filled it) → dequeued (DQBUF); QBUF of a buffer that is not dequeued is
/// `EINVAL`; DQBUF with nothing done is `EAGAIN`; sequence numbers count every frame the driver
/// produced, including those it dropped for lack of a queued buffer; timestamps are
/// `CLOCK_MONOTONIC` with `V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC`; unknown controls and menu items are
/// `EINVAL`, integer controls are clamped like the kernel does; another owner of the queue makes
/// `S_FMT`/`REQBUFS`/`STREAMON` fail with `EBUSY`; after ``disconnect(_:)`` every call is `ENODEV`
/// and `poll` reports `POLLERR|POLLHUP`. Fault injection: ``skipFrames(_:path:)``,
/// ``flagErrors(_:path:)``, ``setStalled(_:path:)``, ``failStreamOn(with:path:)``,
/// ``setBusy(_:path:)``, ``interruptCalls(_:)``.
public final class FakeV4L2Kernel: V4L2Syscalls, @unchecked Sendable {
    // @unchecked Sendable: every mutable field is only accessed with `lock` held (the public
    // methods and the syscalls take it), so any thread may call in, as with the real kernel.

    public enum Size: Sendable {
        case discrete(width: Int, height: Int)
        case stepwise(minWidth: Int, maxWidth: Int, stepWidth: Int, minHeight: Int, maxHeight: Int, stepHeight: Int)
    }

    public struct Format: Sendable {
        public var fourcc: UInt32
        public var description: String
        public var compressed: Bool
        public var sizes: [Size]
        public var intervals: [FrameInterval]
        public init(fourcc: UInt32, description: String, compressed: Bool = false, sizes: [Size], intervals: [FrameInterval]) {
            self.fourcc = fourcc; self.description = description; self.compressed = compressed; self.sizes = sizes; self.intervals = intervals
        }
    }

    public enum ControlType: UInt32, Sendable { case integer = 1, boolean = 2, menu = 3, button = 4, integer64 = 5, bitmask = 8 }

    /// One control write as the "hardware" received it (see ``recordsControlWrites``).
    public struct ControlWrite: Sendable, Equatable, CustomStringConvertible {
        public var id: UInt32
        public var value: Int64
        public init(_ id: UInt32, _ value: Int64) { self.id = id; self.value = value }
        public var description: String { "0x" + String(id, radix: 16) + "=\(value)" }
    }

    public struct Control: Sendable {
        public var id: UInt32
        public var name: String
        public var type: ControlType
        public var minimum: Int64
        public var maximum: Int64
        public var step: Int64
        public var defaultValue: Int64
        public var menu: [Int64: String]
        public var readOnly: Bool
        public init(id: UInt32, name: String, type: ControlType, minimum: Int64, maximum: Int64, step: Int64 = 1, defaultValue: Int64, menu: [Int64: String] = [:], readOnly: Bool = false) {
            self.id = id; self.name = name; self.type = type; self.minimum = minimum; self.maximum = maximum
            self.step = step; self.defaultValue = defaultValue; self.menu = menu; self.readOnly = readOnly
        }
    }

    public struct DeviceSpec: Sendable {
        public var path: String
        public var driver: String
        public var card: String
        public var bus: String
        public var deviceCaps: UInt32
        public var formats: [Format]
        public var controls: [Control]
        /// Links under `/dev/v4l/by-id` / `by-path` (full paths) that point at this node.
        public var links: [String]
        /// Timestamps flagged `TIMESTAMP_MONOTONIC` (else `TIMESTAMP_UNKNOWN`).
        public var monotonicTimestamps: Bool = true
        /// What `G_FMT`/`S_FMT` report as the format's `colorspace` and `quantization` (enum
        /// `v4l2_colorspace`, `v4l2_quantization`; 0, 0: not said).
        public var colorspace: UInt32 = 0
        public var quantization: UInt32 = 0
        public init(path: String, driver: String, card: String, bus: String, deviceCaps: UInt32, formats: [Format], controls: [Control], links: [String] = []) {
            self.path = path; self.driver = driver; self.card = card; self.bus = bus; self.deviceCaps = deviceCaps
            self.formats = formats; self.controls = controls; self.links = links
        }

        /// A USB-webcam-like capture node: YUYV, NV12, GREY, MJPEG and an unhandled Bayer format,
        /// the standard camera controls.
        public static func webcam(path: String = "/dev/video0", name: String = "Fake Webcam") -> DeviceSpec {
            let rates = [FrameInterval(numerator: 1, denominator: 30), FrameInterval(numerator: 1, denominator: 15)]
            let sizes: [Size] = [.discrete(width: 640, height: 480), .discrete(width: 1280, height: 720), .discrete(width: 320, height: 240)]
            return DeviceSpec(
                path: path, driver: "fakecam", card: name, bus: "usb-0000:00:14.0-1",
                deviceCaps: V4L2.capVideoCapture | V4L2.capStreaming,
                formats: [
                    Format(fourcc: fourCC("YUYV"), description: "YUYV 4:2:2", sizes: sizes, intervals: rates),
                    Format(fourcc: fourCC("MJPG"), description: "Motion-JPEG", compressed: true,
                           sizes: sizes + [.discrete(width: 1920, height: 1080)], intervals: rates),
                    Format(fourcc: fourCC("NV12"), description: "Y/UV 4:2:0",
                           sizes: [.stepwise(minWidth: 16, maxWidth: 1920, stepWidth: 16, minHeight: 16, maxHeight: 1080, stepHeight: 8)], intervals: rates),
                    Format(fourcc: fourCC("GREY"), description: "8-bit Greyscale", sizes: sizes, intervals: rates),
                    Format(fourcc: fourCC("BA81"), description: "8-bit Bayer BGBG/GRGR", sizes: sizes, intervals: rates),
                ],
                controls: [
                    Control(id: V4L2.cidBrightness, name: "Brightness", type: .integer, minimum: -64, maximum: 64, defaultValue: 0),
                    Control(id: V4L2.cidContrast, name: "Contrast", type: .integer, minimum: 0, maximum: 95, defaultValue: 32),
                    Control(id: V4L2.cidSaturation, name: "Saturation", type: .integer, minimum: 0, maximum: 100, defaultValue: 64),
                    Control(id: V4L2.cidAutoWhiteBalance, name: "White Balance, Automatic", type: .boolean, minimum: 0, maximum: 1, defaultValue: 1),
                    Control(id: V4L2.cidGain, name: "Gain", type: .integer, minimum: 0, maximum: 100, defaultValue: 0),
                    Control(id: V4L2.cidPowerLineFrequency, name: "Power Line Frequency", type: .menu, minimum: 0, maximum: 2, defaultValue: 1,
                            menu: [0: "Disabled", 1: "50 Hz", 2: "60 Hz"]),
                    Control(id: V4L2.cidWhiteBalanceTemperature, name: "White Balance Temperature", type: .integer, minimum: 2800, maximum: 6500, step: 10, defaultValue: 4600),
                    Control(id: V4L2.cidExposureAuto, name: "Auto Exposure", type: .menu, minimum: 0, maximum: 3, defaultValue: 3,
                            menu: [1: "Manual Mode", 3: "Aperture Priority Mode"]),
                    Control(id: V4L2.cidExposureAbsolute, name: "Exposure Time, Absolute", type: .integer, minimum: 3, maximum: 2047, defaultValue: 250),
                    Control(id: V4L2.cidFocusAbsolute, name: "Focus, Absolute", type: .integer, minimum: 0, maximum: 250, step: 5, defaultValue: 0),
                    Control(id: V4L2.cidFocusAuto, name: "Focus, Automatic Continuous", type: .boolean, minimum: 0, maximum: 1, defaultValue: 1),
                    Control(id: 0x0098_0914, name: "Horizontal Flip", type: .boolean, minimum: 0, maximum: 1, defaultValue: 0),
                    Control(id: 0x009a_0920, name: "Pixel Rate", type: .integer64, minimum: 0, maximum: 1 << 40, defaultValue: 1 << 33, readOnly: true),
                ],
                links: ["/dev/v4l/by-id/usb-Fake_Webcam-video-index0", "/dev/v4l/by-path/pci-0000:00:14.0-usb-0:1:1.0-video-index0"])
        }

        /// The flash class of an LED flash driver (as `leds-*` V4L2 flash sub-devices offer it):
        /// `led_mode` (none/flash/torch), `strobe_source`, `strobe`, `stop_strobe`, `intensity`
        /// 25…1000 mA step 25, `torch_intensity` 25…200 mA step 25, and the read-only `faults` bitmask.
        public static let flashControls: [Control] = [
            Control(id: V4L2.cidFlashLEDMode, name: "LED Mode", type: .menu, minimum: 0, maximum: 2, defaultValue: 0, menu: [0: "Off", 1: "Flash", 2: "Torch"]),
            Control(id: V4L2.cidFlashStrobeSource, name: "Strobe Source", type: .menu, minimum: 0, maximum: 1, defaultValue: 0, menu: [0: "Software", 1: "External"]),
            Control(id: V4L2.cidFlashStrobe, name: "Strobe", type: .button, minimum: 0, maximum: 0, defaultValue: 0),
            Control(id: V4L2.cidFlashStrobeStop, name: "Stop Strobe", type: .button, minimum: 0, maximum: 0, defaultValue: 0),
            Control(id: V4L2.cidFlashIntensity, name: "Intensity", type: .integer, minimum: 25, maximum: 1000, step: 25, defaultValue: 500),
            Control(id: V4L2.cidFlashTorchIntensity, name: "Torch Intensity", type: .integer, minimum: 25, maximum: 200, step: 25, defaultValue: 25),
            Control(id: V4L2.cidFlashFault, name: "Faults", type: .bitmask, minimum: 0, maximum: 0x1ff, defaultValue: 0, readOnly: true),
        ]

        /// An optical zoom: `zoom_absolute` 100…500 step 1 (UVC cameras report such ranges).
        public static let zoomControl = Control(id: V4L2.cidZoomAbsolute, name: "Zoom, Absolute", type: .integer, minimum: 100, maximum: 500, defaultValue: 100)

        /// A metadata capture node (as UVC cameras add next to the video node).
        public static func metadataNode(path: String = "/dev/video1") -> DeviceSpec {
            DeviceSpec(path: path, driver: "fakecam", card: "Fake Webcam", bus: "usb-0000:00:14.0-1",
                       deviceCaps: V4L2.capMetaCapture | V4L2.capStreaming, formats: [], controls: [],
                       links: ["/dev/v4l/by-id/usb-Fake_Webcam-video-index1"])
        }
    }

    private enum BufState { case dequeued, queued, done }
    private struct Buffer {
        var memory: UnsafeMutableRawPointer
        var length: Int
        var state: BufState = .dequeued
        var mapCount = 0
        var bytesUsed = 0
        var sequence: UInt32 = 0
        var timestamp: UInt64 = 0
        var error = false
    }

    private final class Device {
        var spec: DeviceSpec
        var pix = v4l2_pix_format()
        var interval = FrameInterval(numerator: 1, denominator: 30)
        var buffers: [Buffer] = []
        var retired: [Buffer] = []
        var queue: [Int] = []
        var done: [Int] = []
        var owner: Int32?
        /// The owner's descriptor is closed but a mapped buffer keeps its file (and the queue) alive.
        var ownerClosed = false
        var streaming = false
        var sequence: UInt32 = 0
        var values: [UInt32: Int64] = [:]
        var inactive: Set<UInt32> = []
        var disconnected = false
        var busy = false
        var stalled = false
        var streamOnError: Errno?
        var skip = 0
        var errors = 0
        var payload: (@Sendable (UnsafeMutableRawBufferPointer, UInt32) -> Int)?
        var produced = 0
        var droppedNoBuffer = 0
        var streamOnCount = 0
        var refuseIntervalWhileStreaming = false
        var intervalChanges: [FrameInterval] = []
        init(_ spec: DeviceSpec) {
            self.spec = spec
            for c in spec.controls { values[c.id] = c.defaultValue }
            if let ae = values[V4L2.cidExposureAuto], ae != 1 { inactive.insert(V4L2.cidExposureAbsolute) }
        }
    }

    private struct OpenFile {
        var path: String
        var subscriptions: Set<UInt64> = []
        var events: [v4l2_event] = []
    }

    private let lock = ConditionLock()
    private var devices: [String: Device] = [:]
    private var files: [Int32: OpenFile] = [:]
    private var nextFD: Int32 = 100
    private var interrupts = 0
    private var callCounts: [UInt: Int] = [:]
    /// Produce a frame whenever `poll` or `DQBUF` finds none done and a buffer is queued
    /// (an infinitely fast camera: for the benchmark and engine tests).
    private var autoProduceFlag = false
    private var recordWrites = false
    private var writes: [String: [ControlWrite]] = [:]

    public init(devices: [DeviceSpec]) {
        for d in devices {
            let dev = Device(d)
            if let f = d.formats.first, let s = f.sizes.first {
                let (w, h): (Int, Int)
                switch s { case .discrete(let a, let b): (w, h) = (a, b); case .stepwise(_, let b, _, _, let d, _): (w, h) = (b, d) }
                dev.pix = Self.pixFormat(f.fourcc, w, h)
                dev.pix.colorspace = d.colorspace; dev.pix.quantization = d.quantization
                if let i = f.intervals.first { dev.interval = i }
            }
            devices_set(dev)
        }
    }
    private func devices_set(_ d: Device) { devices[d.spec.path] = d }

    deinit {
        for d in devices.values {
            for b in d.buffers + d.retired { b.memory.deallocate() }
        }
    }

    // MARK: Test controls

    public var autoProduce: Bool {
        get { lock.withLock { autoProduceFlag } }
        set { lock.withLock { autoProduceFlag = newValue; lock.broadcast() } }
    }

    /// The "driver" produces `count` frames now: each fills the oldest queued buffer, or is dropped
    /// (its sequence number used) when none is queued. Returns how many landed in buffers.
    @discardableResult
    public func produce(_ count: Int = 1, path: String = "/dev/video0") -> Int {
        lock.withLock {
            guard let d = devices[path] else { return 0 }
            var n = 0
            for _ in 0..<count where produceLocked(d) { n += 1 }
            lock.broadcast()
            return n
        }
    }

    /// The driver loses the next `count` frames (their sequence numbers are skipped).
    public func skipFrames(_ count: Int, path: String = "/dev/video0") { lock.withLock { devices[path]?.skip += count } }
    /// The next `count` frames carry `V4L2_BUF_FLAG_ERROR`.
    public func flagErrors(_ count: Int, path: String = "/dev/video0") { lock.withLock { devices[path]?.errors += count } }
    /// A stalled driver produces nothing (until un-stalled, or until the device is reopened if `untilReopen`).
    public func setStalled(_ stalled: Bool, path: String = "/dev/video0") { lock.withLock { devices[path]?.stalled = stalled } }
    /// `STREAMON` fails with `error` (e.g. `ENOSPC`, as USB cameras do without bandwidth); nil clears.
    public func failStreamOn(with error: Errno?, path: String = "/dev/video0") { lock.withLock { devices[path]?.streamOnError = error } }
    /// Another process owns the device's queue: `S_FMT`, `REQBUFS`, `STREAMON` fail with `EBUSY`.
    public func setBusy(_ busy: Bool, path: String = "/dev/video0") { lock.withLock { devices[path]?.busy = busy } }
    /// `S_PARM` while streaming fails with `EBUSY`, as drivers that cannot change the rate mid-stream answer.
    public func refuseIntervalWhileStreaming(_ refuse: Bool, path: String = "/dev/video0") { lock.withLock { devices[path]?.refuseIntervalWhileStreaming = refuse } }
    /// The frame interval the "hardware" runs at now.
    public func frameInterval(path: String = "/dev/video0") -> FrameInterval? { lock.withLock { devices[path]?.interval } }
    /// Every interval `S_PARM` set, in order.
    public func intervalChanges(path: String = "/dev/video0") -> [FrameInterval] { lock.withLock { devices[path]?.intervalChanges ?? [] } }
    /// The next `count` syscalls fail with `EINTR`.
    public func interruptCalls(_ count: Int) { lock.withLock { interrupts = count } }
    /// Fills each frame's buffer; returns the bytes used (default: the sequence number in the first
    /// 4 bytes of a full-size frame, or a minimal JPEG marker pair for MJPEG).
    public func setPayload(path: String = "/dev/video0", _ fill: (@Sendable (UnsafeMutableRawBufferPointer, UInt32) -> Int)?) {
        lock.withLock { devices[path]?.payload = fill }
    }
    /// Unplugs the device: every later call on it fails with `ENODEV`; `poll` reports an error.
    public func disconnect(_ path: String = "/dev/video0") {
        lock.withLock { devices[path]?.disconnected = true; lock.broadcast() }
    }
    /// Plugs an unplugged device back in: it opens again, streams from sequence 0, and keeps its
    /// control values; descriptors opened before the unplug stay dead (their calls fail).
    public func reconnect(_ path: String = "/dev/video0") {
        lock.withLock {
            guard let d = devices[path], d.disconnected else { return }
            if d.owner != nil { releaseQueue(d) }
            for (fd, f) in files where f.path == path { files[fd]?.path = path + Self.unpluggedSuffix }
            d.disconnected = false
            d.sequence = 0
            lock.broadcast()
        }
    }
    /// Marks the descriptors of a replugged device (their calls fail with `ENODEV`).
    static let unpluggedSuffix = " (unplugged)"
    /// Queues a source-change event to subscribers.
    public func signalSourceChange(path: String = "/dev/video0") {
        lock.withLock {
            var e = v4l2_event()
            e.type = V4L2.eventSourceChange
            e.u.src_change.changes = 1
            post(e, path: path, key: Self.key(V4L2.eventSourceChange, 0))
        }
    }

    public struct DeviceStatistics: Sendable, Equatable {
        public var queued = 0, done = 0, dequeued = 0, mapped = 0, produced = 0, droppedNoBuffer = 0, streamOnCount = 0, openFiles = 0
        public var streaming = false
    }

    public func statistics(path: String = "/dev/video0") -> DeviceStatistics {
        lock.withLock {
            guard let d = devices[path] else { return DeviceStatistics() }
            var s = DeviceStatistics()
            s.queued = d.buffers.filter { $0.state == .queued }.count
            s.done = d.buffers.filter { $0.state == .done }.count
            s.dequeued = d.buffers.filter { $0.state == .dequeued }.count
            s.mapped = (d.buffers + d.retired).reduce(0) { $0 + $1.mapCount }
            s.produced = d.produced
            s.droppedNoBuffer = d.droppedNoBuffer
            s.streamOnCount = d.streamOnCount
            s.streaming = d.streaming
            s.openFiles = files.values.filter { $0.path == path }.count
            return s
        }
    }

    /// Number of calls of one ioctl request so far.
    public func calls(_ request: UInt) -> Int { lock.withLock { callCounts[request, default: 0] } }

    /// Whether control writes are recorded in order (off by default: the allocation benchmark
    /// counts the fake's mallocs).
    public var recordsControlWrites: Bool {
        get { lock.withLock { recordWrites } }
        set { lock.withLock { recordWrites = newValue } }
    }

    /// The control writes (`S_EXT_CTRLS`, each item after clamping) recorded so far, in order.
    public func controlWrites(path: String = "/dev/video0") -> [ControlWrite] { lock.withLock { writes[path] ?? [] } }

    /// Forgets the recorded writes.
    public func clearControlWrites() { lock.withLock { writes.removeAll() } }

    /// Sets a control as the hardware would (e.g. fault bits of a read-only `faults` control).
    public func setControlValue(_ id: UInt32, to value: Int64, path: String = "/dev/video0") { lock.withLock { devices[path]?.values[id] = value } }

    /// The current value of a control, as the "hardware" has it.
    public func controlValue(_ id: UInt32, path: String = "/dev/video0") -> Int64? { lock.withLock { devices[path]?.values[id] } }

    // MARK: Helpers (lock held)

    private static func key(_ type: UInt32, _ id: UInt32) -> UInt64 { UInt64(type) << 32 | UInt64(id) }

    private func post(_ e: v4l2_event, path: String, key: UInt64) {
        for (fd, f) in files where f.path == path && f.subscriptions.contains(key) {
            files[fd]!.events.append(e)
        }
        lock.broadcast()
    }

    private static func pixFormat(_ fourcc: UInt32, _ w: Int, _ h: Int) -> v4l2_pix_format {
        var p = v4l2_pix_format()
        p.width = UInt32(w)
        p.height = UInt32(h)
        p.pixelformat = fourcc
        p.field = V4L2.fieldNone
        let size: Int
        switch fourcc {
        case fourCC("YUYV"), fourCC("UYVY"): p.bytesperline = UInt32(w * 2); size = w * 2 * h
        case fourCC("RGB3"): p.bytesperline = UInt32(w * 3); size = w * 3 * h
        case fourCC("RGBP"), fourCC("YVYU"): p.bytesperline = UInt32(w * 2); size = w * 2 * h
        case fourCC("NV12"), fourCC("YU12"): p.bytesperline = UInt32(w); size = w * h + w * ((h + 1) / 2)
        case fourCC("422P"): p.bytesperline = UInt32(w); size = w * h * 2
        case fourCC("MJPG"), fourCC("JPEG"): p.bytesperline = 0; size = w * h * 2
        default: p.bytesperline = UInt32(w); size = w * h
        }
        p.sizeimage = UInt32(size)
        return p
    }

    private func choose(_ d: Device, fourcc: UInt32, width: Int, height: Int) -> v4l2_pix_format {
        let f = d.spec.formats.first(where: { $0.fourcc == fourcc }) ?? d.spec.formats[0]
        var best = (0, 0), bestScore = Int.max
        for s in f.sizes {
            let c: (Int, Int)
            switch s {
            case .discrete(let w, let h): c = (w, h)
            case .stepwise(let a, let b, let sw, let e, let g, let sh):
                c = (min(max(a, width - (width - a) % max(sw, 1)), b), min(max(e, height - (height - e) % max(sh, 1)), g))
            }
            let score = abs(c.0 - width) + abs(c.1 - height)
            if score < bestScore { bestScore = score; best = c }
        }
        var p = Self.pixFormat(f.fourcc, best.0, best.1)
        p.colorspace = d.spec.colorspace
        p.quantization = d.spec.quantization
        return p
    }

    private func produceLocked(_ d: Device) -> Bool {
        guard d.streaming, !d.stalled, !d.disconnected else { return false }
        if d.skip > 0 { d.sequence &+= UInt32(d.skip); d.skip = 0 } // frames the driver lost before this one
        let seq = d.sequence
        d.sequence &+= 1
        guard !d.queue.isEmpty else { d.droppedNoBuffer += 1; return false }
        let i = d.queue.removeFirst()
        let buf = UnsafeMutableRawBufferPointer(start: d.buffers[i].memory, count: d.buffers[i].length)
        let used: Int
        if let fill = d.payload {
            used = min(max(fill(buf, seq), 0), buf.count)
        } else if d.pix.pixelformat == fourCC("MJPG") || d.pix.pixelformat == fourCC("JPEG") {
            buf[0] = 0xFF; buf[1] = 0xD8; buf[2] = UInt8(truncatingIfNeeded: seq); buf[3] = 0xFF; buf[4] = 0xD9
            used = 5
        } else {
            buf.storeBytes(of: seq, as: UInt32.self)
            used = Int(d.pix.sizeimage)
        }
        d.buffers[i].bytesUsed = used
        d.buffers[i].sequence = seq
        d.buffers[i].timestamp = monotonicNanoseconds()
        d.buffers[i].error = d.errors > 0
        if d.errors > 0 { d.errors -= 1 }
        d.buffers[i].state = .done
        d.done.append(i)
        d.produced += 1
        return true
    }

    private func releaseQueue(_ d: Device) {
        d.streaming = false
        for var b in d.buffers {
            b.state = .dequeued
            if b.mapCount > 0 { d.retired.append(b) } else { b.memory.deallocate() }
        }
        d.buffers = []
        d.queue = []
        d.done = []
        d.owner = nil
        d.ownerClosed = false
    }

    // MARK: V4L2Syscalls

    public func open(_ path: String, flags: Int32) -> Result<Int32, Errno> {
        lock.withLock {
            if interrupts > 0 { interrupts -= 1; return .failure(.interrupted) }
            guard let d = devices[path] else { return .failure(.noEntry) }
            if d.disconnected { return .failure(.noDevice) }
            let fd = nextFD
            nextFD += 1
            files[fd] = OpenFile(path: path)
            return .success(fd)
        }
    }

    public func close(_ fd: Int32) -> Result<Void, Errno> {
        lock.withLock {
            guard let f = files.removeValue(forKey: fd) else { return .failure(.badFile) }
            if let d = devices[f.path], d.owner == fd {
                // A mapping holds a reference to the open file: as in the kernel, the file (and
                // the queue it owns) is released only when its last buffer is unmapped.
                if d.buffers.contains(where: { $0.mapCount > 0 }) { d.ownerClosed = true } else { releaseQueue(d) }
            }
            return .success(())
        }
    }

    public func mmap(length: Int, fd: Int32, offset: Int) -> Result<UnsafeMutableRawPointer, Errno> {
        lock.withLock {
            guard let f = files[fd], let d = devices[f.path] else { return .failure(.badFile) }
            if d.disconnected { return .failure(.noDevice) }
            let i = offset / 0x10_0000
            guard offset % 0x10_0000 == 0, i < d.buffers.count, length <= d.buffers[i].length else { return .failure(.invalidArgument) }
            d.buffers[i].mapCount += 1
            return .success(d.buffers[i].memory)
        }
    }

    public func munmap(_ address: UnsafeMutableRawPointer, length: Int) -> Result<Void, Errno> {
        lock.withLock {
            for d in devices.values {
                if let i = d.buffers.firstIndex(where: { $0.memory == address }) {
                    d.buffers[i].mapCount = max(0, d.buffers[i].mapCount - 1)
                    if d.ownerClosed && !d.buffers.contains(where: { $0.mapCount > 0 }) { releaseQueue(d) }
                    return .success(())
                }
                if let i = d.retired.firstIndex(where: { $0.memory == address }) {
                    d.retired[i].mapCount -= 1
                    if d.retired[i].mapCount <= 0 { d.retired.remove(at: i).memory.deallocate() }
                    return .success(())
                }
            }
            return .failure(.invalidArgument)
        }
    }

    public func poll(_ fd: Int32, events: PollEvents, timeoutMilliseconds: Int32) -> Result<PollEvents, Errno> {
        let deadline = timeoutMilliseconds < 0 ? UInt64.max : monotonicNanoseconds() &+ UInt64(timeoutMilliseconds) * 1_000_000
        return lock.withLock {
            while true {
                if interrupts > 0 { interrupts -= 1; return .failure(.interrupted) }
                guard let f = files[fd] else { return .success(.invalid) }
                // A descriptor of a device that was unplugged and plugged back: dead, as in Linux.
                guard let d = devices[f.path] else { return .success(f.path.hasSuffix(Self.unpluggedSuffix) ? [.error, .hangup] : .invalid) }
                if d.disconnected { return .success([.error, .hangup]) }
                var r: PollEvents = []
                if events.contains(.priority) && !f.events.isEmpty { r.insert(.priority) }
                if !d.streaming {
                    r.insert(.error)
                } else {
                    if d.done.isEmpty && autoProduceFlag && !d.queue.isEmpty { _ = produceLocked(d) }
                    if !d.done.isEmpty { r.insert(.input) }
                }
                if !r.isEmpty { return .success(r) }
                if timeoutMilliseconds == 0 || monotonicNanoseconds() >= deadline { return .success([]) }
                lock.wait(untilMonotonicNanoseconds: deadline)
            }
        }
    }

    public func listDirectory(_ path: String) -> [String] {
        lock.withLock {
            var names: Set<String> = []
            for d in devices.values {
                for p in [d.spec.path] + d.spec.links where p.hasPrefix(path + "/") {
                    let rest = p.dropFirst(path.count + 1)
                    names.insert(String(rest.split(separator: "/").first ?? rest))
                }
            }
            return names.sorted()
        }
    }

    public func resolveLink(_ path: String) -> String? {
        lock.withLock { devices.values.first(where: { $0.spec.links.contains(path) })?.spec.path }
    }

    public func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) -> Result<Int32, Errno> {
        lock.lock()
        defer { lock.unlock() }
        callCounts[request, default: 0] += 1
        if interrupts > 0 { interrupts -= 1; return .failure(.interrupted) }
        guard let f = files[fd] else { return .failure(.badFile) }
        // A descriptor opened before an unplug stays dead after the replug: `ENODEV`, as in Linux.
        guard let d = devices[f.path] else { return .failure(f.path.hasSuffix(Self.unpluggedSuffix) ? .noDevice : .badFile) }
        if d.disconnected { return .failure(.noDevice) }
        let call = Call(fd: fd, path: f.path, device: d, request: request, arg: arg)
        switch request {
        case VF_VIDIOC_QUERYCAP: return queryCapability(call)
        case VF_VIDIOC_ENUM_FMT: return enumerateFormat(call)
        case VF_VIDIOC_ENUM_FRAMESIZES: return enumerateFrameSize(call)
        case VF_VIDIOC_ENUM_FRAMEINTERVALS: return enumerateFrameInterval(call)
        case VF_VIDIOC_G_FMT, VF_VIDIOC_S_FMT, VF_VIDIOC_TRY_FMT: return format(call)
        case VF_VIDIOC_G_PARM, VF_VIDIOC_S_PARM: return streamParameters(call)
        case VF_VIDIOC_REQBUFS: return requestBuffers(call)
        case VF_VIDIOC_QUERYBUF, VF_VIDIOC_QBUF, VF_VIDIOC_DQBUF: return buffer(call)
        case VF_VIDIOC_STREAMON: return streamOn(call)
        case VF_VIDIOC_STREAMOFF: return streamOff(call)
        case VF_VIDIOC_QUERY_EXT_CTRL: return queryControl(call)
        case VF_VIDIOC_QUERYMENU: return queryMenu(call)
        case VF_VIDIOC_G_EXT_CTRLS, VF_VIDIOC_S_EXT_CTRLS, VF_VIDIOC_TRY_EXT_CTRLS: return extendedControls(call)
        case VF_VIDIOC_SUBSCRIBE_EVENT: return subscribeEvent(call)
        case VF_VIDIOC_DQEVENT: return dequeueEvent(call)
        default: return .failure(.notTTY)
        }
    }

    // MARK: ioctl requests (lock held)

    /// One ioctl in progress: the open file, its device, the request and its argument.
    private struct Call {
        var fd: Int32
        var path: String
        var device: Device
        var request: UInt
        var arg: UnsafeMutableRawPointer
        var isCapture: Bool { device.spec.deviceCaps & V4L2.capVideoCapture != 0 }
        /// Another open file, or another process, owns the device's queue.
        var ownedElsewhere: Bool { device.busy || (device.owner != nil && device.owner != fd) }
        func argument<T>(_ type: T.Type) -> UnsafeMutablePointer<T> { arg.assumingMemoryBound(to: T.self) }
    }

    private func queryCapability(_ call: Call) -> Result<Int32, Errno> {
        let c = call.argument(v4l2_capability.self), spec = call.device.spec
        c.pointee = v4l2_capability()
        setCString(&c.pointee.driver, spec.driver)
        setCString(&c.pointee.card, spec.card)
        setCString(&c.pointee.bus_info, spec.bus)
        c.pointee.version = 0x0006_0100
        c.pointee.device_caps = spec.deviceCaps
        c.pointee.capabilities = spec.deviceCaps | V4L2.capDeviceCaps
        return .success(0)
    }

    private func enumerateFormat(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_fmtdesc.self), formats = call.device.spec.formats
        let i = Int(p.pointee.index)
        guard call.isCapture, p.pointee.type == V4L2.bufTypeVideoCapture, i < formats.count else { return .failure(.invalidArgument) }
        p.pointee.pixelformat = formats[i].fourcc
        p.pointee.flags = formats[i].compressed ? V4L2.fmtFlagCompressed : 0
        setCString(&p.pointee.description, formats[i].description)
        return .success(0)
    }

    private func enumerateFrameSize(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_frmsizeenum.self)
        guard let fm = call.device.spec.formats.first(where: { $0.fourcc == p.pointee.pixel_format }),
              Int(p.pointee.index) < fm.sizes.count else { return .failure(.invalidArgument) }
        switch fm.sizes[Int(p.pointee.index)] {
        case .discrete(let w, let h):
            p.pointee.type = V4L2.frmsizeDiscrete
            p.pointee.discrete.width = UInt32(w); p.pointee.discrete.height = UInt32(h)
        case .stepwise(let a, let b, let sw, let c, let e, let sh):
            guard p.pointee.index == 0 else { return .failure(.invalidArgument) }
            p.pointee.type = V4L2.frmsizeStepwise
            p.pointee.stepwise = v4l2_frmsize_stepwise(min_width: UInt32(a), max_width: UInt32(b), step_width: UInt32(sw),
                                                       min_height: UInt32(c), max_height: UInt32(e), step_height: UInt32(sh))
        }
        return .success(0)
    }

    private func enumerateFrameInterval(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_frmivalenum.self)
        guard let fm = call.device.spec.formats.first(where: { $0.fourcc == p.pointee.pixel_format }),
              Int(p.pointee.index) < fm.intervals.count else { return .failure(.invalidArgument) }
        let iv = fm.intervals[Int(p.pointee.index)]
        p.pointee.type = V4L2.frmivalDiscrete
        p.pointee.discrete.numerator = iv.numerator
        p.pointee.discrete.denominator = iv.denominator
        return .success(0)
    }

    /// `G_FMT`, `S_FMT` and `TRY_FMT`: the nearest size the format offers.
    private func format(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_format.self), d = call.device
        guard call.isCapture, p.pointee.type == V4L2.bufTypeVideoCapture else { return .failure(.invalidArgument) }
        if call.request == VF_VIDIOC_G_FMT { p.pointee.fmt.pix = d.pix; return .success(0) }
        let chosen = choose(d, fourcc: p.pointee.fmt.pix.pixelformat, width: Int(p.pointee.fmt.pix.width), height: Int(p.pointee.fmt.pix.height))
        if call.request == VF_VIDIOC_S_FMT {
            if call.ownedElsewhere || !d.buffers.isEmpty { return .failure(.busy) }
            d.pix = chosen
        }
        p.pointee.fmt.pix = chosen
        return .success(0)
    }

    /// `G_PARM` and `S_PARM`: the frame interval nearest to the one asked for.
    private func streamParameters(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_streamparm.self), d = call.device
        guard call.isCapture, p.pointee.type == V4L2.bufTypeVideoCapture else { return .failure(.invalidArgument) }
        if call.request == VF_VIDIOC_S_PARM {
            if d.busy || (d.streaming && d.refuseIntervalWhileStreaming) { return .failure(.busy) }
            let tpf = p.pointee.parm.capture.timeperframe
            let want = FrameInterval(numerator: tpf.numerator, denominator: tpf.denominator)
            let options = d.spec.formats.first(where: { $0.fourcc == d.pix.pixelformat })?.intervals ?? [d.interval]
            if let best = options.min(by: { abs($0.fps - want.fps) < abs($1.fps - want.fps) }) {
                d.interval = best
                d.intervalChanges.append(best)
            }
        }
        p.pointee.parm.capture.capability = 0x1000 // V4L2_CAP_TIMEPERFRAME
        p.pointee.parm.capture.timeperframe.numerator = d.interval.numerator
        p.pointee.parm.capture.timeperframe.denominator = d.interval.denominator
        return .success(0)
    }

    private func requestBuffers(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_requestbuffers.self), d = call.device
        guard call.isCapture, p.pointee.type == V4L2.bufTypeVideoCapture, p.pointee.memory == V4L2.memoryMMAP else { return .failure(.invalidArgument) }
        if call.ownedElsewhere || d.streaming { return .failure(.busy) }
        // Since Linux 5.0 (V4L2_BUF_CAP_SUPPORTS_ORPHANED_BUFS) REQBUFS frees the queue even while
        // buffers are still mapped: the mappings stay valid ("orphaned") until unmapped.
        for b in d.buffers {
            if b.mapCount > 0 { d.retired.append(b) } else { b.memory.deallocate() }
        }
        d.buffers = []; d.queue = []; d.done = []
        if p.pointee.count == 0 { d.owner = nil; return .success(0) }
        let n = min(max(Int(p.pointee.count), 2), 32)
        let length = (Int(d.pix.sizeimage) + 4095) & ~4095
        for _ in 0..<n { d.buffers.append(Buffer(memory: .allocate(byteCount: length, alignment: 4096), length: length)) }
        d.owner = call.fd
        p.pointee.count = UInt32(n)
        return .success(0)
    }

    /// `QUERYBUF`, `QBUF` and `DQBUF`.
    private func buffer(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_buffer.self), d = call.device
        guard p.pointee.type == V4L2.bufTypeVideoCapture, p.pointee.memory == V4L2.memoryMMAP else { return .failure(.invalidArgument) }
        if d.owner != call.fd { return .failure(.busy) }
        if call.request == VF_VIDIOC_DQBUF {
            if d.done.isEmpty && autoProduceFlag && !d.queue.isEmpty { _ = produceLocked(d) }
            guard !d.done.isEmpty else { return .failure(d.streaming ? .wouldBlock : .invalidArgument) }
            let i = d.done.removeFirst()
            d.buffers[i].state = .dequeued
            fill(p, d.buffers[i], index: i, monotonic: d.spec.monotonicTimestamps)
            return .success(0)
        }
        let i = Int(p.pointee.index)
        guard i < d.buffers.count else { return .failure(.invalidArgument) }
        if call.request == VF_VIDIOC_QUERYBUF {
            fill(p, d.buffers[i], index: i, monotonic: d.spec.monotonicTimestamps)
            return .success(0)
        }
        guard d.buffers[i].state == .dequeued else { return .failure(.invalidArgument) }
        d.buffers[i].state = .queued
        d.queue.append(i)
        lock.broadcast()
        return .success(0)
    }

    private func streamOn(_ call: Call) -> Result<Int32, Errno> {
        let d = call.device
        if call.ownedElsewhere && d.owner != call.fd { return .failure(.busy) }
        if let e = d.streamOnError { return .failure(e) }
        guard d.owner == call.fd, !d.buffers.isEmpty else { return .failure(.invalidArgument) }
        if !d.streaming { d.streaming = true; d.sequence = 0; d.streamOnCount += 1 }
        lock.broadcast()
        return .success(0)
    }

    private func streamOff(_ call: Call) -> Result<Int32, Errno> {
        let d = call.device
        guard d.owner == call.fd else { return d.owner == nil ? .success(0) : .failure(.busy) }
        d.streaming = false
        for i in d.buffers.indices { d.buffers[i].state = .dequeued }
        d.queue = []; d.done = []
        return .success(0)
    }

    /// `QUERY_EXT_CTRL`, with `NEXT_CTRL` enumeration; a class control heads each class, as real
    /// drivers list them.
    private func queryControl(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_query_ext_ctrl.self), d = call.device
        let flags = V4L2.ctrlFlagNextCtrl | V4L2.ctrlFlagNextCompound
        let raw = p.pointee.id
        let id = raw & ~flags
        var all: [(UInt32, Control?)] = d.spec.controls.map { ($0.id, $0) }
        for cls in Set(d.spec.controls.map { $0.id & 0x0fff_0000 }) { all.append((cls | 1, nil)) }
        all.sort { $0.0 < $1.0 }
        let found = raw & flags != 0 ? all.first(where: { $0.0 > id }) : all.first(where: { $0.0 == id })
        guard let (cid, c) = found else { return .failure(.invalidArgument) }
        p.pointee = v4l2_query_ext_ctrl()
        p.pointee.id = cid
        guard let c else {
            p.pointee.type = V4L2.ctrlTypeClass
            setCString(&p.pointee.name, cid & 0x0fff_0000 == 0x0098_0000 ? "User Controls" : "Camera Controls")
            p.pointee.flags = 0x0001 | 0x0004 // disabled | read-only, as the kernel flags class controls
            return .success(0)
        }
        p.pointee.type = c.type.rawValue
        setCString(&p.pointee.name, c.name)
        p.pointee.minimum = c.minimum
        p.pointee.maximum = c.maximum
        p.pointee.step = UInt64(c.step)
        p.pointee.default_value = c.defaultValue
        p.pointee.flags = (c.readOnly ? V4L2.ctrlFlagReadOnly : 0) | (d.inactive.contains(cid) ? V4L2.ctrlFlagInactive : 0)
        p.pointee.elem_size = c.type == .integer64 ? 8 : 4
        p.pointee.elems = 1
        return .success(0)
    }

    private func queryMenu(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_querymenu.self)
        guard let c = call.device.spec.controls.first(where: { $0.id == p.pointee.id }), c.type == .menu,
              let name = c.menu[Int64(p.pointee.index)] else { return .failure(.invalidArgument) }
        setCString(&p.pointee.name, name)
        return .success(0)
    }

    /// `G_EXT_CTRLS`, `S_EXT_CTRLS` and `TRY_EXT_CTRLS`: all controls are validated first, then
    /// applied (the kernel applies all or none).
    private func extendedControls(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_ext_controls.self), d = call.device
        let n = Int(p.pointee.count)
        guard let list = p.pointee.controls else { return n == 0 ? .success(0) : .failure(.invalidArgument) }
        // Validate all first (the kernel applies all or none); no array is built, so a control
        // write allocates nothing (the Allocations benchmark counts the fake's mallocs too).
        for i in 0..<n {
            if case .failure(let e) = validate(list[i], on: d, writing: call.request != VF_VIDIOC_G_EXT_CTRLS) {
                p.pointee.error_idx = UInt32(i); return .failure(e)
            }
        }
        for i in 0..<n {
            guard case .success(let c) = validate(list[i], on: d, writing: false) else { continue }
            if call.request == VF_VIDIOC_G_EXT_CTRLS {
                let v = d.values[c.id] ?? c.defaultValue
                if c.type == .integer64 { list[i].value64 = v } else { list[i].value = Int32(truncatingIfNeeded: v) }
            } else if call.request == VF_VIDIOC_S_EXT_CTRLS {
                setControl(c, to: clamped(list[i], c), on: d, path: call.path)
            }
        }
        return .success(0)
    }

    /// The control `item` names, when it exists and (for a write) is writable with a valid menu item.
    private func validate(_ item: v4l2_ext_control, on d: Device, writing: Bool) -> Result<Control, Errno> {
        guard let c = d.spec.controls.first(where: { $0.id == item.id }) else { return .failure(.invalidArgument) }
        guard writing else { return .success(c) }
        if c.readOnly { return .failure(.permissionDenied) }
        let v = c.type == .integer64 ? item.value64 : Int64(item.value)
        if c.type == .menu && (v < c.minimum || v > c.maximum || c.menu[v] == nil) { return .failure(.invalidArgument) }
        return .success(c)
    }

    /// The value written, clamped to the range and rounded to the step as the kernel does.
    private func clamped(_ item: v4l2_ext_control, _ c: Control) -> Int64 {
        var v = c.type == .integer64 ? item.value64 : Int64(item.value)
        if c.type == .integer || c.type == .integer64 || c.type == .boolean {
            v = min(max(v, c.minimum), c.maximum)
            if c.step > 1 { v = c.minimum + ((v - c.minimum + c.step / 2) / c.step) * c.step }
        }
        return v
    }

    /// Stores a control's value, posts a value-change event, and makes the exposure time
    /// inactive under auto exposure, as UVC cameras do (posting a flags-change event).
    private func setControl(_ c: Control, to v: Int64, on d: Device, path: String) {
        if recordWrites { writes[path, default: []].append(ControlWrite(c.id, v)) }
        let old = d.values[c.id]
        d.values[c.id] = v
        if old != v {
            var e = v4l2_event()
            e.type = V4L2.eventCtrl
            e.id = c.id
            e.u.ctrl.changes = V4L2.eventCtrlChangeValue
            e.u.ctrl.value64 = v
            post(e, path: path, key: Self.key(V4L2.eventCtrl, c.id))
        }
        guard c.id == V4L2.cidExposureAuto else { return }
        let nowInactive = v != 1
        guard nowInactive != d.inactive.contains(V4L2.cidExposureAbsolute) else { return }
        if nowInactive { d.inactive.insert(V4L2.cidExposureAbsolute) } else { d.inactive.remove(V4L2.cidExposureAbsolute) }
        var e = v4l2_event()
        e.type = V4L2.eventCtrl
        e.id = V4L2.cidExposureAbsolute
        e.u.ctrl.changes = V4L2.eventCtrlChangeFlags
        e.u.ctrl.flags = nowInactive ? V4L2.ctrlFlagInactive : 0
        post(e, path: path, key: Self.key(V4L2.eventCtrl, V4L2.cidExposureAbsolute))
    }

    private func subscribeEvent(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_event_subscription.self)
        switch p.pointee.type {
        case V4L2.eventCtrl:
            guard call.device.spec.controls.contains(where: { $0.id == p.pointee.id }) else { return .failure(.invalidArgument) }
        case V4L2.eventSourceChange: break
        default: return .failure(.invalidArgument)
        }
        files[call.fd]!.subscriptions.insert(Self.key(p.pointee.type, p.pointee.type == V4L2.eventCtrl ? p.pointee.id : 0))
        return .success(0)
    }

    private func dequeueEvent(_ call: Call) -> Result<Int32, Errno> {
        let p = call.argument(v4l2_event.self)
        guard !files[call.fd]!.events.isEmpty else { return .failure(.noEntry) }
        p.pointee = files[call.fd]!.events.removeFirst()
        p.pointee.pending = UInt32(files[call.fd]!.events.count)
        return .success(0)
    }

    private func fill(_ p: UnsafeMutablePointer<v4l2_buffer>, _ b: Buffer, index: Int, monotonic: Bool) {
        p.pointee.index = UInt32(index)
        p.pointee.length = UInt32(b.length)
        p.pointee.m.offset = UInt32(index * 0x10_0000)
        p.pointee.bytesused = UInt32(b.bytesUsed)
        p.pointee.sequence = b.sequence
        p.pointee.field = V4L2.fieldNone
        p.pointee.timestamp.tv_sec = Int(b.timestamp / 1_000_000_000)
        p.pointee.timestamp.tv_usec = Int((b.timestamp % 1_000_000_000) / 1_000)
        var flags = (monotonic ? V4L2.bufFlagTimestampMonotonic : V4L2.bufFlagTimestampUnknown)
        if b.mapCount > 0 { flags |= V4L2.bufFlagMapped }
        if b.state == .queued { flags |= V4L2.bufFlagQueued }
        if b.state == .done { flags |= V4L2.bufFlagDone }
        if b.error { flags |= V4L2.bufFlagError }
        p.pointee.flags = flags
    }
}
