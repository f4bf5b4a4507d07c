import Viewfinder

/// The control values one frame is rendered with (device units, as V4L2 names them).
public struct SimControlValues: Sendable, Equatable {
    /// `auto_exposure`: 1 manual, 3 aperture priority (the sim's built-in auto-exposure).
    public var exposureAuto: Int64 = 1
    /// `exposure_time_absolute`, 100 µs units.
    public var exposureTime: Int64 = 100
    /// `gain`, 100 = unity.
    public var gain: Int64 = 100
    /// `focus_automatic_continuous`: 1 lets the sim's idealised autofocus drive the lens.
    public var focusAuto: Int64 = 0
    /// `focus_absolute`, 0...1000.
    public var focus: Int64 = 400
    /// `white_balance_automatic`: 1 = white balance matches the light's colour temperature.
    public var whiteBalanceAuto: Int64 = 1
    /// `white_balance_temperature`, K.
    public var whiteBalanceTemperature: Int64 = 5200
    /// `power_line_frequency`: 0 off, 1 50 Hz, 2 60 Hz, 3 auto.
    public var powerLineFrequency: Int64 = 0
    /// `brightness`, −64...64 luma offset.
    public var brightness: Int64 = 0
    /// `contrast`, percent, 0...200.
    public var contrast: Int64 = 100
    /// `saturation`, percent, 0...200.
    public var saturation: Int64 = 100

    public init() {}

    subscript(name: String) -> Int64? {
        get {
            switch name {
            case "auto_exposure": return exposureAuto
            case "exposure_time_absolute": return exposureTime
            case "gain": return gain
            case "focus_automatic_continuous": return focusAuto
            case "focus_absolute": return focus
            case "white_balance_automatic": return whiteBalanceAuto
            case "white_balance_temperature": return whiteBalanceTemperature
            case "power_line_frequency": return powerLineFrequency
            case "brightness": return brightness
            case "contrast": return contrast
            case "saturation": return saturation
            default: return nil
            }
        }
        set {
            guard let v = newValue else { return }
            switch name {
            case "auto_exposure": exposureAuto = v
            case "exposure_time_absolute": exposureTime = v
            case "gain": gain = v
            case "focus_automatic_continuous": focusAuto = v
            case "focus_absolute": focus = v
            case "white_balance_automatic": whiteBalanceAuto = v
            case "white_balance_temperature": whiteBalanceTemperature = v
            case "power_line_frequency": powerLineFrequency = v
            case "brightness": brightness = v
            case "contrast": contrast = v
            case "saturation": saturation = v
            default: break
            }
        }
    }
}

/// The sim camera's controls, with V4L2-like ranges, steps and defaults, and a fixed latency: a
/// `set` made after frame k was delivered takes effect on frame k + `latency` (the next frame to be
/// rendered if that one has already started). Before streaming starts, a `set` applies at once.
///
/// Thread-safe: the stage thread sets while the capture thread renders; all state is in a `LockedBox`.
public final class SimControls: DeviceControlling {
    public let controlLatencyFrames: Int
    private let deviceName: String

    private struct Pending { var applyAt: UInt64; var name: String; var value: Int64 }
    private struct State {
        /// What `value(of:)` reports: the last value set (or chosen by the built-in loops).
        var requested = SimControlValues()
        /// What the next frame is rendered with.
        var applied = SimControlValues()
        var pending: [Pending] = []
        var streaming = false
        /// Sequence of the last frame handed out, or nil before the first.
        var lastDelivered: UInt64? = nil
        /// A frame whose values were taken and which is not yet handed out (being rendered).
        var rendering = false
    }
    private let state: LockedBox<State>

    static let cid: [String: UInt32] = [
        "auto_exposure": 0x009a_0901, "exposure_time_absolute": 0x009a_0902, "focus_absolute": 0x009a_090a,
        "focus_automatic_continuous": 0x009a_090c, "gain": 0x0098_0913, "white_balance_automatic": 0x0098_090c,
        "white_balance_temperature": 0x0098_091a, "power_line_frequency": 0x0098_0918, "brightness": 0x0098_0900,
        "contrast": 0x0098_0901, "saturation": 0x0098_0902,
    ]

    /// Descriptors with their defaults (flags are filled in by ``descriptors``).
    static func baseDescriptors(defaults d: SimControlValues) -> [ControlDescriptor] {
        func c(_ name: String, _ kind: ControlKind, _ lo: Int64, _ hi: Int64, _ step: Int64, _ def: Int64, _ std: StandardControl, menu: [Int64: String] = [:]) -> ControlDescriptor {
            ControlDescriptor(id: cid[name]!, name: name, kind: kind, minimum: lo, maximum: hi, step: step, defaultValue: def, menu: menu, standard: std)
        }
        return [
            c("auto_exposure", .menu, 1, 3, 1, d.exposureAuto, .exposureAuto, menu: [1: "Manual Mode", 3: "Aperture Priority Mode"]),
            c("exposure_time_absolute", .integer, 1, 10000, 1, d.exposureTime, .exposureTime),
            c("gain", .integer, 100, 1600, 1, d.gain, .gain),
            c("focus_automatic_continuous", .boolean, 0, 1, 1, d.focusAuto, .focusAuto),
            c("focus_absolute", .integer, 0, 1000, 1, d.focus, .focusAbsolute),
            c("white_balance_automatic", .boolean, 0, 1, 1, d.whiteBalanceAuto, .whiteBalanceAuto),
            c("white_balance_temperature", .integer, 2800, 6500, 10, d.whiteBalanceTemperature, .whiteBalanceTemperature),
            c("power_line_frequency", .menu, 0, 3, 1, d.powerLineFrequency, .powerLineFrequency, menu: [0: "Disabled", 1: "50 Hz", 2: "60 Hz", 3: "Auto"]),
            c("brightness", .integer, -64, 64, 1, d.brightness, .brightness),
            c("contrast", .integer, 0, 200, 1, d.contrast, .contrast),
            c("saturation", .integer, 0, 200, 1, d.saturation, .saturation),
        ]
    }

    private let base: [ControlDescriptor]

    /// Whether a `set` made during a render waits for it (``schedule(_:_:internal:)``): on a
    /// live (paced) sim, whose capture thread sleeps between frames. An unpaced sim renders back
    /// to back, and a setter waiting for a gap could wait many frames.
    private let setsWaitForRender: Bool

    public init(defaults: SimControlValues, latency: Int, deviceName: String = "sim", setsWaitForRender: Bool = false) {
        controlLatencyFrames = max(1, latency)
        self.setsWaitForRender = setsWaitForRender
        self.deviceName = deviceName
        base = SimControls.baseDescriptors(defaults: defaults)
        variants = (0..<8).map { SimControls.flagged(SimControls.baseDescriptors(defaults: defaults), mask: $0) }
        var s = State()
        s.requested = defaults
        s.applied = defaults
        s.pending.reserveCapacity(64)
        state = LockedBox(s)
    }

    /// The descriptors with their `inactive` flags, for each combination of the three automatic
    /// modes (bit 0 auto exposure, bit 1 autofocus, bit 2 auto white balance), built once so that
    /// reading them per frame allocates nothing.
    private let variants: [[ControlDescriptor]]

    static func flagged(_ base: [ControlDescriptor], mask: Int) -> [ControlDescriptor] {
        base.map { d in
            var d = d
            switch d.name {
            case "exposure_time_absolute", "gain": if mask & 1 != 0 { d.flags = ["inactive"] }
            case "focus_absolute": if mask & 2 != 0 { d.flags = ["inactive"] }
            case "white_balance_temperature": if mask & 4 != 0 { d.flags = ["inactive"] }
            default: break
            }
            return d
        }
    }

    public var descriptors: [ControlDescriptor] {
        let v = state.withLock { $0.requested }
        let mask = (v.exposureAuto == 3 ? 1 : 0) | (v.focusAuto == 1 ? 2 : 0) | (v.whiteBalanceAuto == 1 ? 4 : 0)
        return variants[mask]
    }

    public func value(of name: String) throws -> Int64 {
        guard let v = state.withLock({ $0.requested[name] }) else {
            throw DeviceError.unknownControl(device: deviceName, control: name, known: base.map(\.name))
        }
        return v
    }

    public func set(_ name: String, to value: Int64) throws {
        _ = try setReportingTime(name, to: value)
    }

    /// Checks and queues a change and returns the moment it was queued: read under the lock
    /// that the sim stamps each frame's receive time under (as it hands the frame out),
    /// so a frame received before it is one the change counts from (or from a later one), and a
    /// frame received after it is not.
    public func setReportingTime(_ name: String, to value: Int64) throws -> UInt64? {
        guard let d = base.first(where: { $0.name == name }) else {
            throw DeviceError.unknownControl(device: deviceName, control: name, known: base.map(\.name))
        }
        let inMenu = d.kind != .menu || d.menu[value] != nil
        guard d.range.contains(value), (value - d.minimum) % max(d.step, 1) == 0, inMenu else {
            throw DeviceError.controlOutOfRange(device: deviceName, control: name, value: Double(value), range: Double(d.minimum)...Double(d.maximum))
        }
        return schedule(name, value, internal: false)
    }

    /// Queues a change: applies on frame `lastDelivered + latency` (at once before streaming).
    ///
    /// A `set` made while a frame is being rendered (its values already taken) waits until that
    /// frame is handed out, and then counts from it: else the change would count from the frame
    /// before, miss the frame in hand and show one frame late, while a caller counting from the
    /// frames it had received saw the frame before as the newest (a late capture thread made
    /// the bench read latency 2 for 1). The wait is at most one frame's render; only a live sim
    /// waits (`setsWaitForRender`). The sim's own auto exposure (`internal`) schedules from
    /// inside the render and does not wait.
    ///
    /// Returns when the change was queued (CLOCK_MONOTONIC ns, read under the lock).
    @discardableResult
    func schedule(_ name: String, _ value: Int64, internal: Bool) -> UInt64 {
        let latency = UInt64(controlLatencyFrames)
        let waits = !`internal`
        while true {
            let queued = state.withLock { s -> UInt64? in
                if waits && s.streaming && s.rendering { return nil }
                s.requested[name] = value
                if !s.streaming { s.applied[name] = value; return monotonicNanoseconds() }
                let at = s.lastDelivered.map { $0 &+ latency } ?? (latency &- 1)
                s.pending.append(Pending(applyAt: at, name: name, value: value))
                return monotonicNanoseconds()
            }
            if let queued { return queued }
            sleepUntil(monotonicNanoseconds: monotonicNanoseconds() &+ 100_000)
        }
    }

    /// Applies every change due at or before frame `sequence` and returns the values to render it with.
    func values(forFrame sequence: UInt64) -> SimControlValues {
        state.withLock { s in
            if !s.pending.isEmpty {
                // Stable order: changes due now are applied in the order they were made.
                var keep = 0
                for i in s.pending.indices {
                    let p = s.pending[i]
                    if p.applyAt <= sequence { s.applied[p.name] = p.value }
                    else { s.pending[keep] = p; keep += 1 }
                }
                s.pending.removeLast(s.pending.count - keep)
            }
            s.rendering = setsWaitForRender
            return s.applied
        }
    }

    /// Records that frame `sequence` was handed out and returns when (CLOCK_MONOTONIC ns), read
    /// under the same lock as a `set`: a set that saw frame k as the last delivered one took the
    /// lock before frame k + 1's time, and one that saw k + 1 after it. The frame's receive time
    /// is this moment, so a bench counting a step's latency from the newest frame received before
    /// the set counts from the frame the sim counted from, however late the capture thread runs.
    /// The bench takes the moment of the set from ``setReportingTime(_:to:)`` (read under this
    /// lock too), not from its own clock after `set` returns: a setter paused between the lock
    /// and such a reading would count from a later frame and read one frame short.
    func delivered(_ sequence: UInt64) -> UInt64 {
        state.withLock { s in
            s.lastDelivered = sequence
            s.rendering = false
            return monotonicNanoseconds()
        }
    }

    /// Records that the frame being rendered was not handed out (its render failed).
    func abandoned() { state.withLock { $0.rendering = false } }

    func streamStarted() { state.withLock { s in s.streaming = true; s.lastDelivered = nil } }

    func streamStopped() {
        state.withLock { s in
            for p in s.pending { s.applied[p.name] = p.value }
            s.pending.removeAll(keepingCapacity: true)
            s.streaming = false
            s.rendering = false
        }
    }
}
