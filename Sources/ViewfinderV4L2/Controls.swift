import CV4L2
import Viewfinder
import Logging

/// A V4L2 device's controls: enumerated with `VIDIOC_QUERY_EXT_CTRL`, read and written with
/// `G_EXT_CTRLS`/`S_EXT_CTRLS`. Thread-safe (stages set controls while the capture thread streams).
public final class V4L2Controls: DeviceControlling, @unchecked Sendable {
    // @unchecked Sendable: all mutable state (`handle`, `table`) lives in `state`, a mutex-guarded box;
    // the ioctls themselves are thread-safe in the kernel.
    private struct State {
        var handle: V4L2Handle?
        var table: [KernelControl] { didSet { fast = State.fastTable(table) } }
        /// What writing each standard integer control needs, by `StandardControl.index`: plain
        /// values, so the capture thread's writes copy no strings or collections.
        var fast: [FastControl?]
        init(handle: V4L2Handle?, table: [KernelControl]) {
            self.handle = handle
            self.table = table
            self.fast = State.fastTable(table)
        }
        static func fastTable(_ table: [KernelControl]) -> [FastControl?] {
            var f = [FastControl?](repeating: nil, count: StandardControl.allCases.count)
            for c in table {
                guard let std = c.descriptor.standard else { continue }
                let d = c.descriptor
                guard d.kind == .integer || d.kind == .integer64 || d.kind == .boolean else { continue }
                f[std.index] = FastControl(id: d.id, type: c.type, rawFlags: c.rawFlags, minimum: d.minimum, maximum: d.maximum, step: d.step)
            }
            return f
        }
    }
    /// A standard integer control, as the allocation-free write path needs it.
    struct FastControl {
        var id: UInt32
        var type: UInt32
        var rawFlags: UInt32
        var minimum: Int64
        var maximum: Int64
        var step: Int64
    }
    private let state: LockedBox<State>
    public let device: String
    public let controlLatencyFrames: Int
    private let logger: Logger

    init(device: String, handle: V4L2Handle, controls: [KernelControl], latencyFrames: Int = 3, logger: Logger) {
        self.device = device
        self.state = LockedBox(State(handle: handle, table: controls))
        self.controlLatencyFrames = latencyFrames
        self.logger = logger
    }

    /// Points the controls at a new file descriptor (after a reopen), or at none (closed).
    func rebind(_ handle: V4L2Handle?) { state.withLock { $0.handle = handle } }

    public var descriptors: [ControlDescriptor] { state.withLock { $0.table.map(\.descriptor) } }

    private func lookup(_ name: String) throws -> (KernelControl, V4L2Handle) {
        let (found, handle, known) = state.withLock { s -> (KernelControl?, V4L2Handle?, [String]) in
            let c = s.table.first(where: { $0.descriptor.name == name || $0.descriptor.standard?.rawValue == name })
            return (c, s.handle, c == nil ? s.table.map(\.descriptor.name) : [])
        }
        guard let found else { throw DeviceError.unknownControl(device: device, control: name, known: known) }
        guard let handle else { throw DeviceError.notRunning(device: device) }
        return (found, handle)
    }

    public func value(of name: String) throws -> Int64 {
        let (c, h) = try lookup(name)
        if c.rawFlags & V4L2.ctrlFlagWriteOnly != 0 || c.type == V4L2.ctrlTypeButton {
            throw DeviceError.io(device: device, operation: "read control '\(name)'", errno: Errno.permissionDenied.rawValue, message: "the control is write-only")
        }
        switch getValue(c, h) {
        case .success(let v): return v
        case .failure(let e): throw error(e, control: c, operation: "VIDIOC_G_EXT_CTRLS", value: nil)
        }
    }

    public func set(_ name: String, to value: Int64) throws {
        let (c, h) = try lookup(name)
        let d = c.descriptor
        if c.rawFlags & V4L2.ctrlFlagReadOnly != 0 {
            throw DeviceError.io(device: device, operation: "set control '\(d.name)'", errno: Errno.permissionDenied.rawValue, message: "the control is read-only")
        }
        if d.kind == .integer || d.kind == .integer64 || d.kind == .boolean || d.kind == .menu || d.kind == .integerMenu {
            let inRange = value >= d.minimum && value <= d.maximum
            let onStep = d.step <= 1 || (value - d.minimum) % d.step == 0
            let validItem = (d.kind != .menu && d.kind != .integerMenu) || d.menu.isEmpty || d.menu[value] != nil
            if !inRange || !onStep || !validItem {
                throw DeviceError.controlOutOfRange(device: device, control: d.name, value: Double(value),
                                                    range: Double(d.minimum)...Double(max(d.minimum, d.maximum)))
            }
        }
        if case .failure(let e) = setValue(c, h, value) {
            throw error(e, control: c, operation: "VIDIOC_S_EXT_CTRLS", value: value)
        }
    }

    /// Writes a standard control by its meaning, without building the descriptor list (the
    /// capture side calls this between frames for the stages' queued requests).
    public func set(_ standard: StandardControl, to value: Int64) throws {
        let (found, handle) = state.withLock { s in (s.fast[standard.index], s.handle) }
        guard let c = found, let handle, c.rawFlags & V4L2.ctrlFlagReadOnly == 0,
              value >= c.minimum, value <= c.maximum, c.step <= 1 || (value - c.minimum) % c.step == 0 else {
            // Menus, unknown or read-only controls, bad values: the general path (and its errors).
            try set(standard.rawValue, to: value)
            return
        }
        if case .failure(let e) = setValue(id: c.id, type: c.type, handle, value) {
            let kc = state.withLock { s in s.table.first(where: { $0.descriptor.id == c.id }) }
            if let kc { throw error(e, control: kc, operation: "VIDIOC_S_EXT_CTRLS", value: value) }
            throw DeviceError.io(device: device, operation: "VIDIOC_S_EXT_CTRLS '\(standard.rawValue)'", errno: e.rawValue, message: e.message)
        }
    }

    private func error(_ e: Errno, control c: KernelControl, operation: String, value: Int64?) -> DeviceError {
        let d = c.descriptor
        switch e {
        case .outOfRange:
            return .controlOutOfRange(device: device, control: d.name, value: Double(value ?? 0), range: Double(d.minimum)...Double(max(d.minimum, d.maximum)))
        case .invalidArgument where value != nil && (d.kind == .menu || d.kind == .integerMenu):
            return .controlOutOfRange(device: device, control: d.name, value: Double(value ?? 0), range: Double(d.minimum)...Double(max(d.minimum, d.maximum)))
        case .invalidArgument:
            return .unknownControl(device: device, control: d.name, known: descriptors.map(\.name))
        case .busy:
            return .io(device: device, operation: "\(operation) '\(d.name)'", errno: e.rawValue, message: "the control is busy (grabbed while streaming)")
        case .permissionDenied:
            return .io(device: device, operation: "\(operation) '\(d.name)'", errno: e.rawValue, message: "the control is read-only or inactive now")
        case _ where e.meansDisconnected:
            return .disconnected(device: device)
        default:
            return .io(device: device, operation: "\(operation) '\(d.name)'", errno: e.rawValue, message: e.message)
        }
    }

    private func getValue(_ c: KernelControl, _ h: V4L2Handle) -> Result<Int64, Errno> {
        var ctrl = v4l2_ext_control()
        ctrl.id = c.descriptor.id
        var r: Result<Void, Errno> = .success(())
        withUnsafeMutablePointer(to: &ctrl) { p in
            var list = v4l2_ext_controls()
            list.which = V4L2.ctrlWhichCurVal
            list.count = 1
            list.controls = p
            r = h.ioctl(VF_VIDIOC_G_EXT_CTRLS, &list)
        }
        return r.map { c.type == V4L2.ctrlTypeInteger64 ? ctrl.value64 : Int64(ctrl.value) }
    }

    private func setValue(_ c: KernelControl, _ h: V4L2Handle, _ value: Int64) -> Result<Void, Errno> {
        setValue(id: c.descriptor.id, type: c.type, h, value)
    }

    private func setValue(id: UInt32, type: UInt32, _ h: V4L2Handle, _ value: Int64) -> Result<Void, Errno> {
        var ctrl = v4l2_ext_control()
        ctrl.id = id
        if type == V4L2.ctrlTypeInteger64 { ctrl.value64 = value } else { ctrl.value = Int32(truncatingIfNeeded: value) }
        var r: Result<Void, Errno> = .success(())
        withUnsafeMutablePointer(to: &ctrl) { p in
            var list = v4l2_ext_controls()
            list.which = V4L2.ctrlWhichCurVal
            list.count = 1
            list.controls = p
            r = h.ioctl(VF_VIDIOC_S_EXT_CTRLS, &list)
        }
        return r
    }

    /// Subscribes to change events of the standard controls (so range/flag changes such as
    /// "exposure time became inactive because auto exposure is on" reach ``descriptors``). Only
    /// those: drivers such as vivid change other controls on every frame.
    func subscribeEvents() -> Int {
        let (h, ids) = state.withLock { ($0.handle, $0.table.filter { $0.descriptor.standard != nil }.map(\.descriptor.id)) }
        guard let h else { return 0 }
        var n = 0
        for id in ids { if case .success = h.subscribe(type: V4L2.eventCtrl, id: id) { n += 1 } }
        return n
    }

    /// Applies a control event from the device.
    func apply(_ ev: v4l2_event) {
        let id = ev.id
        let changes = ev.u.ctrl.changes
        let flags = ev.u.ctrl.flags
        let min = Int64(ev.u.ctrl.minimum), max = Int64(ev.u.ctrl.maximum), step = Int64(ev.u.ctrl.step), def = Int64(ev.u.ctrl.default_value)
        state.withLock { s in
            guard let i = s.table.firstIndex(where: { $0.descriptor.id == id }) else { return }
            if changes & V4L2.eventCtrlChangeFlags != 0 {
                s.table[i].rawFlags = flags
                s.table[i].descriptor.flags = V4L2Enumerator.flagNames(flags)
            }
            if changes & V4L2.eventCtrlChangeRange != 0 {
                s.table[i].descriptor.minimum = min
                s.table[i].descriptor.maximum = max
                s.table[i].descriptor.step = step
                s.table[i].descriptor.defaultValue = def
            }
        }
    }
}
